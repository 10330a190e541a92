//! Pods and nodes as `kubectl get ... -o json` prints them, read into the few fields the
//! check needs (the default CLI has no Kubernetes client crate), and a pod's requests as
//! the scheduler counts them.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use ballast_core::shape::PodShape;
use ballast_core::units::{parse_cpu_millis, parse_memory_bytes, QuantityError};
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// Label on Ballast's pause pods (and their Deployments).
pub const HEADROOM_LABEL: &str = "ballast.io/headroom";
/// Annotation of the static pods the kubelet mirrors into the API server.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Why a file could not be read as a list of pods or nodes.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    // The causes are in the messages, not chained: `{:#}` would print them twice.
    #[error("not JSON: {0}")]
    Json(serde_json::Error),
    #[error("not a Kubernetes list (`kubectl get ... -o json`): {0}")]
    NotAList(String),
    #[error("{path}: {message}")]
    Field { path: String, message: String },
    #[error("items[{index}].{why}")]
    Quantity { index: usize, why: QuantityAt },
}

/// A Kubernetes quantity as the API prints it (a string), or a plain number as a person
/// may write one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity(pub String);

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(Quantity(s)),
            serde_json::Value::Number(n) => Ok(Quantity(n.to_string())),
            other => {
                Err(serde::de::Error::custom(format!("expected a quantity (e.g. \"500m\", \"2Gi\"), found {other}")))
            }
        }
    }
}

/// `null` reads as the empty value, as the API treats an absent field.
fn or_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    #[serde(default, deserialize_with = "or_default")]
    pub name: String,
    #[serde(default, deserialize_with = "or_default")]
    pub namespace: String,
    #[serde(default, deserialize_with = "or_default")]
    pub labels: BTreeMap<String, String>,
    /// Only the keys matter (a mirror pod's); values, e.g. a last-applied-configuration,
    /// are skipped unread.
    #[serde(default, deserialize_with = "or_default")]
    pub annotations: BTreeMap<String, IgnoredAny>,
    #[serde(default, deserialize_with = "or_default")]
    pub owner_references: Vec<Owner>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Owner {
    #[serde(default, deserialize_with = "or_default")]
    pub kind: String,
    #[serde(default)]
    pub controller: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Pod {
    #[serde(default, deserialize_with = "or_default")]
    pub metadata: Meta,
    #[serde(default, deserialize_with = "or_default")]
    pub spec: PodSpec,
    #[serde(default, deserialize_with = "or_default")]
    pub status: PodStatus,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default, deserialize_with = "or_default")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "or_default")]
    pub affinity: Affinity,
    #[serde(default, deserialize_with = "or_default")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, deserialize_with = "or_default")]
    pub containers: Vec<Container>,
    #[serde(default, deserialize_with = "or_default")]
    pub init_containers: Vec<Container>,
    #[serde(default, deserialize_with = "or_default")]
    pub overhead: BTreeMap<String, Quantity>,
    /// Pod-level requests (PodLevelResources).
    #[serde(default, deserialize_with = "or_default")]
    pub resources: Resources,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default, deserialize_with = "or_default")]
    pub resources: Resources,
    /// `Always` on an init container makes it a sidecar, running beside the containers.
    #[serde(default)]
    pub restart_policy: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Resources {
    #[serde(default, deserialize_with = "or_default")]
    pub requests: BTreeMap<String, Quantity>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Affinity {
    #[serde(default, deserialize_with = "or_default")]
    pub node_affinity: NodeAffinity,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAffinity {
    #[serde(default)]
    pub required_during_scheduling_ignored_during_execution: Option<NodeSelector>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelector {
    #[serde(default, deserialize_with = "or_default")]
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    #[serde(default, deserialize_with = "or_default")]
    pub match_expressions: Vec<NodeSelectorRequirement>,
}

#[derive(Debug, Default, Deserialize)]
pub struct NodeSelectorRequirement {
    #[serde(default, deserialize_with = "or_default")]
    pub key: String,
    #[serde(default, deserialize_with = "or_default")]
    pub operator: String,
    #[serde(default, deserialize_with = "or_default")]
    pub values: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Toleration {
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub operator: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub effect: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct PodStatus {
    #[serde(default)]
    pub phase: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Node {
    #[serde(default, deserialize_with = "or_default")]
    pub metadata: Meta,
    #[serde(default, deserialize_with = "or_default")]
    pub status: NodeStatus,
}

#[derive(Debug, Default, Deserialize)]
pub struct NodeStatus {
    #[serde(default, deserialize_with = "or_default")]
    pub allocatable: BTreeMap<String, Quantity>,
}

/// The objects of `kind` in a list as kubectl prints it: a `PodList`/`NodeList`, or a
/// `List` of mixed kinds (`kubectl get pods,nodes -A -o json`), whose other kinds are
/// passed over. Each object is returned with its index in `items`. Items are read one at
/// a time: a large cluster's pods (100 MB of JSON, most of it managedFields, env and
/// status) are never all held as JSON values at once.
pub fn read_list<T: DeserializeOwned>(bytes: &[u8], kind: &str) -> Result<Vec<(usize, T)>, ListError> {
    let mut field_error = None;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let read = ListSeed::<T> { kind, field_error: &mut field_error, object: PhantomData }
        .deserialize(&mut de)
        .and_then(|list| de.end().map(|()| list));
    let (list_kind, objects) = read.map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ListError::NotAList(ballast_core::json_errors::in_words(&e)),
        _ => ListError::Json(e),
    })?;
    // The list's kind first: kubectl prints it after the items, and a list of something
    // else is better told as such than by the first field that does not read.
    let list_kind = list_kind.unwrap_or_default();
    if list_kind != "List" && list_kind != format!("{kind}List") {
        return Err(ListError::NotAList(format!("kind is `{list_kind}`, not `{kind}List` or `List`")));
    }
    match field_error {
        Some(e) => Err(e),
        None => Ok(objects),
    }
}

/// Reads `{ kind, items, ... }`, keeping the items of `kind`; the first item that does not
/// read is kept in `field_error` (the rest are skipped) so the list's kind is still read.
struct ListSeed<'a, T> {
    kind: &'a str,
    field_error: &'a mut Option<ListError>,
    object: PhantomData<T>,
}

type ListRead<T> = (Option<String>, Vec<(usize, T)>);

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for ListSeed<'_, T> {
    type Value = ListRead<T>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: DeserializeOwned> Visitor<'de> for ListSeed<'_, T> {
    type Value = ListRead<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes list object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut list_kind = None;
        let mut objects = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "kind" => list_kind = map.next_value::<Option<String>>()?,
                "items" => {
                    let items = ItemsSeed { kind: self.kind, field_error: &mut *self.field_error, object: PhantomData };
                    objects = map.next_value_seed(items)?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((list_kind, objects))
    }
}

struct ItemsSeed<'a, T> {
    kind: &'a str,
    field_error: &'a mut Option<ListError>,
    object: PhantomData<T>,
}

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for ItemsSeed<'_, T> {
    type Value = Vec<(usize, T)>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        // `"items": null` is an empty list, as the API treats it.
        d.deserialize_option(self)
    }
}

impl<'de, T: DeserializeOwned> Visitor<'de> for ItemsSeed<'_, T> {
    type Value = Vec<(usize, T)>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of objects")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut objects = Vec::new();
        let mut index = 0;
        while let Some(item) = seq.next_element::<serde_json::Value>()? {
            // A typed list's items carry no kind; a mixed one's each say theirs.
            let other_kind = item.get("kind").and_then(|k| k.as_str()).is_some_and(|k| k != self.kind);
            if !other_kind && self.field_error.is_none() {
                match serde_path_to_error::deserialize(item) {
                    Ok(object) => objects.push((index, object)),
                    Err(e) => {
                        *self.field_error = Some(ListError::Field {
                            path: format!("items[{index}].{}", e.path()),
                            message: ballast_core::json_errors::message_in_words(&e.inner().to_string()),
                        })
                    }
                }
            }
            index += 1;
        }
        Ok(objects)
    }
}

/// What a pod is to the headroom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Demand the headroom holds room for.
    Workload,
    /// Run by a DaemonSet, mirrored by the kubelet, finished, or Ballast's own pause pod.
    NotDemand,
}

impl Pod {
    /// The pod's role, by the forwarder's rules; pods in `headroom_namespaces` are pause
    /// pods whatever their labels.
    pub fn role(&self, headroom_namespaces: &[&str]) -> Role {
        let meta = &self.metadata;
        let finished = matches!(self.status.phase.as_deref(), Some("Succeeded" | "Failed"));
        let mirror = meta.annotations.contains_key(MIRROR_ANNOTATION);
        let daemon = meta.owner_references.iter().any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
        let pause = meta.labels.contains_key(HEADROOM_LABEL) || headroom_namespaces.contains(&meta.namespace.as_str());
        if finished || mirror || daemon || pause {
            Role::NotDemand
        } else {
            Role::Workload
        }
    }

    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.metadata.namespace, self.metadata.name)
    }
}

/// A request that does not read as a quantity, with where it is in the pod.
#[derive(Debug, thiserror::Error)]
#[error("{path} = {value:?}: {why}")]
pub struct QuantityAt {
    /// From the object: `spec.containers[0].resources.requests.cpu`.
    pub path: String,
    pub value: String,
    pub why: QuantityError,
}

/// CPU, memory and extended resources (names with a `/`, e.g. `nvidia.com/gpu`) of a
/// map of quantities; hugepages and ephemeral storage are left out, as pause pods hold
/// neither. `at` is the map's path, for errors.
pub fn shape_of(map: &BTreeMap<String, Quantity>, at: &str) -> Result<PodShape, QuantityAt> {
    let mut shape = PodShape::default();
    for (name, quantity) in map {
        let parse = |parse: fn(&str) -> Result<u64, QuantityError>| {
            parse(&quantity.0).map_err(|why| QuantityAt {
                path: format!("{at}.{name}"),
                value: quantity.0.clone(),
                why,
            })
        };
        match name.as_str() {
            "cpu" => shape.cpu_millis = parse(parse_cpu_millis)?,
            "memory" => shape.memory_bytes = parse(parse_memory_bytes)?,
            // Extended resources are whole units; the byte parser reads them exactly
            // (rounding a fraction up, as the API would refuse it anyway).
            name if name.contains('/') => {
                shape.extended.insert(name.to_string(), parse(parse_memory_bytes)?);
            }
            _ => {}
        }
    }
    Ok(shape)
}

fn add(a: &PodShape, b: &PodShape) -> PodShape {
    let mut extended = a.extended.clone();
    for (name, n) in &b.extended {
        let e = extended.entry(name.clone()).or_insert(0);
        *e = e.saturating_add(*n);
    }
    PodShape {
        cpu_millis: a.cpu_millis.saturating_add(b.cpu_millis),
        memory_bytes: a.memory_bytes.saturating_add(b.memory_bytes),
        extended,
    }
}

impl PodSpec {
    /// The requests the scheduler reserves for the pod, per resource: the larger of the
    /// containers' sum (sidecars, init containers that keep running, included) and the
    /// largest init container (each beside the sidecars started before it), plus the
    /// overhead. Pod-level requests replace the containers' CPU or memory where they
    /// name it. The same rule as the forwarder's.
    pub fn requests(&self) -> Result<PodShape, QuantityAt> {
        let mut running = PodShape::default();
        for (i, c) in self.containers.iter().enumerate() {
            running =
                add(&running, &shape_of(&c.resources.requests, &format!("spec.containers[{i}].resources.requests"))?);
        }
        let mut sidecars = PodShape::default();
        let mut init_peak = PodShape::default();
        for (i, c) in self.init_containers.iter().enumerate() {
            let r = shape_of(&c.resources.requests, &format!("spec.initContainers[{i}].resources.requests"))?;
            if c.restart_policy.as_deref() == Some("Always") {
                sidecars = add(&sidecars, &r);
            } else {
                init_peak = init_peak.covering(&add(&sidecars, &r));
            }
        }
        let mut requests = add(&running, &sidecars).covering(&init_peak);
        let pod_level = &self.resources.requests;
        if !pod_level.is_empty() {
            let named = shape_of(pod_level, "spec.resources.requests")?;
            if pod_level.contains_key("cpu") {
                requests.cpu_millis = named.cpu_millis;
            }
            if pod_level.contains_key("memory") {
                requests.memory_bytes = named.memory_bytes;
            }
        }
        let mut requests = add(&requests, &shape_of(&self.overhead, "spec.overhead")?);
        requests.extended.retain(|_, n| *n > 0);
        Ok(requests)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn requests_take_the_larger_of_containers_and_init_plus_overhead() {
        let p = pod(serde_json::json!({"spec": {
            "containers": [{"resources": {"requests": {"cpu": "250m", "memory": "64Mi", "nvidia.com/gpu": "1"}}}],
            "initContainers": [
                {"restartPolicy": "Always", "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}},
                {"resources": {"requests": {"cpu": "2", "memory": "16Mi", "nvidia.com/gpu": "4"}}}
            ],
            "overhead": {"cpu": "10m"}
        }}));
        let shape = p.spec.requests().unwrap();
        // CPU: the init container beside the sidecar started before it (2100m) outweighs
        // the containers and the sidecar (350m); memory the other way (96Mi > 48Mi).
        assert_eq!(shape.cpu_millis, 2110);
        assert_eq!(shape.memory_bytes, 96 << 20);
        assert_eq!(shape.extended, BTreeMap::from([("nvidia.com/gpu".to_string(), 4)]));
    }

    #[test]
    fn pod_level_requests_replace_what_they_name_and_overhead_still_adds() {
        let p = pod(serde_json::json!({"spec": {
            "containers": [{"resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}],
            "resources": {"requests": {"cpu": "1"}},
            "overhead": {"cpu": "10m", "memory": "1Mi"}
        }}));
        assert_eq!(p.spec.requests().unwrap(), PodShape::new(1010, 65 << 20));
    }

    #[test]
    fn a_request_that_is_no_quantity_is_named_by_its_path() {
        let p =
            pod(serde_json::json!({"spec": {"initContainers": [{}, {"resources": {"requests": {"memory": "lots"}}}]}}));
        let err = p.spec.requests().unwrap_err();
        assert_eq!(err.path, "spec.initContainers[1].resources.requests.memory");
        assert!(err.to_string().contains("`lots` is not a Kubernetes quantity"), "{err}");
        // Numbers, as a person may write them, read as the API's strings would.
        let numbers =
            pod(serde_json::json!({"spec": {"containers": [{"resources": {"requests": {"cpu": 2, "memory": 1e3}}}]}}));
        assert_eq!(numbers.spec.requests().unwrap(), PodShape::new(2000, 1000));
        let flag = serde_json::from_value::<Pod>(serde_json::json!({"spec": {"overhead": {"cpu": true}}})).unwrap_err();
        assert!(flag.to_string().starts_with("expected a quantity (e.g. \"500m\", \"2Gi\"), found true"), "{flag}");
    }

    #[test]
    fn only_workload_pods_are_demand() {
        let role = |meta: serde_json::Value, phase: &str| {
            pod(serde_json::json!({"metadata": meta, "status": {"phase": phase}})).role(&["ballast-headroom"])
        };
        let daemon = serde_json::json!({"ownerReferences": [{"kind": "DaemonSet", "controller": true}]});
        assert_eq!(role(daemon, "Running"), Role::NotDemand);
        let adopted = serde_json::json!({"ownerReferences": [{"kind": "DaemonSet"}]});
        assert_eq!(role(adopted, "Running"), Role::Workload, "only a controlling DaemonSet");
        let mirror = serde_json::json!({"annotations": {MIRROR_ANNOTATION: "x"}});
        assert_eq!(role(mirror, "Running"), Role::NotDemand);
        assert_eq!(role(serde_json::json!({}), "Succeeded"), Role::NotDemand);
        assert_eq!(role(serde_json::json!({"labels": {HEADROOM_LABEL: "true"}}), "Pending"), Role::NotDemand);
        assert_eq!(role(serde_json::json!({"namespace": "ballast-headroom"}), "Pending"), Role::NotDemand);
        assert_eq!(role(serde_json::json!({"namespace": "ml"}), "Pending"), Role::Workload);
    }

    #[test]
    fn lists_are_read_as_kubectl_prints_them() {
        let mixed = br#"{"kind": "List", "items": [
            {"kind": "Node", "metadata": {"name": "n"}},
            {"kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": null}
        ]}"#;
        let pods: Vec<(usize, Pod)> = read_list(mixed, "Pod").unwrap();
        assert_eq!(pods.len(), 1);
        assert_eq!((pods[0].0, pods[0].1.id()), (1, "ml/p".to_string()));
        let typed = br#"{"kind": "NodeList", "items": [{"metadata": {"name": "n"}}]}"#;
        assert_eq!(read_list::<Node>(typed, "Node").unwrap().len(), 1);

        let wrong_kind = read_list::<Pod>(br#"{"kind": "ConfigMapList", "items": []}"#, "Pod").unwrap_err();
        assert!(wrong_kind.to_string().contains("kind is `ConfigMapList`, not `PodList` or `List`"), "{wrong_kind}");
        let bad_field = br#"{"kind": "PodList", "items": [{}, {"spec": {"containers": "all"}}]}"#;
        let err = read_list::<Pod>(bad_field, "Pod").unwrap_err();
        assert_eq!(err.to_string(), "items[1].spec.containers: expected an array (`[...]`), found the text `all`");
        // kubectl prints the list's kind after its items: it is still what is told.
        let other = br#"{"items": [{"spec": {"containers": "all"}}], "kind": "ConfigMapList"}"#;
        let err = read_list::<Pod>(other, "Pod").unwrap_err();
        assert!(err.to_string().contains("kind is `ConfigMapList`"), "{err}");
        assert!(read_list::<Pod>(br#"{"kind": "PodList", "items": null}"#, "Pod").unwrap().is_empty());
        assert!(matches!(read_list::<Pod>(b"{\"kind\": ", "Pod"), Err(ListError::Json(_))));
        assert!(matches!(read_list::<Pod>(b"[1, 2]", "Pod"), Err(ListError::NotAList(_))));
    }
}
