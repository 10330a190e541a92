//! The three handlers. The interruption function takes SQS batches of EventBridge
//! envelopes and reports as failed only the messages a retry can help; the schedule
//! and cluster-events functions take one event each.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use ballast_core::event::{parse_event, parse_event_value, Event, EventKind};
use ballast_core::function::Function;
use ballast_core::ports::{Autoscaling, Clock, Cluster, DeadLetters, Redelivery, StateStore};
use ballast_core::reconcile::{BatchOutcome, Budget, ReconcileError};
use serde::Serialize;
use serde_json::Value;
use tracing::{error, info, warn};

use crate::app::App;
use crate::metrics::emf;

/// The event sources the interruption function takes (through its queue).
pub const INTERRUPTION_SOURCES: [&str; 4] = ["aws.ec2", "aws.autoscaling", "aws.health", CONFIG_SOURCE];
/// The schedule function's: EventBridge scheduled events and Scheduler input.
pub const SCHEDULE_SOURCES: [&str; 3] = ["aws.events", "aws.scheduler", CONFIG_SOURCE];
/// The cluster-events function's: the forwarder.
pub const CLUSTER_EVENTS_SOURCES: [&str; 2] = ["ballast.kubernetes", CONFIG_SOURCE];
/// Parameter Store's change events: every function reads its config again on one.
pub const CONFIG_SOURCE: &str = EventKind::ParameterStoreChange.source();

/// The sources a directly invoked function takes: its own, or (a local tool's run under
/// another name) those of both directly invoked functions.
fn direct_sources(function: &str) -> Vec<&'static str> {
    match Function::from_name(function) {
        Some(Function::Schedule) => SCHEDULE_SOURCES.to_vec(),
        Some(Function::ClusterEvents) => CLUSTER_EVENTS_SOURCES.to_vec(),
        Some(Function::Interruption) | None => {
            let mut both: Vec<&str> = SCHEDULE_SOURCES.iter().chain(CLUSTER_EVENTS_SOURCES.iter()).copied().collect();
            both.sort_unstable();
            both.dedup();
            both
        }
    }
}

/// Why an event from `source` is not this function's, if it is not.
fn foreign_source(function: &str, source: &str, accepted: &[&str]) -> Option<String> {
    (!accepted.contains(&source))
        .then(|| format!("source: `{source}` is not one the {function} function takes ({})", accepted.join(", ")))
}

/// How long a retryable message waits before it comes back: 5 s, doubling with each
/// receive, at most 5 min (ten receives span about 20 minutes: longer than any lease).
pub fn retry_after(receive_count: u32) -> Duration {
    let doublings = receive_count.saturating_sub(1).min(6);
    Duration::from_secs((5u64 << doublings).min(300))
}

/// The shortest lifecycle-hook `HeartbeatTimeout` Ballast keeps open while the action waits
/// for other runs' drains: it heartbeats at each receive (and each minute while another
/// pool of the batch works), and receives come at most [`retry_after`]'s longest pause, the
/// templates' longest batching window (10 s), a lease wait and a wait for a concurrency
/// slot (drains may hold each for the longest function timeout, 15 min) apart: 21 minutes.
/// A storm keeping every slot busy longer can exceed it: AWS's default hour is the safer
/// setting. `ballast doctor` holds the stack's termination hooks to it.
pub const HOOK_HEARTBEAT_TIMEOUT_AT_LEAST: Duration = Duration::from_secs(21 * 60);

/// Brings each of `failed` back after [`retry_after`] its receive count, not after the
/// queue's visibility timeout. If that cannot be arranged it still comes back, later.
pub async fn redeliver_soon(function: &str, redelivery: &dyn Redelivery, batch: &SqsEvent, failed: &[String]) {
    for message in batch.records.iter().filter(|m| m.message_id.as_ref().is_some_and(|id| failed.contains(id))) {
        let (Some(queue), Some(receipt)) = (&message.event_source_arn, &message.receipt_handle) else { continue };
        let receives = message.attributes.get("ApproximateReceiveCount").and_then(|c| c.parse().ok()).unwrap_or(1);
        let after = retry_after(receives);
        if let Err(e) = redelivery.retry_in(queue, receipt, after).await {
            warn!(function, message_id = ?message.message_id, error = %e, "could not shorten the retry; the message comes back after the queue's visibility timeout");
        }
    }
}

/// What an invocation did, as the function returns (and logs) it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// The config version the invocation ran on (Parameter Store's), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_version: Option<i64>,
    pub pools: Vec<PoolSummary>,
    pub unrouted: Vec<String>,
    pub duplicates: Vec<String>,
    pub invalid: Vec<String>,
    pub errors: Vec<String>,
    /// Pools a tick (or news of a node) found being reconciled by the run holding their lease.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub covered: Vec<String>,
    /// Instances left to cluster-autoscaler as possible surplus, per ASG, dry runs aside
    /// (their plans' `surplus` says what a live run would leave). A plan that stopped
    /// part-way counts too: its record write came first and may have landed even if
    /// reported failed (then its retry may name the same again).
    pub surplus: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PoolSummary {
    pub pool: String,
    pub dry_run: bool,
    pub actions: usize,
    pub applied: usize,
}

/// What a directly invoked function returns as an error: only what a retry can mend
/// (an invalid event is logged and answered with success, so Lambda's asynchronous
/// retries do not repeat it).
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error("retry later: {0}")]
    Retryable(String),
    /// A valid event whose reconcile failed in a way a retry does not mend (permissions,
    /// a missing table or ASG): failed all the same, so that after the invoker's retries
    /// it lands in the dead-letter queue with this error (its alarm goes off), rather than
    /// being answered with success and lost.
    #[error("failed (a retry will not mend this; the event is kept in the dead-letter queue): {0}")]
    Failed(String),
}

impl From<HandlerError> for lambda_runtime::Diagnostic {
    fn from(err: HandlerError) -> Self {
        let error_type = match err {
            HandlerError::Retryable(_) => "Ballast.Retryable",
            HandlerError::Failed(_) => "Ballast.Failed",
        };
        lambda_runtime::Diagnostic { error_type: error_type.into(), error_message: err.to_string() }
    }
}

/// A Lambda context's deadline (milliseconds since the epoch) as a time. A value that
/// is no plausible time (an emulator that sends the timeout itself: `cargo lambda watch`
/// sends 600000) means no deadline is known.
pub fn deadline_of(context: &lambda_runtime::Context) -> Option<chrono::DateTime<chrono::Utc>> {
    let plausible_after = chrono::DateTime::from_timestamp(1_577_836_800, 0)?; // 2020-01-01
    i64::try_from(context.deadline)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .filter(|d| *d > plausible_after)
}

impl<A, C, S, K, D> App<A, C, S, K, D>
where
    A: Autoscaling,
    C: Cluster,
    S: StateStore,
    K: Clock,
    D: DeadLetters,
{
    /// Logs each plan, one EMF line per pool, and sums the outcome up.
    fn report(&self, outcome: &BatchOutcome, started: Instant, invalid: Vec<String>) -> Summary {
        let elapsed = started.elapsed().as_millis() as u64;
        let now = self.reconciler.clock.now().timestamp_millis();
        let dry_run = self.reconciler.config.dry_run;
        let mut errors_by_pool: BTreeMap<String, u32> = BTreeMap::new();
        let mut surplus: BTreeMap<String, u32> = BTreeMap::new();
        let mut surplus_by_pool: BTreeMap<String, u32> = BTreeMap::new();
        let in_force =
            outcome.pools.iter().map(|p| &p.plan).chain(outcome.failures.iter().filter_map(|(e, _)| e.plan()));
        for plan in in_force.filter(|p| !p.dry_run) {
            for (asg, n) in &plan.surplus {
                *surplus.entry(asg.clone()).or_default() += n;
            }
            *surplus_by_pool.entry(plan.pool.clone()).or_default() += plan.surplus_named();
        }
        let mut batch_errors = 0;
        for (err, _) in &outcome.failures {
            match err.pool() {
                Some(pool) => *errors_by_pool.entry(pool.to_string()).or_default() += 1,
                None => batch_errors += 1,
            }
            error!(function = self.function, error = %err, retryable = err.is_retryable(), "reconcile failed");
            if let Some(plan) = err.plan() {
                // What the run intended, notes included: the journal tells the next run
                // what was done; the log tells the operator.
                let what = match err {
                    ReconcileError::MarkSeen { .. } => "plan (applied; its events not marked handled)",
                    _ => "plan (stopped part-way)",
                };
                info!(function = self.function, pool = %plan.pool, dry_run = plan.dry_run, plan = %plan.log_line(), "{what}");
            }
        }
        if batch_errors > 0 {
            (self.metrics)(&crate::metrics::emf_batch_errors(self.function, batch_errors, now));
        }
        for pool in &outcome.pools {
            let plan = &pool.plan;
            // Bounded: a plan for thousands of interruptions is summarised, so the line
            // stays within CloudWatch's event size.
            info!(function = self.function, pool = %plan.pool, dry_run = plan.dry_run, plan = %plan.log_line(), "plan");
            let errors = errors_by_pool.remove(&plan.pool).unwrap_or(0);
            let named = surplus_by_pool.remove(&plan.pool).unwrap_or(0);
            (self.metrics)(&emf(self.function, Some(plan), dry_run, &plan.pool, errors, named, elapsed, now));
        }
        for (pool, errors) in errors_by_pool {
            let named = surplus_by_pool.remove(&pool).unwrap_or(0);
            // A plan applied whole counts its decisions even if its events were not marked.
            let applied = outcome.failures.iter().find_map(|(e, _)| match e {
                ReconcileError::MarkSeen { plan, .. } if plan.pool == pool => Some(plan.as_ref()),
                _ => None,
            });
            (self.metrics)(&emf(self.function, applied, dry_run, &pool, errors, named, elapsed, now));
        }
        for pool in &outcome.covered {
            info!(function = self.function, pool = %pool, "tick or node news covered: the run holding the pool's lease is reconciling it");
        }
        for u in &outcome.unrouted {
            if u.warning {
                warn!(function = self.function, event_id = %u.event_id, why = %u.why, "event acted on by no pool: look at it");
            } else {
                info!(function = self.function, event_id = %u.event_id, why = %u.why, "event concerns no pool");
            }
        }
        Summary {
            pools: outcome
                .pools
                .iter()
                .map(|p| PoolSummary {
                    pool: p.plan.pool.clone(),
                    dry_run: p.plan.dry_run,
                    actions: p.plan.effects().count(),
                    applied: p.applied.len(),
                })
                .collect(),
            unrouted: outcome.unrouted.iter().map(|u| format!("{}: {}", u.event_id, u.why)).collect(),
            duplicates: outcome.duplicates.clone(),
            invalid,
            errors: outcome.failures.iter().map(|(e, _)| e.to_string()).collect(),
            covered: outcome.covered.clone(),
            surplus,
            config_version: None,
        }
    }

    /// An SQS batch: malformed messages go to the dead-letter queue at once (a retry
    /// cannot mend them); the rest are grouped per pool and each pool is reconciled
    /// once; messages whose pool failed in a retryable way are reported failed, those
    /// whose pool failed in a way a retry does not mend go to the dead-letter queue.
    pub async fn interruption(&self, batch: SqsEvent) -> (SqsBatchResponse, Summary) {
        self.interruption_until(batch, None).await
    }

    /// As [`Self::interruption`], with no call started near `deadline`.
    pub async fn interruption_until(
        &self,
        batch: SqsEvent,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
    ) -> (SqsBatchResponse, Summary) {
        let started = Instant::now();
        self.check_time(deadline);
        let mut failed: Vec<String> = Vec::new();
        let mut invalid = Vec::new();
        let mut events: Vec<Event> = Vec::new();
        let mut messages_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut body_of: BTreeMap<String, &str> = BTreeMap::new();
        for (index, message) in batch.records.iter().enumerate() {
            let message_id = message.message_id.clone().unwrap_or_else(|| format!("#{index}"));
            let body = message.body.as_deref().unwrap_or_default();
            let parsed = parse_event(body.as_bytes(), Some(&self.origin))
                .map_err(|e| (e.field_name().unwrap_or("(none)").to_string(), e.to_string()));
            let parsed = parsed.and_then(|event| {
                match foreign_source(Function::Interruption.name(), &event.source, &INTERRUPTION_SOURCES) {
                    Some(why) => Err(("source".to_string(), why)),
                    None => Ok(event),
                }
            });
            match parsed {
                Ok(event) => {
                    body_of.insert(message_id.clone(), body);
                    messages_of.entry(event.id.clone()).or_default().push(message_id);
                    events.push(event);
                }
                Err((field, err)) => {
                    warn!(function = self.function, message_id = %message_id, field = %field, error = %err, "malformed event");
                    invalid.push(format!("{message_id}: {err}"));
                    if !self.dead_letter(&message_id, body, &err).await {
                        failed.push(message_id);
                    }
                }
            }
        }
        let outcome = self.reconciler.handle(events, Budget { deadline, ..Budget::default() }).await;
        let messages = |event_ids: &[String]| -> Vec<String> {
            event_ids.iter().flat_map(|id| messages_of.get(id).cloned().unwrap_or_default()).collect()
        };
        // A message one of whose pools may succeed on a retry is retried only (its event
        // for two pools), never also dead-lettered.
        let mut retried: BTreeSet<String> =
            outcome.failures.iter().filter(|(e, _)| e.is_retryable()).flat_map(|(_, ids)| messages(ids)).collect();
        let mut parked = BTreeSet::new();
        // On its last receive a message still failing goes to the dead-letter queue from
        // here, with every error it met (the redrive policy would move it with none).
        for message_id in retried.clone() {
            let Some(receives) = self.last_receive(&batch, &message_id) else { continue };
            let errors: Vec<String> = outcome
                .failures
                .iter()
                .filter(|(_, ids)| messages(ids).contains(&message_id))
                .map(|(e, _)| e.to_string())
                .collect();
            let why = format!("still failing on receive {receives}, the queue's last: {}", errors.join("; "));
            let body = body_of.get(&message_id).copied().unwrap_or_default();
            if self.dead_letter(&message_id, body, &why).await {
                retried.remove(&message_id);
                parked.insert(message_id);
            }
        }
        failed.extend(retried.iter().cloned());
        for (err, event_ids) in outcome.failures.iter().filter(|(e, _)| !e.is_retryable()) {
            // A retry cannot mend it, but deleting it would lose it unseen: kept in the
            // dead-letter queue with the error (its alarm goes off).
            for message_id in messages(event_ids) {
                if parked.contains(&message_id) || retried.contains(&message_id) {
                    continue;
                }
                let body = body_of.get(&message_id).copied().unwrap_or_default();
                if self.dead_letter(&message_id, body, &err.to_string()).await {
                    parked.insert(message_id);
                } else {
                    failed.push(message_id);
                }
            }
        }
        let summary = self.report(&outcome, started, invalid);
        failed.sort();
        failed.dedup();
        self.redeliver_soon(&batch, &failed).await;
        let mut response = SqsBatchResponse::default();
        response.batch_item_failures = failed
            .into_iter()
            .map(|id| {
                let mut f = BatchItemFailure::default();
                f.item_identifier = id;
                f
            })
            .collect();
        (response, summary)
    }

    /// Sends a message to the dead-letter queue with why; false if it could not (left on
    /// the queue, the redrive policy moves it there after maxReceiveCount).
    async fn dead_letter(&self, message_id: &str, body: &str, why: &str) -> bool {
        let parked = match &self.dead_letters {
            Some(dlq) => dlq.send(body, why).await.map_err(|e| e.to_string()),
            None => Err("no dead-letter queue configured".to_string()),
        };
        if let Err(e) = &parked {
            warn!(function = self.function, message_id = %message_id, why = %e, "could not dead-letter the message; leaving it to the redrive policy");
        }
        parked.is_ok()
    }

    /// The message's receive count, if it is the queue's `maxReceiveCount` or more.
    fn last_receive(&self, batch: &SqsEvent, message_id: &str) -> Option<u32> {
        let max = self.max_receives?;
        let message = batch.records.iter().find(|m| m.message_id.as_deref() == Some(message_id))?;
        let receives: u32 = message.attributes.get("ApproximateReceiveCount")?.parse().ok()?;
        (receives >= max).then_some(receives)
    }

    /// Each failed message comes back after [`retry_after`] its receive count, not after
    /// the queue's visibility timeout. If that cannot be arranged it still comes back, later.
    async fn redeliver_soon(&self, batch: &SqsEvent, failed: &[String]) {
        if let Some(redelivery) = &self.redelivery {
            redeliver_soon(self.function, redelivery.as_ref(), batch, failed).await;
        }
    }

    /// Warns when the invocation's time is shorter than the config's longest drain needs.
    fn check_time(&self, deadline: Option<chrono::DateTime<chrono::Utc>>) {
        let Some(deadline) = deadline else { return };
        let left = (deadline - chrono::Utc::now()).to_std().unwrap_or_default();
        let needed = self.reconciler.config.min_function_timeout();
        if left + Duration::from_secs(1) < needed {
            warn!(function = self.function, left_s = left.as_secs(), needed_s = needed.as_secs(), "the function's timeout is shorter than the longest drain_timeout plus 120 s: drains will be cut short; raise the timeout (FunctionTimeoutSeconds)");
        }
    }

    /// One event (EventBridge target or Scheduler input). An invalid event is logged
    /// and answered with success (a retry cannot mend it); a failed reconcile is an
    /// error, retryable or not, so that it ends in the dead-letter queue if it lasts.
    pub async fn direct(&self, payload: Value) -> Result<Summary, HandlerError> {
        self.direct_until(payload, None).await
    }

    /// As [`Self::direct`], with no call started near `deadline`.
    pub async fn direct_until(
        &self,
        payload: Value,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<Summary, HandlerError> {
        let started = Instant::now();
        self.check_time(deadline);
        let parsed = parse_event_value(payload, Some(&self.origin));
        let event = match parsed {
            Ok(event) => match foreign_source(self.function, &event.source, &direct_sources(self.function)) {
                Some(why) => {
                    warn!(function = self.function, field = "source", error = %why, "event from a foreign source rejected");
                    return Ok(self.report(&BatchOutcome::default(), started, vec![format!("event rejected: {why}")]));
                }
                None => event,
            },
            Err(e) => {
                warn!(function = self.function, field = e.field_name().unwrap_or("(none)"), error = %e, "malformed event rejected");
                let outcome = BatchOutcome::default();
                return Ok(self.report(&outcome, started, vec![format!("event rejected: {e}")]));
            }
        };
        // One or two retries, a minute apart: a busy lease (another run's drain) is waited
        // out within the deadline rather than spend them.
        let outcome = self.reconciler.handle(vec![event], Budget { deadline, lease_wait: chrono::Duration::MAX }).await;
        let retry =
            outcome.failures.iter().filter(|(e, _)| e.is_retryable()).map(|(e, _)| e.to_string()).collect::<Vec<_>>();
        let permanent =
            outcome.failures.iter().filter(|(e, _)| !e.is_retryable()).map(|(e, _)| e.to_string()).collect::<Vec<_>>();
        let summary = self.report(&outcome, started, Vec::new());
        if !retry.is_empty() {
            return Err(HandlerError::Retryable(retry.join("; ")));
        }
        if !permanent.is_empty() {
            return Err(HandlerError::Failed(permanent.join("; ")));
        }
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::{deadline_of, foreign_source, retry_after, INTERRUPTION_SOURCES};
    use std::time::Duration;

    #[test]
    fn the_invoker_sees_whether_a_retry_can_help() {
        let kind = |e: super::HandlerError| lambda_runtime::Diagnostic::from(e).error_type;
        assert_eq!(kind(super::HandlerError::Retryable("lease".into())), "Ballast.Retryable");
        assert_eq!(kind(super::HandlerError::Failed("AccessDenied".into())), "Ballast.Failed");
    }

    #[test]
    fn a_retry_backs_off_from_five_seconds_to_five_minutes() {
        let waits: Vec<u64> = (1..=10).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300, 300]);
        assert_eq!(retry_after(0), Duration::from_secs(5), "a missing count is the first receive");
        // Ten receives outlast the longest lease (drain_timeout 15 min + 2 min).
        assert!(waits.iter().sum::<u64>() > 17 * 60);
    }

    #[test]
    fn a_hook_open_for_the_documented_time_outlasts_the_gap_between_receives() {
        let longest_pause = (1..=10).map(retry_after).max().unwrap();
        let batching_window = Duration::from_secs(10);
        let lease_wait = ballast_core::reconcile::LEASE_WAIT.to_std().unwrap();
        let slot_held = Duration::from_secs(15 * 60);
        assert!(longest_pause + batching_window + lease_wait + slot_held < super::HOOK_HEARTBEAT_TIMEOUT_AT_LEAST);
    }

    #[test]
    fn a_function_names_the_sources_it_refuses() {
        assert_eq!(foreign_source("interruption", "aws.health", &INTERRUPTION_SOURCES), None);
        assert_eq!(
            foreign_source("interruption", "ballast.kubernetes", &INTERRUPTION_SOURCES).unwrap(),
            "source: `ballast.kubernetes` is not one the interruption function takes (aws.ec2, aws.autoscaling, aws.health, aws.ssm)"
        );
    }

    #[test]
    fn a_deadline_is_epoch_milliseconds_and_an_emulator_timeout_is_none() {
        let mut context = lambda_runtime::Context::default();
        context.deadline = 1_795_392_600_000;
        assert_eq!(deadline_of(&context).map(|d| d.to_rfc3339()), Some("2026-11-23T00:10:00+00:00".into()));
        context.deadline = 600_000;
        assert_eq!(deadline_of(&context), None);
    }
}
