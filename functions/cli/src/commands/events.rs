use std::path::PathBuf;
use std::process::ExitCode;

use ballast_core::event::{parse_event, sqs_bodies, Event, EventError, Origin};
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
    /// EventBridge envelopes, or Lambda SQS batches or SQS records (each body is checked,
    /// named by its message id).
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let origin = match (&args.config, &args.region) {
        (Some(path), _) => match load_config(path)? {
            Ok(config) => Some(config.origin()),
            // No event is checked against an invalid config: an error, not a finding.
            Err(errors) => return Err(super::Invalid::config(path, errors).into()),
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
        for (message_id, parsed) in events_in(&bytes, origin.as_ref()) {
            let shown = match &message_id {
                Some(id) => format!("{} [{id}]", file.display()),
                None => file.display().to_string(),
            };
            let mut line = serde_json::json!({"file": file});
            if let Some(id) = &message_id {
                line["message_id"] = id.as_str().into();
            }
            match parsed {
                Ok(event) => {
                    if args.json {
                        line["valid"] = true.into();
                        line["event"] = serde_json::to_value(&event)?;
                        println!("{line}");
                    } else {
                        println!("ok      {shown}  {}", serde_json::to_string(&event.signal)?);
                    }
                }
                Err(error) => {
                    invalid += 1;
                    if args.json {
                        line["valid"] = false.into();
                        line["error"] = error.to_string().into();
                        println!("{line}");
                    } else {
                        println!("invalid {shown}  {error}");
                    }
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

/// The events of a file: an EventBridge envelope, or each body of a Lambda SQS batch or of
/// one SQS record (a dead letter as the queue delivered it), with its message id.
pub fn events_in(bytes: &[u8], origin: Option<&Origin>) -> Vec<(Option<String>, Result<Event, EventError>)> {
    match sqs_bodies(bytes) {
        None => vec![(None, parse_event(bytes, origin))],
        Some(Err(e)) => vec![(None, Err(e))],
        Some(Ok(bodies)) => {
            bodies.into_iter().map(|b| (Some(b.message_id), parse_event(b.body.as_bytes(), origin))).collect()
        }
    }
}
