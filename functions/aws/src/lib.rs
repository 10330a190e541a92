//! Ballast's AWS adapters. SDK types stay in this crate: every port speaks the
//! core's domain types, and every error says whether a retry can help.

pub mod autoscaling;
pub mod compute;
pub mod dead_letters;
pub mod doctor;
pub mod eks;
pub mod redelivery;
pub mod ssm;
pub mod state;

pub use autoscaling::AwsAutoscaling;
pub use ballast_aws_errors::classify;
pub use compute::AwsCompute;
pub use dead_letters::SqsDeadLetters;
pub use redelivery::SqsRedelivery;
pub use state::DynamoStore;

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, SdkConfig};

/// The SDK configuration from the environment (region, credentials, and
/// `AWS_ENDPOINT_URL` for a local emulator), with standard retries.
pub async fn sdk_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .load()
        .await
}
