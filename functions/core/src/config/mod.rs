//! `ballast.yaml`: the deployment's pools and their fallback, interruption and
//! headroom settings. [`Config::from_yaml`] (or [`Config::from_value`]) reports every
//! problem, each with its path; a config serializes back to the same YAML shape with every
//! default filled in (`ballast config check --print`).
//!
//! Defaults have one source: the `Default` impls of [`FallbackConfig`],
//! [`InterruptionConfig`] and [`HeadroomConfig`] (and `dry_run: false`); the readers, the
//! simulator and the README's reference (checked by a test) take them from there.

mod resolve;
mod walk;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use serde::{Deserialize, Serialize, Serializer};
use serde_yaml_ng::Value;

use crate::units::{format_cpu_millis, format_memory_bytes, parse_cpu_millis, parse_memory_bytes, HumanDuration};
pub use resolve::{check_one_role, resolve_pool_asgs, selectors, AsgRef, ResolveError, ResolvedPool, Role};
use walk::{kind, Fields, Issues};

/// The lowest priority cluster-autoscaler still scales up for (its default
/// `--expendable-pods-priority-cutoff`).
pub const CA_EXPENDABLE_CUTOFF: i32 = -10;

/// The Kubernetes group the function roles are mapped to (their EKS access entries, or
/// `aws-auth`), which infra/k8s/functions-rbac.yaml binds.
pub const FUNCTIONS_GROUP: &str = "ballast:functions";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    pub cluster: String,
    pub region: String,
    /// The deployment's account; when absent the Lambda functions use their own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    pub state_table: String,
    pub dry_run: bool,
    pub pools: Vec<PoolConfig>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolConfig {
    pub name: String,
    /// In preference order: fallback fills the next healthy one before on-demand.
    #[serde(serialize_with = "selectors_as_written")]
    pub spot_asgs: Vec<AsgSelector>,
    /// Where fallback goes. `None`: a spot-only pool (headroom and interruption
    /// handling, no fallback).
    #[serde(serialize_with = "optional_selector_as_written", skip_serializing_if = "Option::is_none")]
    pub on_demand_asg: Option<AsgSelector>,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    pub fallback: FallbackConfig,
    pub interruption: InterruptionConfig,
    pub headroom: HeadroomConfig,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AsgSelector {
    Name(String),
    /// Every ASG carrying all these tags (spot: in name order).
    Tags(BTreeMap<String, String>),
}

impl AsgSelector {
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Toleration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<TolerationOperator>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FallbackConfig {
    /// How long a spot ASG may stay below its desired size before it counts as failing.
    pub spot_launch_grace: HumanDuration,
    /// How long a capacity error keeps a spot ASG marked unavailable.
    pub unavailable_ttl: HumanDuration,
    /// The most on-demand instances fallback may add to the pool.
    pub max_on_demand: u32,
    /// How long spot must stay healthy before capacity moves back.
    pub failback_after: HumanDuration,
    /// Units moved back per failback step.
    pub failback_step: u32,
    /// After a failback step whose spot surge was not Ready in time, the wait before
    /// the next attempt.
    pub wait_and_retry: HumanDuration,
    /// This many interruptions within the window count as spot failing.
    pub interruption_rate: InterruptionRate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterruptionRate {
    pub count: u32,
    pub window: HumanDuration,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InterruptionConfig {
    /// Launch the replacement before the interrupted instance goes.
    pub surge: bool,
    /// Cordon and drain the interrupted node.
    pub drain: bool,
    pub rebalance: RebalancePolicy,
    pub drain_timeout: HumanDuration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RebalancePolicy {
    /// Replace the instance as for an interruption warning, early.
    Surge,
    Ignore,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadroomConfig {
    /// Headroom as a percentage of the pool's workload requests.
    pub percent: u32,
    #[serde(rename = "pod_cpu", serialize_with = "cpu_quantity")]
    pub pod_cpu_millis: u64,
    #[serde(rename = "pod_memory", serialize_with = "memory_quantity")]
    pub pod_memory_bytes: u64,
    pub min: u32,
    pub max: u32,
    pub namespace: String,
    pub priority_class: PriorityClassConfig,
    pub image: String,
    pub schedules: Vec<HeadroomSchedule>,
    /// Extra percent while a recent interruption is within `boost_for`.
    pub interruption_boost: u32,
    pub boost_for: HumanDuration,
    /// Headroom learned from a wait objective instead of a fixed percentage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<WaitTarget>,
}

/// "A new workload pod of the pool starts within `wait_p95`, 95 times in 100": the
/// headroom is learned from the pool's history (see `planner::learn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WaitTarget {
    /// First-start wait (creation to scheduled) of the pool's workload pods, 95th percentile.
    pub wait_p95: HumanDuration,
    /// How much history the learned size draws on (whole days, at most 28).
    pub history: HumanDuration,
    /// `percent` is also a floor under the learned size (not only what is used until
    /// there is enough history). Written `percent` makes it one unless `floor: false`.
    pub floor: bool,
    /// The time zone the pool's days are counted in: a ramp at 09:00 local stays at
    /// 09:00 across daylight saving changes.
    #[serde(serialize_with = "tz_name")]
    pub time_zone: Tz,
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriorityClassConfig {
    pub name: String,
    pub value: i32,
}

#[derive(Debug, Clone)]
pub struct HeadroomSchedule {
    pub cron_text: String,
    pub cron: Cron,
    pub time_zone: Tz,
    pub percent: u32,
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

/// The time zone of a headroom schedule that names none.
pub const DEFAULT_SCHEDULE_TIME_ZONE: Tz = Tz::UTC;

/// The most bytes a config file may have, checked before it is parsed. A real config is a
/// few kilobytes (an SSM parameter holds at most 8 KB); a bigger input is a mistake or an
/// attack, and parsing it would cost time and memory for nothing.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// The most a config may have to live in its home, an SSM parameter of the Advanced tier
/// (8 KB); `config check` warns from [`PARAMETER_WARN_BYTES`].
pub const PARAMETER_MAX_BYTES: usize = 8192;
/// Nine tenths of [`PARAMETER_MAX_BYTES`]: room for one more pool is running out.
pub const PARAMETER_WARN_BYTES: usize = PARAMETER_MAX_BYTES * 9 / 10;

/// The deepest nesting of lists and mappings a config file may have, checked before it is
/// parsed (a real config nests 6 deep: `pools[].headroom.schedules[].cron`).
pub const MAX_CONFIG_DEPTH: usize = 32;

/// One problem in the config: where it is and why it is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigIssue {
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} problem(s) in the config:\n{}", .0.len(), .0.iter().map(|i| format!("  {i}")).collect::<Vec<_>>().join("\n"))]
pub struct ConfigErrors(pub Vec<ConfigIssue>);

const MAX_PERCENT: u32 = 1000;

impl Config {
    /// Reads and validates a config file's text. Refused before parsing: more than
    /// [`MAX_CONFIG_BYTES`], or nesting deeper than [`MAX_CONFIG_DEPTH`].
    pub fn from_yaml(text: &str) -> Result<Config, ConfigErrors> {
        let file_issue = |message: String| ConfigErrors(vec![ConfigIssue { path: "(file)".into(), message }]);
        if text.len() > MAX_CONFIG_BYTES {
            return Err(file_issue(format!(
                "{} bytes is more than a config may have ({MAX_CONFIG_BYTES} bytes, 1 MiB)",
                text.len()
            )));
        }
        if let Some((line, depth)) = walk::nesting_too_deep(text, MAX_CONFIG_DEPTH) {
            return Err(file_issue(format!(
                "line {line}: lists and mappings nested {depth} deep, more than a config may have ({MAX_CONFIG_DEPTH})"
            )));
        }
        let only_comments = text.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
        let value: Value = if only_comments {
            Value::Null
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| file_issue(format!("not valid YAML: {e}")))?
        };
        Config::from_value(value)
    }

    /// Validates a config already read as YAML (what the simulator builds): every
    /// problem, each with its path, as [`Config::from_yaml`].
    pub fn from_value(value: Value) -> Result<Config, ConfigErrors> {
        // An empty document is an empty mapping: every required field is missing.
        let value = if value.is_null() { Value::Mapping(Default::default()) } else { value };
        let mut issues = Issues(Vec::new());
        let config = read_config(&value, &mut issues);
        match config {
            Some(config) if issues.0.is_empty() => Ok(config),
            _ => Err(ConfigErrors(issues.0)),
        }
    }

    /// The deployment's own account and region, which events must come from.
    pub fn origin(&self) -> crate::event::Origin {
        crate::event::Origin { account: self.account.clone(), region: self.region.clone() }
    }

    pub fn pool(&self, name: &str) -> Option<&PoolConfig> {
        self.pools.iter().find(|p| p.name == name)
    }

    /// The shortest Lambda timeout that lets a run drain a node for the longest
    /// `drain_timeout` and still make its calls around it.
    pub fn min_function_timeout(&self) -> std::time::Duration {
        let longest = self.pools.iter().map(|p| p.interruption.drain_timeout.0).max().unwrap_or_default();
        longest + FUNCTION_TIMEOUT_MARGIN
    }
}

/// The pause image by default: registry.k8s.io/pause:3.10, pinned to its digest.
pub const DEFAULT_PAUSE_IMAGE: &str =
    "registry.k8s.io/pause:3.10@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a";

/// Where a pause image may come from: the upstream image, the EKS Distro copy, or a
/// private ECR mirror (`ACCOUNT.dkr.ecr.REGION.amazonaws.com/...`). The functions may
/// create pods in the cluster, so the image is not left to any registry.
pub const ALLOWED_PAUSE_REPOSITORIES: [&str; 2] =
    ["registry.k8s.io/pause", "public.ecr.aws/eks-distro/kubernetes/pause"];

/// Why `image` may not be the pause image: it must be pinned (`@sha256:` and 64 hex
/// digits, so a moved tag cannot change what runs) and from an allowed repository.
pub fn check_image(image: &str) -> Result<(), String> {
    let image = image.trim();
    if image.is_empty() {
        return Err("must name a container image".into());
    }
    let Some((name, digest)) = image.split_once("@sha256:") else {
        return Err(format!(
            "`{image}` is not pinned: add its digest (`@sha256:...`), so a moved tag cannot change what runs"
        ));
    };
    if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(format!("`{image}`: the digest must be 64 lowercase hex digits"));
    }
    let repository = match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => name,
    };
    let private_ecr = repository.split_once('/').is_some_and(|(host, _)| {
        let parts: Vec<&str> = host.split('.').collect();
        matches!(parts.as_slice(), [account, "dkr", "ecr", _region, "amazonaws", "com"] if account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit()))
    });
    if ALLOWED_PAUSE_REPOSITORIES.contains(&repository) || private_ecr {
        Ok(())
    } else {
        Err(format!(
            "`{repository}` is not an allowed pause image repository ({}, or a private ECR mirror ACCOUNT.dkr.ecr.REGION.amazonaws.com/...)",
            ALLOWED_PAUSE_REPOSITORIES.join(", ")
        ))
    }
}

/// Time a run needs beyond its longest drain: observe, plan, record, terminate.
pub const FUNCTION_TIMEOUT_MARGIN: std::time::Duration = std::time::Duration::from_secs(120);

fn read_config(value: &Value, issues: &mut Issues) -> Option<Config> {
    let mut f = Fields::of(value, "", issues);
    let cluster: Option<String> = f.required("cluster", issues);
    let region: Option<String> = f.required("region", issues);
    let account: Option<String> = f.optional("account", issues);
    let state_table: Option<String> = f.required("state_table", issues);
    let dry_run = f.or("dry_run", bool::default(), issues);
    let pools_value = f.raw("pools");
    f.finish(issues);

    if let Some(c) = &cluster {
        if c.trim().is_empty() {
            issues.push("cluster", "must not be empty");
        }
    }
    if let Some(r) = &region {
        if !is_region(r) {
            issues.push("region", format!("`{r}` is not an AWS region name (e.g. eu-west-1)"));
        }
    }
    if let Some(a) = &account {
        if a.len() != 12 || !a.bytes().all(|b| b.is_ascii_digit()) {
            issues.push("account", format!("`{a}` is not a 12-digit AWS account id (quote it in YAML)"));
        }
    }
    if let Some(t) = &state_table {
        if t.len() < 3 || t.len() > 255 || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) {
            issues.push("state_table", format!("`{t}` is not a DynamoDB table name (3-255 of a-z A-Z 0-9 _ . -)"));
        }
    }

    let mut pools = Vec::new();
    match pools_value {
        None => issues.push("pools", "is required: at least one pool"),
        Some(Value::Sequence(items)) if items.is_empty() => issues.push("pools", "must list at least one pool"),
        Some(Value::Sequence(items)) => {
            check_pool_names(items, issues);
            for (i, item) in items.iter().enumerate() {
                if let Some(pool) = read_pool(item, &format!("pools[{i}]"), issues) {
                    pools.push((i, pool));
                }
            }
        }
        Some(other) => issues.push("pools", format!("expected a list of pools, found {}", kind(other))),
    }
    check_across_pools(&pools, issues);

    Some(Config {
        cluster: cluster?,
        region: region?,
        account,
        state_table: state_table?,
        dry_run,
        pools: pools.into_iter().map(|(_, p)| p).collect(),
    })
}

/// Duplicate names are found on the raw pools, so a pool with other errors still counts.
fn check_pool_names(items: &[Value], issues: &mut Issues) {
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let Some(name) = item.get("name").and_then(Value::as_str) else { continue };
        if let Some(first) = names.get(name) {
            issues.push(format!("pools[{i}].name"), format!("duplicate pool name `{name}` (also pools[{first}])"));
        } else {
            names.insert(name, i);
        }
    }
}

/// Tag selectors one of which asks for a subset of the other's tags: every ASG the wider
/// one matches, the narrower one matches too. Refused in two roles (within a pool or across
/// pools) as sure to overlap; other pairs are checked when the ASGs are resolved.
fn check_tag_overlaps(pools: &[(usize, PoolConfig)], issues: &mut Issues) {
    let mut seen: Vec<(usize, &str, resolve::Role, &BTreeMap<String, String>)> = Vec::new();
    for (i, pool) in pools {
        for (role, selector) in resolve::selectors(pool) {
            let AsgSelector::Tags(tags) = selector else { continue };
            let within =
                |a: &BTreeMap<String, String>, b: &BTreeMap<String, String>| a.iter().all(|(k, v)| b.get(k) == Some(v));
            let clash = seen.iter().find(|(j, _, other_role, other)| {
                (j != i || *other_role != role) && (within(tags, other) || within(other, tags))
            });
            if let Some((j, other_pool, other_role, other)) = clash {
                let field = match role {
                    resolve::Role::Spot => "spot_asgs",
                    resolve::Role::OnDemand => "on_demand_asg",
                };
                issues.push(
                    format!("pools[{i}].{field}"),
                    format!(
                        "`{selector}` ({} role of pool {}) and `{}` ({other_role} role of pool {other_pool}, pools[{j}]) \
                         select the same ASGs: an ASG serves one role of one pool; add a tag that tells them apart",
                        role, pool.name, AsgSelector::Tags((*other).clone())
                    ),
                );
            }
            seen.push((*i, &pool.name, role, tags));
        }
    }
}

fn check_across_pools(pools: &[(usize, PoolConfig)], issues: &mut Issues) {
    check_tag_overlaps(pools, issues);
    let mut asg_owner: BTreeMap<String, usize> = BTreeMap::new();
    for (i, pool) in pools {
        let named = pool
            .spot_asgs
            .iter()
            .chain(pool.on_demand_asg.as_ref())
            .filter_map(|s| match s {
                AsgSelector::Name(n) => Some(n.clone()),
                AsgSelector::Tags(_) => None,
            })
            .collect::<BTreeSet<_>>();
        for asg in named {
            if let Some(other) = asg_owner.insert(asg.clone(), *i) {
                if other != *i {
                    issues.push(
                        format!("pools[{i}]"),
                        format!("ASG `{asg}` also belongs to pools[{other}]; an ASG can serve one pool only"),
                    );
                }
            }
        }
    }
}

fn read_pool(value: &Value, path: &str, issues: &mut Issues) -> Option<PoolConfig> {
    let mut f = Fields::of(value, path, issues);
    let name: Option<String> = f.required("name", issues);
    let spot_value = f.raw("spot_asgs");
    let od_value = f.raw("on_demand_asg");
    let node_selector: BTreeMap<String, String> = f.or("node_selector", BTreeMap::new(), issues);
    let tolerations: Vec<Toleration> = f.or("tolerations", Vec::new(), issues);
    let fallback_value = f.raw("fallback").cloned().unwrap_or(Value::Null);
    let interruption_value = f.raw("interruption").cloned().unwrap_or(Value::Null);
    let headroom_value = f.raw("headroom").cloned().unwrap_or(Value::Null);
    let fallback_path = f.path("fallback");
    let interruption_path = f.path("interruption");
    let headroom_path = f.path("headroom");
    let spot_path = f.path("spot_asgs");
    let od_path = f.path("on_demand_asg");
    f.finish(issues);

    if let Some(n) = &name {
        if !is_dns_label(n) || n.len() > 40 {
            issues.push(
                format!("{path}.name"),
                format!("`{n}` must be a lowercase DNS label of at most 40 characters (it names Kubernetes objects)"),
            );
        }
    }

    let mut spot_asgs = Vec::new();
    match spot_value {
        None => issues.push(&spot_path, "is required: at least one spot ASG, in preference order"),
        Some(Value::Sequence(items)) if items.is_empty() => issues.push(&spot_path, "must list at least one spot ASG"),
        Some(Value::Sequence(items)) => {
            for (i, item) in items.iter().enumerate() {
                if let Some(sel) = read_selector(item, &format!("{spot_path}[{i}]"), issues) {
                    if spot_asgs.contains(&sel) {
                        issues.push(format!("{spot_path}[{i}]"), format!("`{sel}` is listed twice"));
                    }
                    spot_asgs.push(sel);
                }
            }
        }
        Some(other) => issues.push(&spot_path, format!("expected a list of ASGs, found {}", kind(other))),
    }
    // Absent: a spot-only pool. Present but unreadable: an error, not a spot-only pool.
    let on_demand_asg = match od_value {
        None => Some(None),
        Some(v) => read_selector(v, &od_path, issues).map(Some),
    };
    if let Some(Some(od)) = &on_demand_asg {
        if spot_asgs.contains(od) {
            issues.push(
                &od_path,
                format!("`{od}` is also listed in spot_asgs; the on-demand ASG must be a different group"),
            );
        }
    }
    for (i, t) in tolerations.iter().enumerate() {
        if t.operator == Some(TolerationOperator::Exists) && t.value.is_some() {
            issues.push(format!("{path}.tolerations[{i}].value"), "must be empty when operator is Exists");
        }
    }

    let fallback = read_fallback(&fallback_value, &fallback_path, issues);
    let interruption = read_interruption(&interruption_value, &interruption_path, issues);
    let headroom = read_headroom(&headroom_value, &headroom_path, issues);

    Some(PoolConfig {
        name: name?,
        spot_asgs,
        on_demand_asg: on_demand_asg?,
        node_selector,
        tolerations,
        fallback: fallback?,
        interruption: interruption?,
        headroom: headroom?,
    })
}

fn read_selector(value: &Value, path: &str, issues: &mut Issues) -> Option<AsgSelector> {
    // A bare string is the common case: the ASG's name.
    if let Value::String(name) = value {
        return non_empty_name(name, path, issues);
    }
    let mut f = Fields::of(value, path, issues);
    let name: Option<String> = f.optional("name", issues);
    let tags: Option<BTreeMap<String, String>> = f.optional("tags", issues);
    f.finish(issues);
    match (name, tags) {
        (Some(name), None) => non_empty_name(&name, path, issues),
        (None, Some(tags)) if tags.is_empty() => {
            issues.push(format!("{path}.tags"), "must name at least one tag");
            None
        }
        (None, Some(tags)) => Some(AsgSelector::Tags(tags)),
        (Some(_), Some(_)) => {
            issues.push(path, "give either `name` or `tags`, not both");
            None
        }
        (None, None) => {
            issues.push(path, "give the ASG's `name` or a `tags` selector");
            None
        }
    }
}

fn non_empty_name(name: &str, path: &str, issues: &mut Issues) -> Option<AsgSelector> {
    if name.trim().is_empty() || name.len() > 255 {
        issues.push(path, "an ASG name must have 1 to 255 characters");
        return None;
    }
    Some(AsgSelector::Name(name.to_string()))
}

fn read_fallback(value: &Value, path: &str, issues: &mut Issues) -> Option<FallbackConfig> {
    let before = issues.0.len();
    let d = FallbackConfig::default();
    let mut f = Fields::of(value, path, issues);
    let spot_launch_grace = f.or("spot_launch_grace", d.spot_launch_grace, issues);
    let unavailable_ttl = f.or("unavailable_ttl", d.unavailable_ttl, issues);
    let max_on_demand = f.or("max_on_demand", d.max_on_demand, issues);
    let failback_after = f.or("failback_after", d.failback_after, issues);
    let failback_step = f.or("failback_step", d.failback_step, issues);
    let wait_and_retry = f.or("wait_and_retry", d.wait_and_retry, issues);
    let interruption_rate = f.or("interruption_rate", d.interruption_rate, issues);
    let step_path = f.path("failback_step");
    let rate_path = f.path("interruption_rate");
    let ttl_path = f.path("unavailable_ttl");
    f.finish(issues);
    if failback_step == 0 {
        issues.push(step_path, "must be at least 1, or failback never ends");
    }
    if interruption_rate.count == 0 {
        issues.push(format!("{rate_path}.count"), "must be at least 1");
    }
    if interruption_rate.window.0.is_zero() {
        issues.push(format!("{rate_path}.window"), "must be longer than zero");
    }
    if unavailable_ttl.0.is_zero() {
        issues.push(ttl_path, "must be longer than zero, or a capacity error is forgotten at once");
    }
    (issues.0.len() == before).then_some(FallbackConfig {
        spot_launch_grace,
        unavailable_ttl,
        max_on_demand,
        failback_after,
        failback_step,
        wait_and_retry,
        interruption_rate,
    })
}

fn read_interruption(value: &Value, path: &str, issues: &mut Issues) -> Option<InterruptionConfig> {
    let before = issues.0.len();
    let d = InterruptionConfig::default();
    let mut f = Fields::of(value, path, issues);
    let surge = f.or("surge", d.surge, issues);
    let drain = f.or("drain", d.drain, issues);
    let rebalance = f.or("rebalance", d.rebalance, issues);
    let drain_timeout = f.or("drain_timeout", d.drain_timeout, issues);
    let timeout_path = f.path("drain_timeout");
    f.finish(issues);
    if drain_timeout.0.as_secs() > 900 {
        issues.push(timeout_path, "must be at most 15m, the longest a Lambda function runs");
    }
    (issues.0.len() == before).then_some(InterruptionConfig { surge, drain, rebalance, drain_timeout })
}

fn read_headroom(value: &Value, path: &str, issues: &mut Issues) -> Option<HeadroomConfig> {
    let before = issues.0.len();
    let d = HeadroomConfig::default();
    let mut f = Fields::of(value, path, issues);
    let percent_written = f.raw("percent").is_some_and(|v| !v.is_null());
    let percent = f.or("percent", d.percent, issues);
    let target_value = f.raw("target").cloned();
    let cpu = f.raw("pod_cpu");
    let memory = f.raw("pod_memory");
    let min = f.or("min", d.min, issues);
    let max = f.or("max", d.max, issues);
    let namespace: String = f.or("namespace", d.namespace, issues);
    let priority_class = f.or("priority_class", d.priority_class, issues);
    let image: String = f.or("image", d.image, issues);
    let schedules_value = f.raw("schedules").cloned();
    let interruption_boost = f.or("interruption_boost", d.interruption_boost, issues);
    let boost_for = f.or("boost_for", d.boost_for, issues);
    let p = |key: &str| walk::join(path, key);
    f.finish(issues);

    if percent > MAX_PERCENT {
        issues.push(p("percent"), format!("{percent} is above {MAX_PERCENT}%"));
    }
    let pod_cpu_millis = match cpu {
        None => d.pod_cpu_millis,
        Some(v) => positive_quantity(parse_cpu_millis, v, &p("pod_cpu"), issues),
    };
    let pod_memory_bytes = match memory {
        None => d.pod_memory_bytes,
        Some(v) => positive_quantity(parse_memory_bytes, v, &p("pod_memory"), issues),
    };
    if min > max {
        issues.push(p("min"), format!("min ({min}) is greater than max ({max})"));
    }
    if !is_dns_label(&namespace) {
        issues.push(p("namespace"), format!("`{namespace}` is not a Kubernetes namespace name"));
    }
    if !is_dns_subdomain(&priority_class.name) {
        issues.push(p("priority_class.name"), format!("`{}` is not a Kubernetes object name", priority_class.name));
    }
    if priority_class.value < CA_EXPENDABLE_CUTOFF {
        issues.push(
            p("priority_class.value"),
            format!(
                "{} is below {CA_EXPENDABLE_CUTOFF}: cluster-autoscaler ignores pending pods under its \
                 expendable cutoff ({CA_EXPENDABLE_CUTOFF}), so evicted pause pods would never bring a node back",
                priority_class.value
            ),
        );
    } else if priority_class.value >= 0 {
        issues.push(
            p("priority_class.value"),
            format!(
                "{} is not negative: pause pods must rank below workloads (priority 0) so they are preempted",
                priority_class.value
            ),
        );
    }
    if let Err(why) = check_image(&image) {
        issues.push(p("image"), why);
    }
    let mut schedules = Vec::new();
    match schedules_value {
        None | Some(Value::Null) => {}
        Some(Value::Sequence(items)) => {
            for (i, item) in items.iter().enumerate() {
                if let Some(s) = read_schedule(item, &format!("{}[{i}]", p("schedules")), issues) {
                    schedules.push(s);
                }
            }
        }
        Some(other) => issues.push(p("schedules"), format!("expected a list, found {}", kind(&other))),
    }
    if interruption_boost > MAX_PERCENT {
        issues.push(p("interruption_boost"), format!("{interruption_boost} is above {MAX_PERCENT}%"));
    }
    let target = match target_value {
        None | Some(Value::Null) => None,
        Some(v) => read_target(&v, &p("target"), percent_written, issues),
    };
    (issues.0.len() == before).then_some(HeadroomConfig {
        percent,
        pod_cpu_millis,
        pod_memory_bytes,
        min,
        max,
        namespace,
        priority_class,
        image,
        schedules,
        interruption_boost,
        boost_for,
        target,
    })
}

/// The shortest and longest wait objective taken: below a second is below what the
/// forwarder measures to; above an hour is no headroom question.
const TARGET_WAIT_RANGE: (u64, u64) = (1, 3600);
/// History is kept per day of the ring; four weeks bound the state record's size.
const MAX_HISTORY_DAYS: u64 = 28;

fn read_target(value: &Value, path: &str, percent_written: bool, issues: &mut Issues) -> Option<WaitTarget> {
    let before = issues.0.len();
    let mut f = Fields::of(value, path, issues);
    let wait_p95: Option<HumanDuration> = f.required("wait_p95", issues);
    let history: HumanDuration = f.or("history", HumanDuration::from_secs(14 * 86_400), issues);
    let floor: bool = f.or("floor", percent_written, issues);
    let tz_text: String = f.or("time_zone", Tz::UTC.name().to_string(), issues);
    let p = |key: &str| walk::join(path, key);
    f.finish(issues);
    let time_zone = tz_text.parse::<Tz>().map_err(|_| {
        issues.push(
            p("time_zone"),
            format!("`{tz_text}` is not an IANA time zone (e.g. Europe/Paris, America/New_York, UTC)"),
        )
    });
    if let Some(wait) = wait_p95 {
        let secs = wait.0.as_secs_f64();
        let (lo, hi) = TARGET_WAIT_RANGE;
        if secs < lo as f64 || secs > hi as f64 {
            issues.push(p("wait_p95"), format!("{wait} is outside {lo}s..{}m", hi / 60));
        }
    }
    let days = history.0.as_secs_f64() / 86_400.0;
    if !(1.0..=MAX_HISTORY_DAYS as f64).contains(&days) {
        let secs = history.0.as_secs();
        let written = if secs.is_multiple_of(86_400) { format!("{}d", secs / 86_400) } else { history.to_string() };
        issues.push(p("history"), format!("{written} is outside 1d..{MAX_HISTORY_DAYS}d"));
    }
    let time_zone = time_zone.ok()?;
    (issues.0.len() == before).then_some(WaitTarget { wait_p95: wait_p95?, history, floor, time_zone })
}

/// A quantity that must be more than zero (0 when it is not, after reporting why). As in
/// Kubernetes, it may be written as a string (`500m`, `2Gi`) or a plain number (`2`,
/// `1073741824`, `0.5`).
fn positive_quantity(
    parse: fn(&str) -> Result<u64, crate::units::QuantityError>,
    value: &Value,
    path: &str,
    issues: &mut Issues,
) -> u64 {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => {
            issues
                .push(path, format!("expected a Kubernetes quantity (e.g. `500m`, `2`, `2Gi`), found {}", kind(other)));
            return 0;
        }
    };
    match parse(&text) {
        Ok(0) => {
            issues.push(path, "must be more than zero");
            0
        }
        Ok(v) => v,
        Err(e) => {
            issues.push(path, e.to_string());
            0
        }
    }
}

/// Standard five-field cron (minute hour day-of-month month day-of-week).
pub fn parse_cron(text: &str) -> Result<Cron, String> {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(text)
        .map_err(|e| format!("`{text}` is not a five-field cron expression ({e})"))
}

fn read_schedule(value: &Value, path: &str, issues: &mut Issues) -> Option<HeadroomSchedule> {
    let before = issues.0.len();
    let mut f = Fields::of(value, path, issues);
    let cron_text: Option<String> = f.required("cron", issues);
    let tz_text: String = f.or("time_zone", DEFAULT_SCHEDULE_TIME_ZONE.name().to_string(), issues);
    let percent: Option<u32> = f.required("percent", issues);
    let p = |key: &str| walk::join(path, key);
    f.finish(issues);
    let cron = cron_text.as_deref().and_then(|text| match parse_cron(text) {
        Ok(c) => Some(c),
        Err(e) => {
            issues.push(p("cron"), e);
            None
        }
    });
    let time_zone = match tz_text.parse::<Tz>() {
        Ok(tz) => Some(tz),
        Err(_) => {
            issues.push(
                p("time_zone"),
                format!("`{tz_text}` is not an IANA time zone (e.g. Europe/Paris, America/New_York, UTC)"),
            );
            None
        }
    };
    if let Some(pc) = percent {
        if pc > MAX_PERCENT {
            issues.push(p("percent"), format!("{pc} is above {MAX_PERCENT}%"));
        }
    }
    if issues.0.len() != before {
        return None;
    }
    Some(HeadroomSchedule { cron_text: cron_text?, cron: cron?, time_zone: time_zone?, percent: percent? })
}

fn is_region(r: &str) -> bool {
    let parts: Vec<&str> = r.split('-').collect();
    parts.len() >= 3
        && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
        && parts.last().is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests;
