//! Cluster-autoscaler's reaction: from workload pods becoming unschedulable to the
//! earliest launch started after them.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::lead::{Lead, LEAD_SAMPLES};
use super::{quantile, Learned};

/// From a pending pod to the ASG's launch, until one has been seen: cluster-autoscaler's
/// default scan interval.
pub const CA_REACTION: Duration = Duration::seconds(10);
/// A launch started longer than this after pods became unschedulable was not what
/// cluster-autoscaler launched for them (its loop takes its 10 s scan interval and, in a
/// large cluster, up to a minute more): it times no reaction.
const REACTION_BOUND: Duration = Duration::minutes(2);
/// Pods unschedulable this long ago have had every launch started within the bound
/// reported (its Launch Successful event; its scaling activity at a reconcile): their
/// reaction is taken then, from the earliest of those launches.
const REACTION_TAKEN_AFTER: Duration = Duration::minutes(5);
/// Arrivals of unschedulable pods followed at once (the forwarder reports new ones at most
/// every 5 s: up to 60 within the 5 minutes each is followed).
pub(super) const MAX_ARRIVALS: usize = 64;

/// The reaction learner's memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reaction {
    /// Cluster-autoscaler's reactions seen (from workload pods unschedulable to the
    /// earliest launch started after them), in seconds, newest last.
    pub reaction_secs: Vec<u32>,
    /// Arrivals of unschedulable pods being timed, oldest first (see
    /// `Reaction::pods_unschedulable`).
    pub arrivals: Vec<Arrival>,
    /// The newest arrival taken in (kept after its reaction is taken): a report of pods
    /// no newer is a duplicate or a late one.
    pub last_arrival: Option<DateTime<Utc>>,
}

/// Workload pods that became unschedulable in a pool with none unschedulable before, and
/// the earliest launch seen to start after them (within `REACTION_BOUND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arrival {
    /// When the pods became unschedulable (the oldest's time, from the forwarder).
    pub since: DateTime<Utc>,
    /// When the first launch seen after them started; `None` while none is seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<DateTime<Utc>>,
}

impl Reaction {
    /// Cluster-autoscaler's reaction: the median of those seen (a launch another writer
    /// started while pods were pending times less or more than CA took; the median is
    /// not moved by a few), or [`CA_REACTION`].
    pub fn reaction(&self) -> Learned {
        if self.reaction_secs.is_empty() {
            return Learned { duration: CA_REACTION, observed: false };
        }
        Learned { duration: Duration::seconds(i64::from(quantile(self.reaction_secs.clone(), 0.5))), observed: true }
    }

    /// Workload pods became unschedulable at `since` in a pool that had none: the
    /// earliest launch to start after them, within [`REACTION_BOUND`], times
    /// cluster-autoscaler's reaction. A report not newer than the last one taken is a
    /// duplicate or a late one: nothing.
    pub(super) fn pods_unschedulable(&mut self, since: DateTime<Utc>, lead: &Lead) {
        if self.last_arrival.is_some_and(|last| since <= last) {
            return;
        }
        self.last_arrival = Some(since);
        // A launch reported before the pods (their report was retried, or came in a later
        // batch) is still followed until its node is Ready.
        let launch = lead.first_timed_within(since, REACTION_BOUND);
        self.arrivals.push(Arrival { since, launch });
        if self.arrivals.len() > MAX_ARRIVALS {
            let oldest = self.arrivals.remove(0);
            self.take_reaction(oldest);
        }
    }

    /// A launch started at `started`: cluster-autoscaler answers every pod pending at its
    /// scan, so for each arrival before it (a launch that started before the pods is not
    /// theirs), the earliest such launch, whatever order the events and activities come
    /// in, and however often.
    pub(super) fn launch_started(&mut self, started: DateTime<Utc>) {
        for arrival in self.arrivals.iter_mut().filter(|a| a.since <= started && started - a.since <= REACTION_BOUND) {
            arrival.launch = Some(arrival.launch.map_or(started, |l| l.min(started)));
        }
    }

    /// Takes the reactions of arrivals old enough that every launch for them was seen.
    pub(super) fn take_reactions(&mut self, now: DateTime<Utc>) {
        while let Some(&first) = self.arrivals.first().filter(|a| now - a.since >= REACTION_TAKEN_AFTER) {
            self.arrivals.remove(0);
            self.take_reaction(first);
        }
    }

    fn take_reaction(&mut self, arrival: Arrival) {
        let Some(launch) = arrival.launch else { return };
        self.reaction_secs.push(u32::try_from((launch - arrival.since).num_seconds()).unwrap_or(u32::MAX));
        let excess = self.reaction_secs.len().saturating_sub(LEAD_SAMPLES);
        self.reaction_secs.drain(..excess);
    }
}
