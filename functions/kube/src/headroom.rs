//! The objects that keep headroom: one PriorityClass below every workload (and at
//! cluster-autoscaler's expendable cutoff, so CA still scales up for it) and one
//! pause-pod Deployment per pool. Built here as plain objects; applied by the adapter.

use std::collections::BTreeMap;

use ballast_core::config::{PoolConfig, PriorityClassConfig};
use ballast_core::units::{format_cpu_millis, format_memory_bytes};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile,
    SecurityContext, Toleration,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::pods::{HEADROOM_LABEL, POOL_LABEL};

/// The field manager of every write Ballast makes.
pub const FIELD_MANAGER: &str = "ballast";

/// The pool's pause-pod Deployment: `ballast-headroom-POOL`.
pub fn deployment_name(pool: &PoolConfig) -> String {
    format!("ballast-headroom-{}", pool.name)
}

fn selector_labels(pool: &PoolConfig) -> BTreeMap<String, String> {
    BTreeMap::from([(HEADROOM_LABEL.to_string(), "true".to_string()), (POOL_LABEL.to_string(), pool.name.clone())])
}

fn object_labels(pool: &PoolConfig) -> BTreeMap<String, String> {
    let mut labels = selector_labels(pool);
    labels.insert("app.kubernetes.io/name".into(), "ballast-headroom".into());
    labels.insert("app.kubernetes.io/managed-by".into(), "ballast".into());
    labels
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

/// The pool's pause-pod Deployment with `replicas`: requests equal to limits (the pod
/// holds exactly the room it claims), the pool's node selector and tolerations.
pub fn deployment(pool: &PoolConfig, replicas: u32) -> Deployment {
    let h = &pool.headroom;
    let resources = BTreeMap::from([
        ("cpu".to_string(), Quantity(format_cpu_millis(h.pod_cpu_millis))),
        ("memory".to_string(), Quantity(format_memory_bytes(h.pod_memory_bytes))),
    ]);
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
            name: Some(deployment_name(pool)),
            namespace: Some(h.namespace.clone()),
            labels: Some(object_labels(pool)),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(i32::try_from(replicas).unwrap_or(i32::MAX)),
            selector: LabelSelector { match_labels: Some(selector_labels(pool)), ..Default::default() },
            // Replace pause pods all at once: they hold room, not traffic.
            strategy: Some(DeploymentStrategy { type_: Some("Recreate".into()), ..Default::default() }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(object_labels(pool)), ..Default::default() }),
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
        let d = deployment(&pool(), 3);
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
        assert!(deployment_matches(&d, &deployment(&pool(), 3)));
        assert!(!deployment_matches(&d, &deployment(&pool(), 4)));
    }

    #[test]
    fn the_priority_class_never_preempts() {
        let pc = priority_class(&pool().headroom.priority_class);
        assert_eq!((pc.value, pc.preemption_policy.as_deref()), (-10, Some("Never")));
    }
}
