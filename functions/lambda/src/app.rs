//! The app each function builds once at start: config, origin, adapters.

use std::collections::BTreeMap;
use std::sync::Arc;

use ballast_aws::{AwsAutoscaling, DynamoStore, SqsDeadLetters, SqsRedelivery};
use ballast_core::config::{Config, ConfigErrors};
use ballast_core::event::{EventKind, Origin};
use ballast_core::function::Function;
use ballast_core::ports::{
    Autoscaling, Clock, Cluster, ConfigVersions, DeadLetters, PortError, Redelivery, StateStore, VersionNote,
};
use ballast_core::reconcile::Reconciler;
use chrono::{DateTime, Utc};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use ballast_core::ports::ConfigHome;
use serde_json::Value;
use tracing::{error, info_span, warn, Instrument};

use crate::cluster::{DetachedCluster, FunctionCluster, WaitForAccess};
use crate::handlers::{HandlerError, Summary};
use crate::live::{is_config_change, Build, FixedHome, Live};
use crate::settings::{ClusterAccess, ConfigSource, Settings, SettingsError};

/// One function's dependencies, generic over the ports so tests run it in memory.
pub struct App<A, C, S, K, D> {
    pub function: &'static str,
    pub reconciler: Reconciler<A, C, S, K>,
    pub origin: Origin,
    /// Where malformed queue messages go (the interruption function only).
    pub dead_letters: Option<D>,
    /// The events queue's `maxReceiveCount`, if known: on that receive a message still
    /// failing is dead-lettered here with its errors (the redrive policy would move it
    /// there with none).
    pub max_receives: Option<u32>,
    /// Brings a retryable queue message back within seconds (the interruption function).
    pub redelivery: Option<Arc<dyn Redelivery>>,
    /// Where EMF metric lines go: stdout in Lambda (CloudWatch reads them there).
    pub metrics: fn(&serde_json::Value),
}

/// The Lambda sink: one EMF document per line on stdout.
pub fn metrics_to_stdout(doc: &serde_json::Value) {
    println!("{doc}");
}

/// For local runs whose stdout is the result.
pub fn metrics_to_stderr(doc: &serde_json::Value) {
    eprintln!("{doc}");
}

#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

#[async_trait::async_trait]
impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    async fn sleep(&self, for_: std::time::Duration) {
        tokio::time::sleep(for_).await;
    }
}

pub type AwsApp = App<AwsAutoscaling, FunctionCluster, DynamoStore, SystemClock, SqsDeadLetters>;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("cannot read the config file {path}: {source}")]
    ReadFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read the config parameter: {0}")]
    Parameter(#[source] PortError),
    #[error(transparent)]
    Config(#[from] ConfigErrors),
    #[error("the config's region is {config}, but the function runs in {running}")]
    Region { config: String, running: String },
    #[error("cannot describe EKS cluster {cluster}: {source}")]
    DescribeCluster {
        cluster: String,
        #[source]
        source: PortError,
    },
    #[error("cannot connect to the Kubernetes API: {0}")]
    Connect(#[from] ballast_kube::connect::ConnectError),
    #[error("no AWS credentials provider for the EKS token")]
    NoCredentials,
}

impl StartError {
    /// Whether starting on the same config again would fail the same way.
    pub fn is_permanent(&self) -> bool {
        match self {
            StartError::Config(_) | StartError::Region { .. } | StartError::Settings(_) => true,
            StartError::DescribeCluster { source, .. } => !source.is_retryable(),
            StartError::ReadFile { .. }
            | StartError::Parameter(_)
            | StartError::Connect(_)
            | StartError::NoCredentials => false,
        }
    }
}

/// The cluster port the settings ask for.
pub async fn connect_cluster(
    function: &'static str,
    access: ClusterAccess,
    config: &Config,
    sdk: &aws_config::SdkConfig,
) -> Result<FunctionCluster, StartError> {
    let connector = match access {
        ClusterAccess::None => return Ok(FunctionCluster::Detached(DetachedCluster)),
        ClusterAccess::Kubeconfig => ballast_kube::Connector::kubeconfig().await?,
        ClusterAccess::Eks => {
            let eks = aws_sdk_eks::Client::new(sdk);
            let info = ballast_aws::eks::describe_cluster(&eks, &config.cluster)
                .await
                .map_err(|source| StartError::DescribeCluster { cluster: config.cluster.clone(), source })?;
            let endpoint = ballast_kube::EksEndpoint {
                cluster: config.cluster.clone(),
                region: config.region.clone(),
                endpoint: info.endpoint,
                certificate_authority: info.certificate_authority,
            };
            ballast_kube::Connector::eks(endpoint, sdk.credentials_provider().ok_or(StartError::NoCredentials)?)?
        }
    };
    let wait = config.dry_run.then_some(WaitForAccess { function, metrics: metrics_to_stdout });
    Ok(FunctionCluster::Kube(Box::new(ballast_kube::KubeCluster::new(connector, &config.pools)), wait))
}

/// Reads and validates the config from its source.
pub async fn load_config(source: &ConfigSource, sdk: &aws_config::SdkConfig) -> Result<Config, StartError> {
    let text = match source {
        ConfigSource::Inline(yaml) => yaml.clone(),
        ConfigSource::File(path) => std::fs::read_to_string(path)
            .map_err(|source| StartError::ReadFile { path: path.display().to_string(), source })?,
        ConfigSource::SsmParameter(name) => {
            ballast_aws::ssm::parameter(sdk, name).await.map_err(StartError::Parameter)?
        }
    };
    Ok(Config::from_yaml(&text)?)
}

impl AwsApp {
    pub async fn build(
        function: &'static str,
        settings: Settings,
        config: Config,
        sdk: &aws_config::SdkConfig,
    ) -> Result<AwsApp, StartError> {
        if let Some(running) = sdk.region().map(|r| r.to_string()) {
            if running != config.region {
                return Err(StartError::Region { config: config.region.clone(), running });
            }
        }
        let cluster = connect_cluster(function, settings.cluster_access, &config, sdk).await?;
        let mut origin = config.origin();
        origin.account = origin.account.or(settings.account);
        Ok(App {
            function,
            reconciler: Reconciler {
                autoscaling: AwsAutoscaling::new(sdk),
                cluster,
                store: DynamoStore::new(sdk, config.state_table.clone()),
                clock: SystemClock,
                owner: settings.owner,
                config: Arc::new(config),
            },
            origin,
            dead_letters: settings.dead_letter_queue_url.map(|url| SqsDeadLetters::new(sdk, url)),
            max_receives: settings.max_receives,
            redelivery: Some(Arc::new(SqsRedelivery::new(sdk))),
            metrics: metrics_to_stdout,
        })
    }
}

/// A function as Lambda runs it: the app built on the config version in force, built
/// again when a new version comes (see [`crate::live`]).
pub struct LiveApp<A, C, S, K, D> {
    pub function: &'static str,
    pub live: Live<App<A, C, S, K, D>>,
    /// The versions noted in the state table, by part, so each is written once.
    noted: tokio::sync::Mutex<BTreeMap<String, i64>>,
    /// Brings a batch back within seconds while there is no config (needs none itself).
    pub redelivery: Option<Arc<dyn Redelivery>>,
}

pub type AwsLiveApp = LiveApp<AwsAutoscaling, FunctionCluster, DynamoStore, SystemClock, SqsDeadLetters>;

impl AwsLiveApp {
    /// Settings from the process environment; the config from its home, looked at once
    /// now so that a cold start logs the version it starts on (or why it has none).
    pub async fn from_env(function: Function) -> Result<AwsLiveApp, StartError> {
        let function = function.name();
        let settings = Settings::from_env(|name| std::env::var(name).ok())?;
        let sdk = ballast_aws::sdk_config().await;
        // A fixed config never changes: one that is invalid fails the start, as it always will.
        let fixed = |text: String, what: String| -> Result<Box<dyn ConfigHome>, StartError> {
            Config::from_yaml(&text)?;
            Ok(Box::new(FixedHome { text, what }))
        };
        let home: Box<dyn ConfigHome> = match &settings.config {
            ConfigSource::Inline(yaml) => fixed(yaml.clone(), "BALLAST_CONFIG".into())?,
            ConfigSource::File(path) => fixed(
                std::fs::read_to_string(path)
                    .map_err(|source| StartError::ReadFile { path: path.display().to_string(), source })?,
                format!("file {}", path.display()),
            )?,
            ConfigSource::SsmParameter(name) => Box::new(ballast_aws::ssm::ParameterHome::new(&sdk, name.clone())),
        };
        let redelivery: Arc<dyn Redelivery> = Arc::new(SqsRedelivery::new(&sdk));
        let build: Build<AwsApp> = Box::new(move |config| {
            let (settings, sdk) = (settings.clone(), sdk.clone());
            Box::pin(async move { AwsApp::build(function, settings, config, &sdk).await })
        });
        let live = Live::new(function, home, build, metrics_to_stdout);
        // A function with no usable config yet still starts: it says why on every event
        // and takes the first good version pushed.
        let _ = live.current(false).await;
        Ok(LiveApp { redelivery: Some(redelivery), ..LiveApp::new(function, live) })
    }
}

impl<A, C, S, K, D> LiveApp<A, C, S, K, D> {
    pub fn new(function: &'static str, live: Live<App<A, C, S, K, D>>) -> Self {
        LiveApp { function, live, noted: Default::default(), redelivery: None }
    }
}

impl<A, C, S, K, D> LiveApp<A, C, S, K, D>
where
    A: Autoscaling,
    C: Cluster,
    S: StateStore + ConfigVersions,
    K: Clock,
    D: DeadLetters,
{
    /// Notes in the state table that `part` runs on `version` (once per version), for
    /// `ballast doctor`; a failed note is only logged.
    async fn note(&self, app: &App<A, C, S, K, D>, part: &str, version: Option<i64>) {
        let Some(version) = version else { return };
        let mut noted = self.noted.lock().await;
        if noted.get(part) == Some(&version) {
            return;
        }
        let note = VersionNote { part: part.to_string(), version, at: app.reconciler.clock.now() };
        match app.reconciler.store.note(&note).await {
            Ok(()) => {
                noted.insert(part.to_string(), version);
            }
            Err(e) => {
                warn!(function = self.function, part, config_version = version, error = %e, "cannot note the config version")
            }
        }
    }

    /// One directly invoked event (schedule, cluster-events). With no usable config an
    /// event worth keeping fails (it reaches the dead-letter queue after the retries); a
    /// tick or a config change is answered after the error is logged.
    pub async fn direct(&self, payload: Value, deadline: Option<DateTime<Utc>>) -> Result<Summary, HandlerError> {
        let changed = is_config_change(&payload);
        match self.live.current(changed).await {
            Ok((app, version)) => {
                self.note(&app, self.function, version).await;
                // The forwarder says which version it runs on in its demand events.
                if payload.get("source").and_then(Value::as_str) == Some("ballast.kubernetes") {
                    let forwarder = payload.pointer("/detail/config_version").and_then(Value::as_i64);
                    self.note(&app, "forwarder", forwarder).await;
                }
                let span = info_span!("config", config_version = version);
                let mut result = app.direct_until(payload, deadline).instrument(span).await;
                if let Ok(summary) = &mut result {
                    summary.config_version = version;
                }
                result
            }
            Err(no_config) => {
                error!(function = self.function, error = %no_config, "event not handled");
                if changed || is_tick(&payload) {
                    Ok(Summary { errors: vec![no_config.to_string()], ..Summary::default() })
                } else {
                    Err(HandlerError::Failed(no_config.to_string()))
                }
            }
        }
    }

    /// One SQS batch (interruption). With no usable config every message is reported
    /// failed: each comes back, and reaches the dead-letter queue after the queue's
    /// receives.
    pub async fn interruption(&self, batch: SqsEvent, deadline: Option<DateTime<Utc>>) -> SqsBatchResponse {
        let changed = batch.records.iter().any(|m| {
            m.body.as_deref().and_then(|b| serde_json::from_str::<Value>(b).ok()).is_some_and(|e| is_config_change(&e))
        });
        match self.live.current(changed).await {
            Ok((app, version)) => {
                self.note(&app, self.function, version).await;
                let span = info_span!("config", config_version = version);
                app.interruption_until(batch, deadline).instrument(span).await.0
            }
            Err(no_config) => {
                error!(function = self.function, error = %no_config, messages = batch.records.len(), "batch not handled; its messages come back");
                let failed: Vec<String> = batch.records.iter().filter_map(|m| m.message_id.clone()).collect();
                if let Some(redelivery) = &self.redelivery {
                    crate::handlers::redeliver_soon(self.function, redelivery.as_ref(), &batch, &failed).await;
                }
                let mut response = SqsBatchResponse::default();
                response.batch_item_failures = failed
                    .into_iter()
                    .map(|id| {
                        let mut f = BatchItemFailure::default();
                        f.item_identifier = id;
                        f
                    })
                    .collect();
                response
            }
        }
    }
}

/// A rate tick or Scheduler's reconcile input: worth nothing once its minute has passed.
fn is_tick(payload: &Value) -> bool {
    match payload.get("detail-type").and_then(Value::as_str) {
        Some(t) if t == EventKind::ScheduledEvent.detail_type() => {
            payload.get("detail").is_none_or(|d| d.as_object().is_some_and(|m| m.is_empty()))
        }
        _ => payload.get("action").and_then(Value::as_str) == Some("reconcile"),
    }
}
