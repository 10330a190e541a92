//! A model of cluster-autoscaler's AWS behaviour, each rule from its source:
//! - sizes written as its AWS provider writes them: `IncreaseSize(delta)` sets the ASG
//!   cache's `curSize + delta`, the cache refreshed from AWS at most every
//!   `asg_cache_refresh` and otherwise moved only by CA's own writes (`setAsgSizeNoLock`,
//!   `DeleteInstances`' `curSize--`, after which the next loop refreshes), so within a
//!   refresh of another writer's raise CA may set the ASG from the size before it;
//!   `TargetSize` (the upcoming nodes scale-up counts) is that cached size too;
//! - a scan every `scan_interval`; bin-packing scale-up for pending pods at or above
//!   the expendable cutoff, onto upcoming nodes first;
//! - the priority expander: one node group per scan, the highest priority among the
//!   groups that can help, ties at random; unmatched groups never used;
//! - failed scale-ups seen at the AWS provider's ASG cache refresh (every minute, its
//!   own phase) from a failed scaling activity since CA's last write (fail-fast), or
//!   after `max_node_provision_time`;
//! - exponential node-group backoff, reset as the modelled version does;
//! - scale-down of nodes under the utilisation threshold for `scale_down_unneeded`
//!   whose pods fit elsewhere one by one.
//!
//! It owns what CA keeps (per group: backoff, unfulfilled scale-ups, its last write;
//! its cache's refresh phase, its random draws, when nodes became unneeded), reads the
//! pool and returns its calls.

use std::collections::BTreeMap;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::NodePhase;
use crate::model::{Call, Model};
use crate::scenario::Scenario;
use crate::seed::mix;
use crate::time::ms;

/// CA removes at most this many empty nodes per scan, and one non-empty node.
const MAX_EMPTY_BULK_DELETE: usize = 10;

/// What cluster-autoscaler keeps about one node group.
#[derive(Debug, Clone, Default)]
pub struct GroupView {
    /// Since when the group is below its target size.
    pub unfulfilled_since: Option<u64>,
    /// CA asked for the instances still missing (its own scale-up request).
    pub scale_up_requested: bool,
    /// When CA last set the ASG's desired capacity (the AWS provider's `lastUpdateTime`).
    pub last_write: u64,
    pub backoff_until: u64,
    pub backoff_ms: u64,
    pub last_failure: Option<u64>,
    /// The AWS provider's cached `curSize` (`None` before the first refresh).
    pub cur_size: Option<u32>,
}

/// A scan's steps, in order. Each reads the pool after the calls of the one before
/// are carried out, as CA's own loop sees its writes (its ASG cache takes the sizes it
/// sets; scale-down counts the nodes scale-up just launched).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanStep {
    /// The ASG cache's refresh, and scale-ups found failed.
    FailedScaleUps,
    ScaleUp,
    ScaleDown,
}

impl ScanStep {
    pub const ALL: [ScanStep; 3] = [ScanStep::FailedScaleUps, ScanStep::ScaleUp, ScanStep::ScaleDown];
}

pub struct ClusterAutoscaler<'s> {
    sc: &'s Scenario,
    /// Per scenario group.
    groups: Vec<GroupView>,
    /// CA's own draws (its cache's phase, expander ties).
    rng: ChaCha8Rng,
    /// When the AWS provider's ASG cache next refreshes.
    next_refresh: u64,
    last_scale_up: u64,
    /// Per node id: since when CA finds the node unneeded.
    unneeded_since: Vec<Option<u64>>,
    /// Slots of another writer's CA's writes took back: a size written from its cache
    /// below what the ASG was at (a raise of Ballast's made since the cache was read).
    pub stale_slots_taken: u32,
}

impl<'s> ClusterAutoscaler<'s> {
    pub fn new(sc: &'s Scenario, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(mix(seed ^ 0x6361));
        // CA started at some moment before the run: its cache refresh has a phase of its own.
        let refresh = ms(sc.ca.asg_cache_refresh);
        let next_refresh = rng.random_range(0..refresh.max(1));
        ClusterAutoscaler {
            sc,
            groups: vec![GroupView::default(); sc.groups.len()],
            rng,
            next_refresh,
            last_scale_up: 0,
            unneeded_since: Vec::new(),
            stale_slots_taken: 0,
        }
    }

    /// CA's view of scenario group `g`.
    #[cfg(test)]
    pub fn group(&self, g: usize) -> &GroupView {
        &self.groups[g]
    }

    /// One step of a scan at `now`.
    pub fn scan_step(&mut self, step: ScanStep, model: &Model, now: u64) -> Vec<Call> {
        match step {
            ScanStep::FailedScaleUps => {
                let refreshed = self.refresh_cache(model, now);
                self.detect_failed_scale_ups(model, now, &refreshed)
            }
            ScanStep::ScaleUp => self.scale_up(model, now).into_iter().collect(),
            ScanStep::ScaleDown => self.scale_down(model, now),
        }
    }

    /// The AWS provider's `Refresh`: at most once per `asg_cache_refresh`. Returns, per
    /// group, whether the refresh found its missing instances unfulfillable (a failed
    /// scaling activity since CA last set its size: `isNodeGroupAvailable`).
    fn refresh_cache(&mut self, model: &Model, now: u64) -> Vec<bool> {
        let mut unfulfillable = vec![false; model.asgs.len()];
        if now < self.next_refresh {
            return unfulfillable;
        }
        self.next_refresh = now + ms(self.sc.ca.asg_cache_refresh);
        for (view, state) in self.groups.iter_mut().zip(&model.asgs) {
            view.cur_size = Some(state.desired);
        }
        if !self.sc.ca.fail_fast {
            return unfulfillable;
        }
        for (g, state) in model.asgs.iter().enumerate() {
            let missing = state.desired > state.nodes.len() as u32;
            unfulfillable[g] = missing && state.failures.iter().any(|&f| f >= self.groups[g].last_write);
        }
        unfulfillable
    }

    /// Sets a group's size as CA does (`setAsgSizeNoLock`): the write time and the size
    /// are remembered in the cache.
    fn set_size(&mut self, g: usize, desired: u32, now: u64) -> Call {
        self.groups[g].last_write = now;
        self.groups[g].cur_size = Some(desired);
        Call::SetDesired { group: g, desired }
    }

    /// The group's size as CA's cache has it (`TargetSize`).
    fn target_size(&self, model: &Model, g: usize) -> u32 {
        self.groups[g].cur_size.unwrap_or(model.asgs[g].desired)
    }

    fn detect_failed_scale_ups(&mut self, model: &Model, now: u64, unfulfillable: &[bool]) -> Vec<Call> {
        let ca = &self.sc.ca;
        let mut calls = Vec::new();
        for (g, &unfulfillable) in unfulfillable.iter().enumerate() {
            let alive = model.asgs[g].nodes.len() as u32;
            let desired = model.asgs[g].desired;
            let view = &mut self.groups[g];
            if desired <= alive {
                view.unfulfilled_since = None;
                if std::mem::take(&mut view.scale_up_requested) && ca.version.resets_backoff_on_success() {
                    // Before 1.30 `updateScaleRequests` removed the backoff of a group whose
                    // scale-up finished.
                    (view.backoff_until, view.backoff_ms, view.last_failure) = (0, 0, None);
                }
                continue;
            }
            let since = *view.unfulfilled_since.get_or_insert(now);
            let failed = unfulfillable || (!ca.fail_fast && now - since >= ms(ca.max_node_provision_time));
            if !failed {
                continue;
            }
            // Exponential backoff (`exponentialBackoff.Backoff`): doubled while the last
            // failure is within the reset timeout, else back to the initial duration.
            let recent = view.last_failure.is_some_and(|t| now - t < ms(ca.backoff_reset_timeout));
            view.backoff_ms = if recent && view.backoff_ms > 0 {
                (view.backoff_ms * 2).min(ms(ca.backoff_max))
            } else {
                ms(ca.backoff_initial)
            };
            view.backoff_until = now + view.backoff_ms;
            view.last_failure = Some(now);
            view.unfulfilled_since = None;
            view.scale_up_requested = false;
            // Placeholders deleted: the target size drops to the instances that exist.
            // A group's call changes only that group, which no later group reads.
            calls.push(self.set_size(g, alive, now));
        }
        calls
    }
}

/// A pod's requests as CA packs them: CPU, memory, GPUs and its placement class.
type Shape = (u64, u64, u32, usize);

/// Pending pods CA helps, by shape → count, largest first.
type Shapes = Vec<(Shape, u32)>;

fn pending_shapes(model: &Model) -> Shapes {
    let cutoff = model.sc.ca.expendable_cutoff;
    let mut shapes: BTreeMap<Shape, u32> = BTreeMap::new();
    for pod in model.cluster.pending_pods() {
        let p = &model.cluster.pods[pod];
        // Pods the scheduler has not tried yet, or nominated after preempting, are not
        // CA's to help: it scales up for pods marked unschedulable.
        if p.priority >= cutoff && p.unschedulable {
            *shapes.entry((p.cpu, p.mem, p.gpu, p.class)).or_default() += 1;
        }
    }
    let mut list: Vec<_> = shapes.into_iter().collect();
    list.sort_by_key(|((cpu, mem, gpu, _), _)| std::cmp::Reverse((*gpu, *cpu, *mem)));
    list
}

/// Room on a node, real or to be: free CPU, memory and pod slots, and its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bin {
    cpu: u64,
    mem: u64,
    pods: u32,
    gpu: u32,
    group: usize,
}

impl Bin {
    /// A node of group `g` as CA pictures it: a copy of one of its Ready nodes (less
    /// their pods), or, with none to copy, the group's template (scale-from-zero).
    fn template(model: &Model, g: usize) -> Bin {
        let ready = model.asgs[g].nodes.iter().map(|&n| &model.cluster.nodes[n]).find(|n| n.phase == NodePhase::Ready);
        match ready {
            Some(node) => Bin { cpu: node.cpu, mem: node.mem, pods: node.max_pods, gpu: node.gpu, group: g },
            None => {
                let shape = model.sc.groups[g].template(model.sc);
                Bin { cpu: shape.cpu, mem: shape.mem, pods: shape.pods, gpu: shape.gpus, group: g }
            }
        }
    }

    fn takes(&self, (cpu, mem, gpu, _): Shape) -> u32 {
        // A pod without GPUs is not bounded by them.
        let by_gpu = self.gpu.checked_div(gpu).map_or(u64::MAX, u64::from);
        (self.cpu / cpu.max(1)).min(self.mem / mem.max(1)).min(u64::from(self.pods)).min(by_gpu) as u32
    }

    fn put(&mut self, n: u32, (cpu, mem, gpu, _): Shape) {
        self.cpu -= u64::from(n) * cpu;
        self.mem -= u64::from(n) * mem;
        self.gpu -= n * gpu;
        self.pods -= n;
    }
}

/// First-fit decreasing over shapes: fills `bins` whose group takes the shape's class,
/// then opens bins from `template` (if its group takes it), at most `limit`. Returns the
/// new bins used; `shapes` keeps what did not fit.
fn pack(shapes: &mut Shapes, bins: &mut Vec<Bin>, template: Option<Bin>, limit: u32, accepts: &[Vec<bool>]) -> u32 {
    let mut opened = 0;
    for (shape, count) in shapes.iter_mut() {
        let class = shape.3;
        for bin in bins.iter_mut().filter(|b| accepts[class][b.group]) {
            if *count == 0 {
                break;
            }
            let fit = bin.takes(*shape).min(*count);
            bin.put(fit, *shape);
            *count -= fit;
        }
        let Some(template) = template.filter(|t| accepts[class][t.group]) else { continue };
        // Zero for a pod bigger than this group's nodes: it opens nothing here.
        let per_node = template.takes(*shape);
        while *count > 0 && opened < limit && per_node > 0 {
            let fit = per_node.min(*count);
            let mut bin = template;
            bin.put(fit, *shape);
            bins.push(bin);
            *count -= fit;
            opened += 1;
        }
    }
    opened
}

impl ClusterAutoscaler<'_> {
    fn scale_up(&mut self, model: &Model, now: u64) -> Option<Call> {
        let sc = self.sc;
        let mut shapes = pending_shapes(model);
        if shapes.is_empty() {
            return None;
        }
        let accepts = &sc.accepts;
        // Upcoming nodes (booting, or asked for and not yet launched) take pods first.
        let mut upcoming: Vec<Bin> = Vec::new();
        for (g, state) in model.asgs.iter().enumerate() {
            let ready =
                state.nodes.iter().filter(|&&n| model.cluster.nodes[n].phase == NodePhase::Ready).count() as u32;
            let missing = self.target_size(model, g).saturating_sub(ready) as usize;
            if missing > 0 {
                upcoming.extend(std::iter::repeat_n(Bin::template(model, g), missing));
            }
        }
        pack(&mut shapes, &mut upcoming, None, 0, accepts);
        if shapes.iter().all(|(_, c)| *c == 0) {
            return None;
        }
        // Expansion options: each group not backed off, below max, whose nodes take a pod.
        let mut options: Vec<(usize, u32, i32)> = Vec::new();
        for (g, spec) in sc.groups.iter().enumerate() {
            let Some(priority) = spec.expander_priority else { continue };
            if now < self.groups[g].backoff_until {
                continue;
            }
            let room = spec.max.saturating_sub(self.target_size(model, g));
            let added = pack(&mut shapes.clone(), &mut Vec::new(), Some(Bin::template(model, g)), room, accepts);
            if added > 0 {
                options.push((g, added, priority));
            }
        }
        // The priority expander: the best priority, then CA's random pick among ties.
        let best = options.iter().map(|o| o.2).max()?;
        options.retain(|o| o.2 == best);
        let (g, added, _) = options[self.rng.random_range(0..options.len())];
        // `IncreaseSize`: from the cached size, whatever the ASG is at now.
        let desired = self.target_size(model, g) + added;
        self.stale_slots_taken += model.asgs[g].desired.saturating_sub(desired);
        self.groups[g].scale_up_requested = true;
        self.last_scale_up = now;
        Some(self.set_size(g, desired, now))
    }

    /// Scale-down as cluster-autoscaler decides it: a node under the utilisation threshold
    /// is unneeded (the timer runs during `scale-down-delay-after-add` too, which only
    /// blocks deletion); it goes once unneeded for `scale-down-unneeded-time` if each pod
    /// CA would move fits on some other node, placed one by one in CA's snapshot (not a
    /// comparison of total free room: slivers on several nodes hold no pod). A node that
    /// takes moved pods in this scan is not removed in it; at most one non-empty node and
    /// `MAX_EMPTY_BULK_DELETE` nodes per scan.
    fn scale_down(&mut self, model: &Model, now: u64) -> Vec<Call> {
        let sc = self.sc;
        let ca = &sc.ca;
        let cooling =
            self.last_scale_up > 0 && now.saturating_sub(self.last_scale_up) < ms(ca.scale_down_delay_after_add);
        let cutoff = ca.expendable_cutoff;
        // Free room per schedulable node as CA's snapshot sees it: every bound pod counted.
        let mut room: BTreeMap<usize, Bin> = BTreeMap::new();
        for state in &model.asgs {
            for &n in &state.nodes {
                let node = &model.cluster.nodes[n];
                if node.schedulable() {
                    let (cpu, mem) = node.free();
                    let pods = node.max_pods.saturating_sub(node.pods.len() as u32);
                    let gpu = node.gpu - node.gpu_used;
                    room.insert(n, Bin { cpu, mem, pods, gpu, group: node.group });
                }
            }
        }
        self.unneeded_since.resize(model.cluster.nodes.len(), None);
        let accepts = &sc.accepts;
        let mut removals: Vec<usize> = Vec::new();
        let mut destinations: Vec<usize> = Vec::new();
        let mut non_empty = 0;
        for (g, state) in model.asgs.iter().enumerate() {
            let min = sc.groups[g].min as usize;
            let mut kept = state.nodes.len();
            for &id in &state.nodes {
                let node = &model.cluster.nodes[id];
                let unneeded_since = &mut self.unneeded_since[id];
                // A cordoned node is a candidate too (CA's eligibility checks only its
                // deletion taint and scale-down annotation); it is no destination.
                if node.phase != NodePhase::Ready {
                    *unneeded_since = None;
                    continue;
                }
                let util = (node.cpu_counted as f64 / node.cpu as f64).max(node.mem_counted as f64 / node.mem as f64);
                if util >= ca.scale_down_utilization {
                    *unneeded_since = None;
                    continue;
                }
                let since = *unneeded_since.get_or_insert(now);
                if cooling || now - since < ms(ca.scale_down_unneeded) || kept <= min || destinations.contains(&id) {
                    continue;
                }
                // The pods CA moves: expendable ones (pause pods) are just deleted.
                let mut moving: Vec<Shape> = node
                    .pods
                    .iter()
                    .map(|&p| &model.cluster.pods[p])
                    .filter(|p| p.priority >= cutoff)
                    .map(|p| (p.cpu, p.mem, p.gpu, p.class))
                    .collect();
                let empty = moving.is_empty();
                if (!empty && non_empty >= 1) || removals.len() >= MAX_EMPTY_BULK_DELETE {
                    continue;
                }
                moving.sort_unstable_by(|a, b| b.cmp(a));
                // Tried in place, each bin's room before the trial kept to put back: a
                // copy of every node's room per candidate made scale-down quadratic.
                let mut received = Vec::new();
                let mut before: Vec<(usize, Bin)> = Vec::new();
                let fits_all = moving.iter().all(|&shape| {
                    let Some((&to, free)) =
                        room.iter_mut().find(|(n, b)| **n != id && accepts[shape.3][b.group] && b.takes(shape) > 0)
                    else {
                        return false;
                    };
                    before.push((to, *free));
                    free.put(1, shape);
                    received.push(to);
                    true
                });
                if !fits_all {
                    for (to, bin) in before.into_iter().rev() {
                        room.insert(to, bin);
                    }
                    continue;
                }
                if !empty {
                    non_empty += 1;
                }
                room.remove(&id);
                destinations.extend(received);
                removals.push(id);
                kept -= 1;
            }
        }
        // DeleteNodes: TerminateInstanceInAutoScalingGroup, decrementing (AWS decrements
        // the live size); the cache's `curSize--`, and a refresh at the next loop.
        for &node in &removals {
            let g = model.cluster.nodes[node].group;
            let view = &mut self.groups[g];
            view.cur_size = Some(view.cur_size.unwrap_or(model.asgs[g].desired).saturating_sub(1));
            self.next_refresh = now;
        }
        removals.into_iter().map(|node| Call::Remove { node, decrement: true }).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts() -> Vec<Vec<bool>> {
        vec![vec![true]]
    }

    fn node(cpu: u64, pods: u32) -> Bin {
        Bin { cpu, mem: 16 << 30, pods, gpu: 0, group: 0 }
    }

    #[test]
    fn five_one_cpu_pods_make_two_four_cpu_nodes() {
        let mut shapes = vec![((1000, 1 << 30, 0, 0), 5)];
        assert_eq!(pack(&mut shapes, &mut Vec::new(), Some(node(4000, 110)), 100, &accepts()), 2);
        assert_eq!(shapes[0].1, 0);
    }

    #[test]
    fn upcoming_bins_are_filled_before_new_nodes() {
        let mut shapes = vec![((1000, 1 << 30, 0, 0), 5)];
        let mut upcoming = vec![node(4000, 110)];
        pack(&mut shapes, &mut upcoming, None, 0, &accepts());
        assert_eq!(shapes[0].1, 1);
        assert_eq!(pack(&mut shapes, &mut Vec::new(), Some(node(4000, 110)), 100, &accepts()), 1);
    }

    #[test]
    fn limit_leaves_the_rest() {
        let mut shapes = vec![((2000, 1 << 30, 0, 0), 9)];
        assert_eq!(pack(&mut shapes, &mut Vec::new(), Some(node(4000, 110)), 3, &accepts()), 3);
        assert_eq!(shapes[0].1, 3);
    }

    #[test]
    fn max_pods_and_placement_bound_the_packing() {
        // Two pod slots per node: six small pods need three nodes, not one.
        let mut shapes = vec![((100, 1 << 20, 0, 0), 6)];
        assert_eq!(pack(&mut shapes, &mut Vec::new(), Some(node(4000, 2)), 100, &accepts()), 3);
        // A class the template's group does not take opens nothing.
        let mut shapes = vec![((100, 1 << 20, 0, 1), 6)];
        let accepts = vec![vec![true], vec![false]];
        assert_eq!(pack(&mut shapes, &mut Vec::new(), Some(node(4000, 110)), 100, &accepts), 0);
        assert_eq!(shapes[0].1, 6);
    }

    #[test]
    fn a_gpu_pod_needs_a_device_of_its_own() {
        // One GPU per node: three GPU pods need three nodes, however small they are.
        let gpu_node = Bin { gpu: 1, ..node(8000, 110) };
        let mut shapes = vec![((1000, 1 << 30, 1, 0), 3)];
        assert_eq!(pack(&mut shapes, &mut Vec::new(), Some(gpu_node), 100, &accepts()), 3);
        // A node without GPUs takes none.
        let mut shapes = vec![((1000, 1 << 30, 1, 0), 3)];
        assert_eq!(pack(&mut shapes, &mut Vec::new(), Some(node(8000, 110)), 100, &accepts()), 0);
    }
}
