//! Every event Ballast accepts, parsed into a domain [`Signal`]. Bad input becomes an
//! [`EventError`] naming the field and the reason; nothing here panics.

mod detail;
mod kind;
mod signal;
mod source;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use serde::de::DeserializeOwned;
use serde_json::Value;

use detail::*;
pub use detail::{
    CapacityType, InstanceAction, InstanceState, NodeCondition, NodeLifecycleDetail, PodsUnschedulableDetail,
    PoolDemandDetail, PoolWaitsDetail, WaitBucket, WAIT_BUCKETS_SECONDS,
};

pub use kind::{EventKind, FORWARDER_SOURCE};
pub use signal::{CapacityError, Event, LaunchError, LaunchFailure, LifecycleAction, Origin, Signal};
use source::{schedule_signal, signal_for};

/// Why an event was refused, naming the field at fault. None of these gets better on
/// retry: through SQS, the message is dead-lettered with it.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The bytes are not JSON.
    #[error("not valid JSON ({0})")]
    Json(#[source] serde_json::Error),
    /// A field is missing or wrong: its path in the event (`detail.instance-id`) and why.
    #[error("{field}: {reason}")]
    Field {
        /// The field's path in the event.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A `source` / `detail-type` pair Ballast does not handle (see EVENTS.md): a rule routes
    /// more than it should.
    #[error("unknown event: source `{event_source}` with detail-type `{detail_type}` is not one Ballast handles")]
    Unknown {
        /// The envelope's `source`.
        event_source: String,
        /// The envelope's `detail-type`.
        detail_type: String,
    },
    /// The envelope's `account` is not the deployment's ([`Origin::account`]).
    #[error("account: event from account `{found}`, but this deployment is account `{expected}`")]
    ForeignAccount {
        /// The event's account.
        found: String,
        /// The deployment's.
        expected: String,
    },
    /// The envelope's `region` is not the deployment's ([`Origin::region`]).
    #[error("region: event from region `{found}`, but this deployment is in `{expected}`")]
    ForeignRegion {
        /// The event's region.
        found: String,
        /// The deployment's.
        expected: String,
    },
    /// A message without an EventBridge envelope (a lifecycle hook's own notification, sent
    /// straight to SQS): `what` it is and `how` to route it through EventBridge instead.
    #[error("not an EventBridge event: {what}; {how}")]
    NotEventBridge {
        /// What the message is.
        what: String,
        /// How to route it through EventBridge.
        how: String,
    },
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
            // serde's wording (`expected u64`, `unknown variant`) in words, as the config's.
            None => {
                (join(prefix, if inner == "." { "" } else { &inner }), crate::json_errors::message_in_words(&message))
            }
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
    /// The message's SQS `messageId`; for a record without one, where it sits
    /// (`Records[2]`, `(record)`): what reports about the message name it by.
    pub message_id: String,
    /// The message's text: an EventBridge envelope, or a bare Scheduler input.
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

/// Parses one EventBridge envelope (or a bare Scheduler input). With `origin`, an
/// event from another account or region is refused.
pub fn parse_event(bytes: &[u8], origin: Option<&Origin>) -> Result<Event, EventError> {
    let value: Value = serde_json::from_slice(bytes).map_err(EventError::Json)?;
    parse_event_value(value, origin)
}

/// [`parse_event`] for JSON already read; `origin` as there.
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

#[cfg(test)]
mod tests;
