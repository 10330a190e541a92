//! The shapes of each pool's workload pods, for its demand reports: how many of each
//! shape (requests, extended resources included) and kind (Job or long-running) started
//! since the pool's previous report, and how many wait now. Where the functions place
//! headroom: a 4-CPU job fits in no two 2-CPU holes.
//!
//! Bounded: the shapes of pending pods only (as the state keeps their placement), at
//! most [`MAX_STARTED_SHAPES`] distinct started shapes per pool between two reports, and
//! a report carries the most frequent ([`shape::most_frequent`]).

use std::collections::HashMap;

use ballast_core::shape::{self, PodShape, ShapeCount, WorkloadKind};

/// Distinct shapes counted as started per pool between two reports: past it a new shape
/// is not counted (a report carries 8; this bounds memory, not what is said).
pub const MAX_STARTED_SHAPES: usize = 1024;

/// A pod's shape and what runs it.
pub type ShapeKind = (PodShape, WorkloadKind);

/// Started counts per pool, and the shapes of the pods pending now.
#[derive(Debug, Default)]
pub struct ShapeTally {
    /// Per pool: pods of each shape bound since its previous report.
    started: Vec<HashMap<ShapeKind, u32>>,
    /// Pending workload pods (by the state's pod key): their shape.
    pending: HashMap<u128, Box<ShapeKind>>,
}

impl ShapeTally {
    pub fn new(pools: usize) -> ShapeTally {
        ShapeTally { started: vec![HashMap::new(); pools], pending: HashMap::new() }
    }

    /// A workload pod of `pool` was bound (its first start).
    pub fn started(&mut self, pool: usize, shape: ShapeKind) {
        self.add_started(pool, shape, 1);
    }

    fn add_started(&mut self, pool: usize, shape: ShapeKind, pods: u32) {
        let Some(counts) = self.started.get_mut(pool) else { return };
        if let Some(n) = counts.get_mut(&shape) {
            *n = n.saturating_add(pods);
        } else if counts.len() < MAX_STARTED_SHAPES {
            counts.insert(shape, pods);
        }
    }

    /// A workload pod waits to be bound.
    pub fn pending(&mut self, pod: u128, shape: ShapeKind) {
        self.pending.insert(pod, Box::new(shape));
    }

    /// A pod no longer waits (bound, gone, finished, or not a workload pod).
    pub fn not_pending(&mut self, pod: u128) {
        self.pending.remove(&pod);
    }

    /// Keeps only the pending pods `keep` says still exist (after a relist).
    pub fn retain_pending(&mut self, keep: impl Fn(u128) -> bool) {
        self.pending.retain(|pod, _| keep(*pod));
    }

    /// The pending pods, for the state to tell which wait in which pool.
    pub fn pending_pods(&self) -> impl Iterator<Item = u128> + '_ {
        self.pending.keys().copied()
    }

    /// What `pool`'s report says: its started counts (taken: the next report counts
    /// afresh) and the shapes of `waiting` (pending pods of the pool), the most frequent.
    pub fn report(&mut self, pool: usize, waiting: impl IntoIterator<Item = u128>) -> Vec<ShapeCount> {
        let started = self.started.get_mut(pool).map(std::mem::take).unwrap_or_default();
        let mut counts: HashMap<ShapeKind, (u32, u32)> =
            started.into_iter().map(|(shape, n)| (shape, (n, 0))).collect();
        for pod in waiting {
            let Some(shape) = self.pending.get(&pod) else { continue };
            let entry = counts.entry((**shape).clone()).or_default();
            entry.1 = entry.1.saturating_add(1);
        }
        let shapes = counts
            .into_iter()
            .map(|((shape, kind), (started, waiting))| ShapeCount { shape, kind, started, waiting })
            .collect();
        shape::most_frequent(shapes)
    }

    /// A report that was never sent: its started counts go into the next one.
    pub fn restore(&mut self, pool: usize, shapes: &[ShapeCount]) {
        for s in shapes.iter().filter(|s| s.started > 0) {
            self.add_started(pool, (s.shape.clone(), s.kind), s.started);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(cpu_millis: u64, gpus: u64) -> PodShape {
        let mut s = PodShape::new(cpu_millis, 1 << 30);
        if gpus > 0 {
            s.extended.insert("nvidia.com/gpu".into(), gpus);
        }
        s
    }

    #[test]
    fn a_report_counts_starts_since_the_last_and_pods_waiting_now() {
        let mut t = ShapeTally::new(2);
        t.started(0, (shape(500, 0), WorkloadKind::LongRunning));
        t.started(0, (shape(500, 0), WorkloadKind::LongRunning));
        t.started(0, (shape(4000, 1), WorkloadKind::Job));
        t.started(1, (shape(100, 0), WorkloadKind::LongRunning));
        t.pending(7, (shape(4000, 1), WorkloadKind::Job));
        t.pending(8, (shape(250, 0), WorkloadKind::LongRunning));
        // Pod 8 waits in another pool: only 7 is this pool's.
        let report = t.report(0, [7]);
        assert_eq!(
            report,
            vec![
                ShapeCount { shape: shape(4000, 1), kind: WorkloadKind::Job, started: 1, waiting: 1 },
                ShapeCount { shape: shape(500, 0), kind: WorkloadKind::LongRunning, started: 2, waiting: 0 },
            ]
        );
        // Started counts are taken; waiting ones are counted again each report.
        assert_eq!(
            t.report(0, [7]),
            vec![ShapeCount { shape: shape(4000, 1), kind: WorkloadKind::Job, started: 0, waiting: 1 }]
        );
        t.not_pending(7);
        assert!(t.report(0, [7]).is_empty());
        assert_eq!(t.report(1, []).len(), 1, "the other pool's starts are its own");
    }

    #[test]
    fn a_report_never_sent_counts_its_starts_again() {
        let mut t = ShapeTally::new(1);
        for _ in 0..3 {
            t.started(0, (shape(500, 0), WorkloadKind::LongRunning));
        }
        let lost = t.report(0, []);
        t.started(0, (shape(500, 0), WorkloadKind::LongRunning));
        t.restore(0, &lost);
        assert_eq!(t.report(0, [])[0].started, 4);
    }

    #[test]
    fn shapes_are_bounded_per_pool_and_per_report() {
        let mut t = ShapeTally::new(1);
        for i in 0..(MAX_STARTED_SHAPES as u64 + 10) {
            t.started(0, (shape(i + 1, 0), WorkloadKind::LongRunning));
        }
        assert_eq!(t.started[0].len(), MAX_STARTED_SHAPES);
        t.started(0, (shape(1, 0), WorkloadKind::LongRunning));
        let report = t.report(0, []);
        assert_eq!(report.len(), shape::MAX_SHAPES_REPORTED);
        assert_eq!((report[0].shape.cpu_millis, report[0].started), (1, 2), "the most frequent first");
        assert!(shape::check_report(&report).is_ok());
    }
}
