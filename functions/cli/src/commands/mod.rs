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

/// Exit codes, the same for every command: 0 ok (valid, done, nothing found),
/// [`INVALID`] for findings or an invalid input, [`UNUSABLE`] for a usage error or an
/// input that cannot be read (clap's own usage errors exit 2 too).
pub const INVALID: u8 = 1;
pub const UNUSABLE: u8 = 2;

/// The exit codes as `ballast --help` lists them (and the CLI reference after it).
pub const EXIT_CODES_HELP: &str = "\
Exit codes (every command):
  0  ok: valid, done, nothing found
  1  findings or invalid input: an event or config is invalid (events check, config
     check; with --strict a warning too), a doctor check failed, letters wait in the
     dead-letter queue (dead-letters, also those a replay kept), config push --diff
     found changes, an input is invalid, or a call to AWS failed
  2  usage: a bad flag, argument or combination, an input that cannot be read or an
     output that cannot be written (checked before anything runs)

With --json, a failure is one JSON object on stderr and nothing on stdout:
  {\"error\": {\"kind\": \"usage\" | \"unreadable\" | \"unwritable\" | \"invalid\" | \"failed\",
             \"message\": \"...\", \"exit_code\": 1 | 2, \"input\": \"FILE\", \"problems\": [...]}}";

/// Why a command could not judge its input at all (exit [`UNUSABLE`]); every other error
/// is an invalid input or a failed call (exit [`INVALID`]).
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("cannot read {}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}", path.display())]
    Unwritable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
}

/// An input that was read and is not valid (exit [`INVALID`]): which file, and with a
/// config each problem where it is, so `--json` can name them apart.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    pub input: Option<PathBuf>,
    pub message: String,
    pub problems: Vec<ConfigIssue>,
}

impl Invalid {
    /// `input` is not what it must be, for the reason `why` (the whole chain is kept).
    pub fn input(input: &Path, why: impl std::fmt::Display) -> Invalid {
        Invalid { input: Some(input.to_path_buf()), message: format!("{why:#}"), problems: Vec::new() }
    }

    /// A config that is not valid, each of its problems on a line of the message, where it
    /// is as `config check` says it (`FILE:LINE:COLUMN: path: message`).
    pub fn config(input: &Path, errors: ConfigErrors) -> Invalid {
        let file = input.display().to_string();
        let lines: Vec<String> =
            errors.0.iter().map(|i| located(&file, &i.path, &i.message, i.line, i.column)).collect();
        Invalid {
            input: Some(input.to_path_buf()),
            message: format!("{} is invalid:\n  {}", input.display(), lines.join("\n  ")),
            problems: errors.0,
        }
    }
}

/// One problem of an input as compilers print it, so editors jump there:
/// `FILE:LINE:COLUMN: path: message` (`path: message` when not placed, the message alone
/// for the whole file).
pub fn located(input: &str, path: &str, message: &str, line: Option<usize>, column: Option<usize>) -> String {
    let at = match (line, column) {
        (Some(line), Some(column)) => format!("{input}:{line}:{column}: "),
        _ => String::new(),
    };
    if path.is_empty() {
        format!("{at}{message}")
    } else {
        format!("{at}{path}: {message}")
    }
}

/// An error and its causes, each said once. A port error's message says its source
/// already (an AWS SDK error, in words: `ballast_aws_errors::describe`), so the chain
/// stops there rather than repeat the SDK's own chain.
pub fn said(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for e in err.chain() {
        let text = e.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        if e.downcast_ref::<ballast_core::ports::PortError>().is_some() {
            break;
        }
    }
    parts.join(": ")
}

/// The exit code for a command's error: [`UNUSABLE`] when it (or its cause) is
/// [`Unusable`], else [`INVALID`].
pub fn exit_code(err: &anyhow::Error) -> ExitCode {
    ExitCode::from(exit_status(err))
}

fn exit_status(err: &anyhow::Error) -> u8 {
    if err.chain().any(|e| e.downcast_ref::<Unusable>().is_some()) {
        UNUSABLE
    } else {
        INVALID
    }
}

/// A command's error as `--json` prints it on stderr:
/// `{"error": {"kind", "message", "exit_code"[, "input"][, "problems"]}}`. `kind` is
/// `usage`, `unreadable` (an input that cannot be read), `unwritable` (an output, with
/// its `output` path), `invalid` (an input that is not valid) or `failed` (anything
/// else: a call to AWS, the cluster).
pub fn error_object(err: &anyhow::Error) -> serde_json::Value {
    let mut error = serde_json::json!({ "message": said(err), "exit_code": exit_status(err) });
    let (kind, input, problems) = match err
        .chain()
        .find_map(|e| e.downcast_ref::<Unusable>().map(Ok).or_else(|| e.downcast_ref::<Invalid>().map(Err)))
    {
        Some(Ok(Unusable::Usage(_))) => ("usage", None, None),
        Some(Ok(Unusable::Unreadable { path, .. })) => ("unreadable", Some(path.as_path()), None),
        Some(Ok(Unusable::Unwritable { path, .. })) => {
            error["output"] = path.display().to_string().into();
            ("unwritable", None, None)
        }
        Some(Err(invalid)) => ("invalid", invalid.input.as_deref(), Some(&invalid.problems)),
        None => ("failed", None, None),
    };
    error["kind"] = kind.into();
    if let Some(input) = input {
        error["input"] = input.display().to_string().into();
    }
    if let Some(problems) = problems.filter(|p| !p.is_empty()) {
        error["problems"] = serde_json::to_value(problems).unwrap_or_default();
    }
    serde_json::json!({ "error": error })
}

/// Says what went wrong on stderr (one JSON object with `json`, else `error: ...`) and
/// gives the exit code: what every command does with its error.
pub fn report_error(err: &anyhow::Error, json: bool) -> ExitCode {
    if json {
        eprintln!("{}", error_object(err));
    } else {
        eprintln!("error: {}", said(err));
    }
    exit_code(err)
}

/// `--json` for a command whose output is JSON either way (`plan`, `invoke`): with it an
/// error is a JSON object on stderr too, as with every other command's `--json`.
#[derive(clap::Args)]
pub struct JsonErrors {
    /// Print an error as one JSON object on stderr (the output is JSON either way).
    #[arg(long)]
    // main reads `--json` off the command line, before clap (its own errors are JSON
    // too): the parsed flag is there for `--help` and for clap to accept it.
    #[allow(dead_code)]
    json: bool,
}

/// A usage error (exit [`UNUSABLE`]) with its reason.
pub fn usage(why: impl Into<String>) -> anyhow::Error {
    Unusable::Usage(why.into()).into()
}

/// Reads a whole file, or says it cannot be read.
pub fn read(path: &Path) -> Result<Vec<u8>, Unusable> {
    std::fs::read(path).map_err(|source| Unusable::Unreadable { path: path.to_path_buf(), source })
}

/// Reads a whole file as UTF-8 text: unreadable, or an invalid input when it is not text.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    String::from_utf8(read(path)?)
        .map_err(|e| Invalid::input(path, format!("{} is not UTF-8 text ({})", path.display(), e.utf8_error())).into())
}

/// Reads and validates a config file: `Err` when it cannot be read; `Ok(Err)` with every
/// problem when it is invalid. At most [`MAX_CONFIG_BYTES`] are read: a bigger file is
/// refused without reading the rest.
pub fn load_config(path: &Path) -> Result<Result<Config, ConfigErrors>, Unusable> {
    Ok(load_config_with_warnings(path)?.map(|(config, _)| config))
}

/// [`load_config`], and the config's warnings (valid, but likely not what was meant),
/// each placed in the text.
pub fn load_config_with_warnings(path: &Path) -> Result<Result<(Config, Vec<ConfigIssue>), ConfigErrors>, Unusable> {
    Ok(read_config_text(path)?.and_then(|text| Config::from_yaml_with_warnings(&text)))
}

/// A config file's text: `Err` when it cannot be read; `Ok(Err)` when it is not text or
/// has more than [`MAX_CONFIG_BYTES`] (the rest is not read).
pub fn read_config_text(path: &Path) -> Result<Result<String, ConfigErrors>, Unusable> {
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
        Ok(text) => Ok(Ok(text)),
        Err(e) => file_issue(format!("not UTF-8 text ({})", e.utf8_error())),
    }
}

/// A config that must be valid for the command to go on: its problems are the error.
pub fn valid_config(path: &Path) -> anyhow::Result<Config> {
    Ok(load_config(path)?.map_err(|errors| Invalid::config(path, errors))?)
}
