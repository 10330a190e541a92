//! Room into slots: the room a strategy decided (counted in pause pods of `pod_cpu` /
//! `pod_memory`) is held as pause pods of the shapes the pool's pods arrive in, one
//! Deployment per shape, so that each slot is a hole one arriving pod fits in.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::config::{HeadroomConfig, HeadroomShapes};
use crate::shape::{self, PodShape, Quota, Room, ShapeMix, Shares, SlotState, Slots};

/// The pause pods to run: per slot (Deployment), its shape and count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Placed {
    /// Indexed by slot; `None` for a slot that holds nothing.
    pub slots: Vec<Option<Slots>>,
    /// Pods that arrive in shapes no pause pod fits, told in a note.
    pub unfit: Vec<PodShape>,
}

impl Placed {
    /// The room the pods hold, CPU and memory.
    pub fn room(&self) -> (u64, u64) {
        self.slots.iter().flatten().fold((0, 0), |(c, m), s| {
            (
                c.saturating_add(u64::from(s.pods).saturating_mul(s.shape.cpu_millis)),
                m.saturating_add(u64::from(s.pods).saturating_mul(s.shape.memory_bytes)),
            )
        })
    }

    /// Whether it is what one Deployment of `pod_cpu` / `pod_memory` pods would be: the
    /// reason needs no word on shapes then.
    pub fn is_unit(&self, cfg: &HeadroomConfig) -> bool {
        let unit = cfg.unit_shape();
        self.slots.iter().enumerate().all(|(i, s)| match s {
            None => true,
            Some(s) => i == 0 && s.shape == unit,
        })
    }

    /// "3 × 4 CPU / 14Gi (Job pods, 40 % of arrivals) + 5 × 2 CPU / 8Gi (...)".
    pub fn said(&self) -> String {
        let parts: Vec<String> = self
            .slots
            .iter()
            .flatten()
            .filter(|s| s.pods > 0)
            .map(|s| {
                if s.serves.is_empty() {
                    format!("{} × {}", s.pods, s.shape)
                } else {
                    format!("{} × {} ({})", s.pods, s.shape, s.serves)
                }
            })
            .collect();
        if parts.is_empty() {
            "no pause pod".into()
        } else {
            parts.join(" + ")
        }
    }
}

/// Places `units` pause pods' worth of room in the shapes `cfg` and the pool's mix
/// say, keeping each shape on the slot it already runs in. What `max` allows is what
/// the headroom namespace's quota was written for: `max` pods of `pod_cpu` /
/// `pod_memory`, so the pods of every shape together hold no more CPU, no more memory
/// and are no more pods than that.
pub(super) fn place(
    cfg: &HeadroomConfig,
    mix: &ShapeMix,
    units: u32,
    running: &[SlotState],
    nodes: &[crate::observe::NodeState],
    (from, to, tz): (DateTime<Utc>, DateTime<Utc>, Tz),
    demand: Option<(u64, u64)>,
) -> Placed {
    // A pause pod no node of the pool takes would wait for ever: such pods are told of.
    let too_large = larger_than_nodes(mix, nodes);
    let mut arrivals = mix.arrivals_between(from, to, tz);
    arrivals.retain(|a| !too_large.contains(&a.0));
    let mut placed = place_room(cfg, &arrivals, units, running, demand);
    in_fewer_pods(cfg, &mut placed, running);
    within_quota(cfg, &mut placed);
    placed
}

/// When the slots would be more pods than `max` (small shapes: `max` counts pods, and the
/// quota does), each pause pod of a slot takes the room of as many of its pods as fit in
/// `pod_cpu` / `pod_memory`: one preemption then frees room for all of them, and the room
/// stays whole instead of being cut to `max` small holes. A slot that runs its pods so
/// keeps them so while its shape is placed, so a slot changes at most once each way (a
/// change replaces every pod of the Deployment).
fn in_fewer_pods(cfg: &HeadroomConfig, placed: &mut Placed, running: &[SlotState]) {
    let quota = quota(cfg);
    let most = u64::from(quota.pause_pods);
    let largest_k = |s: &PodShape| quota.pods_per_pause_pod(s);
    let pods: u64 = placed.slots.iter().flatten().map(|s| u64::from(s.pods)).sum();
    for (i, slot) in placed.slots.iter_mut().enumerate() {
        let Some(s) = slot.as_mut().filter(|s| s.pods > 0) else { continue };
        let cap = largest_k(&s.shape);
        let runs = running
            .iter()
            .find(|r| r.slot == i && r.replicas.unwrap_or(0) > 0)
            .and_then(|r| r.shape.multiple_of(&s.shape))
            .filter(|j| (2..=cap).contains(j));
        let k = match runs {
            Some(j) => j,
            None if pods > most => cap,
            None => 1,
        };
        if k > 1 {
            s.shape = s.shape.times(k);
            s.pods = s.pods.div_ceil(k);
            s.serves = match s.serves.as_str() {
                "" => format!("{k} pods to a pause pod"),
                serves => format!("{serves}; {k} pods to a pause pod"),
            };
        }
    }
}

/// Takes pods off until every shape together is within `max` pods of `pod_cpu` /
/// `pod_memory`: pods, CPU and memory each.
fn within_quota(cfg: &HeadroomConfig, placed: &mut Placed) {
    let Quota { cpu_millis: cpu_room, memory_bytes: memory_room, pause_pods: most, .. } = quota(cfg);
    // Each shape alone first (a typo'd request can ask for billions), then together.
    for s in placed.slots.iter_mut().flatten() {
        let fits = |room: u64, one: u64| room.checked_div(one).unwrap_or(u64::MAX);
        let alone = fits(cpu_room, s.shape.cpu_millis).min(fits(memory_room, s.shape.memory_bytes));
        s.pods = s.pods.min(most).min(u32::try_from(alone).unwrap_or(u32::MAX));
    }
    loop {
        let (pods, cpu, memory) = placed.slots.iter().flatten().fold((0u64, 0u64, 0u64), |(p, c, m), s| {
            let n = u64::from(s.pods);
            (p + n, c.saturating_add(n * s.shape.cpu_millis), m.saturating_add(n * s.shape.memory_bytes))
        });
        let over = |held: u64, room: u64| held > room;
        if !(over(pods, u64::from(most)) || over(cpu, cpu_room) || over(memory, memory_room)) {
            break;
        }
        // The slot holding the most of what is over gives a pod back.
        let weight = |s: &Slots| {
            let n = u64::from(s.pods);
            let share = |held: u64, room: u64, one: u64| if over(held, room) { n * one } else { 0 };
            (share(cpu, cpu_room, s.shape.cpu_millis), share(memory, memory_room, s.shape.memory_bytes), n)
        };
        let Some(s) = placed.slots.iter_mut().flatten().filter(|s| s.pods > 0).max_by_key(|s| weight(s)) else {
            break;
        };
        s.pods -= 1;
    }
}

/// `max` pods of `pod_cpu` / `pod_memory`: what the headroom namespace's quota was
/// written for.
fn quota(cfg: &HeadroomConfig) -> Quota {
    let most = cfg.max.max(cfg.min);
    Quota {
        cpu_millis: u64::from(most).saturating_mul(cfg.pod_cpu_millis),
        memory_bytes: u64::from(most).saturating_mul(cfg.pod_memory_bytes),
        pause_pods: most,
        unit: cfg.unit_shape(),
    }
}

fn place_room(
    cfg: &HeadroomConfig,
    arrivals: &[(PodShape, shape::WorkloadKind, f64)],
    units: u32,
    running: &[SlotState],
    demand: Option<(u64, u64)>,
) -> Placed {
    let unit = cfg.unit_shape();
    let one = |slots: Vec<Option<Slots>>, unfit| Placed { slots, unfit };
    let whole = |shape: PodShape| vec![Some(Slots { shape, pods: units, serves: String::new() })];
    let room = Room::of_units(units, &unit, demand);
    match &cfg.shapes {
        HeadroomShapes::Fixed => {
            let unfit = unfit(std::slice::from_ref(&unit), arrivals);
            one(whole(unit), unfit)
        }
        HeadroomShapes::Listed(listed) => {
            let shapes: Vec<PodShape> = listed.iter().map(|l| l.shape.clone()).collect();
            let unfit = unfit(&shapes, arrivals);
            let Some(shares) = shape::shares_among(shapes.clone(), arrivals) else {
                // Nothing seen arriving yet: the first shape written holds it all.
                let pods = shape::pods_for(room, &shapes[0]);
                let mut slots = vec![None; shapes.len()];
                slots[0] = Some(Slots { shape: shapes[0].clone(), pods, serves: String::new() });
                return one(slots, unfit);
            };
            let mut slots = vec![None; shapes.len()];
            for s in shape::place(room, &shares, running, &quota(cfg)) {
                if let Some(i) = shapes.iter().position(|l| *l == s.shape) {
                    slots[i] = Some(s);
                }
            }
            one(slots, unfit)
        }
        HeadroomShapes::Auto => match shape::shares_within(arrivals, &holding(running), writable(running).len()) {
            // No report of a shape yet: `pod_cpu` / `pod_memory` until one comes.
            None => one(whole(unit), Vec::new()),
            Some(shares) => {
                let Shares { left_out, .. } = &shares;
                let unfit = left_out.clone();
                one(assign(shape::place(room, &shares, running, &quota(cfg)), running), unfit)
            }
        },
    }
}

/// Shapes of pods arriving or waiting that fit on no node of the pool whose allocatable
/// is known: no pause pod and no scale-up starts them.
pub(super) fn larger_than_nodes(mix: &ShapeMix, nodes: &[crate::observe::NodeState]) -> Vec<PodShape> {
    let known: Vec<&PodShape> = nodes.iter().filter_map(|n| n.allocatable.as_ref()).collect();
    if known.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<PodShape> =
        mix.entries.iter().filter(|e| !known.iter().any(|a| e.shape.fits_in(a))).map(|e| e.shape.clone()).collect();
    out.sort();
    out.dedup();
    out
}

/// The slots the pool may write: all but those its RBAC does not name.
fn writable(running: &[SlotState]) -> Vec<usize> {
    (0..shape::MAX_SLOT_SHAPES).filter(|i| !running.iter().any(|r| r.slot == *i && r.is_forbidden())).collect()
}

/// The shapes holding pods now.
fn holding(running: &[SlotState]) -> Vec<PodShape> {
    running.iter().filter(|r| r.replicas.unwrap_or(0) > 0).map(|r| r.shape.clone()).collect()
}

/// Shapes that matter among the arrivals and fit in none of `holes`.
fn unfit(holes: &[PodShape], arrivals: &[(PodShape, shape::WorkloadKind, f64)]) -> Vec<PodShape> {
    let total: f64 = arrivals.iter().map(|a| a.2).sum();
    let mut out: Vec<PodShape> = arrivals
        .iter()
        .filter(|(s, _, pods)| pods / total >= shape::SHAPE_MATTERS_SHARE && !holes.iter().any(|h| s.fits_in(h)))
        .map(|(s, _, _)| s.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Learned shapes onto slots: a shape already running keeps its Deployment (a new
/// shape replaces every pod of the one it takes over); the rest take free slots, the
/// first slot first.
fn assign(placed: Vec<Slots>, running: &[SlotState]) -> Vec<Option<Slots>> {
    let mut slots: Vec<Option<Slots>> = vec![None; shape::MAX_SLOT_SHAPES];
    let open = writable(running);
    let mut rest = Vec::new();
    let kept = shape::kept_deployments(&placed.iter().map(|s| &s.shape).collect::<Vec<_>>(), running);
    for (s, kept) in placed.into_iter().zip(kept) {
        match kept {
            Some(i) => slots[running[i].slot] = Some(s),
            None => rest.push(s),
        }
    }
    for s in rest {
        // A slot holding pods nobody wants any more is free; an empty one first.
        let free = (0..slots.len()).filter(|i| slots[*i].is_none() && open.contains(i));
        let empty = free.clone().find(|i| running.iter().all(|r| r.slot != *i || r.replicas == Some(0)));
        if let Some(i) = empty.or_else(|| free.clone().next()) {
            slots[i] = Some(s);
        }
    }
    slots
}

#[cfg(test)]
mod tests;
