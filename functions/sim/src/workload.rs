//! The workload: each Deployment's replicas along its daily curve (in the scenario's
//! time zone), batch jobs created at their times with durations drawn from a stream of
//! the workload's own, and jobs finishing.

use chrono::{Datelike, Timelike, Weekday};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::{PodId, PodKind, WORKLOAD_PRIORITY};
use crate::event::Ev;
use crate::model::{Call, Model};
use crate::scenario::{Curve, Scenario};

pub struct Workload<'s> {
    sc: &'s Scenario,
    /// Batch jobs' durations.
    rng: ChaCha8Rng,
}

impl<'s> Workload<'s> {
    pub fn new(sc: &'s Scenario, seed: u64) -> Self {
        Workload { sc, rng: ChaCha8Rng::seed_from_u64(seed ^ 0x776f_726b) }
    }

    fn local_hour(&self, now: u64) -> (f64, bool) {
        let t = self.sc.start + chrono::Duration::milliseconds(now as i64);
        let local = t.with_timezone(&self.sc.time_zone);
        let weekend = matches!(local.weekday(), Weekday::Sat | Weekday::Sun);
        (f64::from(local.hour()) + f64::from(local.minute()) / 60.0, weekend)
    }

    /// Every Deployment scaled to its curve's level at `now`.
    pub fn tick(&self, now: u64) -> Vec<Call> {
        let (hour, weekend) = self.local_hour(now);
        let mut calls = Vec::with_capacity(self.sc.deployments.len());
        for (d, spec) in self.sc.deployments.iter().enumerate() {
            let (lo, hi) = (f64::from(spec.min_replicas), f64::from(spec.peak_replicas));
            let level = match spec.curve {
                Curve::Flat => 1.0,
                Curve::Business if weekend => 0.0,
                Curve::Business => match hour {
                    h if h < 7.0 => 0.0,
                    h if h < 9.0 => (h - 7.0) / 2.0,
                    h if h < 17.0 => 1.0,
                    h if h < 20.0 => 1.0 - (h - 17.0) / 3.0,
                    _ => 0.0,
                },
            };
            let replicas = (lo + (hi - lo) * level).ceil() as usize;
            calls.push(Call::ScaleDeployment { deployment: d, replicas });
        }
        calls
    }

    /// Batch `i`'s jobs are created.
    pub fn batch_start(&mut self, i: usize) -> Vec<Call> {
        let batch = &self.sc.batches[i];
        let rng = &mut self.rng;
        let lo = batch.duration[0].0.as_millis() as u64;
        let hi = batch.duration[1].0.as_millis() as u64;
        (0..batch.jobs)
            .map(|_| {
                let duration_ms = if hi > lo { rng.random_range(lo..=hi) } else { lo };
                Call::CreatePod {
                    kind: PodKind::Batch { duration_ms },
                    class: batch.class,
                    cpu: batch.cpu_millis,
                    mem: batch.memory_bytes,
                    gpu: batch.gpus,
                    priority: WORKLOAD_PRIORITY,
                }
            })
            .collect()
    }

    /// A pod started: a job's end is due after its duration.
    pub fn pod_started(&self, model: &Model, pod: PodId, now: u64) -> Option<(u64, Ev)> {
        let p = &model.cluster.pods[pod];
        match p.kind {
            PodKind::Batch { duration_ms } => Some((now + duration_ms, Ev::JobDone(pod, p.generation))),
            PodKind::Deployment(_) | PodKind::Pause => None,
        }
    }

    /// A job's time is up: it completes if this start of it is still running.
    pub fn job_done(&self, model: &Model, pod: PodId, generation: u32) -> Vec<Call> {
        let p = &model.cluster.pods[pod];
        if p.alive && p.generation == generation && p.node.is_some() {
            vec![Call::DeletePod { pod }]
        } else {
            Vec::new()
        }
    }
}
