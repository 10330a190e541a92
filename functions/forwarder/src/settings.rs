//! The forwarder's settings: flags, each also read from an environment variable (the
//! Deployment sets those).

use std::net::SocketAddr;
use std::path::PathBuf;

use ballast_core::units::HumanDuration;
use clap::Parser;

use crate::publisher::Timing;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "forwarder",
    about = "Ballast's in-cluster forwarder: pool demand, unschedulable pods, node changes and first-start waits to EventBridge"
)]
pub struct Settings {
    /// The SSM parameter holding Ballast's config, the functions' own (its pools' node
    /// selectors and tolerations decide pool membership); followed while the forwarder runs.
    #[arg(long, env = "BALLAST_CONFIG_PARAMETER")]
    pub config_parameter: Option<String>,
    /// A config file instead (local runs), read once; the parameter wins when both are set.
    #[arg(long, env = "BALLAST_CONFIG_FILE", required_unless_present = "config_parameter")]
    pub config: Option<PathBuf>,
    /// The EventBridge bus (name or ARN) the functions' rule listens on.
    #[arg(long, env = "BALLAST_EVENT_BUS")]
    pub event_bus: String,
    /// At most one demand event per pool within this window.
    #[arg(long, env = "BALLAST_DEBOUNCE", default_value = "30s")]
    pub debounce: HumanDuration,
    /// A demand event per pool at least this often.
    #[arg(long, env = "BALLAST_HEARTBEAT", default_value = "5m")]
    pub heartbeat: HumanDuration,
    /// Demand must move by more than this percent to be published before the heartbeat.
    #[arg(long, env = "BALLAST_DEMAND_THRESHOLD_PERCENT", default_value_t = 5)]
    pub threshold_percent: u32,
    /// At most one unschedulable event per pool within this window.
    #[arg(long, env = "BALLAST_UNSCHEDULABLE_EVERY", default_value = "5s")]
    pub unschedulable_every: HumanDuration,
    /// The window each Pool Waits Measured event sums up (per pool, when pods started).
    #[arg(long, env = "BALLAST_WAITS_EVERY", default_value = "5m")]
    pub waits_every: HumanDuration,
    /// Where `/healthz`, `/readyz` and `/metrics` are served: every address, IPv6 and
    /// IPv4 (IPv4 alone where the node has IPv6 disabled).
    #[arg(long, env = "BALLAST_HEALTH_ADDR", default_value = "[::]:8080")]
    pub health_addr: SocketAddr,
    /// Objects per list call (the initial list and relists are paged): a page is held
    /// whole in memory while it is read.
    #[arg(long, env = "BALLAST_LIST_PAGE_SIZE", default_value_t = 250, value_parser = clap::value_parser!(u32).range(1..))]
    pub list_page_size: u32,
}

impl Settings {
    pub fn timing(&self) -> Timing {
        Timing {
            debounce: self.debounce.0,
            heartbeat: self.heartbeat.0,
            threshold_percent: self.threshold_percent,
            unschedulable_every: self.unschedulable_every.0,
            waits_every: self.waits_every.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_text_and_the_bus_is_required() {
        let s = Settings::try_parse_from([
            "forwarder",
            "--event-bus",
            "ballast-prod",
            "--debounce",
            "10s",
            "--config-parameter",
            "/ballast/prod/config",
        ])
        .unwrap();
        assert_eq!(s.config_parameter.as_deref(), Some("/ballast/prod/config"));
        assert_eq!(s.timing().debounce, std::time::Duration::from_secs(10));
        assert_eq!(s.timing().heartbeat, std::time::Duration::from_secs(300));
        assert_eq!(s.timing().waits_every, std::time::Duration::from_secs(300));
        let missing = Settings::try_parse_from(["forwarder"]);
        if std::env::var_os("BALLAST_EVENT_BUS").is_none() {
            assert!(missing.unwrap_err().to_string().contains("--event-bus"));
        }
        let bad =
            Settings::try_parse_from(["forwarder", "--event-bus", "b", "--config", "c.yaml", "--heartbeat", "soon"])
                .unwrap_err();
        assert!(bad.to_string().contains("--heartbeat"), "{bad}");
    }
}
