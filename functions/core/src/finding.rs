//! What `ballast doctor` reports of one check, whichever adapter made it.

use serde::Serialize;

/// One check `ballast doctor` made, and what it found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What was checked, in a word or two (such as `cluster`).
    pub check: String,
    /// Whether the check passed.
    pub ok: bool,
    /// What was found, in a sentence.
    pub detail: String,
    /// How to fix it, when it is wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    /// A check that passed.
    pub fn ok(check: impl Into<String>, detail: impl Into<String>) -> Finding {
        Finding { check: check.into(), ok: true, detail: detail.into(), fix: None }
    }

    /// A check that failed, with how to fix it.
    pub fn bad(check: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding { check: check.into(), ok: false, detail: detail.into(), fix: Some(fix.into()) }
    }
}
