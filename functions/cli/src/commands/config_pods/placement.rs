//! Which pool a node or a pod belongs to, by the forwarder's rules: a node belongs to
//! the first pool (config order) whose node selector its labels carry; a bound pod to
//! its node's pool; a pending pod (or one whose node is not known) to the first pool
//! whose nodes its node selector, required node affinity and tolerations fit.

use std::collections::BTreeMap;

use ballast_core::config::PoolConfig;
use ballast_core::fit::{self, implied_taint, Taint};

use super::objects::{Node, NodeSelectorRequirement, PodSpec, Toleration};

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

fn expression_holds(e: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    fit::requirement_holds(&e.key, &e.operator, &e.values, labels)
}

fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let t = fit::PodToleration {
        key: t.key.as_deref(),
        operator: t.operator.as_deref(),
        value: t.value.as_deref(),
        effect: t.effect.as_deref(),
    };
    fit::tolerates(t, taint)
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
