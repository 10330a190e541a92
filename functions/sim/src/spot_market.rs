//! The spot market: what each launch slot holds (drawn from the run's seed), capacity
//! windows (whether a spot launch finds capacity), and each minute's interruption
//! hazards, storms and rebalance recommendations, which it schedules as warnings and
//! reclaims. It owns the hazard each node has left and counts the interruptions.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::{NodeId, NodePhase, SlotDraws};
use crate::event::Ev;
use crate::model::{Call, Ec2, Model};
use crate::scenario::{Market, Scenario};
use crate::seed::mix;
use crate::time::MINUTE;

/// A spot interruption warning comes two minutes ahead.
const WARNING_LEAD: u64 = 2 * MINUTE;

/// What the market has left for one node, spent minute by minute.
#[derive(Debug, Clone, Copy)]
struct Hazard {
    /// Of its interruption (starts at its slot's draw).
    interruption: f64,
    /// Of a rebalance recommendation no interruption follows.
    false_rebalance: f64,
    /// Its interruption is on its way (warning sent or scheduled).
    doomed: bool,
}

pub struct SpotMarket<'s> {
    sc: &'s Scenario,
    seed: u64,
    /// Per node id, for the nodes seen so far.
    hazards: Vec<Hazard>,
    pub interruptions: u32,
    /// Rebalance recommendations sent, those ahead of an interruption and the others.
    pub rebalances: u32,
    /// The nodes that got a recommendation no interruption was behind (once per node).
    false_rebalanced: Vec<NodeId>,
    /// Each interruption: (group, launch slot, when it was decided).
    pub interrupted: Vec<(usize, u64, u64)>,
}

impl<'s> SpotMarket<'s> {
    pub fn new(sc: &'s Scenario, seed: u64) -> Self {
        SpotMarket {
            sc,
            seed,
            hazards: Vec::new(),
            interruptions: 0,
            rebalances: 0,
            false_rebalanced: Vec::new(),
            interrupted: Vec::new(),
        }
    }

    /// A minute of the market: hazard spent on every spot node; interruptions and
    /// recommendations due are returned as events.
    pub fn tick(&mut self, model: &Model, now: u64) -> Vec<(u64, Ev)> {
        // Nodes launched since the last tick start with their slot's draws.
        for node in &model.cluster.nodes[self.hazards.len()..] {
            self.hazards.push(Hazard {
                interruption: node.market.hazard_left,
                false_rebalance: node.market.false_rebalance_left,
                doomed: false,
            });
        }
        let mut events = Vec::new();
        let per_minute = self.sc.spot.interruptions_per_node_hour / 60.0;
        let false_per_minute = self.sc.spot.false_rebalances_per_node_hour / 60.0;
        let storms: Vec<(Option<String>, f64)> = self
            .sc
            .spot
            .storms
            .iter()
            .filter(|s| {
                let start = s.at.0.as_millis() as u64;
                now >= start && now < start + s.duration.0.as_millis() as u64
            })
            .map(|s| (s.instance_type.clone(), s.fraction / (s.duration.0.as_secs_f64() / 60.0).max(1.0)))
            .collect();
        for (g, asg) in model.asgs.iter().enumerate() {
            if self.sc.groups[g].market != Market::Spot {
                continue;
            }
            for &id in &asg.nodes {
                let hazard = &mut self.hazards[id];
                if hazard.doomed {
                    continue;
                }
                let node = &model.cluster.nodes[id];
                let instance_type = &node.instance_type;
                let storm_p: f64 =
                    storms.iter().filter(|(t, _)| t.as_ref().is_none_or(|t| t == instance_type)).map(|(_, p)| p).sum();
                let p = per_minute + storm_p;
                // A recommendation without an interruption after it (once per node).
                if hazard.false_rebalance > 0.0 {
                    hazard.false_rebalance -= false_per_minute;
                    if hazard.false_rebalance <= 0.0 {
                        events.push((now, Ev::Rebalance(id)));
                        self.rebalances += 1;
                        self.false_rebalanced.push(id);
                    }
                }
                // The minute's hazard (p is small: the chance of an interruption in it).
                hazard.interruption -= p;
                if hazard.interruption > 0.0 {
                    continue;
                }
                hazard.doomed = true;
                self.interruptions += 1;
                self.interrupted.push((g, node.market.slot, now));
                let warning_at = match node.market.rebalance_lead_ms {
                    Some(ahead) => {
                        events.push((now, Ev::Rebalance(id)));
                        self.rebalances += 1;
                        now + ahead
                    }
                    None => now,
                };
                events.push((warning_at, Ev::Warning(id)));
                events.push((warning_at + WARNING_LEAD, Ev::Reclaim(id)));
            }
        }
        events
    }

    /// Of the recommendations sent, those no interruption of their node followed (by
    /// the end of the run): AWS sends them on elevated risk, and whoever drains on them
    /// moved pods for nothing.
    pub fn false_rebalances(&self) -> u32 {
        self.false_rebalanced.iter().filter(|&&id| !self.hazards[id].doomed).count() as u32
    }

    /// The two minutes are up: the instance is taken back.
    pub fn reclaim(&self, model: &Model, id: NodeId) -> Vec<Call> {
        if model.cluster.nodes[id].phase == NodePhase::Gone {
            return Vec::new();
        }
        vec![Call::Remove { node: id, decrement: false }]
    }
}

impl Ec2 for SpotMarket<'_> {
    fn spot_capacity(&self, instance_type: &str, az: usize, now: u64) -> bool {
        let az_name = &self.sc.availability_zones[az];
        !self.sc.spot.capacity_losses.iter().any(|loss| {
            let start = loss.at.0.as_millis() as u64;
            let end = start + loss.duration.0.as_millis() as u64;
            loss.instance_type == instance_type
                && loss.availability_zone.as_ref().is_none_or(|a| a == az_name)
                && now >= start
                && now < end
        })
    }

    /// From a stream of the slot's own: always drawn in the same order, whatever is
    /// used, so slot k sees the same values in every run of the seed.
    fn slot_draws(&self, group: usize, slot: u64) -> SlotDraws {
        let mut rng = ChaCha8Rng::seed_from_u64(mix(self.seed ^ mix((group as u64) << 40 | slot)));
        let draw = |rng: &mut ChaCha8Rng, r: &[ballast_core::units::HumanDuration; 2]| {
            let (lo, hi) = (r[0].0.as_millis() as u64, r[1].0.as_millis() as u64);
            let u: u64 = rng.random_range(0..=u64::from(u32::MAX));
            lo + (hi.saturating_sub(lo)) * u / u64::from(u32::MAX)
        };
        let boot_ms = draw(&mut rng, &self.sc.nodes.boot) + draw(&mut rng, &self.sc.nodes.network_attach);
        let hazard_left = -(1.0 - rng.random::<f64>()).ln();
        let rebalanced = rng.random::<f64>() < self.sc.spot.rebalance_fraction;
        let lead = draw(&mut rng, &self.sc.spot.rebalance_lead);
        let false_rebalance_left = -(1.0 - rng.random::<f64>()).ln();
        SlotDraws { slot, boot_ms, hazard_left, rebalance_lead_ms: rebalanced.then_some(lead), false_rebalance_left }
    }
}
