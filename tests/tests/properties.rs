//! Property tests over random sequences of signals, delivered with duplicates and
//! out of order, through the real `reconcile` and the in-memory world:
//! - a pool's total desired never drops below where it started (fallback and
//!   failback move capacity; they never remove it);
//! - no ASG ever goes above its max or below its min;
//! - fallback never exceeds max_on_demand;
//! - a signal delivered twice plans nothing new, even past the dedup store;
//! - a dry-run plan never reaches the apply step.

use std::collections::BTreeSet;

use ballast_core::event::{
    CapacityError, Event, InstanceAction, InstanceState, LaunchError, LaunchFailure, LifecycleAction, PoolDemandDetail,
    Signal,
};
use ballast_core::plan::Plan;
use ballast_core::reconcile::Budget;
use ballast_core::testing::World;
use ballast_tests::*;
use chrono::{DateTime, Duration, Utc};
use proptest::prelude::*;

const POOL: &str = "general";
const SPOT: [&str; 2] = ["eks-general-spot-m6", "eks-general-spot-fallback"];
const OD: &str = "eks-general-on-demand";

#[derive(Debug, Clone)]
enum Kind {
    Interrupt { pick: usize, action: u8 },
    Rebalance { pick: usize },
    CapacityError { fallback_group: bool },
    QuotaError,
    Lost { pick: usize },
    Health { pick: usize },
    Lifecycle { pick: usize },
    Override { percent: u32, minutes: u32 },
    Demand { cpu: u32 },
    Tick,
}

#[derive(Debug, Clone)]
struct Step {
    kind: Kind,
    duplicate: bool,
    /// Held back and delivered with the next step: reordering.
    delay: bool,
    advance_secs: u32,
    spot_capacity_lost: bool,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        4 => (any::<usize>(), 0u8..3).prop_map(|(pick, action)| Kind::Interrupt { pick, action }),
        1 => any::<usize>().prop_map(|pick| Kind::Rebalance { pick }),
        2 => any::<bool>().prop_map(|fallback_group| Kind::CapacityError { fallback_group }),
        1 => Just(Kind::QuotaError),
        2 => any::<usize>().prop_map(|pick| Kind::Lost { pick }),
        1 => any::<usize>().prop_map(|pick| Kind::Health { pick }),
        1 => any::<usize>().prop_map(|pick| Kind::Lifecycle { pick }),
        1 => (0u32..80, 1u32..180).prop_map(|(percent, minutes)| Kind::Override { percent, minutes }),
        1 => (0u32..400).prop_map(|cpu| Kind::Demand { cpu }),
        3 => Just(Kind::Tick),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (kind(), prop::bool::weighted(0.25), prop::bool::weighted(0.2), 0u32..1200, prop::bool::weighted(0.3)).prop_map(
        |(kind, duplicate, delay, advance_secs, spot_capacity_lost)| Step {
            kind,
            duplicate,
            delay,
            advance_secs,
            spot_capacity_lost,
        },
    )
}

fn spot_instances(world: &World) -> Vec<String> {
    SPOT.iter()
        .filter_map(|n| world.asg(n))
        .flat_map(|a| a.instances.iter().filter(|i| i.lifecycle_state.is_live()).map(|i| i.id.clone()))
        .collect()
}

fn pick(list: &[String], n: usize) -> Option<String> {
    (!list.is_empty()).then(|| list[n % list.len()].clone())
}

fn make_event(kind: &Kind, world: &mut World, now: DateTime<Utc>, id: String) -> Option<Event> {
    let spot = spot_instances(world);
    let signal = match kind {
        Kind::Interrupt { pick: n, action } => Signal::SpotInterruption {
            instance_id: pick(&spot, *n)?,
            action: [InstanceAction::Terminate, InstanceAction::Stop, InstanceAction::Hibernate][*action as usize % 3],
        },
        Kind::Rebalance { pick: n } => Signal::RebalanceRecommendation { instance_id: pick(&spot, *n)? },
        Kind::CapacityError { fallback_group } => Signal::LaunchUnsuccessful(LaunchFailure {
            asg: SPOT[usize::from(*fallback_group)].into(),
            activity_id: format!("act-{id}"),
            availability_zone: Some("eu-west-1a".into()),
            subnet_id: None,
            status_message: "There is no Spot capacity available that matches your request.".into(),
            cause: String::new(),
            error: LaunchError::Capacity(CapacityError::NoSpotCapacity),
            at: Some(now),
        }),
        Kind::QuotaError => Signal::LaunchUnsuccessful(LaunchFailure {
            asg: SPOT[0].into(),
            activity_id: format!("act-{id}"),
            availability_zone: None,
            subnet_id: None,
            status_message: "vCPU limit".into(),
            cause: String::new(),
            error: LaunchError::Other(Some("VcpuLimitExceeded".into())),
            at: Some(now),
        }),
        Kind::Lost { pick: n } => {
            let instance_id = pick(&spot, *n)?;
            // The instance is really gone: the world loses it (the ASG will replace it).
            for asg in &mut world.asgs {
                asg.instances.retain(|i| i.id != instance_id);
            }
            Signal::InstanceStateChange { instance_id, state: InstanceState::Terminated }
        }
        Kind::Health { pick: n } => Signal::ScheduledChange {
            event_type_code: "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED".into(),
            start_time: Some(now + Duration::days(2)),
            end_time: None,
            instance_ids: vec![pick(&spot, *n)?],
        },
        Kind::Lifecycle { pick: n } => {
            let od: Vec<String> = world.asg(OD)?.instances.iter().map(|i| i.id.clone()).collect();
            let instance_id = pick(&od, *n)?;
            Signal::TerminateLifecycleAction(LifecycleAction {
                asg: OD.into(),
                hook: "ballast-drain".into(),
                token: format!("token-{id}"),
                instance_id,
            })
        }
        Kind::Override { percent, minutes } => Signal::HeadroomOverride {
            pool: POOL.into(),
            percent: *percent,
            duration: format!("{minutes}m").parse().ok()?,
        },
        Kind::Demand { cpu } => Signal::PoolDemand(PoolDemandDetail {
            shapes: Vec::new(),
            pool: POOL.into(),
            cpu_millis: u64::from(*cpu) * 1000,
            memory_bytes: u64::from(*cpu) << 31,
            pods: *cpu,
            nodes: 6,
            observed_at: now,
        }),
        Kind::Tick => Signal::Reconcile,
    };
    Some(Event { id, time: now, source: "proptest".into(), detail_type: "proptest".into(), signal })
}

fn pool_total(world: &World) -> u32 {
    SPOT.iter().chain([&OD]).filter_map(|n| world.asg(n)).map(|a| a.desired).sum()
}

fn effects(plan: &Plan) -> Vec<String> {
    plan.effects().map(|a| serde_json::to_string(&a.kind).unwrap()).collect()
}

fn run(steps: Vec<Step>, dry_run: bool) -> Result<(), TestCaseError> {
    let start = chrono::DateTime::parse_from_rfc3339("2026-11-20T09:00:00Z").unwrap().with_timezone(&Utc);
    let config = config_with_dry_run(dry_run);
    let max_on_demand = config.pool(POOL).unwrap().fallback.max_on_demand;
    let d = Deployment::new(config, state("steady.json"), start);
    let initial = d.memory.world().clone();
    let initial_total = pool_total(&initial);
    let initial_od = initial.asg(OD).unwrap().desired;
    let mut held: Vec<Event> = Vec::new();
    let mut next_id = 1u64 << 40;
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();

    for (index, step) in steps.into_iter().enumerate() {
        d.clock.advance(Duration::seconds(i64::from(step.advance_secs)));
        let now = d.clock.0.lock().map(|t| *t).unwrap();
        let event = {
            let mut world = d.memory.world();
            make_event(&step.kind, &mut world, now, format!("ev-{index}"))
        };
        let mut batch: Vec<Event> = std::mem::take(&mut held);
        if let Some(event) = event.clone() {
            if step.delay {
                held.push(event.clone());
            } else {
                batch.push(event.clone());
            }
            if step.duplicate {
                batch.push(event);
            }
        }
        let outcome = rt.block_on(d.reconciler.handle(batch.clone(), Budget::default()));
        prop_assert!(
            outcome.failures.is_empty(),
            "step {index}: {:?}",
            outcome.failures.iter().map(|f| f.0.to_string()).collect::<Vec<_>>()
        );

        let world = d.memory.world().clone();
        for asg in &world.asgs {
            prop_assert!(
                asg.desired >= asg.min && asg.desired <= asg.max,
                "step {index}: {} desired {} outside {}..{}",
                asg.name,
                asg.desired,
                asg.min,
                asg.max
            );
        }
        if dry_run {
            prop_assert!(world.calls.iter().all(|c| !c.is_effect()), "dry run applied: {:?}", world.calls);
            // Only the shadow record (its own item) is written; the live one never.
            for (name, pool) in &initial.pools {
                prop_assert_eq!(&world.pools[name].record, &pool.record, "dry run wrote the live record");
            }
            for asg in &world.asgs {
                prop_assert_eq!(asg.desired, initial.asg(&asg.name).unwrap().desired);
            }
        } else {
            prop_assert!(
                pool_total(&world) >= initial_total,
                "step {index}: total desired {} fell below {initial_total}",
                pool_total(&world)
            );
            let record = &world.pools[POOL].record;
            prop_assert!(
                record.fallback_units <= max_on_demand,
                "fallback units {} > {max_on_demand}",
                record.fallback_units
            );
            prop_assert!(world.asg(OD).unwrap().desired <= initial_od + max_on_demand, "on-demand grew past the cap");

            // Delivered twice, past the dedup store: the record makes it plan nothing new.
            for event in batch.iter().filter(|e| e.signal != Signal::Reconcile) {
                let pool = d.reconciler.config.pool(POOL).unwrap();
                let observed =
                    rt.block_on(d.reconciler.observe(pool, record, std::slice::from_ref(event), now)).unwrap();
                let again = d.reconciler.plan_for(pool, record, &observed, std::slice::from_ref(event), now);
                let without = d.reconciler.plan_for(pool, record, &observed, &[], now);
                prop_assert_eq!(
                    effects(&again),
                    effects(&without),
                    "step {}: replaying {:?} planned something new",
                    index,
                    event.signal
                );
            }
        }
        let no_capacity: BTreeSet<String> =
            if step.spot_capacity_lost { SPOT.iter().map(|s| s.to_string()).collect() } else { BTreeSet::new() };
        d.memory.world().settle(&d.reconciler.config, &no_capacity, &mut next_id, now);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn capacity_invariants_hold_under_duplicates_and_reordering(steps in prop::collection::vec(step(), 1..16)) {
        run(steps, false)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn dry_run_never_applies(steps in prop::collection::vec(step(), 1..12)) {
        run(steps, true)?;
    }
}
