//! The room Ballast's pause pods hold, per pool: how many Running pause pods of each size.
//! A workload pod that waited past its pool's target while one of these, at least its
//! size and bound before the target passed, is still Running did not wait for room (a
//! required anti-affinity, a topology spread, a scheduling gate or a zonal volume kept it
//! off the room): more pause pods would not have shortened its wait, and the learner is
//! told so (`over_with_room`).
//!
//! Small and bounded: a count per pool and size (a pool's pause pods come from one
//! Deployment, a few sizes while it rolls), and per Running pause pod its size and when it
//! was bound, which undo its count when the pod goes (a watch says "changed", not "was
//! counted") and tell room held during a wait from room that came with the node the pod
//! waited for.

use std::collections::HashMap;

use ballast_kube::pods::{Extended, Requests};

use crate::state::PoolId;

/// Running pause pods remembered at most (Ballast runs `headroom.max` per pool); pods
/// past it are not counted, so their room is not claimed: the learner answers as if the
/// forwarder did not count.
const MAX_PAUSE_PODS: usize = 16_384;
/// Distinct pause-pod sizes per pool at most; pods of a further size are not counted.
const MAX_SIZES_PER_POOL: usize = 8;

/// What a pod asks the scheduler for, or what a pause pod holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub gpus: u64,
}

impl Size {
    /// The size of a pod with these requests; `None` when it asks for an extended
    /// resource other than GPUs (no pause pod is known to hold it).
    pub fn of(requests: Requests, extended: Extended) -> Option<Size> {
        (!extended.others).then_some(Size {
            cpu_millis: requests.cpu_millis,
            memory_bytes: requests.memory_bytes,
            gpus: extended.gpus,
        })
    }

    /// Whether a pod of size `pod` fits in this room.
    fn holds(&self, pod: &Size) -> bool {
        self.cpu_millis >= pod.cpu_millis && self.memory_bytes >= pod.memory_bytes && self.gpus >= pod.gpus
    }
}

#[derive(Debug, Clone, Copy)]
struct Counted {
    pool: PoolId,
    size: Size,
    /// Seconds since the epoch when it was bound (its room held since).
    since: u32,
    /// The list generation that last saw it (as `PodRecord::generation`).
    generation: u16,
}

/// Running pause pods, counted per pool and size.
#[derive(Debug, Default)]
pub struct HeldRoom {
    counted: HashMap<u128, Counted>,
    /// Per pool: (size, Running pause pods of that size), no zero counts.
    sizes: Vec<Vec<(Size, u32)>>,
}

impl HeldRoom {
    pub fn new(pools: usize) -> HeldRoom {
        HeldRoom { counted: HashMap::new(), sizes: vec![Vec::new(); pools] }
    }

    /// The pause pod `key` is Running in `pool`, holding `size` since it was bound at
    /// `since` (seconds since the epoch).
    pub fn running(&mut self, key: u128, pool: PoolId, size: Size, since: u32, generation: u16) {
        if let Some(c) = self.counted.get_mut(&key) {
            if c.pool == pool && c.size == size {
                c.generation = generation;
                c.since = since;
                return;
            }
            self.gone(key);
        }
        if self.counted.len() >= MAX_PAUSE_PODS {
            return;
        }
        let Some(sizes) = self.sizes.get_mut(usize::from(pool)) else { return };
        match sizes.iter().position(|(s, _)| *s == size) {
            Some(at) => sizes[at].1 += 1,
            None if sizes.len() < MAX_SIZES_PER_POOL => sizes.push((size, 1)),
            None => return,
        }
        self.counted.insert(key, Counted { pool, size, since, generation });
    }

    /// The pod `key` holds no room (gone, not Running, or not a pause pod).
    pub fn gone(&mut self, key: u128) {
        let Some(c) = self.counted.remove(&key) else { return };
        let Some(sizes) = self.sizes.get_mut(usize::from(c.pool)) else { return };
        if let Some(at) = sizes.iter().position(|(s, _)| *s == c.size) {
            sizes[at].1 -= 1;
            if sizes[at].1 == 0 {
                sizes.swap_remove(at);
            }
        }
    }

    /// A list ended: pause pods it did not show are gone.
    pub fn keep_generation(&mut self, generation: u16) {
        let stale: Vec<u128> =
            self.counted.iter().filter(|(_, c)| c.generation != generation).map(|(k, _)| *k).collect();
        for key in stale {
            self.gone(key);
        }
    }

    /// Whether a Running pause pod of `pool`, at least `pod`'s size, holds room now and
    /// was bound by `by` (seconds since the epoch). Pause pods bound later (after a
    /// scale-up, beside the pod that waited for it) say nothing about the wait.
    pub fn holds(&self, pool: PoolId, pod: &Size, by: u32) -> bool {
        let any_size = self.sizes.get(usize::from(pool)).is_some_and(|sizes| sizes.iter().any(|(s, _)| s.holds(pod)));
        // Only pods past their target ask, so the walk over the pause pods is rare.
        any_size && self.counted.values().any(|c| c.pool == pool && c.since <= by && c.size.holds(pod))
    }

    /// Running pause pods counted (for tests and bounds).
    pub fn pods(&self) -> usize {
        self.counted.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(cpu_millis: u64, gib: u64, gpus: u64) -> Size {
        Size { cpu_millis, memory_bytes: gib << 30, gpus }
    }

    #[test]
    fn room_is_held_by_a_running_pause_pod_at_least_the_pods_size() {
        let mut room = HeldRoom::new(2);
        room.running(1, 0, size(1000, 2, 0), 100, 0);
        assert!(room.holds(0, &size(1000, 2, 0), 200), "exactly its size");
        assert!(room.holds(0, &size(500, 1, 0), 200));
        assert!(!room.holds(0, &size(1500, 1, 0), 200), "more CPU than the pause pod holds");
        assert!(!room.holds(0, &size(500, 3, 0), 200), "more memory");
        assert!(!room.holds(0, &size(500, 1, 1), 200), "a GPU the pause pod does not request");
        assert!(!room.holds(1, &size(1, 0, 0), 200), "another pool's room is not this pool's");
        room.running(2, 1, size(4000, 16, 1), 100, 0);
        assert!(room.holds(1, &size(4000, 14, 1), 200));
        assert!(room.holds(1, &size(4000, 14, 1), 100), "bound by then");
        assert!(!room.holds(1, &size(4000, 14, 1), 99), "bound after the pod's wait passed its target");
    }

    #[test]
    fn a_pause_pod_counts_once_however_often_it_is_seen_and_goes_with_its_pod() {
        let mut room = HeldRoom::new(1);
        let big = size(2000, 4, 0);
        room.running(1, 0, big, 100, 0);
        room.running(1, 0, big, 100, 0);
        room.running(2, 0, big, 100, 0);
        room.gone(1);
        assert!(room.holds(0, &big, 200), "pod 2 still holds it");
        room.gone(2);
        room.gone(2);
        assert!(!room.holds(0, &big, 200), "nothing Running");
        // Resized in place (a rollout): counted at its new size only.
        room.running(3, 0, big, 100, 0);
        room.running(3, 0, size(500, 1, 0), 100, 0);
        assert!(!room.holds(0, &big, 200));
        assert_eq!(room.pods(), 1);
        // A relist that does not show it again.
        room.running(4, 0, big, 100, 1);
        room.keep_generation(1);
        assert_eq!(room.pods(), 1);
        assert!(room.holds(0, &big, 200));
    }

    #[test]
    fn the_bookkeeping_stays_bounded() {
        let mut room = HeldRoom::new(1);
        for i in 0..(MAX_SIZES_PER_POOL as u64 + 5) {
            room.running(u128::from(i), 0, size(100 * (i + 1), 1, 0), 100, 0);
        }
        assert_eq!(room.sizes[0].len(), MAX_SIZES_PER_POOL);
        assert!(
            !room.holds(0, &size(100 * (MAX_SIZES_PER_POOL as u64 + 1), 1, 0), 200),
            "an uncounted size claims nothing"
        );
        for i in 0..(MAX_PAUSE_PODS as u128 + 10) {
            room.running(1_000 + i, 0, size(100, 1, 0), 100, 0);
        }
        assert_eq!(room.pods(), MAX_PAUSE_PODS);
        assert_eq!(room.sizes[0].iter().map(|(_, n)| *n as usize).sum::<usize>(), MAX_PAUSE_PODS);
    }
}
