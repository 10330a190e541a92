//! Detail payloads, with the field names AWS (or our forwarder) sends. No kept crate
//! carries these for Spot, rebalance, launch failures, lifecycle actions or Health.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct SpotInterruptionDetail {
    pub instance_id: String,
    pub instance_action: InstanceAction,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct RebalanceDetail {
    pub instance_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct StateChangeDetail {
    pub instance_id: String,
    pub state: InstanceState,
}

/// What EC2 does to a spot instance it reclaims (`instance-action` of the interruption
/// warning).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceAction {
    /// The instance is terminated.
    Terminate,
    /// The instance is stopped; EC2 may start it again when capacity returns.
    Stop,
    /// The instance hibernates, with no two-minute lead.
    Hibernate,
}

/// An EC2 instance's state (`state` of `EC2 Instance State-change Notification`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    /// `pending`: launching; not a loss.
    Pending,
    /// `running`: not a loss.
    Running,
    /// `stopping`: a loss ([`is_loss`](Self::is_loss)), as are the states after it.
    Stopping,
    /// `stopped`: a loss, though the instance may start again.
    Stopped,
    /// `shutting-down`: a loss.
    ShuttingDown,
    /// `terminated`: a loss.
    Terminated,
}

impl InstanceState {
    /// The instance is going or gone: its capacity is lost.
    pub fn is_loss(self) -> bool {
        matches!(
            self,
            InstanceState::Stopping | InstanceState::Stopped | InstanceState::ShuttingDown | InstanceState::Terminated
        )
    }
}

/// An Auto Scaling launch activity's detail: the same shape for a launch that failed and
/// one that succeeded.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct LaunchActivityDetail {
    pub status_code: String,
    pub auto_scaling_group_name: String,
    pub activity_id: String,
    #[serde(default)]
    pub details: LaunchDetails,
    #[serde(default)]
    pub status_message: String,
    #[serde(default)]
    pub cause: String,
    #[serde(default)]
    pub start_time: Option<DateTime<Utc>>,
    #[serde(default)]
    pub end_time: Option<DateTime<Utc>>,
    #[serde(default, rename = "EC2InstanceId")]
    pub ec2_instance_id: String,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct LaunchDetails {
    #[serde(default, rename = "Availability Zone")]
    pub availability_zone: Option<String>,
    #[serde(default, rename = "Subnet ID")]
    pub subnet_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct LifecycleActionDetail {
    pub lifecycle_action_token: String,
    pub auto_scaling_group_name: String,
    pub lifecycle_hook_name: String,
    #[serde(rename = "EC2InstanceId")]
    pub ec2_instance_id: String,
    pub lifecycle_transition: String,
    #[serde(default)]
    pub notification_metadata: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct HealthDetail {
    pub service: String,
    pub event_type_code: String,
    #[serde(default, deserialize_with = "health_time")]
    pub start_time: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "health_time")]
    pub end_time: Option<DateTime<Utc>>,
    #[serde(default)]
    pub affected_entities: Vec<AffectedEntity>,
    #[serde(default)]
    pub status_code: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct AffectedEntity {
    pub entity_value: String,
}

/// AWS Health writes times as RFC 2822 (`Sat, 05 Jun 2023 15:10:09 GMT`); accept RFC 3339
/// too. The times are informational and AWS's own samples carry weekdays that do not
/// match the date, so the weekday is not checked, and a time that still cannot be read
/// is left out rather than refusing the event.
fn health_time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    let Some(text) = Option::<serde_json::Value>::deserialize(d)?.and_then(|v| v.as_str().map(str::to_string)) else {
        return Ok(None);
    };
    let without_weekday = text.split_once(", ").map_or(text.as_str(), |(_, rest)| rest);
    Ok(DateTime::parse_from_rfc2822(&text)
        .or_else(|_| DateTime::parse_from_rfc2822(without_weekday))
        .or_else(|_| DateTime::parse_from_rfc3339(&text))
        .ok()
        .map(|t| t.with_timezone(&Utc)))
}

/// Ballast's own input to the schedule function (EventBridge Scheduler or a rule).
#[derive(Debug, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum ScheduleInput {
    Reconcile {},
    Headroom {
        pool: String,
        percent: u32,
        #[serde(rename = "for")]
        duration: crate::units::HumanDuration,
    },
}

/// A bare Scheduler input: the scheduler fills `id` and `time` from its context
/// attributes (`<aws.scheduler.execution-id>`, `<aws.scheduler.scheduled-time>`).
#[derive(Debug, Deserialize)]
pub(super) struct BareScheduleInput {
    pub id: String,
    pub time: DateTime<Utc>,
    /// The rest; `ScheduleInput` refuses unknown fields.
    #[serde(flatten)]
    pub input: serde_json::Value,
}

/// The detail of `ballast.kubernetes` / `Pool Demand Changed`: the requests of the pool's
/// workload pods (not pause, DaemonSet or mirror pods) as the forwarder summed them.
/// Stored in the pool's record to size headroom; an older one never replaces a newer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolDemandDetail {
    /// The pool's name in the config.
    pub pool: String,
    /// CPU requested, in millicores.
    pub cpu_millis: u64,
    /// Memory requested, in bytes.
    pub memory_bytes: u64,
    /// Workload pods counted.
    pub pods: u32,
    /// Nodes of the pool the forwarder sees.
    pub nodes: u32,
    /// When the forwarder summed them.
    pub observed_at: DateTime<Utc>,
    /// The shapes of the workload pods that started since the forwarder's previous report
    /// and of those waiting now, most frequent first (at most
    /// [`crate::shape::MAX_SHAPES_REPORTED`]): where headroom is placed. Empty from a
    /// forwarder that does not report them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<crate::shape::ShapeCount>,
}

/// The detail of `ballast.kubernetes` / `Pods Unschedulable`: the pool's pods the scheduler
/// found no room for, as the forwarder summed them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodsUnschedulableDetail {
    /// The pool's name in the config.
    pub pool: String,
    /// How many pods are unschedulable.
    pub count: u32,
    /// Their CPU requests, in millicores.
    pub cpu_millis: u64,
    /// Their memory requests, in bytes.
    pub memory_bytes: u64,
    /// Since when the longest of them has been unschedulable (whole seconds).
    pub oldest_pending_since: DateTime<Utc>,
}

/// The detail of `ballast.kubernetes` / `Node Lifecycle`: one of the pool's nodes joined,
/// became Ready or not, or left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeLifecycleDetail {
    /// The pool's name in the config.
    pub pool: String,
    /// The Kubernetes node name.
    pub node: String,
    /// The node's `spec.providerID` (`aws:///eu-west-1a/i-...`).
    pub provider_id: String,
    /// The node's EC2 instance id, checked like any instance id.
    pub instance_id: String,
    /// Spot or on-demand, from the node's labels.
    pub capacity_type: CapacityType,
    /// What happened to the node.
    pub condition: NodeCondition,
    /// When the forwarder saw the change (the envelope's time is when it was sent, later
    /// after a retry). Older forwarders leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<DateTime<Utc>>,
}

/// The first-start waits of the pool's workload pods that were scheduled within one
/// window (creation to the scheduler's binding), as the forwarder measured them. Like
/// every forwarder event, fields a newer forwarder adds are passed over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolWaitsDetail {
    /// The pool's name in the config.
    pub pool: String,
    /// Start of the window.
    pub window_start: DateTime<Utc>,
    /// End of the window: not before `window_start`, at most an hour after it.
    pub window_end: DateTime<Utc>,
    /// Pods scheduled in the window.
    pub pods: u32,
    /// The window's 95th percentile wait (nearest rank), in seconds.
    pub p95_seconds: f64,
    /// The window's longest wait, in seconds.
    pub max_seconds: f64,
    /// Pods that waited at most `le` seconds, at each of [`WAIT_BUCKETS_SECONDS`]
    /// (cumulative, as a Prometheus histogram): how many missed a target, whatever the
    /// target. Empty from a forwarder older than 0.4.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<WaitBucket>,
    /// Pods that waited longer than the pool's target while a Running pause pod of the
    /// pool, at least their size, held room they did not take (an affinity, a spread, a
    /// gate or a volume kept them off it): waits no headroom shortens. 0 from a forwarder
    /// that does not count them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub over_with_room: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Upper bounds, in seconds, of the first-start wait buckets the forwarder counts: the
/// waits a target is written in (a few seconds to a minute or two) up to a node's boot
/// and more. The forwarder's Prometheus histogram has the same.
pub const WAIT_BUCKETS_SECONDS: [f64; 15] =
    [0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0];

/// One bucket of [`PoolWaitsDetail::buckets`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WaitBucket {
    /// Upper bound, in seconds: one of [`WAIT_BUCKETS_SECONDS`].
    pub le: f64,
    /// Pods of the window that waited at most `le` seconds.
    pub pods: u32,
}

impl PoolWaitsDetail {
    /// A window's summary of first-start waits (seconds, in any order), as the forwarder
    /// publishes it: the count, the nearest-rank p95 and the max; `None` for no waits.
    pub fn summing(
        pool: &str,
        window_start: DateTime<Utc>,
        window_end: DateTime<Utc>,
        waits: &mut [f64],
    ) -> Option<PoolWaitsDetail> {
        waits.sort_unstable_by(f64::total_cmp);
        let p95_seconds = crate::quantile::nearest_rank(waits, 0.95)?;
        Some(PoolWaitsDetail {
            pool: pool.to_string(),
            window_start,
            window_end,
            pods: u32::try_from(waits.len()).unwrap_or(u32::MAX),
            p95_seconds,
            max_seconds: waits[waits.len() - 1],
            buckets: WAIT_BUCKETS_SECONDS
                .iter()
                .map(|&le| WaitBucket {
                    le,
                    pods: u32::try_from(waits.partition_point(|&w| w <= le)).unwrap_or(u32::MAX),
                })
                .collect(),
            over_with_room: 0,
        })
    }

    /// How many of the window's pods waited longer than `target_seconds`: those above
    /// the largest bucket bound within the target (so at least as many as did, for a
    /// target between bounds). `None` without buckets (an older forwarder).
    pub fn pods_over(&self, target_seconds: f64) -> Option<u32> {
        if self.buckets.is_empty() {
            return None;
        }
        let within = self.buckets.iter().rev().find(|b| b.le <= target_seconds).map_or(0, |b| b.pods);
        Some(self.pods.saturating_sub(within))
    }

    pub(super) fn check(&self) -> Result<(), super::EventError> {
        let bad = |field: &'static str, why: String| Err(super::EventError::field(field, why));
        if self.window_end < self.window_start {
            return bad("detail.window_end", format!("{} is before window_start", self.window_end.to_rfc3339()));
        }
        // The forwarder's windows are minutes long; a longer one is not its.
        if self.window_end - self.window_start > chrono::Duration::hours(1) {
            return bad("detail.window_start", "the window is longer than an hour".into());
        }
        for (field, value) in [("detail.p95_seconds", self.p95_seconds), ("detail.max_seconds", self.max_seconds)] {
            if !value.is_finite() || value < 0.0 {
                return bad(field, format!("{value} is not a wait in seconds"));
            }
        }
        let mut below = (0.0, 0);
        // The nearest rank of the p95: fewer pods than that waited less than it.
        let rank = crate::quantile::rank(self.pods as usize, 0.95) as u64;
        for (i, b) in self.buckets.iter().enumerate() {
            if !b.le.is_finite() || b.le < 0.0 || i > 0 && b.le <= below.0 {
                return bad("detail.buckets", format!("bound {} does not follow {} upwards", b.le, below.0));
            }
            if b.pods < below.1 || b.pods > self.pods {
                return bad(
                    "detail.buckets",
                    format!(
                        "{} pods within {} s is not between {} and the window's {} pods",
                        b.pods, b.le, below.1, self.pods
                    ),
                );
            }
            // Buckets that contradict the p95 or the max would hide pods over a target.
            if b.le >= self.max_seconds && b.pods != self.pods || b.le < self.p95_seconds && u64::from(b.pods) >= rank {
                return bad(
                    "detail.buckets",
                    format!(
                        "{} pods within {} s contradicts {} pods, p95 {} s and max {} s",
                        b.pods, b.le, self.pods, self.p95_seconds, self.max_seconds
                    ),
                );
            }
            below = (b.le, b.pods);
        }
        if self.p95_seconds > self.max_seconds {
            return bad(
                "detail.p95_seconds",
                format!("{} is above max_seconds ({})", self.p95_seconds, self.max_seconds),
            );
        }
        Ok(())
    }
}

/// How a node's instance is bought (`capacity_type` of a `Node Lifecycle` event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityType {
    /// `spot`.
    Spot,
    /// `on-demand`: what the forwarder says of a node no label calls spot.
    OnDemand,
}

/// What happened to a node (`condition` of a `Node Lifecycle` event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeCondition {
    /// `joined`: the node registered; it may not be Ready yet.
    Joined,
    /// `ready`: the node became Ready. For a wait target, where a launch's lead time ends.
    Ready,
    /// `not_ready`: the node was Ready and is not now.
    NotReady,
    /// `left`: the node is gone from the cluster.
    Left,
    /// One a newer forwarder sends: the event still counts as the node's news.
    #[serde(untagged)]
    Other(String),
}
