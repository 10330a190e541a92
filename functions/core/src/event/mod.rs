//! Every event Ballast accepts, parsed into a domain [`Signal`]. Bad input becomes an
//! [`EventError`] naming the field and the reason; nothing here panics.

mod detail;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::units::HumanDuration;
use detail::*;
pub use detail::{
    CapacityType, InstanceAction, InstanceState, NodeCondition, NodeLifecycleDetail, PodsUnschedulableDetail,
    PoolDemandDetail, PoolWaitsDetail, WaitBucket, WAIT_BUCKETS_SECONDS,
};

/// The deployment's own account and region: events from elsewhere are rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `None` checks the region only (the config may leave the account out).
    pub account: Option<String>,
    pub region: String,
}

/// One accepted event: its envelope identity and what it means for Ballast.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub id: String,
    pub time: DateTime<Utc>,
    pub source: String,
    pub detail_type: String,
    pub signal: Signal,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Signal {
    SpotInterruption {
        instance_id: String,
        action: InstanceAction,
    },
    RebalanceRecommendation {
        instance_id: String,
    },
    InstanceStateChange {
        instance_id: String,
        state: InstanceState,
    },
    LaunchUnsuccessful(LaunchFailure),
    /// An instance the ASG launched: when the launch started, to time the pool's lead
    /// from launch to Ready.
    LaunchSuccessful {
        asg: String,
        instance_id: String,
        started: DateTime<Utc>,
    },
    TerminateLifecycleAction(LifecycleAction),
    ScheduledChange {
        event_type_code: String,
        start_time: Option<DateTime<Utc>>,
        end_time: Option<DateTime<Utc>>,
        instance_ids: Vec<String>,
    },
    Reconcile,
    HeadroomOverride {
        pool: String,
        percent: u32,
        duration: HumanDuration,
    },
    PoolDemand(PoolDemandDetail),
    PodsUnschedulable(PodsUnschedulableDetail),
    NodeLifecycle(NodeLifecycleDetail),
    PoolWaits(PoolWaitsDetail),
    /// The config's SSM parameter was written (its own `Parameter Store Change` event):
    /// the functions read it again; no pool is reconciled for it.
    ConfigChanged {
        parameter: String,
        operation: String,
    },
    /// A valid event that is not Ballast's to act on (a closed Health event, one that
    /// names only dedicated hosts): noted, never dead-lettered.
    Ignored {
        why: String,
        /// Worth an operator's look (logged as a warning), not routine.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        warning: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaunchFailure {
    pub asg: String,
    pub activity_id: String,
    pub availability_zone: Option<String>,
    pub subnet_id: Option<String>,
    pub status_message: String,
    pub cause: String,
    pub error: LaunchError,
    pub at: Option<DateTime<Utc>>,
}

/// What kind of launch failure: only capacity errors justify a fallback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "class", content = "code", rename_all = "snake_case")]
pub enum LaunchError {
    Capacity(CapacityError),
    /// Quota, launch template, IAM, ...: reported, never a reason to fall back.
    Other(Option<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CapacityError {
    InsufficientInstanceCapacity,
    NoSpotCapacity,
    CapacityNotAvailable,
    MaxSpotInstanceCountExceeded,
    SpotMaxPriceTooLow,
    UnfulfillableCapacity,
}

impl LaunchError {
    /// Classifies from the status message and cause, the only places AWS names it:
    /// by error code (mixed-instances ASGs quote it) or by AWS's plain wording, which
    /// ASGs without a mixed-instances policy send with no code at all. A quota error
    /// (vCPU or instance limit) is never capacity, whatever else it says.
    pub fn classify(status_message: &str, cause: &str) -> LaunchError {
        let text = format!("{status_message}\n{cause}");
        let lower = text.to_ascii_lowercase();
        let quota = ["vcpulimitexceeded", "instancelimitexceeded", "vcpu limit", "your quota allows", "instance limit"];
        if quota.iter().any(|q| lower.contains(q)) {
            return LaunchError::Other(error_code(&text));
        }
        let capacity = [
            ("maxspotinstancecountexceeded", CapacityError::MaxSpotInstanceCountExceeded),
            ("max spot instance count exceeded", CapacityError::MaxSpotInstanceCountExceeded),
            ("spotmaxpricetoolow", CapacityError::SpotMaxPriceTooLow),
            ("lower than the minimum required spot request fulfillment price", CapacityError::SpotMaxPriceTooLow),
            ("no spot capacity", CapacityError::NoSpotCapacity),
            ("capacity-not-available", CapacityError::CapacityNotAvailable),
            ("unfulfillablecapacity", CapacityError::UnfulfillableCapacity),
            ("insufficientinstancecapacity", CapacityError::InsufficientInstanceCapacity),
            ("do not have sufficient", CapacityError::InsufficientInstanceCapacity),
            ("insufficient capacity", CapacityError::InsufficientInstanceCapacity),
        ];
        if let Some((_, kind)) = capacity.iter().find(|(needle, _)| lower.contains(needle)) {
            return LaunchError::Capacity(*kind);
        }
        LaunchError::Other(error_code(&text))
    }

    pub fn is_capacity(&self) -> bool {
        matches!(self, LaunchError::Capacity(_))
    }
}

/// EC2 errors quoted in ASG messages end with `Error Code: X`; otherwise the first
/// word that reads like an EC2 error code (`VcpuLimitExceeded`, `InvalidParameterValue`).
fn error_code(text: &str) -> Option<String> {
    if let Some((_, rest)) = text.split_once("Error Code: ") {
        let code: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '.').collect();
        if !code.is_empty() {
            return Some(code);
        }
    }
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .find(|w| {
            w.len() > 6
                && w.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && w.chars().skip(1).any(|c| c.is_ascii_uppercase())
                && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '.')
                && ["Exceeded", "Invalid", "Unauthorized", "NotFound", "Limit", "Denied"].iter().any(|k| w.contains(k))
        })
        .map(str::to_string)
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LifecycleAction {
    pub asg: String,
    pub hook: String,
    pub token: String,
    pub instance_id: String,
}

/// Why an event was refused. None of these gets better on retry.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("not valid JSON ({0})")]
    Json(#[source] serde_json::Error),
    #[error("{field}: {reason}")]
    Field { field: String, reason: String },
    #[error("unknown event: source `{event_source}` with detail-type `{detail_type}` is not one Ballast handles")]
    Unknown { event_source: String, detail_type: String },
    #[error("account: event from account `{found}`, but this deployment is account `{expected}`")]
    ForeignAccount { found: String, expected: String },
    #[error("region: event from region `{found}`, but this deployment is in `{expected}`")]
    ForeignRegion { found: String, expected: String },
    #[error("not an EventBridge event: {what}; {how}")]
    NotEventBridge { what: String, how: String },
}

impl EventError {
    fn field(field: impl Into<String>, reason: impl Into<String>) -> Self {
        EventError::Field { field: field.into(), reason: reason.into() }
    }

    /// The field at fault, when there is one.
    pub fn field_name(&self) -> Option<&str> {
        match self {
            EventError::Field { field, .. } => Some(field),
            EventError::ForeignAccount { .. } => Some("account"),
            EventError::ForeignRegion { .. } => Some("region"),
            _ => None,
        }
    }
}

/// Deserialises `value` into `T`, naming the failing field under `prefix`.
fn typed<T: DeserializeOwned>(value: Value, prefix: &str) -> Result<T, EventError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|err| {
        let inner = err.path().to_string();
        let message = err.into_inner().to_string();
        // A missing field is reported by serde at the parent; put its name in the path.
        let (field, reason) = match message.strip_prefix("missing field `").and_then(|m| m.split_once('`')) {
            Some((name, _)) => (join(prefix, &join_inner(&inner, name)), "is required".to_string()),
            None => (join(prefix, if inner == "." { "" } else { &inner }), message),
        };
        EventError::field(if field.is_empty() { "(event)".into() } else { field }, reason)
    })
}

fn join_inner(inner: &str, name: &str) -> String {
    if inner == "." || inner.is_empty() {
        name.to_string()
    } else {
        format!("{inner}.{name}")
    }
}

fn join(prefix: &str, inner: &str) -> String {
    match (prefix.is_empty(), inner.is_empty()) {
        (true, _) => inner.to_string(),
        (_, true) => prefix.to_string(),
        _ => format!("{prefix}.{inner}"),
    }
}

fn required<T>(value: Option<T>, field: &str) -> Result<T, EventError> {
    value.ok_or_else(|| EventError::field(field, "is required"))
}

fn non_empty(value: String, field: &str) -> Result<String, EventError> {
    if value.trim().is_empty() {
        Err(EventError::field(field, "must not be empty"))
    } else {
        Ok(value)
    }
}

/// The instance an entity or resource names, by id (`i-...`) or by ARN in any partition
/// (`arn:aws-cn:ec2:REGION:ACCOUNT:instance/i-...`); `None` for anything else.
fn instance_of(value: &str) -> Option<&str> {
    if value.starts_with("i-") {
        return Some(value);
    }
    let mut parts = value.splitn(6, ':');
    let (arn, partition, service) = (parts.next()?, parts.next()?, parts.next()?);
    let resource = parts.nth(2)?;
    let aws = partition == "aws" || partition.starts_with("aws-");
    (arn == "arn" && aws && service == "ec2").then(|| resource.strip_prefix("instance/")).flatten()
}

fn instance_id(value: String, field: &str) -> Result<String, EventError> {
    // EC2 ids have 8 hex digits (before 2016) or 17: nothing between.
    let ok = value
        .strip_prefix("i-")
        .is_some_and(|hex| matches!(hex.len(), 8 | 17) && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    if ok {
        Ok(value)
    } else {
        Err(EventError::field(field, format!("`{value}` is not an EC2 instance id (i- and 8 or 17 hex digits)")))
    }
}

/// One message of what an SQS queue delivered: its id (or place) and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsBody {
    pub message_id: String,
    pub body: String,
}

/// The bodies of a Lambda SQS batch (`{"Records": [...]}`) or of a single SQS record (a
/// message as the function received it, e.g. a dead letter); `None` when `bytes` are
/// neither (an envelope, to parse as it is). A record without a text body is refused,
/// naming it.
pub fn sqs_bodies(bytes: &[u8]) -> Option<Result<Vec<SqsBody>, EventError>> {
    let value: Value = serde_json::from_slice(bytes).ok()?;
    let map = value.as_object()?;
    let is_record = |m: &serde_json::Map<String, Value>| {
        m.get("eventSource").and_then(Value::as_str) == Some("aws:sqs")
            || (m.contains_key("messageId") && m.contains_key("body"))
    };
    let body_of = |record: &Value, at: String| -> Result<SqsBody, EventError> {
        let m = record.as_object().ok_or_else(|| EventError::field(&at, "expected an SQS record (an object)"))?;
        let body = m
            .get("body")
            .and_then(Value::as_str)
            .ok_or_else(|| EventError::field(format!("{at}.body"), "is required: the message's text"))?;
        let message_id = m.get("messageId").and_then(Value::as_str).map_or(at, str::to_string);
        Ok(SqsBody { message_id, body: body.to_string() })
    };
    if map.contains_key("detail-type") {
        return None;
    }
    if let Some(records) = map.get("Records") {
        let Some(records) = records.as_array() else {
            return Some(Err(EventError::field("Records", "expected an array of SQS records")));
        };
        // Records of another service (S3, SNS) are not an SQS batch: read as an event.
        let sqs = records.iter().any(|r| r.as_object().is_some_and(is_record));
        if !sqs && !records.is_empty() {
            return None;
        }
        return Some(records.iter().enumerate().map(|(i, r)| body_of(r, format!("Records[{i}]"))).collect());
    }
    is_record(map).then(|| body_of(&value, "(record)".into()).map(|b| vec![b]))
}

/// Parses one EventBridge envelope (or a bare Scheduler input)./// Parses one EventBridge envelope (or a bare Scheduler input). With `origin`, an
/// event from another account or region is refused.
pub fn parse_event(bytes: &[u8], origin: Option<&Origin>) -> Result<Event, EventError> {
    let value: Value = serde_json::from_slice(bytes).map_err(EventError::Json)?;
    parse_event_value(value, origin)
}

pub fn parse_event_value(value: Value, origin: Option<&Origin>) -> Result<Event, EventError> {
    let Value::Object(map) = &value else {
        return Err(EventError::field("(event)", "expected a JSON object (an EventBridge envelope)"));
    };
    if !map.contains_key("detail-type") && map.contains_key("action") {
        return parse_bare_schedule(value);
    }
    if !map.contains_key("detail-type") && map.get("Service").and_then(Value::as_str) == Some("AWS Auto Scaling") {
        return Err(straight_from_auto_scaling(map));
    }
    let envelope: EventBridgeEvent<Value> = typed(value, "")?;
    let id = non_empty(required(envelope.id, "id")?, "id")?;
    let time = required(envelope.time, "time")?;
    let account = required(envelope.account, "account")?;
    let region = required(envelope.region, "region")?;
    if let Some(origin) = origin {
        if let Some(expected) = origin.account.as_ref().filter(|a| **a != account) {
            return Err(EventError::ForeignAccount { found: account, expected: expected.clone() });
        }
        if region != origin.region {
            return Err(EventError::ForeignRegion { found: region, expected: origin.region.clone() });
        }
    }
    let detail = envelope.detail;
    let resources = envelope.resources.unwrap_or_default();
    let signal = signal_for(&envelope.source, &envelope.detail_type, detail, &resources)?;
    Ok(Event { id, time, source: envelope.source, detail_type: envelope.detail_type, signal })
}

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

fn signal_for(source: &str, detail_type: &str, detail: Value, resources: &[String]) -> Result<Signal, EventError> {
    let signal = match (source, detail_type) {
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => {
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
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => {
            let d: RebalanceDetail = typed(object_detail(detail)?, "detail")?;
            Signal::RebalanceRecommendation { instance_id: instance_id(d.instance_id, "detail.instance-id")? }
        }
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            let d: StateChangeDetail = typed(object_detail(detail)?, "detail")?;
            Signal::InstanceStateChange {
                instance_id: instance_id(d.instance_id, "detail.instance-id")?,
                state: d.state,
            }
        }
        ("aws.autoscaling", "EC2 Instance Launch Unsuccessful") => {
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
        ("aws.autoscaling", "EC2 Instance Launch Successful") => {
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
        ("aws.autoscaling", "EC2 Instance-terminate Lifecycle Action") => {
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
        ("aws.health", "AWS Health Event") => {
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
        ("aws.events", "Scheduled Event") => match detail {
            Value::Null => Signal::Reconcile,
            Value::Object(ref m) if m.is_empty() => Signal::Reconcile,
            other => schedule_signal(typed(object_detail(other)?, "detail")?)?,
        },
        ("aws.ssm", "Parameter Store Change") => {
            let d: ParameterChangeDetail = typed(object_detail(detail)?, "detail")?;
            Signal::ConfigChanged {
                parameter: non_empty(d.name, "detail.name")?,
                operation: non_empty(d.operation, "detail.operation")?,
            }
        }
        ("ballast.kubernetes", "Pool Demand Changed") => {
            let d: PoolDemandDetail = typed(object_detail(detail)?, "detail")?;
            non_empty(d.pool.clone(), "detail.pool")?;
            Signal::PoolDemand(d)
        }
        ("ballast.kubernetes", "Pods Unschedulable") => {
            let d: PodsUnschedulableDetail = typed(object_detail(detail)?, "detail")?;
            non_empty(d.pool.clone(), "detail.pool")?;
            Signal::PodsUnschedulable(d)
        }
        ("ballast.kubernetes", "Node Lifecycle") => {
            let d: NodeLifecycleDetail = typed(object_detail(detail)?, "detail")?;
            non_empty(d.pool.clone(), "detail.pool")?;
            instance_id(d.instance_id.clone(), "detail.instance_id")?;
            Signal::NodeLifecycle(d)
        }
        ("ballast.kubernetes", "Pool Waits Measured") => {
            let d: PoolWaitsDetail = typed(object_detail(detail)?, "detail")?;
            non_empty(d.pool.clone(), "detail.pool")?;
            d.check()?;
            Signal::PoolWaits(d)
        }
        _ => {
            return Err(EventError::Unknown { event_source: source.to_string(), detail_type: detail_type.to_string() });
        }
    };
    Ok(signal)
}

fn schedule_signal(input: ScheduleInput) -> Result<Signal, EventError> {
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

fn parse_bare_schedule(value: Value) -> Result<Event, EventError> {
    let bare: BareScheduleInput = typed(value, "")?;
    let input: ScheduleInput = typed(bare.input, "")?;
    let signal = schedule_signal(input).map_err(|e| match e {
        EventError::Field { field, reason } => {
            EventError::field(field.trim_start_matches("detail.").to_string(), reason)
        }
        other => other,
    })?;
    Ok(Event {
        id: non_empty(bare.id, "id")?,
        time: bare.time,
        source: "aws.scheduler".into(),
        detail_type: "Scheduler Input".into(),
        signal,
    })
}

/// What Auto Scaling sends when a lifecycle hook is created.
const TEST_NOTIFICATION: &str = "autoscaling:TEST_NOTIFICATION";

/// A lifecycle hook's own notification (its `NotificationTargetARN` is the queue), which
/// has no EventBridge envelope: says what it is and how to route the hook instead.
fn straight_from_auto_scaling(map: &serde_json::Map<String, Value>) -> EventError {
    let text = |k: &str| map.get(k).and_then(Value::as_str).unwrap_or("(none)").to_string();
    let what = match text("Event").as_str() {
        TEST_NOTIFICATION => {
            format!("Auto Scaling's test notification for a new hook on ASG {}", text("AutoScalingGroupName"))
        }
        _ => format!(
            "lifecycle hook {} of ASG {} ({} of {})",
            text("LifecycleHookName"),
            text("AutoScalingGroupName"),
            text("LifecycleTransition"),
            text("EC2InstanceId")
        ),
    };
    EventError::NotEventBridge {
        what: format!("{what}, sent by the hook straight to SQS, without an EventBridge envelope"),
        how: "create the hook without a notification target (no NotificationTargetARN or role): \
              Auto Scaling then sends the action to EventBridge, whose rule for \
              `EC2 Instance-terminate Lifecycle Action` puts it on this queue"
            .into(),
    }
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

impl Signal {
    /// Whether the signal asks for capacity within seconds (a node going, a launch
    /// failing, an operator's override): its run takes over from one draining the pool
    /// rather than wait for the drain. The rest wait for it, none dropped: ticks, demand
    /// and waits measured, lead times, scale-in hooks, and unschedulable pods (a drain's
    /// own evictions make them, every few seconds: taking over for each, no drain would
    /// end; cluster-autoscaler answers them meanwhile).
    pub fn cannot_wait(&self) -> bool {
        match self {
            Signal::SpotInterruption { .. }
            | Signal::RebalanceRecommendation { .. }
            | Signal::InstanceStateChange { .. }
            | Signal::LaunchUnsuccessful(_)
            | Signal::ScheduledChange { .. }
            | Signal::HeadroomOverride { .. } => true,
            Signal::PodsUnschedulable(_)
            | Signal::LaunchSuccessful { .. }
            | Signal::TerminateLifecycleAction(_)
            | Signal::Reconcile
            | Signal::PoolDemand(_)
            | Signal::NodeLifecycle(_)
            | Signal::PoolWaits(_)
            | Signal::ConfigChanged { .. }
            | Signal::Ignored { .. } => false,
        }
    }

    /// Whether the run holding the pool's lease covers the signal, so that a run for it
    /// that finds the lease held stands down rather than wait and reconcile again: a tick,
    /// and news of a node (every run observes the pool's nodes; the holder's or the next
    /// tick's sees it). Not a Ready a wait target times a launch by (`timed`): only its
    /// own run reads when it came.
    pub fn covered_by_the_lease_holder(&self, timed: bool) -> bool {
        match self {
            Signal::Reconcile => true,
            Signal::NodeLifecycle(n) => !(timed && n.condition == NodeCondition::Ready),
            _ => false,
        }
    }

    /// The instances this signal is about, for routing it to a pool.
    pub fn instance_ids(&self) -> Vec<&str> {
        match self {
            Signal::SpotInterruption { instance_id, .. }
            | Signal::RebalanceRecommendation { instance_id }
            | Signal::InstanceStateChange { instance_id, .. }
            | Signal::LaunchSuccessful { instance_id, .. } => vec![instance_id],
            Signal::TerminateLifecycleAction(a) => vec![&a.instance_id],
            Signal::ScheduledChange { instance_ids, .. } => instance_ids.iter().map(String::as_str).collect(),
            _ => Vec::new(),
        }
    }

    /// The pool the signal names itself, if any.
    pub fn named_pool(&self) -> Option<&str> {
        match self {
            Signal::HeadroomOverride { pool, .. } => Some(pool),
            Signal::PoolDemand(d) => Some(&d.pool),
            Signal::PodsUnschedulable(d) => Some(&d.pool),
            Signal::NodeLifecycle(d) => Some(&d.pool),
            Signal::PoolWaits(d) => Some(&d.pool),
            _ => None,
        }
    }

    /// The ASG the signal names, if any.
    pub fn named_asg(&self) -> Option<&str> {
        match self {
            Signal::LaunchUnsuccessful(f) => Some(&f.asg),
            Signal::LaunchSuccessful { asg, .. } => Some(asg),
            Signal::TerminateLifecycleAction(a) => Some(&a.asg),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
