//! How an AWS SDK error maps to Ballast's port errors: shared by the AWS adapters and
//! the forwarder (which must not pull in every service SDK for it).

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use ballast_core::ports::{ErrorKind, PortError};

/// Error codes that mean "not now": throttling, contention, a transient server fault.
const RETRYABLE_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceededException",
    "ResourceContention",
    "ScalingActivityInProgress",
    "ServiceUnavailable",
    "InternalFailure",
    "InternalError",
    "InternalServerError",
    "TransactionInProgressException",
];

/// Maps an SDK error to a port error that keeps its source and says whether a retry
/// can help: timeouts, dispatch failures, 5xx and throttling can; validation,
/// permissions and missing resources cannot.
pub fn classify<E>(operation: &str, err: SdkError<E, HttpResponse>) -> PortError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let kind = match &err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => ErrorKind::Retryable,
        SdkError::ConstructionFailure(_) => ErrorKind::Permanent,
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let code = service.err().code().unwrap_or_default();
            if status >= 500 || status == 429 || RETRYABLE_CODES.contains(&code) {
                ErrorKind::Retryable
            } else {
                ErrorKind::Permanent
            }
        }
        _ => ErrorKind::Retryable,
    };
    let message = DisplayErrorContext(&err).to_string();
    PortError::new(kind, operation, message).with_source(err)
}
