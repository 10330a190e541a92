//! The `ballast` command's operations on a deployment, as a library for its tests: `doctor`
//! (is the deployment wired as it must be) and the dead-letter replay, behind the `aws`
//! feature. The adapters they read through are ballast-aws's and ballast-kube's.

#![warn(missing_docs)]

#[cfg(feature = "aws")]
pub mod ops;
