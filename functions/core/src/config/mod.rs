//! `ballast.yaml`: the deployment's pools and their fallback, interruption and
//! headroom settings. [`Config::from_yaml`] (or [`Config::from_value`]) reports every
//! problem, each with its path; a config serializes back to the same YAML shape with every
//! default filled in (`ballast config check --print`).
//!
//! Defaults have one source: the `Default` impls of [`FallbackConfig`],
//! [`InterruptionConfig`] and [`HeadroomConfig`] (and `dry_run: false`); the readers, the
//! simulator and the configuration reference page (checked by a test) take them from there.

mod cron;
mod headroom;
mod locate;
mod read;
mod regions;
mod resolve;
mod schema;
mod shared;
mod types;
mod walk;
mod yaml_errors;

pub use regions::{
    cluster_name_mistake, ecr_host, partition, region_mistake, EcrHost, Partition, MAX_CLUSTER_NAME, REGIONS,
};

use std::fmt;

use chrono_tz::Tz;
use serde::Serialize;
use serde_yaml_ng::Value;

pub use cron::{parse_cron, CronError};
pub use headroom::{InstanceType, LARGEST_INSTANCE};
use read::read_config;
pub use resolve::{check_one_role, resolve_pool_asgs, selectors, AsgRef, ResolveError, ResolvedPool, Role};
pub use schema::json_schema;
pub use types::{
    AsgSelector, Config, FallbackConfig, HeadroomConfig, HeadroomSchedule, HeadroomShapes, InterruptionConfig,
    InterruptionRate, ListedShape, PoolConfig, PriorityClassConfig, RebalancePolicy, TaintEffect, Toleration,
    TolerationOperator, WaitTarget,
};
/// serde's wording in words (shared with [`crate::json_errors`]).
pub(crate) use walk::plain as serde_in_words;
use walk::Issues;
pub use yaml_errors::yaml_issue;

/// Top-level keys that begin so are free-form (blocks for YAML anchors to share, as in
/// docker-compose): not read, not refused.
pub const FREE_FORM_PREFIX: &str = "x-";

/// The 1-based line and column where `path` (`pools[0].headroom.min`) is written in the
/// YAML `text`, or its nearest written ancestor: for any YAML file read as the config is
/// (the simulator's scenarios).
pub fn locate_path(text: &str, path: &str) -> Option<(usize, usize)> {
    locate::locate(text, path)
}

/// serde's error message in the words of the YAML, as the config's are: what to write
/// (`a whole number, 0 or more`), never a Rust type (`u32`); the nearest known key for an
/// unknown one.
pub fn plain_message(serde_message: &str) -> String {
    walk::plain(serde_message)
}

/// The page that says what Ballast runs on (docs/src/compatibility.md), which a warning
/// about an unsupported platform links to.
pub const COMPATIBILITY_PAGE: &str = "https://github.com/ballast-dev/ballast/blob/main/docs/src/compatibility.md";

/// The lowest priority cluster-autoscaler still scales up for (its default
/// `--expendable-pods-priority-cutoff`).
pub const CA_EXPENDABLE_CUTOFF: i32 = -10;

/// The Kubernetes group the function roles are mapped to (their EKS access entries, or
/// `aws-auth`), which infra/k8s/functions-rbac.yaml binds.
pub const FUNCTIONS_GROUP: &str = "ballast:functions";

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
    /// Where in the config: a path (`pools[0].headroom.min`), or `(file)` for the whole file.
    pub path: String,
    /// Why it is wrong, and what to write instead.
    pub message: String,
    /// The 1-based line of the YAML the path is written on (of its nearest written
    /// ancestor when it is not written itself), when read from text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// The 1-based column on that line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
}

impl ConfigIssue {
    /// An issue at `path`, not yet placed in the text.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigIssue { path: path.into(), message: message.into(), line: None, column: None }
    }

    /// `line L, column C: ` when placed, else nothing: the prefix of a message.
    pub fn position(&self) -> String {
        match (self.line, self.column) {
            (Some(line), Some(column)) => format!("line {line}, column {column}: "),
            _ => String::new(),
        }
    }
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} problem(s) in the config:\n{}", .0.len(), .0.iter().map(|i| format!("  {}{i}", i.position())).collect::<Vec<_>>().join("\n"))]
pub struct ConfigErrors(pub Vec<ConfigIssue>);

/// The most issues placed in the text: each is one more read of it.
const MAX_PLACED_ISSUES: usize = 200;

impl Config {
    /// Reads and validates a config file's text. Refused before parsing: more than
    /// [`MAX_CONFIG_BYTES`], or nesting deeper than [`MAX_CONFIG_DEPTH`].
    pub fn from_yaml(text: &str) -> Result<Config, ConfigErrors> {
        Config::from_yaml_with_warnings(text).map(|(config, _)| config)
    }

    /// [`Config::from_yaml`], and what is valid but likely not what was meant (a memory
    /// quantity in decimal units, `2G`), each placed in the text as the problems are:
    /// `config check` warns of them, and `--strict` fails on them.
    pub fn from_yaml_with_warnings(text: &str) -> Result<(Config, Vec<ConfigIssue>), ConfigErrors> {
        let file_issue = |message: String| ConfigErrors(vec![ConfigIssue::new("(file)", message)]);
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
            serde_yaml_ng::from_str(text).map_err(|e| ConfigErrors(vec![yaml_issue(text, &e)]))?
        };
        let place = |mut issues: Vec<ConfigIssue>| {
            for issue in issues.iter_mut().take(MAX_PLACED_ISSUES) {
                if let Some((line, column)) = locate::locate(text, &issue.path) {
                    (issue.line, issue.column) = (Some(line), Some(column));
                }
            }
            issues
        };
        Config::from_value_with_warnings(value)
            .map(|(config, warnings)| (config, place(warnings)))
            .map_err(|ConfigErrors(issues)| ConfigErrors(place(issues)))
    }

    /// Validates a config already read as YAML (what the simulator builds): every
    /// problem, each with its path, as [`Config::from_yaml`].
    pub fn from_value(value: Value) -> Result<Config, ConfigErrors> {
        Config::from_value_with_warnings(value).map(|(config, _)| config)
    }

    /// [`Config::from_value`], and its warnings (see [`Config::from_yaml_with_warnings`]).
    pub fn from_value_with_warnings(value: Value) -> Result<(Config, Vec<ConfigIssue>), ConfigErrors> {
        // An empty document is an empty mapping: every required field is missing.
        let mut value = if value.is_null() { Value::Mapping(Default::default()) } else { value };
        // Shared settings: YAML merge keys (`<<: *defaults`), then a `defaults:` block.
        value
            .apply_merge()
            .map_err(|e| ConfigErrors(vec![ConfigIssue::new("(file)", format!("merge key `<<`: {e}"))]))?;
        // `x-...` top-level keys hold blocks for anchors to share (docker-compose's
        // convention): free-form, and done with once the aliases are merged.
        if let Some(top) = value.as_mapping_mut() {
            top.retain(|key, _| !key.as_str().is_some_and(|k| k.starts_with(FREE_FORM_PREFIX)));
        }
        let pools_as_written = value.get("pools").cloned().unwrap_or(Value::Null);
        let mut issues = Issues::default();
        let defaults = shared::apply_defaults(&mut value, &mut issues);
        let config = read_config(&value, &mut issues);
        let Issues(errors, warnings) = issues;
        let blame = |list: Vec<ConfigIssue>| match &defaults {
            Some(defaults) => shared::blame_defaults(list, &pools_as_written, defaults),
            None => list,
        };
        match config {
            Some(config) if errors.is_empty() => Ok((config, blame(warnings))),
            _ => Err(ConfigErrors(blame(errors))),
        }
    }

    /// The deployment's own account and region, which events must come from.
    pub fn origin(&self) -> crate::event::Origin {
        crate::event::Origin { account: self.account.clone(), region: self.region.clone() }
    }

    /// The pool of this name, if the config has one.
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

/// The pool of `pools` nearest to `name`, a pool name mistyped (an override's).
pub fn nearest_pool<'a>(name: &str, pools: &[&'a str]) -> Option<&'a str> {
    walk::nearest(name, pools)
}

/// The pause image by default: registry.k8s.io/pause:3.10, pinned to its digest.
pub const DEFAULT_PAUSE_IMAGE: &str =
    "registry.k8s.io/pause:3.10@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a";

/// Where a pause image may come from: the upstream image, the EKS Distro copy, or a
/// private ECR mirror (`ACCOUNT.dkr.ecr.REGION.amazonaws.com/...`, `.amazonaws.com.cn` in
/// China, `dkr.ecr-fips.` for a FIPS endpoint). The functions may create pods in the
/// cluster, so the image is not left to any registry.
pub const ALLOWED_PAUSE_REPOSITORIES: [&str; 2] =
    ["registry.k8s.io/pause", "public.ecr.aws/eks-distro/kubernetes/pause"];

/// Why an image may not be the pause image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Blank.
    #[error("must name a container image")]
    Empty,
    /// No `@sha256:` digest: a moved tag could change what runs.
    #[error("`{image}` is not pinned: add its digest (`@sha256:...`), so a moved tag cannot change what runs")]
    Unpinned {
        /// The image as written.
        image: String,
    },
    /// A digest that is not 64 lowercase hex digits.
    #[error("`{image}`: the digest must be 64 lowercase hex digits")]
    BadDigest {
        /// The image as written.
        image: String,
    },
    /// A repository other than [`ALLOWED_PAUSE_REPOSITORIES`] or a private ECR mirror.
    #[error(
        "`{repository}` is not an allowed pause image repository ({allowed}, or a private ECR mirror \
         ACCOUNT.dkr.ecr.REGION.amazonaws.com/..., .amazonaws.com.cn in China, dkr.ecr-fips. for FIPS)",
        allowed = ALLOWED_PAUSE_REPOSITORIES.join(", ")
    )]
    NotAllowed {
        /// The image's repository (the part before the tag or digest).
        repository: String,
    },
    /// A private ECR host that cannot serve: unknown region, wrong DNS suffix, no FIPS.
    #[error("`{repository}`: {why}")]
    BadMirror {
        /// The image's repository.
        repository: String,
        /// What is wrong with its host.
        why: String,
    },
}

/// The private ECR host of `image`, if it is pulled from one.
pub fn image_ecr_host(image: &str) -> Option<EcrHost<'_>> {
    image.trim().split_once('/').and_then(|(host, _)| ecr_host(host))
}

/// Why `image` may not be the pause image: it must be pinned (`@sha256:` and 64 hex
/// digits, so a moved tag cannot change what runs) and from an allowed repository.
pub fn check_image(image: &str) -> Result<(), ImageError> {
    let image = image.trim();
    if image.is_empty() {
        return Err(ImageError::Empty);
    }
    let Some((name, digest)) = image.split_once("@sha256:") else {
        return Err(ImageError::Unpinned { image: image.to_string() });
    };
    if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(ImageError::BadDigest { image: image.to_string() });
    }
    let repository = match name.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => name,
    };
    if ALLOWED_PAUSE_REPOSITORIES.contains(&repository) {
        return Ok(());
    }
    let ecr = repository.split_once('/').and_then(|(host, _)| ecr_host(host));
    match ecr.map(|host| host.mistake()) {
        Some(None) => Ok(()),
        Some(Some(why)) => Err(ImageError::BadMirror { repository: repository.to_string(), why }),
        None => Err(ImageError::NotAllowed { repository: repository.to_string() }),
    }
}

/// Time a run needs beyond its longest drain: observe, plan, record, terminate.
pub const FUNCTION_TIMEOUT_MARGIN: std::time::Duration = std::time::Duration::from_secs(120);

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_messages;
