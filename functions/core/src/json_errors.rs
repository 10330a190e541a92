//! serde_json's errors in words, as the config's are said (the same translator,
//! `config::serde_in_words`): what to write, never a Rust type (`expected u32`).

/// A JSON input's problem: serde's message in words, without serde_json's own
/// ` at line L column C` (the position is in [`JsonPosition`]).
pub fn in_words(err: &serde_json::Error) -> String {
    let said = err.to_string();
    let message = match position(err) {
        Some(JsonPosition { line, column }) => {
            said.strip_suffix(&format!(" at line {line} column {column}")).unwrap_or(&said).to_string()
        }
        None => said,
    };
    message_in_words(&message)
}

/// serde's message (from a JSON value already read, with no position) in words, with
/// JSON's names for what the config's YAML calls mappings and lists.
pub fn message_in_words(message: &str) -> String {
    // chrono's parse errors name what went wrong in its reading, not what to write.
    const CHRONO: [&str; 6] = [
        "input contains invalid characters",
        "premature end of input",
        "trailing input",
        "input is out of range",
        "input is not enough for unique date and time",
        "no possible date and time matching input",
    ];
    if CHRONO.contains(&message) {
        return format!("not a time ({message}): write it as RFC 3339, e.g. `2026-11-29T09:00:00Z`");
    }
    crate::config::serde_in_words(message)
        .replace("a mapping (`key: value` lines)", "an object (`{...}`)")
        .replace("a list (`- item` lines, or `[a, b]`)", "an array (`[...]`)")
        .replace("found a list", "found an array")
        .replace("found a mapping", "found an object")
}

/// Where in the text a JSON error is (1-based), when serde_json knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JsonPosition {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1.
    pub column: usize,
}

/// The error's place in the text, when it has one (an error from a value has none).
pub fn position(err: &serde_json::Error) -> Option<JsonPosition> {
    (err.line() > 0).then(|| JsonPosition { line: err.line(), column: err.column() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Asg {
        desired: u32,
        name: String,
    }

    #[test]
    fn a_time_that_does_not_parse_says_how_to_write_one() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct At {
            time: chrono::DateTime<chrono::Utc>,
        }
        let err = serde_json::from_str::<At>(r#"{"time": "yesterday"}"#).unwrap_err();
        let said = in_words(&err);
        assert!(said.starts_with("not a time (input contains invalid characters): write it as RFC 3339"), "{said}");
    }

    #[test]
    fn serde_json_errors_say_what_to_write_and_never_a_rust_type() {
        let err = serde_json::from_str::<Asg>(r#"{"desired": -1, "name": "a"}"#).unwrap_err();
        assert_eq!(position(&err), Some(JsonPosition { line: 1, column: 14 }));
        assert_eq!(in_words(&err), "the number `-1` is out of range: expected a whole number, 0 or more (e.g. `10`)");
        let err = serde_json::from_str::<Asg>(r#"{"desired": 1, "nmae": "a"}"#).unwrap_err();
        assert_eq!(in_words(&err), "unknown key `nmae`; did you mean `name`? (this mapping takes `desired`, `name`)");
        let err = serde_json::from_str::<Asg>(r#"{"desired": 1, "name": 5}"#).unwrap_err();
        let said = in_words(&err);
        assert!(said.starts_with("expected text"), "{said}");
        for rust in ["u32", "u64", "a string", "invalid type", "unknown field", " at line "] {
            assert!(!said.contains(rust), "{said}");
        }
    }
}
