//! What Ballast needs to know about a pod, read from the API object: its role (is it
//! demand at all?), its effective requests, and whether the scheduler gave up on it.

use std::collections::BTreeMap;

use ballast_core::shape::{PodShape, WorkloadKind};
use ballast_core::units::{parse_cpu_millis, parse_memory_bytes, QuantityError};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Label on Ballast's pause pods (and their Deployment).
pub const HEADROOM_LABEL: &str = "ballast.io/headroom";
/// Label naming the pool of a headroom Deployment.
pub const POOL_LABEL: &str = "ballast.io/pool";
/// Static pods mirrored into the API server by the kubelet.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What a pod is to Ballast: demand, its own headroom, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodRole {
    /// Anything else: the pool's demand.
    Workload,
    /// Ballast's own headroom.
    Pause,
    /// Run by a DaemonSet on every node: not demand, not evicted.
    DaemonSet,
    /// A static pod the kubelet mirrors: not demand, not evicted.
    Mirror,
    /// Succeeded or Failed: holds no capacity.
    Finished,
}

impl PodRole {
    /// Only workload pods are demand.
    pub fn is_demand(self) -> bool {
        self == PodRole::Workload
    }

    /// What a drain must evict: everything except DaemonSet and mirror pods (finished
    /// pods hold nothing and go with the node).
    pub fn is_evictable(self) -> bool {
        matches!(self, PodRole::Workload | PodRole::Pause)
    }
}

/// The pod's role, from its phase, annotations, owner and labels.
pub fn role(pod: &Pod) -> PodRole {
    let meta = &pod.metadata;
    if matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")) {
        return PodRole::Finished;
    }
    if meta.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)) {
        return PodRole::Mirror;
    }
    if meta.owner_references.iter().flatten().any(|o| o.kind == "DaemonSet" && o.controller == Some(true)) {
        return PodRole::DaemonSet;
    }
    if meta.labels.as_ref().is_some_and(|l| l.get(HEADROOM_LABEL).is_some_and(|v| v == "true")) {
        return PodRole::Pause;
    }
    PodRole::Workload
}

/// CPU and memory a pod asks the scheduler for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests {
    /// CPU in thousandths of a core.
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
}

impl Requests {
    fn add(self, other: Requests) -> Requests {
        Requests {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
        }
    }

    fn max(self, other: Requests) -> Requests {
        Requests {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
        }
    }
}

/// A request the API server accepted but Ballast cannot read.
#[derive(Debug, thiserror::Error)]
#[error("{container}: resources.requests.{resource} = {value:?}: {source}")]
pub struct RequestError {
    /// The container whose request it is (`overhead` and `pod` for the pod's own).
    pub container: String,
    /// `cpu` or `memory`.
    pub resource: &'static str,
    /// The quantity as written.
    pub value: String,
    /// Why it does not parse.
    #[source]
    pub source: QuantityError,
}

/// The requests the scheduler reserves for the pod: the larger of the containers' sum
/// and the largest init container (init containers run one at a time), plus overhead.
/// Sidecars (init containers that keep running) count with the containers. Pod-level
/// requests (`spec.resources`, PodLevelResources: beta and on by default from 1.34)
/// replace the containers' for each resource they name, as the scheduler's
/// `PodRequests` does; overhead still adds.
pub fn effective_requests(spec: &PodSpec) -> Result<Requests, RequestError> {
    let mut running = Requests::default();
    let mut init_peak = Requests::default();
    let mut sidecars = Requests::default();
    for c in &spec.containers {
        running = running.add(container_requests(&c.name, c.resources.as_ref())?);
    }
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(&c.name, c.resources.as_ref())?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.add(r);
        } else {
            init_peak = init_peak.max(sidecars.add(r));
        }
    }
    let overhead = quantities("overhead", spec.overhead.as_ref())?;
    let mut requests = running.add(sidecars).max(init_peak);
    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let named = quantities("pod", Some(pod_level))?;
        if pod_level.contains_key("cpu") {
            requests.cpu_millis = named.cpu_millis;
        }
        if pod_level.contains_key("memory") {
            requests.memory_bytes = named.memory_bytes;
        }
    }
    Ok(requests.add(overhead))
}

fn container_requests(name: &str, resources: Option<&ResourceRequirements>) -> Result<Requests, RequestError> {
    quantities(name, resources.and_then(|r| r.requests.as_ref()))
}

fn quantities(owner: &str, map: Option<&BTreeMap<String, Quantity>>) -> Result<Requests, RequestError> {
    let Some(map) = map else { return Ok(Requests::default()) };
    let read = |resource: &'static str, parse: fn(&str) -> Result<u64, QuantityError>| -> Result<u64, RequestError> {
        match map.get(resource) {
            None => Ok(0),
            Some(q) => parse(&q.0).map_err(|source| RequestError {
                container: owner.to_string(),
                resource,
                value: q.0.clone(),
                source,
            }),
        }
    };
    Ok(Requests { cpu_millis: read("cpu", parse_cpu_millis)?, memory_bytes: read("memory", parse_memory_bytes)? })
}

/// The GPU resource pause pods may request (the seed's GPU pools run NVIDIA's device plugin).
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// What a pod asks the scheduler for beyond CPU and memory: room held for it must hold
/// these too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Extended {
    /// [`GPU_RESOURCE`]s, counted as the scheduler counts CPU (containers and sidecars
    /// together, or the largest init container).
    pub gpus: u64,
    /// Any other extended resource or hugepages, or a GPU count that does not read as a
    /// whole number: room of CPU, memory and GPUs alone may not fit the pod.
    pub others: bool,
}

/// The pod's [`Extended`] requests. Ephemeral storage is left out: pause pods hold none,
/// and a node's disk is seldom what a pod waits for.
pub fn extended_requests(spec: &PodSpec) -> Extended {
    let mut others = false;
    let mut gpus_of = |resources: Option<&ResourceRequirements>| -> u64 {
        let Some(map) = resources.and_then(|r| r.requests.as_ref()) else { return 0 };
        let mut gpus = 0;
        for (name, quantity) in map {
            match name.as_str() {
                "cpu" | "memory" | "ephemeral-storage" => {}
                GPU_RESOURCE => match quantity.0.parse::<u64>() {
                    Ok(n) => gpus = n,
                    Err(_) => others = true,
                },
                _ => others = true,
            }
        }
        gpus
    };
    let mut running = 0u64;
    let mut sidecars = 0u64;
    let mut init_peak = 0u64;
    for c in &spec.containers {
        running = running.saturating_add(gpus_of(c.resources.as_ref()));
    }
    for c in spec.init_containers.iter().flatten() {
        let gpus = gpus_of(c.resources.as_ref());
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.saturating_add(gpus);
        } else {
            init_peak = init_peak.max(sidecars.saturating_add(gpus));
        }
    }
    // Pod-level requests name CPU, memory and hugepages only: hugepages are "others".
    gpus_of(spec.resources.as_ref());
    Extended { gpus: running.saturating_add(sidecars).max(init_peak), others }
}

/// Whether `name` is an extended resource (`nvidia.com/gpu`): domain-qualified, outside
/// Kubernetes' own `kubernetes.io` domain. CPU, memory, ephemeral storage and hugepages
/// are not.
pub fn is_extended_resource(name: &str) -> bool {
    let Some((domain, _)) = name.split_once('/') else { return false };
    domain != "kubernetes.io" && !domain.ends_with(".kubernetes.io")
}

/// The pod's extended resources as the scheduler counts them: per resource, the larger of
/// the containers' sum (sidecars included) and the largest init container (with the
/// sidecars started before it), in whole units (a fraction, which the API server refuses
/// for extended resources, rounds up).
pub fn extended_resources(spec: &PodSpec) -> BTreeMap<String, u64> {
    fn of(resources: Option<&ResourceRequirements>) -> BTreeMap<String, u64> {
        let Some(map) = resources.and_then(|r| r.requests.as_ref()) else { return BTreeMap::new() };
        map.iter()
            .filter(|(name, _)| is_extended_resource(name))
            .filter_map(|(name, q)| Some((name.clone(), parse_cpu_millis(&q.0).ok()?.div_ceil(1000))))
            .collect()
    }
    fn add(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
        for (name, n) in from {
            let e = into.entry(name.clone()).or_insert(0);
            *e = e.saturating_add(*n);
        }
    }
    fn max(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
        for (name, n) in from {
            let e = into.entry(name.clone()).or_insert(0);
            *e = (*e).max(*n);
        }
    }
    let mut running = BTreeMap::new();
    let mut sidecars = BTreeMap::new();
    let mut init_peak = BTreeMap::new();
    for c in &spec.containers {
        add(&mut running, &of(c.resources.as_ref()));
    }
    for c in spec.init_containers.iter().flatten() {
        let r = of(c.resources.as_ref());
        if c.restart_policy.as_deref() == Some("Always") {
            add(&mut sidecars, &r);
        } else {
            let mut with_sidecars = sidecars.clone();
            add(&mut with_sidecars, &r);
            max(&mut init_peak, &with_sidecars);
        }
    }
    add(&mut running, &sidecars);
    max(&mut running, &init_peak);
    running.retain(|_, n| *n > 0);
    running
}

/// The pod's shape for the demand reports: its effective CPU and memory
/// ([`effective_requests`]) and its extended resources ([`extended_resources`]).
pub fn shape(spec: &PodSpec, requests: Requests) -> PodShape {
    PodShape {
        cpu_millis: requests.cpu_millis,
        memory_bytes: requests.memory_bytes,
        extended: extended_resources(spec),
    }
}

/// What runs the pod: a Job (a CronJob's too) when a Job owns it, else something that
/// keeps running.
pub fn workload_kind(pod: &Pod) -> WorkloadKind {
    if pod.metadata.owner_references.iter().flatten().any(|o| o.kind == "Job") {
        WorkloadKind::Job
    } else {
        WorkloadKind::LongRunning
    }
}

/// When the scheduler last said the pod fits nowhere (`PodScheduled=False`,
/// reason `Unschedulable`); `None` for a pod that is bound or not yet tried.
pub fn unschedulable_since(pod: &Pod) -> Option<DateTime<Utc>> {
    if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
        return None;
    }
    let condition =
        pod.status.as_ref()?.conditions.iter().flatten().find(|c| {
            c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
        })?;
    condition.last_transition_time.as_ref().or(pod.metadata.creation_timestamp.as_ref()).and_then(|t| to_chrono(t.0))
}

/// How long a bound pod waited to be scheduled: from its creation to its PodScheduled
/// condition turning True (the API server sets it at binding). `None` without both
/// times, e.g. a pod created with its node already set.
pub fn first_start_wait(pod: &Pod) -> Option<std::time::Duration> {
    let created = to_chrono(pod.metadata.creation_timestamp.as_ref()?.0)?;
    (scheduled_at(pod)? - created).to_std().ok()
}

/// When the pod was bound: its PodScheduled condition turning True.
pub fn scheduled_at(pod: &Pod) -> Option<DateTime<Utc>> {
    let scheduled = pod
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "True")?
        .last_transition_time
        .as_ref()?;
    to_chrono(scheduled.0)
}

/// k8s-openapi's timestamps are jiff's; Ballast's core speaks chrono.
pub fn to_chrono(t: k8s_openapi::jiff::Timestamp) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.as_second(), u32::try_from(t.subsec_nanosecond()).unwrap_or(0))
}

/// The node a pod is bound to.
pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;

    fn container(name: &str, cpu: &str, memory: &str) -> Container {
        Container {
            name: name.to_string(),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity(cpu.to_string())),
                    ("memory".to_string(), Quantity(memory.to_string())),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn gpus_count_like_cpu_and_other_extended_resources_are_flagged() {
        let gpu = |name: &str, n: &str| {
            let mut c = container(name, "1", "1Gi");
            c.resources.as_mut().unwrap().requests.as_mut().unwrap().insert(GPU_RESOURCE.into(), Quantity(n.into()));
            c
        };
        let spec = PodSpec {
            containers: vec![gpu("a", "1"), gpu("b", "2")],
            init_containers: Some(vec![gpu("warm", "4")]),
            ..Default::default()
        };
        assert_eq!(extended_requests(&spec), Extended { gpus: 4, others: false }, "the init container's 4 > 1 + 2");
        let plain = PodSpec { containers: vec![container("a", "1", "1Gi")], ..Default::default() };
        assert_eq!(extended_requests(&plain), Extended::default());
        let mut odd = container("a", "1", "1Gi");
        odd.resources
            .as_mut()
            .unwrap()
            .requests
            .as_mut()
            .unwrap()
            .insert("hugepages-2Mi".into(), Quantity("1Gi".into()));
        let hugepages = PodSpec { containers: vec![odd], ..Default::default() };
        assert!(extended_requests(&hugepages).others);
        let half = PodSpec { containers: vec![gpu("a", "0.5")], ..Default::default() };
        assert!(extended_requests(&half).others, "not a whole GPU: never matched");
    }

    #[test]
    fn extended_resources_count_per_resource_as_the_scheduler_does() {
        let with = |name: &str, extra: &[(&str, &str)]| {
            let mut c = container(name, "1", "1Gi");
            let requests = c.resources.as_mut().unwrap().requests.as_mut().unwrap();
            for (k, v) in extra {
                requests.insert(k.to_string(), Quantity(v.to_string()));
            }
            c
        };
        let mut sidecar = with("proxy", &[("example.com/nic", "1")]);
        sidecar.restart_policy = Some("Always".into());
        let spec = PodSpec {
            containers: vec![
                with("a", &[(GPU_RESOURCE, "1"), ("hugepages-2Mi", "1Gi"), ("ephemeral-storage", "1Gi")]),
                with("b", &[(GPU_RESOURCE, "1"), ("example.com/nic", "1")]),
            ],
            // The init container runs beside the sidecar: 3 NICs then, against 1 + 1 after.
            init_containers: Some(vec![sidecar, with("warm", &[(GPU_RESOURCE, "3"), ("example.com/nic", "2")])]),
            ..Default::default()
        };
        let extended = extended_resources(&spec);
        assert_eq!(extended, BTreeMap::from([(GPU_RESOURCE.to_string(), 3), ("example.com/nic".to_string(), 3)]));
        let requests = effective_requests(&spec).unwrap();
        let s = shape(&spec, requests);
        // CPU and memory as effective_requests counts them: 1 + 1 + the 1 of the sidecar.
        assert_eq!((s.cpu_millis, s.memory_bytes, s.extended), (3000, 3 << 30, extended));
        assert!(!is_extended_resource("kubernetes.io/batch") && !is_extended_resource("cpu"));
        let plain = PodSpec { containers: vec![container("a", "1", "1Gi")], ..Default::default() };
        assert!(extended_resources(&plain).is_empty());
    }

    #[test]
    fn a_pod_a_job_owns_is_a_job_s() {
        let owned = |kind: &str| -> Pod {
            serde_json::from_value(serde_json::json!({ "metadata": { "name": "p", "ownerReferences": [{
                "apiVersion": "v1", "kind": kind, "name": "o", "uid": "u", "controller": true }] } }))
            .unwrap()
        };
        assert_eq!(workload_kind(&owned("Job")), WorkloadKind::Job);
        assert_eq!(workload_kind(&owned("ReplicaSet")), WorkloadKind::LongRunning);
        assert_eq!(workload_kind(&Pod::default()), WorkloadKind::LongRunning);
    }

    #[test]
    fn requests_take_the_larger_of_containers_and_init_plus_overhead() {
        let spec = PodSpec {
            containers: vec![container("a", "250m", "128Mi"), container("b", "250m", "128Mi")],
            init_containers: Some(vec![container("migrate", "1", "64Mi")]),
            overhead: Some(BTreeMap::from([("cpu".to_string(), Quantity("10m".to_string()))])),
            ..Default::default()
        };
        let r = effective_requests(&spec).unwrap();
        assert_eq!(r, Requests { cpu_millis: 1010, memory_bytes: 256 << 20 });
    }

    #[test]
    fn pod_level_requests_replace_the_containers_for_what_they_name() {
        // PodLevelResources (beta, on by default from Kubernetes 1.34): the scheduler
        // reserves the pod's own requests, not its containers' sum; overhead still adds.
        let spec = PodSpec {
            containers: vec![container("a", "250m", "128Mi"), container("b", "250m", "128Mi")],
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("cpu".to_string(), Quantity("2".to_string()))])),
                ..Default::default()
            }),
            overhead: Some(BTreeMap::from([("cpu".to_string(), Quantity("10m".to_string()))])),
            ..Default::default()
        };
        assert_eq!(effective_requests(&spec).unwrap(), Requests { cpu_millis: 2010, memory_bytes: 256 << 20 });
        let mut bad = spec.clone();
        bad.resources.as_mut().unwrap().requests.as_mut().unwrap().insert("memory".into(), Quantity("much".into()));
        let err = effective_requests(&bad).unwrap_err().to_string();
        assert!(err.starts_with("pod: resources.requests.memory = \"much\""), "{err}");
    }

    #[test]
    fn sidecars_count_with_the_containers() {
        let mut sidecar = container("proxy", "100m", "32Mi");
        sidecar.restart_policy = Some("Always".to_string());
        let spec = PodSpec {
            containers: vec![container("app", "500m", "256Mi")],
            init_containers: Some(vec![sidecar, container("init", "550m", "16Mi")]),
            ..Default::default()
        };
        // init runs beside the sidecar: 650m; app + sidecar: 600m.
        assert_eq!(effective_requests(&spec).unwrap(), Requests { cpu_millis: 650, memory_bytes: 288 << 20 });
    }

    #[test]
    fn an_unreadable_quantity_names_the_container_and_resource() {
        let spec = PodSpec { containers: vec![container("web", "lots", "1Gi")], ..Default::default() };
        let err = effective_requests(&spec).unwrap_err().to_string();
        assert!(err.starts_with("web: resources.requests.cpu = \"lots\""), "{err}");
    }
}
