//! What tests and the simulator share (feature `test-util`): one emulation of AWS and
//! the cluster behind every port ([`world`]), the ASG semantics it and the simulator
//! both answer with ([`asgs`]), one wrapper that fails or watches any port's calls
//! ([`faulty`]), and the smallest valid config ([`config`]).

pub mod asgs;
pub mod config;
pub mod faulty;
pub mod world;

pub use config::{minimal_config, MINIMAL_CONFIG};
pub use faulty::{Fault, Faulty, PortCall};
pub use world::{Call, InMemory, Lease, World, WorldNode, WorldPool};
