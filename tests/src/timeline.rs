//! When each SDK call of a client started and ended (an interceptor), to tell where a run's
//! time goes: how long before its first mutating call, and in which reads.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};

/// Calls that change something in AWS: the first of them ends the time to first call.
pub const MUTATING: [&str; 4] = [
    "SetDesiredCapacity",
    "TerminateInstanceInAutoScalingGroup",
    "CompleteLifecycleAction",
    "RecordLifecycleActionHeartbeat",
];

#[derive(Debug, Clone)]
pub struct Call {
    /// What the call was for: `lease`, `state table`, `Auto Scaling`, `EC2`, `Kubernetes`, ...
    pub part: String,
    pub operation: String,
    pub started: Instant,
    pub ended: Option<Instant>,
}

impl Call {
    pub fn is_mutating(&self) -> bool {
        MUTATING.contains(&self.operation.as_str())
    }
}

/// One interceptor per client; `part` names what the client's calls are for (DynamoDB
/// calls on a `lease#` item are told apart as `lease`).
#[derive(Debug, Clone)]
pub struct Timeline {
    part: &'static str,
    calls: Arc<Mutex<Vec<Call>>>,
}

#[derive(Debug, Clone)]
struct Index(usize);

impl Storable for Index {
    type Storer = StoreReplace<Self>;
}

impl Timeline {
    pub fn new(part: &'static str) -> Timeline {
        Timeline { part, calls: Arc::default() }
    }

    /// The same log, its calls named `part`.
    pub fn part(&self, part: &'static str) -> Timeline {
        Timeline { part, calls: self.calls.clone() }
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("timeline").clone()
    }
}

impl Intercept for Timeline {
    fn name(&self) -> &'static str {
        "Timeline"
    }

    fn read_before_execution(
        &self,
        _: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = cfg.load::<Metadata>().map(|m| m.name().to_string()).unwrap_or_default();
        let mut calls = self.calls.lock().expect("timeline");
        cfg.interceptor_state().store_put(Index(calls.len()));
        calls.push(Call { part: self.part.to_string(), operation, started: Instant::now(), ended: None });
        Ok(())
    }

    fn read_before_transmit(
        &self,
        ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = ctx.request();
        let body = request.body().bytes().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
        // The operation as sent: `Action=` of a Query call (Auto Scaling, EC2), the target
        // header of a JSON one (DynamoDB).
        let operation = body
            .split('&')
            .find_map(|p| p.strip_prefix("Action="))
            .or_else(|| request.headers().get("x-amz-target").and_then(|t| t.rsplit('.').next()))
            .map(str::to_string);
        if let Some(Index(i)) = cfg.load::<Index>() {
            if let Some(call) = self.calls.lock().expect("timeline").get_mut(*i) {
                if let Some(operation) = operation {
                    call.operation = operation;
                }
                if body.contains("\"lease#") {
                    call.part = "lease".into();
                }
            }
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        _: &FinalizerInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(Index(i)) = cfg.load::<Index>() {
            if let Some(call) = self.calls.lock().expect("timeline").get_mut(*i) {
                call.ended = Some(Instant::now());
            }
        }
        Ok(())
    }
}

/// Where one run's time went until its first mutating call: (time to it, time per part
/// (the union of that part's calls' spans, overlapping calls counted once)). `None` when
/// no mutating call came after `from`.
pub fn first_call(calls: &[Call], from: Instant) -> Option<(f64, Vec<(String, f64)>)> {
    let first = calls.iter().filter(|c| c.started >= from && c.is_mutating()).map(|c| c.started).min()?;
    let mut parts: Vec<(String, f64)> = Vec::new();
    let mut names: Vec<&str> = calls.iter().map(|c| c.part.as_str()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let mut spans: Vec<(Instant, Instant)> = calls
            .iter()
            .filter(|c| c.part == name && c.started >= from && c.started < first)
            .map(|c| (c.started, c.ended.unwrap_or(first).min(first)))
            .collect();
        spans.sort();
        let mut total = 0.0;
        let mut open: Option<(Instant, Instant)> = None;
        for (s, e) in spans {
            open = match open {
                Some((os, oe)) if s <= oe => Some((os, oe.max(e))),
                Some((os, oe)) => {
                    total += (oe - os).as_secs_f64();
                    Some((s, e))
                }
                None => Some((s, e)),
            };
        }
        if let Some((os, oe)) = open {
            total += (oe - os).as_secs_f64();
        }
        if total > 0.0 {
            parts.push((name.to_string(), total * 1000.0));
        }
    }
    // What no call covers: the function's own work (parsing, planning, waiting its turn).
    let mut spans: Vec<(Instant, Instant)> = calls
        .iter()
        .filter(|c| c.started >= from && c.started < first)
        .map(|c| (c.started, c.ended.unwrap_or(first).min(first)))
        .collect();
    spans.sort();
    let mut covered = 0.0;
    let mut open: Option<(Instant, Instant)> = None;
    for (s, e) in spans {
        open = match open {
            Some((os, oe)) if s <= oe => Some((os, oe.max(e))),
            Some((os, oe)) => {
                covered += (oe - os).as_secs_f64();
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((os, oe)) = open {
        covered += (oe - os).as_secs_f64();
    }
    let total = (first - from).as_secs_f64();
    parts.push(("in the function".into(), (total - covered).max(0.0) * 1000.0));
    Some((total * 1000.0, parts))
}

/// The calls from `from` to the first mutating one, in order: `part Operation ms`.
pub fn sequence(calls: &[Call], from: Instant) -> String {
    let mut list: Vec<&Call> = calls.iter().filter(|c| c.started >= from).collect();
    list.sort_by_key(|c| c.started);
    let mut out = Vec::new();
    for call in list {
        let at = (call.started - from).as_secs_f64() * 1000.0;
        if call.is_mutating() {
            out.push(format!("+{at:.0} ms {}", call.operation));
            break;
        }
        let took = call.ended.map_or(f64::NAN, |e| (e - call.started).as_secs_f64() * 1000.0);
        out.push(format!("+{at:.0} ms {} {} {took:.0} ms", call.part, call.operation));
    }
    out.join(", ")
}

/// The `q` quantile (0..=1) of `values`, nearest rank.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
