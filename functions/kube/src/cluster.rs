//! The cluster port on a real API server: pool nodes, headroom by server-side apply,
//! cordon, drain through the Eviction API, and demand from a paged pod listing.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;
use ballast_core::config::PoolConfig;
use ballast_core::observe::{Demand, NodeState};
use ballast_core::ports::{Cluster, DrainReport, ErrorKind, PortError};
use ballast_core::shape::{PodShape, SlotState};
use ballast_core::units::{parse_cpu_millis, parse_memory_bytes};
use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;
use tokio::sync::{Mutex, OnceCell};
use tokio::time::Instant;

use crate::connect::{ConnectError, Connector};
use crate::headroom::{self, FIELD_MANAGER};
use crate::pods;
use crate::pools::PoolMatcher;

/// Pods per list page: bounded memory on large clusters.
const PAGE: u32 = 500;

/// Which Eviction API the server speaks. policy/v1 where it exists (1.22+), the
/// v1beta1 of older servers otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionVersion {
    /// `policy/v1`.
    V1,
    /// `policy/v1beta1`.
    V1beta1,
}

impl EvictionVersion {
    /// The `apiVersion` an Eviction of this version carries.
    pub fn api_version(self) -> &'static str {
        match self {
            EvictionVersion::V1 => "policy/v1",
            EvictionVersion::V1beta1 => "policy/v1beta1",
        }
    }
}

/// The [`Cluster`] port over the Kubernetes API: nodes, headroom, cordon, drain and demand.
pub struct KubeCluster {
    connector: Connector,
    matcher: PoolMatcher,
    /// How often a drain looks again at pods a budget blocks or that are terminating.
    drain_poll: Duration,
    eviction: OnceCell<EvictionVersion>,
    /// PriorityClasses known to be in place (they are cluster-wide and immutable).
    priority_classes: Mutex<HashSet<String>>,
}

impl KubeCluster {
    /// The cluster `connector` reaches, for the pools of the config.
    pub fn new(connector: Connector, pools: &[PoolConfig]) -> KubeCluster {
        KubeCluster {
            connector,
            matcher: PoolMatcher::new(pools),
            drain_poll: Duration::from_secs(2),
            eviction: OnceCell::new(),
            priority_classes: Mutex::new(HashSet::new()),
        }
    }

    /// How often a drain looks again at pods it waits for (2 s; tests' shorter).
    pub fn with_drain_poll(mut self, poll: Duration) -> Self {
        self.drain_poll = poll;
        self
    }

    async fn client(&self, operation: &str) -> Result<kube::Client, PortError> {
        self.connector.client().await.map_err(|e| connect_error(operation, e))
    }

    /// Asks the server which group version its `pods/eviction` subresource takes.
    pub async fn eviction_version(&self) -> Result<EvictionVersion, PortError> {
        self.eviction
            .get_or_try_init(|| async {
                let client = self.client("discover eviction version").await?;
                let request = http::Request::get("/api/v1")
                    .body(Vec::new())
                    .map_err(|e| PortError::new(ErrorKind::Permanent, "GET /api/v1", e.to_string()))?;
                let list: APIResourceList = client.request(request).await.map_err(|e| kube_error("GET /api/v1", e))?;
                let eviction = list.resources.iter().find(|r| r.name == "pods/eviction");
                Ok(match eviction.and_then(|r| r.version.as_deref()) {
                    Some("v1") => EvictionVersion::V1,
                    _ => EvictionVersion::V1beta1,
                })
            })
            .await
            .copied()
    }

    async fn ensure_priority_class(&self, client: &kube::Client, pool: &PoolConfig) -> Result<(), PortError> {
        let config = &pool.headroom.priority_class;
        let mut known = self.priority_classes.lock().await;
        if known.contains(&config.name) {
            return Ok(());
        }
        let api: Api<PriorityClass> = Api::all(client.clone());
        let operation = format!("apply PriorityClass {}", config.name);
        let desired = headroom::priority_class(config);
        match api.get_opt(&config.name).await.map_err(|e| kube_error(&operation, e))? {
            Some(current)
                if current.value != desired.value || current.preemption_policy != desired.preemption_policy =>
            {
                // Both fields are immutable: say what to do instead of failing obscurely.
                return Err(PortError::new(
                    ErrorKind::Permanent,
                    operation,
                    format!(
                        "PriorityClass {} exists with value {} and preemptionPolicy {:?}; Ballast needs {} and Never: \
                         delete it or set headroom.priority_class.name to another name",
                        config.name,
                        current.value,
                        current.preemption_policy.as_deref().unwrap_or("PreemptLowerPriority"),
                        desired.value
                    ),
                ));
            }
            Some(_) => {}
            None => match api.patch(&config.name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&desired)).await {
                Ok(_) => {}
                // The shipped RBAC lets the functions read their PriorityClass, not create
                // one: whoever applies it makes the class.
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    return Err(PortError::new(
                        ErrorKind::Permanent,
                        operation,
                        format!(
                            "PriorityClass {} does not exist and the functions may not create it: apply \
                             infra/k8s/functions-rbac.yaml (it makes ballast-headroom), or create it with value {} and \
                             preemptionPolicy Never",
                            config.name, desired.value
                        ),
                    ))
                }
                Err(e) => return Err(kube_error(&operation, e)),
            },
        }
        known.insert(config.name.clone());
        Ok(())
    }

    async fn list_pool_nodes(&self, client: &kube::Client, pool: &PoolConfig) -> Result<Vec<Node>, PortError> {
        let selector: Vec<String> = pool.node_selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut params = ListParams::default();
        if !selector.is_empty() {
            params = params.labels(&selector.join(","));
        }
        list_all(Api::all(client.clone()), params, "list nodes").await
    }

    async fn evict(
        &self,
        client: &kube::Client,
        version: EvictionVersion,
        pod: &Pod,
        grace_seconds: i64,
    ) -> Result<(), kube::Error> {
        let (namespace, name) = pod_key(pod);
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        // Built by hand: kube's EvictParams serialises `delete_options`, which the server ignores.
        let body = eviction_body(version, namespace, name, grace_seconds);
        api.create_subresource::<_, serde_json::Value>("eviction", name, &PostParams::default(), &body).await?;
        Ok(())
    }

    async fn pods_on_node(&self, client: &kube::Client, node: &str) -> Result<Vec<Pod>, PortError> {
        let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        list_all(Api::all(client.clone()), params, &format!("list pods on {node}")).await
    }
}

/// Every object the list matches, a page at a time.
async fn list_all<K>(api: Api<K>, params: ListParams, operation: &str) -> Result<Vec<K>, PortError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = params.limit(PAGE);
    let mut out = Vec::new();
    loop {
        let page = api.list(&params).await.map_err(|e| kube_error(operation, e))?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// The Eviction a drain posts: the pod's own grace period, but never past the deadline.
pub fn eviction_body(version: EvictionVersion, namespace: &str, name: &str, grace_seconds: i64) -> serde_json::Value {
    json!({
        "apiVersion": version.api_version(),
        "kind": "Eviction",
        "metadata": { "name": name, "namespace": namespace },
        "deleteOptions": { "gracePeriodSeconds": grace_seconds },
    })
}

fn pod_key(pod: &Pod) -> (&str, &str) {
    (pod.metadata.namespace.as_deref().unwrap_or("default"), pod.metadata.name.as_deref().unwrap_or_default())
}

fn pod_label(pod: &Pod) -> String {
    let (namespace, name) = pod_key(pod);
    format!("{namespace}/{name}")
}

/// The instance ID in an AWS provider ID (`aws:///eu-west-1a/i-0123…`).
pub fn instance_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws://")?;
    rest.rsplit('/').next().filter(|id| id.starts_with("i-") && id.len() > 2)
}

/// A node as the planner sees it; `None` for a node with no EC2 instance behind it.
pub fn node_state(node: &Node) -> Option<NodeState> {
    let provider_id = node.spec.as_ref()?.provider_id.as_deref()?;
    Some(NodeState {
        name: node.metadata.name.clone()?,
        instance_id: instance_id(provider_id)?.to_string(),
        ready: node_ready(node),
        unschedulable: node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
        allocatable: allocatable(node),
    })
}

/// What the node offers pods (`status.allocatable`): CPU, memory and its extended
/// resources; `None` without it or when a quantity does not read.
pub fn allocatable(node: &Node) -> Option<PodShape> {
    let map = node.status.as_ref()?.allocatable.as_ref()?;
    let mut shape =
        PodShape::new(parse_cpu_millis(&map.get("cpu")?.0).ok()?, parse_memory_bytes(&map.get("memory")?.0).ok()?);
    for (name, quantity) in map.iter().filter(|(name, _)| pods::is_extended_resource(name)) {
        // Whole units (a node offers whole GPUs); a fraction would be a node's oddity.
        shape.extended.insert(name.clone(), parse_cpu_millis(&quantity.0).ok()? / 1000);
    }
    Some(shape)
}

/// Whether the node's `Ready` condition is `True`.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn connect_error(operation: &str, e: ConnectError) -> PortError {
    let kind = match e {
        ConnectError::Credentials(_) | ConnectError::Client(_) => ErrorKind::Retryable,
        _ => ErrorKind::Permanent,
    };
    PortError::new(kind, operation, e.to_string()).with_source(e)
}

/// Throttling, conflicts and server trouble are worth a retry; the rest fails the same way again.
pub fn kube_error(operation: &str, e: kube::Error) -> PortError {
    let (kind, message) = match &e {
        kube::Error::Api(status) => {
            let kind = match status.code {
                409 => ErrorKind::Conflict,
                429 | 500..=599 => ErrorKind::Retryable,
                _ => ErrorKind::Permanent,
            };
            (kind, format!("{} ({}): {}", status.code, status.reason, status.message))
        }
        other => (ErrorKind::Retryable, other.to_string()),
    };
    PortError::new(kind, operation, message).with_source(e)
}

/// Whether the API server refused the caller itself: 401 (its identity is not mapped: no
/// EKS access entry or aws-auth entry) or 403 (no RBAC lets it).
pub fn access_refused(e: &PortError) -> bool {
    let Some(source) = e.source.as_deref() else { return false };
    matches!(source.downcast_ref::<kube::Error>(), Some(kube::Error::Api(status)) if matches!(status.code, 401 | 403))
}

/// A pause-pod Deployment as the planner sees it: its shape and replicas, or no replicas
/// when it differs from what Ballast would apply in anything else (new image, priority,
/// tolerations, requests Ballast does not write), so that the next decision writes it
/// whatever the count.
fn slot_state(pool: &PoolConfig, slot: usize, name: &str, current: &Deployment) -> SlotState {
    let replicas = current.spec.as_ref().and_then(|s| s.replicas).map(|r| u32::try_from(r).unwrap_or(0));
    let Some(shape) = headroom::shape_of(current) else {
        tracing::info!(deployment = %name, "headroom Deployment's requests are not a shape; it will be applied again");
        return SlotState { slot, shape: PodShape::default(), replicas: None };
    };
    let desired = headroom::deployment(pool, slot, &shape, replicas.unwrap_or(0));
    let matches = headroom::deployment_matches(current, &desired);
    if !matches {
        tracing::info!(deployment = %name, "headroom Deployment differs from the config; it will be applied again");
    }
    SlotState { slot, shape, replicas: replicas.filter(|_| matches) }
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

impl KubeCluster {
    async fn set_unschedulable(&self, node: &str, unschedulable: bool) -> Result<(), PortError> {
        let what = if unschedulable { "cordon" } else { "uncordon" };
        let client = self.client(what).await?;
        let api: Api<Node> = Api::all(client);
        let patch = json!({ "spec": { "unschedulable": unschedulable } });
        match api.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            // The node left (its instance was reclaimed and the node object deleted):
            // there is nothing to keep pods off, or to let them back on.
            Err(e) if api_code(&e) == Some(404) => {
                tracing::info!(node, what, "the node is gone: nothing to do");
                Ok(())
            }
            Err(e) => Err(kube_error(&format!("{what} {node}"), e)),
        }
    }
}

#[async_trait]
impl Cluster for KubeCluster {
    async fn pool_nodes(&self, pool: &PoolConfig) -> Result<Vec<NodeState>, PortError> {
        let client = self.client("list nodes").await?;
        let nodes = self.list_pool_nodes(&client, pool).await?;
        Ok(nodes.iter().filter_map(node_state).collect())
    }

    async fn headroom(&self, pool: &PoolConfig) -> Result<Vec<SlotState>, PortError> {
        let client = self.client("get headroom").await?;
        let api: Api<Deployment> = Api::namespaced(client, &pool.headroom.namespace);
        let allowed = pool.headroom.shapes.deployments();
        let mut slots = Vec::new();
        // One GET by name per slot: the functions' RBAC names the Deployments, it does not
        // let them list. Slots past what the config allows are read too, so that one left
        // from an earlier config is scaled to 0; RBAC may not name those, and a 403 on
        // them only means there is none Ballast could have made.
        for slot in 0..headroom::SLOTS_READ.max(allowed) {
            let name = headroom::deployment_name(pool, slot);
            let current = match api.get_opt(&name).await {
                Ok(current) => current,
                Err(e) if slot >= allowed && api_code(&e) == Some(403) => {
                    tracing::debug!(deployment = %name, "not readable, and not a slot of the config: skipped");
                    continue;
                }
                // RBAC written before shapes names the first Deployment only: the others
                // hold no room until it names them (the plan says so), and the pool's
                // reconcile, spot fallback included, goes on.
                Err(e) if slot > 0 && api_code(&e) == Some(403) => {
                    tracing::warn!(deployment = %name, "the functions' RBAC does not name it: no room placed there");
                    slots.push(SlotState::forbidden(slot));
                    continue;
                }
                Err(e) => return Err(kube_error(&format!("get Deployment {name}"), e)),
            };
            let Some(current) = current else { continue };
            slots.push(slot_state(pool, slot, &name, &current));
        }
        Ok(slots)
    }

    async fn set_headroom(
        &self,
        pool: &PoolConfig,
        slot: usize,
        shape: &PodShape,
        replicas: u32,
    ) -> Result<(), PortError> {
        let client = self.client("apply headroom").await?;
        self.ensure_priority_class(&client, pool).await?;
        let api: Api<Deployment> = Api::namespaced(client, &pool.headroom.namespace);
        let name = headroom::deployment_name(pool, slot);
        let operation = format!("apply Deployment {}/{name}", pool.headroom.namespace);
        let desired = headroom::deployment(pool, slot, shape, replicas);
        let current = api.get_opt(&name).await.map_err(|e| kube_error(&operation, e))?;
        if current.as_ref().is_some_and(|c| headroom::deployment_matches(c, &desired)) {
            return Ok(());
        }
        match api.patch(&name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&desired)).await {
            Ok(_) => Ok(()),
            Err(e) if api_code(&e) == Some(409) => {
                // Another manager (kubectl scale, an HPA, a GitOps tool) took fields of
                // Ballast's own Deployment; Ballast is its owner, so it takes them back.
                tracing::warn!(deployment = %name, conflict = %e, "taking back fields another manager changed");
                api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&desired))
                    .await
                    .map(|_| ())
                    .map_err(|e| kube_error(&operation, e))
            }
            Err(e) => Err(kube_error(&operation, e)),
        }
    }

    async fn pool_demand(&self, pool: &PoolConfig, now: DateTime<Utc>) -> Result<Option<Demand>, PortError> {
        let client = self.client("list pods").await?;
        let nodes = self.list_pool_nodes(&client, pool).await?;
        let Some(index) = self.matcher.index_of(&pool.name) else {
            return Err(PortError::new(
                ErrorKind::Permanent,
                "pool demand",
                format!("pool {} is not configured", pool.name),
            ));
        };
        let mut matcher = self.matcher.clone();
        matcher.learn_template(index, nodes.iter().filter_map(|n| n.metadata.labels.as_ref()));
        let names: HashSet<String> = nodes.into_iter().filter_map(|n| n.metadata.name).collect();
        let api: Api<Pod> = Api::all(client);
        let mut params = ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed").limit(PAGE);
        let mut demand = Demand { cpu_millis: 0, memory_bytes: 0, pods: 0, observed_at: now };
        loop {
            let page = api.list(&params).await.map_err(|e| kube_error("list pods", e))?;
            for pod in &page.items {
                if !pods::role(pod).is_demand() {
                    continue;
                }
                let Some(spec) = pod.spec.as_ref() else { continue };
                let in_pool = match pods::node_name(pod) {
                    Some(node) => names.contains(node),
                    None => matcher.pending_pod_pool(spec) == Some(index),
                };
                if !in_pool {
                    continue;
                }
                match pods::effective_requests(spec) {
                    Ok(r) => {
                        demand.cpu_millis += r.cpu_millis;
                        demand.memory_bytes += r.memory_bytes;
                        demand.pods += 1;
                    }
                    Err(e) => tracing::warn!(pod = %pod_label(pod), error = %e, "requests not counted"),
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(Some(demand)),
            }
        }
    }

    async fn cordon(&self, node: &str) -> Result<(), PortError> {
        self.set_unschedulable(node, true).await
    }

    async fn uncordon(&self, node: &str) -> Result<(), PortError> {
        self.set_unschedulable(node, false).await
    }

    async fn drain(&self, node: &str, timeout: Duration) -> Result<DrainReport, PortError> {
        let version = self.eviction_version().await?;
        let deadline = Instant::now() + timeout;
        let mut evicted = 0;
        loop {
            // Taken at each poll: a drain may outlast the EKS token it started with (EKS
            // refuses one 15 minutes after signing), and the connector renews it.
            let client = self.client("drain").await?;
            let pods: Vec<Pod> =
                self.pods_on_node(&client, node).await?.into_iter().filter(|p| pods::role(p).is_evictable()).collect();
            if pods.is_empty() {
                return Ok(DrainReport { evicted, blocked: Vec::new() });
            }
            let mut blocked = BTreeMap::new();
            for pod in &pods {
                let label = pod_label(pod);
                if pod.metadata.deletion_timestamp.is_some() {
                    let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or_default();
                    blocked.insert(label, format!("terminating (grace period {grace}s)"));
                    continue;
                }
                let left = deadline.saturating_duration_since(Instant::now()).as_secs() as i64;
                let own = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30);
                match self.evict(&client, version, pod, own.min(left).max(0)).await {
                    Ok(()) => {
                        evicted += 1;
                        blocked.insert(label, "evicted, terminating".to_string());
                    }
                    Err(e) if api_code(&e) == Some(404) => {}
                    Err(kube::Error::Api(status)) if status.code == 429 => {
                        blocked.insert(label, format!("a PodDisruptionBudget blocks the eviction: {}", status.message));
                    }
                    Err(e) => {
                        let error = kube_error(&format!("evict {label}"), e);
                        if !error.is_retryable() {
                            return Err(error);
                        }
                        blocked.insert(label, error.message);
                    }
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(DrainReport { evicted, blocked: blocked.into_iter().collect() });
            }
            tokio::time::sleep(self.drain_poll.min(deadline - now)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_ids_come_from_aws_provider_ids() {
        assert_eq!(instance_id("aws:///eu-west-1a/i-0a1b2c3d4e5f60001"), Some("i-0a1b2c3d4e5f60001"));
        assert_eq!(instance_id("aws:///eu-west-1a/"), None);
        assert_eq!(instance_id("gce://project/zone/name"), None);
    }

    #[test]
    fn a_node_s_allocatable_reads_as_a_shape_with_its_gpus() {
        let node: Node = serde_json::from_value(json!({
            "metadata": { "name": "gpu-1" },
            "spec": { "providerID": "aws:///eu-west-1a/i-0a1b2c3d4e5f60001" },
            "status": { "allocatable": { "cpu": "7910m", "memory": "31Gi", "nvidia.com/gpu": "4",
                                         "ephemeral-storage": "95Gi", "pods": "58" } },
        }))
        .unwrap();
        let mut want = PodShape::new(7910, 31 << 30);
        want.extended.insert("nvidia.com/gpu".into(), 4);
        assert_eq!(node_state(&node).unwrap().allocatable, Some(want));
        let bare: Node = serde_json::from_value(json!({ "metadata": { "name": "n" } })).unwrap();
        assert_eq!(allocatable(&bare), None);
    }

    #[test]
    fn eviction_body_names_delete_options_as_the_server_reads_them() {
        let body = eviction_body(EvictionVersion::V1, "shop", "web-1", 25);
        assert_eq!(body["apiVersion"], "policy/v1");
        assert_eq!(body["deleteOptions"]["gracePeriodSeconds"], 25);
        assert!(body.get("delete_options").is_none());
    }
}
