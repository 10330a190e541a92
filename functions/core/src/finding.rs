//! What `ballast doctor` reports of one check, whichever adapter made it.

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: String,
    pub ok: bool,
    pub detail: String,
    /// How to fix it, when it is wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    pub fn ok(check: impl Into<String>, detail: impl Into<String>) -> Finding {
        Finding { check: check.into(), ok: true, detail: detail.into(), fix: None }
    }

    pub fn bad(check: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding { check: check.into(), ok: false, detail: detail.into(), fix: Some(fix.into()) }
    }
}
