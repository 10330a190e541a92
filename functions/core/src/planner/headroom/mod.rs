//! Headroom: pause pods that hold room for the pool's next pods.
//!
//! A [`Strategy`] says how many pause pods it wants and why: a percent of the pool's
//! requests ([`percent`]) or what a wait target learned ([`wait_target`]). This module
//! picks one from the pool's config (an override's percent wins over a target) and
//! applies what holds whichever decided: the `min`/`max` bounds, telling a target that
//! `max` cuts, and what the pods hold from now for the wait learner.

mod percent;
mod slots;
mod wait_target;

use chrono::{DateTime, Utc};

pub use percent::{headroom_percent, headroom_replicas, PercentInForce, PercentSource};

use super::Work;
use crate::config::HeadroomConfig;
use crate::learn::{DecidedBy, History, Rise};
use crate::observe::Demand;
use crate::plan::{ActionKind, HeadroomDecision};
use crate::shape;

/// What a strategy is given of the planner's state.
pub(super) struct Given<'a> {
    pub cfg: &'a HeadroomConfig,
    /// The freshest demand: the forwarder's event or the reconcile's own count.
    pub demand: &'a Demand,
    /// The percent in force: override, schedule or default, with the interruption boost.
    pub percent: &'a PercentInForce,
    /// What the wait learner holds; `None` without a wait target.
    pub learned: Option<&'a History>,
    pub now: DateTime<Utc>,
}

/// The pause pods a strategy wants, before the bounds, and why.
pub(super) struct Wanted<R> {
    pub pods: u32,
    /// The count is the rise past days show (the wait target learned it), not a percent.
    pub learned: bool,
    pub reason: R,
}

/// A way to size the headroom.
pub(super) trait Strategy {
    type Reason: Reason;

    fn wanted(self, given: &Given) -> Wanted<Self::Reason>;
}

/// Why a strategy wants its pods, told once the bounds are applied.
pub(super) trait Reason {
    fn tell(&self, given: &Given, bounded: Bounded) -> String;

    /// What cannot be met when `max` cuts what is wanted, to be told apart from the
    /// action's reason; `None`: the clamp in the reason says enough.
    fn unmet(&self) -> Option<String> {
        None
    }
}

/// A wanted count and what `[min, max]` lets through.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounded {
    pub wanted: u32,
    pub replicas: u32,
}

impl Bounded {
    fn new(cfg: &HeadroomConfig, wanted: u32) -> Self {
        Bounded { wanted, replicas: wanted.clamp(cfg.min, cfg.max.max(cfg.min)) }
    }

    /// `, clamped from W to [min, max]` when the bounds changed the count.
    fn clamp_said(self, cfg: &HeadroomConfig) -> String {
        if self.wanted != self.replicas {
            format!(", clamped from {} to [{}, {}]", self.wanted, cfg.min, cfg.max)
        } else {
            String::new()
        }
    }
}

/// What a strategy decided, the bounds applied and the reason told.
struct Decided {
    bounded: Bounded,
    learned: bool,
    reason: String,
    unmet: Option<String>,
}

fn decide<S: Strategy>(strategy: S, given: &Given) -> Decided {
    let wanted = strategy.wanted(given);
    let bounded = Bounded::new(given.cfg, wanted.pods);
    Decided {
        bounded,
        learned: wanted.learned,
        reason: wanted.reason.tell(given, bounded),
        unmet: wanted.reason.unmet().filter(|_| bounded.wanted > given.cfg.max),
    }
}

/// When a target `max` does not let through is told again.
const UNMET_REPORT_EVERY: chrono::Duration = chrono::Duration::hours(1);

impl Work<'_> {
    pub(super) fn headroom(&mut self) {
        let cfg = &self.cfg.headroom;
        // The freshest demand wins: the forwarder's event or the reconcile's own count.
        let demand = [self.record.demand, self.observed.demand].into_iter().flatten().max_by_key(|d| d.observed_at);
        // The learner takes in every run while a target is set, whatever sizes the pods.
        let prediction = wait_target::learn(&mut self.record, self.observed, demand, self.now, cfg.target);
        let Some(demand) = demand else {
            self.note("no demand known yet (no forwarder event, no pod listing): headroom unchanged");
            return;
        };
        let percent = headroom_percent(cfg, &self.record, self.now);
        let given =
            Given { cfg, demand: &demand, percent: &percent, learned: self.record.learned.as_ref(), now: self.now };
        // An override is what the operator says now: it wins over the target.
        let by_target = prediction.filter(|_| !matches!(percent.source, PercentSource::Override { .. }));
        let decided = match by_target {
            None => decide(percent::FromPercent, &given),
            Some((prediction, target)) => decide(wait_target::FromWaitTarget { prediction, target }, &given),
        };
        let Decided { bounded: Bounded { wanted: raw, replicas }, learned, mut reason, unmet } = decided;
        // A wait target's count holds for a lead time unless demand falls, or its rise came
        // (see `Hold`); the percent's and an override's follow their input at once.
        let came = by_target.is_some_and(|(p, _)| learned && p.rise_came());
        let (raw, replicas) = match self.record.learned.as_mut() {
            Some(history) if by_target.is_some() => {
                let requests = Rise { cpu_millis: demand.cpu_millis, memory_bytes: demand.memory_bytes };
                let pod = Rise { cpu_millis: cfg.pod_cpu_millis, memory_bytes: cfg.pod_memory_bytes };
                let (held, until) = history.hold(replicas, self.now, (requests, came), pod);
                let held = held.clamp(cfg.min, cfg.max.max(cfg.min));
                if let Some(until) = until.filter(|_| held > replicas) {
                    reason += &format!(
                        "; held at {held} until {} (a lead time after it was asked for)",
                        until.format("%H:%MZ")
                    );
                }
                (raw.max(held), held)
            }
            Some(history) => {
                history.hold = None;
                (raw, replicas)
            }
            None => (raw, replicas),
        };
        if let Some(what) = unmet {
            self.report_unmet(&what, raw);
        }
        // The room, in the shapes the pool's pods arrive in.
        // For the window the room is placed for: a target's prediction, else the next
        // half hour; in the hours of the day whose arrivals it takes.
        let tz = cfg.target.map_or(chrono_tz::Tz::UTC, |t| t.time_zone);
        let window = match by_target {
            Some((p, _)) => (p.from, p.to, tz),
            None => (self.now, self.now + chrono::Duration::minutes(30), tz),
        };
        let demand_ratio = Some((demand.cpu_millis, demand.memory_bytes));
        let placed = slots::place(
            cfg,
            &self.record.shapes,
            replicas,
            &self.observed.headroom,
            &self.observed.nodes,
            window,
            demand_ratio,
        );
        if !placed.is_unit(cfg) {
            reason += &format!("; that room held as {}", placed.said());
        }
        let too_large = slots::larger_than_nodes(&self.record.shapes, &self.observed.nodes);
        if !placed.unfit.is_empty() || !too_large.is_empty() {
            self.report_unfit(&placed, &too_large);
        }
        // What the pause pods hold from now, whatever decided it (an override too): the
        // next wait measurements are judged against it. A dry run changes nothing: the
        // pods the cluster runs are what the waits measure, beside what was decided.
        let rise = |(cpu_millis, memory_bytes): (u64, u64)| Rise { cpu_millis, memory_bytes };
        let dry_run = self.input.dry_run;
        let observed_room = self.observed.headroom.iter().fold((0u64, 0u64), |(c, m), s| {
            let pods = u64::from(s.replicas.unwrap_or(0));
            (
                c.saturating_add(pods.saturating_mul(s.shape.cpu_millis)),
                m.saturating_add(pods.saturating_mul(s.shape.memory_bytes)),
            )
        });
        let running = if dry_run { observed_room } else { placed.room() };
        if let Some(history) = self.record.learned.as_mut() {
            // In a dry run the prediction decided nothing the cluster holds: a burst above
            // the room there is no sign the prediction was short.
            let by = match (&percent.source, learned && !dry_run) {
                (PercentSource::Override { .. }, _) => DecidedBy::Override,
                (_, true) => DecidedBy::Seasonal,
                (_, false) => DecidedBy::Percent,
            };
            history.held(
                self.now,
                rise(running),
                raw > replicas && !dry_run,
                by,
                dry_run.then(|| rise(placed.room())),
                // The learned room asks only for what of the window's rise is still to come.
                came,
            );
        }
        self.headroom = Some(HeadroomDecision { percent: percent.percent, wanted: raw, replicas, learned });
        self.set_slots(placed, reason);
    }

    /// One write per Deployment that differs from what is placed: its shape or count; a
    /// Deployment no shape is placed in any more goes to 0. The first slot's is made
    /// even at 0, as it always was.
    fn set_slots(&mut self, placed: slots::Placed, reason: String) {
        let cfg = &self.cfg.headroom;
        let slots = placed.slots.len().max(self.observed.headroom.iter().map(|s| s.slot + 1).max().unwrap_or(0));
        let forbidden: Vec<usize> =
            self.observed.headroom.iter().filter(|s| s.is_forbidden()).map(|s| s.slot).collect();
        if !forbidden.is_empty() {
            self.report_forbidden(&forbidden);
        }
        for slot in 0..slots {
            if forbidden.contains(&slot) {
                continue;
            }
            let running = self.observed.headroom.iter().find(|s| s.slot == slot);
            let (shape, to) = match (placed.slots.get(slot).cloned().flatten(), running) {
                (Some(p), _) => (p.shape, p.pods),
                (None, Some(r)) => (r.shape.clone(), 0),
                (None, None) if slot == 0 => match &cfg.shapes {
                    crate::config::HeadroomShapes::Listed(list) => (list[0].shape.clone(), 0),
                    _ => (cfg.unit_shape(), 0),
                },
                (None, None) => continue,
            };
            let from = running.and_then(|r| r.replicas);
            let same = running.is_some_and(|r| r.shape == shape && r.replicas == Some(to));
            if same || (running.is_none() && to == 0 && slot > 0) {
                continue;
            }
            let kind = ActionKind::SetHeadroomReplicas { namespace: cfg.namespace.clone(), slot, shape, from, to };
            self.act(kind, reason.clone());
        }
    }

    /// Tells, once an hour, which of the pool's Deployments its RBAC does not let it read.
    fn report_forbidden(&mut self, slots: &[usize]) {
        let mix = &mut self.record.shapes;
        if mix.forbidden_reported_at.is_some_and(|at| self.now - at < UNMET_REPORT_EVERY) {
            return;
        }
        mix.forbidden_reported_at = Some(self.now);
        let names: Vec<String> = slots
            .iter()
            .map(|s| format!("{}/{}", self.cfg.headroom.namespace, shape::deployment_name(&self.cfg.name, *s)))
            .collect();
        self.note(format!(
            "the functions may not read Deployment {} (forbidden): no room is placed there; apply \
             infra/k8s/functions-rbac.yaml, or name them in the Role's resourceNames (`ballast config check --rbac`) \
             (told once an hour)",
            names.join(", ")
        ));
    }

    /// Tells, once an hour, which arriving pods fit in no pause pod, and which fit on no
    /// node of the pool.
    fn report_unfit(&mut self, placed: &slots::Placed, too_large: &[crate::shape::PodShape]) {
        let mix = &mut self.record.shapes;
        if mix.unfit_reported_at.is_some_and(|at| self.now - at < UNMET_REPORT_EVERY) {
            return;
        }
        mix.unfit_reported_at = Some(self.now);
        let listed = |shapes: &mut dyn Iterator<Item = String>| shapes.collect::<Vec<_>>().join(", ");
        let pause = listed(&mut placed.slots.iter().flatten().map(|s| s.shape.to_string()));
        let unfit: Vec<_> = placed.unfit.iter().filter(|s| !too_large.contains(s)).collect();
        if !unfit.is_empty() {
            let advice = match self.cfg.headroom.shapes {
                crate::config::HeadroomShapes::Auto => {
                    "they are under 5 % of the pods that arrive, which a p95 target lets wait"
                }
                _ => "list a shape they fit in under headroom.shapes, or set `shapes: auto`",
            };
            self.note(format!(
                "pods of {} arrive in this pool and fit in no pause pod ({pause}): no room is held for them; \
                 {advice} (told once an hour)",
                listed(&mut unfit.iter().map(|s| s.to_string()))
            ));
        }
        if !too_large.is_empty() {
            let nodes = self.observed.nodes.iter().filter_map(|n| n.allocatable.as_ref());
            let largest =
                nodes.max_by_key(|a| (a.cpu_millis, a.memory_bytes)).map(|a| a.to_string()).unwrap_or_default();
            self.note(format!(
                "pods of {} are larger than any node of this pool (the largest offers {largest}): no headroom and no \
                 scale-up of its node groups starts them (told once an hour)",
                listed(&mut too_large.iter().map(|s| s.to_string()))
            ));
        }
    }

    /// Tells, once an hour, that `what` needs more pause pods than `max`.
    fn report_unmet(&mut self, what: &str, needed: u32) {
        let history = self.record.learned.get_or_insert_with(Default::default);
        if history.unmet_reported_at.is_some_and(|at| self.now - at < UNMET_REPORT_EVERY) {
            return;
        }
        history.unmet_reported_at = Some(self.now);
        self.note(format!(
            "{what} cannot be met within headroom.max: it needs {needed} pause pods, max is {} (told once an hour)",
            self.cfg.headroom.max
        ));
    }
}
