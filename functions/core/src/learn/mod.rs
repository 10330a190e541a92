//! What headroom a wait target takes, learned from the pool's own history.
//!
//! Pause pods absorb the pods that arrive while new capacity is on its way: a node takes
//! the pool's *lead time* from launch to Ready, so the room needed is how much demand
//! rises within one lead time. That rise has a shape by time of day (a Monday 09:00
//! ramp), so it is kept per 15-minute slot of each day, in a ring of at most
//! `target.history` days: bounded space, never raw events. The prediction for the
//! coming window is taken over past days' largest rise in the window's slots (by time
//! of week once two weeks show the slot, else by time of day; as [`Pick`] says),
//! and never less than what rose within the span up to the newest demand. What the
//! forwarder measures corrects it: up quickly when the pool's p95 first-start wait was
//! above target, down slowly when it was met with evidence.
//!
//! Everything here is pure: observations in, a prediction with its reasons out.
//!
//! [`History`] composes one learner per job, each in its module: [`seasonal`] rises,
//! [`lead`] time, cluster-autoscaler's [`reaction`], the [`correction`] from measured
//! waits and its budget, and the room [`held`]. It is stored as one flat object
//! (see `stored`), as it always was.

use chrono::{DateTime, Duration, NaiveDate, Timelike, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::observe::{Demand, ObservedPool};

pub mod correction;
pub mod held;
pub mod hold;
pub mod lead;
pub mod reaction;
pub mod seasonal;
mod stored;

pub use correction::{Correction, FewPods, Unanswerable, WaitsSeen, WAIT_BUDGET};
pub use held::{Held, HeldRoom};
pub use hold::{DemandSeen, Hold};
pub use lead::{Launch, Lead, ASSUMED_LEAD};
pub use reaction::{Arrival, Reaction, CA_REACTION};
pub use seasonal::{DayRises, DemandSample, Seasonal, SlotLow, SLOTS_PER_DAY, SLOT_MINUTES};

/// The learner's memory, kept in the pool record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "stored::Stored", into = "stored::Stored")]
pub struct History {
    /// Rises per slot of each day, and the recent demand samples.
    pub seasonal: Seasonal,
    /// Launch-to-Ready times, and the instances launching now.
    pub lead: Lead,
    /// Cluster-autoscaler's reaction times, and the arrivals being timed.
    pub reaction: Reaction,
    /// The correction from measured waits, and what it is judged on.
    pub correction: Correction,
    /// The room the pause pods held at recent decisions.
    pub held: HeldRoom,
    /// The wait the target allows: rises are taken over the lead time less this.
    pub allowed_wait_ms: u64,
    /// The time zone days and slots are counted in (IANA name; empty: UTC), so that a
    /// 09:00 ramp stays in its slot across daylight saving changes.
    pub time_zone: String,
    /// When a target that `max` does not let through was last reported.
    pub unmet_reported_at: Option<DateTime<Utc>>,
    /// The count the wait target last asked for, held for a lead time (see [`Hold`]).
    pub hold: Option<Hold>,
}

/// A duration learned from what was seen, or the assumed one while nothing was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Learned {
    /// The duration: learned, or the assumed one.
    pub duration: Duration,
    /// Whether it was seen (false: the assumed default).
    pub observed: bool,
}

/// What decided the room held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// The percent, while no past day showed the time (raised by what was learned).
    Percent,
    /// The rise past days show for the window.
    Seasonal,
    /// An operator's override.
    Override,
}

/// Where a prediction comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The same weekday's slots in past weeks.
    TimeOfWeek {
        /// How many past weeks show the slots.
        weeks: usize,
        /// Which of their rises is taken.
        pick: Pick,
    },
    /// The same slots of every past day.
    TimeOfDay {
        /// How many past days show the slots.
        days: usize,
        /// Which of their rises is taken.
        pick: Pick,
    },
}

/// Which of the past days' (or weeks') rises a prediction takes: a p95 only over enough
/// values for one to stand for the 5 % it leaves out; below that, the largest but one, so
/// that no single odd day (or week) holds its slot; the largest while only one shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The nearest-rank 95th percentile (20 values or more).
    P95,
    /// The largest but one (2 to 19 values).
    SecondLargest,
    /// The largest (a single value).
    Largest,
}

impl Pick {
    /// Values needed for a nearest-rank p95 to leave one out.
    pub const P95_FROM: usize = 20;

    /// The pick for `n` values.
    pub fn for_count(n: usize) -> Pick {
        match n {
            n if n >= Pick::P95_FROM => Pick::P95,
            2.. => Pick::SecondLargest,
            _ => Pick::Largest,
        }
    }

    /// The value picked from `values` (0 for none).
    fn of(self, mut values: Vec<u32>) -> u32 {
        values.sort_unstable();
        match self {
            Pick::P95 => crate::quantile::nearest_rank(&values, 0.95),
            Pick::SecondLargest => values.len().checked_sub(2).and_then(|i| values.get(i).copied()),
            Pick::Largest => values.last().copied(),
        }
        .unwrap_or_default()
    }
}

/// An amount of demand: CPU and memory requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rise {
    /// CPU requests, in millicores.
    pub cpu_millis: u64,
    /// Memory requests, in bytes.
    pub memory_bytes: u64,
}

impl Rise {
    /// The larger of each, CPU and memory apart.
    pub fn max(self, other: Rise) -> Rise {
        Rise {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
        }
    }

    /// The smaller of each, CPU and memory apart.
    pub fn min(self, other: Rise) -> Rise {
        Rise {
            cpu_millis: self.cpu_millis.min(other.cpu_millis),
            memory_bytes: self.memory_bytes.min(other.memory_bytes),
        }
    }

    /// What is left of each once `other` is taken off (none below zero).
    pub fn less(self, other: Rise) -> Rise {
        Rise {
            cpu_millis: self.cpu_millis.saturating_sub(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
        }
    }

    fn of((cpu, mib): (u32, u32)) -> Rise {
        Rise { cpu_millis: u64::from(cpu), memory_bytes: u64::from(mib) << 20 }
    }
}

/// What the coming window needs room for, and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// The rise past days show for this window; `None`: no past day shows it yet (too
    /// little history: `percent` is used).
    pub seasonal: Option<(Rise, Basis)>,
    /// What of the rise past days show for the window today already brought (taken off
    /// `seasonal`): room held for it that its pods took.
    pub came: Rise,
    /// What rose within the absorb span up to the newest demand (a ramp under way goes on).
    pub recent: Rise,
    /// What of `came` rose within the absorb span (the rest came before it began: no
    /// part of `recent`).
    pub came_lately: Rise,
    /// The largest burst that made a window's waits miss the target, kept (halved every
    /// 12 h unless renewed): room for the next burst of the first day.
    pub missed: Rise,
    /// The lead time from launch to Ready (see [`History::lead`]).
    pub lead: Duration,
    /// Whether `lead` was observed or is [`ASSUMED_LEAD`].
    pub lead_observed: bool,
    /// Cluster-autoscaler's reaction (see [`History::reaction`]).
    pub reaction: Duration,
    /// Whether `reaction` was observed or is [`CA_REACTION`].
    pub reaction_observed: bool,
    /// How long a pod without room waits for a node (see [`History::node_wait`]).
    pub node_wait: Duration,
    /// The span rises are taken over (see [`History::absorb_span`]).
    pub absorb: Duration,
    /// The window the room is for.
    pub from: DateTime<Utc>,
    /// The end of the window the room is for.
    pub to: DateTime<Utc>,
    /// The correction from measured waits.
    pub correction: f64,
    /// The share of the corrected rise held while waits spend less of the target's 5 %
    /// than they may (1: all of it).
    pub budget_share: f64,
}

impl Prediction {
    /// The room the learned part asks for, corrected. A missed burst counts only while
    /// no past day shows the window: once one does, that burst is in its rise. What rose
    /// lately counts beyond what of the window's rise came today: a burst the past days
    /// foresaw is no ramp going on once it has come.
    pub fn room(&self) -> (f64, f64) {
        let rise = match self.seasonal {
            Some((seasonal, _)) => seasonal.max(self.recent_beyond_came()),
            None => self.recent.max(self.missed),
        };
        let times = self.correction * self.budget_share;
        (rise.cpu_millis as f64 * times, rise.memory_bytes as f64 * times)
    }

    /// What rose within the absorb span beyond what of the window's rise came today
    /// within it.
    pub fn recent_beyond_came(&self) -> Rise {
        self.recent.less(self.came_lately)
    }

    /// Whether pods of the window's predicted rise came today and took room held for it.
    pub fn rise_came(&self) -> bool {
        self.seasonal.is_some() && (self.came.cpu_millis > 0 || self.came.memory_bytes > 0)
    }
}

/// Keeps `records` (oldest first, each standing from its `start` to the next one's) within
/// `bound`: the two neighbours standing for the shortest time become one, as `merge` says
/// (so that it understates nothing the pair said). The newest is never merged.
fn merge_shortest<T: Copy>(
    records: &mut Vec<T>,
    bound: usize,
    start: fn(&T) -> DateTime<Utc>,
    merge: impl Fn(T, T) -> T,
) {
    while records.len() > bound.max(2) {
        let lasted = |i: usize| start(&records[i + 2]) - start(&records[i]);
        let Some(i) = (0..records.len() - 2).min_by_key(|&i| lasted(i)) else { break };
        let second = records.remove(i + 1);
        records[i] = merge(records[i], second);
    }
}

/// The local date and 15-minute slot of an instant in `tz`.
fn day_slot(at: DateTime<Utc>, tz: Tz) -> (NaiveDate, usize) {
    let local = at.with_timezone(&tz);
    (local.date_naive(), ((local.hour() * 60 + local.minute()) as i64 / SLOT_MINUTES) as usize)
}

fn mib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1 << 20)).unwrap_or(u32::MAX)
}

/// Nearest-rank quantile of `values` (0 for none).
fn quantile(mut values: Vec<u32>, q: f64) -> u32 {
    values.sort_unstable();
    crate::quantile::nearest_rank(&values, q).unwrap_or_default()
}

impl History {
    fn tz(&self) -> Tz {
        self.time_zone.parse().unwrap_or(Tz::UTC)
    }

    /// The lead time (see [`Lead::lead`]).
    pub fn lead(&self) -> Learned {
        self.lead.lead()
    }

    /// Cluster-autoscaler's reaction (see [`Reaction::reaction`]).
    pub fn reaction(&self) -> Learned {
        self.reaction.reaction()
    }

    /// The correction from measured waits as last set, a factor (see
    /// [`Correction::correction`]).
    pub fn correction(&self) -> f64 {
        self.correction.correction()
    }

    /// The correction in force at `now` (see [`Correction::correction_at`]).
    pub fn correction_at(&self, now: DateTime<Utc>) -> f64 {
        self.correction.correction_at(now)
    }

    /// See [`Correction::budget_share_permille`].
    pub fn budget_share(&self) -> f64 {
        self.correction.budget_share()
    }

    /// First starts counted over the days kept, and how many of them waited longer than
    /// the target.
    pub fn budget(&self) -> (u32, u32) {
        Correction::budget(&self.seasonal.days)
    }

    /// See [`Correction::within_budget`].
    pub fn within_budget(&self) -> bool {
        Correction::within_budget(&self.seasonal.days)
    }

    /// Pods over the target on `now`'s local day that headroom did not answer (see
    /// `Correction::measured`).
    pub fn unanswerable_today(&self, now: DateTime<Utc>) -> u32 {
        self.correction.unanswerable_on(day_slot(now, self.tz()).0)
    }

    /// See [`Correction::missed_at`].
    pub fn missed_at(&self, now: DateTime<Utc>) -> Rise {
        self.correction.missed_at(now)
    }

    /// See [`Correction::waits_last_hour`].
    pub fn waits_last_hour(&self, now: DateTime<Utc>) -> Option<(u64, u32, usize, DateTime<Utc>)> {
        self.correction.waits_last_hour(now)
    }

    /// How long a pod without room waits for a node: cluster-autoscaler's reaction and the
    /// lead time, or, when longer, the median of what pods waited in windows that missed.
    pub fn node_wait(&self) -> Duration {
        let launched = self.lead().duration + self.reaction().duration;
        if self.correction.missed_waits_secs.is_empty() {
            return launched;
        }
        // At most three times the launch: a pod held by something else (a volume, an
        // affinity) is no measure of how long a node takes.
        let waited = Duration::seconds(i64::from(quantile(self.correction.missed_waits_secs.clone(), 0.5)));
        launched.max(waited.min(launched * 3))
    }

    /// The span a rise is taken over: what arrives within it waits longer than the target
    /// allows unless room holds it (the node wait less the allowed wait; nothing needs
    /// room when a new node comes within the wait).
    pub fn absorb_span(&self) -> Duration {
        (self.node_wait() - Duration::milliseconds(self.allowed_wait_ms as i64)).max(Duration::zero())
    }

    /// A new wait target: the rises were taken over the old one's span, and the
    /// correction and missed bursts judged against it; the lead times stay true.
    /// So is one in another time zone: its days and slots are counted elsewhere.
    pub fn retarget(&mut self, allowed_wait_ms: u64, time_zone: &str) {
        *self = History {
            lead: std::mem::take(&mut self.lead),
            reaction: std::mem::take(&mut self.reaction),
            allowed_wait_ms,
            time_zone: time_zone.to_string(),
            ..History::default()
        };
    }

    /// What runs when the wait target asks for `wanted` pause pods of `pod` each, the
    /// pool's requests `demand` (see [`Hold::keep`]); `rise_came`: pods of the predicted
    /// rise came today ([`Prediction::rise_came`]).
    pub fn hold(
        &mut self,
        wanted: u32,
        now: DateTime<Utc>,
        (demand, rise_came): (Rise, bool),
        pod: Rise,
    ) -> (u32, Option<DateTime<Utc>>) {
        let lead = self.lead().duration;
        let seen = DemandSeen { requests: demand, rise_came, may_wait: self.within_budget() };
        Hold::keep(&mut self.hold, wanted, now, seen, pod, lead)
    }

    /// What the pause pods hold from `at` (read by the measurements of the windows after).
    /// `decided`: in a dry run, the room decided but not applied (`room`: what runs).
    /// `after_rise`: decided after pods of the window's predicted rise came (see
    /// [`Held::after_rise`]).
    pub fn held(
        &mut self,
        at: DateTime<Utc>,
        room: Rise,
        at_max: bool,
        by: DecidedBy,
        decided: Option<Rise>,
        after_rise: bool,
    ) {
        let lead = self.lead().duration;
        self.held.hold(Held { at, room, at_max, by, decided, after_rise }, lead);
    }

    /// The room the window from `now` needs: rises that complete within two lead times
    /// (room placed now is refilled by the nodes it makes cluster-autoscaler launch one
    /// lead time later).
    pub fn predict(&self, now: DateTime<Utc>, history_days: usize) -> Prediction {
        let Learned { duration: lead, observed: lead_observed } = self.lead();
        let Learned { duration: reaction, observed: reaction_observed } = self.reaction();
        let to = now + lead * 2;
        let (absorb, tz) = (self.absorb_span(), self.tz());
        let seasonal = self.seasonal.rise_for(now, to, absorb, history_days, tz);
        let came = seasonal.map_or(Rise::default(), |(_, _, came)| came);
        Prediction {
            seasonal: seasonal.map(|(rise, basis, _)| (rise, basis)),
            came,
            recent: self.seasonal.rise_now(now, absorb),
            came_lately: came.less(self.seasonal.slot_rise_before_span(now, absorb, tz)),
            missed: self.missed_at(now),
            lead,
            lead_observed,
            reaction,
            reaction_observed,
            node_wait: self.node_wait(),
            absorb: self.absorb_span(),
            from: now,
            to,
            correction: self.correction_at(now),
            budget_share: self.budget_share(),
        }
    }

    /// Takes in the forwarder's measurement of a window's first-start waits. A window
    /// whose p95 missed the target while the percent was in force tells one of two
    /// things: a burst larger than the room held came (it is kept, see
    /// [`Prediction::missed`]), or the room held was as large as what rose and pods
    /// still waited (the rise understates what is needed: the correction grows by half).
    /// While the seasonal prediction was in force, any miss means it was short: the
    /// correction grows by half. A miss while `headroom.max` held the pods down teaches
    /// nothing more room could give, and a miss under an override nothing the learning
    /// decided. A window that met the target over enough pods lets the correction go by
    /// 2 %. Windows of few pods are pooled and judged together once they hold enough.
    /// Returns false for a window not newer than the last one.
    pub fn measured(&mut self, waits: WaitsSeen, target_ms: u64) -> bool {
        let (tz, lead) = (self.tz(), self.lead().duration);
        self.correction.measured(waits, target_ms, &mut self.seasonal, tz, lead, &self.held)
    }

    /// Workload pods became unschedulable at `since` in a pool that had none (the
    /// forwarder's Pods Unschedulable whose oldest pod is that new; the caller judges):
    /// the earliest launch to start after them times cluster-autoscaler's reaction (see
    /// `Reaction::pods_unschedulable`). Pods waiting on what no launch answers (`max`,
    /// an affinity) are never new again, so they time nothing.
    pub fn pods_unschedulable(&mut self, since: DateTime<Utc>) {
        self.reaction.pods_unschedulable(since, &self.lead);
    }

    /// Takes in one reconcile's observation: the freshest demand and the pool's
    /// instances and nodes. `history_days` bounds the ring.
    pub fn observe(
        &mut self,
        observed: &ObservedPool,
        demand: Option<Demand>,
        now: DateTime<Utc>,
        history_days: usize,
    ) {
        for (id, start) in self.lead.look(observed, now) {
            self.launch_started(&id, start);
        }
        self.reaction.take_reactions(now);
        // The freshest demand known is the demand now: a flat stretch without forwarder
        // events is a stretch of no rise, not one of no data.
        if let Some(d) = demand {
            let sample = DemandSample { at: now, cpu_millis: d.cpu_millis, memory_bytes: d.memory_bytes, since: None };
            let (absorb, tz) = (self.absorb_span(), self.tz());
            self.seasonal.sample(sample, absorb, tz);
        }
        self.seasonal.forget(now, history_days, self.tz());
    }

    /// The ASG's own record of a launch's start (its Launch Successful event): it dates
    /// the launch better than the look that first saw the instance. The caller passes
    /// only an instance whose node is not Ready (a late event starts nothing).
    pub fn launch_started(&mut self, instance_id: &str, started: DateTime<Utc>) {
        self.reaction.launch_started(started);
        self.lead.launch_started(instance_id, started);
    }

    /// A node became Ready at `at`, as the forwarder saw it (its Node Lifecycle event):
    /// a launch followed ends here, to the second rather than at the next look.
    pub fn node_ready(&mut self, instance_id: &str, at: DateTime<Utc>) {
        self.lead.node_ready(instance_id, at);
    }
}

#[cfg(test)]
mod tests;
