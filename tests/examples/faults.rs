//! Benchmark: faults. The same events go to two deployments in moto; on the second, an
//! interceptor turns every tenth Auto Scaling call into a 503 Throttling. Failed
//! messages are redelivered (as SQS would) and failed ticks re-run until all succeed.
//! Prints both final states side by side and checks they are equal and that total
//! capacity never dropped below where it started. Run with `scripts/bench-aws`.

use ballast_core::config::Config;
use ballast_core::ports::StateStore;
use ballast_tests::aws::*;
use ballast_tests::moto::{Faults, Moto};
use chrono::Duration;
use serde_json::json;

#[derive(Debug, PartialEq)]
struct Final {
    spot_desired: i32,
    spot_instances: usize,
    on_demand_desired: i32,
    fallback_units: u32,
    interrupted_left: usize,
}

async fn run(faults: Option<Faults>) -> (Final, usize, (i32, i32)) {
    let moto = Moto::start().expect("moto_server (scripts/test installs it)");
    let start = "2026-11-20T09:00:00Z".parse().unwrap();
    let d = Deployment::create_with(
        &moto,
        Setup { spot: 40, spot_max: 80, on_demand: (0, 2), faults: faults.clone() },
        start,
    )
    .await;
    let (app, _) = d.app(Config::from_yaml(&config_yaml(false, "")).unwrap());
    let (_, ids) = d.asg(SPOT).await;
    let initial_total = 40 + 2;
    let mut min_total = i32::MAX;
    let mut redeliveries = 0;
    // 30 interruptions in three batches, then a capacity error with two instances unlaunched,
    // then ticks of the schedule.
    let mut pending: Vec<Vec<(String, serde_json::Value)>> = (0..3)
        .map(|b| {
            (0..10)
                .map(|i| {
                    let n = b * 10 + i;
                    let body = fixture_json("spot-interruption-terminate.json", |v| {
                        v["id"] = json!(format!("w-{n}"));
                        v["detail"]["instance-id"] = json!(ids[n]);
                        v["resources"] = json!([format!("arn:aws:ec2:eu-west-1:123456789012:instance/{}", ids[n])]);
                    });
                    (format!("m-{n}"), body)
                })
                .collect()
        })
        .collect();
    for round in 0..40 {
        let Some(batch) = pending.first().cloned() else { break };
        pending.remove(0);
        d.clock.advance(Duration::seconds(5));
        let (response, _) = app.interruption(sqs_batch(&batch)).await;
        let failed: Vec<_> = batch
            .iter()
            .filter(|(id, _)| response.batch_item_failures.iter().any(|f| &f.item_identifier == id))
            .cloned()
            .collect();
        if !failed.is_empty() {
            redeliveries += failed.len();
            pending.insert(0, failed);
        }
        let total = d.asg(SPOT).await.0 + d.asg(ON_DEMAND).await.0;
        min_total = min_total.min(total);
        assert!(round < 39, "did not converge");
    }
    let (_, now_ids) = d.asg(SPOT).await;
    d.unlaunched.hide(&now_ids[now_ids.len() - 2..]);
    let failure = fixture_json("launch-unsuccessful-no-spot-capacity.json", |v| {
        v["detail"]["AutoScalingGroupName"] = json!(SPOT)
    });
    let batch = vec![("m-ice".to_string(), failure)];
    let mut handled = false;
    for _ in 0..20 {
        d.clock.advance(Duration::seconds(5));
        let (response, _) = app.interruption(sqs_batch(&batch)).await;
        if response.batch_item_failures.is_empty() {
            handled = true;
            break;
        }
        redeliveries += 1;
    }
    assert!(handled, "the capacity error was never handled");
    for tick in 0..6 {
        d.clock.advance(Duration::seconds(60));
        let at = d.clock.0.lock().unwrap().to_rfc3339();
        let event = fixture_json("scheduled-reconcile.json", |v| {
            v["id"] = json!(format!("tick-{tick}"));
            v["time"] = json!(at);
        });
        let mut attempts = 0;
        while app.direct(event.clone()).await.is_err() {
            attempts += 1;
            redeliveries += 1;
            assert!(attempts < 20, "tick did not succeed");
        }
        let total = d.asg(SPOT).await.0 + d.asg(ON_DEMAND).await.0;
        min_total = min_total.min(total);
    }
    let (spot_desired, spot_now) = d.asg(SPOT).await;
    let record = app.reconciler.store.load("general").await.unwrap().value;
    let state = Final {
        spot_desired,
        spot_instances: spot_now.len(),
        on_demand_desired: d.asg(ON_DEMAND).await.0,
        fallback_units: record.fallback_units,
        interrupted_left: ids[..30].iter().filter(|i| spot_now.contains(i)).count(),
    };
    assert!(min_total >= initial_total, "total desired fell to {min_total}, below {initial_total}");
    let injected = faults.as_ref().map(|f| f.counts().1).unwrap_or(0);
    let seen = faults.as_ref().map(|f| f.counts().0).unwrap_or(0);
    let enabled = faults.as_ref().map(|f| f.enabled.load(std::sync::atomic::Ordering::SeqCst));
    eprintln!("faults interceptor: {seen} calls seen, enabled {enabled:?}");
    println!("  ({} faults injected, {redeliveries} redeliveries/re-runs, lowest total desired {min_total} of {initial_total})", injected);
    (state, injected, (min_total, initial_total))
}

#[tokio::main]
async fn main() {
    println!(
        "faults: 30 interruptions, a capacity error, 6 ticks; every 10th Auto Scaling call fails with 503 Throttling"
    );
    println!("clean run:");
    let (clean, _, _) = run(None).await;
    println!("faulty run:");
    let (faulty, injected, (lowest, start)) = run(Some(Faults::every(10))).await;
    println!("{:<28}{:>10}{:>10}", "", "clean", "faults");
    println!("{:<28}{:>10}{:>10}", "spot desired", clean.spot_desired, faulty.spot_desired);
    println!("{:<28}{:>10}{:>10}", "spot instances", clean.spot_instances, faulty.spot_instances);
    println!("{:<28}{:>10}{:>10}", "on-demand desired", clean.on_demand_desired, faulty.on_demand_desired);
    println!("{:<28}{:>10}{:>10}", "fallback units", clean.fallback_units, faulty.fallback_units);
    println!("{:<28}{:>10}{:>10}", "interrupted still running", clean.interrupted_left, faulty.interrupted_left);
    assert!(injected > 0, "no fault was injected");
    assert_eq!(clean, faulty, "the faulty run converged elsewhere");
    println!("converged to the same final state");
    println!(
        "row: {injected} faults injected; the same final state as without faults; total desired never below its start ({start}; lowest {lowest})"
    );
}
