//! The pool's lease: taken for a run, waited for while another run holds it, lent out
//! for drains and taken back after them, and renewed before each mutating call.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::apply::{lifecycle_call, Run};
use super::batch::Located;
use super::{
    PoolOutcome, ReconcileError, Reconciler, DEADLINE_MARGIN, HEARTBEAT_EVERY, KEPT_AFTER_LEASE_WAIT,
    LEASE_AFTER_DRAIN, LEASE_TTL, LEASE_WAIT,
};
use crate::config::PoolConfig;
use crate::event::{Event, Signal};
use crate::plan::LifecycleRef;
use crate::ports::{Autoscaling, Clock, Cluster, ErrorKind, PortError, StateStore, Urgency};
use crate::record::Draining;

impl<A: Autoscaling, C: Cluster, S: StateStore, K: Clock> Reconciler<A, C, S, K> {
    /// As [`Self::reconcile`], counted in `working` from when the pool is its own (the
    /// lease taken, no other run draining) to the end.
    pub(super) async fn reconcile_counting(
        &self,
        pool: &PoolConfig,
        events: &[Event],
        located: &Located,
        deadline: Option<DateTime<Utc>>,
        working: Option<&AtomicUsize>,
    ) -> Result<PoolOutcome, ReconcileError> {
        let name = pool.name.as_str();
        let urgency =
            if events.iter().any(|e| e.signal.cannot_wait()) { Urgency::CannotWait } else { Urgency::CanWait };
        let mut lease = Lease { ttl: LEASE_TTL, until: self.clock.now(), urgency };
        // A spot warning's surge is read for while the lease is taken.
        let ahead = async {
            match urgency == Urgency::CannotWait && !self.config.dry_run {
                true => self.read_ahead(pool, events, located, name).await,
                false => None,
            }
        };
        let (acquired, ahead) = futures_util::future::join(
            self.store.acquire_lease(name, &self.owner, lease.until, lease.ttl, lease.urgency),
            ahead,
        )
        .await;
        if !acquired.map_err(ReconcileError::port(name))? {
            return Err(ReconcileError::LeaseBusy { pool: name.to_string() });
        }
        lease.until += chrono::Duration::from_std(lease.ttl).unwrap_or(chrono::Duration::MAX);
        let result = self.reconcile_leased(pool, events, located, ahead, deadline, &mut lease, working).await;
        // A lease left behind expires on its own; failing to release is only logged.
        if let Err(e) = self.store.release_lease(name, &self.owner).await {
            tracing::warn!(pool = name, error = %e, "could not release the lease; it expires on its own");
        }
        result
    }

    /// Waits for the pool's lease (polling, jittered) up to `lease_wait`, or on while
    /// other runs of the batch are `working`, and never past what the deadline leaves the
    /// run; then the events fail for a retry.
    pub(super) async fn reconcile_when_free(
        &self,
        pool: &PoolConfig,
        events: &[Event],
        located: &Located,
        deadline: DateTime<Utc>,
        lease_wait: chrono::Duration,
        working: &AtomicUsize,
    ) -> Result<PoolOutcome, ReconcileError> {
        let leaves_the_run = deadline - KEPT_AFTER_LEASE_WAIT - DEADLINE_MARGIN;
        let give_up = self.clock.now().checked_add_signed(lease_wait).map_or(leaves_the_run, |t| t.min(leaves_the_run));
        let mut polls: u64 = 0;
        let every = chrono::Duration::from_std(HEARTBEAT_EVERY).unwrap_or(chrono::Duration::MAX);
        let mut hooks_kept_at = self.clock.now();
        loop {
            let pause = lease_poll(&self.owner, polls);
            let pause_chrono = chrono::Duration::from_std(pause).unwrap_or(chrono::Duration::MAX);
            let after_pause = self.clock.now() + pause_chrono;
            let others_at_work = working.load(Ordering::SeqCst) > 0;
            if after_pause > leaves_the_run || after_pause > give_up && !others_at_work {
                // The retry comes a pause later: the hook is heard of as late as it would
                // be after an ordinary lease wait.
                if self.clock.now() - hooks_kept_at >= LEASE_WAIT {
                    self.keep_hooks_open(&pool.name, events).await;
                }
                return Err(ReconcileError::LeaseBusy { pool: pool.name.clone() });
            }
            self.clock.sleep(pause).await;
            if self.clock.now() - hooks_kept_at >= every {
                self.keep_hooks_open(&pool.name, events).await;
                hooks_kept_at = self.clock.now();
            }
            // Waiting on for the batch, the lease is taken only while a whole drain fits
            // before the deadline: a drain cut short would only hand its lifecycle actions
            // on to a later run. Until the others are done, hooks kept.
            let drain_fits = self.clock.now() + drain_and_margins(pool) <= deadline;
            if self.clock.now() > give_up && !drain_fits {
                continue;
            }
            polls += 1;
            let tried = self.reconcile_counting(pool, events, located, Some(deadline), Some(working)).await;
            match tried {
                Err(ReconcileError::LeaseBusy { .. }) => continue,
                done => {
                    if polls > 1 {
                        tracing::info!(pool = %pool.name, polls, "the pool's lease was busy; got it after waiting");
                    }
                    return done;
                }
            }
        }
    }

    /// Lifecycle actions waiting for the pool's lease (another run drains, for minutes
    /// maybe) keep their hooks open: a heartbeat needs no lease and moves no capacity, and
    /// without one a hook whose heartbeat timeout is shorter than the wait ends with the
    /// node undrained. A failed heartbeat is only logged: the wait goes on regardless.
    pub(super) async fn keep_hooks_open(&self, pool: &str, events: &[Event]) {
        if self.config.dry_run {
            return;
        }
        for event in events {
            let Signal::TerminateLifecycleAction(a) = &event.signal else { continue };
            let action = LifecycleRef {
                asg: a.asg.clone(),
                hook: a.hook.clone(),
                token: a.token.clone(),
                instance_id: a.instance_id.clone(),
            };
            if let Err(e) = lifecycle_call(self.autoscaling.record_lifecycle_heartbeat(&action).await) {
                tracing::warn!(pool, instance = %a.instance_id, error = %e, "could not keep the lifecycle hook open while waiting for the lease");
            }
        }
    }

    /// Before a mutating call: the lease is still ours (renewed when half its time is
    /// gone) and the deadline is not near. A run that lost its lease stops applying.
    pub(super) async fn may_act(&self, run: &mut Run<'_>) -> Result<(), PortError> {
        let now = self.clock.now();
        if let Some(deadline) = run.deadline.filter(|d| now >= *d - DEADLINE_MARGIN) {
            return Err(PortError::new(
                ErrorKind::Retryable,
                "apply",
                format!(
                    "pool {}: the function's deadline {} is within {}s of now ({}); the rest is left to the next run",
                    run.pool.name,
                    deadline.to_rfc3339(),
                    DEADLINE_MARGIN.num_seconds(),
                    now.to_rfc3339()
                ),
            ));
        }
        let ttl = chrono::Duration::from_std(run.lease.ttl).unwrap_or(chrono::Duration::MAX);
        if now + ttl / 2 >= run.lease.until {
            if !self.store.acquire_lease(&run.pool.name, &self.owner, now, run.lease.ttl, run.lease.urgency).await? {
                return Err(PortError::new(
                    ErrorKind::Retryable,
                    "lease",
                    format!("pool {}: the lease expired and another run holds it; stopped applying", run.pool.name),
                ));
            }
            run.lease.until = now + ttl;
        }
        Ok(())
    }

    /// Before drains: the record says who drains until when (scheduled ticks stand down
    /// meanwhile), and the lease is let go, so that an event arriving during a drain
    /// that may take minutes (a spot warning for another node, a launch failure) is acted
    /// on at once by its own run, not after the drain.
    pub(super) async fn lend_lease(&self, run: &mut Run<'_>, longest: Duration) -> Result<(), PortError> {
        let longest = chrono::Duration::from_std(longest + LEASE_AFTER_DRAIN).unwrap_or(chrono::Duration::MAX);
        let until = self.clock.now().checked_add_signed(longest).unwrap_or(DateTime::<Utc>::MAX_UTC);
        run.record.draining = Some(Draining { owner: self.owner.clone(), until });
        run.version = self.store.save(run.key, &run.record, run.version).await?;
        if let Err(e) = self.store.release_lease(&run.pool.name, &self.owner).await {
            tracing::warn!(pool = %run.pool.name, error = %e, "could not let the lease go for the drain; held through it");
        }
        run.lease.until = self.clock.now();
        Ok(())
    }

    /// After drains: the lease taken back, if no other run planned the pool meanwhile
    /// (the record is where this run left it). False: the rest of the plan is not this
    /// run's any more. A lease held without the record changing (a tick standing down,
    /// another drainer taking its own back) is waited for, briefly: only a run that
    /// planned takes the rest over, and any run that plans writes the record.
    pub(super) async fn take_back_lease(&self, run: &mut Run<'_>) -> Result<bool, PortError> {
        let give_up = self.clock.now() + LEASE_WAIT;
        let mut polls = 0;
        loop {
            if self.store.load(run.key).await?.version != run.version {
                return Ok(false);
            }
            let now = self.clock.now();
            if self.store.acquire_lease(&run.pool.name, &self.owner, now, run.lease.ttl, run.lease.urgency).await? {
                run.lease.until = now + chrono::Duration::from_std(run.lease.ttl).unwrap_or(chrono::Duration::MAX);
                if self.store.load(run.key).await?.version != run.version {
                    return Ok(false);
                }
                run.record.draining = None;
                return match self.store.save(run.key, &run.record, run.version).await {
                    Ok(version) => {
                        run.version = version;
                        Ok(true)
                    }
                    Err(e) if e.kind == ErrorKind::Conflict => Ok(false),
                    Err(e) => Err(e),
                };
            }
            let pause = lease_poll(&self.owner, polls);
            let late = run
                .deadline
                .is_some_and(|d| now + chrono::Duration::from_std(pause).unwrap_or_default() >= d - DEADLINE_MARGIN);
            if late || now >= give_up {
                return Err(PortError::new(
                    ErrorKind::Retryable,
                    "lease",
                    format!("pool {}: the lease, let go for the drain, is still held by another run; the rest is left to the next run", run.pool.name),
                ));
            }
            self.clock.sleep(pause).await;
            polls += 1;
        }
    }
}

/// The lease: held until `until`, renewed for `ttl`, taken in the turn `urgency` gives.
pub(super) struct Lease {
    pub(super) ttl: Duration,
    pub(super) until: DateTime<Utc>,
    pub(super) urgency: Urgency,
}

/// A run of a batch at work on its pool, counted while this lives.
pub(super) struct AtWork<'a>(&'a AtomicUsize);

impl<'a> AtWork<'a> {
    pub(super) fn new(working: &'a AtomicUsize) -> AtWork<'a> {
        working.fetch_add(1, Ordering::SeqCst);
        AtWork(working)
    }
}

impl Drop for AtWork<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a run taking the lease needs before the deadline to drain whole: the pool's
/// `drain_timeout` and what the config's function timeout check allows beside it.
fn drain_and_margins(pool: &PoolConfig) -> chrono::Duration {
    chrono::Duration::from_std(pool.interruption.drain_timeout.0 + crate::config::FUNCTION_TIMEOUT_MARGIN)
        .unwrap_or(chrono::Duration::MAX)
}

/// One to two seconds between tries for a busy lease, spread by the run's owner id so
/// that runs waiting for the same pool do not try in step.
fn lease_poll(owner: &str, poll: u64) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (owner, poll).hash(&mut hasher);
    Duration::from_millis(1_000 + hasher.finish() % 1_000)
}
