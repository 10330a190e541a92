//! Commands that talk to AWS, behind the `aws` feature.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use aws_lambda_events::event::sqs::SqsEvent;
use ballast_cli::ops::doctor::{cluster, Doctor, Finding, Wiring};
use ballast_lambda::handlers::HandlerError;
use ballast_lambda::{AwsApp, ConfigSource, Function, Settings};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use serde_json::{json, Value};

use super::valid_config;

/// A function by its name, one of [`Function::ALL`]'s.
fn function_named() -> impl TypedValueParser<Value = Function> {
    PossibleValuesParser::new(Function::ALL.map(Function::name))
        .try_map(|name| Function::from_name(&name).ok_or_else(|| format!("no function is named {name}")))
}

#[derive(Args)]
pub struct InvokeArgs {
    #[arg(value_parser = function_named())]
    function: Function,
    /// An EventBridge envelope (wrapped in an SQS message for the interruption
    /// function), a Scheduler input, or an SQS event with `Records`.
    #[arg(long)]
    event: PathBuf,
    /// The config file (default: $BALLAST_CONFIG_FILE); otherwise BALLAST_CONFIG /
    /// BALLAST_CONFIG_PARAMETER.
    #[arg(long, env = "BALLAST_CONFIG_FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    json: super::JsonErrors,
}

/// The EMF metric lines a local invoke's run writes (Lambda's go to stdout, where
/// CloudWatch reads them): kept here and given in the result object (`metrics`), or
/// with `--json` in the error object, so that stdout and stderr each hold one object.
static METRICS: std::sync::Mutex<Vec<Value>> = std::sync::Mutex::new(Vec::new());

fn keep_metric(doc: &Value) {
    METRICS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(doc.clone());
}

fn kept_metrics() -> Vec<Value> {
    std::mem::take(&mut *METRICS.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
}

pub fn invoke(args: InvokeArgs) -> anyhow::Result<ExitCode> {
    let json = args.json.json;
    match invoke_run(args) {
        Ok(code) => Ok(code),
        // With --json the run's metrics go in the error object: stderr holds it alone.
        Err(err) if json => {
            let mut object = super::error_object(&err);
            object["error"]["metrics"] = Value::Array(kept_metrics());
            eprintln!("{object}");
            Ok(super::exit_code(&err))
        }
        Err(err) => Err(err),
    }
}

fn invoke_run(args: InvokeArgs) -> anyhow::Result<ExitCode> {
    let text = super::read_text(&args.event)?;
    let payload: Value = serde_json::from_str(&text)
        .map_err(|e| super::Invalid::input(&args.event, format!("{} is not JSON: {e}", args.event.display())))?;
    // A config file is judged here as by every command (unreadable: exit 2; invalid: its
    // problems where they are, exit 1), before the handler reads it again.
    if let Some(path) = &args.config {
        valid_config(path)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let mut settings = match &args.config {
            Some(path) => Settings::from_env(|name| match name {
                "BALLAST_CONFIG_FILE" => Some(path.display().to_string()),
                "BALLAST_CONFIG" | "BALLAST_CONFIG_PARAMETER" => None,
                other => std::env::var(other).ok(),
            })?,
            None => Settings::from_env(|name| std::env::var(name).ok())?,
        };
        settings.owner = format!("ballast-invoke-{}", std::process::id());
        let sdk = ballast_aws::sdk_config().await;
        let config = ballast_lambda::app::load_config(&settings.config, &sdk).await?;
        // Which config ran, for a person; with --json stderr is for the error object only.
        if let (ConfigSource::File(path), false) = (&settings.config, args.json.json) {
            eprintln!("config {}: cluster {}", path.display(), config.cluster);
        }
        let mut app = AwsApp::build(args.function.name(), settings, config, &sdk).await?;
        app.metrics = keep_metric;
        if let ballast_lambda::cluster::FunctionCluster::Kube(_, Some(wait)) = &mut app.reconciler.cluster {
            wait.metrics = keep_metric;
        }
        let mut output = match args.function {
            Function::Interruption => {
                let batch: SqsEvent = if payload.get("Records").is_some() {
                    serde_json::from_value(payload)?
                } else {
                    serde_json::from_value(json!({ "Records": [{ "messageId": "ballast-invoke", "body": payload.to_string() }] }))?
                };
                let (response, summary) = app.interruption(batch).await;
                json!({ "batchItemFailures": response.batch_item_failures.iter().map(|f| &f.item_identifier).collect::<Vec<_>>(), "summary": summary })
            }
            Function::Schedule | Function::ClusterEvents => match app.direct(payload).await {
                Ok(summary) => json!({ "summary": summary }),
                Err(err) => bail!(locally(err)),
            },
        };
        output["metrics"] = Value::Array(kept_metrics());
        println!("{}", serde_json::to_string_pretty(&output)?);
        // The handler answered, but not for all of it: an event it refused, a pool that
        // failed, a message Lambda would redeliver. Its result says which; the run is
        // the finding of exit 1, as in Lambda it would be an error or a retry.
        Ok(if answered_in_part(&output) { ExitCode::from(1) } else { ExitCode::SUCCESS })
    })
}

/// Whether a handler's result names an invalid event, a failed pool or a batch item to
/// redeliver.
fn answered_in_part(output: &Value) -> bool {
    let listed = |v: Option<&Value>| v.and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    let summary = output.get("summary");
    listed(output.get("batchItemFailures"))
        || listed(summary.and_then(|s| s.get("invalid")))
        || listed(summary.and_then(|s| s.get("errors")))
}

/// A handler's error as a local run means it: Lambda's wording names what its invoker
/// does next (a retry, the dead-letter queue), and a local invoke has neither.
fn locally(err: HandlerError) -> String {
    match err {
        HandlerError::Retryable(why) => format!("failed (a retry may mend this: invoke again): {why}"),
        HandlerError::Failed(why) => format!("failed (a retry will not mend this: fix the cause first): {why}"),
    }
}

#[derive(Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    deployment: DeploymentArgs,
    /// The queue the AWS events go to (default `ballast-CLUSTER-events`).
    #[arg(long)]
    queue: Option<String>,
    /// Print JSON findings.
    #[arg(long)]
    json: bool,
    /// Skip the cluster side: the function roles' access entries and what needs the
    /// kubeconfig (RBAC, forwarder, aws-auth).
    #[arg(long)]
    no_cluster: bool,
}

/// A deployment by its config and the name of its dead-letter queue.
#[derive(Args)]
pub struct DeploymentArgs {
    /// The config file (default: $BALLAST_CONFIG_FILE): the cluster names the resources.
    #[arg(long, env = "BALLAST_CONFIG_FILE")]
    config: PathBuf,
    /// The events queue's dead-letter queue (default `ballast-CLUSTER-events-dlq`).
    #[arg(long)]
    dead_letter_queue: Option<String>,
    /// The config's SSM parameter (default `/ballast/CLUSTER/config`; the templates'
    /// ConfigParameterName).
    #[arg(long)]
    config_parameter: Option<String>,
}

impl DeploymentArgs {
    /// The config, and the deployment's resource names with the dead-letter queue given.
    fn wiring(&self) -> anyhow::Result<(ballast_core::config::Config, Wiring)> {
        let config = valid_config(&self.config)?;
        let mut wiring = Wiring::conventional(&config);
        if let Some(q) = &self.dead_letter_queue {
            wiring.dead_letter_queue = q.clone();
        }
        if let Some(p) = &self.config_parameter {
            wiring.config_parameter = p.clone();
        }
        Ok((config, wiring))
    }
}

pub fn doctor(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let (config, mut wiring) = args.deployment.wiring()?;
    if let Some(q) = args.queue {
        wiring.queue = q;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let findings = runtime.block_on(async {
        let sdk = ballast_aws::sdk_config().await;
        let doctor = Doctor::new(&sdk);
        let mut findings = doctor.check(&config, &wiring).await;
        if !args.no_cluster {
            let (access, aws_auth_roles) = doctor.access(&config).await;
            findings.push(access);
            findings.extend(cluster_side(&config, aws_auth_roles).await);
        }
        findings
    });
    let bad = findings.iter().filter(|f| !f.ok).count();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&findings)?);
    } else {
        for f in &findings {
            println!("{} {}: {}", if f.ok { "ok  " } else { "FAIL" }, f.check, f.detail);
            if let Some(fix) = &f.fix {
                println!("       fix: {fix}");
            }
        }
        let skipped = if args.no_cluster { " (cluster side skipped: --no-cluster)" } else { "" };
        println!("{} check(s), {bad} problem(s){skipped}", findings.len());
    }
    Ok(if bad == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The cluster side, as the operator's kubeconfig (its current context) reaches it.
async fn cluster_side(config: &ballast_core::config::Config, aws_auth_roles: Option<Vec<String>>) -> Vec<Finding> {
    let (client, server) = match cluster::connect().await {
        Ok(connected) => connected,
        Err(e) => {
            return vec![Finding::bad(
                "cluster",
                format!("cannot reach it with the kubeconfig: {e}"),
                format!("aws eks update-kubeconfig --name {} --region {}", config.cluster, config.region),
            )]
        }
    };
    // Which cluster the checks below asked: the kubeconfig's, which may not be this one.
    let context = Finding::ok(
        "cluster",
        format!(
            "asked through the kubeconfig's current context, API server {server} (`aws eks update-kubeconfig --name {}` points it at this cluster)",
            config.cluster
        ),
    );
    let mut findings = vec![context, cluster::rbac(&client, config).await, cluster::forwarder(&client).await];
    if let Some(roles) = aws_auth_roles {
        findings.push(cluster::aws_auth(&client, &roles).await);
    }
    findings
}

#[derive(Args)]
pub struct DeadLettersArgs {
    #[command(flatten)]
    deployment: DeploymentArgs,
    /// Send each letter back to the function it failed in (only this stack's own) and wait
    /// for it; delete those it handled. Without --yes, only list where each would go.
    /// Without --replay the letters are only listed and left in the queue.
    #[arg(long)]
    replay: bool,
    /// With --replay: send them (the letters are listed first without it).
    #[arg(long, requires = "replay")]
    yes: bool,
    /// At most this many letters.
    #[arg(long, default_value_t = 1000)]
    max: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Exit 0 when the queue is empty (or every letter sent back was handled), 1 when letters
/// wait in it (listed, or kept after a replay).
pub fn dead_letters(args: DeadLettersArgs) -> anyhow::Result<ExitCode> {
    use ballast_cli::ops::replay::{DeadLetterQueue, Outcome, LISTED_FOR};
    let (config, wiring) = args.deployment.wiring()?;
    let interruption = format!("ballast-{}-interruption", config.cluster);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let sdk = ballast_aws::sdk_config().await;
        let dlq = DeadLetterQueue::open(&sdk, &wiring.dead_letter_queue, &interruption).await?;
        let more = |read: usize| if read >= args.max { " (--max reached: more may be in the queue)" } else { "" };
        if !args.replay || !args.yes {
            let letters = dlq.receive(args.max, LISTED_FOR).await?;
            dlq.release(&letters).await?;
            // Where each would be sent: only this stack's functions (a letter may name any).
            let targets: Vec<Result<String, String>> = letters.iter().map(|l| dlq.target(&l.letter)).collect();
            if args.json {
                let listed: Vec<Value> = letters
                    .iter()
                    .zip(&targets)
                    .map(|(l, t)| {
                        let mut v = serde_json::to_value(l).unwrap_or_default();
                        match t {
                            Ok(f) => v["replay_to"] = json!(f),
                            Err(why) => v["refused"] = json!(why),
                        }
                        v
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&listed)?);
            } else {
                for (l, t) in letters.iter().zip(&targets) {
                    match (args.replay, t) {
                        (true, Ok(f)) => println!("{}  {}  -> {f}", l.message_id, l.letter.describe()),
                        (true, Err(why)) => println!("{}  {}  -> refused: {why}", l.message_id, l.letter.describe()),
                        (false, _) => println!("{}  {}", l.message_id, l.letter.describe()),
                    }
                }
                let next = if args.replay {
                    "nothing sent: add --yes to send them back"
                } else {
                    "--replay lists where each would go, --replay --yes sends them back once the cause is fixed"
                };
                println!(
                    "{} letter(s) read in {}{}; {next}",
                    letters.len(),
                    wiring.dead_letter_queue,
                    more(letters.len())
                );
            }
            // Letters waiting are findings, as doctor's failed checks are: a CI or cron
            // job that lists them fails until the queue is empty.
            return Ok(if letters.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(super::INVALID) });
        }
        let mut results = Vec::new();
        let count = dlq
            .replay(args.max, |done| {
                let id = &done.letter.message_id;
                let line = match &done.outcome {
                    Outcome::Handled => format!("handled: {id}  {}", done.letter.letter.describe()),
                    Outcome::StillFailing { why } => format!("still failing, kept: {id}  {why}"),
                    Outcome::NotSentBack { why } => format!("not sent back, kept: {id}  {why}"),
                    Outcome::FailedAgain => format!(
                        "failed again, back in the queue with its new reason, kept: {id}  {}",
                        done.letter.letter.describe()
                    ),
                };
                if args.json {
                    results.push(serde_json::to_value(done).unwrap_or_default());
                } else {
                    println!("{line}");
                }
            })
            .await?;
        let read = count.handled + count.kept;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&results)?);
        } else {
            println!("{} of {read} letter(s) handled by their functions and deleted{}", count.handled, more(read));
        }
        Ok(if count.kept == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    })
}
