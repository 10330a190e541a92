//! Scenario files (`events/scenarios/*.yaml`): the pool, its workload, the spot
//! market, cluster-autoscaler's settings and Ballast's pool settings.

use std::collections::BTreeMap;

use ballast_core::config::{Config, PoolConfig, TaintEffect, Toleration, TolerationOperator};
use ballast_core::units::{parse_cpu_millis, parse_memory_bytes, HumanDuration};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::Deserialize;
use serde_yaml_ng::Value;

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
];

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("not valid YAML: {0}")]
    Yaml(#[source] serde_yaml_ng::Error),
    #[error("{path}: {message}")]
    Field { path: String, message: String },
    #[error("unknown built-in scenario `{0}`; built in: {names} (or give a file)", names = built_in_names())]
    Unknown(String),
}

fn built_in_names() -> String {
    BUILT_IN.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ")
}

fn field(path: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Field { path: path.into(), message: message.into() }
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

/// A node taint, as on the Node object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    #[serde(default)]
    pub value: Option<String>,
    pub effect: TaintEffect,
}

/// Where a pod may run: the node selector and tolerations of its spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
}

impl Placement {
    /// The scheduler's rule: every selector label on the node, every taint that keeps
    /// pods off (NoSchedule, NoExecute) tolerated.
    pub fn fits(&self, labels: &BTreeMap<String, String>, taints: &[Taint]) -> bool {
        self.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            && taints
                .iter()
                .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
                .all(|taint| self.tolerations.iter().any(|t| tolerates(t, taint)))
    }
}

/// Kubernetes' `Toleration.ToleratesTaint`.
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if t.effect.is_some_and(|e| e != taint.effect) {
        return false;
    }
    match (&t.key, t.operator) {
        (None, Some(TolerationOperator::Exists)) => true,
        (Some(key), Some(TolerationOperator::Exists)) => *key == taint.key,
        (Some(key), _) => *key == taint.key && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        (None, _) => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Market {
    Spot,
    OnDemand,
}

/// How long kube-scheduler takes: binding is not instant, and a pod that preempts
/// pause pods waits for them to terminate before it is bound.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerSpec {
    /// From a change (a pod created, room freed) to the pass that binds what now fits.
    pub cycle: HumanDuration,
    /// From choosing victims to binding the preemptor on the room they left: their
    /// deletion, the kubelet stopping them, the preemptor's retry.
    pub preemption: HumanDuration,
}

impl Default for SchedulerSpec {
    fn default() -> Self {
        SchedulerSpec {
            cycle: HumanDuration(std::time::Duration::from_millis(200)),
            preemption: HumanDuration::from_secs(2),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeTiming {
    /// Launch to kubelet Ready, drawn uniformly.
    pub boot: [HumanDuration; 2],
    /// Extra time for the VPC CNI to attach an ENI, drawn uniformly.
    pub network_attach: [HumanDuration; 2],
}

impl Default for NodeTiming {
    fn default() -> Self {
        NodeTiming {
            boot: [HumanDuration::from_secs(40), HumanDuration::from_secs(50)],
            network_attach: [HumanDuration::from_secs(0), HumanDuration::from_secs(60)],
        }
    }
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
    min_replicas: u32,
    peak_replicas: u32,
    #[serde(default)]
    curve: Curve,
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    #[serde(default)]
    tolerations: Vec<Toleration>,
}

/// How a deployment's replicas follow the local time of day.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Curve {
    /// Night at min; ramp 07:00–09:00; peak until 17:00; down by 20:00; weekends at min.
    #[default]
    Business,
    /// Always at peak.
    Flat,
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
    duration: [HumanDuration; 2],
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    #[serde(default)]
    tolerations: Vec<Toleration>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SpotSpec {
    /// Background interruption probability per spot node and hour.
    pub interruptions_per_node_hour: f64,
    /// Share of interruptions preceded by a rebalance recommendation.
    pub rebalance_fraction: f64,
    pub rebalance_lead: [HumanDuration; 2],
    /// Rebalance recommendations per spot node and hour that no interruption follows
    /// (AWS sends them on elevated risk, not only before interruptions).
    pub false_rebalances_per_node_hour: f64,
    pub capacity_losses: Vec<CapacityLoss>,
    pub storms: Vec<Storm>,
}

impl Default for SpotSpec {
    fn default() -> Self {
        SpotSpec {
            interruptions_per_node_hour: 0.002,
            rebalance_fraction: 0.5,
            rebalance_lead: [HumanDuration::from_secs(600), HumanDuration::from_secs(1200)],
            // As many as real interruptions: an assumption, set per scenario.
            false_rebalances_per_node_hour: 0.002,
            capacity_losses: Vec::new(),
            storms: Vec::new(),
        }
    }
}

/// No spot capacity of a type (in one AZ, or all) for a while.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacityLoss {
    pub instance_type: String,
    #[serde(default)]
    pub availability_zone: Option<String>,
    pub at: HumanDuration,
    #[serde(rename = "for")]
    pub duration: HumanDuration,
}

/// A share of the spot nodes (of a type, or all) interrupted within a window.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Storm {
    #[serde(default)]
    pub instance_type: Option<String>,
    pub at: HumanDuration,
    #[serde(rename = "for")]
    pub duration: HumanDuration,
    pub fraction: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CaSpec {
    /// The cluster-autoscaler release modelled: how backoff is reset depends on it.
    pub version: CaVersion,
    pub scan_interval: HumanDuration,
    /// The AWS provider's fail-fast (1.24 and later): at each ASG cache refresh, a failed
    /// scaling activity since CA's last write to the ASG marks its missing instances
    /// unfulfillable, and CA gives the scale-up up. Without it, only after
    /// `max_node_provision_time`.
    pub fail_fast: bool,
    /// How often the AWS provider refreshes its ASG cache (its `refreshInterval`, 1 min).
    pub asg_cache_refresh: HumanDuration,
    pub max_node_provision_time: HumanDuration,
    pub backoff_initial: HumanDuration,
    pub backoff_max: HumanDuration,
    /// `--node-group-backoff-reset-timeout`: from 1.30 the only way a backoff resets.
    pub backoff_reset_timeout: HumanDuration,
    /// The priority expander's ConfigMap: priority → regexes matched against node group
    /// names. The highest matching priority wins, ties at random; a group no regex
    /// matches is never used. Absent: spot groups at 50, on-demand at 10.
    pub priorities: Option<BTreeMap<i32, Vec<String>>>,
    pub scale_down_utilization: f64,
    pub scale_down_unneeded: HumanDuration,
    pub scale_down_delay_after_add: HumanDuration,
    pub expendable_cutoff: i32,
}

impl Default for CaSpec {
    fn default() -> Self {
        CaSpec {
            version: CaVersion { major: 1, minor: 30 },
            scan_interval: HumanDuration::from_secs(10),
            fail_fast: true,
            asg_cache_refresh: HumanDuration::from_secs(60),
            max_node_provision_time: HumanDuration::from_secs(900),
            backoff_initial: HumanDuration::from_secs(300),
            backoff_max: HumanDuration::from_secs(1800),
            backoff_reset_timeout: HumanDuration::from_secs(3 * 3600),
            priorities: None,
            scale_down_utilization: 0.5,
            scale_down_unneeded: HumanDuration::from_secs(600),
            scale_down_delay_after_add: HumanDuration::from_secs(600),
            expendable_cutoff: -10,
        }
    }
}

/// A cluster-autoscaler minor release, written as a quoted string (`"1.29"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CaVersion {
    pub major: u32,
    pub minor: u32,
}

impl CaVersion {
    /// Before 1.30 a successful scale-up of a group removed its backoff.
    pub fn resets_backoff_on_success(self) -> bool {
        self < CaVersion { major: 1, minor: 30 }
    }
}

impl std::fmt::Display for CaVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl<'de> Deserialize<'de> for CaVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match Value::deserialize(d)? {
            Value::String(text) => {
                let parsed = text.trim_start_matches('v').split_once('.').and_then(|(major, rest)| {
                    let minor = rest.split('.').next()?;
                    Some(CaVersion { major: major.parse().ok()?, minor: minor.parse().ok()? })
                });
                parsed.ok_or_else(|| D::Error::custom(format!("`{text}` is not a version like \"1.30\"")))
            }
            Value::Number(n) => Err(D::Error::custom(format!(
                "write the version quoted (\"1.30\"): as a number, {n} loses its trailing zeros"
            ))),
            _ => Err(D::Error::custom("expected a version like \"1.30\"")),
        }
    }
}

/// What acts on spot interruption signals in the runs without Ballast (CA alone and CA
/// with static overprovisioning); a Ballast run handles them itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InterruptionHandling {
    /// aws-node-termination-handler in queue-processor mode: EventBridge → SQS → NTH,
    /// which cordons and drains the node on its rebalance recommendation and on its
    /// interruption warning.
    #[default]
    NodeTerminationHandler,
    /// EKS managed node groups: the ASG's Capacity Rebalancing launches a replacement on
    /// a rebalance recommendation; once the replacement is Ready, EKS cordons and drains
    /// the old node and it is terminated. A warning before then drains it at once. A
    /// warning with no recommendation before it is not acted on.
    CapacityRebalance,
    /// Nothing: pods go when the node is reclaimed.
    None,
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

/// The static-overprovisioning baseline: a fixed pause-pod Deployment in each pool.
#[derive(Debug, Clone)]
pub struct StaticSpec {
    /// Fixed pause pods per pool, in the order of `Scenario::ballast.pools` (the same
    /// size as that pool's Ballast pause pods).
    pub replicas: Vec<u32>,
    /// Their priority; below cluster-autoscaler's cutoff (-10) they never bring a node.
    pub priority: i32,
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

#[derive(Debug, Clone)]
pub struct InstanceType {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    /// As EC2 lists the type (what CA's untagged template assumes).
    pub capacity_cpu_millis: u64,
    pub capacity_memory_bytes: u64,
    pub on_demand_price: f64,
    pub spot_price: f64,
}

#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    pub market: Market,
    /// In preference order; the first is cluster-autoscaler's template.
    pub instance_types: Vec<String>,
    pub min: u32,
    pub max: u32,
    pub initial: u32,
    /// Its priority in cluster-autoscaler's priority expander; `None`: never used.
    pub expander_priority: Option<i32>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub max_pods: u32,
    /// The Ballast pool it is in (an index into `Scenario::ballast.pools`).
    pub pool: Option<usize>,
    /// Carries CA's node-template tags (see `RawGroup::node_template_tags`).
    pub template_tagged: bool,
}

impl Group {
    /// What CA's template node for this group offers when it has no node to copy: the
    /// AWS provider's node built from the first instance type (`buildNodeFromTemplate`:
    /// the type's capacity as allocatable and 110 pods, unless the ASG's node-template
    /// tags say what the nodes really offer), less the DaemonSets' requests and pods.
    pub fn template(&self, sc: &Scenario) -> NodeShape {
        if self.template_tagged {
            return sc.node_shape(&self.instance_types[0], self.max_pods);
        }
        let it = &sc.instance_types[&self.instance_types[0]];
        NodeShape {
            cpu: it.capacity_cpu_millis.saturating_sub(sc.daemonset_cpu),
            mem: it.capacity_memory_bytes.saturating_sub(sc.daemonset_mem),
            pods: 110u32.saturating_sub(sc.daemonset_pods),
        }
    }
}

impl Group {
    pub fn in_pool(&self) -> bool {
        self.pool.is_some()
    }
}

/// The groups of Ballast's pool `pool` in `market`, with their indexes.
pub fn pool_groups(groups: &[Group], pool: usize, market: Market) -> impl Iterator<Item = (usize, &Group)> {
    groups.iter().enumerate().filter(move |(_, g)| g.pool == Some(pool) && g.market == market)
}

/// What a node offers to workload pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeShape {
    pub cpu: u64,
    pub mem: u64,
    pub pods: u32,
}

#[derive(Debug, Clone)]
pub struct Deployment {
    pub name: String,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub min_replicas: u32,
    pub peak_replicas: u32,
    pub curve: Curve,
    /// Its index in `Scenario::classes`.
    pub class: usize,
}

#[derive(Debug, Clone)]
pub struct Batch {
    pub name: String,
    /// When its jobs are created, from the start: the `at` offsets, repeated `every`
    /// period until the end of the run.
    pub at: Vec<HumanDuration>,
    pub jobs: u32,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub duration: [HumanDuration; 2],
    pub class: usize,
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
        let value: Value = serde_yaml_ng::from_str(text).map_err(ScenarioError::Yaml)?;
        let raw: Raw =
            serde_path_to_error::deserialize(value).map_err(|e| field(e.path().to_string(), e.inner().to_string()))?;
        validate(raw)
    }

    /// Ballast's config of the simulated pools, in order (a group's `pool` indexes it).
    pub fn pools(&self) -> &[PoolConfig] {
        &self.ballast.pools
    }

    /// The same, to change (`--sweep`).
    pub fn pools_mut(&mut self) -> &mut [PoolConfig] {
        &mut self.ballast.pools
    }

    /// A node of `instance_type` as workload pods see it (DaemonSets taken off).
    pub fn node_shape(&self, instance_type: &str, max_pods: u32) -> NodeShape {
        let it = &self.instance_types[instance_type];
        NodeShape {
            cpu: it.cpu_millis.saturating_sub(self.daemonset_cpu),
            mem: it.memory_bytes.saturating_sub(self.daemonset_mem),
            pods: max_pods.saturating_sub(self.daemonset_pods),
        }
    }

    pub fn end_ms(&self) -> u64 {
        self.duration.0.as_millis() as u64
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

fn quantity(
    parse: fn(&str) -> Result<u64, ballast_core::units::QuantityError>,
    text: &str,
    path: String,
) -> Result<u64, ScenarioError> {
    match parse(text) {
        Ok(0) => Err(field(path, "must be more than zero")),
        Ok(v) => Ok(v),
        Err(e) => Err(field(path, e.to_string())),
    }
}

fn range(r: &[HumanDuration; 2], path: &str) -> Result<(), ScenarioError> {
    if r[0] > r[1] {
        return Err(field(path, format!("the range {}..{} is reversed", r[0], r[1])));
    }
    Ok(())
}

fn validate(raw: Raw) -> Result<Scenario, ScenarioError> {
    let raw_pools = RawPools::new(&raw.ballast)?;
    let pool_names = raw_pools.names()?;
    let time_zone: Tz = raw
        .time_zone
        .parse()
        .map_err(|_| field("time_zone", format!("`{}` is not an IANA time zone", raw.time_zone)))?;
    if raw.duration.0.is_zero() {
        return Err(field("duration", "must be longer than zero"));
    }
    if raw.availability_zones.is_empty() {
        return Err(field("availability_zones", "list at least one"));
    }
    let mut instance_types = BTreeMap::new();
    for (name, t) in &raw.instance_types {
        let path = format!("instance_types.{name}");
        if t.on_demand_price < 0.0 || t.spot_price < 0.0 {
            return Err(field(&path, "prices must not be negative"));
        }
        let cpu_millis = quantity(parse_cpu_millis, &t.cpu, format!("{path}.cpu"))?;
        let memory_bytes = quantity(parse_memory_bytes, &t.memory, format!("{path}.memory"))?;
        let (capacity_cpu_millis, capacity_memory_bytes) = match &t.capacity {
            Some(c) => (
                quantity(parse_cpu_millis, &c.cpu, format!("{path}.capacity.cpu"))?,
                quantity(parse_memory_bytes, &c.memory, format!("{path}.capacity.memory"))?,
            ),
            None => (cpu_millis, memory_bytes),
        };
        if capacity_cpu_millis < cpu_millis || capacity_memory_bytes < memory_bytes {
            return Err(field(format!("{path}.capacity"), "is less than the allocatable cpu or memory"));
        }
        instance_types.insert(
            name.clone(),
            InstanceType {
                cpu_millis,
                memory_bytes,
                capacity_cpu_millis,
                capacity_memory_bytes,
                on_demand_price: t.on_demand_price,
                spot_price: t.spot_price,
            },
        );
    }
    let mut groups = Vec::new();
    for (i, g) in raw.node_groups.iter().enumerate() {
        let path = format!("node_groups[{i}]");
        let types: Vec<String> = match (&g.instance_type, g.instance_types.is_empty()) {
            (Some(one), true) => vec![one.clone()],
            (None, false) => g.instance_types.clone(),
            (Some(_), false) => {
                return Err(field(&path, "give instance_type or instance_types (a mixed-instances group), not both"))
            }
            (None, true) => return Err(field(&path, "needs instance_type or instance_types")),
        };
        for (t, name) in types.iter().enumerate() {
            if !instance_types.contains_key(name) {
                let at =
                    if g.instance_type.is_some() { "instance_type".into() } else { format!("instance_types[{t}]") };
                return Err(field(format!("{path}.{at}"), format!("`{name}` is not in instance_types")));
            }
        }
        if g.max_pods == 0 {
            return Err(field(format!("{path}.max_pods"), "must be more than zero"));
        }
        if g.min > g.max || g.initial > g.max || g.initial < g.min {
            return Err(field(&path, format!("need min <= initial <= max, got {} / {} / {}", g.min, g.initial, g.max)));
        }
        if groups.iter().any(|o: &Group| o.name == g.name) {
            return Err(field(format!("{path}.name"), format!("duplicate group `{}`", g.name)));
        }
        let pool = group_pool(g, &pool_names, &path)?;
        groups.push(Group {
            name: g.name.clone(),
            market: g.market,
            instance_types: types,
            min: g.min,
            max: g.max,
            initial: g.initial,
            expander_priority: None,
            labels: g.labels.clone(),
            taints: g.taints.clone(),
            max_pods: g.max_pods,
            pool,
            template_tagged: g.node_template_tags,
        });
    }
    expander_priorities(&raw.cluster_autoscaler, &mut groups)?;
    for (p, name) in pool_names.iter().enumerate() {
        if pool_groups(&groups, p, Market::OnDemand).count() > 1 {
            return Err(field(
                "node_groups",
                format!("Ballast's pool `{name}` takes at most one on-demand group (mark others `ballast: false`)"),
            ));
        }
        if pool_groups(&groups, p, Market::Spot).next().is_none() {
            return Err(field("node_groups", format!("need at least one spot group in Ballast's pool `{name}`")));
        }
    }
    let (mut daemonset_cpu, mut daemonset_mem) = (0, 0);
    for (i, d) in raw.daemonsets.iter().enumerate() {
        let path = format!("daemonsets[{i}]");
        daemonset_cpu += parse_cpu_millis(&d.cpu).map_err(|e| field(format!("{path}.cpu"), e.to_string()))?;
        daemonset_mem += parse_memory_bytes(&d.memory).map_err(|e| field(format!("{path}.memory"), e.to_string()))?;
        if raw.daemonsets[..i].iter().any(|o| o.name == d.name) {
            return Err(field(format!("{path}.name"), format!("duplicate DaemonSet `{}`", d.name)));
        }
    }
    let daemonset_pods = raw.daemonsets.len() as u32;
    for (i, g) in groups.iter().enumerate() {
        for t in &g.instance_types {
            let it = &instance_types[t];
            if it.cpu_millis <= daemonset_cpu || it.memory_bytes <= daemonset_mem || g.max_pods <= daemonset_pods {
                return Err(field(
                    format!("node_groups[{i}]"),
                    format!("the DaemonSets leave nothing of a {t} (or of its max_pods) for other pods"),
                ));
            }
        }
    }
    // The first classes are the pools' pause pods', set once Ballast's pools are known.
    let pause_classes = pool_names.len();
    let mut classes = vec![Placement::default(); pause_classes];
    let mut class_of = |node_selector: &BTreeMap<String, String>, tolerations: &[Toleration], path: String| {
        let placement = Placement { node_selector: node_selector.clone(), tolerations: tolerations.to_vec() };
        if !groups.iter().any(|g| placement.fits(&g.labels, &g.taints)) {
            return Err(field(path, "fits no node group (node selector or taints): its pods would never run"));
        }
        Ok(match classes.iter().skip(pause_classes).position(|c| *c == placement) {
            Some(k) => k + pause_classes,
            None => {
                classes.push(placement);
                classes.len() - 1
            }
        })
    };
    let mut deployments = Vec::new();
    for (i, d) in raw.workload.deployments.iter().enumerate() {
        let path = format!("workload.deployments[{i}]");
        if d.min_replicas > d.peak_replicas {
            return Err(field(&path, "min_replicas is above peak_replicas"));
        }
        deployments.push(Deployment {
            name: d.name.clone(),
            cpu_millis: quantity(parse_cpu_millis, &d.cpu, format!("{path}.cpu"))?,
            memory_bytes: quantity(parse_memory_bytes, &d.memory, format!("{path}.memory"))?,
            min_replicas: d.min_replicas,
            peak_replicas: d.peak_replicas,
            curve: d.curve,
            class: class_of(&d.node_selector, &d.tolerations, path)?,
        });
    }
    let mut batches = Vec::new();
    for (i, b) in raw.workload.batch.iter().enumerate() {
        let path = format!("workload.batch[{i}]");
        range(&b.duration, &format!("{path}.duration"))?;
        let mut at = b.at.clone();
        if let Some(every) = b.every {
            if every.0.is_zero() {
                return Err(field(format!("{path}.every"), "must be longer than zero"));
            }
            if let Some(late) = b.at.iter().find(|a| a.0 >= every.0) {
                return Err(field(
                    format!("{path}.at"),
                    format!("{late} is not within one period (`every: {every}`): give offsets inside the period"),
                ));
            }
            let mut period = every.0;
            while period < raw.duration.0 {
                at.extend(b.at.iter().map(|a| HumanDuration(a.0 + period)));
                period += every.0;
            }
            at.retain(|a| a.0 < raw.duration.0);
        }
        batches.push(Batch {
            name: b.name.clone(),
            at,
            jobs: b.jobs,
            cpu_millis: quantity(parse_cpu_millis, &b.cpu, format!("{path}.cpu"))?,
            memory_bytes: quantity(parse_memory_bytes, &b.memory, format!("{path}.memory"))?,
            duration: b.duration,
            class: class_of(&b.node_selector, &b.tolerations, path)?,
        });
    }
    range(&raw.nodes.boot, "nodes.boot")?;
    range(&raw.nodes.network_attach, "nodes.network_attach")?;
    range(&raw.spot.rebalance_lead, "spot.rebalance_lead")?;
    if !(0.0..=1.0).contains(&raw.spot.rebalance_fraction) {
        return Err(field("spot.rebalance_fraction", "must be between 0 and 1"));
    }
    if raw.spot.false_rebalances_per_node_hour < 0.0 {
        return Err(field("spot.false_rebalances_per_node_hour", "must not be negative"));
    }
    if raw.spot.interruptions_per_node_hour < 0.0 {
        return Err(field("spot.interruptions_per_node_hour", "must not be negative"));
    }
    for (i, loss) in raw.spot.capacity_losses.iter().enumerate() {
        if !instance_types.contains_key(&loss.instance_type) {
            return Err(field(
                format!("spot.capacity_losses[{i}].instance_type"),
                format!("`{}` is not in instance_types", loss.instance_type),
            ));
        }
        if let Some(az) = &loss.availability_zone {
            if !raw.availability_zones.contains(az) {
                return Err(field(
                    format!("spot.capacity_losses[{i}].availability_zone"),
                    format!("`{az}` is not in availability_zones"),
                ));
            }
        }
    }
    for (i, storm) in raw.spot.storms.iter().enumerate() {
        if !(0.0..=1.0).contains(&storm.fraction) {
            return Err(field(format!("spot.storms[{i}].fraction"), "must be between 0 and 1"));
        }
    }
    let ballast = ballast_config(&raw_pools, &groups)?;
    for (p, pool) in ballast.pools.iter().enumerate() {
        classes[p] = Placement { node_selector: pool.node_selector.clone(), tolerations: pool.tolerations.clone() };
        if !groups.iter().any(|g| g.pool == Some(p) && classes[p].fits(&g.labels, &g.taints)) {
            return Err(field(
                raw_pools.path(p),
                "its pause pods (node_selector, tolerations) fit none of the pool's node groups",
            ));
        }
        // Headroom held on another pool's nodes (or a group Ballast does not manage) is
        // headroom the pool does not have.
        if let Some(other) = groups.iter().find(|g| g.pool != Some(p) && classes[p].fits(&g.labels, &g.taints)) {
            let whose = match other.pool {
                Some(o) => format!("of pool `{}`", pool_names[o]),
                None => "outside Ballast's pools".into(),
            };
            return Err(field(
                raw_pools.path(p),
                format!(
                    "its pause pods (node_selector, tolerations) also fit node group `{}` {whose}: give the pool a node_selector only its groups' labels match",
                    other.name
                ),
            ));
        }
    }
    let static_overprovisioning = static_spec(raw.static_overprovisioning, &pool_names)?;
    let accepts: Vec<Vec<bool>> =
        classes.iter().map(|c| groups.iter().map(|g| c.fits(&g.labels, &g.taints)).collect()).collect();
    let class_pool = accepts
        .iter()
        .map(|takes| (0..pool_names.len()).find(|&p| groups.iter().zip(takes).any(|(g, &t)| t && g.pool == Some(p))))
        .collect();
    Ok(Scenario {
        name: raw.name,
        description: raw.description,
        start: raw.start,
        duration: raw.duration,
        time_zone,
        availability_zones: raw.availability_zones,
        instance_types,
        groups,
        daemonset_cpu,
        daemonset_mem,
        daemonset_pods,
        classes,
        accepts,
        class_pool,
        nodes: raw.nodes,
        scheduler: raw.scheduler,
        deployments,
        batches,
        spot: raw.spot,
        ca: raw.cluster_autoscaler,
        static_overprovisioning,
        interruption_handling: raw.interruption_handling,
        delivery_delay: raw.ballast.delivery_delay,
        ballast,
    })
}

/// Each group's priority as CA's priority expander matches it: the highest priority
/// with a regex found in the group's name (Go's `regexp.MatchString`: unanchored).
fn expander_priorities(ca: &CaSpec, groups: &mut [Group]) -> Result<(), ScenarioError> {
    let Some(priorities) = &ca.priorities else {
        for g in groups.iter_mut() {
            g.expander_priority = Some(if g.market == Market::Spot { 50 } else { 10 });
        }
        return Ok(());
    };
    for (priority, patterns) in priorities.iter().rev() {
        for (i, pattern) in patterns.iter().enumerate() {
            let regex = regex_lite::Regex::new(pattern)
                .map_err(|e| field(format!("cluster_autoscaler.priorities.{priority}[{i}]"), e.to_string()))?;
            for g in groups.iter_mut().filter(|g| g.expander_priority.is_none() && regex.is_match(&g.name)) {
                g.expander_priority = Some(*priority);
            }
        }
    }
    if groups.iter().all(|g| g.expander_priority.is_none()) {
        return Err(field(
            "cluster_autoscaler.priorities",
            "no node group matches: cluster-autoscaler would never scale up",
        ));
    }
    Ok(())
}

/// Ballast's pool settings as the scenario gives them: `ballast.pool` (one pool) or
/// `ballast.pools` (several, each named).
struct RawPools {
    pools: Vec<Value>,
    /// Given as the list `ballast.pools`.
    listed: bool,
}

impl RawPools {
    fn new(raw: &RawBallast) -> Result<RawPools, ScenarioError> {
        match (&raw.pools, raw.pool.is_null()) {
            (None, _) => Ok(RawPools { pools: vec![raw.pool.clone()], listed: false }),
            (Some(pools), _) if pools.is_empty() => Err(field("ballast.pools", "list at least one pool")),
            (Some(pools), true) => Ok(RawPools { pools: pools.clone(), listed: true }),
            (Some(_), false) => Err(field("ballast", "give pool (one pool) or pools (several), not both")),
        }
    }

    /// Where pool `p`'s settings are in the scenario.
    fn path(&self, p: usize) -> String {
        if self.listed {
            format!("ballast.pools[{p}]")
        } else {
            "ballast.pool".into()
        }
    }

    /// The pools' names: each listed pool names itself; a single pool may, else `sim`.
    fn names(&self) -> Result<Vec<String>, ScenarioError> {
        let mut names: Vec<String> = Vec::new();
        for (p, pool) in self.pools.iter().enumerate() {
            let name = match pool.get("name") {
                Some(Value::String(name)) => name.clone(),
                Some(_) => return Err(field(format!("{}.name", self.path(p)), "expected a string")),
                None if self.listed => {
                    return Err(field(format!("{}.name", self.path(p)), "name each of several pools"))
                }
                None => "sim".into(),
            };
            if names.contains(&name) {
                return Err(field(format!("{}.name", self.path(p)), format!("duplicate pool `{name}`")));
            }
            names.push(name);
        }
        Ok(names)
    }
}

/// The Ballast pool of a node group: none with `ballast: false`; the one it names; or
/// the only pool.
fn group_pool(g: &RawGroup, pool_names: &[String], path: &str) -> Result<Option<usize>, ScenarioError> {
    match (&g.pool, g.ballast) {
        (Some(_), false) => Err(field(format!("{path}.pool"), "a group with `ballast: false` is in no pool")),
        (None, false) => Ok(None),
        (Some(name), true) => match pool_names.iter().position(|n| n == name) {
            Some(p) => Ok(Some(p)),
            None => Err(field(
                format!("{path}.pool"),
                format!("`{name}` is not one of Ballast's pools ({})", pool_names.join(", ")),
            )),
        },
        (None, true) if pool_names.len() == 1 => Ok(Some(0)),
        (None, true) => Err(field(
            format!("{path}.pool"),
            format!("name one of Ballast's pools ({}) or set `ballast: false`", pool_names.join(", ")),
        )),
    }
}

fn static_spec(raw: RawStatic, pool_names: &[String]) -> Result<StaticSpec, ScenarioError> {
    let replicas = match raw.replicas {
        RawReplicas::Each(n) => vec![n; pool_names.len()],
        RawReplicas::PerPool(map) => {
            if let Some(unknown) = map.keys().find(|k| !pool_names.contains(k)) {
                return Err(field(
                    format!("static_overprovisioning.replicas.{unknown}"),
                    format!("is not one of Ballast's pools ({})", pool_names.join(", ")),
                ));
            }
            pool_names.iter().map(|n| map.get(n).copied().unwrap_or(0)).collect()
        }
    };
    Ok(StaticSpec { replicas, priority: raw.priority })
}

/// Builds a whole `ballast.yaml` around the scenario's pool settings and validates it
/// with the production config code.
fn ballast_config(raw: &RawPools, groups: &[Group]) -> Result<Config, ScenarioError> {
    let mut pools = Vec::new();
    for (p, pool) in raw.pools.iter().enumerate() {
        let path = raw.path(p);
        let mut pool_map = match pool {
            Value::Mapping(m) => m.clone(),
            Value::Null => Default::default(),
            _ => return Err(field(path, "expected a mapping of pool settings")),
        };
        for reserved in ["spot_asgs", "on_demand_asg"] {
            if pool_map.contains_key(reserved) {
                return Err(field(format!("{path}.{reserved}"), "is set by the simulator from node_groups"));
            }
        }
        // The pool's name is the scenario's to give, as in ballast.yaml; `sim` if it does not.
        if !pool_map.contains_key("name") {
            pool_map.insert("name".into(), "sim".into());
        }
        let spot: Vec<Value> = pool_groups(groups, p, Market::Spot).map(|(_, g)| Value::from(g.name.clone())).collect();
        pool_map.insert("spot_asgs".into(), Value::Sequence(spot));
        // None: a spot-only pool.
        if let Some((_, od)) = pool_groups(groups, p, Market::OnDemand).next() {
            pool_map.insert("on_demand_asg".into(), od.name.clone().into());
        }
        pools.push(Value::Mapping(pool_map));
    }
    let mut top = serde_yaml_ng::Mapping::new();
    top.insert("cluster".into(), "sim".into());
    top.insert("region".into(), "eu-west-1".into());
    top.insert("account".into(), "000000000000".into());
    top.insert("state_table".into(), "ballast-sim".into());
    top.insert("pools".into(), Value::Sequence(pools));
    Config::from_value(Value::Mapping(top)).map_err(|errors| {
        let first = &errors.0[0];
        let message = first.message.clone();
        // `pools[P]...` in ballast.yaml is where the scenario gave pool P.
        let at = first.path.strip_prefix("pools[").and_then(|rest| {
            let (p, tail) = rest.split_once(']')?;
            Some(format!("{}{tail}", raw.path(p.parse().ok()?)))
        });
        field(at.unwrap_or_else(|| first.path.clone()), message)
    })
}
