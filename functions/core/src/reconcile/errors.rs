//! How a reconcile fails: per pool, for the whole batch, or part-way through a plan.

use serde::Serialize;

use super::MAX_ATTEMPTS;
use crate::plan::Plan;
use crate::ports::PortError;

/// What failed before the batch was split per pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchStage {
    /// Looking up which event ids were handled already.
    Dedup,
    /// Describing the ASGs to find which pool each event concerns.
    Routing,
}

impl std::fmt::Display for BatchStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BatchStage::Dedup => "looking up handled event ids",
            BatchStage::Routing => "routing events to pools",
        })
    }
}

/// Why one pool's reconcile, or the whole batch, failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Another run held the pool's lease past the budget's lease wait.
    #[error("pool {pool}: another run holds the lease; try again shortly")]
    LeaseBusy {
        /// The pool's name.
        pool: String,
    },
    /// Loading the record, taking the lease or observing the pool failed.
    #[error("pool {pool}: {source}")]
    Port {
        /// The pool's name.
        pool: String,
        /// The port's error.
        #[source]
        source: PortError,
    },
    /// Applying the plan stopped at an action; the plan says what was intended (its
    /// notes included), the journal what was done.
    #[error("pool {pool}: applying action {} of {} stopped: {source}", failed_at + 1, plan.actions.len())]
    Apply {
        /// The pool's name.
        pool: String,
        /// The plan being applied.
        plan: Box<Plan>,
        /// The index of the action it stopped at, in `plan.actions`.
        failed_at: usize,
        /// The port's error.
        #[source]
        source: PortError,
    },
    /// The plan was applied whole, but its events could not be marked handled: a retry
    /// takes them again (harmless: the record says what was done), and the plan is
    /// still logged and counted.
    #[error("pool {pool}: the plan was applied, but its events could not be marked handled: {source}")]
    MarkSeen {
        /// The pool's name.
        pool: String,
        /// The plan that was applied.
        plan: Box<Plan>,
        /// The port's error.
        #[source]
        source: PortError,
    },
    /// Every attempt to save the record found another run had saved it since the load.
    #[error("pool {pool}: the record changed under every one of {MAX_ATTEMPTS} attempts")]
    Contention {
        /// The pool's name.
        pool: String,
    },
    /// A failure before the batch was split per pool: it concerns every event of it.
    #[error("{stage}: {source}")]
    Batch {
        /// Which step failed.
        stage: BatchStage,
        /// The port's error.
        #[source]
        source: PortError,
    },
}

impl ReconcileError {
    /// Whether a retry may succeed: a busy lease or contention, or a retryable port error.
    /// The Lambda handlers retry the events of such a failure and dead-letter the rest.
    pub fn is_retryable(&self) -> bool {
        match self {
            ReconcileError::LeaseBusy { .. } | ReconcileError::Contention { .. } => true,
            ReconcileError::Port { source, .. }
            | ReconcileError::Apply { source, .. }
            | ReconcileError::MarkSeen { source, .. }
            | ReconcileError::Batch { source, .. } => source.is_retryable(),
        }
    }

    /// The plan whose apply stopped part-way, or was applied whole before the failure,
    /// to log what it intended.
    pub fn plan(&self) -> Option<&Plan> {
        match self {
            ReconcileError::Apply { plan, .. } | ReconcileError::MarkSeen { plan, .. } => Some(plan),
            _ => None,
        }
    }

    /// The pool that failed; `None` for a batch-wide failure.
    pub fn pool(&self) -> Option<&str> {
        match self {
            ReconcileError::LeaseBusy { pool }
            | ReconcileError::Port { pool, .. }
            | ReconcileError::Apply { pool, .. }
            | ReconcileError::MarkSeen { pool, .. }
            | ReconcileError::Contention { pool } => Some(pool),
            ReconcileError::Batch { .. } => None,
        }
    }

    pub(super) fn port(pool: &str) -> impl FnOnce(PortError) -> ReconcileError + '_ {
        move |source| ReconcileError::Port { pool: pool.to_string(), source }
    }
}

/// Applying a plan stopped at one of its actions: those before it were carried out, it
/// and those after it were not (or not whole). The journal says which capacity calls
/// were made.
#[derive(Debug, thiserror::Error)]
#[error("applying action {} of the plan stopped: {source}", failed_at + 1)]
pub struct ApplyError {
    /// The index of the action in the plan's actions; the plan's length when taking the
    /// lease back after drains that end the plan failed.
    pub failed_at: usize,
    /// The port's error.
    #[source]
    pub source: PortError,
}

impl ApplyError {
    pub(super) fn at(failed_at: usize) -> impl FnOnce(PortError) -> ApplyError {
        move |source| ApplyError { failed_at, source }
    }
}

#[cfg(test)]
mod tests {
    use super::ApplyError;
    use crate::ports::{ErrorKind, PortError};

    #[test]
    fn an_apply_error_names_the_action_it_stopped_at() {
        let source = PortError::new(ErrorKind::Retryable, "SetDesiredCapacity", "throttled");
        let err = ApplyError::at(2)(source);
        assert_eq!(err.failed_at, 2);
        assert_eq!(err.to_string(), "applying action 3 of the plan stopped: SetDesiredCapacity: throttled");
    }
}
