//! The config's types as `ballast.yaml` writes them, how they serialize back, and their
//! defaults (the one source of them).

use std::collections::BTreeMap;
use std::fmt;

use chrono_tz::Tz;
use croner::Cron;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize, Serializer};

use super::schema::{region_schema, CpuQuantity, MemoryQuantity, TimeZoneName};
use super::{CA_EXPENDABLE_CUTOFF, DEFAULT_PAUSE_IMAGE};
use crate::units::{format_cpu_millis, format_memory_bytes, HumanDuration};

/// The whole `ballast.yaml`: one deployment and its pools.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(title = "ballast.yaml", deny_unknown_fields)]
pub struct Config {
    /// The EKS cluster's name (required): 1 to 36 letters, digits or hyphens, as the
    /// templates name every resource `ballast-CLUSTER-...` from it.
    #[schemars(length(min = 1, max = 36), regex(pattern = r"^[a-zA-Z0-9][a-zA-Z0-9-]*$"))]
    pub cluster: String,
    /// The deployment's AWS region (required): events from any other are refused.
    #[schemars(schema_with = "region_schema")]
    pub region: String,
    /// The deployment's 12-digit account id, quoted; when absent the Lambda functions use
    /// their own. Events from any other account are refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]{12}$"))]
    pub account: Option<String>,
    /// The DynamoDB table of pool records, leases and handled event ids (required).
    #[schemars(length(min = 3, max = 255), regex(pattern = r"^[a-zA-Z0-9_.-]+$"))]
    pub state_table: String,
    /// Plan and log every decision, change nothing (not even Ballast's own record).
    #[schemars(default)]
    pub dry_run: bool,
    /// The pools (at least one); an ASG serves one pool only.
    #[schemars(length(min = 1))]
    pub pools: Vec<PoolConfig>,
}

/// One pool (`pools[]`): its ASGs, where its pods land, and how it falls back, meets
/// interruptions and holds headroom.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PoolConfig {
    /// The pool's name (required, unique): a lowercase DNS label of at most 40 characters, as
    /// it names Kubernetes objects.
    #[schemars(length(min = 1, max = 40), regex(pattern = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"))]
    pub name: String,
    /// The spot ASGs (required, at least one), in preference order: fallback fills the next
    /// healthy one before on-demand.
    #[serde(serialize_with = "selectors_as_written")]
    #[schemars(length(min = 1))]
    pub spot_asgs: Vec<AsgSelector>,
    /// The ASG fallback goes to (must select exactly one, not also a spot ASG). Without it
    /// the pool is spot-only: headroom and interruption handling, no fallback.
    #[serde(serialize_with = "optional_selector_as_written", skip_serializing_if = "Option::is_none")]
    pub on_demand_asg: Option<AsgSelector>,
    /// Where the pool's pods land (labels): the headroom pause pods use the same.
    #[schemars(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations the pause pods carry, to land on the pool's tainted nodes (as in a pod
    /// spec).
    #[schemars(default)]
    pub tolerations: Vec<Toleration>,
    /// When spot counts as failing, and how capacity moves to on-demand and back.
    #[schemars(default)]
    pub fallback: FallbackConfig,
    /// What an interruption warning or rebalance recommendation sets off.
    #[schemars(default)]
    pub interruption: InterruptionConfig,
    /// The pool's pause-pod headroom.
    #[schemars(default)]
    pub headroom: HeadroomConfig,
}

/// How the config names an ASG: by name (a plain string) or by tags (`{tags: {...}}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AsgSelector {
    /// The ASG of this name (a plain string, or `{name: ...}`).
    Name(String),
    /// Every ASG carrying all these tags (spot: in name order).
    Tags(BTreeMap<String, String>),
}

/// Written as a plain name, `{name: ...}` or `{tags: {...}}`; the derived schema would
/// know only the last two.
impl JsonSchema for AsgSelector {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AsgSelector".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "An ASG: its name, `{name: ...}`, or `{tags: {key: value}}` for every ASG carrying all \
                            those tags.",
            "oneOf": [
                { "type": "string", "minLength": 1, "maxLength": 255 },
                {
                    "type": "object",
                    "properties": { "name": { "type": "string", "minLength": 1, "maxLength": 255 } },
                    "required": ["name"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": {
                        "tags": { "type": "object", "additionalProperties": { "type": "string" }, "minProperties": 1 }
                    },
                    "required": ["tags"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

impl AsgSelector {
    /// Whether the selector picks the ASG `name`, tagged `tags`.
    pub fn matches(&self, name: &str, tags: &BTreeMap<String, String>) -> bool {
        match self {
            AsgSelector::Name(n) => n == name,
            AsgSelector::Tags(want) => want.iter().all(|(k, v)| tags.get(k) == Some(v)),
        }
    }
}

impl fmt::Display for AsgSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AsgSelector::Name(n) => write!(f, "{n}"),
            AsgSelector::Tags(tags) => {
                let parts: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "tags({})", parts.join(","))
            }
        }
    }
}

/// A Kubernetes toleration of the pause pods, written as in a pod spec (camelCase keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Toleration {
    /// The taint key; `None` with `Exists` tolerates every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Equal` or `Exists`; `None` is Kubernetes' default, `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<TolerationOperator>,
    /// The taint value `Equal` compares with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The taint effect tolerated; `None` tolerates every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    /// How long a `NoExecute` taint is tolerated, in seconds; `None`: for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

/// How a toleration matches a taint's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TolerationOperator {
    /// The taint's value is the toleration's `value`.
    Equal,
    /// Any value of the key.
    Exists,
}

/// What a taint keeps off its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffect {
    /// No new pod is scheduled there.
    NoSchedule,
    /// The scheduler avoids the node when it can.
    PreferNoSchedule,
    /// Running pods are evicted too.
    NoExecute,
}

/// When spot counts as failing and how capacity moves to on-demand and back
/// (`fallback`); every field has a default.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(default, deny_unknown_fields)]
pub struct FallbackConfig {
    /// How long a spot ASG may stay below its desired size before it counts as failing
    /// (a duration).
    pub spot_launch_grace: HumanDuration,
    /// How long a capacity error keeps a spot ASG marked unavailable (a duration, more
    /// than zero).
    pub unavailable_ttl: HumanDuration,
    /// The most on-demand instances fallback may add to the pool (instances).
    pub max_on_demand: u32,
    /// How long spot must stay healthy before capacity moves back (a duration).
    pub failback_after: HumanDuration,
    /// Instances moved back per failback step (at least 1).
    #[schemars(range(min = 1))]
    pub failback_step: u32,
    /// After a failback step whose spot surge was not Ready in time, the wait before
    /// the next attempt (a duration).
    pub wait_and_retry: HumanDuration,
    /// This many interruptions (or losses without warning) of one spot ASG within the
    /// window mark it unavailable.
    pub interruption_rate: InterruptionRate,
}

/// Spot interruptions that count as spot failing (`fallback.interruption_rate`,
/// default 5 in 10m).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InterruptionRate {
    /// Interruptions within `window` (at least 1).
    #[schemars(range(min = 1))]
    pub count: u32,
    /// How far back they are counted (a duration, more than zero).
    pub window: HumanDuration,
}

/// What an interruption warning or rebalance recommendation sets off (`interruption`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(default, deny_unknown_fields)]
pub struct InterruptionConfig {
    /// Launch the replacement before the interrupted instance goes.
    pub surge: bool,
    /// Cordon and drain the interrupted node through the Eviction API.
    pub drain: bool,
    /// What a rebalance recommendation does.
    pub rebalance: RebalancePolicy,
    /// How long a PodDisruptionBudget may hold a drain (a duration, at most 15m; above 13m
    /// a drain is always cut short). The functions' timeout must leave room for it.
    pub drain_timeout: HumanDuration,
}

/// What a rebalance recommendation does (`interruption.rebalance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RebalancePolicy {
    /// Replace the instance as for an interruption warning, early.
    Surge,
    /// Log it and do nothing more (the default).
    Ignore,
}

/// The pool's headroom (`headroom`): low-priority pause pods that hold room on its nodes
/// for workload pods, which preempt them.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(default, deny_unknown_fields)]
pub struct HeadroomConfig {
    /// Headroom as a percentage of the pool's workload requests (percent, 0 to 1000).
    #[schemars(range(max = 1000))]
    pub percent: u32,
    /// The CPU one pause pod requests (= limits), and the unit room is counted in with
    /// `pod_memory`: a Kubernetes quantity (`1`, `500m`).
    #[serde(rename = "pod_cpu", serialize_with = "cpu_quantity")]
    #[schemars(with = "CpuQuantity")]
    pub pod_cpu_millis: u64,
    /// The memory one pause pod requests (= limits): a Kubernetes quantity (`2Gi`, `512Mi`).
    #[serde(rename = "pod_memory", serialize_with = "memory_quantity")]
    #[schemars(with = "MemoryQuantity")]
    pub pod_memory_bytes: u64,
    /// The shapes of the pause pods: `auto` (up to 3, in the shapes of the pods that
    /// arrive), `fixed` (one, of `pod_cpu` / `pod_memory`), or a list of 1 to 3 shapes.
    pub shapes: HeadroomShapes,
    /// The least room, in pause pods of `pod_cpu` / `pod_memory` (at most `max`).
    pub min: u32,
    /// The most room, in pause pods of `pod_cpu` / `pod_memory`, a learned size included,
    /// and the most pause pods of every shape together: the headroom namespace's quota is
    /// written for it.
    pub max: u32,
    /// The namespace of the pause-pod Deployments (a DNS label).
    pub namespace: String,
    /// The pause pods' PriorityClass: negative, and not below -10, cluster-autoscaler's
    /// expendable cutoff.
    pub priority_class: PriorityClassConfig,
    /// The pause container's image: pinned by digest (`@sha256:...`), from
    /// registry.k8s.io/pause, public.ecr.aws/eks-distro/kubernetes/pause or a private ECR
    /// mirror (`ACCOUNT.dkr.ecr.REGION.amazonaws.com/...`, `.amazonaws.com.cn`,
    /// `dkr.ecr-fips.`) in the cluster's partition.
    pub image: String,
    /// Schedules that change `percent`; the one that fired last is in force.
    pub schedules: Vec<HeadroomSchedule>,
    /// Extra percent (0 to 1000) for `boost_for` after a spot interruption.
    #[schemars(range(max = 1000))]
    pub interruption_boost: u32,
    /// How long after an interruption `interruption_boost` lasts (a duration).
    pub boost_for: HumanDuration,
    /// Headroom learned from a first-start wait objective instead of a fixed percentage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<WaitTarget>,
}

/// The shapes a pool's pause pods take (`headroom.shapes`). Pods are not fungible CPU:
/// room held as 2-CPU pause pods has no hole a 4-CPU job fits in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadroomShapes {
    /// One Deployment of `pod_cpu` / `pod_memory` pods (`fixed`).
    Fixed,
    /// Up to three Deployments, in the shapes of the pods that arrive as the forwarder
    /// reports them (`auto`, the default); `pod_cpu` / `pod_memory` is the shape until a
    /// report shows one.
    Auto,
    /// Up to three Deployments in the shapes written; each arriving pod counts towards
    /// the smallest it fits in.
    Listed(Vec<ListedShape>),
}

/// One shape of `headroom.shapes` as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListedShape {
    /// What the shape is for (`training`): a DNS label, in reasons and on the pods.
    pub name: String,
    /// Its requests.
    #[serde(flatten, serialize_with = "shape_fields")]
    pub shape: crate::shape::PodShape,
}

fn shape_fields<S: Serializer>(shape: &crate::shape::PodShape, serializer: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = serializer.serialize_map(None)?;
    map.serialize_entry("cpu", &format_cpu_millis(shape.cpu_millis))?;
    map.serialize_entry("memory", &format_memory_bytes(shape.memory_bytes))?;
    if !shape.extended.is_empty() {
        map.serialize_entry("resources", &shape.extended)?;
    }
    map.end()
}

impl Serialize for HeadroomShapes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            HeadroomShapes::Fixed => serializer.serialize_str("fixed"),
            HeadroomShapes::Auto => serializer.serialize_str("auto"),
            HeadroomShapes::Listed(list) => list.serialize(serializer),
        }
    }
}

impl JsonSchema for HeadroomShapes {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "HeadroomShapes".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let shape = generator.subschema_for::<ListedShape>();
        json_schema!({
            "oneOf": [
                { "type": "string", "enum": ["auto", "fixed"] },
                { "type": "array", "items": shape, "minItems": 1, "maxItems": crate::shape::MAX_SLOT_SHAPES }
            ]
        })
    }
}

/// Its flattened requests are written `cpu`, `memory`, `resources`.
impl JsonSchema for ListedShape {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ListedShape".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let cpu = generator.subschema_for::<CpuQuantity>();
        let memory = generator.subschema_for::<MemoryQuantity>();
        json_schema!({
            "description": "One pause-pod shape: its name and requests.",
            "type": "object",
            "properties": {
                "name": {
                    "description": "What the shape is for (`training`): a DNS label of at most 20 characters.",
                    "type": "string", "maxLength": 20, "pattern": "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
                },
                "cpu": cpu,
                "memory": memory,
                "resources": {
                    "description": "Extended resources, by name (`nvidia.com/gpu: 1`), each more than zero.",
                    "type": "object",
                    "additionalProperties": { "type": "integer", "minimum": 1 }
                }
            },
            "required": ["name", "cpu", "memory"],
            "additionalProperties": false
        })
    }
}

impl HeadroomShapes {
    /// How many pause-pod Deployments the pool may run.
    pub fn deployments(&self) -> usize {
        match self {
            HeadroomShapes::Fixed => 1,
            HeadroomShapes::Auto => crate::shape::MAX_SLOT_SHAPES,
            HeadroomShapes::Listed(list) => list.len(),
        }
    }
}

/// "A new workload pod of the pool starts within `wait_p95`, 95 times in 100": the
/// headroom is learned from the pool's history (see `planner::learn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct WaitTarget {
    /// The first-start wait (creation to scheduled) of the pool's workload pods at the
    /// 95th percentile (required; a duration, 1s to 60m).
    pub wait_p95: HumanDuration,
    /// How much history the learned size draws on (a duration in whole days, `1d` to `28d`).
    #[schemars(default = "default_history")]
    pub history: HumanDuration,
    /// `percent` is also a floor under the learned size (not only what is used until
    /// there is enough history); by default, when `percent` is written.
    #[schemars(with = "Option<bool>")]
    pub floor: bool,
    /// The time zone the pool's days are counted in: a ramp at 09:00 local stays at
    /// 09:00 across daylight saving changes.
    #[serde(serialize_with = "tz_name")]
    #[schemars(with = "TimeZoneName", default = "default_time_zone")]
    pub time_zone: Tz,
}

pub(super) fn default_history() -> HumanDuration {
    HumanDuration::from_secs(14 * 86_400)
}

pub(super) fn default_time_zone() -> Tz {
    Tz::UTC
}

fn tz_name<S: serde::Serializer>(tz: &Tz, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(tz.name())
}

impl WaitTarget {
    /// Days of history kept, at least one.
    pub fn history_days(&self) -> usize {
        (self.history.0.as_secs().div_ceil(86_400) as usize).max(1)
    }
}

impl HeadroomConfig {
    /// The pause pod of `pod_cpu` / `pod_memory`: room is counted in it, and it is the
    /// shape while no other is known.
    pub fn unit_shape(&self) -> crate::shape::PodShape {
        crate::shape::PodShape::new(self.pod_cpu_millis, self.pod_memory_bytes)
    }

    /// How the headroom settings combine, in a sentence (`ballast config check`).
    pub fn explain(&self) -> String {
        let schedules = match self.schedules.len() {
            0 => String::new(),
            n => format!(" ({n} schedule(s) change it when they fire)"),
        };
        let boost = if self.interruption_boost > 0 {
            format!("; +{}% for {} after a spot interruption", self.interruption_boost, self.boost_for)
        } else {
            String::new()
        };
        let pods = format!(
            "within [{}, {}] pause pods of {} CPU / {}",
            self.min,
            self.max,
            format_cpu_millis(self.pod_cpu_millis),
            format_memory_bytes(self.pod_memory_bytes)
        );
        match &self.target {
            None => format!(
                "{}% of the pool's workload requests{schedules}{boost}; {pods}; a headroom override event wins while it lasts",
                self.percent
            ),
            Some(t) => {
                // No percent and no schedule: the first day is the learner's alone.
                let first_day = if self.percent == 0 && self.schedules.is_empty() {
                    "until a past day shows the time of day, only what rises now and bursts that missed \
                     the target (percent 0: no room held in advance beyond `min`)"
                        .to_string()
                } else {
                    format!(
                        "{}% of the workload requests{schedules} until a past day shows the time of day{}",
                        self.percent,
                        if t.floor {
                            ", and as a floor under the learned size"
                        } else {
                            " (not a floor: `floor: false` or percent not written)"
                        }
                    )
                };
                format!(
                    "learned for a first-start wait of at most {} at p95 from up to {} day(s) of history: room for the demand \
                     that rises within one node launch-to-Ready time, by time of day in {}{weekly}, \
                     raised when measured waits miss the target and lowered slowly when they meet it; the target's 5 % is a \
                     budget: from the second day counted, misses that keep the share of first starts over the target under 3 % \
                     add no room, and under 1.5 % the room shrinks below the rise, back to all of it past 3 %; \
                     {first_day}{boost}; {pods}; \
                     a headroom override event wins while it lasts; a target that max does not let through is logged once an hour",
                    t.wait_p95,
                    t.history_days(),
                    t.time_zone.name(),
                    weekly = if t.history_days() >= 14 {
                        " (by time of week once two weeks show it)"
                    } else {
                        " (history under 14 days: never by time of week)"
                    },
                )
            }
        }
    }
}

/// The PriorityClass the pause pods run at (`headroom.priority_class`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PriorityClassConfig {
    /// Its name (a Kubernetes object name).
    pub name: String,
    /// Its value: negative, so workloads preempt the pause pods, and not below
    /// cluster-autoscaler's expendable cutoff (-10), under which evicted pause pods would
    /// never bring a node back.
    #[schemars(range(min = -10, max = -1))]
    pub value: i32,
}

/// One headroom schedule (`headroom.schedules[]`): from each time `cron` fires,
/// `percent` is in force until another schedule fires.
#[derive(Debug, Clone)]
pub struct HeadroomSchedule {
    /// The cron as written: five fields (minute hour day-of-month month day-of-week).
    pub cron_text: String,
    /// `cron_text`, parsed.
    pub cron: Cron,
    /// The time zone the cron is read in (`time_zone`, default UTC).
    pub time_zone: Tz,
    /// Headroom while the schedule is in force, as a percentage of the pool's workload
    /// requests (required).
    pub percent: u32,
}

/// Written as `{cron, time_zone, percent}`; the parsed cron is not.
impl JsonSchema for HeadroomSchedule {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "HeadroomSchedule".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let time_zone = generator.subschema_for::<TimeZoneName>();
        json_schema!({
            "description": "From each time `cron` fires, `percent` is in force until another schedule fires.",
            "type": "object",
            "properties": {
                "cron": {
                    "description": "Five fields: minute hour day-of-month month day-of-week (`0 8 * * 1-5`).",
                    "type": "string"
                },
                "time_zone": { "allOf": [time_zone], "default": "UTC" },
                "percent": {
                    "description": "Headroom while in force, as a percentage of the pool's workload requests (0 to 1000).",
                    "type": "integer", "minimum": 0, "maximum": 1000
                }
            },
            "required": ["cron", "percent"],
            "additionalProperties": false
        })
    }
}

/// Two schedules are equal when they read the same (the cron is parsed from its text).
impl PartialEq for HeadroomSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.cron_text == other.cron_text && self.time_zone == other.time_zone && self.percent == other.percent
    }
}

impl Serialize for HeadroomSchedule {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Text<'a> {
            cron: &'a str,
            time_zone: &'a str,
            percent: u32,
        }
        Text { cron: &self.cron_text, time_zone: self.time_zone.name(), percent: self.percent }.serialize(serializer)
    }
}

/// A selector as `ballast.yaml` writes it: a name as a plain string, tags as `{tags: ...}`
/// (not as a YAML-tagged enum, which the reader would not take).
fn selector_as_written<S: Serializer>(selector: &AsgSelector, serializer: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Tags<'a> {
        tags: &'a BTreeMap<String, String>,
    }
    match selector {
        AsgSelector::Name(name) => serializer.serialize_str(name),
        AsgSelector::Tags(tags) => Tags { tags }.serialize(serializer),
    }
}

fn optional_selector_as_written<S: Serializer>(
    selector: &Option<AsgSelector>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match selector {
        Some(selector) => selector_as_written(selector, serializer),
        None => serializer.serialize_none(),
    }
}

fn selectors_as_written<S: Serializer>(selectors: &[AsgSelector], serializer: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = serializer.serialize_seq(Some(selectors.len()))?;
    for selector in selectors {
        struct Written<'a>(&'a AsgSelector);
        impl Serialize for Written<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                selector_as_written(self.0, serializer)
            }
        }
        seq.serialize_element(&Written(selector))?;
    }
    seq.end()
}

fn cpu_quantity<S: Serializer>(millis: &u64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_cpu_millis(*millis))
}

fn memory_quantity<S: Serializer>(bytes: &u64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_memory_bytes(*bytes))
}

impl Default for FallbackConfig {
    fn default() -> Self {
        FallbackConfig {
            spot_launch_grace: HumanDuration::from_secs(180),
            unavailable_ttl: HumanDuration::from_secs(900),
            max_on_demand: 10,
            failback_after: HumanDuration::from_secs(1800),
            failback_step: 1,
            wait_and_retry: HumanDuration::from_secs(600),
            interruption_rate: InterruptionRate { count: 5, window: HumanDuration::from_secs(600) },
        }
    }
}

impl Default for InterruptionConfig {
    fn default() -> Self {
        InterruptionConfig {
            surge: true,
            drain: true,
            rebalance: RebalancePolicy::Ignore,
            drain_timeout: HumanDuration::from_secs(90),
        }
    }
}

impl Default for HeadroomConfig {
    fn default() -> Self {
        HeadroomConfig {
            percent: 10,
            pod_cpu_millis: 1000,
            pod_memory_bytes: 2 << 30,
            shapes: HeadroomShapes::Auto,
            min: 0,
            max: 50,
            namespace: "ballast-headroom".into(),
            priority_class: PriorityClassConfig { name: "ballast-headroom".into(), value: CA_EXPENDABLE_CUTOFF },
            image: DEFAULT_PAUSE_IMAGE.into(),
            schedules: Vec::new(),
            interruption_boost: 0,
            boost_for: HumanDuration::from_secs(1800),
            target: None,
        }
    }
}
