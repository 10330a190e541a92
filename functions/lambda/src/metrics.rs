//! CloudWatch Embedded Metric Format on stdout: one line per pool reconciled.

use ballast_core::plan::{ActionKind, Plan};
use serde_json::{json, Map, Value};

/// Counts of each kind of decision, by metric name.
fn decisions(plan: &Plan) -> Vec<(&'static str, u32)> {
    let mut counts: Vec<(&'static str, u32)> = Vec::new();
    for action in plan.effects() {
        let name = match action.kind {
            ActionKind::RecordState => continue,
            ActionKind::SetDesiredCapacity { .. } => "SetDesiredCapacity",
            ActionKind::CordonNode { .. } => "CordonNode",
            ActionKind::DrainNode { .. } => "DrainNode",
            ActionKind::TerminateInstance { .. } => "TerminateInstance",
            ActionKind::RecordLifecycleHeartbeat(_) => "RecordLifecycleHeartbeat",
            ActionKind::CompleteLifecycleAction(_) => "CompleteLifecycleAction",
            ActionKind::SetHeadroomReplicas { .. } => "SetHeadroomReplicas",
        };
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => counts.push((name, 1)),
        }
    }
    counts
}

/// The EMF document for one pool's reconcile.
pub fn emf(
    function: &str,
    plan: Option<&Plan>,
    pool: &str,
    api_errors: u32,
    duration_ms: u64,
    timestamp_ms: i64,
) -> Value {
    let mut fields = Map::new();
    let mut metrics = Vec::new();
    let mut put = |name: &str, value: Value, unit: &str| {
        fields.insert(name.to_string(), value);
        metrics.push(json!({ "Name": name, "Unit": unit }));
    };
    if let Some(plan) = plan {
        let counted = decisions(plan);
        put("Decisions", json!(counted.iter().map(|(_, c)| c).sum::<u32>()), "Count");
        for (name, count) in counted {
            put(name, json!(count), "Count");
        }
        put("FallbackUnits", json!(plan.record.fallback_units), "Count");
        if let Some(to) = plan.effects().find_map(|a| match a.kind {
            ActionKind::SetHeadroomReplicas { to, .. } => Some(to),
            _ => None,
        }) {
            put("HeadroomReplicas", json!(to), "Count");
        }
    }
    put("ApiErrors", json!(api_errors), "Count");
    put("ReconcileDuration", json!(duration_ms), "Milliseconds");
    let mut doc = json!({
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{ "Namespace": "Ballast", "Dimensions": [["Pool"], ["Pool", "Function"]], "Metrics": metrics }]
        },
        "Pool": pool,
        "Function": function,
        "DryRun": plan.is_some_and(|p| p.dry_run),
    });
    if let Value::Object(map) = &mut doc {
        map.extend(fields);
    }
    doc
}
