use std::path::PathBuf;
use std::process::ExitCode;

use ballast_core::event::{parse_event, Origin};
use clap::Args;

use super::load_config;

#[derive(Args)]
pub struct CheckArgs {
    /// Take the deployment's account and region from this config.
    #[arg(long, conflicts_with_all = ["account", "region"])]
    config: Option<PathBuf>,
    /// Reject events from any other account.
    #[arg(long)]
    account: Option<String>,
    /// Reject events from any other region.
    #[arg(long)]
    region: Option<String>,
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let origin = match (&args.config, &args.region) {
        (Some(path), _) => match load_config(path)? {
            Ok(config) => Some(config.origin()),
            Err(issues) => anyhow::bail!("{} is invalid:\n  {}", path.display(), issues.join("\n  ")),
        },
        (None, Some(region)) => Some(Origin { account: args.account.clone(), region: region.clone() }),
        (None, None) if args.account.is_some() => anyhow::bail!("--account needs --region too"),
        (None, None) => None,
    };
    let mut invalid = 0;
    for file in &args.files {
        let outcome = std::fs::read(file)
            .map_err(|e| format!("cannot read: {e}"))
            .and_then(|bytes| parse_event(&bytes, origin.as_ref()).map_err(|e| e.to_string()));
        match outcome {
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
                    println!("{}", serde_json::json!({"file": file, "valid": false, "error": error}));
                } else {
                    println!("invalid {}  {error}", file.display());
                }
            }
        }
    }
    if !args.json {
        let note = if origin.is_none() { " (account and region not checked: pass --config or --region)" } else { "" };
        println!("{} file(s), {invalid} invalid{note}", args.files.len());
    }
    Ok(if invalid == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
