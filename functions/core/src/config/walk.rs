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
        // Each key is known once, however often it is read, so an unknown field's
        // message lists every expected key once.
        if !self.known.contains(&key) {
            self.known.push(key);
        }
        self.map?.get(key).filter(|v| !v.is_null())
    }

    pub fn optional<T: DeserializeOwned>(&mut self, key: &'static str, issues: &mut Issues) -> Option<T> {
        let path = self.path(key);
        let value = self.raw(key)?;
        decode(value, &path, issues)
    }

    pub fn required<T: DeserializeOwned>(&mut self, key: &'static str, issues: &mut Issues) -> Option<T> {
        let path = self.path(key);
        let value = self.raw(key);
        if self.map.is_some() && value.is_none() {
            issues.push(path, "is required");
            return None;
        }
        decode(value?, &path, issues)
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

/// Where `text` nests lists and mappings deeper than `max`: the 1-based line and the
/// depth reached, or `None`. A cheap pass before the YAML parser, which would take
/// seconds (its cost grows with the square of the nesting) before its own limit:
/// block nesting is counted by indentation and compact `- `/`? ` entries, flow
/// nesting by `[` and `{` outside quotes and comments. It may count a level or two
/// that YAML would not (never fewer), so `max` must leave room above real configs.
pub(super) fn nesting_too_deep(text: &str, max: usize) -> Option<(usize, usize)> {
    let mut flow = 0usize; // open `[` / `{`
    let mut blocks: Vec<usize> = Vec::new(); // columns of the open block levels
    let mut quote: Option<u8> = None; // inside a quoted scalar
    let mut block_scalar: Option<usize> = None; // inside `|` / `>` text, deeper than this column
    for (n, line) in text.lines().enumerate() {
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|b| **b == b' ').count();
        let blank = bytes[indent..].iter().all(|b| b.is_ascii_whitespace()) || bytes.get(indent) == Some(&b'#');
        if let Some(column) = block_scalar {
            if blank || indent > column {
                continue;
            }
            block_scalar = None;
        }
        let mut i = 0;
        if flow == 0 && quote.is_none() {
            if blank {
                continue;
            }
            while blocks.last().is_some_and(|&top| top >= indent) {
                blocks.pop();
            }
            blocks.push(indent);
            i = indent;
            // `- - x`, `? x`: each compact entry opens one more level.
            while i + 1 < bytes.len() && matches!(bytes[i], b'-' | b'?') && bytes[i + 1] == b' ' {
                i += 2;
                while bytes.get(i) == Some(&b' ') {
                    i += 1;
                }
                blocks.push(i);
            }
            if blocks.len() > max {
                return Some((n + 1, blocks.len()));
            }
        }
        let mut previous = b' ';
        while i < bytes.len() {
            let b = bytes[i];
            match quote {
                Some(b'\'') if b == b'\'' => {
                    if bytes.get(i + 1) == Some(&b'\'') {
                        i += 1;
                    } else {
                        quote = None;
                    }
                }
                Some(b'"') if b == b'\\' => i += 1,
                Some(b'"') if b == b'"' => quote = None,
                Some(_) => {}
                None => match b {
                    b'#' if previous == b' ' || previous == b'\t' => break,
                    b'"' | b'\'' if matches!(previous, b' ' | b'\t' | b'[' | b'{' | b',' | b':' | b'-') => {
                        quote = Some(b)
                    }
                    b'[' | b'{' if matches!(previous, b' ' | b'\t' | b'[' | b'{' | b',' | b':' | b'-' | b'?') => {
                        flow += 1;
                        if blocks.len() + flow > max {
                            return Some((n + 1, blocks.len() + flow));
                        }
                    }
                    b']' | b'}' => flow = flow.saturating_sub(1),
                    b'|' | b'>' if flow == 0 && matches!(previous, b' ' | b'\t') => {
                        block_scalar = Some(indent);
                        break;
                    }
                    _ => {}
                },
            }
            previous = b;
            i += 1;
        }
    }
    None
}
