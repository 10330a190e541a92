//! The wait-target strategy: pause pods for the rise past days show ahead of a node's
//! lead time, so the pool's new pods start within the target's wait; the percent,
//! raised by what the waits measured, until a past day shows the time.

use chrono::{DateTime, Timelike, Utc};

use super::percent::{self, headroom_replicas};
use super::{Bounded, Given, Reason, Strategy, Wanted};
use crate::config::{HeadroomConfig, WaitTarget};
use crate::learn::{Basis, History, Pick, Prediction, Rise, SLOT_MINUTES};
use crate::observe::{Demand, ObservedPool};
use crate::record::PoolRecord;
use crate::units::{format_cpu_millis, format_memory_bytes};

/// Takes this run into the learner while a target is set and predicts the coming
/// window; without a target, forgets what was learned.
pub(super) fn learn(
    record: &mut PoolRecord,
    observed: &ObservedPool,
    demand: Option<Demand>,
    now: DateTime<Utc>,
    target: Option<WaitTarget>,
) -> Option<(Prediction, WaitTarget)> {
    let Some(target) = target else {
        record.learned = None;
        return None;
    };
    let days = target.history_days();
    let history = record.learned.get_or_insert_with(Default::default);
    let allowed_ms = target.wait_p95.0.as_millis() as u64;
    let zone = target.time_zone.name();
    let zone = if zone == "UTC" { "" } else { zone };
    if history.allowed_wait_ms != allowed_ms || history.time_zone != zone {
        // Rises were taken over the old target's span, or counted in another
        // time zone's days: start again.
        history.retarget(allowed_ms, zone);
    }
    history.observe(observed, demand, now, days);
    Some((history.predict(now, days), target))
}

/// The room the prediction asks for, with the interruption boost; the percent (as a
/// floor, or raised while history is short).
pub(super) struct FromWaitTarget {
    pub prediction: Prediction,
    pub target: WaitTarget,
}

impl Strategy for FromWaitTarget {
    type Reason = TargetReason;

    fn wanted(self, given: &Given) -> Wanted<TargetReason> {
        let Given { cfg, demand, percent, .. } = given;
        let FromWaitTarget { prediction: p, target } = self;
        let (cpu, memory) = p.room();
        let room = pods_for(cfg, cpu, memory);
        let boost = if percent.boosted { headroom_replicas(cfg, demand, cfg.interruption_boost).0 } else { 0 };
        let base =
            if percent.boosted { percent.percent.saturating_sub(cfg.interruption_boost) } else { percent.percent };
        let by_base = headroom_replicas(cfg, demand, base).0;
        if p.seasonal.is_some() {
            let pods = room.saturating_add(boost).max(if target.floor { by_base } else { 0 });
            let reason = TargetReason::Learned { p, target, room, boost, floor: by_base, base_percent: base };
            Wanted { pods, learned: true, reason }
        } else {
            // Too little history: the percent, raised (never lowered) by what
            // waits measured, and room for what rises now or missed lately.
            let corrected = (f64::from(by_base) * p.correction.max(1.0)).ceil() as u32;
            let pods = corrected.max(room).saturating_add(boost);
            Wanted { pods, learned: false, reason: TargetReason::Bootstrap { p, target, room } }
        }
    }
}

/// Why the target wants its pods.
pub(super) enum TargetReason {
    /// A past day shows the window: its rise sized the room.
    Learned {
        p: Prediction,
        target: WaitTarget,
        /// Pods for the predicted room.
        room: u32,
        /// Pods the interruption boost adds.
        boost: u32,
        /// Pods the percent (boost left out) asks for.
        floor: u32,
        base_percent: u32,
    },
    /// Too little history: the percent, with what the target adds.
    Bootstrap { p: Prediction, target: WaitTarget, room: u32 },
}

impl Reason for TargetReason {
    fn tell(&self, given: &Given, bounded: Bounded) -> String {
        match *self {
            TargetReason::Learned { p, target, room, boost, floor, base_percent } => {
                learned_reason(given, &p, target, [room, boost, floor], base_percent, bounded)
            }
            TargetReason::Bootstrap { p, target, room } => {
                let percent_part = percent::said(given, bounded);
                format!("{percent_part}; {}", bootstrap_reason(given, &p, target, room))
            }
        }
    }

    fn unmet(&self) -> Option<String> {
        Some(match self {
            TargetReason::Learned { target, .. } => format!("wait target p95 ≤ {}", target.wait_p95),
            TargetReason::Bootstrap { .. } => "percent (in force until a past day shows this time)".into(),
        })
    }
}

/// Pause pods that hold `cpu_millis` and `memory_bytes` of room.
fn pods_for(cfg: &HeadroomConfig, cpu_millis: f64, memory_bytes: f64) -> u32 {
    let per = |room: f64, pod: u64| (room / pod.max(1) as f64).ceil();
    let pods = per(cpu_millis, cfg.pod_cpu_millis).max(per(memory_bytes, cfg.pod_memory_bytes)).max(0.0);
    if pods >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        pods as u32
    }
}

/// What the target adds while the percent is in force.
fn bootstrap_reason(given: &Given, p: &Prediction, target: WaitTarget, room: u32) -> String {
    let mut parts = Vec::new();
    if p.correction > 1.0 {
        parts.push(format!("percent × {:.2} from measured waits", p.correction));
    }
    if room > 0 {
        parts.push(format!("{room} pods for {}", rises(p)));
    }
    if p.budget_share < 1.0 {
        parts.push(format!("rises × {:.2} while waits spend little of the target's 5 %", p.budget_share));
    }
    let adds = if parts.is_empty() { String::new() } else { format!(": {}", parts.join(", ")) };
    format!("wait target {}{adds}; {}", target.wait_p95, measured(given))
}

/// The recent and missed rises that count, in words.
fn rises(p: &Prediction) -> String {
    let mut said = Vec::new();
    if p.recent.cpu_millis > 0 || p.recent.memory_bytes > 0 {
        said.push(format!("{} rising now", rise(p.recent)));
    }
    if p.missed.cpu_millis > 0 || p.missed.memory_bytes > 0 {
        said.push(format!("a burst of {} that missed the target lately", rise(p.missed)));
    }
    said.join(" and ")
}

fn measured(given: &Given) -> String {
    let Some(history) = given.learned else { return "no wait measured yet".into() };
    let mut last = last_measured(history, given.now);
    match history.unanswerable_today(given.now) {
        0 => {}
        n => last += &format!("; waits not answerable by headroom: {n} pods over the target with room free (today)"),
    }
    match history.budget() {
        (0, _) => last,
        (pods, over) => format!(
            "{last}; {over} of {pods} first starts over the target in {} days kept ({:.1} %, the target allows {} %)",
            history.seasonal.days.len(),
            f64::from(over) * 100.0 / f64::from(pods),
            crate::learn::WAIT_BUDGET * 100.0,
        ),
    }
}

fn last_measured(history: &History, now: DateTime<Utc>) -> String {
    if let Some((p95_ms, pods, windows, last)) = history.waits_last_hour(now) {
        let windows = if windows == 1 { "1 window".to_string() } else { format!("{windows} windows") };
        return format!(
            "measured p95 wait last hour ≤ {:.1} s over {pods} pods ({windows}, to {})",
            p95_ms as f64 / 1000.0,
            last.format("%H:%MZ")
        );
    }
    match history.correction.waits {
        // The last window with pods is over an hour old, maybe yesterday's: dated.
        Some(w) => format!(
            "last measured p95 wait {:.1} s over {} pods (to {})",
            w.p95_ms as f64 / 1000.0,
            w.pods,
            w.window_end.format("%Y-%m-%d %H:%MZ")
        ),
        None => "no wait measured yet".into(),
    }
}

fn learned_reason(
    given: &Given,
    p: &Prediction,
    target: WaitTarget,
    [room, boost, floor]: [u32; 3],
    base_percent: u32,
    bounded: Bounded,
) -> String {
    let cfg = given.cfg;
    let Some((seasonal, basis)) = p.seasonal else { return String::new() };
    let when = match basis {
        Basis::TimeOfWeek { weeks, pick } => format!(
            "on {}s {} ({} {})",
            p.from.with_timezone(&target.time_zone).format("%A"),
            window(p, target.time_zone),
            picked(pick),
            counted(weeks, "week"),
        ),
        Basis::TimeOfDay { days, pick } => {
            format!("daily {} ({} {})", window(p, target.time_zone), picked(pick), counted(days, "day"))
        }
    };
    let node_wait = p.node_wait.num_seconds();
    let launched = (p.lead + p.reaction).num_seconds();
    let lead = if node_wait > launched {
        format!(
            "{} s ({node_wait} s for a node, as pods that missed the target waited; − {} allowed)",
            p.absorb.num_seconds(),
            target.wait_p95
        )
    } else {
        format!(
            "{} s ({} s node launch to Ready, {}; + {} s cluster-autoscaler, {}; − {} allowed)",
            p.absorb.num_seconds(),
            p.lead.num_seconds(),
            if p.lead_observed { "observed" } else { "assumed: no launch seen to Ready yet" },
            p.reaction.num_seconds(),
            if p.reaction_observed { "observed" } else { "assumed" },
            target.wait_p95,
        )
    };
    let mut extra = String::new();
    if p.came.cpu_millis > 0 || p.came.memory_bytes > 0 {
        extra += &format!(" ({} more came today)", rise(p.came));
    }
    let recent = p.recent_beyond_came();
    if recent.cpu_millis > seasonal.cpu_millis || recent.memory_bytes > seasonal.memory_bytes {
        let beyond = if p.rise_came() { " beyond what came" } else { "" };
        extra += &format!(" (or {} rising now{beyond}, the larger)", rise(recent));
    }
    if p.correction != 1.0 {
        extra += &format!(" × {:.2} from measured waits", p.correction);
    }
    if p.budget_share < 1.0 {
        extra += &format!(" × {:.2} while waits spend little of the target's 5 %", p.budget_share);
    }
    extra += &format!(": {room} pods");
    if boost > 0 {
        extra += &format!(", +{boost} after a recent interruption");
    }
    if target.floor && floor > room.saturating_add(boost) {
        extra += &format!(", held at the {base_percent}% floor ({floor})");
    }
    format!(
        "{} pause pods{}: rise of {} within {lead} {when}{extra}; {}, target {}",
        bounded.replicas,
        bounded.clamp_said(cfg),
        rise(seasonal),
        measured(given),
        target.wait_p95,
    )
}

/// Which of the past rises was taken, in words ("largest but one of 6 days").
fn picked(pick: Pick) -> &'static str {
    match pick {
        Pick::P95 => "p95 of",
        Pick::SecondLargest => "largest but one of",
        Pick::Largest => "largest of",
    }
}

/// "1 day", "6 days".
fn counted(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn rise(r: Rise) -> String {
    format!("{} CPU / {}", format_cpu_millis(r.cpu_millis), format_memory_bytes(r.memory_bytes))
}

/// The slots a prediction covers, in the target's time zone (`Z` for UTC).
fn window(p: &Prediction, tz: chrono_tz::Tz) -> String {
    let slot = |t: DateTime<Utc>| {
        let t = t.with_timezone(&tz);
        let minutes = (t.hour() * 60 + t.minute()) as i64 / SLOT_MINUTES * SLOT_MINUTES;
        (minutes / 60, minutes % 60)
    };
    let (h0, m0) = slot(p.from);
    let (h1, m1) = slot(p.to);
    let end = h1 * 60 + m1 + SLOT_MINUTES;
    let zone = if tz == chrono_tz::Tz::UTC { "Z".to_string() } else { format!(" {}", tz.name()) };
    format!("{h0:02}:{m0:02}–{:02}:{:02}{zone}", (end / 60) % 24, end % 60)
}
