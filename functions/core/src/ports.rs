//! The side effects Ballast needs, as small traits. Each has a real adapter (AWS SDK,
//! kube) in its own crate; a state snapshot serves the reads `ballast plan` needs
//! ([`crate::snapshot::SnapshotPorts`]), the simulator has its own over its model, and
//! the tests have in-memory doubles (`crate::testing`, feature `test-util`).

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error as StdError;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::config::PoolConfig;
use crate::observe::{AsgSize, Demand, LaunchedBy, NodeState, ObservedAsg};
use crate::plan::LifecycleRef;
use crate::record::PoolRecord;
use crate::shape::{PodShape, SlotState};

/// Whether trying again can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Throttling, 5xx, timeouts, a lease held by another run.
    Retryable,
    /// Validation errors, missing resources, permissions: a retry fails the same way.
    Permanent,
    /// A conditional write lost: re-read and re-plan.
    Conflict,
    /// What the call acts on is already over (a lifecycle action completed by an earlier
    /// run, or timed out): nothing is left to do, and a retry fails the same way.
    Gone,
}

/// A port call that failed: which call, whether trying again can help, and why, with the
/// SDK's or kube's error kept as its source.
#[derive(Debug, thiserror::Error)]
#[error("{operation}: {message}")]
pub struct PortError {
    /// The call that failed, in the words of the service that answers it: the AWS API
    /// action (`SetDesiredCapacity`, `PutItem`), or the Kubernetes verb and object
    /// (`list nodes`, `cordon NODE`, `evict POD`). An adapter standing in for a service
    /// (the tests' in-memory ports, a state snapshot, the simulator) names a call as the
    /// real adapter does; a run's own refusal names the step it refused (`apply`, `lease`).
    pub operation: String,
    /// Whether trying again can help.
    pub kind: ErrorKind,
    /// What went wrong, naming the resource (`table ballast-state: ...`).
    pub message: String,
    /// The SDK's or kube's own error, when there is one.
    #[source]
    pub source: Option<Box<dyn StdError + Send + Sync>>,
}

impl PortError {
    /// An error with no source.
    pub fn new(kind: ErrorKind, operation: impl Into<String>, message: impl Into<String>) -> Self {
        PortError { operation: operation.into(), kind, message: message.into(), source: None }
    }

    /// Keeps `source` as the error's cause.
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Whether trying again can help: a retryable error, or a conflict (after a re-read).
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::Retryable | ErrorKind::Conflict)
    }
}

/// The pool's Auto Scaling groups: what they hold, and the writes that size them.
#[async_trait]
pub trait Autoscaling: Send + Sync {
    /// The pool's ASGs: the spot ones in the pool's preference order, then on-demand
    /// (`None` for a spot-only pool).
    async fn describe_pool(&self, pool: &PoolConfig) -> Result<(Vec<ObservedAsg>, Option<ObservedAsg>), PortError>;
    /// The ASG each of these instances is in (those in none left out). Routing asks this,
    /// not [`Self::describe_pool`]: a pool's description lists every instance of its ASGs,
    /// and a spot warning's first call waits on the routing.
    async fn asgs_of_instances(&self, instance_ids: &[String]) -> Result<BTreeMap<String, String>, PortError>;
    /// The ASG that launched each of these instances, by its EC2 tag
    /// `aws:autoscaling:groupName` (EC2's DescribeInstances), and whether the spot market
    /// took it back; those EC2 does not know are left out. EC2 lists an instance for
    /// about an hour after it terminated, so this names the ASG of one that has left it,
    /// which [`Self::asgs_of_instances`] no longer knows.
    async fn launched_by(&self, instance_ids: &[String]) -> Result<BTreeMap<String, LaunchedBy>, PortError>;
    /// The tags of each of these ASGs that has any, for tag selectors.
    async fn asg_tags(&self, asgs: &[String]) -> Result<BTreeMap<String, BTreeMap<String, String>>, PortError>;
    /// One ASG's size now: read again just before a write, since the write is absolute.
    async fn asg_size(&self, asg: &str) -> Result<AsgSize, PortError>;
    /// [`Self::asg_size`] without counting the instances (`live` is `None`): enough for
    /// a raise or a minimum check, and a large ASG's instance list is most of what a
    /// size read costs (a spot warning's surge waits on it).
    async fn asg_bounds(&self, asg: &str) -> Result<AsgSize, PortError> {
        self.asg_size(asg).await.map(|size| AsgSize { live: None, ..size })
    }
    /// Sets the ASG's desired capacity, cooldowns not honoured. The value is absolute, so
    /// it comes from a fresh [`Self::asg_size`].
    async fn set_desired_capacity(&self, asg: &str, desired: u32) -> Result<(), PortError>;
    /// Terminates an instance through its ASG; with `decrement`, the ASG's desired capacity
    /// drops by one and no replacement is launched.
    async fn terminate_instance(&self, instance_id: &str, decrement: bool) -> Result<(), PortError>;
    /// Keeps a terminate lifecycle action open while its node drains.
    async fn record_lifecycle_heartbeat(&self, action: &LifecycleRef) -> Result<(), PortError>;
    /// Completes a terminate lifecycle action (`CONTINUE`): the ASG may terminate the instance.
    async fn complete_lifecycle_action(&self, action: &LifecycleRef) -> Result<(), PortError>;
}

/// EC2 facts beside the ASGs: node names and prices.
#[async_trait]
pub trait Compute: Send + Sync {
    /// Private DNS name (the EKS node name) of each instance found.
    async fn private_dns_names(&self, instance_ids: &[String]) -> Result<Vec<(String, String)>, PortError>;
    /// The latest spot price per hour of an instance type in an AZ.
    async fn spot_price(&self, instance_type: &str, availability_zone: &str) -> Result<Option<f64>, PortError>;
}

/// What a node's drain did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainReport {
    /// Pods evicted.
    pub evicted: u32,
    /// Pods that could not be evicted before the timeout, with why.
    pub blocked: Vec<(String, String)>,
}

impl DrainReport {
    /// Whether every pod was evicted (none blocked).
    pub fn complete(&self) -> bool {
        self.blocked.is_empty()
    }
}

/// The cluster's side of a pool: its nodes, its pause-pod Deployment, its workload demand,
/// and node cordons and drains.
#[async_trait]
pub trait Cluster: Send + Sync {
    /// The pool's nodes (those its node selector matches) that run on an EC2 instance: each
    /// one's instance, readiness and cordon.
    async fn pool_nodes(&self, pool: &PoolConfig) -> Result<Vec<NodeState>, PortError>;
    /// The pool's pause-pod Deployments that exist, one per slot (at most
    /// `headroom.shapes.deployments()`), with their shapes and replicas.
    async fn headroom(&self, pool: &PoolConfig) -> Result<Vec<SlotState>, PortError>;
    /// Writes the pool's pause-pod Deployment of `slot` with `replicas` pods of `shape`,
    /// creating it (and its PriorityClass) if needed.
    async fn set_headroom(
        &self,
        pool: &PoolConfig,
        slot: usize,
        shape: &PodShape,
        replicas: u32,
    ) -> Result<(), PortError>;
    /// Lists the pool's workload pods and keeps only the sums.
    async fn pool_demand(&self, pool: &PoolConfig, now: DateTime<Utc>) -> Result<Option<Demand>, PortError>;
    /// Marks the node unschedulable.
    async fn cordon(&self, node: &str) -> Result<(), PortError>;
    /// Marks the node schedulable again.
    async fn uncordon(&self, node: &str) -> Result<(), PortError>;
    /// Evicts the node's pods through the Eviction API, for at most `timeout`; pods a
    /// PodDisruptionBudget holds until then are reported as blocked, not an error.
    async fn drain(&self, node: &str, timeout: Duration) -> Result<DrainReport, PortError>;
}

/// A stored value with the version a conditional write quotes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    /// The value stored (a default one when nothing was).
    pub value: T,
    /// 0 when nothing was stored yet.
    pub version: u64,
}

/// Where each pool's record, its lease and the ids of handled events are kept (a
/// DynamoDB table in a deployment).
#[async_trait]
pub trait StateStore: Send + Sync {
    /// The pool's record and its version; a default record at version 0 when none is stored.
    async fn load(&self, pool: &str) -> Result<Versioned<PoolRecord>, PortError>;
    /// Writes if the stored version is still `expected`; returns the new version, or a
    /// `Conflict` error.
    async fn save(&self, pool: &str, record: &PoolRecord, expected: u64) -> Result<u64, PortError>;
    /// Takes the pool's lease unless another owner holds an unexpired one or, for a run
    /// that can wait, an urgent run claims the next turn (see [`Urgency`]). An urgent run
    /// refused claims the next turn for [`LEASE_CLAIM_FOR`].
    async fn acquire_lease(
        &self,
        pool: &str,
        owner: &str,
        now: DateTime<Utc>,
        ttl: Duration,
        urgency: Urgency,
    ) -> Result<bool, PortError>;
    /// Gives up the lease if `owner` holds it.
    async fn release_lease(&self, pool: &str, owner: &str) -> Result<(), PortError>;
    /// Which of these event ids were already handled.
    async fn seen(&self, event_ids: &[String]) -> Result<BTreeSet<String>, PortError>;
    /// Notes these event ids as handled, forgotten after `expires_at`.
    async fn mark_seen(&self, event_ids: &[String], expires_at: DateTime<Utc>) -> Result<(), PortError>;
}

/// Whose turn a free lease is. In a reclaim wave the forwarder sends an event for every
/// node going and coming, and for the pods they leave: each is a run waiting for the
/// pool's lease, holding it a second or two in turn. A spot warning's run waiting among
/// them would wait for all of them; instead it claims the next turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    /// Its events cannot wait (`Signal::cannot_wait`): refused, it claims the next turn.
    CannotWait,
    /// It takes a free lease only when no urgent run claims the turn.
    CanWait,
}

/// How long an urgent run's claim on the next turn lasts: it renews it at each try (one
/// to two seconds apart), so the claim lapses this long after its last try. Taking the
/// lease does not end it: another urgent run may be waiting under the same claim (in a
/// reclaim wave several are), and runs that can wait, wait a few seconds more.
pub const LEASE_CLAIM_FOR: chrono::Duration = chrono::Duration::seconds(5);

/// The rule every lease store keeps: `owner` may take the lease (held by `holder` until
/// its time, or by no one) with an urgent run's claim on the next turn until `claimed`.
pub fn may_take_lease(
    holder: Option<(&str, DateTime<Utc>)>,
    claimed: Option<DateTime<Utc>>,
    owner: &str,
    now: DateTime<Utc>,
    urgency: Urgency,
) -> bool {
    let renewal = holder.is_some_and(|(h, _)| h == owner);
    let free = holder.is_none_or(|(_, until)| until <= now);
    renewal || (free && (urgency == Urgency::CannotWait || claimed.is_none_or(|until| until <= now)))
}

/// An in-memory store's claims after a try for `pool`'s lease: an urgent run refused
/// claims the next turn.
pub fn note_lease_claim(
    claims: &mut std::collections::BTreeMap<String, DateTime<Utc>>,
    pool: &str,
    now: DateTime<Utc>,
    urgency: Urgency,
    taken: bool,
) {
    if urgency == Urgency::CannotWait && !taken {
        claims.insert(pool.to_string(), now + LEASE_CLAIM_FOR);
    }
}

/// Where a message that can never succeed goes, with why (the queue's dead-letter queue).
#[async_trait]
pub trait DeadLetters: Send + Sync {
    /// Sends `body` to the dead-letter queue with `reason` beside it.
    async fn send(&self, body: &str, reason: &str) -> Result<(), PortError>;
}

/// Brings a queue message back sooner than the queue's visibility timeout: a retryable
/// failure (a lease held, throttling) is worth another try within seconds.
#[async_trait]
pub trait Redelivery: Send + Sync {
    /// Makes the message `receipt_handle` names visible on `queue_arn` again after `after`.
    async fn retry_in(&self, queue_arn: &str, receipt_handle: &str, after: Duration) -> Result<(), PortError>;
}

/// One version of the config as its home holds it. `version` is Parameter Store's; a
/// fixed source (inline text, a file) has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigText {
    /// The config's YAML text.
    pub text: String,
    /// Parameter Store's version of it; `None` for a fixed source.
    pub version: Option<i64>,
}

/// Where the config lives: an SSM parameter in a deployment, fixed text in local runs.
#[async_trait]
pub trait ConfigHome: Send + Sync {
    /// The config's text as the home holds it now (the newest version).
    async fn read(&self) -> Result<ConfigText, PortError>;
    /// Names the home in messages (`SSM parameter /ballast/prod/config`).
    fn describe(&self) -> String;
    /// Whether it may change while a function runs (a file or inline text does not).
    fn changes(&self) -> bool;
    /// Versions before `before`, newest first, at most `at_most`: where a cold start looks
    /// for the newest good config when the latest is refused. A home without versions
    /// (a file, inline text) has none.
    async fn earlier(&self, before: i64, at_most: usize) -> Result<Vec<ConfigText>, PortError> {
        let _ = (before, at_most);
        Ok(Vec::new())
    }
}

/// What [`ConfigHome::earlier`] returns from a home's whole history, in any order.
pub fn newest_before(mut versions: Vec<ConfigText>, before: i64, at_most: usize) -> Vec<ConfigText> {
    versions.retain(|v| v.version.is_some_and(|n| n < before));
    versions.sort_by_key(|v| std::cmp::Reverse(v.version));
    versions.truncate(at_most);
    versions
}

/// That a part of a deployment (a function, the forwarder) runs on a config version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionNote {
    /// The part: a function (`interruption`, ...) or `forwarder`.
    pub part: String,
    /// The config version it runs on.
    pub version: i64,
    /// When it noted it.
    pub at: DateTime<Utc>,
}

/// Where the parts of a deployment note the config version they run on, so that
/// `ballast doctor` can say when they disagree.
#[async_trait]
pub trait ConfigVersions: Send + Sync {
    /// Notes that a part runs on a config version.
    async fn note(&self, note: &VersionNote) -> Result<(), PortError>;
}

/// The time, behind a port so that the planner and tests can be given one.
#[async_trait]
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> DateTime<Utc>;
    /// Waits `for_` (a busy lease's poll): real time in a function, simulated in tests.
    async fn sleep(&self, for_: Duration);
}

/// A clock that says what it is told (the simulator's, `ballast plan`'s, the tests').
#[derive(Debug, Clone)]
pub struct FixedClock(pub Arc<Mutex<DateTime<Utc>>>);

impl FixedClock {
    /// A clock at `now`.
    pub fn new(now: DateTime<Utc>) -> Self {
        FixedClock(Arc::new(Mutex::new(now)))
    }

    /// Moves the clock to `now`.
    pub fn set(&self, now: DateTime<Utc>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = now;
    }

    /// Moves the clock on `by`.
    pub fn advance(&self, by: chrono::Duration) {
        let mut guard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *guard += by;
    }
}

#[async_trait]
impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Time moves on by as much, at once.
    async fn sleep(&self, for_: Duration) {
        self.advance(chrono::Duration::from_std(for_).unwrap_or(chrono::Duration::MAX));
    }
}
