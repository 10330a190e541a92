//! Scenario files (`events/scenarios/*.yaml`): the pool, its workload, the spot
//! market, cluster-autoscaler's settings and Ballast's pool settings.

use std::collections::BTreeMap;

use ballast_core::config::{
    locate_path, plain_message, yaml_issue, Config, ConfigIssue, HeadroomShapes, ListedShape, PoolConfig, Toleration,
};
use ballast_core::shape::PodShape;
use ballast_core::units::HumanDuration;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::Deserialize;
use serde_yaml_ng::Value;

mod spec;
mod validate;

pub use spec::{
    pool_groups, Batch, CaSpec, CaVersion, CapacityLoss, Curve, Deployment, Group, InstanceType, InterruptionHandling,
    Market, NodeShape, NodeTiming, Placement, SchedulerSpec, Scoring, SpotSpec, StaticSpec, Storm, Taint,
};
use validate::validate;

/// The built-in default: one business day.
pub const DEFAULT_NAME: &str = "business-day";
pub const BUILT_IN: &[(&str, &str)] = &[
    ("business-day", include_str!("../../../events/scenarios/business-day.yaml")),
    ("steady", include_str!("../../../events/scenarios/steady.yaml")),
    ("spot-heavy", include_str!("../../../events/scenarios/spot-heavy.yaml")),
    ("no-spot", include_str!("../../../events/scenarios/no-spot.yaml")),
    ("large", include_str!("../../../events/scenarios/large.yaml")),
    ("batch-from-zero", include_str!("../../../events/scenarios/batch-from-zero.yaml")),
    ("ml-watermark", include_str!("../../../events/scenarios/ml-watermark.yaml")),
    ("priority-fallback", include_str!("../../../events/scenarios/priority-fallback.yaml")),
    ("two-pools", include_str!("../../../events/scenarios/two-pools.yaml")),
    ("week", include_str!("../../../events/scenarios/week.yaml")),
    ("ml-gpu", include_str!("../../../events/scenarios/ml-gpu.yaml")),
    ("mixed", include_str!("../../../events/scenarios/mixed.yaml")),
];

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// What is wrong and where, as a config's problems are told: the path, and with the
    /// text read, its line and column (YAML that does not parse is at `(file)`).
    #[error("{}{}", .0.position(), shown(.0))]
    Field(ConfigIssue),
    #[error("unknown built-in scenario `{0}`; built in: {names} (or give a file)", names = built_in_names())]
    Unknown(String),
}

/// `path: message`, or the message alone for the whole file.
fn shown(issue: &ConfigIssue) -> String {
    if issue.path.starts_with('(') {
        issue.message.clone()
    } else {
        issue.to_string()
    }
}

fn built_in_names() -> String {
    BUILT_IN.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ")
}

fn field(path: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Field(ConfigIssue::new(path, message))
}

/// A serde error reading the scenario, in the config's words (`plain_message`): what to
/// write, the nearest known key for an unknown one (its path ends with that key).
fn serde_field(error: serde_path_to_error::Error<serde_yaml_ng::Error>) -> ScenarioError {
    let path = error.path().to_string();
    let path = if path == "." { "(top level)".to_string() } else { path };
    field(path, plain_message(&error.inner().to_string()))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: String,
    #[serde(default)]
    description: String,
    start: DateTime<Utc>,
    duration: HumanDuration,
    #[serde(default = "utc")]
    time_zone: String,
    availability_zones: Vec<String>,
    instance_types: BTreeMap<String, RawInstanceType>,
    node_groups: Vec<RawGroup>,
    /// Pods every node runs (aws-node, kube-proxy…): their requests and pod count come
    /// off each node's allocatable and `max_pods`, and off CA's node templates.
    #[serde(default)]
    daemonsets: Vec<RawDaemonSet>,
    #[serde(default)]
    nodes: NodeTiming,
    #[serde(default)]
    scheduler: SchedulerSpec,
    workload: RawWorkload,
    #[serde(default)]
    spot: SpotSpec,
    #[serde(default)]
    cluster_autoscaler: CaSpec,
    #[serde(default)]
    static_overprovisioning: RawStatic,
    #[serde(default)]
    interruption_handling: InterruptionHandling,
    ballast: RawBallast,
}

fn utc() -> String {
    "UTC".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInstanceType {
    /// Allocatable CPU and memory (what pods can request).
    cpu: String,
    memory: String,
    on_demand_price: f64,
    spot_price: f64,
    /// Its `nvidia.com/gpu` devices (allocatable and capacity alike).
    #[serde(default)]
    gpu: u32,
    /// The type's vCPUs and memory as EC2 lists them: cluster-autoscaler's AWS provider
    /// builds a scale-from-zero template from these (allocatable = capacity). Absent:
    /// the allocatable figures.
    #[serde(default)]
    capacity: Option<RawCapacity>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCapacity {
    cpu: String,
    memory: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    name: String,
    market: Market,
    /// One type, or `instance_types`: a mixed-instances group (the first is CA's
    /// template; launches take the first with capacity in the AZ).
    #[serde(default)]
    instance_type: Option<String>,
    #[serde(default)]
    instance_types: Vec<String>,
    #[serde(default)]
    min: u32,
    max: u32,
    #[serde(default)]
    initial: u32,
    /// Node labels (what node selectors match).
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    taints: Vec<Taint>,
    /// Pods per node (EKS sets it from the ENIs of the type; 110 is kubelet's default).
    #[serde(default = "default_max_pods")]
    max_pods: u32,
    /// Whether the group is in one of Ballast's pools (`false`: a group only
    /// cluster-autoscaler manages, e.g. a stable on-demand group for other workloads).
    #[serde(default = "yes")]
    ballast: bool,
    /// Which of Ballast's pools (by name) the group is in; needed when there are several.
    #[serde(default)]
    pool: Option<String>,
    /// The ASG carries cluster-autoscaler's `node-template` tags (resources, labels,
    /// taints): its scale-from-zero template is then the real node's allocatable and
    /// `max_pods`; without them the AWS provider takes the instance type's capacity and
    /// 110 pods.
    #[serde(default)]
    node_template_tags: bool,
}

fn default_max_pods() -> u32 {
    110
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDaemonSet {
    name: String,
    cpu: String,
    memory: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    #[serde(default)]
    deployments: Vec<RawDeployment>,
    #[serde(default)]
    batch: Vec<RawBatch>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDeployment {
    name: String,
    cpu: String,
    memory: String,
    /// `nvidia.com/gpu` requested per pod.
    #[serde(default)]
    gpu: u32,
    min_replicas: u32,
    peak_replicas: u32,
    #[serde(default)]
    curve: Curve,
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    #[serde(default)]
    tolerations: Vec<Toleration>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBatch {
    name: String,
    /// Offsets from the start (`9h 30m`).
    at: Vec<HumanDuration>,
    /// Repeats the `at` offsets every this long (`1d`) until the end; absent: once.
    #[serde(default)]
    every: Option<HumanDuration>,
    jobs: u32,
    cpu: String,
    memory: String,
    /// `nvidia.com/gpu` requested per pod.
    #[serde(default)]
    gpu: u32,
    duration: [HumanDuration; 2],
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    #[serde(default)]
    tolerations: Vec<Toleration>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawStatic {
    replicas: RawReplicas,
    priority: i32,
}

impl Default for RawStatic {
    fn default() -> Self {
        RawStatic { replicas: RawReplicas::Each(0), priority: -10 }
    }
}

/// Static overprovisioning's replicas: one count for every pool, or one per pool name.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawReplicas {
    Each(u32),
    PerPool(BTreeMap<String, u32>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBallast {
    #[serde(default = "two_seconds")]
    delivery_delay: HumanDuration,
    /// A `ballast.yaml` pool without `spot_asgs` and `on_demand_asg` (they come from `node_groups`).
    #[serde(default)]
    pool: Value,
    /// Several such pools, each named; node groups say which they are in (`pool:`).
    #[serde(default)]
    pools: Option<Vec<Value>>,
}

fn two_seconds() -> HumanDuration {
    HumanDuration::from_secs(2)
}

/// A validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub start: DateTime<Utc>,
    pub duration: HumanDuration,
    pub time_zone: Tz,
    pub availability_zones: Vec<String>,
    pub instance_types: BTreeMap<String, InstanceType>,
    pub groups: Vec<Group>,
    /// The DaemonSets' requests and pods on every node.
    pub daemonset_cpu: u64,
    pub daemonset_mem: u64,
    pub daemonset_pods: u32,
    /// The distinct placements of the scenario's pods; `accepts[class][group]`: whether
    /// the group's nodes take that class. Class `p` (below the number of Ballast's pools)
    /// is pool `p`'s pause pods'.
    pub classes: Vec<Placement>,
    pub accepts: Vec<Vec<bool>>,
    /// `class_pool[class]`: the Ballast pool a pending pod of that class counts in, as
    /// the forwarder and the cluster adapter count it: the first pool, in config order,
    /// that it fits (here: with a group that takes it).
    pub class_pool: Vec<Option<usize>>,
    pub nodes: NodeTiming,
    pub scheduler: SchedulerSpec,
    pub deployments: Vec<Deployment>,
    pub batches: Vec<Batch>,
    pub spot: SpotSpec,
    pub ca: CaSpec,
    pub static_overprovisioning: StaticSpec,
    pub interruption_handling: InterruptionHandling,
    pub delivery_delay: HumanDuration,
    /// Ballast's config: the scenario's pools (one, named `sim` unless named).
    pub ballast: Config,
}

impl Scenario {
    pub fn built_in(name: &str) -> Result<Scenario, ScenarioError> {
        let text = BUILT_IN.iter().find(|(n, _)| *n == name).ok_or_else(|| ScenarioError::Unknown(name.into()))?.1;
        Scenario::from_yaml(text)
    }

    pub fn from_yaml(text: &str) -> Result<Scenario, ScenarioError> {
        let value: Value = serde_yaml_ng::from_str(text).map_err(|e| ScenarioError::Field(yaml_issue(text, &e)))?;
        let placed = |error: ScenarioError| match error {
            ScenarioError::Field(mut issue) if issue.line.is_none() => {
                if let Some((line, column)) = locate_path(text, &issue.path) {
                    (issue.line, issue.column) = (Some(line), Some(column));
                }
                ScenarioError::Field(issue)
            }
            other => other,
        };
        let raw: Raw = serde_path_to_error::deserialize(value).map_err(|e| placed(serde_field(e)))?;
        validate(raw).map_err(placed)
    }

    /// Ballast's config of the simulated pools, in order (a group's `pool` indexes it).
    pub fn pools(&self) -> &[PoolConfig] {
        &self.ballast.pools
    }

    /// The same, to change (`--sweep`).
    pub fn pools_mut(&mut self) -> &mut [PoolConfig] {
        &mut self.ballast.pools
    }

    /// The same scenario with other interruption handling for the runs without Ballast.
    pub fn with_interruption_handling(&self, handling: InterruptionHandling) -> Scenario {
        Scenario { interruption_handling: handling, ..self.clone() }
    }

    /// The same scenario with every pool's pause pods of one fixed shape (`headroom.shapes:
    /// fixed`, or the shape listed alone when it asks for extended resources), the static
    /// baseline's too: what a fixed pause-pod shape does, for comparison with learned
    /// shapes. `min` and `max` keep the room they bound, in pods of the new shape (`max`
    /// is what the headroom namespace's quota is written for); the static replicas count
    /// pods of the new shape.
    pub fn with_pause_pod(&self, shape: &PodShape) -> Scenario {
        let mut s = self.clone();
        for pool in s.pools_mut() {
            let headroom = &mut pool.headroom;
            let unit = headroom.unit_shape();
            headroom.max = pods_within(headroom.max, &unit, shape).max(1);
            let min = pods_within(headroom.min, &unit, shape);
            // A floor that was some room stays some room.
            headroom.min = if headroom.min > 0 { min.max(1) } else { 0 }.min(headroom.max);
            headroom.pod_cpu_millis = shape.cpu_millis;
            headroom.pod_memory_bytes = shape.memory_bytes;
            headroom.shapes = if shape.extended.is_empty() {
                HeadroomShapes::Fixed
            } else {
                HeadroomShapes::Listed(vec![ListedShape { name: "fixed".into(), shape: shape.clone() }])
            };
        }
        s
    }

    /// The distinct shapes of the workload pods Ballast's pools serve (Deployments and
    /// batches), smallest first: the fixed pause-pod shapes worth comparing.
    pub fn workload_shapes(&self) -> Vec<PodShape> {
        let deployments = self.deployments.iter().map(|d| (d.class, d.cpu_millis, d.memory_bytes, d.gpus));
        let batches = self.batches.iter().map(|b| (b.class, b.cpu_millis, b.memory_bytes, b.gpus));
        let shapes: std::collections::BTreeSet<PodShape> = deployments
            .chain(batches)
            .filter(|(class, ..)| self.class_pool[*class].is_some())
            .map(|(_, cpu, mem, gpus)| crate::bridge::shape_of(crate::cluster::Requests { cpu, mem, gpu: gpus }))
            .collect();
        shapes.into_iter().collect()
    }

    /// The same scenario with the scheduler picking nodes by `scoring`.
    pub fn with_scoring(&self, scoring: Scoring) -> Scenario {
        let mut s = self.clone();
        s.scheduler.scoring = scoring;
        s
    }

    /// A node of `instance_type` as workload pods see it (DaemonSets taken off).
    pub fn node_shape(&self, instance_type: &str, max_pods: u32) -> NodeShape {
        let it = &self.instance_types[instance_type];
        NodeShape {
            cpu: it.cpu_millis.saturating_sub(self.daemonset_cpu),
            mem: it.memory_bytes.saturating_sub(self.daemonset_mem),
            pods: max_pods.saturating_sub(self.daemonset_pods),
            gpus: it.gpus,
        }
    }

    pub fn end_ms(&self) -> u64 {
        self.duration.0.as_millis() as u64
    }

    /// The simulated days the run spans, the last one perhaps in part.
    pub fn days(&self) -> u64 {
        self.end_ms().div_ceil(crate::time::DAY)
    }

    /// The scenario's span run `times` in a row: its batches, spot capacity losses and
    /// storms come again each span (deployments follow the clock already), so a one-day
    /// scenario becomes a week of such days, with its weekend, for what learns from
    /// history. The first span counts like every other in the figures.
    pub fn repeated(&self, times: u32) -> Scenario {
        let span = self.duration.0;
        // Span by span, so that offsets stay in order.
        let again = |k: u32, at: HumanDuration| HumanDuration(at.0 + span * k);
        let mut out = self.clone();
        out.duration = HumanDuration(span * times.max(1));
        for (batch, given) in out.batches.iter_mut().zip(&self.batches) {
            batch.at = (0..times).flat_map(|k| given.at.iter().map(move |&at| again(k, at))).collect();
        }
        out.spot.capacity_losses = (0..times)
            .flat_map(|k| {
                self.spot.capacity_losses.iter().map(move |l| CapacityLoss { at: again(k, l.at), ..l.clone() })
            })
            .collect();
        out.spot.storms = (0..times)
            .flat_map(|k| self.spot.storms.iter().map(move |s| Storm { at: again(k, s.at), ..s.clone() }))
            .collect();
        out
    }
}

/// How many pods of `shape` fit in the room of `pods` pods of `unit`, by CPU and by
/// memory (rounded down): a bound in pods of one shape, read in another.
fn pods_within(pods: u32, unit: &PodShape, shape: &PodShape) -> u32 {
    let by = |room: u64, each: u64| room.checked_div(each).unwrap_or(u64::MAX);
    let cpu = by(u64::from(pods).saturating_mul(unit.cpu_millis), shape.cpu_millis);
    let memory = by(u64::from(pods).saturating_mul(unit.memory_bytes), shape.memory_bytes);
    u32::try_from(cpu.min(memory)).unwrap_or(u32::MAX)
}
