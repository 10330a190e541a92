//! The percent strategy: pause pods that hold a percent of what the pool's pods request.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Bounded, Given, Reason, Strategy, Wanted};
use crate::config::HeadroomConfig;
use crate::observe::Demand;
use crate::record::{DisruptionKind, PoolRecord};
use crate::units::{format_cpu_millis, format_memory_bytes};

/// Where the percent in force comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum PercentSource {
    /// An operator's override (a headroom-override event), in force until it lapses.
    Override {
        /// When it lapses.
        until: DateTime<Utc>,
    },
    /// The headroom schedule that fired last.
    Schedule {
        /// Its cron expression, as configured.
        cron: String,
        /// The time zone it fires in.
        time_zone: String,
        /// When it last fired.
        fired_at: DateTime<Utc>,
    },
    /// The pool's `headroom.percent`: no override, no schedule fired yet.
    Default,
}

/// The percent in force at a time, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PercentInForce {
    /// The interruption boost included.
    pub percent: u32,
    /// Where the percent before the boost comes from.
    pub source: PercentSource,
    /// A recent interruption added a (non-zero) boost.
    pub boosted: bool,
}

/// The percent in force at `now`: an active override, else the schedule that fired
/// last (each in its own time zone), else the default; plus the interruption boost.
pub fn headroom_percent(cfg: &HeadroomConfig, record: &PoolRecord, now: DateTime<Utc>) -> PercentInForce {
    let (base, source) = if let Some(o) = record.headroom_override.as_ref().filter(|o| o.until > now) {
        (o.percent, PercentSource::Override { until: o.until })
    } else {
        cfg.schedules
            .iter()
            .filter_map(|s| {
                let local = now.with_timezone(&s.time_zone);
                let fired = s.cron.find_previous_occurrence(&local, true).ok()?;
                Some((fired.with_timezone(&Utc), s))
            })
            .max_by_key(|(fired, _)| *fired)
            .map(|(fired_at, s)| {
                let source = PercentSource::Schedule {
                    cron: s.cron_text.clone(),
                    time_zone: s.time_zone.name().to_string(),
                    fired_at,
                };
                (s.percent, source)
            })
            .unwrap_or((cfg.percent, PercentSource::Default))
    };
    let boosted = record
        .disruptions
        .iter()
        .any(|d| d.kind == DisruptionKind::InterruptionWarning && d.at > now - cfg.boost_for.as_chrono());
    let percent = if boosted { base.saturating_add(cfg.interruption_boost) } else { base };
    PercentInForce { percent, source, boosted: boosted && cfg.interruption_boost > 0 }
}

/// `ceil(max(cpu·p / pod_cpu, mem·p / pod_mem))`, clamped to `[min, max]`.
pub fn headroom_replicas(cfg: &HeadroomConfig, demand: &Demand, percent: u32) -> (u32, u32) {
    let per = |requested: u64, pod: u64| -> u128 {
        (u128::from(requested) * u128::from(percent)).div_ceil(100 * u128::from(pod.max(1)))
    };
    let raw = per(demand.cpu_millis, cfg.pod_cpu_millis).max(per(demand.memory_bytes, cfg.pod_memory_bytes));
    let raw = u32::try_from(raw).unwrap_or(u32::MAX);
    (raw, Bounded::new(cfg, raw).replicas)
}

/// The percent in force of the pool's requests.
pub(super) struct FromPercent;

impl Strategy for FromPercent {
    type Reason = PercentReason;

    fn wanted(self, given: &Given) -> Wanted<PercentReason> {
        let (pods, _) = headroom_replicas(given.cfg, given.demand, given.percent.percent);
        Wanted { pods, learned: false, reason: PercentReason }
    }
}

/// The percent, where it comes from, and the requests it was taken of.
pub(super) struct PercentReason;

impl Reason for PercentReason {
    fn tell(&self, given: &Given, bounded: Bounded) -> String {
        said(given, bounded)
    }
}

/// The percent sizing in words; `bounded` is what was finally wanted and let through.
pub(super) fn said(given: &Given, bounded: Bounded) -> String {
    let Given { cfg, demand, percent: PercentInForce { percent, source, boosted }, .. } = given;
    let why = match source {
        PercentSource::Override { until } => format!("override until {}", until.format("%Y-%m-%dT%H:%MZ")),
        PercentSource::Schedule { cron, time_zone, fired_at } => {
            format!("schedule `{cron}` ({time_zone}) fired {}", fired_at.format("%Y-%m-%dT%H:%MZ"))
        }
        PercentSource::Default => "default".into(),
    };
    let why = match (source, cfg.target) {
        (PercentSource::Override { .. }, _) | (_, None) => why,
        (_, Some(_)) => format!("{why}, until a past day shows this time of day"),
    };
    let boost = if *boosted {
        format!(" incl. +{}% after a recent interruption", cfg.interruption_boost)
    } else {
        String::new()
    };
    format!(
        "headroom {percent}% ({why}{boost}) of {} CPU / {} requested by {} pods, at {} CPU / {} per pause pod: {} replicas{}",
        format_cpu_millis(demand.cpu_millis),
        format_memory_bytes(demand.memory_bytes),
        demand.pods,
        format_cpu_millis(cfg.pod_cpu_millis),
        format_memory_bytes(cfg.pod_memory_bytes),
        bounded.replicas,
        bounded.clamp_said(cfg),
    )
}
