//! What headroom a wait target takes, learned from the pool's own history.
//!
//! Pause pods absorb the pods that arrive while new capacity is on its way: a node takes
//! the pool's *lead time* from launch to Ready, so the room needed is how much demand
//! rises within one lead time. That rise has a shape by time of day (a Monday 09:00
//! ramp), so it is kept per 15-minute slot of each day, in a ring of at most
//! `target.history` days: bounded space, never raw events. The prediction for the
//! coming window is the 95th percentile over past days of the largest rise in the
//! window's slots (by time of week once two weeks show the slot, else by time of day),
//! and never less than what rose within the span up to the newest demand. What the
//! forwarder measures corrects it: up quickly when the pool's p95 first-start wait was
//! above target, down slowly when it was met with evidence.
//!
//! Everything here is pure: observations in, a prediction with its reasons out.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::observe::{ActivityStatus, Demand, ObservedPool};

pub const SLOT_MINUTES: i64 = 15;
pub const SLOTS_PER_DAY: usize = (24 * 60 / SLOT_MINUTES) as usize;
/// The lead time assumed until a launch has been seen through to Ready: EKS nodes of
/// current AMIs are Ready two to three minutes after launch.
pub const ASSUMED_LEAD: Duration = Duration::seconds(180);
/// Launch-to-Ready samples kept (the newest).
const LEAD_SAMPLES: usize = 20;
/// Launches followed at once; more (a 500-node scale-up) add nothing to the estimate.
const MAX_LAUNCHING: usize = 256;
/// A launch not Ready within this is a failed one, not a slow one.
const LAUNCH_GIVE_UP: Duration = Duration::hours(1);
/// Looks further apart than this cannot date a launch (Ballast reconciles each minute).
const MAX_LOOK_GAP: Duration = Duration::minutes(5);
/// Decisions of room held kept (one per change; over the bound, neighbours merge).
const MAX_HELD: usize = 96;
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
const MAX_ARRIVALS: usize = 64;
/// Demand samples kept for the rise within the absorb span (lows only; over the bound,
/// neighbours merge).
const MAX_RECENT: usize = 64;
/// Bounds of the correction from measured waits, in thousandths.
/// Never below 1: the rise is what arrives; less room than that is a miss foretold.
const CORRECTION_RANGE: (u32, u32) = (1000, 4000);
/// A missed burst kept is halved every this long unless another miss renews it: room for
/// bursts at no fixed time, not for one long gone (a daily burst is the seasonal part's).
const MISSED_HALF_LIFE_HOURS: f64 = 12.0;
const CORRECTION_UP: f64 = 1.5;
const CORRECTION_DOWN: f64 = 0.98;
/// A window with fewer started pods than this is, on its own, no evidence that room can
/// shrink (windows of fewer are pooled, see [`History::measured`]).
const MIN_PODS_TO_SHRINK: u32 = 10;
/// Nor, with fewer than this, that it must grow.
const MIN_PODS_TO_RAISE: u32 = 3;
/// Windows kept for the last hour's measured waits (twelve of the forwarder's five
/// minutes, with margin for a shorter `BALLAST_WAITS_EVERY`).
const MAX_HOUR_WINDOWS: usize = 24;
/// Windows of few pods are pooled over this long at most.
const FEW_POOLED_OVER: Duration = Duration::hours(1);
/// The share of first starts a p95 target lets wait longer than it.
pub const WAIT_BUDGET: f64 = 0.05;
/// How much of that share the learner lets waits spend on purpose: the rest is margin
/// for the days still to come (a week's p95 is met by each day's share, not their mean).
const BUDGET_SPENT_AT_MOST: f64 = 0.6;
/// The room shrinks only while less than this much of it is spent: between the two it
/// holds, so that it does not swing from none to all with each window.
const BUDGET_SHRINK_BELOW: f64 = 0.3;
/// First starts counted before their share over the target is trusted: 100 is 5 pods.
const MIN_BUDGET_PODS: u32 = 100;
/// Within the budget, each window met takes this much of the rise off the room (on top
/// of [`CORRECTION_DOWN`]): twenty met windows from the whole rise to none.
const BUDGET_STEP: f64 = 0.05;

/// The learner's memory, kept in the pool record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct History {
    /// Largest rise within the absorb span (see `absorb_span`) ending in each slot, per
    /// day (in `time_zone`), oldest first.
    pub days: Vec<DayRises>,
    /// Demand samples of the last absorb span and the last one before it: only the lows
    /// (see [`History::sample`]), at most 64.
    pub recent: Vec<DemandSample>,
    /// Launch-to-Ready times seen, in seconds, newest last.
    pub lead_secs: Vec<u32>,
    /// Cluster-autoscaler's reactions seen (from workload pods unschedulable to the
    /// earliest launch started after them), in seconds, newest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reaction_secs: Vec<u32>,
    /// Arrivals of unschedulable pods being timed, oldest first (see
    /// [`History::pods_unschedulable`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arrivals: Vec<Arrival>,
    /// The newest arrival taken in (kept after its reaction is taken): a report of pods
    /// no newer is a duplicate or a late one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_arrival: Option<DateTime<Utc>>,
    /// The longest wait of each window that missed the target, in seconds, newest last:
    /// how long a pod without room waits for a node, as pods see it (cluster-autoscaler's
    /// reaction, the launch, Ready, the scheduler).
    pub missed_waits_secs: Vec<u32>,
    /// Instances launching (no node registered when first seen), by id.
    pub launching: BTreeMap<String, Launch>,
    /// The last observation taken in.
    pub last_look: Option<DateTime<Utc>>,
    /// Correction from measured waits, in thousandths (0: none yet, i.e. 1000).
    pub correction_permille: u32,
    /// The share of the corrected rise the room holds, in thousandths, while the waits
    /// measured spend less of the target's 5 % than they may (see
    /// [`History::within_budget`]); `None`: all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_share_permille: Option<u32>,
    /// The first day whose windows were counted over the target (its largest window is
    /// the pool filling up, see [`History::budget_covers_a_window`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_counted: Option<NaiveDate>,
    /// The last wait measurement taken in.
    pub waits: Option<WaitsSeen>,
    /// The windows with pods of the hour up to the last one (for the plan's reasons).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_hour: Vec<WaitsSeen>,
    /// When a target that `max` does not let through was last reported.
    pub unmet_reported_at: Option<DateTime<Utc>>,
    /// The largest burst that made waits miss the target (see [`Prediction::missed`]),
    /// as of `missed_at`.
    pub missed: Rise,
    pub missed_at: Option<DateTime<Utc>>,
    /// The room the pause pods held at each recent decision (over the last lead time, an
    /// hour of pooled windows and a window), and whether `headroom.max` held them below
    /// what was asked.
    pub held: Vec<Held>,
    /// The wait the target allows: rises are taken over the lead time less this.
    pub allowed_wait_ms: u64,
    /// The time zone days and slots are counted in (IANA name; empty: UTC), so that a
    /// 09:00 ramp stays in its slot across daylight saving changes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time_zone: String,
    /// Windows of too few pods to judge alone, pooled (see [`History::measured`]).
    pub few: FewPods,
    /// When the correction was last raised: windows that began before the raised room
    /// could be in place say nothing of it (one shortfall raises it once).
    pub raised_at: Option<DateTime<Utc>>,
}

/// Workload pods that became unschedulable in a pool with none unschedulable before, and
/// the earliest launch seen to start after them (within [`REACTION_BOUND`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arrival {
    pub since: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FewPods {
    pub pods: u32,
    /// How many of the pooled windows missed the target.
    pub missed_windows: u32,
    /// The start of the first window pooled: the pool is judged over all of them.
    pub since: Option<DateTime<Utc>>,
    /// The longest wait of the windows that missed.
    pub max_missed_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub at: DateTime<Utc>,
    pub room: Rise,
    pub at_max: bool,
    /// An override decided it: what waits then measure says nothing of the learning.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overridden: bool,
    /// The seasonal prediction decided it (not the percent, while history was short).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seasonal: bool,
    /// In a dry run, the room decided but not applied (`room` is what the cluster runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided: Option<Rise>,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// When Ballast first saw it.
    pub seen: DateTime<Utc>,
    /// Whether that look can date the launch (the look before it was a minute or so
    /// earlier); an instance first seen at the first look or after a gap is followed
    /// only so that it is not taken for a new one later.
    pub timed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayRises {
    pub date: NaiveDate,
    /// Per slot, `None` where nothing was observed.
    pub cpu_millis: Vec<Option<u32>>,
    pub memory_mib: Vec<Option<u32>>,
    /// First starts measured in windows ending this day, counted with how many waited
    /// longer than the target (only windows whose forwarder counts them).
    #[serde(default)]
    pub pods: u32,
    #[serde(default)]
    pub pods_over: u32,
    /// The most first starts one window of the day counted.
    #[serde(default)]
    pub most_pods: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemandSample {
    pub at: DateTime<Utc>,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    /// The earliest time it stands for, when earlier samples it undercut were dropped
    /// (see [`History::sample`]); `at` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
}

impl DemandSample {
    fn since(&self) -> DateTime<Utc> {
        self.since.unwrap_or(self.at)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitsSeen {
    pub window_start: DateTime<Utc>,
    pub window_end: DateTime<Utc>,
    pub pods: u32,
    pub p95_ms: u64,
    #[serde(default)]
    pub max_ms: u64,
    /// Pods that waited longer than the target (`None`: the forwarder did not count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<u32>,
}

/// A measured span to learn from: one window, or pooled windows of few pods.
struct Judged {
    missed: bool,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    /// The longest wait in it (of the windows that missed, when pooled).
    max_ms: u64,
}

/// The room held over a span, as [`History::held_over`] sums it up.
struct HeldOver {
    least: Rise,
    decided: Rise,
    /// `max` held the pods down or an override decided them at some point.
    not_ours: bool,
    /// An override decided them at some point.
    overridden: bool,
    seasonal: bool,
    /// A dry run decided them at some point: the cluster ran other room.
    dry_run: bool,
}

/// Where a prediction comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The same weekday's slots, over this many weeks.
    TimeOfWeek { weeks: usize },
    /// The same slots of every day, over this many days.
    TimeOfDay { days: usize },
}

/// An amount of demand: CPU and memory requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rise {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

impl Rise {
    pub fn max(self, other: Rise) -> Rise {
        Rise {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
        }
    }

    pub fn min(self, other: Rise) -> Rise {
        Rise {
            cpu_millis: self.cpu_millis.min(other.cpu_millis),
            memory_bytes: self.memory_bytes.min(other.memory_bytes),
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
    /// What rose within the absorb span up to the newest demand (a ramp under way goes on).
    pub recent: Rise,
    /// The largest burst that made a window's waits miss the target, kept (halved every
    /// 12 h unless renewed): room for the next burst of the first day.
    pub missed: Rise,
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
    pub to: DateTime<Utc>,
    /// The correction from measured waits.
    pub correction: f64,
    /// The share of the corrected rise held while waits spend less of the target's 5 %
    /// than they may (1: all of it).
    pub budget_share: f64,
}

impl Prediction {
    /// The room the learned part asks for, corrected. A missed burst counts only while
    /// no past day shows the window: once one does, that burst is in its rise.
    pub fn room(&self) -> (f64, f64) {
        let rise = match self.seasonal {
            Some((seasonal, _)) => seasonal.max(self.recent),
            None => self.recent.max(self.missed),
        };
        let times = self.correction * self.budget_share;
        (rise.cpu_millis as f64 * times, rise.memory_bytes as f64 * times)
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

    /// The same local time `days` days before `at` (the later instant where that local
    /// time is skipped or repeated by a daylight saving change).
    fn days_before(&self, at: DateTime<Utc>, days: i64) -> Option<DateTime<Utc>> {
        let tz = self.tz();
        let local = at.with_timezone(&tz).naive_local().checked_sub_signed(Duration::days(days))?;
        let found = tz.from_local_datetime(&local);
        let found = found.latest().or_else(|| tz.from_local_datetime(&(local + Duration::hours(1))).latest())?;
        Some(found.with_timezone(&Utc))
    }

    /// The waits measured over the hour before `now`: a bound on their p95 (no window's
    /// p95 above it, so at most 5 % of all their pods waited longer), the pods, the
    /// windows and the end of the last one. `None` when no window with pods ended in it.
    pub fn waits_last_hour(&self, now: DateTime<Utc>) -> Option<(u64, u32, usize, DateTime<Utc>)> {
        let within: Vec<&WaitsSeen> =
            self.last_hour.iter().filter(|w| w.window_end <= now && now - w.window_end <= Duration::hours(1)).collect();
        let last = within.iter().map(|w| w.window_end).max()?;
        let p95 = within.iter().map(|w| w.p95_ms).max()?;
        let pods = within.iter().map(|w| w.pods).fold(0u32, u32::saturating_add);
        Some((p95, pods, within.len(), last))
    }

    /// The missed burst as it stands at `now`, halved every [`MISSED_HALF_LIFE_HOURS`].
    pub fn missed_at(&self, now: DateTime<Utc>) -> Rise {
        let Some(at) = self.missed_at else { return self.missed };
        let hours = (now - at).num_seconds().max(0) as f64 / 3600.0;
        let keep = 0.5f64.powf(hours / MISSED_HALF_LIFE_HOURS);
        let scale = |v: u64| (v as f64 * keep) as u64;
        Rise { cpu_millis: scale(self.missed.cpu_millis), memory_bytes: scale(self.missed.memory_bytes) }
    }

    /// A new wait target: the rises were taken over the old one's span, and the
    /// correction and missed bursts judged against it; the lead times stay true.
    /// So is one in another time zone: its days and slots are counted elsewhere.
    pub fn retarget(&mut self, allowed_wait_ms: u64, time_zone: &str) {
        *self = History {
            lead_secs: std::mem::take(&mut self.lead_secs),
            reaction_secs: std::mem::take(&mut self.reaction_secs),
            arrivals: std::mem::take(&mut self.arrivals),
            last_arrival: self.last_arrival,
            launching: std::mem::take(&mut self.launching),
            last_look: self.last_look,
            allowed_wait_ms,
            time_zone: time_zone.to_string(),
            ..History::default()
        };
    }

    /// What the pause pods hold from `at` (read by the measurements of the windows after).
    /// `decided`: in a dry run, the room decided but not applied (`room`: what runs).
    pub fn held(&mut self, at: DateTime<Utc>, room: Rise, at_max: bool, by: DecidedBy, decided: Option<Rise>) {
        let (overridden, seasonal) = (by == DecidedBy::Override, by == DecidedBy::Seasonal);
        let next = Held { at, room, at_max, overridden, seasonal, decided };
        if self.held.last().is_some_and(|h| Held { at, ..*h } == next) {
            return;
        }
        // Kept over the longest span a measurement covers (pooled windows of few pods).
        let keep_from = at - self.lead().0 - FEW_POOLED_OVER - Duration::minutes(15);
        let first_kept = self.held.iter().rposition(|h| h.at <= keep_from).unwrap_or(0);
        self.held.drain(..first_kept);
        self.held.push(next);
        // Over the bound (decisions changing every few seconds in a scale-up), the two
        // neighbours holding for the shortest time become one that says the least of both:
        // the lower room, `max` or an override if either, seasonal only if both. The span
        // stays covered; what it is judged against errs towards not raising on a miss.
        merge_shortest(
            &mut self.held,
            MAX_HELD,
            |h| h.at,
            |first, second| Held {
                at: first.at,
                room: first.room.min(second.room),
                at_max: first.at_max || second.at_max,
                overridden: first.overridden || second.overridden,
                seasonal: first.seasonal && second.seasonal,
                decided: match (first.decided, second.decided) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(first.room).min(b.unwrap_or(second.room))),
                },
            },
        );
    }

    /// The least room held over `[from, to]` (nothing recorded over the span, no
    /// decision yet, is no room) and the least decided (the same but in a dry run),
    /// whether at some point of it `max` held the pods down or an override decided them,
    /// and whether the seasonal prediction decided all of it.
    fn held_over(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> HeldOver {
        let start = self.held.iter().rposition(|h| h.at <= from).unwrap_or(0);
        let mut during = self.held[start..].iter().filter(|h| h.at <= to).peekable();
        if during.peek().is_none() {
            return HeldOver {
                least: Rise::default(),
                decided: Rise::default(),
                not_ours: false,
                overridden: false,
                seasonal: false,
                dry_run: false,
            };
        }
        let most = Rise { cpu_millis: u64::MAX, memory_bytes: u64::MAX };
        let start =
            HeldOver { least: most, decided: most, not_ours: false, overridden: false, seasonal: true, dry_run: false };
        during.fold(start, |over, h| HeldOver {
            least: over.least.min(h.room),
            decided: over.decided.min(h.decided.unwrap_or(h.room)),
            not_ours: over.not_ours || h.at_max || h.overridden,
            overridden: over.overridden || h.overridden,
            seasonal: over.seasonal && h.seasonal,
            dry_run: over.dry_run || h.decided.is_some(),
        })
    }

    /// How long a pod without room waits for a node: cluster-autoscaler's reaction and the
    /// lead time, or, when longer, the median of what pods waited in windows that missed.
    pub fn node_wait(&self) -> Duration {
        let launched = self.lead().0 + self.reaction().0;
        if self.missed_waits_secs.is_empty() {
            return launched;
        }
        // At most three times the launch: a pod held by something else (a volume, an
        // affinity) is no measure of how long a node takes.
        let waited = Duration::seconds(i64::from(quantile(self.missed_waits_secs.clone(), 0.5)));
        launched.max(waited.min(launched * 3))
    }

    /// The span a rise is taken over: what arrives within it waits longer than the target
    /// allows unless room holds it (the node wait less the allowed wait; nothing needs
    /// room when a new node comes within the wait).
    pub fn absorb_span(&self) -> Duration {
        (self.node_wait() - Duration::milliseconds(self.allowed_wait_ms as i64)).max(Duration::zero())
    }

    /// See [`History::budget_share_permille`].
    pub fn budget_share(&self) -> f64 {
        self.budget_share_permille.map_or(1.0, |p| f64::from(p.min(1000)) / 1000.0)
    }

    pub fn correction(&self) -> f64 {
        match self.correction_permille {
            0 => 1.0,
            p => f64::from(p) / 1000.0,
        }
    }

    /// The lead time: the 95th percentile of the launches seen (their median while
    /// fewer than five: one odd launch is not the pool's lead time), or the assumed one.
    pub fn lead(&self) -> (Duration, bool) {
        if self.lead_secs.is_empty() {
            return (ASSUMED_LEAD, false);
        }
        let q = if self.lead_secs.len() < 5 { 0.5 } else { 0.95 };
        (Duration::seconds(i64::from(quantile(self.lead_secs.clone(), q))), true)
    }

    /// Cluster-autoscaler's reaction: the median of those seen (a launch another writer
    /// started while pods were pending times less or more than CA took; the median is
    /// not moved by a few), or [`CA_REACTION`].
    pub fn reaction(&self) -> (Duration, bool) {
        if self.reaction_secs.is_empty() {
            return (CA_REACTION, false);
        }
        (Duration::seconds(i64::from(quantile(self.reaction_secs.clone(), 0.5))), true)
    }

    /// Workload pods became unschedulable at `since` in a pool that had none (the
    /// forwarder's Pods Unschedulable whose oldest pod is that new; the caller judges):
    /// the earliest launch to start after them, within [`REACTION_BOUND`], times
    /// cluster-autoscaler's reaction. Pods waiting on what no launch answers (`max`, an
    /// affinity) are never new again, so they time nothing. A report not newer than the
    /// last one taken is a duplicate or a late one: nothing.
    pub fn pods_unschedulable(&mut self, since: DateTime<Utc>) {
        if self.last_arrival.is_some_and(|last| since <= last) {
            return;
        }
        self.last_arrival = Some(since);
        // A launch reported before the pods (their report was retried, or came in a later
        // batch) is still followed until its node is Ready.
        let launch = self
            .launching
            .values()
            .filter(|l| l.timed && l.seen >= since && l.seen - since <= REACTION_BOUND)
            .map(|l| l.seen)
            .min();
        self.arrivals.push(Arrival { since, launch });
        if self.arrivals.len() > MAX_ARRIVALS {
            let oldest = self.arrivals.remove(0);
            self.take_reaction(oldest);
        }
    }

    /// Takes the reactions of arrivals old enough that every launch for them was seen.
    fn take_reactions(&mut self, now: DateTime<Utc>) {
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

    /// Takes in one reconcile's observation: the freshest demand and the pool's
    /// instances and nodes. `history_days` bounds the ring.
    pub fn observe(
        &mut self,
        observed: &ObservedPool,
        demand: Option<Demand>,
        now: DateTime<Utc>,
        history_days: usize,
    ) {
        // An instance first seen after a long gap (or at the first look) may have
        // launched any time before: its lead time is unknown.
        let looked_lately = self.last_look.is_some_and(|last| now - last <= MAX_LOOK_GAP);
        self.last_look = Some(now);
        self.follow_launches(observed, now, looked_lately);
        self.take_reactions(now);
        // The freshest demand known is the demand now: a flat stretch without forwarder
        // events is a stretch of no rise, not one of no data.
        if let Some(d) = demand {
            self.sample(DemandSample { at: now, cpu_millis: d.cpu_millis, memory_bytes: d.memory_bytes, since: None });
        }
        let keep_from = day_slot(now, self.tz()).0 - Duration::days(history_days as i64);
        self.days.retain(|d| d.date >= keep_from);
    }

    /// The ASG's own record of a launch's start (its Launch Successful event): it dates
    /// the launch better than the look that first saw the instance. The caller passes
    /// only an instance whose node is not Ready (a late event starts nothing).
    pub fn launch_started(&mut self, instance_id: &str, started: DateTime<Utc>) {
        // Cluster-autoscaler answers every pod pending at its scan: for each arrival before
        // it (a launch that started before the pods is not theirs), the earliest such
        // launch, whatever order the events and activities come in, and however often.
        for arrival in self.arrivals.iter_mut().filter(|a| a.since <= started && started - a.since <= REACTION_BOUND) {
            arrival.launch = Some(arrival.launch.map_or(started, |l| l.min(started)));
        }
        if let Some(launch) = self.launching.get_mut(instance_id) {
            launch.seen = launch.seen.min(started);
            launch.timed = true;
        } else if self.launching.len() < MAX_LAUNCHING {
            self.launching.insert(instance_id.to_string(), Launch { seen: started, timed: true });
        }
    }

    /// A node became Ready at `at`, as the forwarder saw it (its Node Lifecycle event):
    /// a launch followed ends here, to the second rather than at the next look.
    pub fn node_ready(&mut self, instance_id: &str, at: DateTime<Utc>) {
        let Some(launch) = self.launching.get(instance_id).copied() else { return };
        if !launch.timed || at < launch.seen || at - launch.seen >= LAUNCH_GIVE_UP {
            return;
        }
        self.launching.remove(instance_id);
        self.lead_secs.push(u32::try_from((at - launch.seen).num_seconds()).unwrap_or(u32::MAX));
        let excess = self.lead_secs.len().saturating_sub(LEAD_SAMPLES);
        self.lead_secs.drain(..excess);
    }

    /// `looked_lately`: the last look was within [`MAX_LOOK_GAP`], so an instance first
    /// seen now launched since it, and a node seen Ready now became Ready since it.
    fn follow_launches(&mut self, observed: &ObservedPool, now: DateTime<Utc>, looked_lately: bool) {
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
        let started: Vec<(String, DateTime<Utc>)> = observed
            .asgs()
            .flat_map(|a| a.activities.iter())
            .filter(|a| matches!(a.status, ActivityStatus::InProgress | ActivityStatus::Successful))
            .filter_map(|a| Some((a.launched_instance()?, a.start)))
            .filter(|(id, _)| self.launching.contains_key(*id))
            .map(|(id, start)| (id.to_string(), start))
            .collect();
        for (id, start) in started {
            self.launch_started(&id, start);
        }
    }

    /// A demand sample: the rise since the lowest demand within one lead time goes
    /// into the sample's slot.
    fn sample(&mut self, s: DemandSample) {
        if self.recent.last().is_some_and(|last| last.at >= s.at) {
            return;
        }
        let start = s.at - self.absorb_span();
        // The last sample standing for a time at or before the window's start is the
        // demand at its start.
        let before = self.recent.iter().rposition(|r| r.since() <= start).unwrap_or(0);
        self.recent.drain(..before);
        // No span (a new node comes within the allowed wait): nothing needs room.
        let within = if start < s.at { self.recent.as_slice() } else { &[] };
        let floor = |f: fn(&DemandSample) -> u64| within.iter().map(f).min().unwrap_or(f(&s)).min(f(&s));
        let rise_cpu = s.cpu_millis - floor(|r| r.cpu_millis);
        let rise_mem = s.memory_bytes - floor(|r| r.memory_bytes);
        // The samples just before this one that it undercuts in CPU and memory are no
        // window's low any more (a window holding them holds it): it stands for their time
        // instead. So reconciles every few seconds at a flat demand keep one sample, and
        // the span's start is not pushed out by their number.
        let mut s = s;
        while let Some(last) =
            self.recent.last().filter(|l| l.cpu_millis >= s.cpu_millis && l.memory_bytes >= s.memory_bytes)
        {
            s.since = Some(last.since());
            self.recent.pop();
        }
        self.recent.push(s);
        // Still too many (a steady ramp: each sample a low): the two neighbours standing
        // for the shortest time become one, at the lower of the two from the earlier time,
        // so a span may start a little lower (more room), never with its low dropped.
        merge_shortest(&mut self.recent, MAX_RECENT, DemandSample::since, |first, second| DemandSample {
            at: second.at,
            cpu_millis: first.cpu_millis.min(second.cpu_millis),
            memory_bytes: first.memory_bytes.min(second.memory_bytes),
            since: Some(first.since()),
        });
        let (date, slot) = day_slot(s.at, self.tz());
        let day = self.day_mut(date);
        let cpu = u32::try_from(rise_cpu).unwrap_or(u32::MAX);
        day.cpu_millis[slot] = Some(day.cpu_millis[slot].map_or(cpu, |old| old.max(cpu)));
        day.memory_mib[slot] = Some(day.memory_mib[slot].map_or(mib(rise_mem), |old| old.max(mib(rise_mem))));
    }

    /// The record of `date`, made if none.
    fn day_mut(&mut self, date: NaiveDate) -> &mut DayRises {
        let day = match self.days.iter().position(|d| d.date == date) {
            Some(i) => &mut self.days[i],
            None => {
                let fresh = DayRises {
                    date,
                    cpu_millis: vec![None; SLOTS_PER_DAY],
                    memory_mib: vec![None; SLOTS_PER_DAY],
                    pods: 0,
                    pods_over: 0,
                    most_pods: 0,
                };
                let at = self.days.partition_point(|d| d.date < date);
                self.days.insert(at, fresh);
                &mut self.days[at]
            }
        };
        // A record of another shape (read back from the store) is brought to this one.
        day.cpu_millis.resize(SLOTS_PER_DAY, None);
        day.memory_mib.resize(SLOTS_PER_DAY, None);
        day
    }

    /// First starts counted over the days kept, and how many of them waited longer than
    /// the target.
    pub fn budget(&self) -> (u32, u32) {
        self.days
            .iter()
            .fold((0u32, 0u32), |(pods, over), d| (pods.saturating_add(d.pods), over.saturating_add(d.pods_over)))
    }

    /// Whether the days kept show enough first starts, few enough of them over the
    /// target, that a window's waits may spend some of the target's 5 %: a miss is then
    /// no reason for more room, and the room may shrink below the rise.
    pub fn within_budget(&self) -> bool {
        self.budget_spent_below(BUDGET_SPENT_AT_MOST)
    }

    /// Whether enough first starts are counted and at most `part` of the target's 5 %
    /// of them waited longer.
    fn budget_spent_below(&self, part: f64) -> bool {
        // A first day's share is its first hours' (the pool filling up, the first burst):
        // the budget is weighed from the second day counted on.
        let counted: Vec<&DayRises> = self.days.iter().filter(|d| d.pods > 0).collect();
        let (pods, over) = self.budget();
        let allowed = |pods: u32| f64::from(pods) * WAIT_BUDGET;
        // Nor may one day spend more than its own 5 % (once that is a pod or more): the
        // days before paying for a day of misses would make a mean of a day that missed.
        let today_within =
            counted.last().is_none_or(|d| allowed(d.pods) < 1.0 || f64::from(d.pods_over) <= allowed(d.pods));
        counted.len() >= 2 && pods >= MIN_BUDGET_PODS && today_within && f64::from(over) <= allowed(pods) * part
    }

    /// Whether what is left of the budget (up to [`BUDGET_SPENT_AT_MOST`]) could take the
    /// largest window counted waiting whole: only then may the room shrink, so that one
    /// ramp met without room does not spend more than the days kept allow.
    fn budget_covers_a_window(&self) -> bool {
        let (pods, over) = self.budget();
        // Not the first day counted: its largest window is the pool filling up. (Only
        // that day: once the ring has moved on, the oldest kept is a day like any other.)
        let first = self.first_counted;
        let largest = self.days.iter().filter(|d| Some(d.date) != first).map(|d| d.most_pods).max().unwrap_or(0);
        f64::from(pods) * WAIT_BUDGET * BUDGET_SPENT_AT_MOST - f64::from(over) >= f64::from(largest)
    }

    /// What rose within the absorb span up to the newest demand sample (none if that is
    /// older than the span): a ramp under way goes on, and a rise longer ago than that has
    /// the nodes it made cluster-autoscaler launch.
    fn rise_now(&self, now: DateTime<Utc>) -> Rise {
        let span = self.absorb_span();
        let Some(last) = self.recent.last().filter(|l| now - l.at < span) else { return Rise::default() };
        let start = last.at - span;
        let from = self.recent.iter().rposition(|r| r.since() <= start).unwrap_or(0);
        let low = |f: fn(&DemandSample) -> u64| self.recent[from..].iter().map(f).min().unwrap_or(0);
        Rise {
            cpu_millis: last.cpu_millis - low(|r| r.cpu_millis),
            memory_bytes: last.memory_bytes - low(|r| r.memory_bytes),
        }
    }

    /// The largest rise recorded in the slots covering `[from, to]`, if any slot has data.
    fn largest_rise(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Option<(u32, u32)> {
        let mut found: Option<(u32, u32)> = None;
        let mut at = from;
        let tz = self.tz();
        loop {
            let (date, slot) = day_slot(at, tz);
            if let Some(day) = self.days.iter().find(|d| d.date == date) {
                if let (Some(Some(c)), Some(Some(m))) = (day.cpu_millis.get(slot), day.memory_mib.get(slot)) {
                    let (c, m) = (*c, *m);
                    found = Some(found.map_or((c, m), |(fc, fm)| (fc.max(c), fm.max(m))));
                }
            }
            if at >= to {
                break;
            }
            let Some(next) = at.checked_add_signed(Duration::minutes(SLOT_MINUTES)) else { break };
            at = next.min(to);
        }
        found
    }

    /// The room the window from `now` needs: rises that complete within two lead times
    /// (room placed now is refilled by the nodes it makes cluster-autoscaler launch one
    /// lead time later).
    pub fn predict(&self, now: DateTime<Utc>, history_days: usize) -> Prediction {
        let (lead, lead_observed) = self.lead();
        let (reaction, reaction_observed) = self.reaction();
        let to = now + lead * 2;
        // The same local times k days before (a daylight saving change between moves them
        // an hour in UTC, not in the pool's day).
        let past = |k: i64| self.largest_rise(self.days_before(now, k)?, self.days_before(to, k)?);
        let weeks: Vec<(u32, u32)> = (1..=history_days as i64 / 7).filter_map(|w| past(7 * w)).collect();
        let days: Vec<(u32, u32)> = (1..=history_days as i64).filter_map(past).collect();
        let (values, basis) = if weeks.len() >= 2 {
            (weeks.as_slice(), Basis::TimeOfWeek { weeks: weeks.len() })
        } else {
            (days.as_slice(), Basis::TimeOfDay { days: days.len() })
        };
        let seasonal = (!values.is_empty()).then(|| {
            let q = |f: fn(&(u32, u32)) -> u32| quantile(values.iter().map(f).collect(), 0.95);
            (Rise::of((q(|v| v.0), q(|v| v.1))), basis)
        });
        let recent = self.rise_now(now);
        Prediction {
            seasonal,
            recent,
            missed: self.missed_at(now),
            lead,
            lead_observed,
            reaction,
            reaction_observed,
            node_wait: self.node_wait(),
            absorb: self.absorb_span(),
            from: now,
            to,
            correction: self.correction(),
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
        if self.waits.is_some_and(|w| w.window_end >= waits.window_end) {
            return false;
        }
        self.waits = Some(waits);
        if waits.pods == 0 {
            return true;
        }
        if let Some(hour_from) = waits.window_end.checked_sub_signed(Duration::hours(1)) {
            self.last_hour.retain(|w| w.window_end > hour_from);
        }
        self.last_hour.push(waits);
        let excess = self.last_hour.len().saturating_sub(MAX_HOUR_WINDOWS);
        self.last_hour.drain(..excess);
        if let Some(over) = waits.over {
            // A p95 above the target says more than 5 % waited longer, whatever the
            // buckets say.
            let rank = crate::quantile::rank(waits.pods as usize, 0.95);
            let by_p95 = if waits.p95_ms > target_ms { waits.pods as usize + 1 - rank } else { 0 };
            let over = u32::try_from(by_p95).unwrap_or(u32::MAX).max(over);
            let date = day_slot(waits.window_end, self.tz()).0;
            self.first_counted.get_or_insert(date);
            let day = self.day_mut(date);
            day.pods = day.pods.saturating_add(waits.pods);
            day.pods_over = day.pods_over.saturating_add(over.min(waits.pods));
            day.most_pods = day.most_pods.max(waits.pods);
        }
        let within_budget = self.within_budget();
        let missed = waits.p95_ms > target_ms;
        // The budget is spent (or not known yet): room for the whole rise again. What
        // waited while less was held is that shortfall, answered now, not a sign that the
        // rise understates the room needed.
        let held_less = !within_budget && self.budget_share_permille.take().is_some_and(|p| p < 1000);
        if held_less {
            self.raised_at = Some(waits.window_end);
        } else if within_budget
            && !missed
            && self.budget_spent_below(BUDGET_SHRINK_BELOW)
            && self.budget_covers_a_window()
        {
            // Room below the rise: some pods of a rise wait, as the target allows. Each
            // window met counts, however few its pods: the budget weighs them all. Not
            // one an override or a dry run decided: the cluster ran other room.
            let from = waits.window_start.checked_sub_signed(self.lead().0).unwrap_or(waits.window_start);
            let held = self.held_over(from, waits.window_end);
            if !held.overridden && !held.dry_run {
                let share = (self.budget_share() - BUDGET_STEP).max(0.0);
                self.budget_share_permille = Some((share * 1000.0).round() as u32);
            }
        }
        let judged = if waits.pods >= MIN_PODS_TO_SHRINK || missed && waits.pods >= MIN_PODS_TO_RAISE {
            Judged { missed, start: waits.window_start, end: waits.window_end, max_ms: waits.max_ms }
        } else {
            // A window of a few pods says little alone (a pod may wait for reasons no room
            // would change), but a slow ramp is made of such windows: they are pooled (over
            // an hour at most) until they hold as many pods as a window that counts, and
            // judged together, over the span they cover.
            if self.few.since.is_some_and(|since| waits.window_end - since > FEW_POOLED_OVER) {
                self.few = FewPods::default();
            }
            let since = *self.few.since.get_or_insert(waits.window_start);
            self.few.pods += waits.pods;
            if missed {
                self.few.missed_windows += 1;
                self.few.max_missed_ms = self.few.max_missed_ms.max(waits.max_ms);
            }
            if self.few.pods < MIN_PODS_TO_SHRINK {
                return true;
            }
            let few = std::mem::take(&mut self.few);
            // One window that missed among them is one odd pod, no pattern.
            if few.missed_windows == 1 {
                return true;
            }
            Judged { missed: few.missed_windows > 1, start: since, end: waits.window_end, max_ms: few.max_missed_ms }
        };
        let (lead, _) = self.lead();
        let Some(from) = judged.start.checked_sub_signed(lead) else { return true };
        let held = self.held_over(from, judged.end);
        let factor = if judged.missed {
            self.missed_waits_secs.push(u32::try_from(judged.max_ms.div_ceil(1000)).unwrap_or(u32::MAX));
            let excess = self.missed_waits_secs.len().saturating_sub(LEAD_SAMPLES);
            self.missed_waits_secs.drain(..excess);
            // What the target lets wait: spent, not answered with room.
            if held.not_ours || within_budget {
                return true;
            }
            let burst = self.largest_rise(from, judged.end).map(Rise::of).unwrap_or_default();
            let above = |room: Rise| burst.cpu_millis > room.cpu_millis || burst.memory_bytes > room.memory_bytes;
            // Under the percent a burst above the room is one nobody foresaw: it is kept
            // for the rest of the first day (in a dry run, only one above the room decided:
            // what a live run would have missed). Under the seasonal prediction it is one
            // the past days understated: more room for every window, as for any other miss.
            if above(held.least) && !held.seasonal {
                if above(held.decided) {
                    self.missed = self.missed_at(judged.end).max(burst);
                    self.missed_at = Some(judged.end);
                }
                return true;
            }
            // The room raised last time is in place one lead time later: what waited
            // before then is the same shortfall, already answered.
            if self.raised_at.is_some_and(|raised| judged.start < raised + lead) {
                return true;
            }
            self.raised_at = Some(judged.end);
            CORRECTION_UP
        } else if held.overridden {
            // Met under an override's room: no sign the learned room was more than needed.
            return true;
        } else {
            CORRECTION_DOWN
        };
        let (lo, hi) = CORRECTION_RANGE;
        self.correction_permille = ((self.correction() * factor * 1000.0).round() as u32).clamp(lo, hi);
        true
    }
}

#[cfg(test)]
mod tests;
