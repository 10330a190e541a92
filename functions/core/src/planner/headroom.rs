//! Headroom: pause pods sized from the pool's workload requests.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::Work;
use crate::config::HeadroomConfig;
use crate::model::{Demand, DisruptionKind, PoolRecord};
use crate::plan::{ActionKind, HeadroomDecision};
use crate::units::{format_cpu_millis, format_memory_bytes};

/// Where the percent in force comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum PercentSource {
    Override { until: DateTime<Utc> },
    Schedule { cron: String, time_zone: String, fired_at: DateTime<Utc> },
    Default,
}

/// The percent in force at `now`: an active override, else the schedule that fired
/// last (each in its own time zone), else the default; plus the interruption boost.
pub fn headroom_percent(cfg: &HeadroomConfig, record: &PoolRecord, now: DateTime<Utc>) -> (u32, PercentSource, bool) {
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
    (percent, source, boosted && cfg.interruption_boost > 0)
}

/// `ceil(max(cpu·p / pod_cpu, mem·p / pod_mem))`, clamped to `[min, max]`.
pub fn headroom_replicas(cfg: &HeadroomConfig, demand: &Demand, percent: u32) -> (u32, u32) {
    let per = |requested: u64, pod: u64| -> u128 {
        (u128::from(requested) * u128::from(percent)).div_ceil(100 * u128::from(pod.max(1)))
    };
    let raw = per(demand.cpu_millis, cfg.pod_cpu_millis).max(per(demand.memory_bytes, cfg.pod_memory_bytes));
    let raw = u32::try_from(raw).unwrap_or(u32::MAX);
    (raw, raw.clamp(cfg.min, cfg.max.max(cfg.min)))
}

impl Work<'_> {
    pub(super) fn headroom(&mut self) {
        let cfg = &self.cfg.headroom;
        // The freshest demand wins: the forwarder's event or the reconcile's own count.
        let demand = [self.record.demand, self.observed.demand].into_iter().flatten().max_by_key(|d| d.observed_at);
        let Some(demand) = demand else {
            self.note("no demand known yet (no forwarder event, no pod listing): headroom unchanged");
            return;
        };
        let (percent, source, boosted) = headroom_percent(cfg, &self.record, self.now);
        let (raw, replicas) = headroom_replicas(cfg, &demand, percent);
        self.headroom = Some(HeadroomDecision { percent, wanted: raw, replicas });
        if self.observed.headroom_replicas == Some(replicas) {
            return;
        }
        let why = match &source {
            PercentSource::Override { until } => format!("override until {}", until.format("%Y-%m-%dT%H:%MZ")),
            PercentSource::Schedule { cron, time_zone, fired_at } => {
                format!("schedule `{cron}` ({time_zone}) fired {}", fired_at.format("%Y-%m-%dT%H:%MZ"))
            }
            PercentSource::Default => "default".into(),
        };
        let boost = if boosted {
            format!(" incl. +{}% after a recent interruption", cfg.interruption_boost)
        } else {
            String::new()
        };
        let clamp =
            if raw != replicas { format!(", clamped from {raw} to [{}, {}]", cfg.min, cfg.max) } else { String::new() };
        let reason = format!(
            "headroom {percent}% ({why}{boost}) of {} CPU / {} requested by {} pods, at {} CPU / {} per pause pod: {replicas} replicas{clamp}",
            format_cpu_millis(demand.cpu_millis),
            format_memory_bytes(demand.memory_bytes),
            demand.pods,
            format_cpu_millis(cfg.pod_cpu_millis),
            format_memory_bytes(cfg.pod_memory_bytes),
        );
        self.act(
            ActionKind::SetHeadroomReplicas {
                namespace: cfg.namespace.clone(),
                from: self.observed.headroom_replicas,
                to: replicas,
            },
            reason,
        );
    }
}
