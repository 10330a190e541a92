//! Lead time: how long a launch takes to become a Ready node, timed from the look (or
//! Auto Scaling's own record) that saw it start to the node's Ready.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::Learned;
use crate::observe::{ActivityStatus, ObservedPool};

/// The lead time assumed until a launch has been seen through to Ready: EKS nodes of
/// current AMIs are Ready two to three minutes after launch.
pub const ASSUMED_LEAD: Duration = Duration::seconds(180);
/// Launch-to-Ready samples kept (the newest); the other learners keep as many samples.
pub(super) const LEAD_SAMPLES: usize = 20;
/// Launches followed at once; more (a 500-node scale-up) add nothing to the estimate.
pub(super) const MAX_LAUNCHING: usize = 256;
/// A launch not Ready within this is a failed one, not a slow one.
const LAUNCH_GIVE_UP: Duration = Duration::hours(1);
/// Looks further apart than this cannot date a launch (Ballast reconciles each minute).
const MAX_LOOK_GAP: Duration = Duration::minutes(5);

/// The lead-time learner's memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lead {
    /// Launch-to-Ready times seen, in seconds, newest last.
    pub lead_secs: Vec<u32>,
    /// Instances launching (no node registered when first seen), by id.
    pub launching: BTreeMap<String, Launch>,
    /// The last observation taken in.
    pub last_look: Option<DateTime<Utc>>,
}

/// An instance seen launching, followed until its node registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// When Ballast first saw it.
    pub seen: DateTime<Utc>,
    /// Whether that look can date the launch (the look before it was a minute or so
    /// earlier); an instance first seen at the first look or after a gap is followed
    /// only so that it is not taken for a new one later.
    pub timed: bool,
}

impl Lead {
    /// The lead time: the median of the launches seen while fewer than `LEAD_SAMPLES` (20),
    /// then the 95th percentile of them once the slowest tenth is set aside; or the
    /// assumed one. One launch (a stuck spot request, an AMI pull that timed out) is
    /// never the pool's lead time: of twenty, the third slowest is.
    pub fn lead(&self) -> Learned {
        if self.lead_secs.is_empty() {
            return Learned { duration: ASSUMED_LEAD, observed: false };
        }
        let mut sorted = self.lead_secs.clone();
        sorted.sort_unstable();
        let secs = if sorted.len() < LEAD_SAMPLES {
            crate::quantile::nearest_rank(&sorted, 0.5)
        } else {
            let kept = sorted.len() - sorted.len().div_ceil(10);
            crate::quantile::nearest_rank(&sorted[..kept], 0.95)
        };
        Learned { duration: Duration::seconds(i64::from(secs.unwrap_or_default())), observed: true }
    }

    /// The earliest launch followed and dated that started within `bound` after `since`.
    pub(super) fn first_timed_within(&self, since: DateTime<Utc>, bound: Duration) -> Option<DateTime<Utc>> {
        self.launching.values().filter(|l| l.timed && l.seen >= since && l.seen - since <= bound).map(|l| l.seen).min()
    }

    /// Auto Scaling's record of a launch's start: it dates the launch better than the
    /// look that first saw the instance.
    pub(super) fn launch_started(&mut self, instance_id: &str, started: DateTime<Utc>) {
        if let Some(launch) = self.launching.get_mut(instance_id) {
            launch.seen = launch.seen.min(started);
            launch.timed = true;
        } else if self.launching.len() < MAX_LAUNCHING {
            self.launching.insert(instance_id.to_string(), Launch { seen: started, timed: true });
        }
    }

    /// A node became Ready at `at`: a launch followed ends here.
    pub(super) fn node_ready(&mut self, instance_id: &str, at: DateTime<Utc>) {
        let Some(launch) = self.launching.get(instance_id).copied() else { return };
        if !launch.timed || at < launch.seen || at - launch.seen >= LAUNCH_GIVE_UP {
            return;
        }
        self.launching.remove(instance_id);
        self.lead_secs.push(u32::try_from((at - launch.seen).num_seconds()).unwrap_or(u32::MAX));
        let excess = self.lead_secs.len().saturating_sub(LEAD_SAMPLES);
        self.lead_secs.drain(..excess);
    }

    /// Takes in one look at the pool's instances and nodes: launches seen through to
    /// Ready are timed, new ones followed. Returns the launches followed that Auto
    /// Scaling's scaling activities date (instance, start), for the caller to take in as
    /// it takes a Launch Successful event.
    pub(super) fn look(&mut self, observed: &ObservedPool, now: DateTime<Utc>) -> Vec<(String, DateTime<Utc>)> {
        // An instance first seen after a long gap (or at the first look) may have
        // launched any time before: its lead time is unknown.
        let looked_lately = self.last_look.is_some_and(|last| now - last <= MAX_LOOK_GAP);
        self.last_look = Some(now);
        self.follow_launches(observed, now, looked_lately)
    }

    /// `looked_lately`: the last look was within [`MAX_LOOK_GAP`], so an instance first
    /// seen now launched since it, and a node seen Ready now became Ready since it.
    fn follow_launches(
        &mut self,
        observed: &ObservedPool,
        now: DateTime<Utc>,
        looked_lately: bool,
    ) -> Vec<(String, DateTime<Utc>)> {
        let ready: BTreeSet<&str> = observed.nodes.iter().filter(|n| n.ready).map(|n| n.instance_id.as_str()).collect();
        let registered: BTreeSet<&str> = observed.nodes.iter().map(|n| n.instance_id.as_str()).collect();
        let live: BTreeSet<&str> = observed
            .asgs()
            .flat_map(|a| a.instances.iter())
            .filter(|i| i.lifecycle_state.is_live())
            .map(|i| i.id.as_str())
            .collect();
        let mut done = Vec::new();
        self.launching.retain(|id, launch| {
            let fresh = now - launch.seen < LAUNCH_GIVE_UP;
            if ready.contains(id.as_str()) {
                // Counted only when both ends are known to within a look.
                if launch.timed && fresh && looked_lately {
                    done.push((now - launch.seen).num_seconds().max(0));
                }
                return false;
            }
            live.contains(id.as_str()) && fresh
        });
        for secs in done {
            self.lead_secs.push(u32::try_from(secs).unwrap_or(u32::MAX));
        }
        let excess = self.lead_secs.len().saturating_sub(LEAD_SAMPLES);
        self.lead_secs.drain(..excess);
        for id in live {
            if self.launching.len() >= MAX_LAUNCHING {
                break;
            }
            // Only an instance whose node has not even registered is launching: a known
            // node that is not Ready (a kubelet restart, a partition) is no launch.
            if !registered.contains(id) && !self.launching.contains_key(id) {
                self.launching.insert(id.to_string(), Launch { seen: now, timed: looked_lately });
            }
        }
        // Auto Scaling's own record of a launch's start (its scaling activities, read with
        // the pool) dates it as its Launch Successful event would: to the second, where
        // that event was lost or is late, rather than to the look. Only a launch followed
        // (live, its node not Ready: the rest were dropped above).
        observed
            .asgs()
            .flat_map(|a| a.activities.iter())
            .filter(|a| matches!(a.status, ActivityStatus::InProgress | ActivityStatus::Successful))
            .filter_map(|a| Some((a.launched_instance()?, a.start)))
            .filter(|(id, _)| self.launching.contains_key(*id))
            .map(|(id, start)| (id.to_string(), start))
            .collect()
    }
}
