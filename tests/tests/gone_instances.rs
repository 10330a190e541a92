//! An event naming an instance that has left its ASG (SQS redelivered it, or it came
//! late): Auto Scaling no longer knows the instance, EC2 still lists it for about an hour
//! with the `aws:autoscaling:groupName` tag its ASG gave it at launch. It is routed to
//! that ASG's pool; a spot instance the market took is a loss, not a scale-in. In memory
//! (the world keeps a gone instance as EC2 does) and against moto (which tags an ASG's
//! instances and lists them terminated).

use std::collections::BTreeSet;

use ballast_core::event::{Event, InstanceState, Signal};
use ballast_core::observe::LifecycleState;
use ballast_core::reconcile::{BatchOutcome, Budget};
use ballast_core::testing::EC2_LISTS_GONE_FOR;
use ballast_tests::aws::{config_yaml, fixture_json, sqs_batch, Deployment as MotoDeployment, SPOT};
use ballast_tests::moto::Moto;
use ballast_tests::{config_with_dry_run, fixture, state, Deployment};
use chrono::{DateTime, Duration, Utc};
use serde_json::json;

const SPOT_M6: &str = "eks-general-spot-m6";
const TAKEN: &str = "i-0a1b2c3d4e5f60002";

fn state_change(id: &str, instance_id: &str, time: DateTime<Utc>) -> Event {
    let mut event = fixture("state-change-shutting-down.json");
    event.id = id.into();
    event.time = time;
    event.signal = Signal::InstanceStateChange { instance_id: instance_id.into(), state: InstanceState::ShuttingDown };
    event
}

/// The steady world after `instance` left its ASG: taken by the spot market
/// (`Terminated`), or ended by the ASG (`Terminating`); the ASG replaces it.
fn gone(instance: &str, how: LifecycleState) -> Deployment {
    let start = fixture("state-change-shutting-down.json").time;
    let d = Deployment::new(config_with_dry_run(false), state("steady.json"), start);
    let mut world = d.memory.world();
    let taken = world.asg_mut(SPOT_M6).and_then(|a| a.instances.iter_mut().find(|i| i.id == instance)).unwrap();
    taken.lifecycle_state = how;
    world.settle(&d.reconciler.config, &BTreeSet::new(), &mut 1, start);
    assert!(world.asg(SPOT_M6).unwrap().instance(instance).is_none(), "it left the ASG");
    drop(world);
    d
}

fn why_unrouted(out: &BatchOutcome, id: &str) -> Option<String> {
    out.unrouted.iter().find(|u| u.event_id == id).map(|u| u.why.clone())
}

#[tokio::test]
async fn a_loss_told_after_the_instance_left_its_asg_is_routed_by_its_launch_tag() {
    let d = gone(TAKEN, LifecycleState::Terminated);
    let late = d.clock.0.lock().map(|t| *t).unwrap() + Duration::minutes(5);
    d.clock.set(late);
    let out = d.reconciler.handle(vec![state_change("sc-1", TAKEN, late)], Budget::default()).await;
    assert_eq!(why_unrouted(&out, "sc-1"), None, "{:?}", out.unrouted);
    let general = out.pools.iter().find(|p| p.plan.pool == "general").expect("routed to its pool");
    let lost = format!("spot instance {TAKEN} of {SPOT_M6} lost without warning (ShuttingDown), gone from it since");
    assert!(general.plan.notes.contains(&lost), "{:?}", general.plan.notes);
    let record = d.memory.world().pools["general"].record.clone();
    assert!(record.disruptions.iter().any(|x| x.instance_id == TAKEN && x.asg == SPOT_M6), "{record:?}");

    // Past the hour EC2 lists a terminated instance: nothing names its ASG any more.
    let later = late + EC2_LISTS_GONE_FOR;
    d.clock.set(later);
    d.memory.world().settle(&d.reconciler.config, &BTreeSet::new(), &mut 100, later);
    let out = d.reconciler.handle(vec![state_change("sc-2", TAKEN, later)], Budget::default()).await;
    assert_eq!(
        why_unrouted(&out, "sc-2").as_deref(),
        Some(&*format!(
            "instance {TAKEN} is in no ASG, and EC2 does not list it (gone for over an hour, or never there): it is \
             in none of the configured pools"
        ))
    );
}

/// Its ASG ended it (a scale-in): routed, but its going is no loss of the market's.
#[tokio::test]
async fn an_instance_its_asg_ended_is_routed_but_not_counted_lost() {
    let d = gone(TAKEN, LifecycleState::Terminating);
    let late = d.clock.0.lock().map(|t| *t).unwrap() + Duration::minutes(5);
    d.clock.set(late);
    let out = d.reconciler.handle(vec![state_change("sc-1", TAKEN, late)], Budget::default()).await;
    assert_eq!(why_unrouted(&out, "sc-1"), None, "{:?}", out.unrouted);
    let general = out.pools.iter().find(|p| p.plan.pool == "general").expect("routed to its pool");
    assert!(!general.plan.notes.iter().any(|n| n.contains("lost without warning")), "{:?}", general.plan.notes);
    assert!(d.memory.world().pools["general"].record.disruptions.is_empty());
}

#[tokio::test]
async fn an_instance_no_asg_launched_is_unrouted_saying_so() {
    let d = gone(TAKEN, LifecycleState::Terminated);
    let loner = "i-0123456789abcdef0";
    d.memory.world().outside_asgs.insert(loner.into());
    let now = d.clock.0.lock().map(|t| *t).unwrap();
    let out = d.reconciler.handle(vec![state_change("sc-1", loner, now)], Budget::default()).await;
    assert!(out.pools.is_empty(), "{:?}", out.pools.iter().map(|p| &p.plan.pool).collect::<Vec<_>>());
    assert_eq!(
        why_unrouted(&out, "sc-1").as_deref(),
        Some(&*format!(
            "instance {loner} is in no ASG and no ASG launched it (EC2 lists it without an aws:autoscaling:groupName \
             tag): it is in none of the configured pools"
        ))
    );
}

fn moto_now() -> DateTime<Utc> {
    "2026-11-20T09:12:10Z".parse().unwrap()
}

fn terminated(instance: &str, id: &str) -> serde_json::Value {
    fixture_json("state-change-terminated.json", |v| {
        v["id"] = json!(id);
        v["detail"]["instance-id"] = json!(instance);
        v["resources"] = json!([format!("arn:aws:ec2:eu-west-1:123456789012:instance/{instance}")]);
    })
}

/// Through the real adapter: moto tags an ASG's instances with `aws:autoscaling:groupName`
/// and lists a terminated one; DescribeAutoScalingInstances no longer knows it.
#[tokio::test]
async fn against_moto_an_instance_terminated_out_of_its_asg_is_routed_to_its_pool() {
    let Some(moto) = Moto::start() else { return };
    let d = MotoDeployment::create(&moto, 3, (0, 1), moto_now()).await;
    let (app, _) = d.app(ballast_core::config::Config::from_yaml(&config_yaml(false, "")).unwrap());
    let (_, spot_ids) = d.asg(SPOT).await;
    let victim = spot_ids[0].clone();
    d.autoscaling
        .terminate_instance_in_auto_scaling_group()
        .instance_id(&victim)
        .should_decrement_desired_capacity(true)
        .send()
        .await
        .unwrap();
    let listed = d.autoscaling.describe_auto_scaling_instances().instance_ids(&victim).send().await.unwrap();
    assert!(listed.auto_scaling_instances().is_empty(), "Auto Scaling forgot it");
    // moto detaches before it terminates, dropping the tag; AWS keeps a terminated
    // instance's tags. Put back as AWS has it.
    let ec2 = aws_sdk_ec2::Client::new(&d.sdk);
    let tag = aws_sdk_ec2::types::Tag::builder().key("aws:autoscaling:groupName").value(SPOT).build();
    ec2.create_tags().resources(&victim).tags(tag).send().await.unwrap();
    let described = ec2.describe_instances().instance_ids(&victim).send().await.unwrap();
    let state = described.reservations()[0].instances()[0].state().and_then(|s| s.name()).cloned();
    assert_eq!(state, Some(aws_sdk_ec2::types::InstanceStateName::Terminated), "EC2 still lists it");

    // Not from an ASG: EC2 lists it without the tag.
    let run = ec2.run_instances().image_id("ami-12c6146b").min_count(1).max_count(1).send().await.unwrap();
    let loner = run.instances()[0].instance_id().unwrap().to_string();

    let batch = sqs_batch(&[
        ("m1".into(), terminated(&victim, "sc-gone")),
        ("m2".into(), terminated(&loner, "sc-loner")),
        ("m3".into(), terminated("i-0fffffffffffffff0", "sc-unknown")),
    ]);
    let (response, summary) = app.interruption(batch).await;
    assert!(response.batch_item_failures.is_empty(), "{summary:?}");
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert!(summary.pools.iter().any(|p| p.pool == "general"), "{summary:?}");
    assert!(!summary.unrouted.iter().any(|u| u.starts_with("sc-gone:")), "{:?}", summary.unrouted);
    let why = |id: &str| summary.unrouted.iter().find(|u| u.starts_with(&format!("{id}:"))).cloned();
    assert_eq!(
        why("sc-loner"),
        Some(format!(
            "sc-loner: instance {loner} is in no ASG and no ASG launched it (EC2 lists it without an \
             aws:autoscaling:groupName tag): it is in none of the configured pools"
        ))
    );
    assert!(why("sc-unknown").is_some_and(|w| w.contains("EC2 does not list it")), "{:?}", summary.unrouted);
}
