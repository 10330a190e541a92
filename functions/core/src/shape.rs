//! Pods are not fungible CPU: a 4-CPU job fits in no two 2-CPU holes. This module holds
//! what the headroom needs to keep room in the shape of the pods that arrive:
//! - [`PodShape`] and [`ShapeCount`], the sizes the forwarder reports of the pool's
//!   workload pods that start and of those that wait;
//! - [`ShapeMix`], what the pool's record remembers of them (counts that decay with time,
//!   so a daily burst's shape is still known the next morning);
//! - [`place`], which turns an amount of room into slots: pause pods of the shapes that
//!   matter to a p95 target, each slot a hole one such pod fits in.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Duration, Timelike, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::units::{format_cpu_millis, format_memory_bytes};

/// The most shapes one demand report carries (the most frequent), and the most a pool's
/// record remembers: the report stays small whatever runs in the pool.
pub const MAX_SHAPES_REPORTED: usize = 8;

/// The most shapes a pool's record remembers: twice what one report carries, so a new
/// shape that comes steadily builds its weight up beside eight established ones.
pub const MAX_MIX_ENTRIES: usize = 16;

/// The most pause-pod shapes (Deployments) a pool runs at once.
pub const MAX_SLOT_SHAPES: usize = 3;

/// A shape matters to a p95 target when at least this share of the pods that arrive
/// have it: the target lets 5 % of first starts wait, so rarer shapes may.
pub const SHAPE_MATTERS_SHARE: f64 = 0.05;

/// How fast the mix forgets: a shape seen once weighs half as much two days later, so a
/// daily burst is remembered between bursts and a workload gone for a week fades out.
pub const MIX_HALF_LIFE: Duration = Duration::hours(48);

/// A pod's requests as the scheduler fits them: CPU, memory and extended resources
/// (`nvidia.com/gpu`), summed over its containers.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodShape {
    /// CPU requested, in millicores.
    pub cpu_millis: u64,
    /// Memory requested, in bytes.
    pub memory_bytes: u64,
    /// Extended resources requested, in whole units (`nvidia.com/gpu: 1`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended: BTreeMap<String, u64>,
}

impl PodShape {
    /// A shape of CPU and memory only.
    pub fn new(cpu_millis: u64, memory_bytes: u64) -> Self {
        PodShape { cpu_millis, memory_bytes, extended: BTreeMap::new() }
    }

    /// Whether a pod of this shape fits in the room one of `hole` frees.
    pub fn fits_in(&self, hole: &PodShape) -> bool {
        self.cpu_millis <= hole.cpu_millis
            && self.memory_bytes <= hole.memory_bytes
            && self.extended.iter().all(|(name, n)| *n <= hole.extended.get(name).copied().unwrap_or(0))
    }

    /// The smallest shape both `self` and `other` fit in.
    pub fn covering(&self, other: &PodShape) -> PodShape {
        let mut extended = self.extended.clone();
        for (name, n) in &other.extended {
            let e = extended.entry(name.clone()).or_insert(0);
            *e = (*e).max(*n);
        }
        PodShape {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
            extended,
        }
    }

    /// Room for `k` pods of this shape in one pause pod (extended resources too).
    pub fn times(&self, k: u32) -> PodShape {
        let k = u64::from(k);
        PodShape {
            cpu_millis: self.cpu_millis.saturating_mul(k),
            memory_bytes: self.memory_bytes.saturating_mul(k),
            extended: self.extended.iter().map(|(name, n)| (name.clone(), n.saturating_mul(k))).collect(),
        }
    }

    /// `k` when this shape is exactly `k` pods of `base` (`k` ≥ 1).
    pub fn multiple_of(&self, base: &PodShape) -> Option<u32> {
        // Any part the base asks for gives k; a shape of devices only has no CPU or memory.
        let parts = [(self.cpu_millis, base.cpu_millis), (self.memory_bytes, base.memory_bytes)]
            .into_iter()
            .chain(base.extended.iter().map(|(name, n)| (self.extended.get(name).copied().unwrap_or(0), *n)));
        let k = parts.into_iter().find_map(|(mine, theirs)| mine.checked_div(theirs))?;
        let k = u32::try_from(k).ok().filter(|k| *k >= 1)?;
        (base.times(k) == *self).then_some(k)
    }

    /// Whether it requests nothing at all (such pods need no room).
    pub fn is_empty(&self) -> bool {
        self.cpu_millis == 0 && self.memory_bytes == 0 && self.extended.values().all(|n| *n == 0)
    }
}

impl fmt::Display for PodShape {
    /// `4 CPU / 14Gi + 1 nvidia.com/gpu`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} CPU / {}", format_cpu_millis(self.cpu_millis), format_memory_bytes(self.memory_bytes))?;
        for (name, n) in self.extended.iter().filter(|(_, n)| **n > 0) {
            write!(f, " + {n} {name}")?;
        }
        Ok(())
    }
}

/// What runs a pod: it matters to who waits (a Job's pods arrive in bursts, a
/// Deployment's in a ramp) and is reported apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadKind {
    /// Owned by a Job (a CronJob's too): runs to completion.
    Job,
    /// Anything else: a Deployment, StatefulSet or bare pod that keeps running.
    LongRunning,
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WorkloadKind::Job => "Job",
            WorkloadKind::LongRunning => "long-running",
        })
    }
}

/// One shape of the pool's workload pods in a demand report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShapeCount {
    /// Their requests.
    pub shape: PodShape,
    /// What runs them.
    pub kind: WorkloadKind,
    /// Pods of this shape that started (were bound to a node) since the forwarder's
    /// previous demand report.
    pub started: u32,
    /// Pods of this shape waiting for room (created, not bound) when the report was made.
    pub waiting: u32,
}

/// Why a demand report's shapes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeReportError {
    /// More shapes than a report may carry.
    #[error("{0} shapes, at most {MAX_SHAPES_REPORTED} are reported")]
    TooMany(usize),
    /// The same shape and kind twice.
    #[error("shape {0} is listed twice for the same kind")]
    Repeated(String),
    /// More extended resources than a pod's device plugins plausibly give, or a name
    /// longer than Kubernetes allows.
    #[error("a shape asks for {count} extended resources (at most {MAX_EXTENDED}, names of at most 253 characters)")]
    Extended {
        /// How many it asks for.
        count: usize,
    },
}

/// The most extended resources one reported shape may ask for.
pub const MAX_EXTENDED: usize = 4;

/// Checks a report's shapes: bounded, each shape and kind once.
pub fn check_report(shapes: &[ShapeCount]) -> Result<(), ShapeReportError> {
    if shapes.len() > MAX_SHAPES_REPORTED {
        return Err(ShapeReportError::TooMany(shapes.len()));
    }
    for (i, s) in shapes.iter().enumerate() {
        let extended = &s.shape.extended;
        if extended.len() > MAX_EXTENDED || extended.keys().any(|k| k.len() > 253) {
            return Err(ShapeReportError::Extended { count: extended.len() });
        }
        if shapes[..i].iter().any(|o| o.shape == s.shape && o.kind == s.kind) {
            return Err(ShapeReportError::Repeated(s.shape.to_string()));
        }
    }
    Ok(())
}

/// Keeps the `MAX_SHAPES_REPORTED` shapes with the most pods (started and waiting),
/// largest first among equals: what a report carries of many.
pub fn most_frequent(mut shapes: Vec<ShapeCount>) -> Vec<ShapeCount> {
    shapes.sort_by(|a, b| {
        (b.started + b.waiting)
            .cmp(&(a.started + a.waiting))
            .then_with(|| b.shape.cmp(&a.shape))
            .then(a.kind.cmp(&b.kind))
    });
    shapes.truncate(MAX_SHAPES_REPORTED);
    shapes
}

/// One shape the pool's record remembers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MixEntry {
    /// Their requests.
    pub shape: PodShape,
    /// What runs them.
    pub kind: WorkloadKind,
    /// Pods seen starting, in thousandths, decayed by [`MIX_HALF_LIFE`] to `at`.
    pub weight_milli: u64,
    /// The same by hour of the day they started in (in the pool's time zone), so the
    /// room placed ahead of a 10:00 burst is in the shape of the pods that come at 10:00,
    /// not of those that come all day. Empty in records from before hours were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_hour_milli: Vec<u64>,
    /// Pods waiting at the last report that listed the shape.
    pub waiting: u32,
    /// When the weight was last brought up to date.
    pub at: DateTime<Utc>,
}

/// The shapes of the pods that arrive in a pool, as the forwarder's reports showed them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShapeMix {
    /// At most [`MAX_MIX_ENTRIES`], most weight first.
    pub entries: Vec<MixEntry>,
    /// When the newest report was taken in: an older one is passed over.
    pub reported_at: Option<DateTime<Utc>>,
    /// When pods that fit in no pause pod were last told of (once an hour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unfit_reported_at: Option<DateTime<Utc>>,
    /// When Deployments the functions may not read were last told of (once an hour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forbidden_reported_at: Option<DateTime<Utc>>,
}

/// Hours in a day: the mix's weights by hour of the day.
const HOURS: usize = 24;

fn decayed(weight_milli: u64, from: DateTime<Utc>, to: DateTime<Utc>) -> u64 {
    let elapsed = (to - from).num_seconds().max(0) as f64;
    let halves = elapsed / MIX_HALF_LIFE.num_seconds() as f64;
    (weight_milli as f64 * 0.5f64.powf(halves)).round() as u64
}

impl ShapeMix {
    /// Takes in a report made at `at`, its pods' starts counted in the hour of `at` in
    /// `tz`; a report older than the newest taken is passed over (reports may arrive out
    /// of order).
    pub fn observe(&mut self, shapes: &[ShapeCount], at: DateTime<Utc>, tz: Tz) {
        if self.reported_at.is_some_and(|r| r >= at) {
            return;
        }
        self.reported_at = Some(at);
        for e in &mut self.entries {
            e.weight_milli = decayed(e.weight_milli, e.at, at);
            for w in &mut e.by_hour_milli {
                *w = decayed(*w, e.at, at);
            }
            e.at = at;
            e.waiting = 0;
        }
        let hour = at.with_timezone(&tz).hour() as usize;
        for s in shapes.iter().filter(|s| !s.shape.is_empty()) {
            let added = u64::from(s.started) * 1000;
            let e = match self.entries.iter().position(|e| e.shape == s.shape && e.kind == s.kind) {
                Some(i) => &mut self.entries[i],
                None => {
                    self.entries.push(MixEntry {
                        shape: s.shape.clone(),
                        kind: s.kind,
                        weight_milli: 0,
                        by_hour_milli: Vec::new(),
                        waiting: 0,
                        at,
                    });
                    self.entries.last_mut().expect("pushed")
                }
            };
            e.weight_milli = e.weight_milli.saturating_add(added);
            e.by_hour_milli.resize(HOURS, 0);
            e.by_hour_milli[hour] = e.by_hour_milli[hour].saturating_add(added);
            e.waiting = s.waiting;
        }
        // Under a thousandth of a pod is nothing left to remember.
        self.entries.retain(|e| e.weight_milli > 0 || e.waiting > 0);
        self.entries.sort_by(|a, b| {
            (b.weight_milli + u64::from(b.waiting) * 1000)
                .cmp(&(a.weight_milli + u64::from(a.waiting) * 1000))
                .then_with(|| b.shape.cmp(&a.shape))
        });
        self.entries.truncate(MAX_MIX_ENTRIES);
    }

    /// The arrivals to place room for: each shape with its weight (pods started, plus
    /// those waiting now, which arrived and found no room).
    pub fn arrivals(&self) -> Vec<(PodShape, WorkloadKind, f64)> {
        self.weighed(|e| e.weight_milli)
    }

    /// The arrivals to place room for in `[from, to]`: the pods that started in those
    /// hours of the day (in `tz`) on past days, where any did, else at any hour; with
    /// those waiting now.
    pub fn arrivals_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        tz: Tz,
    ) -> Vec<(PodShape, WorkloadKind, f64)> {
        let (first, last) = (from.with_timezone(&tz).hour() as usize, to.with_timezone(&tz).hour() as usize);
        let hours: Vec<usize> = if to - from >= Duration::hours(23) {
            (0..HOURS).collect()
        } else if first <= last {
            (first..=last).collect()
        } else {
            (first..HOURS).chain(0..=last).collect()
        };
        let in_window = |e: &MixEntry| hours.iter().map(|h| e.by_hour_milli.get(*h).copied().unwrap_or(0)).sum::<u64>();
        if self.entries.iter().any(|e| in_window(e) > 0) {
            self.weighed(in_window)
        } else {
            self.arrivals()
        }
    }

    fn weighed(&self, weight_milli: impl Fn(&MixEntry) -> u64) -> Vec<(PodShape, WorkloadKind, f64)> {
        self.entries
            .iter()
            .map(|e| (e.shape.clone(), e.kind, weight_milli(e) as f64 / 1000.0 + f64::from(e.waiting)))
            .filter(|(_, _, w)| *w > 0.0)
            .collect()
    }
}

/// The shapes that matter to a p95 target, and how much of the room each takes.
#[derive(Debug, Clone, PartialEq)]
pub struct Shares {
    /// Up to [`MAX_SLOT_SHAPES`] shapes, largest first, with their share of the room
    /// (summing to 1) and who they serve.
    pub shapes: Vec<(PodShape, f64, String)>,
    /// Shapes too rare to matter (under [`SHAPE_MATTERS_SHARE`] of arrivals) that no
    /// chosen shape covers: told, not held.
    pub left_out: Vec<PodShape>,
}

/// Which shapes to hold room in for these arrivals (shape, kind, pods): those with at
/// least [`SHAPE_MATTERS_SHARE`] of the pods, merged into at most [`MAX_SLOT_SHAPES`]
/// (the pair whose covering shape adds least is merged first); each arriving pod then
/// counts towards the smallest chosen shape it fits in, weighted by the CPU and memory
/// it takes. `None` without arrivals.
pub fn shares(arrivals: &[(PodShape, WorkloadKind, f64)]) -> Option<Shares> {
    shares_within(arrivals, &[], MAX_SLOT_SHAPES)
}

/// [`shares`] into at most `deployments` shapes (those the pool may write), where the
/// shapes in `keep` (those holding room now) stay chosen down to half the share a new
/// one needs.
pub fn shares_within(
    arrivals: &[(PodShape, WorkloadKind, f64)],
    keep: &[PodShape],
    deployments: usize,
) -> Option<Shares> {
    let total: f64 = arrivals.iter().map(|a| a.2).sum();
    if total <= 0.0 {
        return None;
    }
    shares_among(choose(arrivals, total, keep, deployments.clamp(1, MAX_SLOT_SHAPES))?, arrivals)
}

/// The shapes that matter among the arrivals, merged into at most [`MAX_SLOT_SHAPES`].
fn choose(
    arrivals: &[(PodShape, WorkloadKind, f64)],
    total: f64,
    keep: &[PodShape],
    deployments: usize,
) -> Option<Vec<PodShape>> {
    // A shape's pods count together, whatever runs them.
    let mut per_shape: BTreeMap<&PodShape, f64> = BTreeMap::new();
    for (shape, _, pods) in arrivals {
        *per_shape.entry(shape).or_default() += pods;
    }
    // A shape that holds room now keeps it down to half the share: a shape hovering at
    // the threshold would otherwise replace a Deployment's pods with each report.
    let matters = |shape: &PodShape, pods: f64| {
        // Held by pause pods of the shape, or of room for several of its pods.
        let held = keep.iter().any(|k| k.multiple_of(shape).is_some());
        let share = if held { SHAPE_MATTERS_SHARE / 2.0 } else { SHAPE_MATTERS_SHARE };
        pods / total >= share
    };
    let mut chosen: Vec<PodShape> =
        per_shape.iter().filter(|(s, pods)| matters(s, **pods)).map(|(shape, _)| (*shape).clone()).collect();
    // Rare shapes together may be many pods: the most frequent of them join until no
    // more than the 5 % a p95 lets wait fit in no chosen shape.
    let mut rare: Vec<(&PodShape, f64)> = per_shape.iter().map(|(s, p)| (*s, *p)).collect();
    rare.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(a.0)));
    for (shape, _) in rare {
        let unfit: f64 = per_shape.iter().filter(|(s, _)| !chosen.iter().any(|c| s.fits_in(c))).map(|(_, p)| p).sum();
        if unfit / total <= SHAPE_MATTERS_SHARE {
            break;
        }
        if !chosen.iter().any(|c| shape.fits_in(c)) {
            chosen.push(shape.clone());
        }
    }
    // A chosen shape inside another chosen one is not dropped: its pods would take a
    // larger hole than they need. Merging only bounds the Deployments: the pair whose
    // pods the covering shape over-serves least (room wasted per pod, times the pods).
    let pods_of = |c: &PodShape| per_shape.iter().filter(|(s, _)| s.fits_in(c)).map(|(_, p)| p).sum::<f64>();
    while chosen.len() > deployments {
        let mut best: Option<(usize, usize, f64)> = None;
        for i in 0..chosen.len() {
            for j in i + 1..chosen.len() {
                let merged = chosen[i].covering(&chosen[j]);
                let wasted = |c: &PodShape| (volume(&merged) - volume(c)) * per_shape.get(c).copied().unwrap_or(0.0);
                let cost = wasted(&chosen[i]) + wasted(&chosen[j]);
                if best.is_none_or(|b| cost < b.2) {
                    best = Some((i, j, cost));
                }
            }
        }
        let (i, j, _) = best?;
        let merged = chosen[i].covering(&chosen[j]);
        chosen.remove(j);
        chosen[i] = merged;
    }
    chosen.retain(|c| pods_of(c) > 0.0);
    Some(chosen)
}

/// How the room splits between `chosen` shapes (written ones, or those [`shares`]
/// chose): each arriving pod counts towards the smallest it fits in, by the room it
/// takes. `None` when no arriving pod fits any.
pub fn shares_among(mut chosen: Vec<PodShape>, arrivals: &[(PodShape, WorkloadKind, f64)]) -> Option<Shares> {
    let total: f64 = arrivals.iter().map(|a| a.2).sum();
    chosen.sort_by(|a, b| b.cmp(a));
    chosen.dedup();
    let mut weight = vec![0.0; chosen.len()];
    let mut who: Vec<BTreeMap<WorkloadKind, f64>> = vec![BTreeMap::new(); chosen.len()];
    let mut left_out = Vec::new();
    for (shape, kind, pods) in arrivals {
        // The smallest hole it fits in, among those holding no device it does not ask
        // for (a web pod in a GPU pause pod's hole would hold a GPU) where there is one.
        let asks = |c: &PodShape| {
            c.extended.iter().all(|(name, n)| *n == 0 || shape.extended.get(name).is_some_and(|m| *m > 0))
        };
        let fitting = || chosen.iter().enumerate().filter(|(_, c)| shape.fits_in(c));
        let pick = |it: &mut dyn Iterator<Item = (usize, &PodShape)>| {
            it.min_by(|a, b| volume(a.1).total_cmp(&volume(b.1))).map(|(i, _)| i)
        };
        let home = pick(&mut fitting().filter(|(_, c)| asks(c))).or_else(|| pick(&mut fitting()));
        match home {
            Some(i) => {
                weight[i] += pods * volume(shape);
                *who[i].entry(*kind).or_default() += pods;
            }
            None => left_out.push(shape.clone()),
        }
    }
    let sum: f64 = weight.iter().sum();
    if sum <= 0.0 {
        return None;
    }
    left_out.sort();
    left_out.dedup();
    let shapes = chosen
        .into_iter()
        .zip(weight)
        .zip(who)
        .filter(|((_, w), _)| *w > 0.0)
        .map(|((shape, w), who)| {
            let pods: f64 = who.values().sum();
            let kinds: Vec<String> = who.keys().map(|k| k.to_string()).collect();
            let serves = format!("{} pods, {:.0} % of arrivals", kinds.join(" and "), pods * 100.0 / total);
            (shape, w / sum, serves)
        })
        .collect();
    Some(Shares { shapes, left_out })
}

/// A shape's size as one number, to weigh shapes against each other: CPU cores plus
/// memory in 4 GiB (the common ratio of a node), plus 8 cores a device (a GPU is what
/// makes such a node dear).
fn volume(shape: &PodShape) -> f64 {
    // Up to 8 of one, an extended resource counts as devices; more are units of
    // something shared (MiB of GPU memory), which count as one device.
    let devices: u64 = shape.extended.values().map(|n| if *n <= 8 { *n } else { 1 }).sum();
    shape.cpu_millis as f64 / 1000.0 + shape.memory_bytes as f64 / (4u64 << 30) as f64 + 8.0 * devices as f64
}

mod place;

pub use place::{deployment_name, kept_deployments, place, pods_for, Quota, Room, SlotState, Slots};

#[cfg(test)]
mod tests;
