//! Settings written once for every pool: a `defaults:` block merged under each pool (the
//! pool's own keys win, mappings merged key by key), after YAML merge keys
//! (`<<: *anchor`) are applied. Problems in what came from `defaults:` are reported there,
//! once, not once per pool.

use serde_yaml_ng::{Mapping, Value};

use super::walk::{self, Issues};
use super::ConfigIssue;

/// The pool keys `defaults:` may not set: they say which pool it is.
const PER_POOL: [&str; 3] = ["name", "spot_asgs", "on_demand_asg"];
/// The pool keys `defaults:` may set.
pub(super) const SHARED: [&str; 5] = ["node_selector", "tolerations", "fallback", "interruption", "headroom"];

/// Takes `defaults:` out of the top level and merges it under every pool. `None` when
/// there is none; its own key problems are pushed to `issues`.
pub(super) fn apply_defaults(value: &mut Value, issues: &mut Issues) -> Option<Mapping> {
    let top = value.as_mapping_mut()?;
    let defaults = top.remove("defaults")?;
    let defaults = match defaults {
        Value::Mapping(map) => map,
        Value::Null => return None,
        other => {
            issues.push("defaults", format!("expected a mapping of pool settings, found {}", walk::kind(&other)));
            return None;
        }
    };
    let mut shared = Mapping::new();
    for (key, setting) in defaults {
        let name = key.as_str().unwrap_or_default().to_string();
        if PER_POOL.contains(&name.as_str()) {
            issues.push(
                format!("defaults.{name}"),
                "names one pool's ASGs or name: write it in each pool, not in defaults",
            );
        } else if SHARED.contains(&name.as_str()) {
            shared.insert(key, setting);
        } else {
            issues.push(format!("defaults.{name}"), walk::unknown_key(&name, &SHARED));
        }
    }
    if let Some(Value::Sequence(pools)) = top.get_mut("pools") {
        for pool in pools.iter_mut().filter_map(Value::as_mapping_mut) {
            merge_under(pool, &shared);
        }
    }
    Some(shared)
}

/// Adds `defaults`' keys `into` lacks; where both have a mapping, merges it the same way.
fn merge_under(into: &mut Mapping, defaults: &Mapping) {
    for (key, value) in defaults {
        match (into.get_mut(key), value) {
            (None, _) | (Some(Value::Null), _) => {
                into.insert(key.clone(), value.clone());
            }
            (Some(Value::Mapping(own)), Value::Mapping(shared)) => merge_under(own, shared),
            (Some(_), _) => {}
        }
    }
}

/// Moves issues about settings a pool took from `defaults:` (not written in the pool
/// itself, `pools` as written) to `defaults.…`, once.
pub(super) fn blame_defaults(issues: Vec<ConfigIssue>, pools: &Value, defaults: &Mapping) -> Vec<ConfigIssue> {
    let defaults = Value::Mapping(defaults.clone());
    let mut out: Vec<ConfigIssue> = Vec::new();
    for mut issue in issues {
        if let Some((index, rest)) = pool_path(&issue.path) {
            let written = pools.get(index).is_some_and(|pool| value_at(pool, rest).is_some());
            if !written && value_at(&defaults, rest).is_some() {
                issue.path = format!("defaults.{rest}");
            }
        }
        if !out.contains(&issue) {
            out.push(issue);
        }
    }
    out
}

/// `pools[3].headroom.min` → (3, `headroom.min`).
fn pool_path(path: &str) -> Option<(usize, &str)> {
    let rest = path.strip_prefix("pools[")?;
    let (index, rest) = rest.split_once("].")?;
    Some((index.parse().ok()?, rest))
}

/// The value at `path` (`headroom.schedules[0].cron`) under `value`, if written there.
/// Keys may hold dots (`nvidia.com/gpu`): the longest key that fits is taken.
pub(super) fn value_at<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    if path.is_empty() {
        return Some(value);
    }
    if let Some(rest) = path.strip_prefix('[') {
        let (index, after) = rest.split_once(']')?;
        let item = value.as_sequence()?.get(index.parse::<usize>().ok()?)?;
        return value_at(item, after.strip_prefix('.').unwrap_or(after));
    }
    let map = value.as_mapping()?;
    map.iter()
        .filter_map(|(k, v)| {
            let key = k.as_str()?;
            let after = path.strip_prefix(key)?;
            match after.chars().next() {
                None => Some((key.len(), v, "")),
                Some('.') => Some((key.len(), v, &after[1..])),
                Some('[') => Some((key.len(), v, after)),
                Some(_) => None,
            }
        })
        .max_by_key(|(len, _, _)| *len)
        .and_then(|(_, v, after)| value_at(v, after))
}
