//! The YAML parser's own errors, said as the config's are: where (the key itself, not the
//! mapping around it) and what to write. Two need more than the parser says: a key written
//! twice (the parser marks the mapping that holds it, not the second key) and a number too
//! large for any setting (the parser names the Rust type it tried, `u128`).

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use super::{locate, walk, ConfigIssue};

/// A YAML text that does not parse, as one issue: the path and position of what is wrong
/// when the parser's error says it, and what to write instead. Used for `ballast.yaml` and
/// for scenario files alike.
pub fn yaml_issue(text: &str, error: &serde_yaml_ng::Error) -> ConfigIssue {
    let said = error.to_string();
    if said.contains("duplicate entry with key") {
        if let Some(issue) = duplicate_key(text) {
            return issue;
        }
    }
    if let Some(issue) = too_large_number(&said) {
        let mut issue = issue;
        if let Some((line, column)) = locate::locate(text, &issue.path) {
            (issue.line, issue.column) = (Some(line), Some(column));
        }
        return issue;
    }
    let mut issue = ConfigIssue::new("(file)", format!("not valid YAML: {said}"));
    if let Some(at) = error.location() {
        (issue.line, issue.column) = (Some(at.line()), Some(at.column()));
    }
    issue
}

/// `path: invalid type: integer `N` as u128, expected any YAML value at line L column C`:
/// a whole number past what YAML's values hold (the parser tried 128 bits).
fn too_large_number(said: &str) -> Option<ConfigIssue> {
    let (path, rest) = match said.split_once(": invalid type: integer `") {
        Some((path, rest)) => (path.to_string(), rest),
        None => (String::new(), said.strip_prefix("invalid type: integer `")?),
    };
    let (number, rest) = rest.split_once('`')?;
    if !(rest.starts_with(" as u128") || rest.starts_with(" as i128")) {
        return None;
    }
    let expected = super::schema::expected_at(&path)
        .unwrap_or_else(|| format!("a whole number of at most {} (most settings take far less)", u64::MAX));
    let path = if path.is_empty() { "(file)".to_string() } else { path };
    Some(ConfigIssue::new(path, format!("the number `{number}` is too large: expected {expected}")))
}

/// The first key written twice in one mapping, at the second writing, naming the first.
fn duplicate_key(text: &str) -> Option<ConfigIssue> {
    let error = Walk { path: String::new() }.deserialize(serde_yaml_ng::Deserializer::from_str(text)).err()?;
    let said = error.to_string();
    let path = said.split_once(MARK_OPEN)?.1.split_once(MARK_CLOSE)?.0.to_string();
    let mut issue = ConfigIssue::new(path.clone(), "written twice in the same mapping: keep one (YAML takes neither)");
    if let Some((line, _)) = locate::locate(text, &path) {
        issue.message = format!("written twice in the same mapping (first on line {line}): keep one");
    }
    if let Some(at) = error.location() {
        (issue.line, issue.column) = (Some(at.line()), Some(at.column()));
    }
    Some(issue)
}

/// The duplicate's path travels in the error's text between these marks.
const MARK_OPEN: &str = "ballast-duplicate<";
const MARK_CLOSE: &str = ">";

/// Walks the whole document, every mapping's keys remembered, and stops with an error at
/// the first key seen twice in one mapping (the parser's mark is then that key's).
struct Walk {
    path: String,
}

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: Vec<String> = Vec::new();
        while let Some(key) = map.next_key_seed(Key { parent: &self.path, seen: &mut seen })? {
            map.next_value_seed(Walk { path: walk::join(&self.path, &key) })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        while seq.next_element_seed(Walk { path: format!("{}[{index}]", self.path) })?.is_some() {
            index += 1;
        }
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_i128<E: de::Error>(self, _: i128) -> Result<(), E> {
        Ok(())
    }

    fn visit_u128<E: de::Error>(self, _: u128) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// One mapping key, as text: an error at it when the mapping had it already.
struct Key<'a> {
    parent: &'a str,
    seen: &'a mut Vec<String>,
}

impl Key<'_> {
    fn take<E: de::Error>(self, key: String) -> Result<String, E> {
        if self.seen.contains(&key) {
            return Err(E::custom(format!("{MARK_OPEN}{}{MARK_CLOSE}", walk::join(self.parent, &key))));
        }
        self.seen.push(key.clone());
        Ok(key)
    }
}

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<String, E> {
        self.take(key.to_string())
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<String, E> {
        self.take(b.to_string())
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<String, E> {
        self.take(n.to_string())
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<String, E> {
        self.take(n.to_string())
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<String, E> {
        self.take(n.to_string())
    }

    fn visit_unit<E: de::Error>(self) -> Result<String, E> {
        self.take("~".to_string())
    }

    // A mapping or list as a key (`? [a, b]`): not a setting, never a duplicate here.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<String, A::Error> {
        while map.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
        Ok(String::new())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<String, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(String::new())
    }
}
