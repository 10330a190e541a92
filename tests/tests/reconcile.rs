//! `reconcile` over the in-memory adapters, with the shipped fixtures and states.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ballast_core::config::PoolConfig;
use ballast_core::ports::{Autoscaling, ErrorKind, PortError, StateStore, Urgency};
use ballast_core::ports::{Clock, FixedClock};
use ballast_core::reconcile::Applied;
use ballast_core::reconcile::Budget;
use ballast_core::reconcile::Reconciler;
use ballast_core::record::{CapacityCall, PoolRecord};
use ballast_core::testing::{Call, Fault, Faulty, InMemory, PortCall};
use ballast_tests::*;
use chrono::{DateTime, Duration, Utc};

fn at(text: &str) -> DateTime<Utc> {
    text.parse().unwrap()
}

fn effects(d: &Deployment) -> Vec<Call> {
    d.memory.world().calls.iter().filter(|c| c.is_effect()).cloned().collect()
}

#[tokio::test]
async fn interruption_is_applied_once_and_duplicates_are_dropped() {
    let warning = fixture("spot-interruption-terminate.json");
    let d = Deployment::new(config_with_dry_run(false), state("steady.json"), warning.time);
    let out = d.reconciler.handle(vec![warning.clone(), warning.clone()], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", out.failures);
    assert_eq!(out.duplicates, vec![warning.id.clone()], "the in-batch duplicate is dropped");
    assert_eq!(out.pools.len(), 1);
    let calls = effects(&d);
    assert_eq!(calls[0], Call::SetDesired { asg: "eks-general-spot-m6".into(), desired: 5 });
    assert!(calls.contains(&Call::Cordon { node: "ip-10-0-0-10.eu-west-1.compute.internal".into() }));
    assert!(calls.contains(&Call::Terminate { instance_id: "i-0a1b2c3d4e5f60001".into(), decrement: true }));
    assert_eq!(d.desired("eks-general-spot-m6"), 4, "surge then terminate-with-decrement");
    // The same event again, later: seen, nothing applied.
    d.clock.advance(Duration::seconds(30));
    let before = d.memory.world().calls.len();
    let again = d.reconciler.handle(vec![warning.clone()], Budget::default()).await;
    assert_eq!(again.duplicates, vec![warning.id]);
    assert_eq!(d.memory.world().calls.len(), before);
}

#[tokio::test]
async fn capacity_error_moves_shortfall_within_one_invocation() {
    let event = fixture("launch-unsuccessful-insufficient-instance-capacity.json");
    let d = Deployment::new(config_with_dry_run(false), state("spot-short.json"), event.time);
    let total_before: u32 =
        d.memory.world().asgs.iter().filter(|a| a.name.starts_with("eks-general")).map(|a| a.desired).sum();
    let out = d.reconciler.handle(vec![event], Budget::default()).await;
    assert!(out.failures.is_empty());
    assert_eq!(d.desired("eks-general-spot-m6"), 4);
    assert_eq!(d.desired("eks-general-on-demand"), 4);
    let total_after: u32 =
        d.memory.world().asgs.iter().filter(|a| a.name.starts_with("eks-general")).map(|a| a.desired).sum();
    assert_eq!(total_before, total_after);
    assert_eq!(d.memory.world().pools["general"].record.fallback_units, 2);
}

#[tokio::test]
async fn non_capacity_failure_does_not_fall_back() {
    for name in ["launch-unsuccessful-vcpu-limit-exceeded.json", "launch-unsuccessful-invalid-launch-template.json"] {
        let event = fixture(name);
        let d = Deployment::new(config_with_dry_run(false), state("spot-short.json"), event.time);
        let out = d.reconciler.handle(vec![event], Budget::default()).await;
        assert_eq!(d.desired("eks-general-on-demand"), 2, "{name}");
        assert!(out.pools[0].plan.notes.iter().any(|n| n.contains("not falling back")), "{name}");
    }
}

#[tokio::test]
async fn dry_run_changes_nothing() {
    let events =
        vec![fixture("spot-interruption-terminate.json"), fixture("launch-unsuccessful-no-spot-capacity.json")];
    let d = Deployment::new(config_with_dry_run(true), state("spot-short.json"), events[0].time);
    let before = d.memory.world().clone();
    let out = d.reconciler.handle(events, Budget::default()).await;
    assert!(out.pools.iter().all(|p| p.plan.dry_run && p.applied.is_empty()));
    assert!(out.pools[0].plan.effects().count() > 0, "the plan still says what it would do");
    let after = d.memory.world();
    assert!(after.calls.iter().all(|c| !c.is_effect()), "{:?}", after.calls);
    assert_eq!(after.asgs, before.asgs);
    assert_eq!(after.pools["general"], before.pools["general"], "the live record is not written");
    assert!(after.seen.is_empty());
    // The shadow record keeps the dry run's memory: the spot ASG is known unavailable,
    // so the next tick's log says what a live run would then do.
    let shadow = &after.pools["general@dry-run"].record;
    assert!(shadow.unavailable.contains_key("eks-general-spot-m6"), "{shadow:?}");
    assert_eq!(shadow.journal, None, "nothing is applied, so nothing waits to be judged");
}

#[tokio::test]
async fn a_held_lease_makes_a_retryable_failure() {
    let event = fixture("spot-interruption-terminate.json");
    let d = Deployment::new(config_with_dry_run(false), state("steady.json"), event.time);
    d.memory.world().leases.insert(
        "general".into(),
        ballast_core::testing::Lease { owner: "other".into(), until: event.time + Duration::minutes(1) },
    );
    let out = d.reconciler.handle(vec![event.clone()], Budget::default()).await;
    assert_eq!(out.failures.len(), 1);
    assert!(out.failures[0].0.is_retryable());
    assert_eq!(out.failures[0].1, vec![event.id.clone()]);
    assert!(effects(&d).is_empty());
    assert!(d.memory.world().seen.is_empty(), "not marked seen: the retry will do it");
    // Once it expires, the retry goes through.
    d.clock.advance(Duration::minutes(2));
    let out = d.reconciler.handle(vec![event], Budget::default()).await;
    assert!(out.failures.is_empty());
    assert!(!effects(&d).is_empty());
}

/// A run that died holding the lease (killed, out of memory) holds back the pool's next
/// spot warning for the lease's time only: two minutes, whatever the drain_timeout (it
/// was drain_timeout + 2 min, 12 min here, past any spot warning's reclaim).
#[tokio::test]
async fn a_run_that_died_holding_the_lease_holds_a_spot_warning_back_two_minutes_at_most() {
    let warning = fixture("spot-interruption-terminate.json");
    let mut config = config_with_dry_run(false);
    config.pools[0].interruption.drain_timeout = "10m".parse().unwrap();
    let d = Deployment::new(config, state("steady.json"), warning.time);
    let taken = d
        .memory
        .acquire_lease("general", "dead-run", warning.time, ballast_core::reconcile::LEASE_TTL, Urgency::CanWait)
        .await
        .unwrap();
    assert!(taken);
    d.clock.advance(Duration::minutes(2) + Duration::seconds(1));
    let out = d.reconciler.handle(vec![warning], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    assert!(!effects(&d).is_empty());
}

/// Another run holds the pool's lease (its drain, say) until `for_` from the event.
fn held(d: &Deployment, at: DateTime<Utc>, for_: Duration) {
    d.memory
        .world()
        .leases
        .insert("general".into(), ballast_core::testing::Lease { owner: "other".into(), until: at + for_ });
}

#[tokio::test]
async fn a_tick_meeting_a_held_lease_is_covered_by_its_holder_not_failed() {
    // A schedule tick (rate 1 minute) during another run's five-minute drain: failing it
    // would retry it and then dead-letter it, and the dead-letter alarm would go off for
    // every long drain. The holder is reconciling the pool; the next tick comes anyway.
    let tick = fixture("scheduled-reconcile.json");
    let d = Deployment::new(config_with_dry_run(false), state("steady.json"), tick.time);
    held(&d, tick.time, Duration::minutes(5));
    let deadline = tick.time + Duration::minutes(15);
    let out = d.reconciler.handle(vec![tick], Budget::until(deadline)).await;
    assert!(out.failures.is_empty(), "{:?}", out.failures);
    assert!(out.pools.iter().all(|p| p.plan.pool != "general"), "nothing planned for the busy pool");
    assert!(out.covered.contains(&"general".to_string()), "{:?}", out.covered);
    assert_eq!(d.clock.now(), fixture("scheduled-reconcile.json").time, "a tick does not wait");
    assert!(effects(&d).is_empty());
}

#[tokio::test]
async fn news_of_a_node_meeting_a_held_lease_is_covered_by_its_holder() {
    // In a reclaim wave the forwarder sends a Node Lifecycle event for every node going
    // and coming: each a run of the cluster-events function that would wait for the lease
    // (within its deadline, for minutes) and then reconcile the pool again. The node is
    // observed by every run; the holder's, or the next tick's, sees it.
    let mut config = config_with_dry_run(false);
    let news = fixture("forwarder-node-lifecycle.json");
    let deadline = news.time + Duration::minutes(15);
    let mut ready =
        ballast_tests::aws::event(&ballast_tests::aws::fixture_json("forwarder-node-lifecycle.json", |v| {
            v["detail"]["condition"] = "ready".into();
        }));
    ready.id = "ready".into();
    for event in [news.clone(), ready.clone()] {
        let d = Deployment::new(config.clone(), state("steady.json"), news.time);
        held(&d, news.time, Duration::minutes(5));
        let out = d.reconciler.handle(vec![event.clone()], Budget::until(deadline).waiting(Duration::MAX)).await;
        assert!(out.failures.is_empty(), "{:?}", errors(&out));
        assert_eq!(out.covered, ["general"], "{:?}", event.signal);
        assert_eq!(d.clock.now(), news.time, "no wait");
        assert!(effects(&d).is_empty());
    }
    // A node's Ready in a pool with a wait target ends a launch it times: only its own run
    // reads it, so it waits for the lease.
    config.pools.iter_mut().find(|p| p.name == "general").unwrap().headroom.target =
        Some(ballast_core::config::WaitTarget {
            wait_p95: "10s".parse().unwrap(),
            history: "14d".parse().unwrap(),
            floor: true,
            time_zone: "Europe/Paris".parse().unwrap(),
        });
    let d = Deployment::new(config, state("steady.json"), news.time);
    held(&d, news.time, Duration::minutes(5));
    let out = d.reconciler.handle(vec![ready], Budget::until(deadline).waiting(Duration::MAX)).await;
    assert!(out.failures.is_empty() && out.covered.is_empty(), "{:?} {:?}", errors(&out), out.covered);
    assert!(d.clock.now() - news.time >= Duration::minutes(5), "waited for the lease");
}

#[tokio::test]
async fn an_event_meeting_a_held_lease_waits_for_it_briefly() {
    // A spot warning while another run holds the lease for ten more seconds (most runs
    // hold it for seconds): the run polls until it is free and acts at once, instead of
    // failing for a redelivery seconds to minutes later.
    let warning = fixture("spot-interruption-terminate.json");
    let d = Deployment::new(config_with_dry_run(false), state("steady.json"), warning.time);
    held(&d, warning.time, Duration::seconds(10));
    let out = d.reconciler.handle(vec![warning.clone()], Budget::until(warning.time + Duration::minutes(15))).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    assert_eq!(out.pools.len(), 1);
    let waited = d.clock.now() - warning.time;
    assert!(waited >= Duration::seconds(10) && waited < Duration::seconds(13), "{waited}");
    assert!(effects(&d).contains(&Call::Terminate { instance_id: "i-0a1b2c3d4e5f60001".into(), decrement: true }));
    let seen: Vec<String> = d.memory.world().seen.keys().cloned().collect();
    assert_eq!(seen, [warning.id.clone(), format!("general#{}", warning.id)], "handled, as a whole and for its pool");

    // Held for minutes (a drain): a waiting run would hold a slot of the function's
    // concurrency, and other pools' warnings with it. It gives up after LEASE_WAIT and
    // fails for a retry, as without the wait.
    let d = Deployment::new(config_with_dry_run(false), state("steady.json"), warning.time);
    held(&d, warning.time, Duration::minutes(4));
    let out = d.reconciler.handle(vec![warning.clone()], Budget::until(warning.time + Duration::minutes(15))).await;
    assert_eq!(out.failures.len(), 1);
    assert!(out.failures[0].0.is_retryable());
    let waited = d.clock.now() - warning.time;
    assert!(waited <= ballast_core::reconcile::LEASE_WAIT, "{waited}");
    assert!(effects(&d).is_empty());
    // Invoked asynchronously (one or two retries a minute apart), it waits the drain out
    // within its deadline instead.
    let d = Deployment::new(config_with_dry_run(false), state("steady.json"), warning.time);
    held(&d, warning.time, Duration::minutes(4));
    let out = d
        .reconciler
        .handle(vec![warning.clone()], Budget::until(warning.time + Duration::minutes(15)).waiting(Duration::MAX))
        .await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    let waited = d.clock.now() - warning.time;
    assert!(waited >= Duration::minutes(4) && waited < Duration::minutes(4) + Duration::seconds(3), "{waited}");
    // Nor past what the deadline leaves the run.
    let d = Deployment::new(config_with_dry_run(false), state("steady.json"), warning.time);
    held(&d, warning.time, Duration::seconds(10));
    let out = d.reconciler.handle(vec![warning.clone()], Budget::until(warning.time + Duration::seconds(75))).await;
    assert_eq!(out.failures.len(), 1, "a minute and the margin kept for the run");
    assert!(d.clock.now() - warning.time < Duration::seconds(5));
}

/// The spot warning's run's clock: while it waits for the lease another run holds
/// ("other"), after its second try, that lease is let go, and before its next try a run
/// for an event that can wait tries for it.
struct LetGoWhileAWarningWaits {
    memory: InMemory,
    clock: FixedClock,
    waits: std::sync::atomic::AtomicU32,
    can_wait: ballast_core::event::Event,
    its_outcome: std::sync::Mutex<Option<ballast_core::reconcile::BatchOutcome>>,
}

#[async_trait::async_trait]
impl Clock for LetGoWhileAWarningWaits {
    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }
    async fn sleep(&self, for_: std::time::Duration) {
        self.clock.sleep(for_).await;
        if self.waits.fetch_add(1, Ordering::SeqCst) == 1 {
            self.memory.release_lease("general", "other").await.unwrap();
            let out = another_run(&self.memory, self.clock.clone())
                .handle(vec![self.can_wait.clone()], Budget::default())
                .await;
            *self.its_outcome.lock().unwrap() = Some(out);
        }
    }
}

#[tokio::test]
async fn a_spot_warning_waiting_for_the_lease_goes_before_events_that_can_wait() {
    // In a reclaim wave the forwarder sends a Node Lifecycle event per node going and
    // coming, demand and unschedulable pods: each a run waiting for the pool's lease. The
    // spot warning's run, waiting with them, must not queue behind them for its turn
    // (each holds the lease for a second or two; the warning gives two minutes).
    for can_wait in
        ["forwarder-node-lifecycle.json", "forwarder-pool-demand-changed.json", "forwarder-pods-unschedulable.json"]
    {
        let warning = fixture("spot-interruption-terminate.json");
        let memory = InMemory::new(state("steady.json"));
        let clock = FixedClock::new(warning.time);
        held_by_other(&memory, warning.time + Duration::minutes(5));
        let waiting_clock = LetGoWhileAWarningWaits {
            memory: memory.clone(),
            clock: clock.clone(),
            waits: Default::default(),
            can_wait: fixture(can_wait),
            its_outcome: Default::default(),
        };
        let warned = Reconciler {
            config: Arc::new(config_with_dry_run(false)),
            autoscaling: memory.clone(),
            cluster: memory.clone(),
            store: memory.clone(),
            clock: waiting_clock,
            owner: "warned-run".into(),
        };
        let out = warned.handle(vec![warning.clone()], Budget::until(warning.time + Duration::minutes(15))).await;
        assert!(out.failures.is_empty(), "{can_wait}: {:?}", errors(&out));
        assert!(
            terminations(&memory)
                .contains(&Call::Terminate { instance_id: "i-0a1b2c3d4e5f60001".into(), decrement: true }),
            "{can_wait}"
        );
        let waiting = warned.clock.its_outcome.lock().unwrap().take().expect("the other run tried");
        assert!(waiting.pools.is_empty(), "{can_wait}: it did not take the warning's turn");
        if can_wait == "forwarder-node-lifecycle.json" {
            assert_eq!(waiting.covered, ["general"], "news of a node: the warning's run observes it");
        } else {
            let busy = ["pool general: another run holds the lease; try again shortly"];
            assert_eq!(errors(&waiting), busy, "{can_wait}");
            assert!(waiting.failures.iter().all(|f| f.0.is_retryable()), "{can_wait}: retried, after the warning");
        }
        // Its turn comes once the warning's claim lapses (another warning may wait under it).
        clock.advance(ballast_core::ports::LEASE_CLAIM_FOR);
        let out = another_run(&memory, clock.clone()).handle(vec![fixture(can_wait)], Budget::default()).await;
        assert!(out.failures.is_empty(), "{can_wait}: {:?}", errors(&out));
    }
}

/// Another run ("other") holds the pool's lease until `until`.
fn held_by_other(memory: &InMemory, until: DateTime<Utc>) {
    memory.world().leases.insert("general".into(), ballast_core::testing::Lease { owner: "other".into(), until });
}

#[tokio::test]
async fn a_busy_pool_waits_after_the_free_ones() {
    // One batch, two pools: the busy one must not hold back the other's warning.
    let general = fixture("spot-interruption-terminate.json");
    let world = state("steady.json");
    let batch_instance = world.asg("eks-batch-spot-c6").unwrap().instances[0].id.clone();
    let mut batch = general.clone();
    batch.id = "batch-warning".into();
    batch.signal = ballast_core::event::Signal::SpotInterruption {
        instance_id: batch_instance.clone(),
        action: ballast_core::event::InstanceAction::Terminate,
    };
    let d = Deployment::new(config_with_dry_run(false), world, general.time);
    held(&d, general.time, Duration::seconds(8));
    let out =
        d.reconciler.handle(vec![general.clone(), batch], Budget::until(general.time + Duration::minutes(15))).await;
    assert!(out.failures.is_empty());
    let order: Vec<&str> = out.pools.iter().map(|p| p.plan.pool.as_str()).collect();
    assert_eq!(order, ["batch", "general"]);
    let calls = effects(&d);
    let batch_at =
        calls.iter().position(|c| matches!(c, Call::Terminate { instance_id, .. } if *instance_id == batch_instance));
    let general_at = calls
        .iter()
        .position(|c| matches!(c, Call::Terminate { instance_id, .. } if instance_id == "i-0a1b2c3d4e5f60001"));
    assert!(batch_at.is_some() && batch_at < general_at, "{calls:?}");
}

#[tokio::test]
async fn an_event_for_two_pools_handled_for_one_is_still_retried_for_the_other() {
    // An AWS Health scheduled change naming an instance of each pool; the general pool's
    // lease is held, the batch pool's is free. The batch pool marks the event handled;
    // the retry must still reach the general pool (it was taken as a duplicate before).
    let mut health = fixture("health-scheduled-change.json");
    let world = state("steady.json");
    let general = world.asg("eks-general-spot-m6").unwrap().instances[0].id.clone();
    let batch = world.asg("eks-batch-spot-c6").unwrap().instances[0].id.clone();
    let ballast_core::event::Signal::ScheduledChange { instance_ids, .. } = &mut health.signal else {
        panic!("{:?}", health.signal)
    };
    *instance_ids = vec![general.clone(), batch.clone()];
    let d = Deployment::new(config_with_dry_run(false), world, health.time);
    held(&d, health.time, Duration::minutes(1));
    let first = d.reconciler.handle(vec![health.clone()], Budget::default()).await;
    assert_eq!(first.pools.iter().map(|p| p.plan.pool.as_str()).collect::<Vec<_>>(), ["batch"]);
    assert_eq!(first.failures.len(), 1);
    assert!(first.failures[0].0.is_retryable());
    d.clock.advance(Duration::minutes(2));
    let retry = d.reconciler.handle(vec![health.clone()], Budget::default()).await;
    assert!(retry.failures.is_empty(), "{:?}", errors(&retry));
    assert_eq!(retry.pools.iter().map(|p| p.plan.pool.as_str()).collect::<Vec<_>>(), ["general"]);
    assert_eq!(retry.duplicates, [health.id.clone()], "a duplicate for the batch pool only");
    assert!(
        effects(&d).iter().any(|c| matches!(c, Call::Cordon { node } if node.contains("10-0-0-10"))),
        "{:?}",
        effects(&d)
    );
    // Handled for both now: a third delivery does nothing.
    let third = d.reconciler.handle(vec![health.clone()], Budget::default()).await;
    assert!(third.pools.is_empty() && third.failures.is_empty());
}

#[tokio::test]
async fn the_forwarders_demand_is_trusted_until_its_next_heartbeat_has_landed() {
    // The forwarder publishes each pool's demand at least every 5 min (its heartbeat);
    // the next one lands seconds after that. A tick between must not list every pod.
    use ballast_core::forwarder::DemandTiming;
    use ballast_core::observe::Demand;
    let tick = fixture("scheduled-reconcile.json");
    let d = Deployment::new(config_with_dry_run(false), state("steady.json"), tick.time);
    let pool = d.reconciler.config.pool("general").unwrap().clone();
    let listed = d.memory.world().pools["general"].demand.expect("the world has pods to list");
    let heartbeat = Duration::from_std(DemandTiming::default().heartbeat).unwrap();
    for age in [heartbeat - Duration::seconds(30), heartbeat + Duration::seconds(20)] {
        let forwarded = Demand { observed_at: tick.time - age, ..listed };
        let record = PoolRecord { demand: Some(forwarded), ..PoolRecord::default() };
        let observed = d.reconciler.observe(&pool, &record, &[], tick.time).await.unwrap();
        assert_eq!(observed.demand, None, "{age}: the forwarder's demand is used, nothing listed");
    }
    // A forwarder silent for two heartbeats is not trusted: the pods are listed.
    let record = PoolRecord {
        demand: Some(Demand { observed_at: tick.time - heartbeat * 2, ..listed }),
        ..PoolRecord::default()
    };
    let observed = d.reconciler.observe(&pool, &record, &[], tick.time).await.unwrap();
    assert_eq!(observed.demand, Some(listed));
}

#[tokio::test]
async fn no_room_to_surge_keeps_capacity() {
    let warning = fixture("spot-interruption-terminate.json");
    let mut world = state("steady.json");
    // At max: the surge goes to the fallback spot ASG, whose max is 0 here, and the
    // on-demand ASG, whose max we set to 2 (its desired): no room anywhere.
    world.asg_mut("eks-general-spot-m6").unwrap().max = 4;
    world.asg_mut("eks-general-spot-fallback").unwrap().max = 0;
    world.asg_mut("eks-general-on-demand").unwrap().max = 2;
    let d = Deployment::new(config_with_dry_run(false), world, warning.time);
    let out = d.reconciler.handle(vec![warning], Budget::default()).await;
    assert!(out.failures.is_empty());
    let plan = &out.pools[0].plan;
    assert!(plan.notes.iter().any(|n| n.contains("no room to surge")));
    assert!(effects(&d).contains(&Call::Terminate { instance_id: "i-0a1b2c3d4e5f60001".into(), decrement: false }));
    assert_eq!(d.desired("eks-general-spot-m6"), 4, "capacity kept: the ASG replaces the instance");
}

#[tokio::test]
async fn version_conflict_replans_and_the_record_is_versioned() {
    let event = fixture("launch-unsuccessful-no-spot-capacity.json");
    let d = Deployment::new(config_with_dry_run(false), state("spot-short.json"), event.time);
    let v0 = d.memory.world().pools["general"].version;
    let out = d.reconciler.handle(vec![event], Budget::default()).await;
    assert!(out.failures.is_empty());
    let world = d.memory.world();
    let pool = &world.pools["general"];
    // The record before acting, then before each run of capacity calls (how far apply
    // got) and after each call (the journal): here one run of raises and lowers.
    let calls = pool.record.journal.as_ref().map_or(0, |j| j.calls.len()) as u64;
    assert!(calls > 0);
    assert_eq!(pool.version, v0 + 1 + 1 + calls);
    assert!(pool.record.journal.as_ref().unwrap().calls.iter().all(|c| c.done()));
    assert!(matches!(out.pools[0].applied[0], Applied::Done));
}

#[tokio::test]
async fn a_storm_becomes_one_desired_write_per_asg_per_batch() {
    let mut world = state("steady.json");
    // A larger spot group: 40 instances, 10 of them interrupted in one batch.
    let asg = world.asg_mut("eks-general-spot-m6").unwrap();
    asg.max = 100;
    let template = asg.instances[0].clone();
    for n in 5..=40u64 {
        asg.instances
            .push(ballast_core::observe::AsgInstance { id: format!("i-0a1b2c3d4e5f6{n:04}"), ..template.clone() });
    }
    asg.desired = asg.instances.len() as u32;
    let base = fixture("spot-interruption-terminate.json");
    let batch: Vec<_> = (5..15u64)
        .map(|n| {
            let mut e = base.clone();
            e.id = format!("storm-{n}");
            e.signal = ballast_core::event::Signal::SpotInterruption {
                instance_id: format!("i-0a1b2c3d4e5f6{n:04}"),
                action: ballast_core::event::InstanceAction::Terminate,
            };
            e
        })
        .collect();
    let mut config = config_with_dry_run(false);
    config.pools[0].fallback.interruption_rate.count = 100;
    let d = Deployment::new(config, world, base.time);
    let out = d.reconciler.handle(batch, Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", out.failures);
    let calls = effects(&d);
    let sets = calls.iter().filter(|c| matches!(c, Call::SetDesired { .. })).count();
    let terminates = calls.iter().filter(|c| matches!(c, Call::Terminate { decrement: true, .. })).count();
    assert_eq!(sets, 1, "ten surges, one SetDesiredCapacity: {calls:?}");
    assert_eq!(terminates, 10, "every interrupted instance accounted for");
    assert_eq!(d.desired("eks-general-spot-m6"), 40);
}

#[tokio::test]
async fn reconcile_routes_every_pool_and_unknown_instances_are_unrouted() {
    let tick = fixture("scheduled-reconcile.json");
    let d = Deployment::new(config_with_dry_run(false), state("steady.json"), tick.time);
    let mut stranger = fixture("rebalance-recommendation.json");
    stranger.signal =
        ballast_core::event::Signal::RebalanceRecommendation { instance_id: "i-0123456789abcdef0".into() };
    let out = d.reconciler.handle(vec![tick, stranger.clone()], Budget::default()).await;
    let pools: Vec<&str> = out.pools.iter().map(|p| p.plan.pool.as_str()).collect();
    assert_eq!(pools, vec!["batch", "general"]);
    assert_eq!(out.unrouted.len(), 1);
    assert_eq!(out.unrouted[0].event_id, stranger.id);
    assert!(out.unrouted[0].why.contains("in none of the configured pools"));
}

#[tokio::test]
async fn lifecycle_action_is_drained_and_completed() {
    let event = fixture("lifecycle-terminate.json");
    let d = Deployment::new(config_with_dry_run(false), state("steady.json"), event.time);
    let out = d.reconciler.handle(vec![event], Budget::default()).await;
    assert!(out.failures.is_empty());
    let calls = effects(&d);
    let token = "87654321-4321-4321-4321-210987654321".to_string();
    assert_eq!(calls.first(), Some(&Call::Heartbeat { token: token.clone() }));
    assert!(calls.contains(&Call::Complete { token }));
}

#[tokio::test]
async fn headroom_override_event_is_applied() {
    let event = fixture("headroom-override.json");
    let d = Deployment::new(config_with_dry_run(false), state("steady.json"), at("2026-11-20T08:30:00Z"));
    let out = d.reconciler.handle(vec![event], Budget::default()).await;
    assert!(out.failures.is_empty());
    // 40% of 38 CPU / 120Gi at 1 CPU / 2Gi per pod: max(15.2, 24) = 24, within max 40.
    assert!(effects(&d).contains(&Call::SetHeadroom { pool: "general".into(), slot: 0, replicas: 24 }));
}

/// Throttles the first `terminates` terminations and the first `completes` lifecycle
/// completions of the in-memory autoscaling, as a throttled API would.
struct Throttles {
    terminates: std::sync::atomic::AtomicUsize,
    completes: std::sync::atomic::AtomicUsize,
    /// Only this lifecycle action's completions, if set.
    token: Option<String>,
}

/// The in-memory autoscaling behind [`Throttles`].
type Throttled = Faulty<InMemory, Throttles>;

impl Throttles {
    fn terminates(memory: &InMemory, n: usize) -> Throttled {
        Faulty::new(memory.clone(), Throttles { terminates: n.into(), completes: 0.into(), token: None })
    }

    fn completes(memory: &InMemory, n: usize) -> Throttled {
        Faulty::new(memory.clone(), Throttles { terminates: 0.into(), completes: n.into(), token: None })
    }

    /// Throttled if `left` is not yet used up (and uses one).
    fn throttled(left: &std::sync::atomic::AtomicUsize, operation: &str) -> Result<(), PortError> {
        match left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)) {
            Ok(_) => Err(PortError::new(ErrorKind::Retryable, operation, "Throttling: Rate exceeded")),
            Err(_) => Ok(()),
        }
    }
}

impl Fault for Throttles {
    fn before(&self, call: &PortCall<'_>) -> Result<Option<PortError>, PortError> {
        match call {
            PortCall::TerminateInstance { .. } => Throttles::throttled(&self.terminates, call.method())?,
            PortCall::CompleteLifecycleAction { action } if self.token.as_ref().is_none_or(|t| *t == action.token) => {
                Throttles::throttled(&self.completes, call.method())?
            }
            _ => {}
        }
        Ok(None)
    }
}

/// The shipped spot warning over the steady world, its first `n` terminations throttled.
fn warned_with_throttled_terminates(
    n: usize,
) -> (ballast_core::event::Event, InMemory, FixedClock, Reconciler<Throttled, InMemory, InMemory, FixedClock>) {
    warned_over_with_throttled_terminates(state("steady.json"), n)
}

/// As [`warned_with_throttled_terminates`], over `world`.
fn warned_over_with_throttled_terminates(
    world: ballast_core::testing::World,
    n: usize,
) -> (ballast_core::event::Event, InMemory, FixedClock, Reconciler<Throttled, InMemory, InMemory, FixedClock>) {
    let warning = fixture("spot-interruption-terminate.json");
    let memory = InMemory::new(world);
    let clock = FixedClock::new(warning.time);
    let reconciler = reconciler_over(
        config_with_dry_run(false),
        Throttles::terminates(&memory, n),
        memory.clone(),
        &memory,
        clock.clone(),
    );
    (warning, memory, clock, reconciler)
}

/// The first run of [`warned_with_throttled_terminates`]: its surge landed (`surged`: the
/// ASG and its size after), its terminate was throttled, a retryable failure (the message
/// goes back to the queue).
async fn surged_and_throttled(
    reconciler: &Reconciler<Throttled, InMemory, InMemory, FixedClock>,
    warning: &ballast_core::event::Event,
    memory: &InMemory,
    (asg, desired): (&str, u32),
) {
    let out = reconciler.handle(vec![warning.clone()], Budget::default()).await;
    assert_eq!(out.failures.len(), 1, "{:?}", errors(&out));
    assert!(out.failures[0].0.is_retryable(), "throttling is retryable: the message goes back to the queue");
    assert_eq!(memory.world().asg(asg).unwrap().desired, desired, "the surge was applied");
}

/// The retry, while whose drain cluster-autoscaler deletes spot-m6's unfilled slots.
fn retry_whose_drain_deletes_the_surge(
    memory: &InMemory,
    clock: &FixedClock,
) -> Reconciler<InMemory, SlowCluster, InMemory, FixedClock> {
    let cluster = SlowCluster { during_drain: Some(delete_unfulfillable), ..SlowCluster::new(memory, clock) };
    reconciler_over(config_with_dry_run(false), memory.clone(), cluster, memory, clock.clone())
}

#[tokio::test]
async fn failed_apply_takes_back_its_intent_and_the_retry_does_not_double() {
    let (warning, memory, clock, reconciler) = warned_with_throttled_terminates(1);
    surged_and_throttled(&reconciler, &warning, &memory, ("eks-general-spot-m6", 5)).await;
    {
        let world = memory.world();
        let record = &world.pools["general"].record;
        let journal = record.journal.as_ref().unwrap();
        // The surge was made ahead of the full plan, whose journal holds the terminate.
        let surges: Vec<_> = journal.calls.iter().filter(|c| matches!(c, CapacityCall::SetDesired { .. })).collect();
        assert!(surges.iter().all(|c| c.done()), "no surge left open: {journal:?}");
        let terminate = journal.calls.iter().find(|c| matches!(c, CapacityCall::Terminate { .. })).unwrap();
        assert!(!terminate.done(), "the terminate is not: the retry judges it and acts again");
        assert!(record.interruptions[0].surge.is_some(), "the applied surge is remembered");
        assert!(world.seen.is_empty());
    }
    clock.advance(Duration::seconds(20));
    let out = reconciler.handle(vec![warning], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", out.failures);
    let world = memory.world();
    let sets: Vec<_> = world.calls.iter().filter(|c| matches!(c, Call::SetDesired { .. })).collect();
    assert_eq!(sets.len(), 1, "no second surge: {sets:?}");
    assert_eq!(world.asg("eks-general-spot-m6").unwrap().desired, 4, "surge then terminate-with-decrement");
}

#[tokio::test]
async fn a_surge_deleted_before_a_later_plans_terminate_is_not_followed_by_a_decrement() {
    // The warning's run surged (4 -> 5) and was throttled at the terminate. Spot had no
    // capacity: cluster-autoscaler, backing off, deleted the unfulfillable slot by setting
    // the ASG to the instances it has (5 -> 4), taking the surge. The retry plans the
    // terminate again, the surge remembered from the first plan: decrementing now would
    // take the interrupted instance's own slot, and the pool would end one short.
    let (warning, memory, clock, reconciler) = warned_with_throttled_terminates(1);
    surged_and_throttled(&reconciler, &warning, &memory, ("eks-general-spot-m6", 5)).await;
    delete_unfulfillable(&memory);
    clock.advance(Duration::seconds(20));
    let out = reconciler.handle(vec![warning], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    let notes = &out.pools[0].plan.notes;
    assert!(notes.iter().any(|n| n.contains("the surge is made again")), "{notes:?}");
    let world = memory.world();
    let surges =
        world.calls.iter().filter(|c| **c == Call::SetDesired { asg: "eks-general-spot-m6".into(), desired: 5 });
    assert_eq!(surges.count(), 2, "surged again: {:?}", world.calls);
    assert!(world.calls.contains(&Call::Terminate { instance_id: "i-0a1b2c3d4e5f60001".into(), decrement: true }));
    assert_eq!(world.asg("eks-general-spot-m6").unwrap().desired, 4, "a replacement for the interrupted instance");
}

#[tokio::test]
async fn a_long_drain_for_a_lifecycle_action_heartbeats_between_slices() {
    let event = fixture("lifecycle-terminate.json");
    let mut world = state("steady.json");
    // A PodDisruptionBudget keeps one pod on the node for the whole drain.
    let node = world.nodes.iter_mut().find(|n| n.state.instance_id == "i-0f9e8d7c6b5a40001").unwrap();
    node.pods = 3;
    node.pdb_blocked_pods = vec!["web-7d9f".into()];
    let mut config = config_with_dry_run(false);
    config.pools[0].interruption.drain_timeout = "3m 30s".parse().unwrap();
    let d = Deployment::new(config, world, event.time);
    let out = d.reconciler.handle(vec![event], Budget::default()).await;
    assert!(out.failures.is_empty());
    let calls = effects(&d);
    let drains = calls.iter().filter(|c| matches!(c, Call::Drain { .. })).count();
    let heartbeats = calls.iter().filter(|c| matches!(c, Call::Heartbeat { .. })).count();
    assert_eq!(drains, 4, "3m30s in 60s slices: {calls:?}");
    assert_eq!(heartbeats, 1 + 3, "one before the drain, one between each slice");
    let applied = &out.pools[0].applied;
    assert!(
        applied.iter().any(|a| matches!(a, Applied::Drained(r) if r.evicted == 2 && r.blocked.len() == 1)),
        "{applied:?}"
    );
    assert!(
        calls.contains(&Call::Complete { token: "87654321-4321-4321-4321-210987654321".into() }),
        "completed after the drain"
    );
}

/// The in-memory autoscaling, its reads of the ASGs throttled.
fn throttled_describe(memory: &InMemory) -> Faulty<InMemory, impl Fault> {
    Faulty::new(memory.clone(), |call: &PortCall<'_>| {
        let operation = match call {
            PortCall::DescribePool { .. } => "DescribeAutoScalingGroups",
            PortCall::AsgsOfInstances { .. } => "DescribeAutoScalingInstances",
            PortCall::AsgTags { .. } => "DescribeTags",
            _ => return Ok(()),
        };
        Err(PortError::new(ErrorKind::Retryable, operation, "Throttling: Rate exceeded"))
    })
}

/// The in-memory state store, its dedup lookup failing (`lookup`) or its marking of
/// handled events (otherwise).
fn failing_seen(memory: &InMemory, lookup: bool) -> Faulty<InMemory, impl Fault> {
    Faulty::new(memory.clone(), move |call: &PortCall<'_>| {
        let operation = match call {
            PortCall::Seen { .. } if lookup => "BatchGetItem",
            PortCall::MarkSeen { .. } if !lookup => "BatchWriteItem",
            _ => return Ok(()),
        };
        Err(PortError::new(ErrorKind::Retryable, operation, "ProvisionedThroughputExceededException"))
    })
}

#[tokio::test]
async fn a_batch_wide_failure_returns_every_event_for_a_retry() {
    let warning = fixture("spot-interruption-terminate.json");
    let mut rebalance = fixture("rebalance-recommendation.json");
    rebalance.signal =
        ballast_core::event::Signal::RebalanceRecommendation { instance_id: "i-0a1b2c3d4e5f60002".into() };
    let demand = fixture("forwarder-pool-demand-changed.json");
    let batch = vec![warning.clone(), rebalance.clone(), demand.clone()];
    let mut all: Vec<String> = batch.iter().map(|e| e.id.clone()).collect();
    all.sort();

    // Routing an instance's event needs the ASGs; DescribeAutoScalingGroups is throttled.
    let memory = InMemory::new(state("steady.json"));
    let reconciler = Reconciler {
        config: Arc::new(config_with_dry_run(false)),
        autoscaling: throttled_describe(&memory),
        cluster: memory.clone(),
        store: memory.clone(),
        clock: FixedClock::new(warning.time),
        owner: "test".into(),
    };
    let out = reconciler.handle(batch.clone(), Budget::default()).await;
    assert_eq!(out.failures.len(), 1);
    assert!(out.failures[0].0.is_retryable());
    let mut ids = out.failures[0].1.clone();
    ids.sort();
    assert_eq!(ids, all, "none of the batch may be lost");

    // The dedup lookup fails before anything is routed.
    let reconciler = Reconciler {
        config: Arc::new(config_with_dry_run(false)),
        autoscaling: memory.clone(),
        cluster: memory.clone(),
        store: failing_seen(&memory, true),
        clock: FixedClock::new(warning.time),
        owner: "test".into(),
    };
    let out = reconciler.handle(batch, Budget::default()).await;
    assert_eq!(out.failures.len(), 1);
    assert!(out.failures[0].0.is_retryable());
    let mut ids = out.failures[0].1.clone();
    ids.sort();
    assert_eq!(ids, all);
    assert!(memory.world().calls.is_empty(), "nothing applied");
}

#[tokio::test]
async fn a_plan_applied_whole_whose_events_could_not_be_marked_handled_is_reported_with_its_plan() {
    let warning = fixture("spot-interruption-terminate.json");
    let memory = InMemory::new(state("steady.json"));
    let reconciler = Reconciler {
        config: Arc::new(config_with_dry_run(false)),
        autoscaling: memory.clone(),
        cluster: memory.clone(),
        store: failing_seen(&memory, false),
        clock: FixedClock::new(warning.time),
        owner: "test".into(),
    };
    let out = reconciler.handle(vec![warning.clone()], Budget::default()).await;
    assert_eq!(out.failures.len(), 1, "{:?}", out.pools);
    let (err, ids) = &out.failures[0];
    assert!(err.is_retryable(), "the event comes back: {err}");
    assert_eq!(ids, &vec![warning.id.clone()]);
    // The plan was applied whole; the error still carries it, so it is logged and its
    // surplus counted (a plain port error would lose both).
    let plan = err.plan().expect("the applied plan travels with the error");
    assert!(plan.effects().count() > 0, "{:?}", plan.actions);
    let terminated = |m: &InMemory| m.world().calls.iter().filter(|c| matches!(c, Call::Terminate { .. })).count();
    let applied = terminated(&memory);
    assert!(applied > 0);
    assert!(err.to_string().contains("the plan was applied"), "{err}");
    // The retry takes the event again and changes nothing: the record says it was done.
    let retry = Reconciler {
        config: reconciler.config.clone(),
        autoscaling: memory.clone(),
        cluster: memory.clone(),
        store: memory.clone(),
        clock: FixedClock::new(warning.time),
        owner: "test".into(),
    }
    .handle(vec![warning], Budget::default())
    .await;
    assert!(retry.failures.is_empty(), "{:?}", retry.failures.iter().map(|(e, _)| e.to_string()).collect::<Vec<_>>());
    assert_eq!(terminated(&memory), applied, "not terminated twice");
}

/// A cluster whose cordon takes most of half the lease and whose drain takes its whole
/// timeout; at the drain's start it reads how long the run's lease has left.
#[derive(Clone)]
struct SlowCluster {
    memory: InMemory,
    clock: FixedClock,
    cordon_takes: Duration,
    lease_left_at_drain: Arc<std::sync::Mutex<Vec<(Duration, std::time::Duration)>>>,
    /// What another writer does to the world while the drain runs.
    during_drain: Option<fn(&InMemory)>,
    /// Another run, once, while the first drain runs.
    run_during_drain: Arc<std::sync::Mutex<Option<RunDuringDrain>>>,
    /// A PodDisruptionBudget holds every drain for its whole slice.
    blocked: bool,
    /// The drain's time passes a second at a time, other runs of the batch going on
    /// between (with a [`TurnTakingClock`]), as real time does.
    in_steps: bool,
}

impl SlowCluster {
    /// Cordons at once, drains its whole slice, no one else acting.
    fn new(memory: &InMemory, clock: &FixedClock) -> SlowCluster {
        SlowCluster {
            memory: memory.clone(),
            clock: clock.clone(),
            cordon_takes: Duration::zero(),
            lease_left_at_drain: Arc::default(),
            during_drain: None,
            run_during_drain: Arc::default(),
            blocked: false,
            in_steps: false,
        }
    }
}

type RunDuringDrain = Box<dyn FnOnce() -> futures::future::BoxFuture<'static, ()> + Send>;

/// A reconciler over the in-memory world, with these ports in front of it.
fn reconciler_over<A: Autoscaling, C: ballast_core::ports::Cluster>(
    config: ballast_core::config::Config,
    autoscaling: A,
    cluster: C,
    memory: &InMemory,
    clock: FixedClock,
) -> Reconciler<A, C, InMemory, FixedClock> {
    Reconciler { config: Arc::new(config), autoscaling, cluster, store: memory.clone(), clock, owner: "test".into() }
}

/// The failures' messages, for an assertion's message.
fn errors(out: &ballast_core::reconcile::BatchOutcome) -> Vec<String> {
    out.failures.iter().map(|f| f.0.to_string()).collect()
}

#[async_trait::async_trait]
impl ballast_core::ports::Cluster for SlowCluster {
    async fn pool_nodes(&self, pool: &PoolConfig) -> Result<Vec<ballast_core::observe::NodeState>, PortError> {
        self.memory.pool_nodes(pool).await
    }
    async fn headroom(&self, pool: &PoolConfig) -> Result<Vec<ballast_core::shape::SlotState>, PortError> {
        self.memory.headroom(pool).await
    }
    async fn set_headroom(
        &self,
        pool: &PoolConfig,
        slot: usize,
        shape: &ballast_core::shape::PodShape,
        replicas: u32,
    ) -> Result<(), PortError> {
        self.memory.set_headroom(pool, slot, shape, replicas).await
    }
    async fn pool_demand(
        &self,
        pool: &PoolConfig,
        now: DateTime<Utc>,
    ) -> Result<Option<ballast_core::observe::Demand>, PortError> {
        self.memory.pool_demand(pool, now).await
    }
    async fn cordon(&self, node: &str) -> Result<(), PortError> {
        self.clock.advance(self.cordon_takes);
        self.memory.cordon(node).await
    }
    async fn uncordon(&self, node: &str) -> Result<(), PortError> {
        self.memory.uncordon(node).await
    }
    async fn drain(
        &self,
        node: &str,
        timeout: std::time::Duration,
    ) -> Result<ballast_core::ports::DrainReport, PortError> {
        // A real drain waits on the API server: other pools' runs of the batch go on.
        tokio::task::yield_now().await;
        let now = *self.clock.0.lock().unwrap();
        let until = self.memory.world().leases.get("general").map(|l| l.until).unwrap_or(now);
        self.lease_left_at_drain.lock().unwrap().push((until - now, timeout));
        if let Some(act) = self.during_drain {
            act(&self.memory);
        }
        let other_run = self.run_during_drain.lock().unwrap().take();
        if let Some(run) = other_run {
            run().await;
        }
        if self.in_steps {
            for _ in 0..timeout.as_secs() {
                self.clock.advance(Duration::seconds(1));
                tokio::task::yield_now().await;
            }
        } else {
            self.clock.advance(Duration::from_std(timeout).unwrap());
        }
        if self.blocked {
            let why = "Cannot evict pod as it would violate the pod's disruption budget.".to_string();
            return Ok(ballast_core::ports::DrainReport { evicted: 0, blocked: vec![("default/web-1".into(), why)] });
        }
        self.memory.drain(node, timeout).await
    }
}

/// The shipped spot warning for i-…0001 over the steady world, whose drain takes its
/// whole timeout; `during` runs once while it drains, with the world and the clock.
fn warned_with_a_run_during_the_drain<F>(
    during: impl FnOnce(InMemory, FixedClock) -> F + Send + 'static,
) -> (ballast_core::event::Event, InMemory, SlowCluster, Reconciler<InMemory, SlowCluster, InMemory, FixedClock>)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let warning = fixture("spot-interruption-terminate.json");
    let memory = InMemory::new(state("steady.json"));
    let clock = FixedClock::new(warning.time);
    let cluster = SlowCluster::new(&memory, &clock);
    let (world, at) = (memory.clone(), clock.clone());
    *cluster.run_during_drain.lock().unwrap() = Some(Box::new(move || Box::pin(during(world, at))));
    let reconciler = reconciler_over(config_with_dry_run(false), memory.clone(), cluster.clone(), &memory, clock);
    (warning, memory, cluster, reconciler)
}

/// Another Lambda run over the same world, acting at once (its drains take no time).
fn another_run(memory: &InMemory, clock: FixedClock) -> Reconciler<InMemory, InMemory, InMemory, FixedClock> {
    Reconciler {
        owner: "another-run".into(),
        ..reconciler_over(config_with_dry_run(false), memory.clone(), memory.clone(), memory, clock)
    }
}

fn terminations(memory: &InMemory) -> Vec<Call> {
    memory.world().calls.iter().filter(|c| matches!(c, Call::Terminate { .. })).cloned().collect()
}

/// The warned run went through its whole plan: nothing left to another run, its node
/// terminated once, with decrement.
fn finished_its_own_plan(out: &ballast_core::reconcile::BatchOutcome, memory: &InMemory) {
    assert!(out.failures.is_empty(), "{:?}", errors(out));
    assert!(!out.pools[0].applied.iter().any(|a| matches!(a, Applied::Skipped { .. })), "{:?}", out.pools[0].applied);
    assert_eq!(terminations(memory), [Call::Terminate { instance_id: "i-0a1b2c3d4e5f60001".into(), decrement: true }]);
}

#[tokio::test]
async fn a_spot_warning_during_another_runs_drain_is_acted_on_at_once() {
    // The first warning's run drains its node for the whole 90 s drain_timeout. A second
    // warning, for another node of the pool, arrives meanwhile: its replacement cannot
    // wait for that drain (the node has two minutes). It finds the lease free, surges at
    // once, and takes over what was left of the first plan (judged as a run's that died
    // in its drain); the first run, back from its drain, leaves that to it.
    let (warning, memory, cluster, reconciler) = warned_with_a_run_during_the_drain(|memory, clock| async move {
        assert!(!memory.world().leases.contains_key("general"), "the lease is free during the drain");
        let second =
            ballast_tests::aws::event(&ballast_tests::aws::fixture_json("spot-interruption-terminate.json", |v| {
                v["id"] = "second-warning".into();
                v["detail"]["instance-id"] = "i-0a1b2c3d4e5f60002".into();
                v["resources"] = serde_json::json!(["arn:aws:ec2:eu-west-1:123456789012:instance/i-0a1b2c3d4e5f60002"]);
            }));
        clock.advance(Duration::seconds(40));
        let warned_at = fixture("spot-interruption-terminate.json").time;
        let drained_for = (clock.now() - warned_at).to_std().unwrap();
        assert!(drained_for > std::time::Duration::ZERO, "the second warning comes during the drain");
        let out = another_run(&memory, clock).handle(vec![second], Budget::default()).await;
        assert!(out.failures.is_empty(), "acted on, not retried: {:?}", errors(&out));
        let calls = memory.world().calls.clone();
        assert!(calls.contains(&Call::SetDesired { asg: "eks-general-spot-m6".into(), desired: 6 }), "{calls:?}");
        // The first node's drain goes on for what is left of its 90 s (and the warning's
        // 10 s of delivery), not 90 s again.
        let redrain = out.pools[0].plan.actions.iter().find_map(|a| match &a.kind {
            ballast_core::plan::ActionKind::DrainNode { instance_id, timeout, .. }
                if instance_id == "i-0a1b2c3d4e5f60001" =>
            {
                Some(timeout.0)
            }
            _ => None,
        });
        assert_eq!(redrain, Some(std::time::Duration::from_secs(100) - drained_for), "drained {drained_for:?}");
    });
    let out = reconciler.handle(vec![warning], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    assert_eq!(cluster.lease_left_at_drain.lock().unwrap().len(), 1, "the first run drained once");
    let left_to_it =
        out.pools[0].applied.iter().any(|a| matches!(a, Applied::Skipped { why } if why.contains("re-planned by it")));
    assert!(left_to_it, "{:?}", out.pools[0].applied);
    // Each interrupted node replaced once and removed once, with decrement.
    assert_eq!(
        terminations(&memory),
        [
            Call::Terminate { instance_id: "i-0a1b2c3d4e5f60001".into(), decrement: true },
            Call::Terminate { instance_id: "i-0a1b2c3d4e5f60002".into(), decrement: true }
        ]
    );
    let world = memory.world();
    assert_eq!(world.asg("eks-general-spot-m6").unwrap().desired, 4);
    assert_eq!(world.pools["general"].record.draining, None);
    assert!(!world.leases.contains_key("general"), "released");
}

#[tokio::test]
async fn a_tick_during_a_drain_stands_down_and_the_drain_finishes_its_own_plan() {
    let (warning, memory, _, reconciler) = warned_with_a_run_during_the_drain(|memory, clock| async move {
        let out =
            another_run(&memory, clock).handle(vec![fixture("scheduled-reconcile.json")], Budget::default()).await;
        assert!(out.failures.is_empty(), "{:?}", errors(&out));
        assert_eq!(out.covered, ["general"], "the draining run's pool is left to it");
        assert!(out.pools.iter().all(|p| p.plan.pool != "general"));
    });
    let out = reconciler.handle(vec![warning], Budget::default()).await;
    finished_its_own_plan(&out, &memory);
    let world = memory.world();
    assert_eq!(world.asg("eks-general-spot-m6").unwrap().desired, 4);
    assert_eq!(world.pools["general"].record.draining, None, "the mark is cleared once the lease is back");
}

#[tokio::test]
async fn an_event_that_can_wait_waits_for_a_drain_rather_than_take_it_over() {
    // The forwarder's demand every 30 s, and the unschedulable pods the drain's own
    // evictions make every few seconds, would otherwise take over every drain longer than
    // that: one blocked by a PodDisruptionBudget would never end in its terminate.
    let (warning, memory, _, reconciler) = warned_with_a_run_during_the_drain(|memory, clock| async move {
        for event in ["forwarder-pool-demand-changed.json", "forwarder-pods-unschedulable.json"] {
            let out = another_run(&memory, clock.clone()).handle(vec![fixture(event)], Budget::default()).await;
            assert_eq!(
                errors(&out),
                ["pool general: another run holds the lease; try again shortly"],
                "{event}: retried after the drain"
            );
            assert!(out.failures.iter().all(|f| f.0.is_retryable()));
        }
    });
    let out = reconciler.handle(vec![warning], Budget::default()).await;
    finished_its_own_plan(&out, &memory);
}

#[tokio::test]
async fn a_lease_held_at_the_drains_end_by_a_run_that_planned_nothing_is_waited_for() {
    // A tick standing down (or another drainer taking its own lease back) holds the lease
    // for a moment as the drain ends, and writes nothing: the drained plan is still this
    // run's. It waits for the lease and goes on.
    let (warning, memory, _, reconciler) = warned_with_a_run_during_the_drain(|memory, clock| async move {
        let until = clock.now() + Duration::seconds(90) + Duration::seconds(5);
        memory.world().leases.insert("general".into(), ballast_core::testing::Lease { owner: "a-tick".into(), until });
    });
    let out = reconciler.handle(vec![warning], Budget::default()).await;
    finished_its_own_plan(&out, &memory);
}

#[tokio::test]
async fn a_run_that_died_in_its_drain_holds_ticks_back_only_until_its_drains_would_have_ended() {
    // The run died in its drain: its mark stays. Ticks stand down until then; after it,
    // one judges the journal and finishes the plan.
    let (warning, memory, _, reconciler) = warned_with_a_run_during_the_drain(|_, _| async move {
        std::future::pending::<()>().await;
    });
    let died = tokio::time::timeout(
        std::time::Duration::from_millis(200),
        reconciler.handle(vec![warning.clone()], Budget::default()),
    )
    .await;
    assert!(died.is_err(), "the first run never came back from its drain");
    let until = memory.world().pools["general"].record.draining.clone().expect("the mark").until;
    let clock = FixedClock::new(warning.time + Duration::seconds(30));
    let out =
        another_run(&memory, clock.clone()).handle(vec![fixture("scheduled-reconcile.json")], Budget::default()).await;
    assert_eq!(out.covered, ["general"]);
    clock.advance(until - (warning.time + Duration::seconds(30)));
    let next_tick = ballast_tests::aws::event(&ballast_tests::aws::fixture_json("scheduled-reconcile.json", |v| {
        v["id"] = "the-next-tick".into();
    }));
    let out = another_run(&memory, clock).handle(vec![next_tick], Budget::default()).await;
    assert!(out.failures.is_empty() && out.covered.is_empty(), "{:?} {:?}", errors(&out), out.covered);
    assert_eq!(terminations(&memory), [Call::Terminate { instance_id: "i-0a1b2c3d4e5f60001".into(), decrement: true }]);
    assert_eq!(memory.world().asg("eks-general-spot-m6").unwrap().desired, 4);
}

/// A cluster whose first drain another run takes over, acting on the shipped spot warning.
fn taken_over_by_a_spot_warning(memory: &InMemory, clock: &FixedClock) -> SlowCluster {
    let cluster = SlowCluster::new(memory, clock);
    let (world, at) = (memory.clone(), clock.clone());
    *cluster.run_during_drain.lock().unwrap() = Some(Box::new(move || {
        Box::pin(async move {
            let out = another_run(&world, at)
                .handle(vec![fixture("spot-interruption-terminate.json")], Budget::default())
                .await;
            assert!(out.failures.is_empty(), "{:?}", errors(&out));
        })
    }));
    cluster
}

#[tokio::test]
async fn a_lifecycle_action_drained_before_another_run_took_over_is_still_completed() {
    let event = fixture("lifecycle-terminate.json");
    let memory = InMemory::new(state("steady.json"));
    let clock = FixedClock::new(event.time);
    let cluster = taken_over_by_a_spot_warning(&memory, &clock);
    let reconciler = reconciler_over(config_with_dry_run(false), memory.clone(), cluster, &memory, clock);
    let out = reconciler.handle(vec![event], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    let token = "87654321-4321-4321-4321-210987654321".to_string();
    let completes = memory.world().calls.iter().filter(|c| **c == Call::Complete { token: token.clone() }).count();
    assert_eq!(completes, 1, "{:?}", memory.world().calls);
}

/// The shipped spot warning over the steady world, with another writer's `act` while
/// the node drains.
fn warned_while_draining(
    act: fn(&InMemory),
) -> (ballast_core::event::Event, InMemory, Reconciler<InMemory, SlowCluster, InMemory, FixedClock>) {
    let warning = fixture("spot-interruption-terminate.json");
    let memory = InMemory::new(state("steady.json"));
    let clock = FixedClock::new(warning.time);
    let cluster = SlowCluster { during_drain: Some(act), ..SlowCluster::new(&memory, &clock) };
    let reconciler = reconciler_over(config_with_dry_run(false), memory.clone(), cluster, &memory, clock);
    (warning, memory, reconciler)
}

#[tokio::test]
async fn a_surge_cluster_autoscaler_deleted_as_unfulfillable_is_not_followed_by_a_decrement() {
    // Spot is gone: the surge for i-...0001 stays an unfilled slot. While the node drains,
    // cluster-autoscaler sees the ASG's scale-up failed and deletes its placeholders by
    // setting the ASG to the instances it has (cloudprovider/aws DeleteInstances), which
    // takes the surge's slot. Terminating with decrement as planned would then take the
    // interrupted instance's own slot too: one instance lost for good.
    let (warning, memory, reconciler) = warned_while_draining(|memory: &InMemory| {
        let mut world = memory.world();
        let asg = world.asg_mut("eks-general-spot-m6").unwrap();
        assert_eq!(asg.desired, 5, "surged, the slot unfilled");
        asg.desired = asg.instances.len() as u32;
    });
    let out = reconciler.handle(vec![warning], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    let world = memory.world();
    assert!(world.calls.contains(&Call::Terminate { instance_id: "i-0a1b2c3d4e5f60001".into(), decrement: false }));
    let asg = world.asg("eks-general-spot-m6").unwrap();
    assert_eq!(asg.desired, 4, "the interrupted instance's slot stays, for its replacement");
}

#[tokio::test]
async fn an_instance_aws_reclaimed_during_the_drain_is_no_failure_and_its_surge_is_withdrawn() {
    // The 2-minute notice ran out while the node drained: the ASG no longer has the
    // instance and refuses the terminate (ValidationError: permanent). That race must not
    // dead-letter the warning and set the alarm off; and since the refusal shows the
    // decrement was never made, the ASG's own replacement makes the surge surplus: the
    // next run withdraws it rather than only naming it.
    let (warning, memory, reconciler) = warned_while_draining(|memory: &InMemory| {
        let mut world = memory.world();
        world.asgs.iter_mut().for_each(|a| a.instances.retain(|i| i.id != "i-0a1b2c3d4e5f60001"));
    });
    let out = reconciler.handle(vec![warning.clone()], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    let skipped = out.pools[0].applied.iter().any(
        |a| matches!(a, Applied::Skipped { why } if why.contains("left eks-general-spot-m6 before Ballast removed it")),
    );
    assert!(skipped, "{:?}", out.pools[0].applied);
    assert_eq!(memory.world().asg("eks-general-spot-m6").unwrap().desired, 5, "surged, never decremented");
    // The next tick withdraws the surge's unfilled slot: back to 4, nothing left over.
    let tick = reconciler.handle(vec![fixture("scheduled-reconcile.json")], Budget::default()).await;
    assert!(tick.failures.is_empty(), "{:?}", errors(&tick));
    let general = tick.pools.iter().find(|p| p.plan.pool == "general").unwrap();
    assert_eq!(memory.world().asg("eks-general-spot-m6").unwrap().desired, 4, "{:?}", general.plan.notes);
    assert_eq!(general.plan.surplus_named(), 0, "{:?}", general.plan.notes);
}

/// The in-memory autoscaling, but for the calls `refuses` answers with an error of
/// AWS's (by operation and what it is about: an ASG, an instance).
struct Refusing {
    refuses: fn(&str, &str) -> Option<PortError>,
}

impl Refusing {
    fn over(memory: &InMemory, refuses: fn(&str, &str) -> Option<PortError>) -> Faulty<InMemory, Refusing> {
        Faulty::new(memory.clone(), Refusing { refuses })
    }
}

impl Fault for Refusing {
    fn before(&self, call: &PortCall<'_>) -> Result<Option<PortError>, PortError> {
        let (operation, subject) = match call {
            PortCall::SetDesiredCapacity { asg, .. } => ("SetDesiredCapacity", *asg),
            PortCall::TerminateInstance { instance_id, .. } => ("TerminateInstanceInAutoScalingGroup", *instance_id),
            PortCall::RecordLifecycleHeartbeat { action } => ("RecordLifecycleActionHeartbeat", &*action.instance_id),
            PortCall::CompleteLifecycleAction { action } => ("CompleteLifecycleAction", &*action.instance_id),
            _ => return Ok(None),
        };
        (self.refuses)(operation, subject).map_or(Ok(None), Err)
    }
}

/// A lifecycle action that is over (completed by an earlier run whose answer was lost,
/// or timed out): AWS answers both lifecycle calls with this ValidationError.
fn lifecycle_over(memory: &InMemory) -> Faulty<InMemory, Refusing> {
    let refuses = |operation: &str, instance: &str| {
        operation.contains("Lifecycle").then(|| {
            let message = format!("ValidationError: No active Lifecycle Action found with instance ID {instance}");
            PortError::new(ErrorKind::Gone, operation, message)
        })
    };
    Refusing::over(memory, refuses)
}

#[tokio::test]
async fn a_lifecycle_action_already_over_is_not_a_failure() {
    // A redelivered lifecycle event whose action an earlier run completed (its answer
    // lost): dead-lettering it would set the alarm off for nothing.
    let event = fixture("lifecycle-terminate.json");
    let memory = InMemory::new(state("steady.json"));
    let reconciler = reconciler_over(
        config_with_dry_run(false),
        lifecycle_over(&memory),
        memory.clone(),
        &memory,
        FixedClock::new(event.time),
    );
    let out = reconciler.handle(vec![event.clone()], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    let over = out.pools[0]
        .applied
        .iter()
        .filter(|a| matches!(a, Applied::Skipped { why } if why.starts_with("the lifecycle action is over")))
        .count();
    assert_eq!(over, 2, "the heartbeat and the completion: {:?}", out.pools[0].applied);

    // A drain a budget holds, for an action that turns out over at its first heartbeat:
    // the drain stops there rather than hold the lease for the rest of its timeout.
    let memory = InMemory::new(state("steady.json"));
    let clock = FixedClock::new(event.time);
    let cluster = SlowCluster { blocked: true, ..SlowCluster::new(&memory, &clock) };
    let mut config = config_with_dry_run(false);
    for pool in &mut config.pools {
        pool.interruption.drain_timeout = ballast_core::units::HumanDuration(std::time::Duration::from_secs(300));
    }
    let reconciler = reconciler_over(config, lifecycle_over(&memory), cluster.clone(), &memory, clock);
    let out = reconciler.handle(vec![event], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    assert_eq!(cluster.lease_left_at_drain.lock().unwrap().len(), 1, "one slice, not five");
}

#[tokio::test]
async fn a_message_retried_for_one_pool_is_not_also_dead_lettered_for_another() {
    // An AWS Health retirement naming an instance of each pool: the general pool's lease
    // is held (a retry helps), the batch pool's surge is refused (no retry helps). The
    // message comes back for the general pool; dead-lettering it too would put the event
    // in the dead-letter queue while it is still being handled.
    use ballast_tests::aws::{fixture_json, sqs_batch};
    let health = fixture_json("health-scheduled-change.json", |v| {
        v["detail"]["affectedEntities"] = serde_json::json!([
            { "entityValue": "i-0a1b2c3d4e5f60001", "status": "IMPAIRED" },
            { "entityValue": "i-0c0ffee0000b00001", "status": "IMPAIRED" }
        ]);
    });
    let time = ballast_tests::aws::event(&health).time;
    let memory = InMemory::new(state("steady.json"));
    memory.world().leases.insert(
        "general".into(),
        ballast_core::testing::Lease { owner: "other".into(), until: time + Duration::minutes(1) },
    );
    // AWS refuses every size change of the batch pool's ASGs, as one outside the ASG's
    // bounds: a failure no retry mends.
    let refuses = |operation: &str, asg: &str| {
        asg.starts_with("eks-batch").then(|| {
            let why = "ValidationError: New SetDesiredCapacity value 3 is above max value 2";
            PortError::new(ErrorKind::Permanent, operation, why)
        })
    };
    let refuses_batch = Refusing::over(&memory, refuses);
    let config = config_with_dry_run(false);
    let app = ballast_lambda::app::App {
        function: "interruption",
        origin: config.origin(),
        reconciler: reconciler_over(config, refuses_batch, memory.clone(), &memory, FixedClock::new(time)),
        dead_letters: Some(memory.clone()),
        max_receives: None,
        redelivery: None,
        metrics: ballast_lambda::app::metrics_to_stderr,
    };
    let (response, summary) = app.interruption(sqs_batch(&[("m1".into(), health.clone())])).await;
    assert_eq!(summary.errors.len(), 2, "{summary:?}");
    let failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    assert_eq!(failed, ["m1"], "retried for the general pool");
    assert!(memory.world().dead_letters.is_empty(), "{:?}", memory.world().dead_letters);

    // The queue's last receive, the general pool's lease still held: dead-lettered from
    // here with both errors (the redrive policy would move it there with neither).
    let app = ballast_lambda::app::App { max_receives: Some(10), ..app };
    let mut batch = sqs_batch(&[("m1".into(), health)]);
    batch.records[0].attributes.insert("ApproximateReceiveCount".into(), "10".into());
    let (response, _) = app.interruption(batch).await;
    assert!(response.batch_item_failures.is_empty(), "deleted from the queue, kept in the dead-letter queue");
    let parked = memory.world().dead_letters.clone();
    assert_eq!(parked.len(), 1, "{parked:?}");
    let why = &parked[0].1;
    assert!(why.starts_with("still failing on receive 10, the queue's last: "), "{why}");
    assert!(why.contains("lease") && why.contains("above max value 2"), "both pools' errors: {why}");
}

fn delete_unfulfillable(memory: &InMemory) {
    let mut world = memory.world();
    let asg = world.asg_mut("eks-general-spot-m6").unwrap();
    asg.desired = asg.instances.len() as u32;
}

#[tokio::test]
async fn a_surge_deleted_after_two_failed_terminates_is_not_followed_by_a_decrement() {
    // P1 surges 4 -> 5, its terminate is throttled. P2 (the retry, the ASG still at 5)
    // plans the terminate again, no raise of its own, and is throttled too. Then
    // cluster-autoscaler deletes the unfilled slot (5 -> 4). P3 settles P2's journal,
    // which has no size change of the ASG: the surge is judged by what it holds at.
    let (warning, memory, clock, reconciler) = warned_with_throttled_terminates(2);
    surged_and_throttled(&reconciler, &warning, &memory, ("eks-general-spot-m6", 5)).await;
    clock.advance(Duration::seconds(20));
    let out = reconciler.handle(vec![warning.clone()], Budget::default()).await;
    assert_eq!(out.failures.len(), 1, "P2 throttled too");
    assert_eq!(memory.world().asg("eks-general-spot-m6").unwrap().desired, 5);
    delete_unfulfillable(&memory);
    assert_eq!(memory.world().asg("eks-general-spot-m6").unwrap().desired, 4, "CA deleted the surge's slot");
    clock.advance(Duration::seconds(20));
    let out = reconciler.handle(vec![warning], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    let world = memory.world();
    assert_eq!(
        world.asg("eks-general-spot-m6").unwrap().desired,
        4,
        "one short: {:?} notes {:?}",
        world.calls.iter().filter(|c| c.is_effect()).collect::<Vec<_>>(),
        out.pools[0].plan.notes
    );
}

#[tokio::test]
async fn a_surge_deleted_during_the_retrys_drain_is_not_followed_by_a_decrement() {
    // P1 surges 4 -> 5, its terminate is throttled. P2 (the retry, the ASG still at 5)
    // drains again; meanwhile cluster-autoscaler deletes the unfilled slot (5 -> 4). P2
    // has no raise of its own there: the surge's ASG is judged by what it holds at.
    let (warning, memory, clock, first) = warned_with_throttled_terminates(1);
    surged_and_throttled(&first, &warning, &memory, ("eks-general-spot-m6", 5)).await;
    clock.advance(Duration::seconds(20));
    let retry = retry_whose_drain_deletes_the_surge(&memory, &clock);
    let out = retry.handle(vec![warning], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    let world = memory.world();
    assert!(world.calls.iter().any(|c| matches!(c, Call::Drain { .. })), "P2 drained");
    assert_eq!(
        world.asg("eks-general-spot-m6").unwrap().desired,
        4,
        "one short: {:?}",
        world.calls.iter().filter(|c| c.is_effect()).collect::<Vec<_>>()
    );
}

/// A lifecycle action of an instance with no node (nothing to drain) in a plan whose
/// drains another run takes over: the drainer completes it (the other run took it as planned).
#[tokio::test]
async fn a_lifecycle_action_without_a_drain_in_a_taken_over_plan_is_still_completed() {
    let warning = fixture("spot-interruption-terminate.json");
    let hook = fixture("lifecycle-terminate.json");
    let memory = InMemory::new(state("steady.json"));
    // The on-demand instance the hook is for has no Kubernetes node (never joined, or gone).
    memory.world().nodes.retain(|n| n.state.instance_id != "i-0f9e8d7c6b5a40001");
    let clock = FixedClock::new(warning.time);
    let cluster = SlowCluster::new(&memory, &clock);
    let (world, at) = (memory.clone(), clock.clone());
    *cluster.run_during_drain.lock().unwrap() = Some(Box::new(move || {
        Box::pin(async move {
            let second =
                ballast_tests::aws::event(&ballast_tests::aws::fixture_json("spot-interruption-terminate.json", |v| {
                    v["id"] = "second-warning".into();
                    v["detail"]["instance-id"] = "i-0a1b2c3d4e5f60002".into();
                    v["resources"] =
                        serde_json::json!(["arn:aws:ec2:eu-west-1:123456789012:instance/i-0a1b2c3d4e5f60002"]);
                }));
            let out = another_run(&world, at).handle(vec![second], Budget::default()).await;
            assert!(out.failures.is_empty(), "{:?}", errors(&out));
        })
    }));
    let reconciler = reconciler_over(config_with_dry_run(false), memory.clone(), cluster, &memory, clock.clone());
    let out = reconciler.handle(vec![warning, hook], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    // Later runs (ticks) do not complete it either.
    for n in 0..3 {
        clock.advance(Duration::seconds(60));
        let tick = ballast_tests::aws::event(&ballast_tests::aws::fixture_json("scheduled-reconcile.json", |v| {
            v["id"] = format!("tick-{n}").into();
        }));
        let out = another_run(&memory, clock.clone()).handle(vec![tick], Budget::default()).await;
        assert!(out.failures.is_empty(), "{:?}", errors(&out));
    }
    let token = "87654321-4321-4321-4321-210987654321".to_string();
    let world = memory.world();
    let completes = world.calls.iter().filter(|c| **c == Call::Complete { token: token.clone() }).count();
    let pending = &world.pools["general"].record.lifecycle_actions;
    assert_eq!(completes, 1, "completed once; record: {pending:?}");
}

/// The drainer, taken over, fails to complete the hook it drained (throttled): the hook
/// is planned again in the other run's record, so the retry completes it.
#[tokio::test]
async fn a_drained_hook_whose_completion_failed_after_a_takeover_is_completed_by_the_retry() {
    let event = fixture("lifecycle-terminate.json");
    let memory = InMemory::new(state("steady.json"));
    let clock = FixedClock::new(event.time);
    let cluster = taken_over_by_a_spot_warning(&memory, &clock);
    let autoscaling = Throttles::completes(&memory, 1);
    let reconciler = reconciler_over(config_with_dry_run(false), autoscaling, cluster, &memory, clock.clone());
    let out = reconciler.handle(vec![event.clone()], Budget::default()).await;
    assert_eq!(out.failures.len(), 1, "throttled: retried");
    // The queue's retry, and ticks.
    clock.advance(Duration::seconds(30));
    let retry = another_run(&memory, clock.clone()).handle(vec![event], Budget::default()).await;
    assert!(retry.failures.is_empty(), "{:?}", errors(&retry));
    for n in 0..3 {
        clock.advance(Duration::seconds(60));
        let tick = ballast_tests::aws::event(&ballast_tests::aws::fixture_json("scheduled-reconcile.json", |v| {
            v["id"] = format!("tick-{n}").into();
        }));
        another_run(&memory, clock.clone()).handle(vec![tick], Budget::default()).await;
    }
    let token = "87654321-4321-4321-4321-210987654321".to_string();
    let world = memory.world();
    let completes = world.calls.iter().filter(|c| **c == Call::Complete { token: token.clone() }).count();
    assert_eq!(completes, 1, "record: {:?}", world.pools["general"].record.lifecycle_actions);
}

// The terminate raise_undone sends without decrement (the surge's slot was deleted) is not
// read by the next plan as "terminated without decrement: the surge is surplus", which
// would withdraw the replacement's slot and leave the pool one short after all.
#[tokio::test]
async fn no_decrement_for_a_deleted_surge_is_not_followed_by_a_withdrawal() {
    let (warning, memory, clock, first) = warned_with_throttled_terminates(1);
    surged_and_throttled(&first, &warning, &memory, ("eks-general-spot-m6", 5)).await;
    clock.advance(Duration::seconds(20));
    let retry = retry_whose_drain_deletes_the_surge(&memory, &clock);
    let out = retry.handle(vec![warning], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    assert_eq!(memory.world().asg("eks-general-spot-m6").unwrap().desired, 4, "no decrement");
    assert!(memory
        .world()
        .calls
        .contains(&Call::Terminate { instance_id: "i-0a1b2c3d4e5f60001".into(), decrement: false }));
    // The next tick.
    clock.advance(Duration::seconds(60));
    let tick = ballast_tests::aws::event(&ballast_tests::aws::fixture_json("scheduled-reconcile.json", |v| {
        v["id"] = "tick-after".into();
    }));
    let out = another_run(&memory, clock.clone()).handle(vec![tick], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    let world = memory.world();
    assert_eq!(
        world.asg("eks-general-spot-m6").unwrap().desired,
        4,
        "one short after the tick: notes {:?}",
        out.pools[0].plan.notes
    );
}

// Taken over, the drainer completes the first of two hooks and is throttled on the second:
// only the second is planned again, not the one completed.
#[tokio::test]
async fn a_hook_completed_before_a_throttled_one_after_a_takeover_is_not_planned_again() {
    let first = fixture("lifecycle-terminate.json");
    let second = ballast_tests::aws::event(&ballast_tests::aws::fixture_json("lifecycle-terminate.json", |v| {
        v["id"] = "zz-second-hook".into();
        v["detail"]["LifecycleActionToken"] = "second-token".into();
        v["detail"]["EC2InstanceId"] = "i-0f9e8d7c6b5a40002".into();
    }));
    let memory = InMemory::new(state("steady.json"));
    let clock = FixedClock::new(first.time);
    let cluster = taken_over_by_a_spot_warning(&memory, &clock);
    let mut autoscaling = Throttles::completes(&memory, 1);
    autoscaling.fault.token = Some("second-token".into());
    let reconciler = reconciler_over(config_with_dry_run(false), autoscaling, cluster, &memory, clock.clone());
    let out = reconciler.handle(vec![first.clone(), second.clone()], Budget::default()).await;
    assert_eq!(out.failures.len(), 1, "throttled: retried");
    clock.advance(Duration::seconds(30));
    let retry = another_run(&memory, clock.clone()).handle(vec![first, second], Budget::default()).await;
    assert!(retry.failures.is_empty(), "{:?}", errors(&retry));
    let world = memory.world();
    let count = |token: &str| world.calls.iter().filter(|c| **c == Call::Complete { token: token.into() }).count();
    let drains: Vec<_> = world.calls.iter().filter(|c| matches!(c, Call::Drain { .. })).collect();
    assert_eq!(count("second-token"), 1);
    assert_eq!(count("87654321-4321-4321-4321-210987654321"), 1, "completed twice; drains {drains:?}");
}

/// The in-memory autoscaling; the first time spot-m6's size is read at apply time,
/// cluster-autoscaler has just scaled in one of its idle nodes (i-…0004, with decrement).
fn scaled_in_before_the_raise(memory: &InMemory) -> Faulty<InMemory, impl Fault> {
    let (world, done) = (memory.clone(), std::sync::atomic::AtomicBool::new(false));
    Faulty::new(memory.clone(), move |call: &PortCall<'_>| {
        let read =
            matches!(call, PortCall::AsgSize { asg } | PortCall::AsgBounds { asg } if *asg == "eks-general-spot-m6");
        if read && !done.swap(true, Ordering::SeqCst) {
            let mut world = world.world();
            let group = world.asg_mut("eks-general-spot-m6").unwrap();
            group.desired -= 1;
            group.instances.retain(|i| i.id != "i-0a1b2c3d4e5f60004");
        }
        Ok(())
    })
}

// Observed at 4, cluster-autoscaler scales in an idle node (4 -> 3) before the surge's
// write, which is rebased (3 -> 4). The surge's slot is there: judged by what the rebased
// raise left (4), not the size before the plan plus the raise (5), x1 goes with decrement.
#[tokio::test]
async fn a_scale_in_before_this_plans_raise_does_not_refuse_its_surges_decrement() {
    let warning = fixture("spot-interruption-terminate.json");
    let memory = InMemory::new(state("steady.json"));
    let clock = FixedClock::new(warning.time);
    let autoscaling = scaled_in_before_the_raise(&memory);
    let reconciler = reconciler_over(config_with_dry_run(false), autoscaling, memory.clone(), &memory, clock);
    let out = reconciler.handle(vec![warning], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    let world = memory.world();
    assert_eq!(
        world.asg("eks-general-spot-m6").unwrap().desired,
        3,
        "3 instances and the surge, less x1: {:?} {:?}",
        world.calls.iter().filter(|c| c.is_effect()).collect::<Vec<_>>(),
        out.pools[0].applied
    );
}

// The surge went to the spot-fallback ASG (spot-m6 at max); P1's terminate is throttled;
// the fallback ASG is then deleted (a node group replaced). The surge is made again in
// the pool, and no run fails reading the size of an ASG that no longer exists.
#[tokio::test]
async fn a_surge_in_an_asg_deleted_since_does_not_fail_every_run() {
    let mut world = state("steady.json");
    world.asg_mut("eks-general-spot-m6").unwrap().max = 4;
    let (warning, memory, clock, reconciler) = warned_over_with_throttled_terminates(world, 1);
    surged_and_throttled(&reconciler, &warning, &memory, ("eks-general-spot-fallback", 1)).await;
    let m6_tags = memory.world().asg("eks-general-spot-m6").unwrap().tags.clone();
    memory.world().asgs.retain(|a| a.name != "eks-general-spot-fallback");
    let mut config = config_with_dry_run(false);
    for pool in &mut config.pools {
        pool.spot_asgs.retain(|s| pool.name != "general" || s.matches("eks-general-spot-m6", &m6_tags));
    }
    let reconciler = reconciler_over(config, memory.clone(), memory.clone(), &memory, clock.clone());
    let mut failed = Vec::new();
    for n in 1..=3 {
        clock.advance(Duration::seconds(200));
        let tick = ballast_tests::aws::event(&ballast_tests::aws::fixture_json("scheduled-reconcile.json", |v| {
            v["id"] = format!("tick-{n}").into();
        }));
        let out = reconciler.handle(vec![warning.clone(), tick], Budget::default()).await;
        failed.extend(errors(&out).into_iter().map(|e| format!("run {n}: {e}")));
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

// P1 surges spot-m6 for x1 (4 -> 5), its terminate throttled. P2 retries it and also moves
// the failing spot-fallback's 2 missing slots to on-demand (2 -> 4). While x1 drains,
// cluster-autoscaler scales in an idle on-demand node (4 -> 3). x1's surge in spot-m6 is
// untouched: it is judged there alone, and x1 goes with decrement.
#[tokio::test]
async fn a_scale_in_of_another_raised_asg_does_not_refuse_the_surges_decrement() {
    let (warning, memory, clock, first) = warned_with_throttled_terminates(1);
    surged_and_throttled(&first, &warning, &memory, ("eks-general-spot-m6", 5)).await;
    {
        let mut world = memory.world();
        assert_eq!(world.asg("eks-general-spot-m6").unwrap().desired, 5, "P1 surged");
        world.asg_mut("eks-general-spot-m6").unwrap().max = 5;
        world.asg_mut("eks-general-spot-fallback").unwrap().desired = 2;
    }
    // Within spot-m6's launch grace (3m) of the surge: its unfilled slot is not yet a
    // failure (P1 saw it unfilled right after making it, ahead of its full plan).
    clock.advance(Duration::seconds(100));
    let failed = ballast_tests::aws::event(&ballast_tests::aws::fixture_json(
        "launch-unsuccessful-insufficient-instance-capacity.json",
        |v| {
            let time = clock.now().to_rfc3339();
            v["time"] = time.clone().into();
            v["detail"]["AutoScalingGroupName"] = "eks-general-spot-fallback".into();
            v["resources"][0] = "arn:aws:autoscaling:eu-west-1:123456789012:autoScalingGroup:8e6f1b0c-2f0a-4d6c-9a7e-3b1c5d7e9f01:autoScalingGroupName/eks-general-spot-fallback".into();
        },
    ));
    let scale_in = |memory: &InMemory| {
        let mut world = memory.world();
        let od = world.asg_mut("eks-general-on-demand").unwrap();
        assert_eq!(od.desired, 4, "P2 moved 2 to on-demand");
        od.desired -= 1;
        od.instances.retain(|i| i.id != "i-0f9e8d7c6b5a40002");
    };
    let cluster = SlowCluster { during_drain: Some(scale_in), ..SlowCluster::new(&memory, &clock) };
    let retry = reconciler_over(config_with_dry_run(false), memory.clone(), cluster, &memory, clock.clone());
    let out = retry.handle(vec![warning, failed], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    let world = memory.world();
    assert_eq!(
        world.asg("eks-general-spot-m6").unwrap().desired,
        4,
        "{:?} {:?}",
        world.calls.iter().filter(|c| c.is_effect()).collect::<Vec<_>>(),
        out.pools.iter().map(|p| &p.applied).collect::<Vec<_>>()
    );
}

// The surge went to on-demand (a fallback unit: both spot ASGs at max); P1's
// terminate is throttled; the pool's on-demand ASG is then replaced by a new one
// (cluster-autoscaler holds 2 above its minimum there). The surge is made again in the
// new on-demand ASG: the dropped surge's unit must be taken back, or the pool counts
// 2 fallback units for the 1 Ballast holds (and fail-back later removes an instance
// cluster-autoscaler asked for).
#[tokio::test]
async fn a_dropped_on_demand_surge_gives_back_its_fallback_unit() {
    let mut world = state("steady.json");
    world.asg_mut("eks-general-spot-m6").unwrap().max = 4;
    world.asg_mut("eks-general-spot-fallback").unwrap().max = 0;
    let (warning, memory, clock, reconciler) = warned_over_with_throttled_terminates(world, 1);
    surged_and_throttled(&reconciler, &warning, &memory, ("eks-general-on-demand", 3)).await;
    assert_eq!(memory.world().pools["general"].record.fallback_units, 1);
    {
        let mut world = memory.world();
        let mut od = world.asg("eks-general-on-demand").unwrap().clone();
        world.asgs.retain(|a| a.name != "eks-general-on-demand");
        od.name = "eks-general-on-demand-v2".into();
        od.desired = 4;
        let template = od.instances[0].clone();
        od.instances = (0..4)
            .map(|n| {
                let mut i = template.clone();
                i.id = format!("i-0ddd00000000000{n}");
                i
            })
            .collect();
        world.asgs.push(od);
    }
    let mut config = config_with_dry_run(false);
    for pool in &mut config.pools {
        if pool.name == "general" {
            pool.on_demand_asg = Some(ballast_core::config::AsgSelector::Name("eks-general-on-demand-v2".into()));
        }
    }
    let reconciler = reconciler_over(config, memory.clone(), memory.clone(), &memory, clock.clone());
    clock.advance(Duration::seconds(200));
    let tick = ballast_tests::aws::event(&ballast_tests::aws::fixture_json("scheduled-reconcile.json", |v| {
        v["id"] = "tick-1".into();
    }));
    let out = reconciler.handle(vec![warning.clone(), tick], Budget::default()).await;
    let world = memory.world();
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    assert_eq!(
        world.asg("eks-general-on-demand-v2").unwrap().desired,
        5,
        "x1 went with decrement, its surge made here"
    );
    assert_eq!(world.pools["general"].record.fallback_units, 1, "one unit for the one surge Ballast holds");
}

// Deadlines that must add up on real AWS.

/// drain_timeout 5m, and a node whose pod a PodDisruptionBudget holds. The run that
/// takes the action on has only part of it before its deadline: a direct invocation that
/// waited for the lease (60 s left), or the templates' default 300 s function timeout.
/// Before, the drain ran to the deadline's margin and the action was completed anyway:
/// the instance went with the pods the budget protects, after 30 s of a 5-minute drain.
/// Now it is handed on (its hook heartbeated, no failure to retry) and the next tick
/// drains for what is left of its time; it is completed once, when that time is over.
#[tokio::test]
async fn a_drain_cut_by_the_deadline_hands_its_lifecycle_action_on_to_the_next_run() {
    for first_deadline in [60, 300] {
        let event = fixture("lifecycle-terminate.json");
        let memory = InMemory::new(state("steady.json"));
        let clock = FixedClock::new(event.time);
        let mut cluster = SlowCluster::new(&memory, &clock);
        cluster.blocked = true;
        let mut config = config_with_dry_run(false);
        config.pools[0].interruption.drain_timeout = "5m".parse().unwrap();
        let timeout = config.min_function_timeout().as_secs() as i64;
        let reconciler = reconciler_over(config, memory.clone(), cluster, &memory, clock.clone());
        let completes = || memory.world().calls.iter().filter(|c| matches!(c, Call::Complete { .. })).count();
        let out = reconciler
            .handle(vec![event.clone()], Budget::until(clock.now() + Duration::seconds(first_deadline)))
            .await;
        assert!(out.failures.is_empty(), "{:?}", errors(&out));
        assert_eq!(completes(), 0, "deadline {first_deadline} s: completed after a drain cut short");
        let handed_on =
            out.pools[0].applied.iter().any(|a| matches!(a, Applied::Skipped { why } if why.contains("handed on")));
        assert!(handed_on, "{:?}", out.pools[0].applied);
        let mut log = Vec::new();
        let mut completed_at = None;
        for tick in 1..=10 {
            clock.advance(Duration::seconds(60));
            let mut reconcile = fixture("scheduled-reconcile.json");
            reconcile.id = format!("tick-{tick}");
            let out = reconciler.handle(vec![reconcile], Budget::until(clock.now() + Duration::seconds(timeout))).await;
            log.push(format!("tick {tick} at +{}s: {:?}", (clock.now() - event.time).num_seconds(), errors(&out)));
            if completes() > 0 {
                completed_at = Some(clock.now());
                break;
            }
        }
        let completed_at = completed_at.unwrap_or_else(|| panic!("never completed:\n{}", log.join("\n")));
        assert_eq!(completes(), 1);
        assert!(
            completed_at - event.time >= Duration::minutes(5),
            "deadline {first_deadline} s: completed {} s after the action was taken on, before its 5-minute drain",
            (completed_at - event.time).num_seconds()
        );
    }
}

/// A scale-in's terminate lifecycle action (cluster-autoscaler removing a node) arrives
/// while another run drains a node of the same pool (drain_timeout 10m, a 720 s function
/// timeout: what `config check --function-timeout 720` accepts). The action can wait, so
/// each SQS receive waits for the lease and fails for a retry, backing off (5 s, 10 s,
/// 20 s ... 5 min). Before, nothing kept the hook open meanwhile: the first heartbeat came
/// 718 s in, and a hook with a 300 s `HeartbeatTimeout` had ended with the node undrained.
/// Now every receive heartbeats: no gap is longer than the pause between two receives.
#[tokio::test]
async fn a_lifecycle_action_waiting_for_another_runs_drain_keeps_its_hook_open() {
    let event = fixture("lifecycle-terminate.json");
    let mut config = config_with_dry_run(false);
    config.pools[0].interruption.drain_timeout = "10m".parse().unwrap();
    let memory = InMemory::new(state("steady.json"));
    let clock = FixedClock::new(event.time);
    // Another run lent the lease for its drain: it drains until 11 min from now.
    memory.world().pools.entry("general".into()).or_default().record.draining = Some(ballast_core::record::Draining {
        owner: "draining-run".into(),
        until: event.time + Duration::minutes(11),
    });
    let autoscaling = TimedCalls::new(&memory, &clock);
    let reconciler = reconciler_over(config, autoscaling.clone(), memory.clone(), &memory, clock.clone());
    let mut log = Vec::new();
    let mut planned = false;
    for receive in 1..=10u32 {
        let deadline = clock.now() + Duration::seconds(720);
        let out = reconciler.handle(vec![event.clone()], Budget::until(deadline)).await;
        log.push(format!("receive {receive} at +{}s: {:?}", (clock.now() - event.time).num_seconds(), errors(&out)));
        if out.failures.is_empty() {
            planned = true;
            break;
        }
        clock.advance(Duration::from_std(ballast_lambda::handlers::retry_after(receive)).unwrap());
    }
    assert!(planned, "{}", log.join("\n"));
    let beats = autoscaling.fault.heartbeats.lock().unwrap().clone();
    let at: Vec<i64> = beats.iter().map(|t| (*t - event.time).num_seconds()).collect();
    let longest = std::iter::once(event.time).chain(beats).collect::<Vec<_>>().windows(2).map(|w| w[1] - w[0]).max();
    // No longer than the retry's longest pause and a lease wait (with a batching window's
    // slack): the part of HOOK_HEARTBEAT_TIMEOUT_AT_LEAST that is not a wait for a slot.
    let pause = Duration::from_std(ballast_lambda::handlers::retry_after(10)).unwrap();
    let allowed = pause + ballast_core::reconcile::LEASE_WAIT + Duration::seconds(10);
    assert!(
        longest.is_some_and(|gap| gap < allowed),
        "heartbeats at {at:?} s: the longest gap {longest:?} reaches {allowed}\n{}",
        log.join("\n")
    );
    assert_eq!(at.first(), Some(&0), "the first receive's heartbeat comes at once");
}

/// One SQS batch holds a scale-in lifecycle action for pool `general`, whose lease another
/// run holds through its own drain (11 minutes), and one for pool `batch`, whose node a
/// PodDisruptionBudget holds for its whole drain_timeout (10m). Before, `general`'s run
/// gave up after LEASE_WAIT, and nothing heartbeated its hook until the message came back,
/// after the batch's invocation ended with `batch`'s drain (~10 minutes) and the retry's
/// pause: the hook had to outlast both. Now a run waiting for its lease waits on, its
/// hook kept open each minute, while another run of the batch works, and fails for its
/// retry only when none does.
#[tokio::test]
async fn a_lifecycle_action_waiting_in_a_batch_while_another_pool_drains_keeps_its_hook_open() {
    let (general, out, autoscaling, _, clock) = general_waiting_while_batch_drains(Duration::minutes(11)).await;
    let ended = clock.now();
    let retried: Vec<&String> =
        out.failures.iter().filter(|(e, _)| e.is_retryable()).flat_map(|(_, ids)| ids).collect();
    assert_eq!(retried, [&general.id], "general's lease stays busy: its event fails for a retry; {:?}", errors(&out));
    assert_eq!(out.pools.iter().map(|p| p.plan.pool.as_str()).collect::<Vec<_>>(), ["batch"]);
    assert!(ended - general.time >= Duration::minutes(9), "batch's drain held the invocation: ended {ended}");
    let instance = general.signal.instance_ids()[0].to_string();
    let beats: Vec<DateTime<Utc>> = autoscaling
        .fault
        .heartbeats_of
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, id)| *id == instance)
        .map(|(at, _)| *at)
        .collect();
    let at: Vec<i64> = beats.iter().map(|t| (*t - general.time).num_seconds()).collect();
    let longest = std::iter::once(general.time)
        .chain(beats)
        .chain(std::iter::once(ended))
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| w[1] - w[0])
        .max();
    // A minute between heartbeats, a poll's pause and, once the others are done, the
    // lease wait before the run gives up.
    let allowed = Duration::from_std(ballast_core::reconcile::HEARTBEAT_EVERY).unwrap()
        + ballast_core::reconcile::LEASE_WAIT
        + Duration::seconds(2);
    assert!(
        longest.is_some_and(|gap| gap <= allowed),
        "general's heartbeats at {at:?} s, the invocation ended at {} s: the longest gap {longest:?} is over {allowed}",
        (ended - general.time).num_seconds()
    );
}

/// One SQS batch (deadline 720 s): a scale-in lifecycle action for pool `general`, whose
/// lease another run holds through its drain until `draining_for`, and one for pool
/// `batch`, whose node a PodDisruptionBudget holds for its whole drain_timeout (10m, as
/// `general`'s). Returns `general`'s event, the outcome, the ports and the clock.
async fn general_waiting_while_batch_drains(
    draining_for: Duration,
) -> (ballast_core::event::Event, ballast_core::reconcile::BatchOutcome, TimedAutoscaling, InMemory, FixedClock) {
    let general = fixture("lifecycle-terminate.json");
    let batch = batch_scale_in(&general);
    let mut config = config_with_dry_run(false);
    for pool in &mut config.pools {
        pool.interruption.drain_timeout = "10m".parse().unwrap();
    }
    let memory = InMemory::new(state("steady.json"));
    let clock = FixedClock::new(general.time);
    memory.world().pools.entry("general".into()).or_default().record.draining =
        Some(ballast_core::record::Draining { owner: "draining-run".into(), until: general.time + draining_for });
    let mut cluster = SlowCluster::new(&memory, &clock);
    cluster.blocked = true;
    cluster.in_steps = true;
    let autoscaling = TimedCalls::new(&memory, &clock);
    let reconciler = Reconciler {
        config: Arc::new(config),
        autoscaling: autoscaling.clone(),
        cluster,
        store: memory.clone(),
        clock: TurnTakingClock(clock.clone()),
        owner: "test".into(),
    };
    let out =
        reconciler.handle(vec![general.clone(), batch], Budget::until(general.time + Duration::seconds(720))).await;
    (general, out, autoscaling, memory, clock)
}

/// A scale-in lifecycle action for pool `batch` at the time of `general`'s.
fn batch_scale_in(general: &ballast_core::event::Event) -> ballast_core::event::Event {
    ballast_tests::aws::event(&ballast_tests::aws::fixture_json("lifecycle-terminate.json", |v| {
        v["id"] = "batch-scale-in".into();
        v["time"] = serde_json::json!(general.time.to_rfc3339());
        v["detail"]["AutoScalingGroupName"] = "eks-batch-spot-c6".into();
        v["detail"]["EC2InstanceId"] = "i-0c0ffee0000b00001".into();
        v["detail"]["LifecycleActionToken"] = "batch-token".into();
    }))
}

/// As above, but the other run's drain in `general` ends 5 minutes in, while `batch`
/// still drains: a whole 10-minute drain no longer fits before the deadline. Taking the
/// lease then, `general`'s run would drain its node for what is left (under 7 minutes)
/// and complete its lifecycle action all the same, pods a budget protects still on it.
/// It keeps waiting instead, hooks kept open, and fails for its retry.
#[tokio::test]
async fn a_run_waiting_in_a_batch_takes_its_lease_only_while_a_whole_drain_fits() {
    let (general, out, _, memory, _) = general_waiting_while_batch_drains(Duration::minutes(5)).await;
    let retried: Vec<&String> =
        out.failures.iter().filter(|(e, _)| e.is_retryable()).flat_map(|(_, ids)| ids).collect();
    assert_eq!(retried, [&general.id], "{:?}", errors(&out));
    let token = match &general.signal {
        ballast_core::event::Signal::TerminateLifecycleAction(a) => a.token.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        !memory.world().calls.contains(&Call::Complete { token }),
        "general's lifecycle action completed after a drain cut short: {:?}",
        out.pools.iter().map(|p| p.plan.pool.clone()).collect::<Vec<_>>()
    );
}

/// Two runs of one batch, each waiting for its own pool's lease (both pools drained by
/// other runs for 11 minutes): neither is at work, so neither keeps the other waiting.
/// Both give up after the lease wait and fail for their retries, their hooks kept open
/// meanwhile, instead of holding the invocation to its deadline on each other's account.
#[tokio::test]
async fn runs_of_a_batch_that_only_wait_do_not_keep_each_other_waiting() {
    let general = fixture("lifecycle-terminate.json");
    let batch = batch_scale_in(&general);
    let memory = InMemory::new(state("steady.json"));
    let clock = FixedClock::new(general.time);
    for pool in ["general", "batch"] {
        memory.world().pools.entry(pool.into()).or_default().record.draining = Some(ballast_core::record::Draining {
            owner: format!("draining-{pool}"),
            until: general.time + Duration::minutes(11),
        });
    }
    let autoscaling = TimedCalls::new(&memory, &clock);
    let reconciler = Reconciler {
        config: Arc::new(config_with_dry_run(false)),
        autoscaling: autoscaling.clone(),
        cluster: memory.clone(),
        store: memory.clone(),
        clock: TurnTakingClock(clock.clone()),
        owner: "test".into(),
    };
    let out = reconciler
        .handle(vec![general.clone(), batch.clone()], Budget::until(general.time + Duration::seconds(720)))
        .await;
    let mut retried: Vec<&String> =
        out.failures.iter().filter(|(e, _)| e.is_retryable()).flat_map(|(_, ids)| ids).collect();
    retried.sort();
    let mut both = [&batch.id, &general.id];
    both.sort();
    assert_eq!(retried, both, "both leases stay busy: {:?}", errors(&out));
    let waited = clock.now() - general.time;
    // The lease wait, a poll's pause past it, and nothing more.
    let allowed = ballast_core::reconcile::LEASE_WAIT + Duration::seconds(3);
    assert!(waited <= allowed, "the batch's runs waited {waited} on each other (allowed {allowed})");
    let beaten: std::collections::BTreeSet<String> =
        autoscaling.fault.heartbeats_of.lock().unwrap().iter().map(|(_, id)| id.clone()).collect();
    assert!(
        beaten.contains("i-0c0ffee0000b00001") && beaten.contains(general.signal.instance_ids()[0]),
        "each hook kept open while its run waited: {beaten:?}"
    );
}

/// A clock whose sleep lets the batch's other runs go on meanwhile, as real time does:
/// time that another run moves on (a drain's steps) passes once, for all; a sleeper moves
/// it on itself, a second at a time, only while no one else does.
#[derive(Clone)]
struct TurnTakingClock(FixedClock);

#[async_trait::async_trait]
impl Clock for TurnTakingClock {
    fn now(&self) -> DateTime<Utc> {
        self.0.now()
    }
    async fn sleep(&self, for_: std::time::Duration) {
        let until = self.0.now() + Duration::from_std(for_).unwrap();
        while self.0.now() < until {
            let before = self.0.now();
            tokio::task::yield_now().await;
            if self.0.now() == before {
                self.0.advance((until - before).min(Duration::seconds(1)));
            }
        }
    }
}

/// Notes when each desired-size write and heartbeat of the in-memory autoscaling happens.
#[derive(Clone)]
struct TimedCalls {
    clock: FixedClock,
    writes: Arc<std::sync::Mutex<Vec<DesiredWrite>>>,
    heartbeats: Arc<std::sync::Mutex<Vec<DateTime<Utc>>>>,
    /// Each heartbeat's time and instance.
    heartbeats_of: Arc<std::sync::Mutex<Vec<Heartbeat>>>,
}

/// The in-memory autoscaling, its writes and heartbeats timed.
type TimedAutoscaling = Faulty<InMemory, TimedCalls>;

/// When, for which instance.
type Heartbeat = (DateTime<Utc>, String);

/// When, which ASG, to what size.
type DesiredWrite = (DateTime<Utc>, String, u32);

impl TimedCalls {
    fn new(memory: &InMemory, clock: &FixedClock) -> TimedAutoscaling {
        let timed = TimedCalls {
            clock: clock.clone(),
            writes: Arc::default(),
            heartbeats: Arc::default(),
            heartbeats_of: Arc::default(),
        };
        Faulty::new(memory.clone(), timed)
    }
}

impl Fault for TimedCalls {
    fn before(&self, call: &PortCall<'_>) -> Result<Option<PortError>, PortError> {
        match call {
            PortCall::SetDesiredCapacity { asg, desired } => {
                self.writes.lock().unwrap().push((self.clock.now(), asg.to_string(), *desired))
            }
            PortCall::RecordLifecycleHeartbeat { action } => {
                self.heartbeats.lock().unwrap().push(self.clock.now());
                self.heartbeats_of.lock().unwrap().push((self.clock.now(), action.instance_id.clone()));
            }
            _ => {}
        }
        Ok(None)
    }
}

/// One SQS batch (BatchSize 10, window 1 s) holds a scale-in lifecycle action for a node of
/// pool `batch` whose pod a PodDisruptionBudget protects, and a Spot warning (2 minutes'
/// notice) for pool `general`. Both pools' leases are free. The pools are reconciled one
/// after the other, in name order, each with its drains: the warning's surge waits for the
/// other pool's whole drain_timeout (90 s, the default) and comes ~95 s into the notice.
#[tokio::test]
async fn a_spot_warning_is_not_held_back_by_another_pools_drain_in_the_same_batch() {
    let warning = fixture("spot-interruption-terminate.json");
    let lifecycle = ballast_tests::aws::event(&ballast_tests::aws::fixture_json("lifecycle-terminate.json", |v| {
        v["id"] = "batch-scale-in".into();
        v["time"] = serde_json::json!(warning.time.to_rfc3339());
        v["detail"]["AutoScalingGroupName"] = "eks-batch-spot-c6".into();
        v["detail"]["EC2InstanceId"] = "i-0c0ffee0000b00001".into();
        v["detail"]["LifecycleActionToken"] = "batch-token".into();
    }));
    let memory = InMemory::new(state("steady.json"));
    let clock = FixedClock::new(warning.time);
    let mut cluster = SlowCluster::new(&memory, &clock);
    cluster.blocked = true;
    let autoscaling = TimedCalls::new(&memory, &clock);
    let reconciler = reconciler_over(config_with_dry_run(false), autoscaling.clone(), cluster, &memory, clock.clone());
    let out =
        reconciler.handle(vec![lifecycle, warning.clone()], Budget::until(warning.time + Duration::seconds(300))).await;
    let writes = autoscaling.fault.writes.lock().unwrap().clone();
    let surge = writes.iter().find(|(_, asg, _)| asg.starts_with("eks-general-spot"));
    let after = surge.map(|(at, _, _)| (*at - warning.time).num_seconds());
    assert!(
        after.is_some_and(|s| s <= 10),
        "general's surge {after:?} s after its Spot warning; order {:?}; errors {:?}; writes {writes:?}",
        out.pools.iter().map(|p| p.plan.pool.clone()).collect::<Vec<_>>(),
        errors(&out)
    );
}

/// Auto Scaling's test of a new hook, through EventBridge, is passed over (not dead-lettered,
/// no alarm); a hook's own message put straight on the queue is dead-lettered saying what it
/// is and how to route the hook.
#[tokio::test]
async fn a_hooks_test_notification_is_ignored_and_one_sent_straight_to_sqs_is_explained() {
    use ballast_tests::aws::{fixture_json, sqs_batch};
    let test = fixture_json("lifecycle-test-notification.json", |_| {});
    let straight = fixture_json("invalid/lifecycle-hook-straight-to-sqs.json", |_| {});
    let time = at("2026-11-20T09:00:01Z");
    let memory = InMemory::new(state("steady.json"));
    let config = config_with_dry_run(false);
    let app = ballast_lambda::app::App {
        function: "interruption",
        origin: config.origin(),
        reconciler: reconciler_over(config, memory.clone(), memory.clone(), &memory, FixedClock::new(time)),
        dead_letters: Some(memory.clone()),
        max_receives: None,
        redelivery: None,
        metrics: ballast_lambda::app::metrics_to_stderr,
    };
    let (response, summary) =
        app.interruption(sqs_batch(&[("m-test".into(), test), ("m-straight".into(), straight)])).await;
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
    assert!(summary.errors.is_empty() && summary.pools.is_empty(), "{summary:?}");
    assert!(summary.unrouted.iter().any(|u| u.contains("autoscaling:TEST_NOTIFICATION")), "{summary:?}");
    let parked = memory.world().dead_letters.clone();
    assert_eq!(parked.len(), 1, "only the message sent straight to the queue: {parked:?}");
    let why = &parked[0].1;
    assert!(
        why.contains("lifecycle hook ballast-drain of ASG eks-general-on-demand")
            && why.contains("straight to SQS")
            && why.contains("without a notification target"),
        "{why}"
    );
    assert!(!memory.world().calls.iter().any(|c| c.is_effect()), "nothing done for either");
}

/// The kill switch stands a live run down. A live run left work open (a failback step
/// draining an on-demand node, a rebalance replacement whose node is cordoned; both as a
/// run that died mid-drain leaves them); the first run with `dry_run` set uncordons both
/// nodes, ends the step and the replacement (naming what they launched as surplus),
/// keeps the instances in service, and starts nothing.
#[tokio::test]
async fn the_kill_switch_undoes_a_live_runs_open_work_and_starts_nothing() {
    let tick = fixture("scheduled-reconcile.json");
    // The second victim's terminate landed: it waits on its termination hook.
    let (victim, leaving, replaced) = ("i-0f9e8d7c6b5a40001", "i-0f9e8d7c6b5a40002", "i-0a1b2c3d4e5f60001");
    let mut world = state("steady.json");
    let mut nodes = Vec::new();
    for id in [victim, leaving, replaced] {
        let n = world.nodes.iter_mut().find(|n| n.state.instance_id == id).expect("the instance's node");
        n.state.unschedulable = true;
        nodes.push(n.state.name.clone());
    }
    let leaving_node = nodes.remove(1);
    for asg in &mut world.asgs {
        for i in asg.instances.iter_mut().filter(|i| i.id == leaving) {
            i.lifecycle_state = ballast_core::observe::LifecycleState::TerminatingWait;
        }
    }
    let record = &mut world.pools.get_mut("general").unwrap().record;
    record.failback = Some(
        serde_json::from_value(serde_json::json!({
            "spot_asg": "eks-general-spot-m6", "count": 1, "started_at": "2026-11-20T08:50:00Z",
            "ready_before": 4, "victims": [victim, leaving], "victims_since": "2026-11-20T08:55:00Z",
        }))
        .unwrap(),
    );
    record.interruptions = vec![serde_json::from_value(serde_json::json!({
        "instance_id": replaced, "asg": "eks-general-spot-m6", "cause": { "kind": "rebalance" },
        "noticed_at": "2026-11-20T08:56:00Z", "planned_at": "2026-11-20T08:56:00Z",
        "surge": { "asg": "eks-general-spot-m6", "planned_at": "2026-11-20T08:56:00Z", "plan": 1 },
        // Recorded when the terminate was planned; the run died in the drain before it.
        "terminated": true,
    }))
    .unwrap()];
    let d = Deployment::new(config_with_dry_run(true), world, tick.time);
    let out = d.reconciler.handle(vec![tick.clone()], Budget::default()).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    let done = effects(&d);
    let mut uncordoned: Vec<String> =
        done.iter().filter_map(|c| if let Call::Uncordon { node } = c { Some(node.clone()) } else { None }).collect();
    uncordoned.sort();
    nodes.sort();
    assert_eq!(uncordoned, nodes, "{done:?}");
    assert_eq!(done.len(), 2, "only the undo: {done:?}");
    {
        let world = d.memory.world();
        let cordoned: Vec<&str> =
            world.nodes.iter().filter(|n| n.state.unschedulable).map(|n| n.state.name.as_str()).collect();
        assert_eq!(cordoned, vec![leaving_node.as_str()], "the leaving instance's node stays cordoned");
        let live = &world.pools["general"].record;
        assert!(live.failback.is_none() && live.interruptions.is_empty(), "{live:?}");
    }
    assert!(out.pools.iter().all(|p| p.plan.dry_run && p.applied.is_empty()), "the rest is a dry run");

    // The next dry run sees the nodes schedulable, forgets them and changes nothing.
    d.clock.advance(Duration::minutes(1));
    d.reconciler.handle(vec![tick], Budget::default()).await;
    assert_eq!(effects(&d).len(), 2);
    let live = d.memory.world().pools["general"].record.clone();
    assert!(live.uncordon.is_empty() && !ballast_core::planner::has_open_work(&live), "{live:?}");
}

/// A spot warning on a settled pool: the surge is made before the pool is read, and the
/// run's plan shows it first with its reason, so logs and metrics count it; the full plan
/// after it cordons, drains and terminates with decrement, with no second surge.
#[tokio::test]
async fn the_surge_made_before_the_pool_is_read_is_the_runs_first_action() {
    let warning = fixture("spot-interruption-terminate.json");
    let memory = InMemory::new(state("steady.json"));
    let reconciler = reconciler_over(
        config_with_dry_run(false),
        memory.clone(),
        memory.clone(),
        &memory,
        FixedClock::new(warning.time),
    );
    let out = reconciler.handle(vec![warning.clone()], Budget::until(warning.time + Duration::seconds(300))).await;
    assert!(out.failures.is_empty(), "{:?}", errors(&out));
    let plan = &out.pools[0].plan;
    let first = plan.effects().next().expect("an effect");
    assert!(
        matches!(first.kind, ballast_core::plan::ActionKind::SetDesiredCapacity { .. })
            && first.reason.contains("before the pool is read"),
        "{:#?}",
        plan.actions
    );
    assert_eq!(
        plan.effects().filter(|a| matches!(a.kind, ballast_core::plan::ActionKind::SetDesiredCapacity { .. })).count(),
        1
    );
    assert_eq!(out.pools[0].applied.len(), plan.actions.len(), "each action with what came of it");
    let calls = memory.world().calls.clone();
    let effects: Vec<&Call> = calls.iter().filter(|c| c.is_effect()).collect();
    assert!(matches!(effects[0], Call::SetDesired { .. }), "{effects:?}");
    assert_eq!(effects.iter().filter(|c| matches!(c, Call::SetDesired { .. })).count(), 1, "{effects:?}");
    assert!(
        effects.iter().any(|c| matches!(c, Call::Terminate { decrement: true, .. })),
        "terminated with decrement: {effects:?}"
    );
}
