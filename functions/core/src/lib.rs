//! Ballast's pure core: events, config, the planner, the ports and `reconcile`.
//!
//! Nothing here reads a clock, the environment or the network: time comes in as
//! `now`, the world through the port traits in [`ports`].

pub mod config;
pub mod event;
pub mod finding;
pub mod forwarder;
pub mod function;
pub mod learn;
#[cfg(feature = "test-doubles")]
pub mod memory;
pub mod observe;
pub mod plan;
pub mod planner;
pub mod ports;
pub mod quantile;
pub mod reconcile;
pub mod record;
pub mod snapshot;
pub mod units;
