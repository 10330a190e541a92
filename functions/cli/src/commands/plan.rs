use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context};
use ballast_core::event::parse_event;
use ballast_core::memory::{FixedClock, InMemory, World};
use ballast_core::reconcile::Reconciler;
use chrono::{DateTime, Utc};
use clap::Args;

use super::load_config;

#[derive(Args)]
pub struct PlanArgs {
    #[arg(long)]
    config: PathBuf,
    /// State snapshot: ASGs and instances, nodes, and per pool its record, demand and headroom.
    #[arg(long)]
    state: PathBuf,
    /// Event files (EventBridge envelopes); none means a scheduled reconcile of every pool.
    #[arg(long = "event")]
    events: Vec<PathBuf>,
    /// The planning time (RFC 3339); defaults to the newest event's time.
    #[arg(long)]
    now: Option<DateTime<Utc>>,
}

pub fn run(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let config = match load_config(&args.config)? {
        Ok(config) => config,
        Err(issues) => bail!("{} is invalid:\n  {}", args.config.display(), issues.join("\n  ")),
    };
    let state_text =
        std::fs::read_to_string(&args.state).with_context(|| format!("cannot read {}", args.state.display()))?;
    let world: World = serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&state_text))
        .map_err(|e| anyhow::anyhow!("{}: {}: {}", args.state.display(), e.path(), e.inner()))?;
    let origin = config.origin();
    let mut events = Vec::new();
    for file in &args.events {
        let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
        events.push(
            parse_event(&bytes, Some(&origin)).with_context(|| format!("{} is not a valid event", file.display()))?,
        );
    }
    if events.is_empty() {
        let now = args.now.context("--now is required when no --event gives the time")?;
        events.push(ballast_core::event::Event {
            id: format!("ballast-plan-{}", now.timestamp()),
            time: now,
            source: "ballast.cli".into(),
            detail_type: "Scheduled Event".into(),
            signal: ballast_core::event::Signal::Reconcile,
        });
    }
    let now = args.now.or_else(|| events.iter().map(|e| e.time).max()).context("no time to plan at")?;

    let memory = InMemory::new(world);
    let reconciler = Reconciler {
        config: Arc::new(config),
        autoscaling: memory.clone(),
        cluster: memory.clone(),
        store: memory,
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
