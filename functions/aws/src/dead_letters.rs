//! Dead letters over SQS: a message that can never succeed goes straight to the
//! dead-letter queue, with why, instead of being retried until it gets there.

use async_trait::async_trait;
use aws_sdk_sqs::types::MessageAttributeValue;
use ballast_core::ports::{DeadLetters, ErrorKind, PortError};

use crate::classify;

/// The [`DeadLetters`] port over one SQS queue, the deployment's dead-letter queue.
#[derive(Debug, Clone)]
pub struct SqsDeadLetters {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsDeadLetters {
    /// A client made from the shared SDK config, sending to `queue_url`.
    pub fn new(conf: &aws_config::SdkConfig, queue_url: impl Into<String>) -> Self {
        SqsDeadLetters { client: aws_sdk_sqs::Client::new(conf), queue_url: queue_url.into() }
    }
}

#[async_trait]
impl DeadLetters for SqsDeadLetters {
    async fn send(&self, body: &str, reason: &str) -> Result<(), PortError> {
        let attribute = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(reason)
            .build()
            .map_err(|e| PortError::new(ErrorKind::Permanent, "SendMessage", e.to_string()))?;
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .message_attributes("ballast-error", attribute)
            .send()
            .await
            .map_err(|e| classify("SendMessage", e))?;
        Ok(())
    }
}

/// A queue's URL by its name.
pub async fn queue_url(sqs: &aws_sdk_sqs::Client, name: &str) -> Result<String, PortError> {
    sqs.get_queue_url()
        .queue_name(name)
        .send()
        .await
        .map_err(|e| classify("GetQueueUrl", e))?
        .queue_url()
        .map(str::to_string)
        .ok_or_else(|| PortError::new(ErrorKind::Permanent, "GetQueueUrl", format!("queue {name}: no URL")))
}
