//! Ballast's Kubernetes side. So far: the EKS bearer token.

pub mod token;
