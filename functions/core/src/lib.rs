//! Ballast's pure core: events, config, the planner, the ports and `reconcile`.
//!
//! Nothing here reads a clock, the environment or the network: time comes in as
//! `now`, the world through the port traits in [`ports`].

#![warn(missing_docs)]

pub mod asg_emulator;
pub mod config;
pub mod event;
pub mod finding;
pub mod fit;
pub mod forwarder;
pub mod function;
pub mod json_errors;
pub mod learn;
pub mod observe;
pub mod plan;
pub mod planner;
pub mod ports;
pub mod quantile;
pub mod reconcile;
pub mod record;
pub mod shape;
pub mod snapshot;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod units;
