//! The app each function builds once at start: config, origin, adapters.

use std::sync::Arc;

use ballast_aws::{AwsAutoscaling, DynamoStore, SqsDeadLetters, SqsRedelivery};
use ballast_core::config::{Config, ConfigErrors};
use ballast_core::event::Origin;
use ballast_core::ports::{Clock, PortError, Redelivery};
use ballast_core::reconcile::Reconciler;
use chrono::{DateTime, Utc};

use crate::cluster::{DetachedCluster, FunctionCluster};
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

/// The cluster port the settings ask for.
pub async fn connect_cluster(
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
    Ok(FunctionCluster::Kube(Box::new(ballast_kube::KubeCluster::new(connector, &config.pools))))
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
    /// Everything a function needs, from the process environment.
    pub async fn from_env(function: &'static str) -> Result<AwsApp, StartError> {
        let settings = Settings::from_env(|name| std::env::var(name).ok())?;
        let sdk = ballast_aws::sdk_config().await;
        let config = load_config(&settings.config, &sdk).await?;
        Self::build(function, settings, config, &sdk).await
    }

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
        let cluster = connect_cluster(settings.cluster_access, &config, sdk).await?;
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
