//! Redelivery over SQS: a retryable message's visibility is cut to a few seconds, so it
//! comes back soon instead of after the queue's visibility timeout.

use std::time::Duration;

use async_trait::async_trait;
use ballast_core::ports::{ErrorKind, PortError, Redelivery};

use crate::classify;

/// The [`Redelivery`] port over SQS: a message to retry comes back within seconds.
#[derive(Debug, Clone)]
pub struct SqsRedelivery {
    client: aws_sdk_sqs::Client,
}

impl SqsRedelivery {
    /// A client made from the shared SDK config.
    pub fn new(conf: &aws_config::SdkConfig) -> Self {
        SqsRedelivery { client: aws_sdk_sqs::Client::new(conf) }
    }
}

/// The queue URL of a queue ARN (`arn:PARTITION:sqs:REGION:ACCOUNT:NAME`), as the event
/// source mapping names the queue in each record.
pub fn queue_url(queue_arn: &str) -> Result<String, PortError> {
    match queue_arn.split(':').collect::<Vec<_>>().as_slice() {
        ["arn", partition, "sqs", region, account, name] if !name.is_empty() => {
            let suffix = if partition.starts_with("aws-cn") { "amazonaws.com.cn" } else { "amazonaws.com" };
            Ok(format!("https://sqs.{region}.{suffix}/{account}/{name}"))
        }
        _ => Err(PortError::new(
            ErrorKind::Permanent,
            "ChangeMessageVisibility",
            format!("`{queue_arn}` is not an SQS queue ARN"),
        )),
    }
}

#[async_trait]
impl Redelivery for SqsRedelivery {
    async fn retry_in(&self, queue_arn: &str, receipt_handle: &str, after: Duration) -> Result<(), PortError> {
        self.client
            .change_message_visibility()
            .queue_url(queue_url(queue_arn)?)
            .receipt_handle(receipt_handle)
            .visibility_timeout(i32::try_from(after.as_secs()).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(|e| classify("ChangeMessageVisibility", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::queue_url;

    #[test]
    fn a_queue_arn_names_its_url() {
        assert_eq!(
            queue_url("arn:aws:sqs:eu-west-1:123456789012:ballast-prod-events").unwrap(),
            "https://sqs.eu-west-1.amazonaws.com/123456789012/ballast-prod-events"
        );
        let err = queue_url("arn:aws:sns:eu-west-1:123456789012:topic").unwrap_err();
        assert!(err.message.contains("arn:aws:sns"), "{err}");
    }
}
