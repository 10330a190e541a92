//! What an operator runs against a deployment through the AWS APIs and the cluster:
//! [`doctor`]'s checks and the dead letters' [`replay`].

pub mod doctor;
pub mod replay;
