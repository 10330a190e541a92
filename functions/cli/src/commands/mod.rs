#[cfg(feature = "aws")]
pub mod aws;
pub mod config;
#[cfg(feature = "aws")]
pub mod config_home;
pub mod config_pods;
pub mod events;
pub mod plan;
pub mod simulate;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ballast_core::config::{Config, ConfigErrors, ConfigIssue, MAX_CONFIG_BYTES};

/// Exit codes, the same for every command: 0 valid, [`INVALID`] when an input is
/// invalid, [`UNUSABLE`] for a usage error or a file that cannot be read (clap's own
/// usage errors exit 2 too).
pub const INVALID: u8 = 1;
pub const UNUSABLE: u8 = 2;

/// Why a command could not judge its input at all (exit [`UNUSABLE`]); every other error
/// is an invalid input (exit [`INVALID`]).
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("cannot read {}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {} as kubectl's {what} list", path.display())]
    Malformed {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{0}")]
    Usage(String),
}

/// The exit code for a command's error: [`UNUSABLE`] when it (or its cause) is
/// [`Unusable`], else [`INVALID`].
pub fn exit_code(err: &anyhow::Error) -> ExitCode {
    if err.chain().any(|e| e.downcast_ref::<Unusable>().is_some()) {
        ExitCode::from(UNUSABLE)
    } else {
        ExitCode::from(INVALID)
    }
}

/// Reads a whole file, or says it cannot be read.
pub fn read(path: &Path) -> Result<Vec<u8>, Unusable> {
    std::fs::read(path).map_err(|source| Unusable::Unreadable { path: path.to_path_buf(), source })
}

/// Reads and validates a config file: `Err` when it cannot be read; `Ok(Err)` with every
/// problem when it is invalid. At most [`MAX_CONFIG_BYTES`] are read: a bigger file is
/// refused without reading the rest.
pub fn load_config(path: &Path) -> Result<Result<Config, ConfigErrors>, Unusable> {
    let unreadable = |source| Unusable::Unreadable { path: path.to_path_buf(), source };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_CONFIG_BYTES as u64 + 1).read_to_end(&mut bytes))
        .map_err(unreadable)?;
    let file_issue = |message: String| Ok(Err(ConfigErrors(vec![ConfigIssue::new("(file)", message)])));
    if bytes.len() > MAX_CONFIG_BYTES {
        return file_issue(format!("more bytes than a config may have ({MAX_CONFIG_BYTES} bytes, 1 MiB)"));
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok(Config::from_yaml(&text)),
        Err(e) => file_issue(format!("not UTF-8 text ({})", e.utf8_error())),
    }
}

/// A config that must be valid for the command to go on: its problems are the error.
pub fn valid_config(path: &Path) -> anyhow::Result<Config> {
    load_config(path)?.map_err(|errors| {
        let lines: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
        anyhow::anyhow!("{} is invalid:\n  {}", path.display(), lines.join("\n  "))
    })
}
