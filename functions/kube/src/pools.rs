//! Which pool a node or a pod belongs to. A node belongs to the first pool whose node
//! selector its labels carry. A bound pod belongs to its node's pool; a pending one to
//! the first pool (config order) whose nodes its node selector, required node affinity
//! and tolerations fit — the pool cluster-autoscaler could grow for it.

use std::collections::BTreeMap;

use ballast_core::config::PoolConfig;
use ballast_core::fit::{self, implied_taint, Taint};
use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, PodSpec, Toleration};

#[derive(Debug, Clone)]
struct PoolShape {
    name: String,
    node_selector: BTreeMap<String, String>,
    /// The labels every node of the pool is known to carry: the node selector, widened
    /// by the labels all its current nodes share (architecture, OS, instance family…).
    template: BTreeMap<String, String>,
    /// The taints the pool's nodes carry, as implied by the tolerations its pause pods need.
    taints: Vec<Taint>,
}

/// Which pool a node or a pending pod belongs to, pools tried in config order.
#[derive(Debug, Clone)]
pub struct PoolMatcher {
    pools: Vec<PoolShape>,
}

impl PoolMatcher {
    /// The config's pools, each known by its node selector and tolerations.
    pub fn new(pools: &[PoolConfig]) -> PoolMatcher {
        let pools = pools
            .iter()
            .map(|p| PoolShape {
                name: p.name.clone(),
                node_selector: p.node_selector.clone(),
                template: p.node_selector.clone(),
                taints: p.tolerations.iter().filter_map(implied_taint).collect(),
            })
            .collect();
        PoolMatcher { pools }
    }

    /// How many pools.
    pub fn len(&self) -> usize {
        self.pools.len()
    }

    /// Whether there are no pools.
    pub fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }

    /// The name of the pool at index `pool`.
    pub fn name(&self, pool: usize) -> &str {
        &self.pools[pool].name
    }

    /// The index of the pool named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.pools.iter().position(|p| p.name == name)
    }

    /// The first pool whose node selector the node's labels carry.
    pub fn node_pool(&self, labels: &BTreeMap<String, String>) -> Option<usize> {
        self.pools.iter().position(|p| p.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
    }

    /// Widens a pool's template with the labels all of `nodes` share.
    pub fn learn_template<'a>(&mut self, pool: usize, nodes: impl IntoIterator<Item = &'a BTreeMap<String, String>>) {
        let shape = &mut self.pools[pool];
        let mut shared: Option<BTreeMap<String, String>> = None;
        for labels in nodes {
            shared = Some(match shared {
                None => labels.clone(),
                Some(mut s) => {
                    s.retain(|k, v| labels.get(k) == Some(v));
                    s
                }
            });
        }
        let mut template = shared.unwrap_or_default();
        template.extend(shape.node_selector.clone());
        shape.template = template;
    }

    /// The pool a pending pod would be placed in.
    pub fn pending_pod_pool(&self, spec: &PodSpec) -> Option<usize> {
        self.placed(&Placement::of(spec))
    }

    /// The same, from what was kept of the pod.
    pub fn placed(&self, placement: &Placement) -> Option<usize> {
        self.pools.iter().position(|p| fits(placement, p))
    }
}

/// The parts of a pod spec that decide where it can go.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Placement {
    /// `spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// `requiredDuringSchedulingIgnoredDuringExecution` of the node affinity.
    pub required_affinity: Option<NodeSelector>,
    /// `spec.tolerations`.
    pub tolerations: Vec<Toleration>,
}

impl Placement {
    /// What of `spec` decides where the pod can go.
    pub fn of(spec: &PodSpec) -> Placement {
        Placement {
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            required_affinity: spec
                .affinity
                .as_ref()
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|n| n.required_during_scheduling_ignored_during_execution.clone()),
            tolerations: spec.tolerations.clone().unwrap_or_default(),
        }
    }

    /// Whether labels learned about a pool's nodes can change where it goes (tolerations
    /// alone cannot: taints come from the config).
    pub fn depends_on_node_labels(&self) -> bool {
        !self.node_selector.is_empty() || self.required_affinity.is_some()
    }
}

fn fits(pod: &Placement, pool: &PoolShape) -> bool {
    let labels = &pool.template;
    let selector_ok = pod.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v));
    let affinity_ok = match &pod.required_affinity {
        None => true,
        // Terms are ORed, the expressions of a term ANDed.
        Some(required) => required.node_selector_terms.iter().any(|term| {
            term.match_expressions.iter().flatten().all(|e| expression_holds(e, labels))
                && term.match_expressions.as_ref().is_some_and(|e| !e.is_empty())
        }),
    };
    let tolerated = pool.taints.iter().all(|taint| pod.tolerations.iter().any(|t| tolerates(t, taint)));
    selector_ok && affinity_ok && tolerated
}

fn expression_holds(e: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    fit::requirement_holds(&e.key, &e.operator, e.values.as_deref().unwrap_or_default(), labels)
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
    use super::*;
    use ballast_core::config::Config;
    use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, NodeSelector, NodeSelectorTerm};

    fn matcher() -> PoolMatcher {
        let yaml = r#"
cluster: demo
region: eu-west-1
state_table: ballast-state
pools:
  - name: gpu
    spot_asgs: [gpu-spot]
    on_demand_asg: gpu-od
    node_selector: {ballast.io/pool: gpu}
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  - name: general
    spot_asgs: [general-spot]
    on_demand_asg: general-od
    node_selector: {ballast.io/pool: general}
"#;
        PoolMatcher::new(&Config::from_yaml(yaml).unwrap().pools)
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn nodes_belong_to_the_pool_whose_selector_they_carry() {
        let m = matcher();
        assert_eq!(m.node_pool(&labels(&[("ballast.io/pool", "general"), ("x", "y")])), Some(1));
        assert_eq!(m.node_pool(&labels(&[("ballast.io/pool", "other")])), None);
    }

    #[test]
    fn a_pending_pod_goes_to_the_first_pool_it_fits() {
        let m = matcher();
        // No toleration: the tainted gpu pool is out.
        assert_eq!(m.pending_pod_pool(&PodSpec::default()), Some(1));
        let gpu = PodSpec {
            tolerations: Some(vec![Toleration {
                key: Some("nvidia.com/gpu".into()),
                operator: Some("Exists".into()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(m.pending_pod_pool(&gpu), Some(0));
        let selects_general = PodSpec { node_selector: Some(labels(&[("ballast.io/pool", "general")])), ..gpu.clone() };
        assert_eq!(m.pending_pod_pool(&selects_general), Some(1));
        let nowhere = PodSpec { node_selector: Some(labels(&[("ballast.io/pool", "batch")])), ..gpu };
        assert_eq!(m.pending_pod_pool(&nowhere), None);
    }

    #[test]
    fn required_affinity_is_checked_against_what_the_pool_s_nodes_share() {
        let mut m = matcher();
        let arm = PodSpec {
            affinity: Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: "kubernetes.io/arch".into(),
                                operator: "In".into(),
                                values: Some(vec!["arm64".into()]),
                            }]),
                            ..Default::default()
                        }],
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(m.pending_pod_pool(&arm), None, "nothing known about the nodes yet");
        let a = labels(&[("ballast.io/pool", "general"), ("kubernetes.io/arch", "arm64"), ("host", "a")]);
        let b = labels(&[("ballast.io/pool", "general"), ("kubernetes.io/arch", "arm64"), ("host", "b")]);
        m.learn_template(1, [&a, &b]);
        assert_eq!(m.pending_pod_pool(&arm), Some(1));
    }
}
