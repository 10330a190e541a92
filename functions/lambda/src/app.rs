//! The app each function builds once at start: config, origin, adapters.

use std::sync::Arc;

use ballast_aws::{AwsAutoscaling, DynamoStore, SqsDeadLetters};
use ballast_core::config::{Config, ConfigErrors};
use ballast_core::event::Origin;
use ballast_core::ports::{Clock, PortError};
use ballast_core::reconcile::Reconciler;
use chrono::{DateTime, Utc};

use crate::cluster::DetachedCluster;
use crate::settings::{ConfigSource, Settings, SettingsError};

/// One function's dependencies, generic over the ports so tests run it in memory.
pub struct App<A, C, S, K, D> {
    pub function: &'static str,
    pub reconciler: Reconciler<A, C, S, K>,
    pub origin: Origin,
    /// Where malformed queue messages go (the interruption function only).
    pub dead_letters: Option<D>,
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

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

pub type AwsApp = App<AwsAutoscaling, DetachedCluster, DynamoStore, SystemClock, SqsDeadLetters>;

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
        Self::build(function, settings, config, &sdk)
    }

    pub fn build(
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
        let mut origin = config.origin();
        origin.account = origin.account.or(settings.account);
        Ok(App {
            function,
            reconciler: Reconciler {
                autoscaling: AwsAutoscaling::new(sdk),
                cluster: DetachedCluster,
                store: DynamoStore::new(sdk, config.state_table.clone()),
                clock: SystemClock,
                owner: settings.owner,
                config: Arc::new(config),
            },
            origin,
            dead_letters: settings.dead_letter_queue_url.map(|url| SqsDeadLetters::new(sdk, url)),
            metrics: metrics_to_stdout,
        })
    }
}
