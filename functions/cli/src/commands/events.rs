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
    /// (a file that cannot be read is an error object on stderr, and none is checked).
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
    // Every file is read before any is checked: one that cannot be read is an error
    // (exit 2; with --json one object on stderr, nothing on stdout), not a finding.
    let mut read = Vec::with_capacity(args.files.len());
    let mut unreadable: Vec<Unusable> = Vec::new();
    for file in &args.files {
        match super::read(file) {
            Ok(bytes) => read.push((file, bytes)),
            Err(err) => unreadable.push(err),
        }
    }
    let names: Vec<String> = unreadable
        .iter()
        .filter_map(|e| match e {
            Unusable::Unreadable { path, .. } => Some(path.display().to_string()),
            _ => None,
        })
        .collect();
    if let Some(first) = unreadable.into_iter().next() {
        let (count, all) = (names.len(), args.files.len());
        return Err(anyhow::Error::new(first)
            .context(format!("{count} of {all} file(s) cannot be read ({}); none was checked", names.join(", "))));
    }
    let mut invalid = 0;
    for (file, bytes) in read {
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
                        // A finding, as a compiler's: on stderr; stdout keeps the events read.
                        eprintln!("invalid {shown}  {error}");
                    }
                }
            }
        }
    }
    if !args.json {
        let note = if origin.is_none() { " (account and region not checked: pass --config or --region)" } else { "" };
        println!("{} file(s), {invalid} invalid{note}", args.files.len());
    }
    Ok(if invalid > 0 { ExitCode::from(super::INVALID) } else { ExitCode::SUCCESS })
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
