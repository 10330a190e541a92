//! Kubernetes resource quantities and human durations.
//!
//! Durations use `humantime` ("90s", "10m", "1h 30m"). Quantities follow the
//! Kubernetes grammar (`500m`, `2`, `1.5`, `2Gi`, `512M`, `1e3`): the one well-kept
//! parser (kube_quantity) drags k8s-openapi into the pure core, so the small
//! grammar is implemented here, in exact integer arithmetic.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Why a quantity string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text is empty or only blanks.
    #[error("empty quantity")]
    Empty,
    /// The text does not follow the Kubernetes quantity grammar.
    #[error("`{0}` is not a Kubernetes quantity (expected e.g. `500m`, `2`, `1.5`, `2Gi`, `512Mi`)")]
    Syntax(String),
    /// The quantity is below zero.
    #[error("`{0}` is negative; a request must be zero or more")]
    Negative(String),
    /// The quantity does not fit in a `u64` of its unit (millicores, bytes).
    #[error("`{0}` is too large")]
    Overflow(String),
}

/// A parsed quantity, kept as an exact rational `mantissa * 10^exp10 * 2^exp2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Exact {
    digits: u128,
    /// Decimal places in `digits` (from a fraction like `1.5`).
    scale: u32,
    exp10: i32,
    exp2: u32,
}

fn parse_exact(input: &str) -> Result<Exact, QuantityError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let syntax = || QuantityError::Syntax(input.to_string());
    let s = match s.strip_prefix('+') {
        Some(rest) => rest,
        None if s.starts_with('-') => return Err(QuantityError::Negative(input.to_string())),
        None => s,
    };
    let number_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(syntax());
    }
    let overflow = || QuantityError::Overflow(input.to_string());
    let mut digits: u128 = 0;
    for c in int_part.chars().chain(frac_part.chars()) {
        let d = u128::from(c.to_digit(10).ok_or_else(syntax)?);
        digits = digits.checked_mul(10).and_then(|v| v.checked_add(d)).ok_or_else(overflow)?;
    }
    let scale = u32::try_from(frac_part.len()).map_err(|_| overflow())?;
    let (exp10, exp2) = match suffix {
        "" => (0, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        other => {
            let exp = other.strip_prefix('e').or_else(|| other.strip_prefix('E')).ok_or_else(syntax)?;
            let exp: i32 = exp.parse().map_err(|_| syntax())?;
            if !(-30..=30).contains(&exp) {
                return Err(overflow());
            }
            (exp, 0)
        }
    };
    Ok(Exact { digits, scale, exp10, exp2 })
}

impl Exact {
    /// The value times `10^shift`, rounded up (Kubernetes rounds requests up).
    fn scaled_ceil(self, shift: i32, input: &str) -> Result<u64, QuantityError> {
        let overflow = || QuantityError::Overflow(input.to_string());
        let mut numerator = self.digits.checked_shl(self.exp2).ok_or_else(overflow)?;
        if self.exp2 > 0 && numerator >> self.exp2 != self.digits {
            return Err(overflow());
        }
        let exp = self.exp10 + shift - self.scale as i32;
        let mut denominator: u128 = 1;
        if exp >= 0 {
            numerator =
                numerator.checked_mul(10u128.checked_pow(exp as u32).ok_or_else(overflow)?).ok_or_else(overflow)?;
        } else {
            denominator = 10u128.checked_pow((-exp) as u32).ok_or_else(overflow)?;
        }
        let value = numerator.div_ceil(denominator);
        u64::try_from(value).map_err(|_| overflow())
    }
}

/// CPU in millicores: `500m` → 500, `2` → 2000, `1.5` → 1500.
pub fn parse_cpu_millis(input: &str) -> Result<u64, QuantityError> {
    parse_exact(input)?.scaled_ceil(3, input)
}

/// Memory in bytes: `2Gi` → 2147483648, `512M` → 512000000.
pub fn parse_memory_bytes(input: &str) -> Result<u64, QuantityError> {
    parse_exact(input)?.scaled_ceil(0, input)
}

/// Renders millicores the way Kubernetes prints them.
pub fn format_cpu_millis(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        format!("{}", millis / 1000)
    } else {
        format!("{millis}m")
    }
}

/// Renders bytes with the largest exact binary suffix.
pub fn format_memory_bytes(bytes: u64) -> String {
    for (shift, suffix) in [(40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// A duration that reads and writes as humantime text (`90s`, `10m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    /// A duration of `secs` seconds.
    pub fn from_secs(secs: u64) -> Self {
        Self(Duration::from_secs(secs))
    }

    /// The duration as a `chrono::Duration`, saturating at `chrono::Duration::MAX`.
    pub fn as_chrono(self) -> chrono::Duration {
        chrono::Duration::from_std(self.0).unwrap_or(chrono::Duration::MAX)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl std::str::FromStr for HumanDuration {
    type Err = humantime::DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        humantime::parse_duration(s.trim()).map(Self)
    }
}

impl serde::Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl schemars::JsonSchema for HumanDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A duration: numbers with their units (`90s`, `10m`, `1h 30m`, `1d`); a bare number is refused.",
            "type": "string",
            "pattern": "^\\s*([0-9]+\\s*[a-zA-Z]+\\s*)+$",
            "examples": ["90s", "10m", "1h 30m"]
        })
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = HumanDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration with its unit (e.g. `90s`, `10m`, `1h 30m`)")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<HumanDuration, E> {
                text.parse().map_err(|_| E::custom(duration_mistake(text)))
            }

            // A bare number is the usual mistake: say which unit to add.
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<HumanDuration, E> {
                Err(E::custom(duration_mistake(&n.to_string())))
            }

            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<HumanDuration, E> {
                Err(E::custom(duration_mistake(&n.to_string())))
            }

            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<HumanDuration, E> {
                Err(E::custom(duration_mistake(&n.to_string())))
            }
        }
        deserializer.deserialize_any(Text)
    }
}

/// What to write instead of `text`, which is not a duration: a number gets its unit.
pub fn duration_mistake(text: &str) -> String {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        format!("`{text}` has no unit: write `{text}s` for seconds (or `{text}m` for minutes)")
    } else {
        format!("`{text}` is not a duration: write a number and its unit, e.g. `90s`, `10m`, `1h 30m`, `1d`")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cpu_quantities() {
        assert_eq!(parse_cpu_millis("500m"), Ok(500));
        assert_eq!(parse_cpu_millis("2"), Ok(2000));
        assert_eq!(parse_cpu_millis("1.5"), Ok(1500));
        assert_eq!(parse_cpu_millis("0.0001"), Ok(1), "rounded up like Kubernetes");
        assert_eq!(parse_cpu_millis("1e3"), Ok(1_000_000));
        assert!(matches!(parse_cpu_millis("-1"), Err(QuantityError::Negative(_))));
        assert!(matches!(parse_cpu_millis("abc"), Err(QuantityError::Syntax(_))));
        assert!(matches!(parse_cpu_millis("1.2.3"), Err(QuantityError::Syntax(_))));
        assert!(matches!(parse_cpu_millis(""), Err(QuantityError::Empty)));
        assert!(matches!(parse_cpu_millis("5Xi"), Err(QuantityError::Syntax(_))));
    }

    #[test]
    fn memory_quantities() {
        assert_eq!(parse_memory_bytes("2Gi"), Ok(2 << 30));
        assert_eq!(parse_memory_bytes("512Mi"), Ok(512 << 20));
        assert_eq!(parse_memory_bytes("512M"), Ok(512_000_000));
        assert_eq!(parse_memory_bytes("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_memory_bytes("128974848"), Ok(128_974_848));
        assert!(matches!(parse_memory_bytes("1e40"), Err(QuantityError::Overflow(_))));
        assert!(matches!(parse_memory_bytes("99999Ei"), Err(QuantityError::Overflow(_))));
    }

    #[test]
    fn formatting_round_trips() {
        assert_eq!(format_cpu_millis(500), "500m");
        assert_eq!(format_cpu_millis(2000), "2");
        assert_eq!(format_memory_bytes(2 << 30), "2Gi");
        assert_eq!(format_memory_bytes(1000), "1000");
    }

    #[test]
    fn durations() {
        assert_eq!("90s".parse::<HumanDuration>().unwrap().0.as_secs(), 90);
        assert_eq!("10m".parse::<HumanDuration>().unwrap().0.as_secs(), 600);
        assert!("ten minutes".parse::<HumanDuration>().is_err());
    }

    proptest! {
        #[test]
        fn quantity_parser_never_panics(s in "\\PC{0,24}") {
            let _ = parse_cpu_millis(&s);
            let _ = parse_memory_bytes(&s);
        }

        #[test]
        fn formatted_quantities_parse_back(millis in 0u64..10_000_000, bytes in 0u64..(1u64 << 50)) {
            prop_assert_eq!(parse_cpu_millis(&format_cpu_millis(millis)), Ok(millis));
            prop_assert_eq!(parse_memory_bytes(&format_memory_bytes(bytes)), Ok(bytes));
        }
    }
}
