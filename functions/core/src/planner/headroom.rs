//! Headroom: pause pods sized from the pool's workload requests.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::Work;
use chrono::Timelike;

use crate::config::{HeadroomConfig, WaitTarget};
use crate::learn::{Basis, DecidedBy, Prediction, Rise, SLOT_MINUTES};
use crate::observe::Demand;
use crate::plan::{ActionKind, HeadroomDecision};
use crate::record::{DisruptionKind, PoolRecord};
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

/// When a target `max` does not let through is told again.
const UNMET_REPORT_EVERY: chrono::Duration = chrono::Duration::hours(1);

impl Work<'_> {
    pub(super) fn headroom(&mut self) {
        let cfg = &self.cfg.headroom;
        // The freshest demand wins: the forwarder's event or the reconcile's own count.
        let demand = [self.record.demand, self.observed.demand].into_iter().flatten().max_by_key(|d| d.observed_at);
        let prediction = match cfg.target {
            Some(target) => {
                let days = target.history_days();
                let history = self.record.learned.get_or_insert_with(Default::default);
                let allowed_ms = target.wait_p95.0.as_millis() as u64;
                let zone = target.time_zone.name();
                let zone = if zone == "UTC" { "" } else { zone };
                if history.allowed_wait_ms != allowed_ms || history.time_zone != zone {
                    // Rises were taken over the old target's span, or counted in another
                    // time zone's days: start again.
                    history.retarget(allowed_ms, zone);
                }
                history.observe(self.observed, demand, self.now, days);
                Some((history.predict(self.now, days), target))
            }
            None => {
                self.record.learned = None;
                None
            }
        };
        let Some(demand) = demand else {
            self.note("no demand known yet (no forwarder event, no pod listing): headroom unchanged");
            return;
        };
        let (percent, source, boosted) = headroom_percent(cfg, &self.record, self.now);
        // An override is what the operator says now: it wins over the target.
        let prediction = prediction.filter(|_| !matches!(source, PercentSource::Override { .. }));
        let (raw, replicas, learned, reason) = match prediction {
            None => {
                let (raw, replicas) = headroom_replicas(cfg, &demand, percent);
                (raw, replicas, false, self.percent_reason(percent, &source, boosted, &demand, raw, replicas))
            }
            Some((p, target)) => {
                let (cpu, memory) = p.room();
                let room = pods_for(cfg, cpu, memory);
                let boost = if boosted { headroom_replicas(cfg, &demand, cfg.interruption_boost).0 } else { 0 };
                let base = if boosted { percent.saturating_sub(cfg.interruption_boost) } else { percent };
                let by_base = headroom_replicas(cfg, &demand, base).0;
                let learned = p.seasonal.is_some();
                let raw = if learned {
                    room.saturating_add(boost).max(if target.floor { by_base } else { 0 })
                } else {
                    // Too little history: the percent, raised (never lowered) by what
                    // waits measured, and room for what rises now or missed lately.
                    let corrected = (f64::from(by_base) * p.correction.max(1.0)).ceil() as u32;
                    corrected.max(room).saturating_add(boost)
                };
                let replicas = raw.clamp(cfg.min, cfg.max.max(cfg.min));
                let reason = if learned {
                    self.learned_reason(&p, target, [room, boost, by_base], base, raw, replicas)
                } else {
                    let percent_part = self.percent_reason(percent, &source, boosted, &demand, raw, replicas);
                    format!("{percent_part}; {}", self.bootstrap_reason(&p, target, room))
                };
                if raw > cfg.max {
                    self.report_unmet(target, raw, learned);
                }
                (raw, replicas, learned, reason)
            }
        };
        // What the pause pods hold from now, whatever decided it (an override too): the
        // next wait measurements are judged against it. A dry run changes nothing: the
        // pods the cluster runs are what the waits measure, beside what was decided.
        let room = |replicas: u32| Rise {
            cpu_millis: u64::from(replicas).saturating_mul(cfg.pod_cpu_millis),
            memory_bytes: u64::from(replicas).saturating_mul(cfg.pod_memory_bytes),
        };
        let dry_run = self.input.dry_run;
        let running = if dry_run { self.observed.headroom_replicas.unwrap_or(0) } else { replicas };
        if let Some(history) = self.record.learned.as_mut() {
            // In a dry run the prediction decided nothing the cluster holds: a burst above
            // the room there is no sign the prediction was short.
            let by = match (&source, learned && !dry_run) {
                (PercentSource::Override { .. }, _) => DecidedBy::Override,
                (_, true) => DecidedBy::Seasonal,
                (_, false) => DecidedBy::Percent,
            };
            history.held(self.now, room(running), raw > replicas && !dry_run, by, dry_run.then(|| room(replicas)));
        }
        self.headroom = Some(HeadroomDecision { percent, wanted: raw, replicas, learned });
        if self.observed.headroom_replicas == Some(replicas) {
            return;
        }
        self.act(
            ActionKind::SetHeadroomReplicas {
                namespace: cfg.namespace.clone(),
                from: self.observed.headroom_replicas,
                to: replicas,
            },
            reason,
        );
    }

    fn percent_reason(
        &self,
        percent: u32,
        source: &PercentSource,
        boosted: bool,
        demand: &Demand,
        raw: u32,
        replicas: u32,
    ) -> String {
        let cfg = &self.cfg.headroom;
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
        let boost = if boosted {
            format!(" incl. +{}% after a recent interruption", cfg.interruption_boost)
        } else {
            String::new()
        };
        let clamp =
            if raw != replicas { format!(", clamped from {raw} to [{}, {}]", cfg.min, cfg.max) } else { String::new() };
        format!(
            "headroom {percent}% ({why}{boost}) of {} CPU / {} requested by {} pods, at {} CPU / {} per pause pod: {replicas} replicas{clamp}",
            format_cpu_millis(demand.cpu_millis),
            format_memory_bytes(demand.memory_bytes),
            demand.pods,
            format_cpu_millis(cfg.pod_cpu_millis),
            format_memory_bytes(cfg.pod_memory_bytes),
        )
    }

    /// What the target adds while the percent is in force.
    fn bootstrap_reason(&self, p: &Prediction, target: WaitTarget, room: u32) -> String {
        let mut parts = Vec::new();
        if p.correction > 1.0 {
            parts.push(format!("percent × {:.2} from measured waits", p.correction));
        }
        if room > 0 {
            parts.push(format!("{room} pods for {}", self.rises(p)));
        }
        if p.budget_share < 1.0 {
            parts.push(format!("rises × {:.2} while waits spend little of the target's 5 %", p.budget_share));
        }
        let adds = if parts.is_empty() { String::new() } else { format!(": {}", parts.join(", ")) };
        format!("wait target {}{adds}; {}", target.wait_p95, self.measured())
    }

    /// The recent and missed rises that count, in words.
    fn rises(&self, p: &Prediction) -> String {
        let mut said = Vec::new();
        if p.recent.cpu_millis > 0 || p.recent.memory_bytes > 0 {
            said.push(format!("{} rising now", rise(p.recent)));
        }
        if p.missed.cpu_millis > 0 || p.missed.memory_bytes > 0 {
            said.push(format!("a burst of {} that missed the target lately", rise(p.missed)));
        }
        said.join(" and ")
    }

    fn measured(&self) -> String {
        let Some(history) = self.record.learned.as_ref() else { return "no wait measured yet".into() };
        let last = self.last_measured(history);
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

    fn last_measured(&self, history: &crate::learn::History) -> String {
        if let Some((p95_ms, pods, windows, last)) = history.waits_last_hour(self.now) {
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
        &self,
        p: &Prediction,
        target: WaitTarget,
        [room, boost, floor]: [u32; 3],
        base_percent: u32,
        raw: u32,
        replicas: u32,
    ) -> String {
        let cfg = &self.cfg.headroom;
        let Some((seasonal, basis)) = p.seasonal else { return String::new() };
        let when = match basis {
            Basis::TimeOfWeek { weeks } => format!(
                "on {}s {} ({weeks} weeks)",
                p.from.with_timezone(&target.time_zone).format("%A"),
                window(p, target.time_zone)
            ),
            Basis::TimeOfDay { days } => format!("daily {} ({days} days)", window(p, target.time_zone)),
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
        if p.recent.cpu_millis > seasonal.cpu_millis || p.recent.memory_bytes > seasonal.memory_bytes {
            extra += &format!(" (or {} rising now, the larger)", rise(p.recent));
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
        let clamp =
            if raw != replicas { format!(", clamped from {raw} to [{}, {}]", cfg.min, cfg.max) } else { String::new() };
        format!(
            "{replicas} pause pods{clamp}: p95 rise of {} within {lead} {when}{extra}; {}, target {}",
            rise(seasonal),
            self.measured(),
            target.wait_p95,
        )
    }

    fn report_unmet(&mut self, target: WaitTarget, needed: u32, learned: bool) {
        let history = self.record.learned.get_or_insert_with(Default::default);
        if history.unmet_reported_at.is_some_and(|at| self.now - at < UNMET_REPORT_EVERY) {
            return;
        }
        history.unmet_reported_at = Some(self.now);
        let what = if learned {
            format!("wait target p95 ≤ {}", target.wait_p95)
        } else {
            "percent (in force until a past day shows this time)".into()
        };
        self.note(format!(
            "{what} cannot be met within headroom.max: it needs {needed} pause pods, max is {} (told once an hour)",
            self.cfg.headroom.max
        ));
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
