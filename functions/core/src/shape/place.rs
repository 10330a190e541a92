//! Room into pause pods: the room a strategy decided, split between the shapes by their
//! shares, in whole pods within `max`'s quota; and the pool's pause-pod Deployments as
//! the cluster runs them.

use serde::{Deserialize, Serialize};

use super::{PodShape, Shares};

/// Room to hold, in each resource, in the ratio of the pool's own demand (a room
/// counted in pause pods of `pod_cpu` / `pod_memory` by its larger ratio holds more of
/// the other resource than the pods that need it ask for).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Room {
    /// CPU, in millicores.
    pub cpu_millis: f64,
    /// Memory, in bytes.
    pub memory_bytes: f64,
    /// The same room in pause pods of `pod_cpu` / `pod_memory`.
    pub units: f64,
}

/// Pause pods of one shape: a Deployment of the pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slots {
    /// The pause pods' requests: one arriving pod of the shape fits in each.
    pub shape: PodShape,
    /// How many.
    pub pods: u32,
    /// The pods it holds room for, in words ("Jobs of 4 CPU / 14Gi, 62 % of arrivals").
    pub serves: String,
}

/// Pause pods that hold `room`, split between the shapes by their shares: each shape's
/// part rounded to the nearest pod, and what is still short of the room in pods of the
/// smallest shape that asks CPU and memory and no device. Rounding every part up would
/// hold a hole of each shape however small its part: the mixed pool's 2-CPU `min`,
/// split between web pods and 8-CPU Jobs, held 9 CPU. A shape running the pod its part
/// rounds to keeps it until the part is clearly nearer the other whole number
/// (`running`): shares that move a little with each report move no pause pod. The pods
/// hold no more than `quota` allows, larger shapes first.
pub fn place(room: Room, shares: &Shares, running: &[SlotState], quota: &Quota) -> Vec<Slots> {
    // The pods each shape runs, in the Deployment it keeps (see `kept_deployments`):
    // a Deployment of another shape placed here (1 CPU / 2Gi beside 500m / 1Gi), or one
    // of the same pause pods as this one's (four 250m pods and two 500m pods to one),
    // is not its pods.
    let shapes: Vec<&PodShape> = shares.shapes.iter().map(|s| &s.0).collect();
    let runs: Vec<u32> = kept_deployments(&shapes, running)
        .into_iter()
        .zip(&shapes)
        .map(|(kept, shape)| {
            let Some(r) = kept.map(|i| &running[i]) else { return 0 };
            r.replicas.unwrap_or(0).saturating_mul(r.shape.multiple_of(shape).unwrap_or(1))
        })
        .collect();
    let mut pods: Vec<u32> = shares
        .shapes
        .iter()
        .zip(&runs)
        .map(|((shape, share, _), runs)| {
            let part = pods_wanted(
                Room {
                    cpu_millis: room.cpu_millis * share,
                    memory_bytes: room.memory_bytes * share,
                    units: room.units * share,
                },
                shape,
            );
            // A part a hair under a whole number is that number.
            let whole_pods = (part + 1e-9).floor();
            let runs_one_more = f64::from(*runs) > whole_pods;
            let up_from = if runs_one_more { 0.5 - RUNNING_POD_STAYS } else { 0.5 + RUNNING_POD_STAYS };
            whole(if part - whole_pods >= up_from { whole_pods + 1.0 } else { whole_pods })
        })
        .collect();
    // A pod past the quota would be taken back once the rest of the room is placed: the
    // shape would never run the count its part rounds to (no band then, its pod taken
    // and given back as the part crosses three quarters) and the rest would follow it.
    let mut left = quota.clone();
    for (n, (shape, _, _)) in pods.iter_mut().zip(&shares.shapes) {
        *n = (*n).min(left.more(0, shape));
        left.take(*n, shape);
    }
    // The room one pod of each shape holds, as a share of the whole room (by what it
    // asks more of, as `pods_for` counts).
    let per_pod: Vec<f64> = shares.shapes.iter().map(|(shape, _, _)| 1.0 / pods_wanted(room, shape)).collect();
    let held: f64 = pods.iter().zip(&per_pod).filter(|(_, p)| p.is_finite()).map(|(n, p)| f64::from(*n) * p).sum();
    // What is short goes into pods that hold CPU and memory and no device, where such a
    // shape is placed: a pod asking no memory holds none of what is short, and a GPU
    // pause pod, however little CPU it asks, keeps a GPU node.
    let holds_room = |i: &usize| {
        let shape = &shares.shapes[*i].0;
        shape.cpu_millis > 0 && shape.memory_bytes > 0 && shape.extended.values().all(|n| *n == 0)
    };
    let fillers: Vec<usize> = (0..pods.len()).filter(|i| per_pod[*i].is_finite()).collect();
    let plain: Vec<usize> = fillers.iter().copied().filter(holds_room).collect();
    let smallest =
        if plain.is_empty() { fillers } else { plain }.into_iter().min_by(|a, b| per_pod[*a].total_cmp(&per_pod[*b]));
    if let Some(i) = smallest.filter(|_| held < 1.0 - 1e-9) {
        let short = whole(((1.0 - held) / per_pod[i] - 1e-9).ceil());
        pods[i] = pods[i].saturating_add(short.min(left.more(pods[i], &shares.shapes[i].0)));
    }
    shares
        .shapes
        .iter()
        .zip(pods)
        .map(|((shape, _, serves), pods)| Slots { shape: shape.clone(), pods, serves: serves.clone() })
        .collect()
}

/// The running Deployment each of `shapes` keeps (an index into `running`): the one
/// running its shape, else one running room for several of its pods; each Deployment
/// to one shape, the shapes in order. A shape keeping its Deployment replaces no pod.
pub fn kept_deployments(shapes: &[&PodShape], running: &[SlotState]) -> Vec<Option<usize>> {
    let mut taken: Vec<bool> = running.iter().map(|r| r.slot >= super::MAX_SLOT_SHAPES).collect();
    shapes
        .iter()
        .map(|shape| {
            let free = (0..running.len()).filter(|i| !taken[*i]);
            let exact = free.clone().find(|i| running[*i].shape == **shape);
            let kept = exact.or_else(|| free.clone().find(|i| running[*i].shape.multiple_of(shape).is_some()));
            if let Some(i) = kept {
                taken[i] = true;
            }
            kept
        })
        .collect()
}

/// What the pause pods may hold together: the headroom namespace's quota, written for
/// `max` pause pods of `pod_cpu` / `pod_memory` (the unit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// CPU, in millicores.
    pub cpu_millis: u64,
    /// Memory, in bytes.
    pub memory_bytes: u64,
    /// Pause pods.
    pub pause_pods: u32,
    /// The unit: when the pods are more than `pause_pods`, each pause pod of a small
    /// shape takes as many of its pods as fit in one.
    pub unit: PodShape,
}

impl Quota {
    /// The most pods of `shape` one pause pod takes room for: as many as fit in the
    /// unit. Devices stay one per pause pod: a node may have no room for several.
    pub fn pods_per_pause_pod(&self, shape: &PodShape) -> u32 {
        if !shape.extended.is_empty() {
            return 1;
        }
        let by = |room: u64, one: u64| room.checked_div(one).unwrap_or(u64::MAX);
        u32::try_from(by(self.unit.cpu_millis, shape.cpu_millis).min(by(self.unit.memory_bytes, shape.memory_bytes)))
            .unwrap_or(u32::MAX)
            .max(1)
    }

    /// How many pods of `shape` may be added to `have` of them within what is left.
    fn more(&self, have: u32, shape: &PodShape) -> u32 {
        let by = |room: u64, one: u64| room.checked_div(one).unwrap_or(u64::MAX);
        let k = u64::from(self.pods_per_pause_pod(shape));
        // Pods fit in the pause pods `have` takes (the last may have room) and those left.
        let pause_pods = u64::from(have).div_ceil(k);
        let by_pods = (pause_pods + u64::from(self.pause_pods)).saturating_mul(k).saturating_sub(u64::from(have));
        let most = by(self.cpu_millis, shape.cpu_millis).min(by(self.memory_bytes, shape.memory_bytes)).min(by_pods);
        u32::try_from(most).unwrap_or(u32::MAX)
    }

    /// Takes `pods` of `shape` out of what is left.
    fn take(&mut self, pods: u32, shape: &PodShape) {
        let n = u64::from(pods);
        let pause_pods = n.div_ceil(u64::from(self.pods_per_pause_pod(shape)));
        self.cpu_millis = self.cpu_millis.saturating_sub(n.saturating_mul(shape.cpu_millis));
        self.memory_bytes = self.memory_bytes.saturating_sub(n.saturating_mul(shape.memory_bytes));
        self.pause_pods = self.pause_pods.saturating_sub(u32::try_from(pause_pods).unwrap_or(u32::MAX));
    }
}

/// How far past half a pod a shape's part must be to take a pod it does not run (and
/// how far under, to give one back that it runs), in pods.
const RUNNING_POD_STAYS: f64 = 0.25;

/// The pods of `shape` that hold `room`: the fewest whose CPU and memory both cover it
/// (of those the shape asks for); a shape asking neither (a pod that asks only for a
/// GPU) takes the room's unit pods one for one.
pub fn pods_for(room: Room, shape: &PodShape) -> u32 {
    whole((pods_wanted(room, shape) - 1e-9).ceil())
}

/// The pods of `shape` that `room` is, as a fraction (see [`pods_for`]).
fn pods_wanted(room: Room, shape: &PodShape) -> f64 {
    let ratio = |room: f64, pod: u64| (pod > 0).then(|| room / pod as f64);
    let pods = match (ratio(room.cpu_millis, shape.cpu_millis), ratio(room.memory_bytes, shape.memory_bytes)) {
        (Some(c), Some(m)) => c.max(m),
        (Some(r), None) | (None, Some(r)) => r,
        (None, None) => room.units,
    };
    pods.max(0.0)
}

/// A count of pods as a `u32`, saturating.
fn whole(pods: f64) -> u32 {
    if pods >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        pods.max(0.0) as u32
    }
}

/// One of the pool's pause-pod Deployments as the cluster runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotState {
    /// Which of the pool's Deployments (see [`deployment_name`]).
    pub slot: usize,
    /// The pause pods' requests.
    pub shape: PodShape,
    /// Its replicas; `None` when it differs from the config in anything but its shape
    /// and replicas (image, priority, tolerations): the next decision writes it.
    pub replicas: Option<u32>,
}

impl SlotState {
    /// A slot whose Deployment the functions may not read (their RBAC does not name it,
    /// as before shapes): no room is placed in it.
    pub fn forbidden(slot: usize) -> Self {
        SlotState { slot, shape: PodShape::default(), replicas: None }
    }

    /// Whether it is [`SlotState::forbidden`].
    pub fn is_forbidden(&self) -> bool {
        self.replicas.is_none() && self.shape.is_empty()
    }
}

/// The name of a pool's pause-pod Deployment: `ballast-headroom-POOL` for the first
/// slot (as before shapes), `ballast-headroom-POOL-2` and `-3` for the others. Names
/// by slot, not by shape, so that RBAC can list them.
pub fn deployment_name(pool: &str, slot: usize) -> String {
    match slot {
        0 => format!("ballast-headroom-{pool}"),
        k => format!("ballast-headroom-{pool}-{}", k + 1),
    }
}

impl Room {
    /// `units` pause pods of `unit`, as the room the pool's pods need: the resource that
    /// made the count (the one the demand asks more of, against the unit) as counted, the
    /// other in the demand's own ratio to it. Without a demand to tell, as counted.
    pub fn of_units(units: u32, unit: &PodShape, demand: Option<(u64, u64)>) -> Room {
        let u = f64::from(units);
        let (cpu, memory) = (u * unit.cpu_millis as f64, u * unit.memory_bytes as f64);
        let room = Room { cpu_millis: cpu, memory_bytes: memory, units: u };
        let Some((d_cpu, d_mem)) = demand.filter(|(c, m)| *c > 0 && *m > 0) else { return room };
        if unit.cpu_millis == 0 || unit.memory_bytes == 0 {
            return room;
        }
        let (d_cpu, d_mem) = (d_cpu as f64, d_mem as f64);
        if d_mem / d_cpu > unit.memory_bytes as f64 / unit.cpu_millis as f64 {
            Room { cpu_millis: memory * d_cpu / d_mem, ..room }
        } else {
            Room { memory_bytes: cpu * d_mem / d_cpu, ..room }
        }
    }
}
