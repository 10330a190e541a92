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

use serde::Serialize;

pub use metrics::{Report, Sample};
pub use scenario::{Scenario, ScenarioError};
pub use strategy::Strategy;

/// Runs one strategy over the scenario.
pub fn simulate(scenario: &Scenario, strategy: Strategy, seed: u64, progress: &mut dyn FnMut(f64)) -> Report {
    let mut engine = engine::Engine::new(scenario, strategy, seed);
    engine.run(progress);
    let invocations = engine.ballast.as_ref().map(|b| b.invocations).unwrap_or(0);
    engine.metrics.report(scenario, strategy.label(), engine.market.interruptions, invocations)
}

/// A setting of Ballast's headroom that `--sweep` can vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadroomKnob {
    /// `headroom.percent`, then fixed all day (schedules cleared).
    Percent,
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
        }
    }

    pub fn parse(key: &str) -> Option<HeadroomKnob> {
        match key {
            "headroom" | "headroom.percent" => Some(HeadroomKnob::Percent),
            "headroom.min" => Some(HeadroomKnob::Min),
            "headroom.max" => Some(HeadroomKnob::Max),
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
            }
            HeadroomKnob::Min => headroom.min = value,
            HeadroomKnob::Max => headroom.max = value,
        }
    }
    s
}

#[cfg(test)]
mod tests;
