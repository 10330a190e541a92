use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use ballast_core::ports::FixedClock;
use ballast_core::reconcile::Reconciler;
use ballast_core::snapshot::{Snapshot, SnapshotPorts};
use chrono::{DateTime, Utc};
use clap::Args;

use super::{located, valid_config, Invalid, Unusable};

#[derive(Args)]
pub struct PlanArgs {
    /// The config file (default: $BALLAST_CONFIG_FILE).
    #[arg(long, env = "BALLAST_CONFIG_FILE")]
    config: PathBuf,
    /// State snapshot (JSON): ASGs and their instances, nodes, and per pool its record, demand
    /// and headroom (docs/src/reference/events.md, "State snapshot").
    #[arg(long)]
    state: PathBuf,
    /// Event files: EventBridge envelopes, or a Lambda SQS batch or one SQS record (each body
    /// an envelope, e.g. a dead letter as the queue delivered it); none means a scheduled
    /// reconcile of every pool.
    #[arg(long = "event")]
    events: Vec<PathBuf>,
    /// The planning time (RFC 3339); defaults to the newest event's time.
    #[arg(long)]
    now: Option<DateTime<Utc>>,
    #[command(flatten)]
    json: super::JsonErrors,
}

pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let config = valid_config(&args.config)?;
    let state_text = super::read_text(&args.state)?;
    let snapshot = Snapshot::from_json(&state_text).map_err(|e| {
        let at = e.position();
        let file = args.state.display().to_string();
        let path = if e.path == "." { "" } else { e.path.as_str() };
        Invalid::input(&args.state, located(&file, path, &e.message(), at.map(|a| a.line), at.map(|a| a.column)))
    })?;
    let origin = config.origin();
    let mut events = Vec::new();
    for file in &args.events {
        let bytes = super::read(file)?;
        // A Lambda SQS batch or one SQS record: each body is an event.
        for (message_id, parsed) in super::events::events_in(&bytes, Some(&origin)) {
            let what = match &message_id {
                Some(id) => format!("{}: message {id}", file.display()),
                None => file.display().to_string(),
            };
            events.push(parsed.map_err(|e| Invalid::input(file, format!("{what} is not a valid event: {e}")))?);
        }
    }
    if events.is_empty() {
        let now = args.now.ok_or_else(|| Unusable::Usage("--now is required when no --event gives the time".into()))?;
        events.push(ballast_core::event::Event {
            id: format!("ballast-plan-{}", now.timestamp()),
            time: now,
            source: "ballast.cli".into(),
            detail_type: ballast_core::event::EventKind::ScheduledEvent.detail_type().into(),
            signal: ballast_core::event::Signal::Reconcile,
        });
    }
    let now = args.now.or_else(|| events.iter().map(|e| e.time).max()).context("no time to plan at")?;

    let ports = SnapshotPorts::new(snapshot);
    let reconciler = Reconciler {
        config: Arc::new(config),
        autoscaling: ports.clone(),
        cluster: ports.clone(),
        store: ports,
        clock: FixedClock::new(now),
        owner: "ballast-plan".into(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let (plans, unrouted) = runtime.block_on(reconciler.plan_only(events))?;
    #[derive(serde::Serialize)]
    struct Output {
        plans: Vec<ballast_core::plan::Plan>,
        unrouted: Vec<ballast_core::reconcile::Unrouted>,
    }
    println!("{}", serde_json::to_string_pretty(&Output { plans, unrouted })?);
    Ok(ExitCode::SUCCESS)
}
