//! A small walker over a YAML mapping that reads every field independently, so one
//! bad field never hides the next: `ballast config check` reports them all.

use serde::de::DeserializeOwned;
use serde_yaml_ng::{Mapping, Value};

use super::ConfigIssue;

/// The problems found (`.0`), and what is valid but likely not what was meant
/// (`.1`, warnings: `config check` prints them, `--strict` fails on them).
#[derive(Default)]
pub(super) struct Issues(pub Vec<ConfigIssue>, pub Vec<ConfigIssue>);

impl Issues {
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigIssue::new(path, message));
    }

    pub fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.1.push(ConfigIssue::new(path, message));
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
                issues.push(join(&self.path, &name), unknown_key(&name, &self.known));
            }
        }
    }
}

/// Why `key` is refused among `known`: the nearest known key when it looks like a typo,
/// then every key this mapping takes.
pub(super) fn unknown_key(key: &str, known: &[&str]) -> String {
    let all = known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
    match nearest(key, known) {
        Some(near) => format!("unknown key; did you mean `{near}`? (this mapping takes {all})"),
        None => format!("unknown key; this mapping takes {all}"),
    }
}

/// The candidate nearest to `word`, if it is near enough to be what was meant: at most a
/// third of its letters edited (a plural, a transposition, a missing underscore), or the
/// same words in another case or separator (`spotAsgs`, `spot-asgs`).
pub(crate) fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    nearest_within(word, candidates, (word.chars().count() / 3).max(1))
}

/// The candidate nearest to `word` within `max_edits` (or differing only in case and
/// separators).
pub(crate) fn nearest_within<'a>(word: &str, candidates: &[&'a str], max_edits: usize) -> Option<&'a str> {
    let squash = |s: &str| s.chars().filter(|c| c.is_ascii_alphanumeric()).collect::<String>().to_ascii_lowercase();
    let word_squashed = squash(word);
    if let Some(same) = candidates.iter().find(|c| squash(c) == word_squashed) {
        return Some(same);
    }
    let (distance, best) =
        candidates.iter().map(|c| (strsim::damerau_levenshtein(word, c), *c)).min_by_key(|(d, _)| *d)?;
    (distance <= max_edits).then_some(best)
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
            let message = plain(&err.into_inner().to_string());
            issues.push(full, message);
            None
        }
    }
}

/// serde's message in the words of the YAML: what to write, never a Rust type (`u32`,
/// `struct Toleration`). serde's own wording is fixed (`invalid type: X, expected Y`,
/// `unknown variant`, `unknown field`, `missing field`), so it is translated here, once,
/// for every field the config reads through serde.
pub(crate) fn plain(message: &str) -> String {
    let split =
        |rest: &str| rest.rsplit_once(", expected ").map(|(found, expected)| (found.to_string(), expected.to_string()));
    if let Some((found, expected)) = message.strip_prefix("invalid type: ").and_then(split) {
        return format!("expected {}, found {}", what_to_write(&expected), plain_found(&found));
    }
    if let Some((found, expected)) = message.strip_prefix("invalid value: ").and_then(split) {
        return format!("{} is out of range: expected {}", plain_found(&found), what_to_write(&expected));
    }
    if let Some(rest) = message.strip_prefix("unknown variant ").or_else(|| message.strip_prefix("unknown field ")) {
        let is_field = message.starts_with("unknown field ");
        let (word, options) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let word = word.trim_matches('`');
        let options = options.trim_start_matches("one of ").replace(" or ", ", ");
        let options: Vec<&str> = options.split(", ").map(|o| o.trim_matches('`')).filter(|o| !o.is_empty()).collect();
        let all = options.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>().join(", ");
        let near = nearest(word, &options).map(|n| format!("did you mean `{n}`? ")).unwrap_or_default();
        return if is_field {
            format!("unknown key `{word}`; {near}(this mapping takes {all})")
        } else {
            format!("`{word}` is not one of {all}; {near}").trim_end_matches("; ").to_string()
        };
    }
    if let Some(field) = message.strip_prefix("missing field ") {
        return format!("{field} is required");
    }
    message.to_string()
}

/// serde's `expected` (a visitor's words, or a Rust type) as what to write in YAML.
fn what_to_write(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number, 0 or more (e.g. `10`)".to_string(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number (e.g. `-10` or `10`)".to_string(),
        "f32" | "f64" => "a number (e.g. `0.5`)".to_string(),
        "a boolean" => "`true` or `false`".to_string(),
        "a string" | "a borrowed string" => "text (quote it if it looks like a number: `\"123\"`)".to_string(),
        "a map" => "a mapping (`key: value` lines)".to_string(),
        "a sequence" => "a list (`- item` lines, or `[a, b]`)".to_string(),
        other if other.starts_with("struct ") => "a mapping (`key: value` lines)".to_string(),
        other if other.starts_with("enum ") || other.starts_with("variant identifier") => {
            "one of the listed words".to_string()
        }
        other => other.to_string(),
    }
}

/// serde's `unexpected` (`integer \`180\``, `string \"x\"`) as it was written.
fn plain_found(found: &str) -> String {
    let quoted = |s: &str| s.trim_matches(|c| c == '`' || c == '"').to_string();
    for (prefix, what) in
        [("integer ", "the number"), ("floating point ", "the number"), ("string ", "the text"), ("boolean ", "")]
    {
        if let Some(rest) = found.strip_prefix(prefix) {
            let written = quoted(rest);
            return if what.is_empty() { format!("`{written}`") } else { format!("{what} `{written}`") };
        }
    }
    match found {
        "map" => "a mapping".to_string(),
        "sequence" => "a list".to_string(),
        "unit value" => "nothing".to_string(),
        other => other.to_string(),
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
