//! The signal each source and detail-type carries: the detail read, checked and
//! turned into a [`Signal`], each bad field named.

use serde::Deserialize;
use serde_json::Value;

use super::detail::*;
use super::{
    instance_id, instance_of, non_empty, typed, EventError, EventKind, LaunchError, LaunchFailure, LifecycleAction,
    Signal, TEST_NOTIFICATION,
};

/// What Parameter Store says of a change to a parameter (fields as AWS sends them).
#[derive(Debug, Deserialize)]
struct ParameterChangeDetail {
    name: String,
    operation: String,
}

fn object_detail(detail: Value) -> Result<Value, EventError> {
    match detail {
        Value::Object(_) => Ok(detail),
        Value::Null => Err(EventError::field("detail", "is required")),
        other => Err(EventError::field("detail", format!("expected an object, found {}", json_kind(&other)))),
    }
}

pub(super) fn signal_for(
    source: &str,
    detail_type: &str,
    detail: Value,
    resources: &[String],
) -> Result<Signal, EventError> {
    let signal = match EventKind::of(source, detail_type) {
        Some(EventKind::SpotInterruptionWarning) => {
            let d: SpotInterruptionDetail = typed(object_detail(detail)?, "detail")?;
            let instance_id = instance_id(d.instance_id, "detail.instance-id")?;
            if let Some(arn) = resources.iter().find(|r| r.contains(":instance/")) {
                if !arn.ends_with(&format!("/{instance_id}")) {
                    return Err(EventError::field(
                        "resources",
                        format!("names `{arn}`, which is not instance `{instance_id}` of the detail"),
                    ));
                }
            }
            Signal::SpotInterruption { instance_id, action: d.instance_action }
        }
        Some(EventKind::RebalanceRecommendation) => {
            let d: RebalanceDetail = typed(object_detail(detail)?, "detail")?;
            Signal::RebalanceRecommendation { instance_id: instance_id(d.instance_id, "detail.instance-id")? }
        }
        Some(EventKind::InstanceStateChange) => {
            let d: StateChangeDetail = typed(object_detail(detail)?, "detail")?;
            Signal::InstanceStateChange {
                instance_id: instance_id(d.instance_id, "detail.instance-id")?,
                state: d.state,
            }
        }
        Some(EventKind::LaunchUnsuccessful) => {
            let d: LaunchActivityDetail = typed(object_detail(detail)?, "detail")?;
            if d.status_code != "Failed" && d.status_code != "Cancelled" {
                return Err(EventError::field(
                    "detail.StatusCode",
                    format!("`{}` is not the status of an unsuccessful launch (Failed, Cancelled)", d.status_code),
                ));
            }
            let error = LaunchError::classify(&d.status_message, &d.cause);
            let _ = d.ec2_instance_id;
            Signal::LaunchUnsuccessful(LaunchFailure {
                asg: non_empty(d.auto_scaling_group_name, "detail.AutoScalingGroupName")?,
                activity_id: non_empty(d.activity_id, "detail.ActivityId")?,
                availability_zone: d.details.availability_zone,
                subnet_id: d.details.subnet_id,
                status_message: d.status_message,
                cause: d.cause,
                error,
                at: d.end_time.or(d.start_time),
            })
        }
        Some(EventKind::LaunchSuccessful) => {
            let d: LaunchActivityDetail = typed(object_detail(detail)?, "detail")?;
            if d.status_code == "Failed" || d.status_code == "Cancelled" {
                return Err(EventError::field(
                    "detail.StatusCode",
                    format!("`{}` is the status of an unsuccessful launch", d.status_code),
                ));
            }
            Signal::LaunchSuccessful {
                asg: non_empty(d.auto_scaling_group_name, "detail.AutoScalingGroupName")?,
                instance_id: instance_id(d.ec2_instance_id, "detail.EC2InstanceId")?,
                started: d.start_time.ok_or_else(|| {
                    EventError::field("detail.StartTime", "missing: the launch cannot be timed without it")
                })?,
            }
        }
        Some(EventKind::TerminateLifecycleAction) => {
            let detail = object_detail(detail)?;
            // Auto Scaling sends a test notification when a hook is created: no action to
            // complete, nothing to dead-letter.
            let test = ["Event", "LifecycleTransition"]
                .iter()
                .any(|k| detail.get(k).and_then(Value::as_str) == Some(TEST_NOTIFICATION));
            if test {
                let asg = detail.get("AutoScalingGroupName").and_then(Value::as_str).unwrap_or("(unnamed)");
                return Ok(Signal::Ignored {
                    why: format!("{TEST_NOTIFICATION} for ASG {asg}: Auto Scaling's test of a new hook"),
                    warning: false,
                });
            }
            let d: LifecycleActionDetail = typed(detail, "detail")?;
            if d.lifecycle_transition != "autoscaling:EC2_INSTANCE_TERMINATING" {
                return Err(EventError::field(
                    "detail.LifecycleTransition",
                    format!("`{}` is not autoscaling:EC2_INSTANCE_TERMINATING", d.lifecycle_transition),
                ));
            }
            let _ = d.notification_metadata;
            Signal::TerminateLifecycleAction(LifecycleAction {
                asg: non_empty(d.auto_scaling_group_name, "detail.AutoScalingGroupName")?,
                hook: non_empty(d.lifecycle_hook_name, "detail.LifecycleHookName")?,
                token: non_empty(d.lifecycle_action_token, "detail.LifecycleActionToken")?,
                instance_id: instance_id(d.ec2_instance_id, "detail.EC2InstanceId")?,
            })
        }
        Some(EventKind::HealthEvent) => {
            // The category first: Health sends many kinds of events, most not ours.
            let detail = object_detail(detail)?;
            let category = detail.get("eventTypeCategory").and_then(Value::as_str).unwrap_or_default();
            if category != "scheduledChange" {
                return Ok(Signal::Ignored {
                    why: format!("AWS Health event of category `{category}`: Ballast acts on scheduledChange only"),
                    warning: false,
                });
            }
            let d: HealthDetail = typed(detail, "detail")?;
            if d.service != "EC2" {
                return Ok(Signal::Ignored {
                    why: format!("AWS Health event for service `{}`, not EC2", d.service),
                    warning: false,
                });
            }
            if d.status_code.as_deref() == Some("closed") {
                return Ok(Signal::Ignored {
                    why: format!("AWS Health {} is closed: nothing to replace", d.event_type_code),
                    warning: false,
                });
            }
            let mut instance_ids: Vec<String> = Vec::new();
            // AWS names the instance by id or by ARN (its own EC2 retirement sample has only
            // the ARN, and no `resources`), in the entities, in `resources`, or both.
            let entities = d
                .affected_entities
                .into_iter()
                .enumerate()
                .map(|(i, e)| (e.entity_value, format!("detail.affectedEntities[{i}].entityValue")));
            let named = resources.iter().enumerate().map(|(i, r)| (r.clone(), format!("resources[{i}]")));
            for (value, field) in entities.chain(named) {
                // Health also names what is not an instance (volumes, dedicated hosts).
                if let Some(id) = instance_of(&value) {
                    let id = instance_id(id.to_string(), &field)?;
                    if !instance_ids.contains(&id) {
                        instance_ids.push(id);
                    }
                }
            }
            if instance_ids.is_empty() {
                // An EC2 change to come that Ballast cannot tie to an instance may still take
                // pool nodes (a dedicated host's): the operator hears of it.
                return Ok(Signal::Ignored {
                    why: format!(
                        "AWS Health {} names no EC2 instance (dedicated hosts or other resources): \
                         check whether it takes pool nodes",
                        d.event_type_code
                    ),
                    warning: true,
                });
            }
            Signal::ScheduledChange {
                event_type_code: d.event_type_code,
                start_time: d.start_time,
                end_time: d.end_time,
                instance_ids,
            }
        }
        Some(EventKind::ScheduledEvent) => match detail {
            Value::Null => Signal::Reconcile,
            Value::Object(ref m) if m.is_empty() => Signal::Reconcile,
            other => schedule_signal(typed(object_detail(other)?, "detail")?)?,
        },
        Some(EventKind::ParameterStoreChange) => {
            let d: ParameterChangeDetail = typed(object_detail(detail)?, "detail")?;
            Signal::ConfigChanged {
                parameter: non_empty(d.name, "detail.name")?,
                operation: non_empty(d.operation, "detail.operation")?,
            }
        }
        Some(EventKind::PoolDemandChanged) => {
            let d: PoolDemandDetail = typed(object_detail(detail)?, "detail")?;
            non_empty(d.pool.clone(), "detail.pool")?;
            crate::shape::check_report(&d.shapes).map_err(|e| EventError::field("detail.shapes", e.to_string()))?;
            Signal::PoolDemand(d)
        }
        Some(EventKind::PodsUnschedulable) => {
            let d: PodsUnschedulableDetail = typed(object_detail(detail)?, "detail")?;
            non_empty(d.pool.clone(), "detail.pool")?;
            Signal::PodsUnschedulable(d)
        }
        Some(EventKind::NodeLifecycle) => {
            let d: NodeLifecycleDetail = typed(object_detail(detail)?, "detail")?;
            non_empty(d.pool.clone(), "detail.pool")?;
            instance_id(d.instance_id.clone(), "detail.instance_id")?;
            Signal::NodeLifecycle(d)
        }
        Some(EventKind::PoolWaitsMeasured) => {
            let d: PoolWaitsDetail = typed(object_detail(detail)?, "detail")?;
            non_empty(d.pool.clone(), "detail.pool")?;
            d.check()?;
            Signal::PoolWaits(d)
        }
        None => {
            return Err(EventError::Unknown { event_source: source.to_string(), detail_type: detail_type.to_string() });
        }
    };
    Ok(signal)
}

pub(super) fn schedule_signal(input: ScheduleInput) -> Result<Signal, EventError> {
    Ok(match input {
        ScheduleInput::Reconcile {} => Signal::Reconcile,
        ScheduleInput::Headroom { pool, percent, duration } => {
            if duration.0.is_zero() {
                return Err(EventError::field("detail.for", "must be longer than zero"));
            }
            Signal::HeadroomOverride { pool: non_empty(pool, "detail.pool")?, percent, duration }
        }
    })
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
