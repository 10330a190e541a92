use std::sync::{Arc, Mutex};

use ballast_core::ports::ConfigHome;
use ballast_forwarder::bus::EventBridgeBus;
use ballast_forwarder::follow::{FileHome, Follow, ParameterHome};
use ballast_forwarder::health::Health;
use ballast_forwarder::metrics::Metrics;
use ballast_forwarder::run::Forwarder;
use ballast_forwarder::settings::Settings;
use ballast_forwarder::{health, StartError};
use clap::Parser;
use tracing::info;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), StartError> {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::from_default_env().add_directive("info".parse().expect("directive")),
        )
        .init();
    let settings = Settings::parse();
    let client = kube::Client::try_default().await?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;

    let home: Box<dyn ConfigHome> = match (&settings.config_parameter, &settings.config) {
        (Some(name), _) => Box::new(ParameterHome { client: aws_sdk_ssm::Client::new(&sdk), name: name.clone() }),
        (None, Some(path)) => Box::new(FileHome(path.clone())),
        (None, None) => unreachable!("clap requires one of them"),
    };
    // One health state and one registry for the whole process: the watchers may start
    // again on a new config, the probes and the scrape address stay.
    let health_state = Arc::new(Health::default());
    let metrics = Arc::new(Metrics::new());
    let addr = settings.health_addr;
    health::serve(addr, health_state.clone(), metrics.clone())
        .await
        .map_err(|source| StartError::Health { addr, source })?;
    let mut follow = Follow::new(home);
    let bus = Arc::new(EventBridgeBus::new(&sdk, &settings.event_bus).with_config_version(follow.in_force.clone()));
    // As PID 1 the forwarder gets no default SIGTERM handling: it is handled from the start.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    // Alive (not ready) while it waits for a config: a missing one is said every 10 s
    // in the log, not by a restart loop.
    let waiting = || health_state.tick(chrono::Utc::now().timestamp(), false);
    let mut config = tokio::select! {
        config = follow.first(&metrics, waiting) => config,
        _ = term.recv() => return Ok(()),
        _ = tokio::signal::ctrl_c() => return Ok(()),
    };
    loop {
        let mut forwarder = Forwarder::new(client.clone(), bus.clone(), &config, settings.timing());
        forwarder.page_size = settings.list_page_size;
        forwarder.health = health_state.clone();
        forwarder.metrics = metrics.clone();
        let next: Arc<Mutex<Option<ballast_core::config::Config>>> = Arc::default();
        let stop = async {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
                changed = follow.membership_changed(&metrics) => {
                    *next.lock().expect("not poisoned") = Some(changed);
                }
            }
        };
        forwarder.run(stop).await;
        let Some(changed) = next.lock().expect("not poisoned").take() else { return Ok(()) };
        info!("the config moved pods between pools: watching again on the new version");
        config = changed;
    }
}
