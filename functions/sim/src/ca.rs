//! A model of cluster-autoscaler's AWS behaviour: a scan every `scan_interval`;
//! bin-packing scale-up for pending pods at or above the expendable cutoff, onto
//! upcoming nodes first; the priority expander (spot groups in order, then
//! on-demand); failed scale-ups seen after `max_node_provision_time` or, with
//! fail-fast, from the ASG's errors; exponential node-group backoff; and scale-down
//! of nodes under the utilisation threshold for `scale_down_unneeded`.

use std::collections::BTreeMap;

use crate::cluster::NodePhase;
use crate::engine::Sim;
use crate::scenario::Market;

/// CA removes at most this many empty nodes per scan, and one non-empty node.
const MAX_EMPTY_BULK_DELETE: usize = 10;

pub fn scan(sim: &mut Sim) {
    detect_failed_scale_ups(sim);
    scale_up(sim);
    scale_down(sim);
}

fn ms(d: ballast_core::units::HumanDuration) -> u64 {
    d.0.as_millis() as u64
}

fn detect_failed_scale_ups(sim: &mut Sim) {
    let now = sim.now;
    let ca = &sim.sc.ca;
    for g in 0..sim.groups.len() {
        let state = &mut sim.groups[g];
        let alive = state.nodes.len() as u32;
        if state.desired <= alive {
            if state.unfulfilled_since.take().is_some() {
                state.backoff_count = 0;
            }
            continue;
        }
        let since = *state.unfulfilled_since.get_or_insert(now);
        let failed = if ca.fail_fast {
            state.failures.iter().find(|&&f| f >= since).is_some_and(|&first| now - first >= ms(ca.fail_fast_after))
        } else {
            now - since >= ms(ca.max_node_provision_time)
        };
        if failed {
            // DecreaseTargetSize: forget the instances that never came; back off.
            state.desired = alive;
            state.unfulfilled_since = None;
            let backoff =
                ms(ca.backoff_initial).saturating_mul(1 << state.backoff_count.min(16)).min(ms(ca.backoff_max));
            state.backoff_until = now + backoff;
            state.backoff_count += 1;
        }
    }
}

/// Shapes (cpu, mem) → count, largest first.
fn pending_shapes(sim: &Sim) -> Vec<((u64, u64), u32)> {
    let cutoff = sim.sc.ca.expendable_cutoff;
    let mut shapes: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    for pod in sim.cluster.pending_pods() {
        let p = &sim.cluster.pods[pod];
        if p.priority >= cutoff {
            *shapes.entry((p.cpu, p.mem)).or_default() += 1;
        }
    }
    let mut list: Vec<_> = shapes.into_iter().collect();
    list.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    list
}

/// First-fit decreasing over shapes: fills `bins` (free cpu, mem), then opens new bins
/// of `node` size, at most `limit`. Returns the new bins used; `shapes` keeps what did not fit.
fn pack(shapes: &mut [((u64, u64), u32)], bins: &mut Vec<(u64, u64)>, node: (u64, u64), limit: u32) -> u32 {
    let mut opened = 0;
    for ((cpu, mem), count) in shapes.iter_mut() {
        for bin in bins.iter_mut() {
            if *count == 0 {
                break;
            }
            let fit = (bin.0 / *cpu).min(bin.1 / (*mem).max(1)).min(u64::from(*count)) as u32;
            bin.0 -= u64::from(fit) * *cpu;
            bin.1 -= u64::from(fit) * *mem;
            *count -= fit;
        }
        // Zero for a pod bigger than this group's nodes: it opens nothing here.
        let per_node = (node.0 / *cpu).min(node.1 / (*mem).max(1)) as u32;
        while *count > 0 && opened < limit && per_node > 0 {
            let fit = per_node.min(*count);
            bins.push((node.0 - u64::from(fit) * *cpu, node.1 - u64::from(fit) * *mem));
            *count -= fit;
            opened += 1;
        }
    }
    opened
}

fn scale_up(sim: &mut Sim) {
    let mut shapes = pending_shapes(sim);
    if shapes.is_empty() {
        return;
    }
    // Upcoming nodes (booting, or asked for and not yet launched) take pods first.
    let mut upcoming: Vec<(u64, u64)> = Vec::new();
    for (g, state) in sim.groups.iter().enumerate() {
        let it = &sim.sc.instance_types[&sim.sc.groups[g].instance_type];
        let ready = state.nodes.iter().filter(|&&n| sim.cluster.nodes[n].phase == NodePhase::Ready).count() as u32;
        for _ in 0..state.desired.saturating_sub(ready) {
            upcoming.push((it.cpu_millis, it.memory_bytes));
        }
    }
    pack(&mut shapes, &mut upcoming, (0, 0), 0);
    // Priority expander: spot groups in order, then on-demand.
    let order: Vec<usize> = (0..sim.groups.len())
        .filter(|&g| sim.sc.groups[g].market == Market::Spot)
        .chain((0..sim.groups.len()).filter(|&g| sim.sc.groups[g].market == Market::OnDemand))
        .collect();
    for g in order {
        if shapes.iter().all(|(_, c)| *c == 0) {
            break;
        }
        let state = &sim.groups[g];
        if sim.now < state.backoff_until {
            continue;
        }
        let spec = &sim.sc.groups[g];
        let room = spec.max.saturating_sub(state.desired);
        if room == 0 {
            continue;
        }
        let it = &sim.sc.instance_types[&spec.instance_type];
        let added = pack(&mut shapes, &mut Vec::new(), (it.cpu_millis, it.memory_bytes), room);
        if added > 0 {
            sim.groups[g].desired += added;
            sim.last_scale_up = sim.now;
            sim.reconcile_group(g);
        }
    }
}

/// Scale-down as cluster-autoscaler decides it: a node under the utilisation threshold
/// is unneeded (the timer runs during `scale-down-delay-after-add` too, which only
/// blocks deletion); it goes once unneeded for `scale-down-unneeded-time` if each pod
/// CA would move fits on some other node, placed one by one in CA's snapshot (not a
/// comparison of total free room: slivers on several nodes hold no pod). A node that
/// takes moved pods in this scan is not removed in it; at most one non-empty node and
/// `MAX_EMPTY_BULK_DELETE` nodes per scan.
fn scale_down(sim: &mut Sim) {
    let ca = &sim.sc.ca;
    let now = sim.now;
    let cooling = sim.last_scale_up > 0 && now.saturating_sub(sim.last_scale_up) < ms(ca.scale_down_delay_after_add);
    let cutoff = ca.expendable_cutoff;
    // Free room per schedulable node as CA's snapshot sees it: every bound pod counted.
    let mut room: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
    for state in &sim.groups {
        for &n in &state.nodes {
            let node = &sim.cluster.nodes[n];
            if node.schedulable() {
                room.insert(n, node.free());
            }
        }
    }
    let mut removals: Vec<usize> = Vec::new();
    let mut destinations: Vec<usize> = Vec::new();
    let mut non_empty = 0;
    for g in 0..sim.groups.len() {
        let min = sim.sc.groups[g].min as usize;
        let mut kept = sim.groups[g].nodes.len();
        for i in 0..sim.groups[g].nodes.len() {
            let id = sim.groups[g].nodes[i];
            let node = &mut sim.cluster.nodes[id];
            if !node.schedulable() {
                node.unneeded_since = None;
                continue;
            }
            let util = (node.cpu_counted as f64 / node.cpu as f64).max(node.mem_counted as f64 / node.mem as f64);
            if util >= ca.scale_down_utilization {
                node.unneeded_since = None;
                continue;
            }
            let since = *node.unneeded_since.get_or_insert(now);
            if cooling || now - since < ms(ca.scale_down_unneeded) || kept <= min || destinations.contains(&id) {
                continue;
            }
            // The pods CA moves: expendable ones (pause pods) are just deleted.
            let mut moving: Vec<(u64, u64)> = node
                .pods
                .iter()
                .map(|&p| &sim.cluster.pods[p])
                .filter(|p| p.priority >= cutoff)
                .map(|p| (p.cpu, p.mem))
                .collect();
            let empty = moving.is_empty();
            if (!empty && non_empty >= 1) || removals.len() >= MAX_EMPTY_BULK_DELETE {
                continue;
            }
            moving.sort_unstable_by(|a, b| b.cmp(a));
            let mut trial = room.clone();
            trial.remove(&id);
            let mut received = Vec::new();
            let fits_all = moving.iter().all(|&(cpu, mem)| {
                let Some((&to, free)) = trial.iter_mut().find(|(_, f)| f.0 >= cpu && f.1 >= mem) else {
                    return false;
                };
                free.0 -= cpu;
                free.1 -= mem;
                received.push(to);
                true
            });
            if !fits_all {
                continue;
            }
            if !empty {
                non_empty += 1;
            }
            room = trial;
            destinations.extend(received);
            removals.push(id);
            kept -= 1;
        }
    }
    for id in removals {
        sim.remove_node(id, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_one_cpu_pods_make_two_four_cpu_nodes() {
        let mut shapes = vec![((1000, 1 << 30), 5)];
        assert_eq!(pack(&mut shapes, &mut Vec::new(), (4000, 16 << 30), 100), 2);
        assert_eq!(shapes[0].1, 0);
    }

    #[test]
    fn upcoming_bins_are_filled_before_new_nodes() {
        let mut shapes = vec![((1000, 1 << 30), 5)];
        let mut upcoming = vec![(4000, 16 << 30)];
        pack(&mut shapes, &mut upcoming, (0, 0), 0);
        assert_eq!(shapes[0].1, 1);
        assert_eq!(pack(&mut shapes, &mut Vec::new(), (4000, 16 << 30), 100), 1);
    }

    #[test]
    fn limit_leaves_the_rest() {
        let mut shapes = vec![((2000, 1 << 30), 9)];
        assert_eq!(pack(&mut shapes, &mut Vec::new(), (4000, 16 << 30), 3), 3);
        assert_eq!(shapes[0].1, 3);
    }
}
