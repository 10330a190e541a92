//! The learners' tests, one module per learner, and the history as stored.

use chrono::{Datelike, TimeZone, Weekday};

use super::correction::{CORRECTION_RANGE, MAX_HOUR_WINDOWS};
use super::held::MAX_HELD;
use super::lead::{LEAD_SAMPLES, MAX_LAUNCHING};
use super::reaction::MAX_ARRIVALS;
use super::seasonal::MAX_RECENT;
use super::*;
use crate::observe::{ActivityStatus, AsgInstance, LifecycleState, Market, NodeState, ObservedAsg, ScalingActivity};

/// Monday 2026-11-02 00:00 UTC.
fn monday() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 2, 0, 0, 0).unwrap()
}

fn empty_pool() -> ObservedPool {
    ObservedPool {
        spot: vec![],
        on_demand: None,
        nodes: vec![],
        headroom: Vec::new(),
        demand: None,
        left: Default::default(),
    }
}

fn demand_at(cpu_millis: u64, at: DateTime<Utc>) -> Demand {
    Demand { cpu_millis, memory_bytes: cpu_millis << 20, pods: 1, observed_at: at }
}

/// The forwarder's five-minute window ending `m` minutes after Monday 00:00: `pods`
/// started, the p95 (and the longest) wait `p95_ms`.
fn five_minutes_to(m: i64, pods: u32, p95_ms: u64) -> WaitsSeen {
    let end = monday() + Duration::minutes(m);
    WaitsSeen {
        over: None,
        over_with_room: 0,
        window_start: end - Duration::minutes(5),
        window_end: end,
        pods,
        p95_ms,
        max_ms: p95_ms,
    }
}

/// Observes the pool each minute from `from` for `minutes`, demand given by `cpu_at`.
fn watch(h: &mut History, from: DateTime<Utc>, minutes: i64, days: usize, cpu_at: impl Fn(DateTime<Utc>) -> u64) {
    for m in 0..minutes {
        let now = from + Duration::minutes(m);
        h.observe(&empty_pool(), Some(demand_at(cpu_at(now), now)), now, days);
    }
}

/// 10 CPU, rising to 40 CPU over 09:00–09:05 (on the days `ramps` allows), back at 17:00.
fn ramp_at_nine(ramps: impl Fn(Weekday) -> bool) -> impl Fn(DateTime<Utc>) -> u64 {
    move |t| {
        let minutes = i64::from(t.hour() * 60 + t.minute());
        if !ramps(t.weekday()) || !(9 * 60..17 * 60).contains(&minutes) {
            return 10_000;
        }
        10_000 + 6_000 * (minutes - 9 * 60 + 1).min(5) as u64
    }
}

/// A pool of launching instances: `(id, None)` has no node yet, `(id, Some(ready))` has one.
fn launching_pool(ready: &[(&str, Option<bool>)]) -> ObservedPool {
    let instances = ready
        .iter()
        .map(|(id, _)| AsgInstance {
            id: id.to_string(),
            lifecycle_state: LifecycleState::Pending,
            availability_zone: String::new(),
            instance_type: String::new(),
            market: Market::Spot,
        })
        .collect();
    ObservedPool {
        spot: vec![ObservedAsg {
            name: "spot".into(),
            tags: Default::default(),
            desired: ready.len() as u32,
            min: 0,
            max: 10,
            instances,
            activities: vec![],
        }],
        nodes: ready
            .iter()
            .filter_map(|(id, r)| {
                Some(NodeState {
                    allocatable: None,
                    name: format!("n-{id}"),
                    instance_id: id.to_string(),
                    ready: (*r)?,
                    unschedulable: false,
                })
            })
            .collect(),
        ..empty_pool()
    }
}

mod bounds;
mod correction;
mod lead;
mod reaction;
mod seasonal;
