//! The validated scenario's parts: node groups, workloads, the spot market and
//! cluster-autoscaler's settings, as the simulation reads them.

use std::collections::BTreeMap;

use ballast_core::config::{TaintEffect, Toleration, TolerationOperator};
use ballast_core::units::HumanDuration;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;

use super::Scenario;

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
    /// Which feasible node a pod goes to.
    pub scoring: Scoring,
}

impl Default for SchedulerSpec {
    fn default() -> Self {
        SchedulerSpec {
            cycle: HumanDuration(std::time::Duration::from_millis(200)),
            preemption: HumanDuration::from_secs(2),
            scoring: Scoring::default(),
        }
    }
}

/// How the scheduler picks among the nodes a pod fits on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scoring {
    /// The first node, in launch order: tight packing, the model's figures so far.
    #[default]
    #[serde(alias = "first_fit")]
    FirstFit,
    /// kube-scheduler's default, `NodeResourcesFit` with `LeastAllocated`: the node with
    /// the most CPU and memory left once the pod is on it, each as a share of the node's
    /// allocatable, averaged (equal weights): pods spread over the nodes. Its other
    /// default scores (BalancedAllocation, topology spread, image locality…) are not
    /// modelled; equal scores go to the first node, where kube-scheduler draws.
    #[serde(alias = "least_allocated")]
    LeastAllocated,
}

impl Scoring {
    pub fn name(self) -> &'static str {
        match self {
            Scoring::FirstFit => "first-fit",
            Scoring::LeastAllocated => "least-allocated",
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
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

/// The static-overprovisioning baseline: a fixed pause-pod Deployment in each pool.
#[derive(Debug, Clone)]
pub struct StaticSpec {
    /// Fixed pause pods per pool, in the order of `Scenario::ballast.pools` (the same
    /// size as that pool's Ballast pause pods).
    pub replicas: Vec<u32>,
    /// Their priority; below cluster-autoscaler's cutoff (-10) they never bring a node.
    pub priority: i32,
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
    /// `nvidia.com/gpu` devices.
    pub gpus: u32,
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
            gpus: it.gpus,
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
    pub gpus: u32,
}

#[derive(Debug, Clone)]
pub struct Deployment {
    pub name: String,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    /// `nvidia.com/gpu` per pod.
    pub gpus: u32,
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
    /// `nvidia.com/gpu` per pod.
    pub gpus: u32,
    pub duration: [HumanDuration; 2],
    pub class: usize,
}
