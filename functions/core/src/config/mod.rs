//! `ballast.yaml`: the deployment's pools and their fallback, interruption and
//! headroom settings. [`Config::from_yaml`] (or [`Config::from_value`]) reports every
//! problem, each with its path; a config serializes back to the same YAML shape with every
//! default filled in (`ballast config check --print`).
//!
//! Defaults have one source: the `Default` impls of [`FallbackConfig`],
//! [`InterruptionConfig`] and [`HeadroomConfig`] (and `dry_run: false`); the readers, the
//! simulator and the README's reference (checked by a test) take them from there.

mod headroom;
mod read;
mod resolve;
mod types;
mod walk;

use std::fmt;

use chrono_tz::Tz;
use serde::Serialize;
use serde_yaml_ng::Value;

pub use headroom::{parse_cron, CronError};
use read::read_config;
pub use resolve::{check_one_role, resolve_pool_asgs, selectors, AsgRef, ResolveError, ResolvedPool, Role};
pub use types::{
    AsgSelector, Config, FallbackConfig, HeadroomConfig, HeadroomSchedule, HeadroomShapes, InterruptionConfig,
    InterruptionRate, ListedShape, PoolConfig, PriorityClassConfig, RebalancePolicy, TaintEffect, Toleration,
    TolerationOperator, WaitTarget,
};
use walk::Issues;

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
    /// Why it is wrong.
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

/// The pause image by default: registry.k8s.io/pause:3.10, pinned to its digest.
pub const DEFAULT_PAUSE_IMAGE: &str =
    "registry.k8s.io/pause:3.10@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a";

/// Where a pause image may come from: the upstream image, the EKS Distro copy, or a
/// private ECR mirror (`ACCOUNT.dkr.ecr.REGION.amazonaws.com/...`). The functions may
/// create pods in the cluster, so the image is not left to any registry.
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
        "`{repository}` is not an allowed pause image repository ({allowed}, or a private ECR mirror ACCOUNT.dkr.ecr.REGION.amazonaws.com/...)",
        allowed = ALLOWED_PAUSE_REPOSITORIES.join(", ")
    )]
    NotAllowed {
        /// The image's repository (the part before the tag or digest).
        repository: String,
    },
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
    let private_ecr = repository.split_once('/').is_some_and(|(host, _)| {
        let parts: Vec<&str> = host.split('.').collect();
        matches!(parts.as_slice(), [account, "dkr", "ecr", _region, "amazonaws", "com"] if account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit()))
    });
    if ALLOWED_PAUSE_REPOSITORIES.contains(&repository) || private_ecr {
        Ok(())
    } else {
        Err(ImageError::NotAllowed { repository: repository.to_string() })
    }
}

/// Time a run needs beyond its longest drain: observe, plan, record, terminate.
pub const FUNCTION_TIMEOUT_MARGIN: std::time::Duration = std::time::Duration::from_secs(120);

#[cfg(test)]
mod tests;
