//! Correction and budget: what the forwarder measures of first-start waits corrects the
//! learned room, up quickly when the p95 was above target, down slowly when it was met
//! with evidence, and below the rise while the waits spend less of the target's 5 % than
//! they may.

use chrono::{DateTime, Duration, NaiveDate, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use super::held::HeldRoom;
use super::lead::LEAD_SAMPLES;
use super::seasonal::{DayRises, Seasonal, SLOTS_PER_DAY};
use super::{day_slot, Rise};

/// Bounds of the correction from measured waits, in thousandths.
/// Never below 1: the rise is what arrives; less room than that is a miss foretold.
pub(super) const CORRECTION_RANGE: (u32, u32) = (1000, 4000);
/// A missed burst kept is halved every this long unless another miss renews it: room for
/// bursts at no fixed time, not for one long gone (a daily burst is the seasonal part's).
const MISSED_HALF_LIFE_HOURS: f64 = 12.0;
/// The correction's excess over 1 is halved every this long since it was last set: a
/// raise answers the days it was learned on, not every day after, and a pool whose
/// windows are too small to be judged met would otherwise keep it for good.
const CORRECTION_HALF_LIFE_HOURS: f64 = 24.0;
const CORRECTION_UP: f64 = 1.5;
/// Misses with the room they asked for held raise the correction at most this many
/// times: past that, more room is not what the waiting pods lack.
pub(super) const RAISES_WITHOUT_EFFECT: u8 = 2;
const CORRECTION_DOWN: f64 = 0.98;
/// A window with fewer started pods than this is, on its own, no evidence that room can
/// shrink (windows of fewer are pooled, see [`Correction::measured`]).
const MIN_PODS_TO_SHRINK: u32 = 10;
/// Nor, with fewer than this, that it must grow.
const MIN_PODS_TO_RAISE: u32 = 3;
/// Windows kept for the last hour's measured waits (twelve of the forwarder's five
/// minutes, with margin for a shorter `BALLAST_WAITS_EVERY`).
pub(super) const MAX_HOUR_WINDOWS: usize = 24;
/// Windows of few pods are pooled over this long at most.
pub(super) const FEW_POOLED_OVER: Duration = Duration::hours(1);
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

/// The correction learner's memory (the first starts counted per day are kept with the
/// seasonal rises, in [`DayRises`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Correction {
    /// The longest wait of each window that missed the target, in seconds, newest last:
    /// how long a pod without room waits for a node, as pods see it (cluster-autoscaler's
    /// reaction, the launch, Ready, the scheduler).
    pub missed_waits_secs: Vec<u32>,
    /// Correction from measured waits, in thousandths (0: none yet, i.e. 1000).
    pub correction_permille: u32,
    /// The share of the corrected rise the room holds, in thousandths, while the waits
    /// measured spend less of the target's 5 % than they may (see
    /// [`Correction::within_budget`]); `None`: all of it.
    pub budget_share_permille: Option<u32>,
    /// The first day whose windows were counted over the target (its largest window is
    /// the pool filling up, see `Correction::budget_covers_a_window`).
    pub first_counted: Option<NaiveDate>,
    /// The last wait measurement taken in.
    pub waits: Option<WaitsSeen>,
    /// The windows with pods of the hour up to the last one (for the plan's reasons).
    pub last_hour: Vec<WaitsSeen>,
    /// The largest burst that made waits miss the target (see
    /// [`super::Prediction::missed`]), as of `missed_at`.
    pub missed: Rise,
    /// When `missed` was last set or renewed; it halves every 12 hours from then.
    pub missed_at: Option<DateTime<Utc>>,
    /// Windows of too few pods to judge alone, pooled (see `Correction::measured`).
    pub few: FewPods,
    /// When the correction was last raised: windows that began before the raised room
    /// could be in place say nothing of it (one shortfall raises it once).
    pub raised_at: Option<DateTime<Utc>>,
    /// When `correction_permille` was last set: it decays from then (`None` in records
    /// from before it was kept: from `raised_at`).
    pub correction_set_at: Option<DateTime<Utc>>,
    /// Raises after which, one lead time on, windows still missed with the room asked
    /// for held: after two, such misses raise nothing more (a window met, or a day
    /// without a raise or such a miss, starts the count again).
    pub raised_without_effect: u8,
    /// When a window last missed after a raise with the room it asked for held: a window
    /// met at that time of day starts `raised_without_effect` again, one met at another
    /// does not.
    pub without_effect_at: Option<DateTime<Utc>>,
    /// Today's pods over the target that headroom did not answer (for the reasons).
    pub unanswerable: Option<Unanswerable>,
}

/// Windows of too few pods to judge alone, pooled (over an hour at most) until they
/// hold enough pods to be judged together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FewPods {
    /// First starts counted in the pooled windows.
    pub pods: u32,
    /// How many of the pooled windows missed the target.
    pub missed_windows: u32,
    /// The start of the first window pooled: the pool is judged over all of them.
    pub since: Option<DateTime<Utc>>,
    /// The longest wait of the windows that missed.
    pub max_missed_ms: u64,
}

/// One window of first-start waits the forwarder measured (creation to the
/// scheduler's binding, for the pool's workload pods).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitsSeen {
    /// When the window began.
    pub window_start: DateTime<Utc>,
    /// When the window ended.
    pub window_end: DateTime<Utc>,
    /// Pods scheduled in the window.
    pub pods: u32,
    /// The 95th percentile of their waits, in milliseconds.
    pub p95_ms: u64,
    /// The longest of their waits, in milliseconds (0 in records from before it was kept).
    #[serde(default)]
    pub max_ms: u64,
    /// Pods that waited longer than the target (`None`: the forwarder did not count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<u32>,
    /// Of those, pods that waited while room they could have taken was free (see
    /// `PoolWaitsDetail::over_with_room`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub over_with_room: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Pods over the target that room held did not help, counted on one local day (see
/// `Correction::measured`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unanswerable {
    /// The local day.
    pub date: NaiveDate,
    /// Pods over the target that day with room free, or after the room asked for was
    /// held and the correction raised as far as such misses may raise it.
    pub pods: u32,
}

/// A measured span to learn from: one window, or pooled windows of few pods.
struct Judged {
    missed: bool,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    /// The longest wait in it (of the windows that missed, when pooled).
    max_ms: u64,
}

impl Correction {
    /// The correction as a factor of the rise, as last set (1.0 while none is learned);
    /// what is in force at a time is [`Correction::correction_at`].
    pub fn correction(&self) -> f64 {
        match self.correction_permille {
            0 => 1.0,
            p => f64::from(p) / 1000.0,
        }
    }

    /// The correction in force at `now`: its excess over 1 halved every
    /// `CORRECTION_HALF_LIFE_HOURS` since it was set.
    pub fn correction_at(&self, now: DateTime<Utc>) -> f64 {
        let set = self.correction();
        let Some(at) = self.correction_set_at.or(self.raised_at) else { return set };
        let hours = (now - at).num_seconds().max(0) as f64 / 3600.0;
        1.0 + (set - 1.0).max(0.0) * 0.5f64.powf(hours / CORRECTION_HALF_LIFE_HOURS)
    }

    /// Pods over the target on `date` that headroom did not answer.
    pub fn unanswerable_on(&self, date: NaiveDate) -> u32 {
        self.unanswerable.filter(|u| u.date == date).map_or(0, |u| u.pods)
    }

    fn count_unanswerable(&mut self, date: NaiveDate, pods: u32) {
        if pods == 0 {
            return;
        }
        let today = self.unanswerable_on(date);
        self.unanswerable = Some(Unanswerable { date, pods: today.saturating_add(pods) });
    }

    /// See [`Correction::budget_share_permille`].
    pub fn budget_share(&self) -> f64 {
        self.budget_share_permille.map_or(1.0, |p| f64::from(p.min(1000)) / 1000.0)
    }

    /// The missed burst as it stands at `now`, halved every `MISSED_HALF_LIFE_HOURS`.
    pub fn missed_at(&self, now: DateTime<Utc>) -> Rise {
        let Some(at) = self.missed_at else { return self.missed };
        let hours = (now - at).num_seconds().max(0) as f64 / 3600.0;
        let keep = 0.5f64.powf(hours / MISSED_HALF_LIFE_HOURS);
        let scale = |v: u64| (v as f64 * keep) as u64;
        Rise { cpu_millis: scale(self.missed.cpu_millis), memory_bytes: scale(self.missed.memory_bytes) }
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

    /// First starts counted over `days`, and how many of them waited longer than the
    /// target.
    pub fn budget(days: &[DayRises]) -> (u32, u32) {
        days.iter()
            .fold((0u32, 0u32), |(pods, over), d| (pods.saturating_add(d.pods), over.saturating_add(d.pods_over)))
    }

    /// Whether `days` show enough first starts, few enough of them over the target, that
    /// a window's waits may spend some of the target's 5 %: a miss is then no reason for
    /// more room, and the room may shrink below the rise.
    pub fn within_budget(days: &[DayRises]) -> bool {
        Self::budget_spent_below(days, BUDGET_SPENT_AT_MOST)
    }

    /// Whether enough first starts are counted and at most `part` of the target's 5 %
    /// of them waited longer.
    fn budget_spent_below(days: &[DayRises], part: f64) -> bool {
        // A first day's share is its first hours' (the pool filling up, the first burst):
        // the budget is weighed from the second day counted on.
        let counted: Vec<&DayRises> = days.iter().filter(|d| d.pods > 0).collect();
        let (pods, over) = Self::budget(days);
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
    fn budget_covers_a_window(&self, days: &[DayRises]) -> bool {
        let (pods, over) = Self::budget(days);
        // Not the first day counted: its largest window is the pool filling up. (Only
        // that day: once the ring has moved on, the oldest kept is a day like any other.)
        let first = self.first_counted;
        let largest = days.iter().filter(|d| Some(d.date) != first).map(|d| d.most_pods).max().unwrap_or(0);
        f64::from(pods) * WAIT_BUDGET * BUDGET_SPENT_AT_MOST - f64::from(over) >= f64::from(largest)
    }

    /// Takes in the forwarder's measurement of a window's first-start waits (see
    /// [`super::History::measured`]): its first starts are counted in `seasonal`'s day,
    /// and it is judged against the room `held` over it, one lead time `lead` before it
    /// included. Returns false for a window not newer than the last one.
    pub(super) fn measured(
        &mut self,
        waits: WaitsSeen,
        target_ms: u64,
        seasonal: &mut Seasonal,
        tz: Tz,
        lead: Duration,
        held: &HeldRoom,
    ) -> bool {
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
        // A p95 above the target says more than 5 % waited longer, whatever the buckets say.
        let rank = crate::quantile::rank(waits.pods as usize, 0.95);
        let by_p95 = if waits.p95_ms > target_ms { waits.pods as usize + 1 - rank } else { 0 };
        let by_p95 = u32::try_from(by_p95).unwrap_or(u32::MAX);
        let pods_over = waits.over.map_or(by_p95, |over| by_p95.max(over)).min(waits.pods);
        let date = day_slot(waits.window_end, tz).0;
        if let Some(over) = waits.over {
            let over = by_p95.max(over);
            self.first_counted.get_or_insert(date);
            let day = seasonal.day_mut(date);
            day.pods = day.pods.saturating_add(waits.pods);
            day.pods_over = day.pods_over.saturating_add(over.min(waits.pods));
            day.most_pods = day.most_pods.max(waits.pods);
        }
        let days = seasonal.days.as_slice();
        let within_budget = Self::within_budget(days);
        // Pods that waited beside room they could have taken say nothing of the room: the
        // window missed only if the others alone are more than its p95 lets wait.
        let with_room = waits.over_with_room.min(pods_over);
        let missed = waits.p95_ms > target_ms && (with_room == 0 || pods_over - with_room > waits.pods - rank as u32);
        if waits.p95_ms > target_ms && !missed {
            self.count_unanswerable(date, with_room);
        }
        // The budget is spent (or not known yet): room for the whole rise again. What
        // waited while less was held is that shortfall, answered now, not a sign that the
        // rise understates the room needed.
        let held_less = !within_budget && self.budget_share_permille.take().is_some_and(|p| p < 1000);
        if held_less {
            self.raised_at = Some(waits.window_end);
        } else if within_budget
            && !missed
            && Self::budget_spent_below(days, BUDGET_SHRINK_BELOW)
            && self.budget_covers_a_window(days)
        {
            // Room below the rise: some pods of a rise wait, as the target allows. Each
            // window met counts, however few its pods: the budget weighs them all. Not
            // one an override or a dry run decided: the cluster ran other room.
            let from = waits.window_start.checked_sub_signed(lead).unwrap_or(waits.window_start);
            let over = held.over(from, waits.window_end);
            if !over.overridden && !over.dry_run {
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
        let Some(from) = judged.start.checked_sub_signed(lead) else { return true };
        let held = held.over(from, judged.end);
        let factor = if judged.missed {
            self.missed_waits_secs.push(u32::try_from(judged.max_ms.div_ceil(1000)).unwrap_or(u32::MAX));
            let excess = self.missed_waits_secs.len().saturating_sub(LEAD_SAMPLES);
            self.missed_waits_secs.drain(..excess);
            // What the target lets wait: spent, not answered with room.
            if held.not_ours || within_budget {
                return true;
            }
            let burst = seasonal.largest_rise(from, judged.end, None, tz).map(Rise::of).unwrap_or_default();
            let above = |room: Rise| burst.cpu_millis > room.cpu_millis || burst.memory_bytes > room.memory_bytes;
            // Under the percent a burst above the room is one nobody foresaw: it is kept
            // for the rest of the first day (in a dry run, only one above the room decided:
            // what a live run would have missed), unless its pods over the target, waiting
            // once more, are still within the 5 % of today's first starts the target lets
            // wait. Under the seasonal prediction it is one the past days understated: more
            // room for every window, as for any other miss.
            if above(held.least) && !held.seasonal {
                let today = seasonal.days.iter().find(|d| d.date == date).filter(|_| waits.over.is_some());
                let waits_again_within_budget = today.is_some_and(|d| {
                    f64::from(d.pods_over.saturating_add(pods_over)) <= f64::from(d.pods) * WAIT_BUDGET
                });
                if above(held.decided) && !waits_again_within_budget {
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
            // A raise is in place and the room it asked for was held, yet pods still
            // waited: after two such raises, what they wait on is not room (a required
            // anti-affinity, a spread, a gate, a zonal volume). They are reported, not
            // answered, until a window is met at the time of day they came, or a day passes
            // without a raise and without such misses (a daily burst that waits on an
            // affinity misses once a day: the day it was counted is no day the waits
            // changed).
            let counted_lately = self.unanswerable.is_some_and(|u| date - u.date <= Duration::days(1));
            if !counted_lately && self.raised_at.is_some_and(|raised| judged.end - raised > Duration::hours(24)) {
                self.raised_without_effect = 0;
            }
            let times = self.correction_at(judged.end);
            let asked = |v: u64| (v as f64 * times).ceil() as u64;
            // Pause pods held room (not none at all), and as much as the rise asked for.
            let room_held = held.least.cpu_millis > 0
                && held.least.cpu_millis >= asked(burst.cpu_millis)
                && held.least.memory_bytes >= asked(burst.memory_bytes);
            if room_held && self.raised_at.is_some() {
                self.without_effect_at = Some(judged.end);
                self.raised_without_effect = self.raised_without_effect.saturating_add(1).min(RAISES_WITHOUT_EFFECT);
                if self.raised_without_effect >= RAISES_WITHOUT_EFFECT {
                    self.count_unanswerable(date, pods_over);
                    return true;
                }
            }
            self.raised_at = Some(judged.end);
            CORRECTION_UP
        } else {
            // Met where misses with the room held came (within a slot of their time of
            // day): they may raise again. Met at another time, the room serves the pods
            // it met; the misses' pods wait on something else still.
            let slot = |t: DateTime<Utc>| day_slot(t, tz).1 as i64;
            let slots_apart = |a: DateTime<Utc>, b: DateTime<Utc>| {
                let d = (slot(a) - slot(b)).rem_euclid(SLOTS_PER_DAY as i64);
                d.min(SLOTS_PER_DAY as i64 - d)
            };
            if self.without_effect_at.is_none_or(|at| slots_apart(at, judged.end) <= 1) {
                self.raised_without_effect = 0;
            }
            if held.overridden {
                // Met under an override's room: no sign the learned room was more than needed.
                return true;
            }
            CORRECTION_DOWN
        };
        // What has decayed since it was set is gone: the factor applies to what is in force.
        let (lo, hi) = CORRECTION_RANGE;
        let now = judged.end;
        self.correction_permille = ((self.correction_at(now) * factor * 1000.0).round() as u32).clamp(lo, hi);
        self.correction_set_at = Some(now);
        true
    }
}
