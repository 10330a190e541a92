//! The discrete-event engine: it owns the simulated clock and the event queue. It holds
//! the model and the actors (cluster-autoscaler, the spot market, the workload, the
//! interruption handlers and Ballast) and is the only module that knows them all: it
//! hands each event to its actor, carries out the calls the actor returns on the
//! model, schedules the events it asks for, and feeds the metrics.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::bridge::Bridge;
use crate::ca::{ClusterAutoscaler, ScanStep};
use crate::cluster::Requests;
use crate::cluster::{NodePhase, PodKind};
use crate::event::{Ev, Reaction};
use crate::handlers::InterruptionHandlers;
use crate::metrics::Metrics;
use crate::model::{Call, Effect, Model, PausePods};
use crate::scenario::Scenario;
use crate::spot_market::SpotMarket;
use crate::strategy::Strategy;
use crate::time::{MINUTE, SECOND};
use crate::workload::Workload;
use ballast_core::shape::WorkloadKind;

/// How often an ASG acts on its desired capacity on its own.
const ASG_LOOP: u64 = 10 * SECOND;
const TICK: u64 = MINUTE;

pub struct Engine<'s> {
    sc: &'s Scenario,
    pub now: u64,
    /// (time, sequence, event): same-time events in the order they were scheduled.
    queue: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    /// A scheduling pass is queued for this time (one at a time).
    pass_due: Option<u64>,
    pub model: Model<'s>,
    pub ca: ClusterAutoscaler<'s>,
    pub market: SpotMarket<'s>,
    workload: Workload<'s>,
    pub handlers: InterruptionHandlers,
    /// With `Strategy::Ballast` only.
    pub ballast: Option<Bridge>,
    pub metrics: Metrics,
    /// With `Strategy::StaticOverprovisioning`: each pool's fixed pause pods.
    static_replicas: Option<Vec<u32>>,
    /// Scratch: what the call being carried out started.
    effects: Vec<Effect>,
    /// Groups whose launch failed while Ballast's own calls were carried out (the bridge
    /// is out of `self` then): their failure events are sent to it right after.
    failed_while_delivering: Vec<usize>,
}

impl<'s> Engine<'s> {
    pub fn new(sc: &'s Scenario, strategy: Strategy, seed: u64) -> Self {
        let pause = sc
            .pools()
            .iter()
            .map(|pool| PausePods {
                cpu: pool.headroom.pod_cpu_millis,
                mem: pool.headroom.pod_memory_bytes,
                priority: match strategy {
                    Strategy::StaticOverprovisioning => sc.static_overprovisioning.priority,
                    Strategy::ClusterAutoscaler | Strategy::Ballast => pool.headroom.priority_class.value,
                },
            })
            .collect();
        Engine {
            sc,
            now: 0,
            queue: BinaryHeap::new(),
            seq: 0,
            pass_due: None,
            model: Model::new(sc, pause),
            ca: ClusterAutoscaler::new(sc, seed),
            market: SpotMarket::new(sc, seed),
            workload: Workload::new(sc, seed),
            handlers: InterruptionHandlers::new(sc),
            ballast: (strategy == Strategy::Ballast).then(|| Bridge::new(sc)),
            metrics: Metrics::new(sc),
            static_replicas: (strategy == Strategy::StaticOverprovisioning)
                .then(|| sc.static_overprovisioning.replicas.clone()),
            effects: Vec::new(),
            failed_while_delivering: Vec::new(),
        }
    }

    pub fn at(&mut self, time: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((time, self.seq, ev)));
    }

    /// Runs to the end of the scenario, calling `progress` with the fraction done.
    pub fn run(&mut self, progress: &mut dyn FnMut(f64)) {
        self.start();
        self.finish(progress);
    }

    /// Runs from where it is to the end of the scenario and closes the figures.
    pub fn finish(&mut self, progress: &mut dyn FnMut(f64)) {
        let end = self.sc.end_ms();
        self.run_until(end, progress);
        self.metrics.advance(end, &self.model);
        self.now = end;
        self.metrics.finish(&self.model.cluster, end);
        progress(1.0);
    }

    /// Handles every event up to and including `until`.
    pub fn run_until(&mut self, until: u64, progress: &mut dyn FnMut(f64)) {
        let end = self.sc.end_ms().max(1);
        let mut last_report = self.now;
        while let Some(Reverse((time, _, _))) = self.queue.peek() {
            if *time > until {
                break;
            }
            let Some(Reverse((time, _, ev))) = self.queue.pop() else { break };
            self.metrics.advance(time, &self.model);
            self.now = time;
            self.handle(ev);
            self.place();
            if time - last_report >= 15 * MINUTE {
                last_report = time;
                progress(time as f64 / end as f64);
            }
        }
    }

    pub fn start(&mut self) {
        // Warm start: the initial nodes are up and the workload of the first minute placed.
        self.model.warm_start(self.now, &self.market, &mut self.effects);
        self.effects_started();
        self.apply(self.workload.tick(self.now));
        if let Some(replicas) = self.static_replicas.clone() {
            let calls = replicas.into_iter().enumerate().map(|(pool, replicas)| {
                let PausePods { cpu, mem, .. } = self.model.pause_default(pool);
                Call::SetPauseReplicas { pool, slot: 0, requests: Requests { cpu, mem, gpu: 0 }, replicas }
            });
            self.apply(calls.collect());
        }
        self.schedule_pass();
        for (i, batch) in self.sc.batches.iter().enumerate() {
            for at in &batch.at {
                self.at(at.0.as_millis() as u64, Ev::BatchStart(i));
            }
        }
        self.at(0, Ev::AsgLoop);
        self.at(self.sc.ca.scan_interval.0.as_millis() as u64, Ev::CaScan);
        self.at(TICK, Ev::WorkloadTick);
        self.at(TICK, Ev::MarketTick);
        self.at(0, Ev::Sample);
        if self.ballast.is_some() {
            self.at(0, Ev::BallastTick);
        }
    }

    fn handle(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::NodeReady(id) => {
                if self.model.node_ready(id) {
                    let node = &self.model.cluster.nodes[id];
                    let (pool, spot) = (self.sc.groups[node.group].pool, node.spot);
                    if let Some((b, pool)) = self.ballast.as_mut().zip(pool) {
                        if let Some((at, ev)) = b.node_ready(pool, id, spot, now) {
                            self.at(at, ev);
                        }
                    }
                    self.apply(self.handlers.node_ready(&self.model, id));
                }
            }
            Ev::Reclaim(id) => self.apply(self.market.reclaim(&self.model, id)),
            Ev::Warning(id) | Ev::Rebalance(id) => {
                if self.model.cluster.nodes[id].phase == NodePhase::Gone {
                    return;
                }
                let warning = matches!(ev, Ev::Warning(_));
                // Ballast handles the signals of its pools' nodes itself; the rest (and all
                // of them without Ballast) go to what the cluster runs.
                let in_pool = self.sc.groups[self.model.cluster.nodes[id].group].in_pool();
                if let Some(b) = self.ballast.as_mut().filter(|_| in_pool) {
                    let (at, ev) = if warning { b.spot_warning(id, now) } else { b.rebalance(id, now) };
                    self.at(at, ev);
                } else if warning {
                    self.react(self.handlers.warning(&self.model, id, now));
                } else {
                    self.react(self.handlers.rebalance(&self.model, id, now));
                }
            }
            Ev::Drain(id) => {
                let calls = self.handlers.drain(&self.model, id);
                self.apply(calls);
            }
            Ev::JobDone(pod, generation) => self.apply(self.workload.job_done(&self.model, pod, generation)),
            Ev::BatchStart(i) => {
                let calls = self.workload.batch_start(i);
                self.apply(calls);
            }
            Ev::AsgLoop => {
                for group in 0..self.model.asgs.len() {
                    self.apply(vec![Call::Reconcile { group }]);
                }
                self.at(now + ASG_LOOP, Ev::AsgLoop);
            }
            Ev::CaScan => {
                for step in ScanStep::ALL {
                    let calls = self.ca.scan_step(step, &self.model, now);
                    self.apply(calls);
                }
                self.at(now + self.sc.ca.scan_interval.0.as_millis() as u64, Ev::CaScan);
            }
            Ev::WorkloadTick => {
                self.apply(self.workload.tick(now));
                self.at(now + TICK, Ev::WorkloadTick);
            }
            Ev::MarketTick => {
                for (at, ev) in self.market.tick(&self.model, now) {
                    self.at(at, ev);
                }
                self.at(now + TICK, Ev::MarketTick);
            }
            Ev::Sample => {
                self.metrics.sample(now, &self.model);
                self.at(now + TICK, Ev::Sample);
            }
            Ev::BallastTick => {
                if let Some(b) = self.ballast.as_mut() {
                    b.scheduled_reconcile(now);
                    for (at, ev) in b.waits_due(now) {
                        self.at(at, ev);
                    }
                }
                self.deliver_to_ballast();
                self.at(now + TICK, Ev::BallastTick);
            }
            Ev::BallastDeliver => self.deliver_to_ballast(),
            Ev::ForwarderLook => self.forwarder_looks(),
            Ev::SchedulePass => {
                self.pass_due = None;
                self.schedule_pass();
            }
            Ev::NomineeReady => {
                self.model.cluster.wake();
                self.schedule_pass();
            }
        }
    }

    /// Carries out `calls` in order, each with what it started.
    fn apply(&mut self, calls: Vec<Call>) {
        for call in calls {
            self.model.apply(call, self.now, &self.market, &mut self.effects);
            self.effects_started();
        }
    }

    fn react(&mut self, reaction: Reaction) {
        self.apply(reaction.calls);
        for (at, ev) in reaction.events {
            self.at(at, ev);
        }
    }

    /// Schedules and reports what the last call started: boots, and failed launches
    /// (which the ASG's EventBridge rule sends on to Ballast).
    fn effects_started(&mut self) {
        for i in 0..self.effects.len() {
            match self.effects[i] {
                Effect::Booting { node, ready_at } => {
                    self.at(ready_at, Ev::NodeReady(node));
                    let group = &self.sc.groups[self.model.cluster.nodes[node].group];
                    if let Some(b) = self.ballast.as_mut().filter(|_| group.in_pool()) {
                        if let Some((at, ev)) = b.launched(&group.name, node, self.now, ready_at) {
                            self.at(at, ev);
                        }
                    }
                }
                Effect::LaunchFailed { group } => {
                    let now = self.now;
                    self.metrics.spot_launch_failed(self.sc, group, now);
                    let asg = &self.sc.groups[group].name;
                    match self.ballast.as_mut() {
                        Some(b) => {
                            let (at, ev) = b.launch_failed(asg, now);
                            self.at(at, ev);
                        }
                        None => self.failed_while_delivering.push(group),
                    }
                }
            }
        }
        self.effects.clear();
    }

    fn deliver_to_ballast(&mut self) {
        let Some(mut bridge) = self.ballast.take() else { return };
        for batch in bridge.due_batches(self.now) {
            // Each invocation sees what the previous one's calls did.
            let invocation = bridge.invoke(batch, &self.model, self.now);
            for (pool, decision) in invocation.headroom {
                self.metrics.headroom_decided(pool, decision);
            }
            self.metrics.raises_remade += invocation.remade;
            self.apply(invocation.calls);
            // A launch its own call started that failed: the ASG's EventBridge rule sends
            // that on to Ballast like any other.
            for group in std::mem::take(&mut self.failed_while_delivering) {
                let (at, ev) = bridge.launch_failed(&self.sc.groups[group].name, self.now);
                self.at(at, ev);
            }
        }
        self.ballast = Some(bridge);
    }

    /// After each event: a scheduling pass a cycle later if something changed.
    fn place(&mut self) {
        if !self.model.cluster.is_dirty() || self.pass_due.is_some() {
            return;
        }
        let cycle = self.sc.scheduler.cycle.0.as_millis() as u64;
        if cycle == 0 {
            self.schedule_pass();
        } else {
            self.pass_due = Some(self.now + cycle);
            self.at(self.now + cycle, Ev::SchedulePass);
        }
    }

    /// Runs the scheduler and starts the clocks of what started.
    fn schedule_pass(&mut self) {
        let now = self.now;
        let placement = self.model.schedule(now);
        for (pod, waited) in placement.started {
            let node = self.model.cluster.pods[pod].node;
            let pool = node.and_then(|n| self.sc.groups[self.model.cluster.nodes[n].group].pool);
            // Bound once by now: this was its first start.
            let started = &self.model.cluster.pods[pod];
            let job = matches!(started.kind, PodKind::Batch { .. });
            self.metrics.pod_started(now, waited, started.generation == 1, pool, job);
            if let Some(b) = self.ballast.as_mut() {
                let shape = crate::bridge::shape_of(Requests { cpu: started.cpu, mem: started.mem, gpu: started.gpu });
                let kind = if job { WorkloadKind::Job } else { WorkloadKind::LongRunning };
                b.pod_started(pool, waited, shape, kind);
            }
            if let Some((at, ev)) = self.workload.pod_started(&self.model, pod, now) {
                self.at(at, ev);
            }
        }
        if let Some(at) = placement.wake_at {
            self.at(at, Ev::NomineeReady);
        }
        if let Some(b) = self.ballast.as_mut() {
            b.scheduling_pass_done(&self.model, now, &placement.newly_unschedulable);
        }
        self.forwarder_looks();
    }

    /// The forwarder's look at each pool's pods (after a scheduling pass: pods came, went,
    /// moved or found no room).
    fn forwarder_looks(&mut self) {
        if let Some(b) = self.ballast.as_mut() {
            for (at, ev) in b.forwarder_look(&self.model, self.now) {
                self.at(at, ev);
            }
        }
    }
}
