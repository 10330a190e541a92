//! The fault scenario against moto, shared by the fault test and benchmark: the same
//! events go to a clean deployment and to ones behind an interceptor that answers Auto
//! Scaling calls with 503 Throttling after moto carried them out.

use std::cell::Cell;
use std::collections::BTreeMap;

use ballast_core::config::Config;
use ballast_core::ports::StateStore;
use chrono::Duration;
use serde_json::json;

use crate::aws::*;
use crate::moto::{Faults, Moto};

#[derive(Debug, PartialEq, Clone, Copy)]
pub struct Final {
    pub spot_desired: i32,
    pub spot_instances: usize,
    pub on_demand_desired: i32,
    pub fallback_units: u32,
    pub interrupted_left: usize,
}

impl Final {
    pub fn total(&self) -> i32 {
        self.spot_desired + self.on_demand_desired
    }
}

pub struct Outcome {
    pub state: Final,
    pub injected: usize,
    pub redeliveries: usize,
    /// The lowest total desired after any of Ballast's Auto Scaling writes, replayed from
    /// the requests moto received (`Err`: the replay does not end where moto is).
    pub lowest_total: Result<i32, String>,
    /// What the `SurplusNamed` metric summed over the run.
    pub surplus_named: u64,
}

thread_local! {
    /// The `SurplusNamed` metric of the run under way on this thread, summed from its EMF
    /// documents (the app's metrics sink is a plain `fn`; runs go on current-thread
    /// runtimes, so a run's documents are written on its own thread).
    static SURPLUS_NAMED: Cell<u64> = const { Cell::new(0) };
}

fn count_surplus(doc: &serde_json::Value) {
    SURPLUS_NAMED.with(|n| n.set(n.get() + doc["SurplusNamed"].as_u64().unwrap_or(0)));
}

pub const INITIAL_TOTAL: i32 = 42;
pub const MAX_ON_DEMAND: u32 = 10;

/// 30 interruptions in SQS batches of ten, then a capacity error with two instances
/// unlaunched, then six scheduled ticks, through the interruption and schedule handlers
/// against moto; failed messages are redelivered and failed ticks re-run until all
/// succeed, in a moto of its own. Call it on a current-thread runtime. `None`: no moto
/// here (outside CI).
pub async fn interruptions_then_capacity_error(faults: Option<Faults>) -> Option<Outcome> {
    let moto = Moto::start()?;
    let start = "2026-11-20T09:00:00Z".parse().unwrap();
    let d = Deployment::create_with(
        &moto,
        Setup { spot: 40, spot_max: 80, on_demand: (0, 2), faults: faults.clone() },
        start,
    )
    .await;
    let (mut app, _) = d.app(Config::from_yaml(&config_yaml(false, "")).unwrap());
    app.metrics = count_surplus;
    SURPLUS_NAMED.with(|n| n.set(0));
    let (_, ids) = d.asg(SPOT).await;
    let mut sizes = Sizes::default();
    sizes.look(&d).await;
    let start_desired = sizes.desired.clone();
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
        sizes.look(&d).await;
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
        sizes.look(&d).await;
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
            sizes.look(&d).await;
            attempts += 1;
            redeliveries += 1;
            assert!(attempts < 20, "tick did not succeed");
        }
        sizes.look(&d).await;
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
    Some(Outcome {
        state,
        injected: faults.as_ref().map(|f| f.counts().1).unwrap_or(0),
        redeliveries,
        lowest_total: replay(&d.recorder.calls(), &start_desired, &sizes),
        surplus_named: SURPLUS_NAMED.with(Cell::get),
    })
}

/// Each ASG's desired size and which ASG each instance seen is in (for the replay).
#[derive(Default)]
struct Sizes {
    desired: BTreeMap<String, i32>,
    asg_of: BTreeMap<String, String>,
    /// The sizes at each look (between invocations), with how many requests the
    /// recorder had seen by then.
    looks: Vec<(usize, BTreeMap<String, i32>)>,
}

impl Sizes {
    async fn look(&mut self, d: &Deployment) {
        for asg in [SPOT, ON_DEMAND] {
            let (desired, ids) = d.asg(asg).await;
            self.desired.insert(asg.to_string(), desired);
            self.asg_of.extend(ids.into_iter().map(|id| (id, asg.to_string())));
        }
        self.looks.push((d.recorder.calls().len(), self.desired.clone()));
    }
}

/// Replays the Auto Scaling requests moto received, in order (a call answered with an
/// injected fault took effect too), from each ASG's desired size at the start: the
/// lowest total desired after any write. The replay must pass through every size seen
/// between invocations, or it misread a request (one moto refused, say) and proves
/// nothing.
fn replay(calls: &[String], start: &BTreeMap<String, i32>, now: &Sizes) -> Result<i32, String> {
    let mut desired = start.clone();
    let mut lowest: i32 = desired.values().sum();
    let check = |seen: usize, desired: &BTreeMap<String, i32>| -> Result<(), String> {
        match now.looks.iter().find(|(at, looked)| *at == seen && looked != desired) {
            Some((_, looked)) => {
                Err(format!("after {seen} requests the replay is at {desired:?}, moto was at {looked:?}"))
            }
            None => Ok(()),
        }
    };
    check(0, &desired)?;
    for (index, body) in calls.iter().enumerate() {
        let field = |name: &str| body.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='));
        match field("Action").unwrap_or_default() {
            "SetDesiredCapacity" => {
                let asg = field("AutoScalingGroupName").ok_or_else(|| format!("no group in {body}"))?;
                let to = field("DesiredCapacity")
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| format!("no size in {body}"))?;
                desired.insert(asg.to_string(), to);
            }
            "TerminateInstanceInAutoScalingGroup" => {
                if field("ShouldDecrementDesiredCapacity") == Some("true") {
                    let id = field("InstanceId").ok_or_else(|| format!("no instance in {body}"))?;
                    let asg = now.asg_of.get(id).ok_or_else(|| format!("{id} was never seen in an ASG"))?;
                    *desired.entry(asg.clone()).or_default() -= 1;
                }
            }
            action if action.starts_with("Describe") || action.contains("LifecycleAction") => {}
            other => return Err(format!("an Auto Scaling write the replay does not know: {other}")),
        }
        lowest = lowest.min(desired.values().sum());
        check(index + 1, &desired)?;
    }
    if desired != now.desired {
        return Err(format!("the replay ends at {desired:?}, moto at {:?}", now.desired));
    }
    Ok(lowest)
}

/// What is wrong with a faulty run at rest, against the clean one: faults may leave
/// surplus, never loss. Total desired never fell below its start; no interrupted instance
/// runs on; fallback stays within `max_on_demand`; the pool holds at least the clean
/// run's capacity, and any more is what Ballast named (metric `SurplusNamed`).
pub fn problems(clean: &Final, run: &Outcome) -> Vec<String> {
    let s = &run.state;
    let over = s.total() - clean.total();
    let lowest = match &run.lowest_total {
        Ok(lowest) => *lowest,
        Err(why) => return vec![format!("no replay of the writes: {why}")],
    };
    let checks = [
        (lowest >= INITIAL_TOTAL, format!("total desired fell to {lowest}, below {INITIAL_TOTAL} (after a write)")),
        (s.interrupted_left == 0, format!("{} interrupted instances still running", s.interrupted_left)),
        (s.fallback_units <= MAX_ON_DEMAND, format!("{} fallback units, over max_on_demand", s.fallback_units)),
        (
            s.spot_instances as i32 == s.spot_desired,
            format!("spot ASG not at rest: {} of {}", s.spot_instances, s.spot_desired),
        ),
        (over >= 0, format!("{} fewer instances than the clean run", -over)),
        (
            over <= 0 || over as u64 <= run.surplus_named,
            format!("{over} more instances than the clean run, {} named", run.surplus_named),
        ),
    ];
    checks.into_iter().filter(|(ok, _)| !ok).map(|(_, what)| what).collect()
}
