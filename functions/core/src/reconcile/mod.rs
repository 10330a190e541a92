//! `reconcile(pool)`: take the lease, observe, plan, record, apply. Every function
//! ends here; the simulator and `ballast plan` run the same code.
//!
//! [`Reconciler::handle`] takes a batch of events; the work is cut by job:
//! - `batch`: drops repeats and handled events, routes each to its pools, and
//!   reconciles the pools together;
//! - `lease`: takes the pool's lease, waits for it when busy, lends it for drains and
//!   takes it back;
//! - `run`: one pool under its lease, the optimistic-concurrency loop (load, observe,
//!   plan, save);
//! - `apply`: carries the plan out, call by call;
//! - `intent`: the journal writes around the capacity calls, and taking back the intent
//!   of what a failed apply did not reach;
//! - `handover`, `stand_down`: a lifecycle action after a drain cut short, and the kill
//!   switch's stand-down;
//! - `errors`: how it fails.

mod apply;
mod batch;
mod errors;
mod handover;
mod intent;
mod lease;
mod run;
mod stand_down;
mod urgent;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::Config;
use crate::event::Event;
use crate::plan::Plan;
use crate::ports::{Autoscaling, Clock, Cluster, DrainReport, StateStore};

pub use batch::seen_key;
pub use errors::{ApplyError, BatchStage, ReconcileError};
pub use handover::{after_drain, AfterDrain};

/// A forwarder demand event younger than this spares the reconcile a pod listing: the
/// forwarder's heartbeat (5 min) and a minute for its delivery, so a tick just before the
/// next heartbeat lands does not list every pod of the pool.
pub const DEMAND_FRESH_FOR: chrono::Duration = chrono::Duration::minutes(6);
/// How long handled event ids are remembered (EventBridge redelivers within hours).
pub const DEDUP_FOR: chrono::Duration = chrono::Duration::hours(24);
/// Loads of the pool record a run makes before giving up on a record that changed
/// under each (another run saved between the load and the save).
const MAX_ATTEMPTS: u32 = 3;
/// Reads of an ASG's size, around journal writes, before a desired-size write gives up.
const SETTLE_ATTEMPTS: u32 = 3;
/// A drain for a lifecycle action runs in slices this long, with a heartbeat between
/// them, so the hook never times out under a long drain.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(60);

/// Time kept free before the Lambda deadline: no call starts within it.
pub const DEADLINE_MARGIN: chrono::Duration = chrono::Duration::seconds(10);
/// Time a drain cut short by the deadline leaves the calls after it (taking the lease
/// back, the terminate, the lifecycle action's completion): without it the plan stops at
/// the margin, and each retry drains again and stops there again.
pub const KEPT_AFTER_DRAINS: chrono::Duration = chrono::Duration::seconds(20);
/// The pool record a dry run keeps, beside the live one: its memory, never applied.
pub const DRY_RUN_SUFFIX: &str = "@dry-run";

/// Two minutes, whatever the pool's `drain_timeout`: the lease is let go during drains
/// and renewed before each call once half of it is gone, so it covers only observing,
/// planning and a call; a run that dies holding it (killed, out of memory) delays the
/// pool's next spot warning by no more than this.
pub const LEASE_TTL: Duration = Duration::from_secs(120);
/// Time beyond the longest drain before a run that died in it is taken as dead by ticks.
const LEASE_AFTER_DRAIN: Duration = Duration::from_secs(60);
/// The longest wait for a busy lease in an SQS batch: runs hold it for seconds (drains
/// let it go); one that died holding it is outlasted by the queue's retries.
pub const LEASE_WAIT: chrono::Duration = chrono::Duration::seconds(15);
/// A wait for a busy lease ends this long before the deadline, for the run itself.
const KEPT_AFTER_LEASE_WAIT: chrono::Duration = chrono::Duration::seconds(60);

/// What happened to one action of an applied plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Applied {
    /// Carried out.
    Done,
    /// A drain ran; the report counts the pods evicted and names those left blocked.
    Drained(DrainReport),
    /// Not carried out, and rightly so (the ASG was already at its size, a drain was
    /// incomplete, the journal had no open call); `why` says which.
    Skipped {
        /// Why it was skipped.
        why: String,
    },
}

/// What one pool's reconcile decided and did.
#[derive(Debug, Clone, Serialize)]
pub struct PoolOutcome {
    /// The plan that was applied (or only logged, in dry run).
    pub plan: Plan,
    /// One entry per action of the plan that was carried out (empty in dry run).
    pub applied: Vec<Applied>,
}

/// An event that concerns none of the pools (a Spot warning for another team's instance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unrouted {
    /// The event's id.
    pub event_id: String,
    /// Why no pool takes it, for the log.
    pub why: String,
    /// Worth an operator's look, not routine (logged as a warning).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub warning: bool,
}

/// What a batch of events came to.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// The pools reconciled, one outcome each.
    pub pools: Vec<PoolOutcome>,
    /// Events no pool takes.
    pub unrouted: Vec<Unrouted>,
    /// Ids of events dropped as repeats: twice in the batch, or handled already.
    pub duplicates: Vec<String>,
    /// Pools that failed, with the ids of the events that routed to them.
    pub failures: Vec<(ReconcileError, Vec<String>)>,
    /// Pools whose only events were ticks (or news of a node) while another run held the
    /// lease: that run reconciles them now.
    pub covered: Vec<String>,
}

/// Runs the reconcile for a batch of events against the ports: the one entry point
/// every function, the simulator and `ballast plan` go through.
pub struct Reconciler<A, C, S, K> {
    /// The config the pools are read from.
    pub config: Arc<Config>,
    /// The Auto Scaling port.
    pub autoscaling: A,
    /// The Kubernetes port.
    pub cluster: C,
    /// The state store: pool records, leases and handled event ids.
    pub store: S,
    /// The clock every `now` is read from.
    pub clock: K,
    /// Names this run in leases (e.g. the Lambda request id).
    pub owner: String,
}

/// What a batch may spend. No call starts past `deadline` less [`DEADLINE_MARGIN`] (the
/// Lambda deadline), and drains are cut short to end before it. A busy lease is waited
/// for up to `lease_wait`, never past what the deadline leaves the run; without a
/// deadline it is not waited for.
///
/// An SQS batch waits little ([`LEASE_WAIT`], the default): the queue retries ten times,
/// and a waiting run would hold back other pools' messages. An asynchronous invocation
/// has one or two retries a minute apart, so it waits out a drain within its deadline
/// rather than spend them (`lease_wait` of `chrono::Duration::MAX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The Lambda deadline; `None` for no deadline (the CLI, the simulator).
    pub deadline: Option<DateTime<Utc>>,
    /// The longest wait for a busy lease.
    pub lease_wait: chrono::Duration,
}

impl Default for Budget {
    /// No deadline; a busy lease waited for as an SQS batch does.
    fn default() -> Budget {
        Budget { deadline: None, lease_wait: LEASE_WAIT }
    }
}

impl Budget {
    /// Until `deadline`; a busy lease waited for as an SQS batch does.
    pub fn until(deadline: DateTime<Utc>) -> Budget {
        Budget { deadline: Some(deadline), ..Budget::default() }
    }

    /// The same budget, a busy lease waited for up to `lease_wait`.
    pub fn waiting(self, lease_wait: chrono::Duration) -> Budget {
        Budget { lease_wait, ..self }
    }
}

impl<A: Autoscaling, C: Cluster, S: StateStore, K: Clock> Reconciler<A, C, S, K> {
    /// Routes a batch to its pools and reconciles each once, within `budget`.
    pub async fn handle(&self, events: Vec<Event>, budget: Budget) -> BatchOutcome {
        let mut outcome = BatchOutcome::default();
        let Some(routed) = self.dedup_and_route(events, &mut outcome).await else { return outcome };
        let handled = self.reconcile_pools(routed, budget, &mut outcome).await;
        self.mark_batch_handled(&handled, &outcome).await;
        outcome
    }
}
