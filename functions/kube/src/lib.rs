//! Ballast's Kubernetes side: connecting to EKS (the bearer token), the cluster adapter
//! (nodes, headroom, cordon, drain, demand), and the pod and pool rules the in-cluster
//! forwarder shares with it.

#![warn(missing_docs)]

pub mod cluster;
pub mod connect;
pub mod headroom;
pub mod pods;
pub mod pools;
pub mod token;

pub use cluster::KubeCluster;
pub use connect::{Connector, EksEndpoint};
