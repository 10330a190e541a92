//! Benchmark: single Spot interruption warnings on a warm function, then an interruption
//! storm: 1,000 warnings for one pool over 120 simulated seconds, delivered as SQS
//! batches of 10 with 5% duplicates, through the interruption handler against moto. An
//! interceptor counts the mutating Auto Scaling calls. Prints figures; run with
//! `scripts/bench-aws`.

use std::collections::BTreeMap;
use std::time::Instant;

use ballast_core::config::Config;
use ballast_tests::aws::*;
use ballast_tests::moto::Moto;
use ballast_tests::timeline::{first_call, quantile, sequence, Call};
use chrono::Duration;
use serde_json::json;

const WARNINGS: usize = 1000;
const BATCH: usize = 10;
const SECONDS: i64 = 120;
/// Single warnings on the warm function, each for an instance no warning named before.
const SINGLES: usize = 50;
/// Between single warnings, with a scheduled tick before each (a deployment ticks every
/// minute): the tick settles the last plan's journal and forgets its raise once past
/// cluster-autoscaler's stale-write window (3 minutes), and at most three warnings fall in
/// the interruption rate's window (five in ten minutes keeps an ASG off). So each single
/// warning is surged for before the pool is read.
const SINGLES_APART: i64 = 240;
/// The pool the single warnings are timed on again.
const SMALL_POOL: i32 = 100;

#[tokio::main]
async fn main() {
    let moto = Moto::start().expect("moto_server (scripts/test installs it)");
    let start = "2026-11-20T09:00:00Z".parse().unwrap();
    let d =
        Deployment::create_with(&moto, Setup { spot: 1100, spot_max: 2200, on_demand: (0, 1), faults: None }, start)
            .await;
    let config = Config::from_yaml(&config_yaml(false, "").replace("max_on_demand: 10", "max_on_demand: 100")).unwrap();
    let (app, _) = d.app(config.clone());
    let (_, ids) = d.asg(SPOT).await;
    let victims: Vec<String> = ids[..WARNINGS].to_vec();

    // One warning at a time on the warm function (no batching window), before the storm
    // keeps the ASG off: each is surged for.
    let singles = &ids[WARNINGS..WARNINGS + SINGLES];
    let (single_runs, last_sequence) = one_at_a_time(&d, &app, singles).await;
    let (_, spot_after) = d.asg(SPOT).await;
    let singles_left = singles.iter().filter(|v| spot_after.contains(v)).count();
    assert_eq!(singles_left, 0, "a singly warned instance was lost");
    let single_surges = surged(&single_runs);

    // Messages: one per warning, plus 5% duplicates of earlier ones (deterministic).
    let mut messages: Vec<(String, String, String)> = Vec::new(); // (message id, event id, instance)
    for (n, instance) in victims.iter().enumerate() {
        messages.push((format!("m-{n}"), format!("w-{n}"), instance.clone()));
        if n % 20 == 19 {
            let earlier = n - (n * 7 % 15);
            messages.push((format!("m-{n}-dup"), format!("w-{earlier}"), victims[earlier].clone()));
        }
    }
    let duplicates = messages.len() - WARNINGS;
    let batches: Vec<_> = messages.chunks(BATCH).map(|c| c.to_vec()).collect();
    let step = Duration::milliseconds(SECONDS * 1000 / batches.len() as i64);
    let started = Instant::now();
    let mut max_sets_per_asg = 0;
    let mut failures = 0;
    let mut retried: Vec<(String, String, String)> = Vec::new();
    let mut storm_runs: Vec<Run> = Vec::new();
    let storm_start = d.recorder.calls().len();
    for (index, batch) in batches.iter().enumerate() {
        d.clock.advance(step);
        let at = *d.clock.0.lock().unwrap();
        let mut batch = batch.clone();
        batch.append(&mut retried);
        let bodies: Vec<(String, serde_json::Value)> = batch
            .iter()
            .map(|(message, event, instance)| {
                let body = fixture_json("spot-interruption-terminate.json", |v| {
                    v["id"] = json!(event);
                    v["time"] = json!(at.to_rfc3339());
                    v["detail"]["instance-id"] = json!(instance);
                    v["resources"] = json!([format!("arn:aws:ec2:eu-west-1:123456789012:instance/{instance}")]);
                });
                (message.clone(), body)
            })
            .collect();
        let before = d.recorder.calls().len();
        let received = Instant::now();
        let (response, _) = app.interruption(sqs_batch(&bodies)).await;
        storm_runs.extend(run_of(&d.timeline.calls(), received));
        let calls = d.recorder.calls();
        let mut sets: BTreeMap<String, usize> = BTreeMap::new();
        for call in &calls[before..] {
            if call.contains("Action=SetDesiredCapacity&") {
                let asg =
                    call.split('&').find_map(|p| p.strip_prefix("AutoScalingGroupName=")).unwrap_or("?").to_string();
                *sets.entry(asg).or_default() += 1;
            }
        }
        max_sets_per_asg = max_sets_per_asg.max(sets.values().copied().max().unwrap_or(0));
        // SQS redelivers what the function reported failed.
        for failure in &response.batch_item_failures {
            failures += 1;
            if let Some(m) = batch.iter().find(|(id, _, _)| *id == failure.item_identifier) {
                retried.push(m.clone());
            }
        }
        if index % 25 == 0 {
            eprintln!("batch {index}/{}", batches.len());
        }
    }
    let elapsed = started.elapsed();
    let calls = d.recorder.calls();
    let calls = &calls[storm_start..];
    let count = |action: &str| calls.iter().filter(|c| c.contains(&format!("Action={action}&"))).count();
    let (spot_desired, spot_now) = d.asg(SPOT).await;
    let (od_desired, _) = d.asg(ON_DEMAND).await;
    let still_there = victims.iter().filter(|v| spot_now.contains(v)).count();
    println!(
        "storm: {WARNINGS} warnings + {duplicates} duplicates in {} SQS batches of {BATCH}, over {SECONDS} simulated s",
        batches.len()
    );
    println!("  SetDesiredCapacity calls           {}", count("SetDesiredCapacity"));
    println!("  max SetDesiredCapacity per ASG/batch {max_sets_per_asg}   (goal: 1)");
    println!("  TerminateInstanceInAutoScalingGroup {}", count("TerminateInstanceInAutoScalingGroup"));
    println!("  interrupted instances still in the ASG {still_there}   (goal: 0)");
    println!("  messages reported failed (redelivered) {failures}");
    println!("  final desired: spot {spot_desired}, on-demand {od_desired} (started 1100 + 1)");
    println!("  wall time {:.1}s (moto, debug build)", elapsed.as_secs_f64());
    let terminated = count("TerminateInstanceInAutoScalingGroup");
    assert!(max_sets_per_asg <= 1, "more than one SetDesiredCapacity per ASG in a batch");
    assert_eq!(still_there, 0, "an interrupted instance was lost");
    assert_eq!(terminated, WARNINGS, "each instance terminated exactly once");

    assert_eq!(storm_runs.len(), batches.len(), "a storm batch made no mutating call");
    println!(
        "  (`Kubernetes` is the bench's cluster, which mirrors moto's ASGs: its node list is a \
         DescribeAutoScalingGroups of its own, made beside the function's)"
    );
    let (storm_p50, storm_p99) = report("storm batches", &storm_runs);
    let storm_surged: Vec<Run> = storm_runs.iter().filter(|r| r.surge_first).cloned().collect();
    let surged_after_read = storm_runs.iter().filter(|r| r.first == "SetDesiredCapacity" && !r.surge_first).count();
    println!(
        "  storm batches whose first mutating call is a surge made before the pool is read: {} (stacked on the last \
         batch's journal, whose calls all landed; past five warnings in ten minutes the interruption rate keeps the \
         ASG off: the replacements go on on-demand as fallback units while it has room, then stay in the ASG)",
        storm_surged.len()
    );
    println!(
        "  storm batches whose first mutating call is a surge made once the pool is read: {surged_after_read} (a batch \
         on-demand has room for only some of is split by the full plan)"
    );
    let (ahead_p50, ahead_p99) =
        if storm_surged.is_empty() { (f64::NAN, f64::NAN) } else { report("storm batches that surge", &storm_surged) };
    let not_surged: Vec<&str> =
        storm_runs.iter().filter(|r| r.first != "SetDesiredCapacity").map(|r| r.first.as_str()).collect();
    assert!(not_surged.is_empty(), "storm batches whose first call is not their surge: {not_surged:?}");
    let (single_p50, single_p99) =
        report(&format!("single warnings, warm, {SINGLES_APART} s apart, {single_surges} surged first"), &single_runs);
    assert_eq!(
        single_surges, SINGLES,
        "a single warning's first call was not its surge, made before the pool was read"
    );
    println!("  the last single warning's calls: {last_sequence}");

    // The same on a pool of SMALL_POOL instances: the pool's DescribeAutoScalingGroups,
    // which every plan reads and which lists each instance, is then small.
    let small_moto = Moto::start().expect("moto_server");
    let small = Deployment::create_with(
        &small_moto,
        Setup { spot: SMALL_POOL, spot_max: 2 * SMALL_POOL, on_demand: (0, 1), faults: None },
        start,
    )
    .await;
    let (small_app, _) = small.app(config.clone());
    let (_, small_ids) = small.asg(SPOT).await;
    let (small_runs, small_sequence) = one_at_a_time(&small, &small_app, &small_ids[..SINGLES]).await;
    let small_surges = surged(&small_runs);
    assert_eq!(small_surges, SINGLES, "a single warning's first call was not its surge, made before the pool was read");
    let (small_p50, small_p99) = report(
        &format!("single warnings, warm, a {SMALL_POOL}-instance pool, {small_surges} surged first"),
        &small_runs,
    );
    println!("  the last of those: {small_sequence}");
    let total = if spot_desired + od_desired == 1100 + 1 { "unchanged" } else { "changed" };
    println!(
        "row: at most {max_sets_per_asg} `SetDesiredCapacity` per ASG per batch; {terminated} `TerminateInstanceInAutoScalingGroup`, {}; {still_there} lost; total desired {total}; spot warning received to its surge, made before the pool is read, p50 {single_p50:.0} ms, p99 {single_p99:.0} ms ({SINGLES} single warnings; on a {SMALL_POOL}-instance pool p50 {small_p50:.0} ms, p99 {small_p99:.0} ms; goal p99 <= 100 ms); storm batch received to first mutating call p50 {storm_p50:.0} ms, p99 {storm_p99:.0} ms ({} of {} batches surge before the pool is read: p50 {ahead_p50:.0} ms, p99 {ahead_p99:.0} ms; the rest once it is read)",
        if terminated == WARNINGS { "each instance exactly once" } else { "not one per warning" },
        storm_surged.len(),
        storm_runs.len()
    );
}

/// Prints the time from receiving a batch to its first mutating call, and where it went
/// (each part's calls before it, overlapping calls counted once; `in the function` is what
/// no call covers), p50 and p99 over `runs`. Returns (p50, p99) in ms.
fn report(what: &str, runs: &[Run]) -> (f64, f64) {
    let totals: Vec<f64> = runs.iter().map(|r| r.ms).collect();
    let (p50, p99) = (quantile(&totals, 0.5), quantile(&totals, 0.99));
    println!("  {what} ({}): received to first mutating call p50 {p50:.1} ms, p99 {p99:.1} ms", runs.len());
    let mut parts: Vec<String> = runs.iter().flat_map(|r| r.parts.iter().map(|(n, _)| n.clone())).collect();
    parts.sort();
    parts.dedup();
    for part in parts {
        let times: Vec<f64> =
            runs.iter().map(|r| r.parts.iter().find(|(n, _)| *n == part).map_or(0.0, |(_, t)| *t)).collect();
        println!(
            "    {part:<14} p50 {:6.1} ms  p99 {:6.1} ms  (calls' spans before the first mutating call)",
            quantile(&times, 0.5),
            quantile(&times, 0.99)
        );
    }
    (p50, p99)
}

/// One run: from receiving its batch to its first mutating call (ms), where that time
/// went, which call it was, and whether it was a surge made before the pool was read.
#[derive(Clone)]
struct Run {
    ms: f64,
    parts: Vec<(String, f64)>,
    surge_first: bool,
    /// The first mutating call's operation.
    first: String,
}

fn run_of(calls: &[Call], received: Instant) -> Option<Run> {
    let (ms, parts) = first_call(calls, received)?;
    let first = calls.iter().filter(|c| c.started >= received && c.is_mutating()).min_by_key(|c| c.started)?;
    // Reading the pool reads its spot ASGs' scaling activities; a size read does not.
    let read = calls
        .iter()
        .any(|c| c.started >= received && c.started < first.started && c.operation == "DescribeScalingActivities");
    Some(Run {
        ms,
        parts,
        surge_first: first.operation == "SetDesiredCapacity" && !read,
        first: first.operation.to_string(),
    })
}

fn surged(runs: &[Run]) -> usize {
    runs.iter().filter(|r| r.surge_first).count()
}

/// Sends one warning for each instance, [`SINGLES_APART`] apart, to the warm function;
/// returns each run's time to its first mutating call and the last run's calls.
async fn one_at_a_time(d: &Deployment, app: &MotoApp, instances: &[String]) -> (Vec<Run>, String) {
    let mut runs = Vec::new();
    let mut last_sequence = String::new();
    for (n, instance) in instances.iter().enumerate() {
        d.clock.advance(Duration::seconds(SINGLES_APART));
        let at = *d.clock.0.lock().unwrap();
        let tick = fixture_json("scheduled-reconcile.json", |v| {
            v["id"] = json!(format!("tick-{n}"));
            v["time"] = json!(at.to_rfc3339());
        });
        app.direct(tick).await.expect("a scheduled tick");
        let body = fixture_json("spot-interruption-terminate.json", |v| {
            v["id"] = json!(format!("single-{n}"));
            v["time"] = json!(at.to_rfc3339());
            v["detail"]["instance-id"] = json!(instance);
            v["resources"] = json!([format!("arn:aws:ec2:eu-west-1:123456789012:instance/{instance}")]);
        });
        let received = Instant::now();
        let (response, _) = app.interruption(sqs_batch(&[(format!("single-{n}"), body)])).await;
        assert!(response.batch_item_failures.is_empty(), "single warning {n} failed");
        runs.push(run_of(&d.timeline.calls(), received).expect("a single warning made no mutating call"));
        last_sequence = sequence(&d.timeline.calls(), received);
    }
    (runs, last_sequence)
}
