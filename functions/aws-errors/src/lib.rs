//! How an AWS SDK error maps to Ballast's port errors: shared by the AWS adapters and
//! the forwarder (which must not pull in every service SDK for it).

use aws_runtime::retries::classifiers::{THROTTLING_ERRORS, TRANSIENT_ERRORS};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use ballast_core::ports::{ErrorKind, PortError};

/// Error codes a retry can help that the SDK's lists ([`THROTTLING_ERRORS`],
/// [`TRANSIENT_ERRORS`]) do not hold, because they are one service's contention rather
/// than throttling: Auto Scaling refuses a change while another is in progress. (Server
/// faults, `InternalError` and the like, come with a 5xx status and are retried by it.)
const CONTENTION_ERRORS: &[&str] = &["ResourceContention", "ScalingActivityInProgress"];

/// Whether a service error says that what the call acts on is over: Auto Scaling answers
/// a lifecycle call for an action completed or timed out with a `ValidationError` that
/// only its message tells apart.
pub fn is_gone(code: Option<&str>, message: Option<&str>) -> bool {
    code == Some("ValidationError") && message.is_some_and(|m| m.starts_with("No active Lifecycle Action found"))
}

/// Whether a service error a retry can help: a throttling or transient code by the AWS
/// SDK's own lists, a contention code, or a 5xx or 429 status.
pub fn is_retryable(code: Option<&str>, status: u16) -> bool {
    status >= 500
        || status == 429
        || code.is_some_and(|code| {
            THROTTLING_ERRORS.contains(&code) || TRANSIENT_ERRORS.contains(&code) || CONTENTION_ERRORS.contains(&code)
        })
}

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
            if is_retryable(service.err().code(), service.raw().status().as_u16()) {
                ErrorKind::Retryable
            } else if is_gone(service.err().code(), service.err().message()) {
                ErrorKind::Gone
            } else {
                ErrorKind::Permanent
            }
        }
        _ => ErrorKind::Retryable,
    };
    PortError::new(kind, operation, cause(&err)).with_source(err)
}

/// What kind of trouble a call met, for what to do about it: a network fix for an
/// endpoint that cannot be reached, an IAM one for a refusal, a deploy for what is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble {
    /// No answer: the endpoint cannot be reached (connection refused, DNS) or did not
    /// answer in time.
    Unreachable,
    /// The credentials were refused as such (invalid, expired): not a permission.
    Unauthenticated,
    /// The caller may not make the call (IAM).
    Denied,
    /// What the call names does not exist.
    NotFound,
    /// Anything else (a throttle, a server fault, an answer that could not be read).
    Other,
}

/// The kind of trouble an SDK error is: from its kind (dispatch or timeout), else from the
/// service's error code and status.
pub fn trouble<E>(err: &SdkError<E, HttpResponse>) -> Trouble
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match err {
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => Trouble::Unreachable,
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or_default();
            let status = service.raw().status().as_u16();
            if ["InvalidClientTokenId", "UnrecognizedClientException", "ExpiredToken", "InvalidSignatureException"]
                .iter()
                .any(|c| code.starts_with(c))
                || status == 401
            {
                Trouble::Unauthenticated
            } else if code.contains("AccessDenied")
                || code.contains("Unauthorized")
                || code.contains("NotAuthorized")
                || status == 403
            {
                Trouble::Denied
            } else if ["NotFound", "NonExistent", "DoesNotExist"].iter().any(|c| code.contains(c)) {
                Trouble::NotFound
            } else {
                Trouble::Other
            }
        }
        _ => Trouble::Other,
    }
}

/// The kind of trouble behind an error whose SDK error is somewhere in its chain (a
/// [`PortError`] keeps it as its source) when its type is not known here: an endpoint
/// that could not be reached shows as the connector's error; anything else is
/// [`Trouble::Other`] (ask [`trouble`] with the SDK error for more).
pub fn trouble_in_chain(err: &(dyn std::error::Error + 'static)) -> Trouble {
    use aws_smithy_runtime_api::client::result::ConnectorError;
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(connector) = e.downcast_ref::<ConnectorError>() {
            if connector.is_io() || connector.is_timeout() {
                return Trouble::Unreachable;
            }
        }
        next = e.source();
    }
    Trouble::Other
}

/// An SDK error as a sentence a person reads: the call (`DescribeTable`), the service
/// (`DynamoDB`) and why it failed, never the error's Debug form (which
/// [`DisplayErrorContext`] appends).
pub fn describe<E>(err: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    format!("{}: {}", service_and_operation::<E>().1, cause(err))
}

/// Why an SDK call failed, naming the service: what the service answered (its error code
/// and message), or that it could not be reached, did not answer in time, or answered
/// what could not be read, with the underlying reason (`Connection refused`).
pub fn cause<E>(err: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let (service, _) = service_and_operation::<E>();
    let why = || reasons(err);
    match err {
        SdkError::ServiceError(service_error) => {
            let e = service_error.err();
            let status = service_error.raw().status().as_u16();
            match (e.code(), e.message()) {
                (Some(code), Some(message)) => format!("{service} refused it ({code}, HTTP {status}): {message}"),
                (Some(code), None) => format!("{service} refused it ({code}, HTTP {status})"),
                (None, Some(message)) => format!("{service} refused it (HTTP {status}): {message}"),
                // An answer whose body named no error (a proxy's 403, an empty body): its
                // source is the SDK's unnamed error, whose words are its Debug form.
                (None, None) => format!("{service} refused it (HTTP {status}), naming no error in its answer"),
            }
        }
        SdkError::DispatchFailure(_) => format!("cannot reach {service} at its endpoint: {}", why()),
        SdkError::TimeoutError(_) => format!("{service} did not answer in time: {}", why()),
        SdkError::ResponseError(_) => format!("{service}'s answer could not be read: {}", why()),
        SdkError::ConstructionFailure(_) => format!("the request to {service} could not be made: {}", why()),
        _ => format!("{service}: {}", why()),
    }
}

/// The error's causes below the SDK's own kind (`dispatch failure`), each said once:
/// `io error: ... tcp connect error: Connection refused (os error 111)`.
fn reasons(err: &(dyn std::error::Error + 'static)) -> String {
    let mut said: Vec<String> = Vec::new();
    let mut next = err.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !text.is_empty() && !said.iter().any(|s| s.contains(&text)) {
            said.push(text);
        }
        next = e.source();
    }
    if said.is_empty() {
        // No source: the error's own words, its Debug form cut off.
        let own = DisplayErrorContext(err).to_string();
        return own.split(" (").next().unwrap_or_default().to_string();
    }
    said.join(": ")
}

/// The service and operation an SDK error type belongs to, read off its type's path
/// (`aws_sdk_dynamodb::operation::describe_table::DescribeTableError` gives `DynamoDB`,
/// `DescribeTable`); `AWS` and `the call` for a type from elsewhere.
fn service_and_operation<E: 'static>() -> (&'static str, String) {
    let path = std::any::type_name::<E>();
    let service = path
        .split("::")
        .next()
        .and_then(|krate| krate.strip_prefix("aws_sdk_"))
        .map(|name| match name {
            "autoscaling" => "Auto Scaling",
            "dynamodb" => "DynamoDB",
            "ec2" => "EC2",
            "eks" => "EKS",
            "eventbridge" => "EventBridge",
            "lambda" => "Lambda",
            "sqs" => "SQS",
            "ssm" => "SSM",
            "sts" => "STS",
            "scheduler" => "EventBridge Scheduler",
            "cloudwatch" => "CloudWatch",
            _ => "AWS",
        })
        .unwrap_or("AWS");
    let last = path.rsplit("::").next().unwrap_or_default();
    let operation = match last.strip_suffix("Error") {
        Some(op) if !op.is_empty() && path.contains("::operation::") => op.to_string(),
        _ => "the call".to_string(),
    };
    (service, operation)
}

#[cfg(test)]
mod tests {
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    use super::*;

    fn service_error(code: &str, status: u16) -> PortError {
        service_error_saying(code, status, "from the service")
    }

    fn service_error_saying(code: &str, status: u16, message: &str) -> PortError {
        let err = ErrorMetadata::builder().code(code).message(message).build();
        let raw = HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
        classify("SetDesiredCapacity", SdkError::service_error(err, raw))
    }

    #[test]
    fn an_sdk_error_is_said_in_words_never_in_its_debug_form() {
        use aws_smithy_runtime_api::client::result::ConnectorError;
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused (os error 111)");
        let err: SdkError<ErrorMetadata, HttpResponse> = SdkError::dispatch_failure(ConnectorError::io(refused.into()));
        let said = cause(&err);
        assert_eq!(said, "cannot reach AWS at its endpoint: io error: Connection refused (os error 111)");
        assert!(DisplayErrorContext(&err).to_string().contains("DispatchFailure("), "what the SDK prints instead");
        let port = classify("GetParameter", err);
        assert_eq!(port.to_string(), format!("GetParameter: {said}"));

        let denied = service_error_saying("AccessDeniedException", 400, "not authorized to perform ssm:GetParameter");
        assert_eq!(
            denied.to_string(),
            "SetDesiredCapacity: AWS refused it (AccessDeniedException, HTTP 400): not authorized to perform \
             ssm:GetParameter"
        );
        // An answer that named no error (a proxy's 403 with an HTML body).
        let unnamed = ErrorMetadata::builder().build();
        let raw = HttpResponse::new(StatusCode::try_from(403).unwrap(), SdkBody::empty());
        let unnamed = SdkError::service_error(unnamed, raw);
        let said_unnamed = cause(&unnamed);
        assert_eq!(said_unnamed, "AWS refused it (HTTP 403), naming no error in its answer");
        assert_eq!(trouble(&unnamed), Trouble::Denied);
        for text in [said, denied.to_string(), said_unnamed] {
            assert!(!text.contains('{') && !text.contains("Error("), "{text}");
        }
    }

    #[test]
    fn the_kind_of_trouble_says_which_fix_fits() {
        use aws_smithy_runtime_api::client::result::ConnectorError;
        let trouble_of = |code: &str, status: u16| {
            let err = ErrorMetadata::builder().code(code).message("m").build();
            let raw = HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
            trouble(&SdkError::service_error(err, raw))
        };
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let err: SdkError<ErrorMetadata, HttpResponse> = SdkError::dispatch_failure(ConnectorError::io(refused.into()));
        assert_eq!(trouble(&err), Trouble::Unreachable);
        let port = classify("DescribeAutoScalingGroups", err);
        assert_eq!(trouble_in_chain(&port), Trouble::Unreachable, "through the port error's source");
        assert_eq!(trouble_in_chain(&service_error("AccessDenied", 400)), Trouble::Other);
        assert_eq!(trouble_of("AccessDeniedException", 400), Trouble::Denied);
        assert_eq!(trouble_of("UnauthorizedOperation", 403), Trouble::Denied);
        assert_eq!(trouble_of("UnrecognizedClientException", 400), Trouble::Unauthenticated);
        assert_eq!(trouble_of("ExpiredTokenException", 400), Trouble::Unauthenticated);
        assert_eq!(trouble_of("ParameterNotFound", 400), Trouble::NotFound);
        assert_eq!(trouble_of("ResourceNotFoundException", 400), Trouble::NotFound);
        assert_eq!(trouble_of("AWS.SimpleQueueService.NonExistentQueue", 400), Trouble::NotFound);
        assert_eq!(trouble_of("ThrottlingException", 400), Trouble::Other);
    }

    #[test]
    fn throttling_and_transient_codes_are_retryable_by_the_sdks_own_lists() {
        for code in
            ["ThrottlingException", "RequestLimitExceeded", "SlowDown", "RequestTimeout", "EC2ThrottledException"]
        {
            assert_eq!(service_error(code, 400).kind, ErrorKind::Retryable, "{code}");
        }
        for code in ["ResourceContention", "ScalingActivityInProgress"] {
            assert_eq!(service_error(code, 400).kind, ErrorKind::Retryable, "{code}");
        }
        for (code, status) in [("InternalError", 500), ("ServiceUnavailable", 503), ("TooManyRequests", 429)] {
            assert_eq!(service_error(code, status).kind, ErrorKind::Retryable, "{code} {status}");
        }
    }

    #[test]
    fn validation_permission_and_missing_resources_are_permanent() {
        for code in ["ValidationError", "AccessDenied", "UnauthorizedOperation", "ResourceNotFoundException"] {
            let err = service_error(code, 400);
            assert_eq!(err.kind, ErrorKind::Permanent, "{code}");
            assert!(std::error::Error::source(&err).is_some(), "{code}: the SDK error is kept as the source");
        }
        assert!(!is_retryable(None, 400));
    }

    #[test]
    fn a_lifecycle_action_that_is_over_is_gone_and_not_retried() {
        // Auto Scaling's own wording, for CompleteLifecycleAction and the heartbeat alike.
        let over = "No active Lifecycle Action found with instance ID i-0f9e8d7c6b5a40001";
        let err = service_error_saying("ValidationError", 400, over);
        assert_eq!(err.kind, ErrorKind::Gone);
        assert!(!err.is_retryable());
        assert_eq!(
            service_error_saying("ValidationError", 400, "Desired capacity above max").kind,
            ErrorKind::Permanent
        );
        assert_eq!(service_error_saying("AccessDenied", 400, over).kind, ErrorKind::Permanent);
    }
}
