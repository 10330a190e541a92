//! What tests share (feature `test-util`): one emulation of AWS and the cluster behind
//! every port ([`world`], answering Auto Scaling's calls with the simulator's
//! [`crate::asg_emulator`]), one wrapper that fails or watches any port's calls
//! ([`faulty`]), and the smallest valid config ([`config`]).

pub mod config;
pub mod faulty;
pub mod world;

pub use config::{minimal_config, MINIMAL_CONFIG};
pub use faulty::{Fault, Faulty, PortCall};
pub use world::{Call, GoneInstance, InMemory, Lease, World, WorldNode, WorldPool, EC2_LISTS_GONE_FOR};
