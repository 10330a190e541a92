//! Every AWS call has a deadline of its own. Without one a call that hangs (a
//! connection accepted and never answered) runs into the Lambda timeout and the run is
//! killed mid-plan, its intent never taken back and its plan never logged.

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;

/// The bounds of one AWS call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallTimeouts {
    /// Establishing the connection (TCP and TLS).
    pub connect: Duration,
    /// One attempt, from sending the request to the whole response.
    pub attempt: Duration,
    /// The whole operation: every attempt and the backoff between them.
    pub operation: Duration,
}

/// The functions' bounds. No call starts within the reconcile's `DEADLINE_MARGIN` (10 s)
/// of the invocation's deadline, so an operation bounded by less (8 s) ends before the
/// deadline whenever it started: the run then fails the call by its kind (a timeout is
/// retryable), takes back the intent of what it did not reach, and logs its plan. An
/// attempt of 3 s is ten times what Auto Scaling, EC2 and DynamoDB take to answer
/// Ballast's calls, and leaves room for a second attempt (the SDK's standard retries).
pub const CALL_TIMEOUTS: CallTimeouts = CallTimeouts {
    connect: Duration::from_secs(2),
    attempt: Duration::from_secs(3),
    operation: Duration::from_secs(8),
};

impl CallTimeouts {
    /// As the SDK takes them.
    pub fn config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .operation_attempt_timeout(self.attempt)
            .operation_timeout(self.operation)
            .build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_started_before_the_margin_ends_before_the_deadline() {
        let margin = ballast_core::reconcile::DEADLINE_MARGIN.to_std().unwrap();
        assert!(CALL_TIMEOUTS.operation < margin, "{CALL_TIMEOUTS:?} against a margin of {margin:?}");
        assert!(CALL_TIMEOUTS.connect < CALL_TIMEOUTS.attempt && CALL_TIMEOUTS.attempt < CALL_TIMEOUTS.operation);
    }

    #[tokio::test]
    async fn the_functions_sdk_config_carries_the_bounds() {
        let sdk = crate::sdk_loader(CALL_TIMEOUTS).region(aws_config::Region::new("eu-west-1")).load().await;
        let timeouts = sdk.timeout_config().expect("a timeout config");
        assert_eq!(timeouts.connect_timeout(), Some(Duration::from_secs(2)));
        assert_eq!(timeouts.operation_attempt_timeout(), Some(Duration::from_secs(3)));
        assert_eq!(timeouts.operation_timeout(), Some(Duration::from_secs(8)));
        assert_eq!(sdk.retry_config().map(|r| r.max_attempts()), Some(3));
    }
}
