//! `ballast simulate`: a discrete-event model of an EKS pool with cluster-autoscaler,
//! run three ways — CA alone, CA with static overprovisioning, and CA with Ballast
//! (its production planner and reconcile over the in-memory adapters).
//!
//! `model` (with `cluster`) is the state of the pool; `engine` owns the clock and the
//! event queue; the actors (`ca`, `spot_market`, `workload`, `handlers`, and `bridge`
//! for Ballast) read the model and return the calls the engine carries out on it.

mod bridge;
mod ca;
mod cluster;
mod engine;
mod event;
mod handlers;
pub mod metrics;
mod model;
pub mod plot;
pub mod scenario;
mod seed;
mod spot_market;
mod strategy;
mod time;
mod workload;

use ballast_core::config::WaitTarget;
use ballast_core::units::HumanDuration;
use serde::Serialize;

pub use metrics::{Report, Sample};
pub use scenario::{Scenario, ScenarioError};
pub use strategy::Strategy;

/// Runs one strategy over the scenario.
pub fn simulate(scenario: &Scenario, strategy: Strategy, seed: u64, progress: &mut dyn FnMut(f64)) -> Report {
    let mut engine = engine::Engine::new(scenario, strategy, seed);
    engine.run(progress);
    report(&engine, scenario, strategy)
}

/// What a finished run measured.
fn report(engine: &engine::Engine, scenario: &Scenario, strategy: Strategy) -> Report {
    let invocations = engine.ballast.as_ref().map(|b| b.invocations).unwrap_or(0);
    let mut report = engine.metrics.report(scenario, strategy.label(), engine.market.interruptions, invocations);
    report.rebalance_recommendations = engine.market.rebalances;
    report.false_rebalance_recommendations = engine.market.false_rebalances();
    report.nth_drains = engine.handlers.nth_drains;
    report.rebalance_replacements = engine.model.rebalance_replacements;
    if engine.ballast.is_some() {
        report.ca_stale_slots_taken = Some(engine.ca.stale_slots_taken);
        report.raises_remade = Some(engine.metrics.raises_remade);
    }
    report
}

/// A setting of Ballast's headroom that `--sweep` can vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadroomKnob {
    /// `headroom.percent`, then fixed all day (schedules and a wait target cleared).
    Percent,
    /// `headroom.target.wait_p95`, in seconds (history as the scenario sets it, else
    /// 14 days; percent only until there is history, not a floor).
    Target,
    /// `headroom.min`: the fewest pause pods.
    Min,
    /// `headroom.max`: the most pause pods.
    Max,
}

impl HeadroomKnob {
    /// As written on the command line and in `ballast.yaml`.
    pub fn key(self) -> &'static str {
        match self {
            HeadroomKnob::Percent => "headroom.percent",
            HeadroomKnob::Min => "headroom.min",
            HeadroomKnob::Max => "headroom.max",
            HeadroomKnob::Target => "headroom.target.wait_p95",
        }
    }

    pub fn parse(key: &str) -> Option<HeadroomKnob> {
        match key {
            "headroom" | "headroom.percent" => Some(HeadroomKnob::Percent),
            "headroom.min" => Some(HeadroomKnob::Min),
            "headroom.max" => Some(HeadroomKnob::Max),
            "target" | "headroom.target" | "headroom.target.wait_p95" => Some(HeadroomKnob::Target),
            _ => None,
        }
    }
}

/// The scenario with one of Ballast's headroom settings at `value` in every pool (for
/// `--sweep`). A min above the max lifts the max with it, as the planner reads them.
pub fn with_headroom(scenario: &Scenario, knob: HeadroomKnob, value: u32) -> Scenario {
    let mut s = scenario.clone();
    for pool in s.pools_mut() {
        let headroom = &mut pool.headroom;
        match knob {
            HeadroomKnob::Percent => {
                headroom.percent = value;
                headroom.schedules.clear();
                headroom.target = None;
            }
            HeadroomKnob::Target => {
                let history = headroom.target.map_or(HumanDuration::from_secs(14 * 86_400), |t| t.history);
                let floor = headroom.target.is_some_and(|t| t.floor);
                // The scenario's own days unless its target says otherwise.
                let time_zone = headroom.target.map_or(scenario.time_zone, |t| t.time_zone);
                let wait_p95 = HumanDuration::from_secs(u64::from(value));
                headroom.target = Some(WaitTarget { wait_p95, history, floor, time_zone });
            }
            HeadroomKnob::Min => headroom.min = value,
            HeadroomKnob::Max => headroom.max = value,
        }
    }
    s
}

#[cfg(test)]
mod tests;
