//! Whether a pod may go on a pool's nodes, as kube-scheduler judges it, from plain text:
//! the forwarder (on the API's objects) and `ballast config check --pods` (on kubectl's
//! JSON) place pods in pools by the same rules.

use std::collections::BTreeMap;

use crate::config::{TaintEffect, Toleration, TolerationOperator};

/// A taint the pool's nodes carry, as implied by a toleration its pause pods need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// Its key.
    pub key: String,
    /// `None`: any value (the pool tolerates the key with `Exists`).
    pub value: Option<String>,
    /// `None`: any effect.
    pub effect: Option<TaintEffect>,
}

/// The taint a pool's toleration implies its nodes carry; `None` for one that never
/// keeps a pod off (PreferNoSchedule) or tolerates anything (a key-less Exists).
pub fn implied_taint(t: &Toleration) -> Option<Taint> {
    if t.effect == Some(TaintEffect::PreferNoSchedule) {
        return None;
    }
    let key = t.key.clone()?;
    let value = match t.operator.unwrap_or(TolerationOperator::Equal) {
        TolerationOperator::Exists => None,
        TolerationOperator::Equal => Some(t.value.clone().unwrap_or_default()),
    };
    Some(Taint { key, value, effect: t.effect })
}

/// A pod's toleration as the API writes it.
#[derive(Debug, Clone, Copy)]
pub struct PodToleration<'a> {
    /// `key`.
    pub key: Option<&'a str>,
    /// `operator`: `Exists` or `Equal` (the default).
    pub operator: Option<&'a str>,
    /// `value`.
    pub value: Option<&'a str>,
    /// `effect`.
    pub effect: Option<&'a str>,
}

/// Whether the pod's toleration tolerates the taint.
pub fn tolerates(t: PodToleration, taint: &Taint) -> bool {
    let effect_ok = match (t.effect, taint.effect) {
        (None | Some(""), _) => true,
        (Some(_), None) => false,
        (Some(e), Some(want)) => e == effect_name(want),
    };
    if !effect_ok {
        return false;
    }
    match (t.key, t.operator) {
        (None | Some(""), Some("Exists")) => true,
        (Some(key), Some("Exists")) => key == taint.key,
        (Some(key), _) => key == taint.key && taint.value.as_deref() == Some(t.value.unwrap_or_default()),
        (None, _) => false,
    }
}

fn effect_name(effect: TaintEffect) -> &'static str {
    match effect {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

/// Whether a node selector requirement (`key`, `operator`, `values`) holds for a pool
/// whose nodes are known to carry `labels`. Labels not known (a hostname, a zone the
/// nodes differ in) cannot rule a pool out for `NotIn`/`DoesNotExist`, and cannot admit
/// it for `In`/`Exists`.
pub fn requirement_holds(key: &str, operator: &str, values: &[String], labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(key);
    match operator {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(Ok(bound))) =
                (value.and_then(|v| v.parse::<i64>().ok()), values.first().map(|b| b.parse::<i64>()))
            else {
                return false;
            };
            if operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}
