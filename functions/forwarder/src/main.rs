use std::sync::Arc;

use ballast_forwarder::bus::EventBridgeBus;
use ballast_forwarder::run::Forwarder;
use ballast_forwarder::settings::Settings;
use ballast_forwarder::{health, load_config, StartError};
use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), StartError> {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::from_default_env().add_directive("info".parse().expect("directive")),
        )
        .init();
    let settings = Settings::parse();
    let config = load_config(&settings.config)?;
    let client = kube::Client::try_default().await?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let bus = Arc::new(EventBridgeBus::new(&sdk, &settings.event_bus));
    let mut forwarder = Forwarder::new(client, bus, &config, settings.timing());
    forwarder.page_size = settings.list_page_size;
    let addr = settings.health_addr;
    health::serve(addr, forwarder.health.clone(), forwarder.metrics.clone())
        .await
        .map_err(|source| StartError::Health { addr, source })?;
    forwarder.run(shutdown_signal()).await;
    Ok(())
}

/// SIGTERM (the kubelet stopping the pod) or Ctrl-C.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
