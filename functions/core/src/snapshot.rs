//! The state snapshot `ballast plan --state` reads: what Ballast would observe of a
//! deployment (its ASGs, the cluster's nodes, and per pool the record in the state
//! store, the demand and the headroom), as JSON. [`SnapshotPorts`] serves it to the
//! production `Reconciler` as its autoscaling, cluster and state-store ports, read-only.
//!
//! Every object rejects fields it does not know, naming the ones it takes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::config::{resolve_pool_asgs, AsgRef, PoolConfig};
use crate::observe::{AsgSize, Demand, LaunchedBy, NodeState, ObservedAsg};
use crate::plan::LifecycleRef;
use crate::ports::{Autoscaling, Cluster, DrainReport, ErrorKind, PortError, StateStore, Versioned};
use crate::record::PoolRecord;

/// A deployment as Ballast observes it at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Snapshot {
    /// The Auto Scaling groups, as DescribeAutoScalingGroups (and, for the spot ones,
    /// DescribeScalingActivities) gives them. Pools select theirs from these by name or
    /// tags, as against AWS.
    pub asgs: Vec<ObservedAsg>,
    /// The cluster's nodes (a pool's are those whose instance is in one of its ASGs).
    pub nodes: Vec<NodeState>,
    /// Per pool name: Ballast's record of it and what the cluster says of it.
    pub pools: BTreeMap<String, PoolSnapshot>,
}

/// One pool's state beside its ASGs and nodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolSnapshot {
    /// The pool record in the state store (absent: none stored yet).
    pub record: PoolRecord,
    /// The record's version in the state store (0: none stored yet).
    pub version: u64,
    /// What listing the pool's workload pods would sum to (absent: the listing finds
    /// none); read only when no fresh forwarder demand is in the record or the events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub demand: Option<Demand>,
    /// Replicas of the pool's first pause-pod Deployment, of `pod_cpu` / `pod_memory`
    /// pods (absent: it does not exist).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headroom_replicas: Option<u32>,
    /// The pool's pause-pod Deployments by slot, with their shapes (`headroom.shapes`);
    /// when given, `headroom_replicas` is not read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headroom: Vec<crate::shape::SlotState>,
}

/// A snapshot that does not parse, with where.
#[derive(Debug)]
pub struct SnapshotError {
    /// The JSON path of the offending value (`.` for the whole document).
    pub path: String,
    /// Why the value did not parse.
    pub source: serde_json::Error,
}

impl SnapshotError {
    /// What is wrong, in words (what to write, never a Rust type), without its place.
    pub fn message(&self) -> String {
        crate::json_errors::in_words(&self.source)
    }

    /// Where in the text it is, when known.
    pub fn position(&self) -> Option<crate::json_errors::JsonPosition> {
        crate::json_errors::position(&self.source)
    }
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message())?;
        match self.position() {
            Some(at) => write!(f, " (line {}, column {})", at.line, at.column),
            None => Ok(()),
        }
    }
}

impl std::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl Snapshot {
    /// Parses a snapshot; an error names the path of what is wrong.
    pub fn from_json(text: &str) -> Result<Snapshot, SnapshotError> {
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(text))
            .map_err(|e| SnapshotError { path: e.path().to_string(), source: e.into_inner() })
    }

    /// The snapshot's ASG named `name`.
    pub fn asg(&self, name: &str) -> Option<&ObservedAsg> {
        self.asgs.iter().find(|a| a.name == name)
    }
}

/// Resolves a pool's selectors against `asgs` (the shared rule,
/// [`resolve_pool_asgs`]); `operation` names the call in the error.
pub fn pool_asgs<'a>(
    asgs: &'a [ObservedAsg],
    pool: &PoolConfig,
    operation: &str,
) -> Result<(Vec<&'a ObservedAsg>, Option<&'a ObservedAsg>), PortError> {
    let resolved = resolve_pool_asgs(pool, asgs.iter().map(|a| AsgRef { name: &a.name, tags: &a.tags }))
        .map_err(|e| PortError::new(ErrorKind::Permanent, operation, e.to_string()))?;
    let by_name = |name: &str| asgs.iter().find(|a| a.name == name).expect("resolved from these ASGs");
    Ok((resolved.spot.into_iter().map(by_name).collect(), resolved.on_demand.map(by_name)))
}

/// The nodes whose instance is in one of `asgs`.
pub fn nodes_in<'a>(nodes: impl IntoIterator<Item = &'a NodeState>, asgs: &[&ObservedAsg]) -> Vec<NodeState> {
    let ids: BTreeSet<&str> = asgs.iter().flat_map(|a| a.instances.iter().map(|i| i.id.as_str())).collect();
    nodes.into_iter().filter(|n| ids.contains(n.instance_id.as_str())).cloned().collect()
}

/// A snapshot as the autoscaling, cluster and state-store ports: what `ballast plan`
/// observes. It only answers reads; a write is an error (planning never writes).
#[derive(Debug, Clone)]
pub struct SnapshotPorts(Arc<Snapshot>);

impl SnapshotPorts {
    /// Ports that answer from `snapshot`.
    pub fn new(snapshot: Snapshot) -> Self {
        SnapshotPorts(Arc::new(snapshot))
    }

    /// The snapshot the ports answer from.
    pub fn snapshot(&self) -> &Snapshot {
        &self.0
    }
}

fn read_only(operation: &str) -> PortError {
    PortError::new(
        ErrorKind::Permanent,
        operation,
        "a state snapshot is read-only: it is planned against, never changed",
    )
}

#[async_trait]
impl Autoscaling for SnapshotPorts {
    async fn describe_pool(&self, pool: &PoolConfig) -> Result<(Vec<ObservedAsg>, Option<ObservedAsg>), PortError> {
        let (spot, on_demand) = pool_asgs(&self.0.asgs, pool, "DescribeAutoScalingGroups")?;
        Ok((spot.into_iter().cloned().collect(), on_demand.cloned()))
    }

    async fn asgs_of_instances(&self, instance_ids: &[String]) -> Result<BTreeMap<String, String>, PortError> {
        Ok(asgs_of_instances(&self.0.asgs, instance_ids))
    }

    /// A snapshot holds what the ASGs list: an instance gone from them is unknown here.
    async fn launched_by(&self, instance_ids: &[String]) -> Result<BTreeMap<String, LaunchedBy>, PortError> {
        Ok(launched_by_listed(&self.0.asgs, instance_ids))
    }

    async fn asg_tags(&self, asgs: &[String]) -> Result<BTreeMap<String, BTreeMap<String, String>>, PortError> {
        Ok(asg_tags(&self.0.asgs, asgs))
    }

    async fn asg_size(&self, asg: &str) -> Result<AsgSize, PortError> {
        self.0.asg(asg).map(ObservedAsg::size).ok_or_else(|| {
            PortError::new(ErrorKind::Permanent, "DescribeAutoScalingGroups", format!("ASG {asg} not found"))
        })
    }

    async fn set_desired_capacity(&self, _asg: &str, _desired: u32) -> Result<(), PortError> {
        Err(read_only("SetDesiredCapacity"))
    }

    async fn terminate_instance(&self, _instance_id: &str, _decrement: bool) -> Result<(), PortError> {
        Err(read_only("TerminateInstanceInAutoScalingGroup"))
    }

    async fn record_lifecycle_heartbeat(&self, _action: &LifecycleRef) -> Result<(), PortError> {
        Err(read_only("RecordLifecycleActionHeartbeat"))
    }

    async fn complete_lifecycle_action(&self, _action: &LifecycleRef) -> Result<(), PortError> {
        Err(read_only("CompleteLifecycleAction"))
    }
}

#[async_trait]
impl Cluster for SnapshotPorts {
    async fn pool_nodes(&self, pool: &PoolConfig) -> Result<Vec<NodeState>, PortError> {
        let (mut asgs, on_demand) = pool_asgs(&self.0.asgs, pool, "list nodes")?;
        asgs.extend(on_demand);
        Ok(nodes_in(&self.0.nodes, &asgs))
    }

    async fn headroom(&self, pool: &PoolConfig) -> Result<Vec<crate::shape::SlotState>, PortError> {
        let Some(p) = self.0.pools.get(&pool.name) else { return Ok(Vec::new()) };
        if !p.headroom.is_empty() {
            return Ok(p.headroom.clone());
        }
        let first =
            |replicas| crate::shape::SlotState { slot: 0, shape: pool.headroom.unit_shape(), replicas: Some(replicas) };
        Ok(p.headroom_replicas.map(first).into_iter().collect())
    }

    async fn set_headroom(
        &self,
        _pool: &PoolConfig,
        _slot: usize,
        _shape: &crate::shape::PodShape,
        _replicas: u32,
    ) -> Result<(), PortError> {
        Err(read_only("apply Deployment"))
    }

    async fn pool_demand(&self, pool: &PoolConfig, _now: DateTime<Utc>) -> Result<Option<Demand>, PortError> {
        Ok(self.0.pools.get(&pool.name).and_then(|p| p.demand))
    }

    async fn cordon(&self, _node: &str) -> Result<(), PortError> {
        Err(read_only("cordon"))
    }

    async fn uncordon(&self, _node: &str) -> Result<(), PortError> {
        Err(read_only("uncordon"))
    }

    async fn drain(&self, _node: &str, _timeout: Duration) -> Result<DrainReport, PortError> {
        Err(read_only("drain"))
    }
}

#[async_trait]
impl StateStore for SnapshotPorts {
    async fn load(&self, pool: &str) -> Result<Versioned<PoolRecord>, PortError> {
        Ok(self
            .0
            .pools
            .get(pool)
            .map(|p| Versioned { value: p.record.clone(), version: p.version })
            .unwrap_or(Versioned { value: PoolRecord::default(), version: 0 }))
    }

    async fn save(&self, _pool: &str, _record: &PoolRecord, _expected: u64) -> Result<u64, PortError> {
        Err(read_only("PutItem"))
    }

    async fn acquire_lease(
        &self,
        _pool: &str,
        _owner: &str,
        _now: DateTime<Utc>,
        _ttl: Duration,
        _urgency: crate::ports::Urgency,
    ) -> Result<bool, PortError> {
        Err(read_only("UpdateItem"))
    }

    async fn release_lease(&self, _pool: &str, _owner: &str) -> Result<(), PortError> {
        Err(read_only("UpdateItem"))
    }

    /// Nothing was handled before the snapshot: every event is new.
    async fn seen(&self, _event_ids: &[String]) -> Result<BTreeSet<String>, PortError> {
        Ok(BTreeSet::new())
    }

    async fn mark_seen(&self, _event_ids: &[String], _expires_at: DateTime<Utc>) -> Result<(), PortError> {
        Err(read_only("BatchWriteItem"))
    }
}

/// The ASG each listed instance is in, among `asgs` (as DescribeAutoScalingInstances answers).
pub fn asgs_of_instances(asgs: &[ObservedAsg], instance_ids: &[String]) -> BTreeMap<String, String> {
    asgs.iter()
        .flat_map(|a| a.instances.iter().map(move |i| (i, a)))
        .filter(|(i, _)| instance_ids.contains(&i.id))
        .map(|(i, a)| (i.id.clone(), a.name.clone()))
        .collect()
}

/// What EC2 says of each listed instance among `ids`: the ASG listing it launched it.
pub fn launched_by_listed(asgs: &[ObservedAsg], instance_ids: &[String]) -> BTreeMap<String, LaunchedBy> {
    let launched = |(id, asg)| (id, LaunchedBy { asg: Some(asg), spot_reclaimed: false });
    asgs_of_instances(asgs, instance_ids).into_iter().map(launched).collect()
}

/// The tags of each named ASG found among `asgs` (as DescribeTags by ASG name answers).
pub fn asg_tags(asgs: &[ObservedAsg], names: &[String]) -> BTreeMap<String, BTreeMap<String, String>> {
    asgs.iter().filter(|a| names.contains(&a.name)).map(|a| (a.name.clone(), a.tags.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEADY: &str = include_str!("../../../events/states/steady.json");

    #[test]
    fn the_shipped_states_parse() {
        for text in [
            STEADY,
            include_str!("../../../events/states/spot-short.json"),
            include_str!("../../../events/states/in-fallback.json"),
        ] {
            let snapshot = Snapshot::from_json(text).expect("a shipped state parses");
            assert!(snapshot.asg("eks-general-on-demand").is_some());
            assert_eq!(snapshot.pools["general"].version, 7);
        }
    }

    #[test]
    fn an_unknown_field_is_named_with_its_path_and_the_fields_that_exist() {
        let err = Snapshot::from_json(r#"{"asgs": [], "calls": []}"#).unwrap_err();
        assert_eq!(err.path, "calls");
        let text = err.to_string();
        assert!(text.contains("unknown key `calls`; (this mapping takes `asgs`, `nodes`, `pools`)"), "{text}");

        let typo = STEADY.replacen(r#""ready": true"#, r#""ready": true, "unschedulabel": true"#, 1);
        let text = Snapshot::from_json(&typo).unwrap_err().to_string();
        assert!(
            text.starts_with("nodes[0].unschedulabel: unknown key `unschedulabel`; did you mean `unschedulable`? (this mapping takes `name`, `instance_id`, `ready`, `unschedulable`"),
            "{text}"
        );
        for test_only in ["evicted", "pods", "pdb_blocked_pods", "calls", "leases", "seen", "dead_letters"] {
            assert!(!text.contains(&format!("`{test_only}`")), "{text}");
        }

        let typo = STEADY.replacen(r#""version": 7"#, r#""versoin": 7"#, 1);
        let text = Snapshot::from_json(&typo).unwrap_err().to_string();
        assert!(
            text.starts_with(
                "pools.general.versoin: unknown key `versoin`; did you mean `version`? (this mapping takes `record`, `version`, `demand`, `headroom_replicas`"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_value_out_of_range_says_what_to_write_and_where() {
        let err = Snapshot::from_json("{\"asgs\": [{\"name\": \"a\", \"desired\": -1}]}").unwrap_err();
        let text = err.to_string();
        assert_eq!(
            text,
            "asgs[0].desired: the number `-1` is out of range: expected a whole number, 0 or more (e.g. `10`) \
             (line 1, column 37)"
        );
        assert!(!text.contains("u32") && !text.contains("invalid value"), "{text}");
    }

    #[tokio::test]
    async fn pools_resolve_with_the_shared_rule_and_writes_are_refused() {
        let config = crate::config::Config::from_yaml(include_str!("../../../ballast.example.yaml")).unwrap();
        let ports = SnapshotPorts::new(Snapshot::from_json(STEADY).unwrap());
        let general = config.pool("general").unwrap();
        let (spot, on_demand) = ports.describe_pool(general).await.unwrap();
        let names: Vec<&str> = spot.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["eks-general-spot-m6", "eks-general-spot-fallback"]);
        assert_eq!(on_demand.unwrap().name, "eks-general-on-demand");
        assert_eq!(ports.pool_nodes(general).await.unwrap().len(), 6);
        let err = ports.set_desired_capacity("eks-general-spot-m6", 5).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Permanent);
        assert_eq!(ports.asg_size("eks-general-spot-m6").await.unwrap().desired, 4);
    }

    /// The simulator leaves instances' zones and types empty (they cost it a third of
    /// its time): the plans must not depend on them.
    #[tokio::test]
    async fn plans_do_not_depend_on_instance_zones_or_types() {
        use crate::ports::FixedClock;
        use crate::reconcile::Reconciler;
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let config = crate::config::Config::from_yaml(include_str!("../../../ballast.example.yaml")).unwrap();
        let origin = config.origin();
        let mut events = Vec::new();
        for entry in std::fs::read_dir(root.join("events")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                if let Ok(event) = crate::event::parse_event(&std::fs::read(&path).unwrap(), Some(&origin)) {
                    events.push(event);
                }
            }
        }
        assert!(events.len() > 20, "the shipped events: {}", events.len());
        let plans = |snapshot: Snapshot, event: crate::event::Event| {
            let ports = SnapshotPorts::new(snapshot);
            let reconciler = Reconciler {
                config: Arc::new(config.clone()),
                autoscaling: ports.clone(),
                cluster: ports.clone(),
                store: ports,
                clock: FixedClock::new(event.time),
                owner: "test".into(),
            };
            async move { serde_json::to_value(reconciler.plan_only(vec![event]).await.unwrap().0).unwrap() }
        };
        let mut planned = 0;
        for state in ["steady.json", "spot-short.json", "in-fallback.json"] {
            let snapshot =
                Snapshot::from_json(&std::fs::read_to_string(root.join("events/states").join(state)).unwrap()).unwrap();
            let mut blank = snapshot.clone();
            for instance in blank.asgs.iter_mut().flat_map(|a| a.instances.iter_mut()) {
                instance.availability_zone.clear();
                instance.instance_type.clear();
            }
            for event in &events {
                let with = plans(snapshot.clone(), event.clone()).await;
                let without = plans(blank.clone(), event.clone()).await;
                assert_eq!(with, without, "{state} {}", event.detail_type);
                planned += with.as_array().map_or(0, Vec::len);
            }
        }
        assert!(planned > 50, "{planned} plans compared");
    }
}
