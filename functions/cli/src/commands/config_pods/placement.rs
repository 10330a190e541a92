//! Which pool a node or a pod belongs to, by the forwarder's rules: a node belongs to
//! the first pool (config order) whose node selector its labels carry; a bound pod to
//! its node's pool; a pending pod (or one whose node is not known) to the first pool
//! whose nodes its node selector, required node affinity and tolerations fit.

use std::collections::BTreeMap;

use ballast_core::config::{PoolConfig, TaintEffect, TolerationOperator};

use super::objects::{Node, NodeSelectorRequirement, PodSpec, Toleration};

/// A taint the pool's nodes carry, as implied by a toleration its pause pods need.
struct Taint {
    key: String,
    /// `None`: any value (the pool tolerates the key with `Exists`).
    value: Option<String>,
    effect: Option<TaintEffect>,
}

struct PoolNodes {
    node_selector: BTreeMap<String, String>,
    /// The labels every node of the pool carries: its node selector, widened by those
    /// all its nodes in the nodes file share (architecture, instance family...).
    template: BTreeMap<String, String>,
    taints: Vec<Taint>,
}

/// Pools, tried in config order.
pub struct Pools(Vec<PoolNodes>);

impl Pools {
    /// The config's pools, their templates widened by `nodes`.
    pub fn new(pools: &[PoolConfig], nodes: &[&Node]) -> Pools {
        let mut matcher = Pools(
            pools
                .iter()
                .map(|p| PoolNodes {
                    node_selector: p.node_selector.clone(),
                    template: p.node_selector.clone(),
                    taints: p.tolerations.iter().filter_map(implied_taint).collect(),
                })
                .collect(),
        );
        for index in 0..matcher.0.len() {
            let mut shared: Option<BTreeMap<String, String>> = None;
            for node in nodes.iter().filter(|n| matcher.node_pool(&n.metadata.labels) == Some(index)) {
                let labels = &node.metadata.labels;
                shared = Some(match shared {
                    None => labels.clone(),
                    Some(mut s) => {
                        s.retain(|k, v| labels.get(k) == Some(v));
                        s
                    }
                });
            }
            let pool = &mut matcher.0[index];
            pool.template.extend(shared.unwrap_or_default());
        }
        matcher
    }

    /// The first pool whose node selector the node's labels carry.
    pub fn node_pool(&self, labels: &BTreeMap<String, String>) -> Option<usize> {
        self.0.iter().position(|p| p.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
    }

    /// The pool a pending pod would be placed in: cluster-autoscaler would grow it.
    pub fn pending_pod_pool(&self, spec: &PodSpec) -> Option<usize> {
        self.0.iter().position(|pool| fits(spec, pool))
    }
}

fn implied_taint(t: &ballast_core::config::Toleration) -> Option<Taint> {
    // PreferNoSchedule never keeps a pod off a node; a key-less Exists tolerates anything.
    if t.effect == Some(TaintEffect::PreferNoSchedule) {
        return None;
    }
    let key = t.key.clone()?;
    let value = match t.operator.unwrap_or(TolerationOperator::Equal) {
        TolerationOperator::Exists => None,
        TolerationOperator::Equal => Some(t.value.clone().unwrap_or_default()),
    };
    Some(Taint { key, value, effect: t.effect })
}

fn fits(pod: &PodSpec, pool: &PoolNodes) -> bool {
    let labels = &pool.template;
    let selector_ok = pod.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v));
    let affinity_ok = match &pod.affinity.node_affinity.required_during_scheduling_ignored_during_execution {
        None => true,
        // Terms are ORed, the expressions of a term ANDed; a term without any matches
        // nothing.
        Some(required) => required.node_selector_terms.iter().any(|term| {
            !term.match_expressions.is_empty() && term.match_expressions.iter().all(|e| expression_holds(e, labels))
        }),
    };
    let tolerated = pool.taints.iter().all(|taint| pod.tolerations.iter().any(|t| tolerates(t, taint)));
    selector_ok && affinity_ok && tolerated
}

/// Labels the template does not know (a hostname, a zone the nodes differ in) cannot
/// rule a pool out for `NotIn`/`DoesNotExist`, and cannot admit it for `In`/`Exists`.
fn expression_holds(e: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&e.key);
    match e.operator.as_str() {
        "In" => value.is_some_and(|v| e.values.contains(v)),
        "NotIn" => value.is_none_or(|v| !e.values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(Ok(bound))) =
                (value.and_then(|v| v.parse::<i64>().ok()), e.values.first().map(|b| b.parse::<i64>()))
            else {
                return false;
            };
            if e.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect_ok = match (t.effect.as_deref(), taint.effect) {
        (None | Some(""), _) => true,
        (Some(_), None) => false,
        (Some(e), Some(want)) => e == effect_name(want),
    };
    if !effect_ok {
        return false;
    }
    match (t.key.as_deref(), t.operator.as_deref()) {
        (None | Some(""), Some("Exists")) => true,
        (Some(key), Some("Exists")) => key == taint.key,
        (Some(key), _) => key == taint.key && taint.value.as_deref() == Some(t.value.as_deref().unwrap_or_default()),
        (None, _) => false,
    }
}

fn effect_name(effect: TaintEffect) -> &'static str {
    match effect {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

#[cfg(test)]
mod tests {
    use super::super::objects::Pod;
    use super::*;
    use ballast_core::config::Config;

    const POOLS: &str = "cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:
  - {name: general, spot_asgs: [a], node_selector: {ballast.io/pool: general}}
  - name: gpu
    spot_asgs: [b]
    node_selector: {ballast.io/pool: gpu}
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
";

    fn spec(json: serde_json::Value) -> PodSpec {
        serde_json::from_value::<Pod>(serde_json::json!({ "spec": json })).unwrap().spec
    }

    #[test]
    fn a_pending_pod_goes_to_the_first_pool_its_selector_affinity_and_tolerations_fit() {
        let config = Config::from_yaml(POOLS).unwrap();
        let g5: Node = serde_json::from_value(serde_json::json!({"metadata": {"labels": {
            "ballast.io/pool": "gpu", "node.kubernetes.io/instance-type": "g5.2xlarge"
        }}}))
        .unwrap();
        let pools = Pools::new(&config.pools, &[&g5]);
        let gpu_toleration = serde_json::json!([{"key": "nvidia.com/gpu", "operator": "Exists"}]);
        assert_eq!(pools.pending_pod_pool(&spec(serde_json::json!({}))), Some(0), "no selector: the first untainted");
        let untolerated = spec(serde_json::json!({"nodeSelector": {"ballast.io/pool": "gpu"}}));
        assert_eq!(pools.pending_pod_pool(&untolerated), None, "the GPU nodes' taint keeps it off");
        let by_instance = spec(serde_json::json!({
            "nodeSelector": {"node.kubernetes.io/instance-type": "g5.2xlarge"},
            "tolerations": gpu_toleration
        }));
        assert_eq!(pools.pending_pod_pool(&by_instance), Some(1), "a label all the pool's nodes carry");
        let by_affinity = spec(serde_json::json!({
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "ballast.io/pool", "operator": "NotIn", "values": ["general"]}]}
            ]}}},
            "tolerations": gpu_toleration
        }));
        assert_eq!(pools.pending_pod_pool(&by_affinity), Some(1));
        assert_eq!(pools.node_pool(&g5.metadata.labels), Some(1));
    }
}
