//! Where a config path (`pools[0].headroom.min`) is written in the YAML text: its line and
//! column, so an error points at them. The walker reads a `Value`, which keeps no
//! positions; the YAML parser's own errors do, so the text is read once more by a
//! deserializer that follows the path and stops with an error at its end, whose mark is
//! the position of that key (or list item). A path that is not written as such (a key
//! merged from an anchor, or from `defaults:`) points at its nearest written ancestor.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The message the seek stops with; any other error is the parser's and places nothing.
const HERE: &str = "ballast: the path ends here";

/// The 1-based line and column of `path` in `text`, or of its nearest ancestor written
/// there; `None` for the whole file or a text that does not parse.
pub(super) fn locate(text: &str, path: &str) -> Option<(usize, usize)> {
    if path.is_empty() || path.starts_with('(') {
        return None;
    }
    let result = Seek { rest: path }.deserialize(serde_yaml_ng::Deserializer::from_str(text));
    let error = result.err()?;
    // Its text is prefixed with the path serde_yaml_ng followed.
    if !error.to_string().contains(HERE) {
        return None;
    }
    let location = error.location()?;
    Some((location.line(), location.column()))
}

/// Follows `rest` down the document; fails with [`HERE`] where it ends (or where the
/// document has no next step), `Ok` only when the text has no such node at all.
struct Seek<'p> {
    rest: &'p str,
}

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let rest = self.rest.strip_prefix('.').unwrap_or(self.rest);
        while let Some(after) = map.next_key_seed(Key { rest })? {
            match after {
                Some(after) => return map.next_value_seed(Seek { rest: after }),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        // No such key here: this mapping is the nearest place.
        Err(de::Error::custom(HERE))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let index = self
            .rest
            .strip_prefix('[')
            .and_then(|r| r.split_once(']'))
            .and_then(|(n, after)| n.parse::<usize>().ok().map(|n| (n, after)));
        if let Some((index, after)) = index {
            for _ in 0..index {
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    return Err(de::Error::custom(HERE));
                }
            }
            if after.is_empty() {
                // The item itself: stop at its first event.
                seq.next_element_seed(Seek { rest: "" })?;
            } else {
                seq.next_element_seed(Seek { rest: after })?;
            }
        }
        Err(de::Error::custom(HERE))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(HERE))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(E::custom(HERE))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(E::custom(HERE))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(E::custom(HERE))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(HERE))
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(HERE))
    }
}

/// A mapping key: stops with [`HERE`] at the key the path ends with (so an error points at
/// the key, not at its value on the next line); `Some(rest)` for the key the path goes on
/// through; `None` for any other key.
struct Key<'p> {
    rest: &'p str,
}

impl<'de, 'p> DeserializeSeed<'de> for Key<'p> {
    type Value = Option<&'p str>;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, 'p> Visitor<'de> for Key<'p> {
    type Value = Option<&'p str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        // Keys may hold dots (`nvidia.com/gpu`): the key must be followed by the end,
        // `.` or `[` in the path.
        let Some(after) = self.rest.strip_prefix(key) else { return Ok(None) };
        match after.chars().next() {
            None => Err(E::custom(HERE)),
            Some('.' | '[') => Ok(Some(after)),
            Some(_) => Ok(None),
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
        self.visit_str(&n.to_string())
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
        self.visit_str(&n.to_string())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}
