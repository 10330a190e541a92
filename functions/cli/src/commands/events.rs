use std::path::PathBuf;
use std::process::ExitCode;

use ballast_core::event::{parse_event, Origin};
use clap::Args;

use super::{load_config, Unusable};

#[derive(Args)]
pub struct CheckArgs {
    /// Take the deployment's account and region from this config.
    #[arg(long, env = "BALLAST_CONFIG_FILE", conflicts_with_all = ["account", "region"])]
    config: Option<PathBuf>,
    /// Reject events from any other account.
    #[arg(long, requires = "region")]
    account: Option<String>,
    /// Reject events from any other region.
    #[arg(long)]
    region: Option<String>,
    /// One JSON object per line instead of text: `file`, `valid`, and `event` or `error`
    /// (`unreadable: true` when the file could not be read).
    #[arg(long)]
    json: bool,
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let origin = match (&args.config, &args.region) {
        (Some(path), _) => match load_config(path)? {
            Ok(config) => Some(config.origin()),
            Err(errors) => {
                if args.json {
                    println!(
                        "{}",
                        serde_json::json!({"file": path, "valid": false, "config": true, "errors": errors.0})
                    );
                    return Ok(ExitCode::from(super::INVALID));
                }
                let lines: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
                anyhow::bail!("{} is invalid:\n  {}", path.display(), lines.join("\n  "))
            }
        },
        (None, Some(region)) => Some(Origin { account: args.account.clone(), region: region.clone() }),
        (None, None) => None,
    };
    let (mut invalid, mut unreadable) = (0, 0);
    for file in &args.files {
        let bytes = match super::read(file) {
            Ok(bytes) => bytes,
            Err(err @ Unusable::Unreadable { .. }) => {
                unreadable += 1;
                let error = format!("{:#}", anyhow::Error::new(err));
                if args.json {
                    println!(
                        "{}",
                        serde_json::json!({"file": file, "valid": false, "unreadable": true, "error": error})
                    );
                } else {
                    println!("unreadable {}  {error}", file.display());
                }
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        match parse_event(&bytes, origin.as_ref()) {
            Ok(event) => {
                if args.json {
                    println!("{}", serde_json::json!({"file": file, "valid": true, "event": event}));
                } else {
                    println!("ok      {}  {}", file.display(), serde_json::to_string(&event.signal)?);
                }
            }
            Err(error) => {
                invalid += 1;
                if args.json {
                    println!("{}", serde_json::json!({"file": file, "valid": false, "error": error.to_string()}));
                } else {
                    println!("invalid {}  {error}", file.display());
                }
            }
        }
    }
    if !args.json {
        let note = if origin.is_none() { " (account and region not checked: pass --config or --region)" } else { "" };
        let unread = if unreadable > 0 { format!(", {unreadable} unreadable") } else { String::new() };
        println!("{} file(s), {invalid} invalid{unread}{note}", args.files.len());
    }
    // A file that could not be read was not checked at all: that outranks an invalid one.
    Ok(if unreadable > 0 {
        ExitCode::from(super::UNUSABLE)
    } else if invalid > 0 {
        ExitCode::from(super::INVALID)
    } else {
        ExitCode::SUCCESS
    })
}
