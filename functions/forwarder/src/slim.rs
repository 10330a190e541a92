//! Pods and nodes as the forwarder reads them from the API server: only the fields the
//! demand, placement and node lifecycle computations use are deserialized. Everything
//! else (`metadata.managedFields`, env, volumes, probes, a node's images, ...) is skipped
//! by the parser and never allocated, so a list page costs little more than its bytes.
//!
//! The result is k8s-openapi's `Pod` and `Node` with the other fields empty, so the
//! rules in `ballast_kube::pods` and `ballast_kube::pools` apply unchanged.

use std::borrow::Cow;
use std::collections::BTreeMap;

use ballast_kube::pods::{HEADROOM_LABEL, MIRROR_ANNOTATION, POOL_LABEL};
use k8s_openapi::api::core::v1::{
    Affinity, Container, Node, NodeAffinity, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec,
    PodStatus, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};

/// A pod with only what the forwarder reads.
#[derive(Debug, Clone, Default)]
pub struct SlimPod(pub Pod);

/// A node with only what the forwarder reads.
#[derive(Debug, Clone, Default)]
pub struct SlimNode(pub Node);

macro_rules! resource_as {
    ($slim:ty, $full:ty, $scope:ty) => {
        impl Resource for $slim {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(dt: &()) -> Cow<'_, str> {
                <$full as Resource>::kind(dt)
            }
            fn group(dt: &()) -> Cow<'_, str> {
                <$full as Resource>::group(dt)
            }
            fn version(dt: &()) -> Cow<'_, str> {
                <$full as Resource>::version(dt)
            }
            fn plural(dt: &()) -> Cow<'_, str> {
                <$full as Resource>::plural(dt)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.0.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.0.metadata
            }
        }
    };
}

impl SlimPod {
    pub fn pod(&self) -> &Pod {
        &self.0
    }
}

impl SlimNode {
    pub fn node(&self) -> &Node {
        &self.0
    }
}

resource_as!(SlimPod, Pod, k8s_openapi::NamespaceResourceScope);
resource_as!(SlimNode, Node, k8s_openapi::ClusterResourceScope);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    /// The watcher resumes from the last object's version.
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    /// Only the keys matter (a mirror pod's annotation); values, e.g. a
    /// last-applied-configuration, are skipped unread.
    annotations: Option<BTreeMap<String, IgnoredAny>>,
    owner_references: Option<Vec<Owner>>,
}

#[derive(Deserialize)]
struct Owner {
    kind: String,
    controller: Option<bool>,
}

impl Meta {
    fn into_meta(self, keep_label: impl Fn(&str) -> bool) -> ObjectMeta {
        let labels = self.labels.map(|mut l| {
            l.retain(|k, _| keep_label(k));
            l
        });
        let annotations = self.annotations.map(|a| {
            a.into_keys().filter(|k| k == MIRROR_ANNOTATION).map(|k| (k, String::new())).collect::<BTreeMap<_, _>>()
        });
        ObjectMeta {
            name: self.name,
            namespace: self.namespace,
            uid: self.uid,
            resource_version: self.resource_version,
            creation_timestamp: self.creation_timestamp,
            labels: labels.filter(|l| !l.is_empty()),
            annotations: annotations.filter(|a| !a.is_empty()),
            owner_references: self.owner_references.map(|owners| {
                owners
                    .into_iter()
                    // A controlling DaemonSet changes a pod's role; a Job owner its kind
                    // in the shape reports.
                    .filter(|o| (o.kind == "DaemonSet" && o.controller == Some(true)) || o.kind == "Job")
                    .map(|o| OwnerReference { kind: o.kind, controller: o.controller, ..Default::default() })
                    .collect()
            }),
            ..Default::default()
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodParts {
    metadata: Meta,
    spec: Option<SpecParts>,
    status: Option<PodStatusParts>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecParts {
    node_name: Option<String>,
    node_selector: Option<BTreeMap<String, String>>,
    affinity: Option<AffinityParts>,
    tolerations: Option<Vec<Toleration>>,
    #[serde(default)]
    containers: Vec<ContainerParts>,
    init_containers: Option<Vec<ContainerParts>>,
    overhead: Option<BTreeMap<String, Quantity>>,
    /// Pod-level requests (PodLevelResources).
    resources: Option<ResourcesParts>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AffinityParts {
    node_affinity: Option<NodeAffinity>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerParts {
    #[serde(default)]
    name: String,
    restart_policy: Option<String>,
    resources: Option<ResourcesParts>,
}

#[derive(Deserialize)]
struct ResourcesParts {
    requests: Option<BTreeMap<String, Quantity>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodStatusParts {
    phase: Option<String>,
    conditions: Option<Vec<ConditionParts>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConditionParts {
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default)]
    status: String,
    reason: Option<String>,
    last_transition_time: Option<Time>,
}

impl From<ContainerParts> for Container {
    fn from(c: ContainerParts) -> Container {
        Container {
            name: c.name,
            restart_policy: c.restart_policy,
            resources: c.resources.map(|r| ResourceRequirements { requests: r.requests, ..Default::default() }),
            ..Default::default()
        }
    }
}

impl<'de> Deserialize<'de> for SlimPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SlimPod, D::Error> {
        let parts = PodParts::deserialize(deserializer)?;
        let spec = parts.spec.map(|s| PodSpec {
            node_name: s.node_name,
            node_selector: s.node_selector,
            affinity: s.affinity.map(|a| Affinity { node_affinity: a.node_affinity, ..Default::default() }),
            tolerations: s.tolerations,
            containers: s.containers.into_iter().map(Container::from).collect(),
            init_containers: s.init_containers.map(|c| c.into_iter().map(Container::from).collect()),
            overhead: s.overhead,
            resources: s.resources.map(|r| ResourceRequirements { requests: r.requests, ..Default::default() }),
            ..Default::default()
        });
        let status = parts.status.map(|s| PodStatus {
            phase: s.phase,
            conditions: s.conditions.map(|c| {
                c.into_iter()
                    // Only PodScheduled says whether the scheduler gave up on the pod.
                    .filter(|c| c.type_ == "PodScheduled")
                    .map(|c| PodCondition {
                        type_: c.type_,
                        status: c.status,
                        reason: c.reason,
                        last_transition_time: c.last_transition_time,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        });
        // The pool label names a pause pod's pool (its room is counted there).
        let metadata = parts.metadata.into_meta(|k| k == HEADROOM_LABEL || k == POOL_LABEL);
        Ok(SlimPod(Pod { metadata, spec, status }))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeParts {
    metadata: Meta,
    spec: Option<NodeSpecParts>,
    status: Option<NodeStatusParts>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeSpecParts {
    #[serde(rename = "providerID")]
    provider_id: Option<String>,
}

#[derive(Deserialize)]
struct NodeStatusParts {
    conditions: Option<Vec<ConditionParts>>,
}

impl<'de> Deserialize<'de> for SlimNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SlimNode, D::Error> {
        let parts = NodeParts::deserialize(deserializer)?;
        let spec = parts.spec.map(|s| NodeSpec { provider_id: s.provider_id, ..Default::default() });
        let status = parts.status.map(|s| NodeStatus {
            conditions: s.conditions.map(|c| {
                c.into_iter()
                    .filter(|c| c.type_ == "Ready")
                    .map(|c| NodeCondition { type_: c.type_, status: c.status, ..Default::default() })
                    .collect()
            }),
            ..Default::default()
        });
        // Every label may decide a node's pool, so a node keeps them all.
        Ok(SlimNode(Node { metadata: parts.metadata.into_meta(|_| true), spec, status }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_kube::pods;
    use ballast_kube::pools::Placement;
    use serde_json::json;

    /// A pod as the API server sends it, with the fields the forwarder never reads.
    fn full_pod() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "default", "uid": "0b5e4a6c-1f0e-4a39-9c55-6b6f2d1e9a01",
                "resourceVersion": "4242", "creationTimestamp": "2026-11-20T09:00:00Z",
                "labels": { "app": "web", "ballast.io/headroom": "true", "ballast.io/pool": "general" },
                "annotations": { "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}" },
                "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc",
                                      "uid": "u", "controller": true }],
                "managedFields": [{ "manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                                    "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": { "f:containers": {} } } }]
            },
            "spec": {
                "nodeSelector": { "ballast.io/pool": "general" },
                "affinity": { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{ "matchExpressions": [{ "key": "zone", "operator": "In", "values": ["a"] }] }] } } },
                "tolerations": [{ "key": "dedicated", "operator": "Equal", "value": "general", "effect": "NoSchedule" }],
                "containers": [{ "name": "app", "image": "app:1", "env": [{ "name": "A", "value": "b" }],
                                 "resources": { "requests": { "cpu": "250m", "memory": "1Gi" }, "limits": { "memory": "2Gi" } } }],
                "initContainers": [{ "name": "init", "image": "init:1", "resources": { "requests": { "cpu": "2" } } },
                                   { "name": "proxy", "image": "p:1", "restartPolicy": "Always",
                                     "resources": { "requests": { "cpu": "100m" } } }],
                "overhead": { "cpu": "10m" }
            },
            "status": { "phase": "Pending", "conditions": [
                { "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                  "lastTransitionTime": "2026-11-20T09:01:00Z", "message": "0/3 nodes are available" },
                { "type": "Initialized", "status": "True" }] }
        })
    }

    #[test]
    fn a_slim_pod_reads_as_the_full_pod_does() {
        let full: Pod = serde_json::from_value(full_pod()).unwrap();
        let slim: SlimPod = serde_json::from_value(full_pod()).unwrap();
        let slim = &slim.0;
        assert_eq!(pods::role(slim), pods::role(&full));
        assert_eq!(pods::role(slim), pods::PodRole::Pause);
        let requests = pods::effective_requests(slim.spec.as_ref().unwrap()).unwrap();
        assert_eq!(requests, pods::effective_requests(full.spec.as_ref().unwrap()).unwrap());
        assert_eq!(
            requests.cpu_millis, 2010,
            "the init container's 2 CPU outweigh 250m + the 100m sidecar; + 10m overhead"
        );
        // Pod-level requests (Kubernetes 1.34+) are kept by the slim pod too.
        let mut pod_level = full_pod();
        pod_level["spec"]["resources"] =
            json!({ "requests": { "cpu": "3", "memory": "4Gi" }, "limits": { "cpu": "4" } });
        let full_level: Pod = serde_json::from_value(pod_level.clone()).unwrap();
        let slim_level: SlimPod = serde_json::from_value(pod_level).unwrap();
        let r = pods::effective_requests(slim_level.0.spec.as_ref().unwrap()).unwrap();
        assert_eq!(r, pods::effective_requests(full_level.spec.as_ref().unwrap()).unwrap());
        assert_eq!((r.cpu_millis, r.memory_bytes), (3010, 4 << 30));
        assert_eq!(Placement::of(slim.spec.as_ref().unwrap()), Placement::of(full.spec.as_ref().unwrap()));
        assert_eq!(pods::unschedulable_since(slim), pods::unschedulable_since(&full));
        assert!(pods::unschedulable_since(slim).is_some());
        assert_eq!(slim.metadata.uid, full.metadata.uid);
        let mut gpu = full_pod();
        gpu["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = json!("1");
        let slim_gpu: SlimPod = serde_json::from_value(gpu).unwrap();
        let extended = pods::extended_resources(slim_gpu.0.spec.as_ref().unwrap());
        assert_eq!(extended, BTreeMap::from([("nvidia.com/gpu".to_string(), 1)]), "extended requests are kept");
        assert_eq!(slim.metadata.resource_version.as_deref(), Some("4242"));
        assert!(slim.metadata.managed_fields.is_none(), "never deserialized");
        assert_eq!(slim.metadata.labels.as_ref().unwrap().len(), 2, "only the headroom and pool labels are kept");
        assert!(slim.metadata.annotations.is_none());
    }

    #[test]
    fn mirror_and_daemonset_pods_keep_what_marks_them() {
        let mut mirror = full_pod();
        mirror["metadata"]["annotations"] = json!({ MIRROR_ANNOTATION: "abc" });
        mirror["metadata"]["labels"] = json!({});
        let slim: SlimPod = serde_json::from_value(mirror).unwrap();
        assert_eq!(pods::role(&slim.0), pods::PodRole::Mirror);
        let mut daemon = full_pod();
        daemon["metadata"]["labels"] = json!({});
        daemon["metadata"]["ownerReferences"] =
            json!([{ "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": true }]);
        let slim: SlimPod = serde_json::from_value(daemon).unwrap();
        assert_eq!(pods::role(&slim.0), pods::PodRole::DaemonSet);
        let mut job = full_pod();
        job["metadata"]["labels"] = json!({});
        job["metadata"]["ownerReferences"] =
            json!([{ "apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": true }]);
        let slim: SlimPod = serde_json::from_value(job).unwrap();
        assert_eq!(pods::role(&slim.0), pods::PodRole::Workload);
        assert_eq!(pods::workload_kind(&slim.0), ballast_core::shape::WorkloadKind::Job);
        let slim: SlimPod = serde_json::from_value(full_pod()).unwrap();
        assert!(slim.0.metadata.owner_references.as_ref().unwrap().is_empty(), "a ReplicaSet owner is not kept");
    }

    #[test]
    fn a_slim_node_keeps_labels_provider_and_readiness() {
        let node = json!({
            "metadata": { "name": "n1", "resourceVersion": "7", "labels": { "ballast.io/pool": "general" },
                          "managedFields": [{ "manager": "kubelet" }] },
            "spec": { "providerID": "aws:///eu-west-1a/i-0123", "podCIDR": "10.0.0.0/24" },
            "status": { "conditions": [{ "type": "MemoryPressure", "status": "False" },
                                       { "type": "Ready", "status": "True" }],
                        "images": [{ "names": ["registry/app:1"], "sizeBytes": 1000 }] }
        });
        let slim: SlimNode = serde_json::from_value(node).unwrap();
        assert!(ballast_kube::cluster::node_ready(&slim.0));
        assert_eq!(slim.0.spec.as_ref().unwrap().provider_id.as_deref(), Some("aws:///eu-west-1a/i-0123"));
        assert_eq!(slim.0.metadata.labels.as_ref().unwrap()["ballast.io/pool"], "general");
        assert!(slim.0.status.as_ref().unwrap().images.is_none());
    }

    #[test]
    fn a_malformed_object_is_an_error_not_a_panic() {
        let bad = json!({ "metadata": { "name": 3 } });
        assert!(serde_json::from_value::<SlimPod>(bad.clone()).is_err());
        assert!(serde_json::from_value::<SlimNode>(bad).is_err());
    }
}
