//! The objects that keep headroom: one PriorityClass below every workload (and at
//! cluster-autoscaler's expendable cutoff, so CA still scales up for it) and, per pool,
//! one pause-pod Deployment per slot, each of one shape. Built here as plain objects;
//! applied by the adapter.

use std::collections::BTreeMap;

use ballast_core::config::{PoolConfig, PriorityClassConfig};
use ballast_core::shape::{self, PodShape};
use ballast_core::units::{format_cpu_millis, format_memory_bytes, parse_cpu_millis, parse_memory_bytes};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile,
    SecurityContext, Toleration,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::pods::{is_extended_resource, HEADROOM_LABEL, POOL_LABEL};

/// The field manager of every write Ballast makes.
pub const FIELD_MANAGER: &str = "ballast";

/// Label naming the slot of a pause-pod Deployment (`"0"`, `"1"`, `"2"`).
pub const SLOT_LABEL: &str = "ballast.io/headroom-slot";

/// The name of the pool's pause-pod Deployment of `slot` (see [`shape::deployment_name`]).
pub fn deployment_name(pool: &PoolConfig, slot: usize) -> String {
    shape::deployment_name(&pool.name, slot)
}

/// The slots whose Deployments the adapter reads: every slot a pool may ever use, so that
/// one left over from a config that allowed more (`auto` before `fixed`) is seen and
/// scaled to 0.
pub const SLOTS_READ: usize = shape::MAX_SLOT_SHAPES;

fn selector_labels(pool: &PoolConfig, slot: usize) -> BTreeMap<String, String> {
    let mut labels =
        BTreeMap::from([(HEADROOM_LABEL.to_string(), "true".to_string()), (POOL_LABEL.to_string(), pool.name.clone())]);
    // A Deployment's selector is immutable: the first slot keeps the one it had before
    // slots, so an existing Deployment is updated in place. Its selector also matches the
    // other slots' pods, which is harmless (each ReplicaSet owns its pods by
    // controllerRef); theirs name their slot, so they match only their own.
    if slot > 0 {
        labels.insert(SLOT_LABEL.to_string(), slot.to_string());
    }
    labels
}

fn object_labels(pool: &PoolConfig, slot: usize) -> BTreeMap<String, String> {
    let mut labels = selector_labels(pool, slot);
    labels.insert(SLOT_LABEL.to_string(), slot.to_string());
    labels.insert("app.kubernetes.io/name".into(), "ballast-headroom".into());
    labels.insert("app.kubernetes.io/managed-by".into(), "ballast".into());
    labels
}

/// The requests (= limits) of a pause pod of `shape`: CPU, memory and each extended
/// resource (which Kubernetes requires in limits too, equal to the request).
fn resources(shape: &PodShape) -> BTreeMap<String, Quantity> {
    let mut resources = BTreeMap::from([
        ("cpu".to_string(), Quantity(format_cpu_millis(shape.cpu_millis))),
        ("memory".to_string(), Quantity(format_memory_bytes(shape.memory_bytes))),
    ]);
    for (name, n) in shape.extended.iter().filter(|(_, n)| **n > 0) {
        resources.insert(name.clone(), Quantity(n.to_string()));
    }
    resources
}

/// The pause pods' PriorityClass as Ballast creates it.
pub fn priority_class(config: &PriorityClassConfig) -> PriorityClass {
    PriorityClass {
        metadata: ObjectMeta {
            name: Some(config.name.clone()),
            labels: Some(BTreeMap::from([("app.kubernetes.io/managed-by".into(), "ballast".into())])),
            ..Default::default()
        },
        value: config.value,
        // Pause pods only hold room; they must never push anything out.
        preemption_policy: Some("Never".into()),
        global_default: Some(false),
        description: Some("Ballast headroom: pause pods any workload preempts.".into()),
    }
}

/// The pool's pause-pod Deployment of `slot` with `replicas` pods of `shape`: requests
/// equal to limits (the pod holds exactly the room it claims), the pool's node selector
/// and tolerations.
pub fn deployment(pool: &PoolConfig, slot: usize, shape: &PodShape, replicas: u32) -> Deployment {
    let h = &pool.headroom;
    let resources = resources(shape);
    let tolerations: Vec<Toleration> = pool
        .tolerations
        .iter()
        .map(|t| {
            // Same field names (camelCase) on both sides: the config's form is the API's.
            serde_json::from_value(serde_json::to_value(t).unwrap_or_default()).unwrap_or_default()
        })
        .collect();
    Deployment {
        metadata: ObjectMeta {
            name: Some(deployment_name(pool, slot)),
            namespace: Some(h.namespace.clone()),
            labels: Some(object_labels(pool, slot)),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(i32::try_from(replicas).unwrap_or(i32::MAX)),
            selector: LabelSelector { match_labels: Some(selector_labels(pool, slot)), ..Default::default() },
            // Replace pause pods all at once: they hold room, not traffic.
            strategy: Some(DeploymentStrategy { type_: Some("Recreate".into()), ..Default::default() }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(object_labels(pool, slot)), ..Default::default() }),
                spec: Some(PodSpec {
                    priority_class_name: Some(h.priority_class.name.clone()),
                    node_selector: Some(pool.node_selector.clone()).filter(|s| !s.is_empty()),
                    tolerations: Some(tolerations).filter(|t| !t.is_empty()),
                    termination_grace_period_seconds: Some(0),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    // The `restricted` Pod Security Standard, which the namespace enforces.
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65535),
                        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() }),
                        ..Default::default()
                    }),
                    containers: vec![Container {
                        name: "pause".into(),
                        image: Some(h.image.clone()),
                        resources: Some(ResourceRequirements {
                            requests: Some(resources.clone()),
                            limits: Some(resources),
                            ..Default::default()
                        }),
                        security_context: Some(SecurityContext {
                            allow_privilege_escalation: Some(false),
                            read_only_root_filesystem: Some(true),
                            capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// The shape of a pause-pod Deployment's pods, read back from its container's
/// requests; `None` when they do not read as a shape Ballast writes (the Deployment is
/// then written again).
pub fn shape_of(deployment: &Deployment) -> Option<PodShape> {
    let pod = deployment.spec.as_ref()?.template.spec.as_ref()?;
    let requests = pod.containers.first()?.resources.as_ref()?.requests.as_ref()?;
    let mut shape = PodShape::new(
        parse_cpu_millis(&requests.get("cpu")?.0).ok()?,
        parse_memory_bytes(&requests.get("memory")?.0).ok()?,
    );
    // `ephemeral-storage` or hugepages are not Ballast's: left out here, they make the
    // Deployment differ from what it writes.
    for (name, quantity) in requests.iter().filter(|(name, _)| is_extended_resource(name)) {
        let millis = parse_cpu_millis(&quantity.0).ok()?;
        if millis % 1000 != 0 {
            return None;
        }
        shape.extended.insert(name.clone(), millis / 1000);
    }
    Some(shape)
}

/// Whether `current` already is what Ballast would apply (so no write is needed).
pub fn deployment_matches(current: &Deployment, desired: &Deployment) -> bool {
    let (Some(cur), Some(want)) = (current.spec.as_ref(), desired.spec.as_ref()) else { return false };
    let pod = |d: &DeploymentSpec| d.template.spec.clone();
    let Some(cur_pod) = pod(cur) else { return false };
    let Some(want_pod) = pod(want) else { return false };
    let container =
        |p: &PodSpec| p.containers.first().map(|c| (c.image.clone(), c.resources.clone(), c.security_context.clone()));
    cur.replicas == want.replicas
        && cur.selector == want.selector
        && cur_pod.priority_class_name == want_pod.priority_class_name
        && cur_pod.node_selector.clone().unwrap_or_default() == want_pod.node_selector.clone().unwrap_or_default()
        && cur_pod.tolerations.clone().unwrap_or_default() == want_pod.tolerations.clone().unwrap_or_default()
        // A Deployment from before the pods met the `restricted` standard is rewritten.
        && cur_pod.security_context == want_pod.security_context
        && cur_pod.containers.len() == 1
        && container(&cur_pod) == container(&want_pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_core::config::Config;

    fn pool() -> PoolConfig {
        let yaml = r#"
cluster: demo
region: eu-west-1
state_table: ballast-state
pools:
  - name: general
    spot_asgs: [general-spot]
    on_demand_asg: general-od
    node_selector: {ballast.io/pool: general}
    tolerations: [{key: dedicated, operator: Equal, value: general, effect: NoSchedule}]
    headroom: {pod_cpu: 500m, pod_memory: 1Gi}
"#;
        Config::from_yaml(yaml).unwrap().pools.remove(0)
    }

    #[test]
    fn the_pause_deployment_claims_exactly_its_requests_on_the_pool_s_nodes() {
        let d = deployment(&pool(), 0, &pool().headroom.unit_shape(), 3);
        let spec = d.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3));
        let pod = spec.template.spec.as_ref().unwrap();
        let resources = pod.containers[0].resources.as_ref().unwrap();
        assert_eq!(resources.requests, resources.limits);
        assert_eq!(resources.requests.as_ref().unwrap()["cpu"], Quantity("500m".into()));
        assert_eq!(pod.node_selector.as_ref().unwrap()["ballast.io/pool"], "general");
        let t = &pod.tolerations.as_ref().unwrap()[0];
        assert_eq!(
            (t.key.as_deref(), t.operator.as_deref(), t.value.as_deref(), t.effect.as_deref()),
            (Some("dedicated"), Some("Equal"), Some("general"), Some("NoSchedule"))
        );
        let unit = pool().headroom.unit_shape();
        assert!(deployment_matches(&d, &deployment(&pool(), 0, &unit, 3)));
        assert!(!deployment_matches(&d, &deployment(&pool(), 0, &unit, 4)));
        assert_eq!(shape_of(&d), Some(unit));
    }

    #[test]
    fn a_gpu_slot_asks_for_its_gpus_in_requests_and_limits_and_reads_back_its_shape() {
        let mut gpu = PodShape::new(4000, 14 << 30);
        gpu.extended.insert("nvidia.com/gpu".into(), 1);
        let d = deployment(&pool(), 1, &gpu, 2);
        assert_eq!(d.metadata.name.as_deref(), Some("ballast-headroom-general-2"));
        let spec = d.spec.as_ref().unwrap();
        let pod = spec.template.spec.as_ref().unwrap();
        let resources = pod.containers[0].resources.as_ref().unwrap();
        assert_eq!(resources.requests, resources.limits);
        let requests = resources.requests.as_ref().unwrap();
        assert_eq!(
            (&requests["cpu"].0[..], &requests["memory"].0[..], &requests["nvidia.com/gpu"].0[..]),
            ("4", "14Gi", "1")
        );
        assert_eq!(shape_of(&d), Some(gpu.clone()));
        // Each slot's pods are its own: the selectors differ, and the pods say their slot.
        let first = deployment(&pool(), 0, &gpu, 2);
        assert_ne!(first.spec.as_ref().unwrap().selector, spec.selector);
        assert_eq!(spec.selector.match_labels.as_ref().unwrap()[SLOT_LABEL], "1");
        let template_labels = spec.template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
        assert_eq!(template_labels[SLOT_LABEL], "1");
        // The first slot keeps the selector it had before slots (a selector is immutable).
        let selector = first.spec.as_ref().unwrap().selector.match_labels.clone().unwrap();
        assert_eq!(selector.keys().collect::<Vec<_>>(), vec![HEADROOM_LABEL, POOL_LABEL]);
    }

    #[test]
    fn requests_ballast_does_not_write_read_as_no_shape() {
        let mut d = deployment(&pool(), 0, &pool().headroom.unit_shape(), 1);
        fn container(d: &mut Deployment) -> &mut Container {
            &mut d.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0]
        }
        let requests = container(&mut d).resources.as_mut().unwrap().requests.as_mut().unwrap();
        requests.insert("nvidia.com/gpu".into(), Quantity("500m".into()));
        assert_eq!(shape_of(&d), None, "half a GPU is no shape");
        container(&mut d).resources = None;
        assert_eq!(shape_of(&d), None);
    }

    #[test]
    fn the_priority_class_never_preempts() {
        let pc = priority_class(&pool().headroom.priority_class);
        assert_eq!((pc.value, pc.preemption_policy.as_deref()), (-10, Some("Never")));
    }
}
