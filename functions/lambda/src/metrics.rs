//! CloudWatch Embedded Metric Format on stdout: one line per pool reconciled.

use ballast_core::plan::{ActionKind, Plan};
use serde_json::{json, Map, Value};

/// The metric of each kind of decision (one per effectful action kind).
pub const DECISION_METRICS: [&str; 8] = [
    "SetDesiredCapacity",
    "TerminateInstance",
    "CordonNode",
    "UncordonNode",
    "DrainNode",
    "RecordLifecycleHeartbeat",
    "CompleteLifecycleAction",
    "SetHeadroomReplicas",
];

/// Every other metric the functions emit (namespace `Ballast`); the templates' dashboards
/// may name only these and [`DECISION_METRICS`] (tests/tests/wiring.rs).
pub const OTHER_METRICS: [&str; 10] = [
    "Decisions",
    "FallbackUnits",
    "HeadroomReplicas",
    "ApiErrors",
    "ReconcileDuration",
    "BatchErrors",
    "SurplusNamed",
    "RaisesRemade",
    "ConfigRefused",
    "WaitingForClusterAccess",
];

/// The EMF document for one count of a metric with no dimension but the function.
pub fn emf_count(function: &str, metric: &str, timestamp_ms: i64) -> Value {
    json!({
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{ "Namespace": "Ballast", "Dimensions": [["Function"]], "Metrics": [{ "Name": metric, "Unit": "Count" }] }]
        },
        "Function": function,
        metric: 1,
    })
}

/// Counts of each kind of decision, by metric name.
fn decisions(plan: &Plan) -> Vec<(&'static str, u32)> {
    let mut counts: Vec<(&'static str, u32)> = Vec::new();
    for action in plan.effects() {
        let name = match action.kind {
            ActionKind::RecordState => continue,
            ActionKind::SetDesiredCapacity { .. } => "SetDesiredCapacity",
            ActionKind::CordonNode { .. } => "CordonNode",
            ActionKind::UncordonNode { .. } => "UncordonNode",
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

/// The EMF document for a failure before the batch was split per pool: no pool
/// dimension (a made-up pool name would become one).
pub fn emf_batch_errors(function: &str, api_errors: u32, timestamp_ms: i64) -> Value {
    json!({
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{ "Namespace": "Ballast", "Dimensions": [["Function"]], "Metrics": [{ "Name": "BatchErrors", "Unit": "Count" }] }]
        },
        "Function": function,
        "BatchErrors": api_errors,
    })
}

/// The EMF document for one pool's reconcile. `surplus_named`: instances its plan left
/// to cluster-autoscaler as possible surplus (also a plan that stopped part-way, which
/// has no `plan` here). `config_dry_run`: the run's config, said as `DryRun` when there
/// is no plan (a pool that failed before planning ran in the config's mode all the same).
#[allow(clippy::too_many_arguments)]
pub fn emf(
    function: &str,
    plan: Option<&Plan>,
    config_dry_run: bool,
    pool: &str,
    api_errors: u32,
    surplus_named: u32,
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
        // Raises of Ballast's another writer undid (cluster-autoscaler from a stale size), made again.
        put("RaisesRemade", json!(plan.raises_remade()), "Count");
        if let Some(to) = plan.effects().find_map(|a| match a.kind {
            ActionKind::SetHeadroomReplicas { to, .. } => Some(to),
            _ => None,
        }) {
            put("HeadroomReplicas", json!(to), "Count");
        }
    }
    put("ApiErrors", json!(api_errors), "Count");
    put("SurplusNamed", json!(surplus_named), "Count");
    put("ReconcileDuration", json!(duration_ms), "Milliseconds");
    let mut doc = json!({
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{ "Namespace": "Ballast", "Dimensions": [["Pool"], ["Pool", "Function"]], "Metrics": metrics }]
        },
        "Pool": pool,
        "Function": function,
        // A plan's own mode: a stand-down's is live (it undoes), whatever the config says.
        "DryRun": plan.map_or(config_dry_run, |p| p.dry_run),
    });
    if let Value::Object(map) = &mut doc {
        map.extend(fields);
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_core::plan::Action;
    use ballast_core::record::PoolRecord;

    #[test]
    fn one_line_of_embedded_metric_format_per_pool() {
        let action = |kind| Action { kind, reason: "r".into() };
        let plan = Plan {
            pool: "general".into(),
            now: "2026-11-20T09:00:00Z".parse().unwrap(),
            dry_run: false,
            actions: vec![
                action(ActionKind::RecordState),
                action(ActionKind::SetDesiredCapacity { asg: "a".into(), from: 1, to: 2 }),
                action(ActionKind::SetDesiredCapacity { asg: "b".into(), from: 3, to: 2 }),
                action(ActionKind::SetHeadroomReplicas {
                    namespace: "ballast".into(),
                    slot: 0,
                    shape: Default::default(),
                    from: None,
                    to: 7,
                }),
            ],
            notes: vec![],
            record: PoolRecord { fallback_units: 3, ..Default::default() },
            headroom: None,
            remade: Default::default(),
            surplus: [("b".to_string(), 2)].into(),
        };
        let doc = emf("interruption", Some(&plan), true, "general", 1, plan.surplus_named(), 42, 1_700_000_000_000);
        assert_eq!(doc["DryRun"], false, "the plan's own mode");
        assert_eq!(doc["_aws"]["Timestamp"], 1_700_000_000_000i64);
        assert_eq!(doc["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Ballast");
        assert_eq!(doc["Pool"], "general");
        assert_eq!(doc["Decisions"], 3, "record_state is not a decision");
        assert_eq!(doc["SetDesiredCapacity"], 2);
        assert_eq!(doc["SetHeadroomReplicas"], 1);
        assert_eq!(doc["HeadroomReplicas"], 7);
        assert_eq!(doc["FallbackUnits"], 3);
        assert_eq!(doc["ApiErrors"], 1);
        assert_eq!(doc["SurplusNamed"], 2);
        assert_eq!(doc["ReconcileDuration"], 42);
        // Every declared metric has its value at the top level, as EMF requires, and is
        // one the dashboards know.
        for metric in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"].as_array().unwrap() {
            let name = metric["Name"].as_str().unwrap();
            assert!(doc[name].is_number(), "{name}");
            assert!(DECISION_METRICS.contains(&name) || OTHER_METRICS.contains(&name), "{name}");
        }
        let batch = emf_batch_errors("interruption", 2, 0);
        assert!(OTHER_METRICS.contains(&batch["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"].as_str().unwrap()));
        assert!(!doc.to_string().contains('\n'), "one line");
    }

    #[test]
    fn a_pool_that_failed_before_planning_says_the_configs_mode() {
        for dry_run in [true, false] {
            let doc = emf("schedule", None, dry_run, "general", 1, 0, 42, 1_700_000_000_000);
            assert_eq!(doc["DryRun"], dry_run, "{doc}");
        }
    }
}
