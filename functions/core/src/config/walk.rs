//! A small walker over a YAML mapping that reads every field independently, so one
//! bad field never hides the next: `ballast config check` reports them all.

use serde::de::DeserializeOwned;
use serde_yaml_ng::{Mapping, Value};

use super::ConfigIssue;

pub(super) struct Issues(pub Vec<ConfigIssue>);

impl Issues {
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigIssue { path: path.into(), message: message.into() });
    }
}

pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Reads the fields of one mapping; `finish` reports keys nobody asked for.
pub(super) struct Fields<'a> {
    map: Option<&'a Mapping>,
    path: String,
    known: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    /// `value` must be a mapping; anything else is reported once and yields no fields.
    pub fn of(value: &'a Value, path: &str, issues: &mut Issues) -> Self {
        let map = match value {
            Value::Mapping(map) => Some(map),
            Value::Null => None,
            other => {
                issues.push(display_path(path), format!("expected a mapping, found {}", kind(other)));
                None
            }
        };
        Self { map, path: path.to_string(), known: Vec::new() }
    }

    pub fn path(&self, key: &str) -> String {
        join(&self.path, key)
    }

    pub fn raw(&mut self, key: &'static str) -> Option<&'a Value> {
        self.known.push(key);
        self.map?.get(key).filter(|v| !v.is_null())
    }

    pub fn optional<T: DeserializeOwned>(&mut self, key: &'static str, issues: &mut Issues) -> Option<T> {
        let path = self.path(key);
        let value = self.raw(key)?;
        decode(value, &path, issues)
    }

    pub fn required<T: DeserializeOwned>(&mut self, key: &'static str, issues: &mut Issues) -> Option<T> {
        let path = self.path(key);
        if self.map.is_some() && self.raw(key).is_none() {
            issues.push(path, "is required");
            return None;
        }
        self.optional(key, issues)
    }

    pub fn or<T: DeserializeOwned>(&mut self, key: &'static str, default: T, issues: &mut Issues) -> T {
        // A present but invalid field is reported; the default only keeps checking going.
        self.optional(key, issues).unwrap_or(default)
    }

    pub fn finish(self, issues: &mut Issues) {
        let Some(map) = self.map else { return };
        for key in map.keys() {
            let name = key.as_str().map(str::to_string).unwrap_or_else(|| format!("{key:?}"));
            if !self.known.contains(&name.as_str()) {
                issues.push(
                    join(&self.path, &name),
                    format!("unknown field; expected one of: {}", self.known.join(", ")),
                );
            }
        }
    }
}

pub(super) fn decode<T: DeserializeOwned>(value: &Value, path: &str, issues: &mut Issues) -> Option<T> {
    match serde_path_to_error::deserialize::<_, T>(value.clone()) {
        Ok(v) => Some(v),
        Err(err) => {
            let inner = err.path().to_string();
            let full = if inner == "." {
                path.to_string()
            } else if inner.starts_with('[') {
                format!("{path}{inner}")
            } else {
                join(path, &inner)
            };
            issues.push(full, err.into_inner().to_string());
            None
        }
    }
}

pub(super) fn display_path(path: &str) -> String {
    if path.is_empty() {
        "(top level)".to_string()
    } else {
        path.to_string()
    }
}

pub(super) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}
