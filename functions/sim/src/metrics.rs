//! What a run measured: pod waits, pending pod-seconds, node-hours and cost, spare
//! capacity, and how fast capacity moved to on-demand and back.

use std::cmp::Ordering;

use ballast_core::plan::HeadroomDecision;
use ballast_core::quantile::nearest_rank;
use serde::Serialize;

use crate::cluster::{Cluster, NodePhase, PodKind};
use crate::model::Model;
use crate::scenario::{pool_groups, InterruptionHandling, Market, Scenario};
use crate::time::DAY;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    pub minute: u32,
    pub spot_nodes: u32,
    pub on_demand_nodes: u32,
    pub pending_pods: u32,
    pub headroom_pods: u32,
    /// The p95 first-start wait of the pods that started in the last five minutes, in
    /// milliseconds (`None`: none started), as the forwarder sums it up for a wait target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recent_wait_p95_ms: Option<u64>,
}

/// The span of `Sample::recent_wait_p95_ms`.
const RECENT_WAITS_MS: u64 = 5 * 60_000;

#[derive(Debug)]
pub struct Metrics {
    last: u64,
    /// Pods starting for the first time (what a new workload pod feels).
    first_starts: Vec<FirstStart>,
    /// The pool a pending pod of each class counts in (`Scenario::class_pool`).
    class_pool: Vec<Option<usize>>,
    /// Waits of pods started again after a drain, a reclaim or a scale-down.
    replaced_waits_ms: Vec<u64>,
    /// First starts of the last five minutes: (when, wait).
    recent_starts: std::collections::VecDeque<(u64, u64)>,
    pending_pod_ms: f64,
    spot_node_ms: f64,
    od_node_ms: f64,
    cost: f64,
    spare_weighted: f64,
    spare_time: f64,
    /// Slots of Ballast's raises that cluster-autoscaler undid, made again by Ballast.
    pub raises_remade: u32,
    pub series: Vec<Sample>,
    /// Per Ballast pool, where its fallback shows: its on-demand group's (time, desired)
    /// at each change, its spot groups' failed launches, and its spot instance types.
    pools: Vec<PoolFallback>,
    peak_pods: u32,
    /// Ballast's latest headroom decision per pool, and for how long some pool's pause
    /// pods were held at `headroom.max` (below what the percent asks) or at
    /// `headroom.min` (above it).
    headroom: Vec<Option<HeadroomDecision>>,
    headroom_decided_ms: f64,
    held_at_max_ms: f64,
    held_at_min_ms: f64,
    /// The same per pool: (decided, held at max, held at min).
    pool_held_ms: Vec<[f64; 3]>,
}

#[derive(Debug)]
struct PoolFallback {
    name: String,
    on_demand: Option<usize>,
    od_desired: Vec<(u64, u32)>,
    spot_failures: Vec<u64>,
    spot_types: Vec<String>,
}

impl Metrics {
    pub fn new(sc: &Scenario) -> Self {
        let pools = sc
            .pools()
            .iter()
            .enumerate()
            .map(|(p, config)| {
                let on_demand = pool_groups(&sc.groups, p, Market::OnDemand).next();
                PoolFallback {
                    name: config.name.clone(),
                    on_demand: on_demand.map(|(g, _)| g),
                    od_desired: vec![(0, on_demand.map_or(0, |(_, g)| g.initial))],
                    spot_failures: Vec::new(),
                    spot_types: pool_groups(&sc.groups, p, Market::Spot)
                        .flat_map(|(_, g)| g.instance_types.iter().cloned())
                        .collect(),
                }
            })
            .collect();
        Metrics {
            last: 0,
            first_starts: Vec::new(),
            class_pool: sc.class_pool.clone(),
            replaced_waits_ms: Vec::new(),
            recent_starts: std::collections::VecDeque::new(),
            pending_pod_ms: 0.0,
            spot_node_ms: 0.0,
            od_node_ms: 0.0,
            cost: 0.0,
            spare_weighted: 0.0,
            spare_time: 0.0,
            raises_remade: 0,
            series: Vec::new(),
            pools,
            peak_pods: 0,
            headroom: vec![None; sc.pools().len()],
            headroom_decided_ms: 0.0,
            held_at_max_ms: 0.0,
            held_at_min_ms: 0.0,
            pool_held_ms: vec![[0.0; 3]; sc.pools().len()],
        }
    }

    /// Integrates every rate from the last event to `to` (state is constant between events).
    pub fn advance(&mut self, to: u64, model: &Model) {
        let (cluster, groups, sc) = (&model.cluster, &model.asgs, model.sc);
        let dt = to.saturating_sub(self.last) as f64;
        if dt > 0.0 {
            self.pending_pod_ms += f64::from(cluster.pending_workload) * dt;
            for (g, state) in groups.iter().enumerate() {
                let n = state.nodes.len() as f64;
                let node_ms = match sc.groups[g].market {
                    Market::Spot => &mut self.spot_node_ms,
                    Market::OnDemand => &mut self.od_node_ms,
                };
                *node_ms += n * dt;
                self.cost += dt / 3_600_000.0 * state.hourly;
            }
            if cluster.ready_cpu > 0 {
                let spare = 1.0 - cluster.running_workload_cpu as f64 / cluster.ready_cpu as f64;
                self.spare_weighted += spare * dt;
                self.spare_time += dt;
            }
            if self.headroom.iter().any(Option::is_some) {
                self.headroom_decided_ms += dt;
                let clamped = |way: Ordering| self.headroom.iter().flatten().any(|d| d.clamped() == way);
                if clamped(Ordering::Less) {
                    self.held_at_max_ms += dt;
                }
                if clamped(Ordering::Greater) {
                    self.held_at_min_ms += dt;
                }
                for (held, decision) in self.pool_held_ms.iter_mut().zip(&self.headroom) {
                    if let Some(d) = decision {
                        held[0] += dt;
                        match d.clamped() {
                            Ordering::Less => held[1] += dt,
                            Ordering::Greater => held[2] += dt,
                            Ordering::Equal => {}
                        }
                    }
                }
            }
        }
        self.last = to;
        for pool in &mut self.pools {
            let od = pool.on_demand.map_or(0, |g| groups[g].desired);
            if pool.od_desired.last().is_none_or(|(_, d)| *d != od) {
                pool.od_desired.push((to, od));
            }
        }
    }

    /// A workload pod started after `waited_ms`, on a node of `pool` (if in one); `job`:
    /// a Job's pod, not a long-running workload's.
    pub fn pod_started(&mut self, now: u64, waited_ms: u64, first_start: bool, pool: Option<usize>, job: bool) {
        if first_start {
            self.first_starts.push(FirstStart { at: now, waited_ms, pool, job });
            self.recent_starts.push_back((now, waited_ms));
        } else {
            self.replaced_waits_ms.push(waited_ms);
        }
    }

    pub fn headroom_decided(&mut self, pool: usize, decision: HeadroomDecision) {
        self.headroom[pool] = Some(decision);
    }

    /// A spot launch of `group` failed; it counts for the pool the group is in.
    pub fn spot_launch_failed(&mut self, sc: &Scenario, group: usize, at: u64) {
        if let Some(p) = sc.groups[group].pool {
            self.pools[p].spot_failures.push(at);
        }
    }

    pub fn sample(&mut self, now: u64, model: &Model) {
        let (cluster, groups, sc, headroom) = (&model.cluster, &model.asgs, model.sc, model.pause_total());
        self.peak_pods = self.peak_pods.max(cluster.workload_pods);
        let count = |market: Market| -> u32 {
            groups
                .iter()
                .enumerate()
                .filter(|(g, _)| sc.groups[*g].market == market)
                .map(|(_, s)| s.nodes.iter().filter(|&&n| cluster.nodes[n].phase == NodePhase::Ready).count() as u32)
                .sum()
        };
        while self.recent_starts.front().is_some_and(|(at, _)| at + RECENT_WAITS_MS <= now) {
            self.recent_starts.pop_front();
        }
        let mut recent: Vec<u64> = self.recent_starts.iter().map(|(_, w)| *w).collect();
        recent.sort_unstable();
        self.series.push(Sample {
            minute: (now / 60_000) as u32,
            spot_nodes: count(Market::Spot),
            on_demand_nodes: count(Market::OnDemand),
            pending_pods: cluster.pending_workload,
            headroom_pods: headroom,
            recent_wait_p95_ms: nearest_rank(&recent, 0.95),
        });
    }

    /// Pods still pending at the end count with the wait they have so far, in the run's
    /// last window (the end itself would open a window after the run), and in the pool a
    /// pending pod of their class counts in, as the forwarder counts it.
    pub fn finish(&mut self, cluster: &Cluster, end: u64) {
        for pod in cluster.pending_pods() {
            let p = &cluster.pods[pod];
            if p.is_workload() {
                let pool = self.class_pool.get(p.class).copied().flatten();
                let job = matches!(p.kind, PodKind::Batch { .. });
                self.pod_started(end.saturating_sub(1), end - p.pending_since, p.generation == 0, pool, job);
            }
        }
    }

    pub fn report(
        &self,
        sc: &Scenario,
        strategy: &'static str,
        interruptions: u32,
        ballast_invocations: u32,
    ) -> Report {
        let waits = self.first_waits(|_| true);
        let long_running = self.first_waits(|s| !s.job);
        let jobs = self.first_waits(|s| s.job);
        let mut replaced = self.replaced_waits_ms.clone();
        replaced.sort_unstable();
        let pct = |waits: &[u64], q: f64| nearest_rank(waits, q).map_or(0.0, |w| w as f64 / 1000.0);
        let (to_on_demand, back_to_spot) = self.loss_reaction(sc);
        let share = |ms: f64| (self.headroom_decided_ms > 0.0).then(|| 100.0 * ms / self.headroom_decided_ms);
        Report {
            strategy,
            pod_wait_p50_s: pct(&waits, 0.50),
            pod_wait_p95_s: pct(&waits, 0.95),
            pod_wait_max_s: waits.last().map(|w| *w as f64 / 1000.0).unwrap_or(0.0),
            pods_started: waits.len(),
            long_running_wait_p95_s: nearest_rank(&long_running, 0.95).map(|w| w as f64 / 1000.0),
            long_running_started: long_running.len(),
            job_wait_p95_s: nearest_rank(&jobs, 0.95).map(|w| w as f64 / 1000.0),
            jobs_started: jobs.len(),
            daily_wait_p95_s: self.daily_wait_p95_s(sc),
            window_wait_p95_s: self.window_wait_p95_s(),
            replaced_wait_p95_s: pct(&replaced, 0.95),
            pods_replaced: replaced.len(),
            pending_pod_seconds: self.pending_pod_ms / 1000.0,
            spot_node_hours: self.spot_node_ms / 3_600_000.0,
            on_demand_node_hours: self.od_node_ms / 3_600_000.0,
            cost: self.cost,
            mean_spare_capacity_pct: if self.spare_time > 0.0 {
                100.0 * self.spare_weighted / self.spare_time
            } else {
                0.0
            },
            spot_loss_to_on_demand_s: to_on_demand,
            return_to_spot_s: back_to_spot,
            interruptions,
            interruption_handling: sc.interruption_handling,
            rebalance_recommendations: 0,
            false_rebalance_recommendations: 0,
            nth_drains: 0,
            rebalance_replacements: 0,
            ballast_invocations,
            peak_nodes: self.series.iter().map(|s| s.spot_nodes + s.on_demand_nodes).max().unwrap_or(0),
            peak_pods: self.peak_pods,
            headroom_held_at_max_pct: share(self.held_at_max_ms),
            headroom_held_at_min_pct: share(self.held_at_min_ms),
            waits_by_pool: if self.pools.len() > 1 {
                self.pools
                    .iter()
                    .enumerate()
                    .map(|(p, pool)| {
                        let waits = self.first_waits(|s| s.pool == Some(p));
                        PoolWaits {
                            pool: pool.name.clone(),
                            pods_started: waits.len(),
                            pod_wait_p95_s: nearest_rank(&waits, 0.95).map(|w| w as f64 / 1000.0),
                        }
                    })
                    .collect()
            } else {
                Vec::new()
            },
            headroom_by_pool: if self.pools.len() > 1 {
                self.pools
                    .iter()
                    .zip(&self.pool_held_ms)
                    .map(|(pool, [decided, max, min])| {
                        let share = |ms: f64| (*decided > 0.0).then(|| 100.0 * ms / decided);
                        PoolHeadroom {
                            pool: pool.name.clone(),
                            held_at_max_pct: share(*max),
                            held_at_min_pct: share(*min),
                        }
                    })
                    .collect()
            } else {
                Vec::new()
            },
            ca_stale_slots_taken: None,
            raises_remade: None,
            series: self.series.clone(),
        }
    }

    /// The first-start waits of the pods `which` takes, sorted.
    fn first_waits(&self, which: impl Fn(&FirstStart) -> bool) -> Vec<u64> {
        let mut waits: Vec<u64> = self.first_starts.iter().filter(|s| which(s)).map(|s| s.waited_ms).collect();
        waits.sort_unstable();
        waits
    }

    /// The p95 first-start wait of each simulated day of a run longer than one (`None`: no
    /// pod started that day); empty for a run of a day or less. The first day has no
    /// history to learn from, so it shows what learning costs.
    fn daily_wait_p95_s(&self, sc: &Scenario) -> Vec<Option<f64>> {
        let days = sc.days();
        if days <= 1 {
            return Vec::new();
        }
        (0..days)
            .map(|day| {
                // A pass at the run's very end counts in its last day.
                let waits = self.first_waits(|s| (s.at / DAY).min(days - 1) == day);
                nearest_rank(&waits, 0.95).map(|w| w as f64 / 1000.0)
            })
            .collect()
    }

    /// The p95 first-start wait of each five-minute window from the run's start in which
    /// pods started, oldest first.
    fn window_wait_p95_s(&self) -> Vec<f64> {
        let mut windows: std::collections::BTreeMap<u64, Vec<u64>> = std::collections::BTreeMap::new();
        for start in &self.first_starts {
            windows.entry(start.at / RECENT_WAITS_MS).or_default().push(start.waited_ms);
        }
        windows
            .into_values()
            .filter_map(|mut waits| {
                waits.sort_unstable();
                nearest_rank(&waits, 0.95).map(|w| w as f64 / 1000.0)
            })
            .collect()
    }

    /// For each pool with an on-demand group and each capacity-loss window of its spot
    /// instance types: from the pool's first failed spot launch in the window to its first
    /// on-demand increase; from the window's end to its on-demand back at its level
    /// before. Means over the (pool, window) pairs where it happened; `None` when it
    /// never did (or, for the return, when some pool was not back by the end).
    fn loss_reaction(&self, sc: &Scenario) -> (Option<f64>, Option<f64>) {
        let mut reaction = Vec::new();
        let mut recovery = Vec::new();
        let mut never_back = false;
        for pool in self.pools.iter().filter(|p| p.on_demand.is_some()) {
            let mut windows: Vec<(u64, u64)> = sc
                .spot
                .capacity_losses
                .iter()
                .filter(|l| pool.spot_types.contains(&l.instance_type))
                .map(|l| {
                    let s = l.at.0.as_millis() as u64;
                    (s, s + l.duration.0.as_millis() as u64)
                })
                .collect();
            windows.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (s, e) in windows {
                match merged.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => merged.push((s, e)),
                }
            }
            let series = &pool.od_desired;
            let desired_at = |t: u64| series.iter().take_while(|(at, _)| *at <= t).last().map(|(_, d)| *d).unwrap_or(0);
            for (start, end) in merged {
                let Some(&failed) = pool.spot_failures.iter().find(|&&f| f >= start && f < end) else { continue };
                let before = desired_at(failed);
                if let Some((t, _)) = series.iter().find(|(t, d)| *t >= failed && *d > before) {
                    reaction.push((t - failed) as f64 / 1000.0);
                }
                let baseline = desired_at(start.saturating_sub(1));
                let high = series.iter().any(|(t, d)| *t >= start && *t < end && *d > baseline);
                if high && end < self.last {
                    let back = if desired_at(end) <= baseline {
                        Some(end)
                    } else {
                        series.iter().find(|(t, d)| *t >= end && *d <= baseline).map(|(t, _)| *t)
                    };
                    match back {
                        Some(t) => recovery.push((t - end) as f64 / 1000.0),
                        None => never_back = true,
                    }
                }
            }
        }
        (mean(&reaction), if never_back { None } else { mean(&recovery) })
    }
}

/// One pool's first-start waits: those of pods that started on its nodes, or, still
/// pending at the end, would count in it as pending (first starts only, like the run's
/// figures; the simulated forwarder also counts pods started again after a drain, which
/// in a cluster are new pods).
#[derive(Debug, Clone, Serialize)]
pub struct PoolWaits {
    pub pool: String,
    pub pods_started: usize,
    /// `None`: no pod started in it.
    pub pod_wait_p95_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PoolHeadroom {
    pub pool: String,
    pub held_at_max_pct: Option<f64>,
    pub held_at_min_pct: Option<f64>,
}

/// A workload pod's first start: when, after how long, in which pool (if any), and
/// whether it is a Job's.
#[derive(Debug, Clone, Copy)]
struct FirstStart {
    at: u64,
    waited_ms: u64,
    pool: Option<usize>,
    job: bool,
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub strategy: &'static str,
    /// First-start waits of workload pods: creation to running, for pods that never ran
    /// before (re-placements after a drain, reclaim or scale-down are apart, below).
    pub pod_wait_p50_s: f64,
    pub pod_wait_p95_s: f64,
    pub pod_wait_max_s: f64,
    pub pods_started: usize,
    /// The same p95 for long-running workloads' pods (Deployments) and for Jobs' pods
    /// apart: a Job burst can set the p95 alone (`None`: none of that kind started).
    pub long_running_wait_p95_s: Option<f64>,
    pub long_running_started: usize,
    pub job_wait_p95_s: Option<f64>,
    pub jobs_started: usize,
    /// The first-start p95 of each simulated day, for a run of more than one day.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub daily_wait_p95_s: Vec<Option<f64>>,
    /// The p95 first-start wait of each five-minute window of the run (`[k·5m, (k+1)·5m)`
    /// from its start) in which pods started, oldest first; pods still pending at the end
    /// are in the last. All pools together and first starts only, like the figures above,
    /// so close to but not what the forwarder measures per pool for a wait target: a run's
    /// p95 can be met while the windows of a morning ramp wait long.
    pub window_wait_p95_s: Vec<f64>,
    /// Waits of pods started again after their node went.
    pub replaced_wait_p95_s: f64,
    pub pods_replaced: usize,
    pub pending_pod_seconds: f64,
    pub spot_node_hours: f64,
    pub on_demand_node_hours: f64,
    /// What the run's nodes cost, in US dollars (`cost_usd` in JSON: the unit in the name).
    #[serde(rename = "cost_usd")]
    pub cost: f64,
    pub mean_spare_capacity_pct: f64,
    /// From the first failed spot launch of a capacity loss to on-demand requested.
    pub spot_loss_to_on_demand_s: Option<f64>,
    /// From the end of a capacity loss to on-demand back at its level before.
    pub return_to_spot_s: Option<f64>,
    pub interruptions: u32,
    /// What acts on spot signals where Ballast does not (in a Ballast run: groups
    /// outside its pools).
    pub interruption_handling: InterruptionHandling,
    /// Rebalance recommendations the market sent to the run's spot nodes, and of them
    /// those no interruption of the node followed.
    pub rebalance_recommendations: u32,
    pub false_rebalance_recommendations: u32,
    /// Nodes aws-node-termination-handler cordoned and drained (`node-termination-handler`
    /// handling only).
    pub nth_drains: u32,
    /// Replacements Capacity Rebalancing launched (`capacity-rebalance` handling only).
    pub rebalance_replacements: u32,
    pub ballast_invocations: u32,
    /// Most Ready nodes and most workload pods at any sample.
    pub peak_nodes: u32,
    pub peak_pods: u32,
    /// Share of the run (from Ballast's first headroom decision) in which `headroom.max`
    /// held the pause pods below what the percent asked for; Ballast only.
    pub headroom_held_at_max_pct: Option<f64>,
    /// The same for `headroom.min` holding them above it.
    pub headroom_held_at_min_pct: Option<f64>,
    /// With several pools: the first starts per pool (each pool's wait target is its own).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits_by_pool: Vec<PoolWaits>,
    /// With several pools: the same per pool (the two above count a moment in which any
    /// pool was held).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub headroom_by_pool: Vec<PoolHeadroom>,
    /// Slots of Ballast's raises cluster-autoscaler took back, writing from its ASG cache
    /// a size read before them; Ballast only.
    pub ca_stale_slots_taken: Option<u32>,
    /// Of those, what Ballast made again (each once); Ballast only.
    pub raises_remade: Option<u32>,
    #[serde(skip)]
    pub series: Vec<Sample>,
}
