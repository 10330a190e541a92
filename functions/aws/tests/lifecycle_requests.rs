//! Request-level tests of the calls moto does not implement (HTTP 500 there):
//! CompleteLifecycleAction and RecordLifecycleActionHeartbeat. They check exactly what
//! the adapter sends and how it reads AWS's answers.

use aws_sdk_autoscaling::operation::complete_lifecycle_action::CompleteLifecycleActionOutput;
use aws_sdk_autoscaling::operation::record_lifecycle_action_heartbeat::RecordLifecycleActionHeartbeatOutput;
use aws_smithy_mocks::{mock, mock_client, RuleMode};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use ballast_aws::AwsAutoscaling;
use ballast_core::plan::LifecycleRef;
use ballast_core::ports::{Autoscaling, ErrorKind};

fn action() -> LifecycleRef {
    LifecycleRef {
        asg: "eks-general-on-demand".into(),
        hook: "ballast-drain".into(),
        token: "87654321-4321-4321-4321-210987654321".into(),
        instance_id: "i-0f9e8d7c6b5a40001".into(),
    }
}

fn error(status: u16, code: &str, message: &str) -> HttpResponse {
    HttpResponse::new(
        StatusCode::try_from(status).unwrap(),
        SdkBody::from(format!(
            "<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error><RequestId>r</RequestId></ErrorResponse>"
        )),
    )
}

fn adapter(client: aws_sdk_autoscaling::Client) -> AwsAutoscaling {
    AwsAutoscaling::from_clients(client, mock_client!(aws_sdk_ec2, []))
}

#[tokio::test]
async fn complete_sends_the_action_with_continue() {
    let a = action();
    let rule = mock!(aws_sdk_autoscaling::Client::complete_lifecycle_action)
        .match_requests(move |r| {
            r.auto_scaling_group_name() == Some("eks-general-on-demand")
                && r.lifecycle_hook_name() == Some("ballast-drain")
                && r.lifecycle_action_token() == Some(a.token.as_str())
                && r.instance_id() == Some("i-0f9e8d7c6b5a40001")
                && r.lifecycle_action_result() == Some("CONTINUE")
        })
        .then_output(|| CompleteLifecycleActionOutput::builder().build());
    let autoscaling = adapter(mock_client!(aws_sdk_autoscaling, [&rule]));
    autoscaling.complete_lifecycle_action(&action()).await.expect("completed");
    assert_eq!(rule.num_calls(), 1);
}

#[tokio::test]
async fn heartbeat_sends_the_action() {
    let rule = mock!(aws_sdk_autoscaling::Client::record_lifecycle_action_heartbeat)
        .match_requests(|r| {
            r.auto_scaling_group_name() == Some("eks-general-on-demand")
                && r.lifecycle_hook_name() == Some("ballast-drain")
                && r.lifecycle_action_token() == Some("87654321-4321-4321-4321-210987654321")
                && r.instance_id() == Some("i-0f9e8d7c6b5a40001")
        })
        .then_output(|| RecordLifecycleActionHeartbeatOutput::builder().build());
    let autoscaling = adapter(mock_client!(aws_sdk_autoscaling, [&rule]));
    autoscaling.record_lifecycle_heartbeat(&action()).await.expect("recorded");
    assert_eq!(rule.num_calls(), 1);
}

#[tokio::test]
async fn errors_say_whether_a_retry_helps() {
    let gone = mock!(aws_sdk_autoscaling::Client::complete_lifecycle_action).then_http_response(|| {
        error(400, "ValidationError", "No active Lifecycle Action found with instance ID i-0f9e8d7c6b5a40001")
    });
    let throttled = mock!(aws_sdk_autoscaling::Client::record_lifecycle_action_heartbeat)
        .then_http_response(|| error(400, "Throttling", "Rate exceeded"));
    let broken = mock!(aws_sdk_autoscaling::Client::record_lifecycle_action_heartbeat)
        .then_http_response(|| error(503, "ServiceUnavailable", "try later"));
    let autoscaling = adapter(mock_client!(aws_sdk_autoscaling, RuleMode::Sequential, [&gone, &throttled, &broken]));
    let err = autoscaling.complete_lifecycle_action(&action()).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Gone, "an action that is over is gone: {err}");
    assert!(!err.is_retryable());
    assert!(
        err.to_string().starts_with("CompleteLifecycleAction:")
            && err.to_string().contains("No active Lifecycle Action"),
        "{err}"
    );
    assert!(std::error::Error::source(&err).is_some(), "the SDK error is kept as the source");
    assert_eq!(autoscaling.record_lifecycle_heartbeat(&action()).await.unwrap_err().kind, ErrorKind::Retryable);
    assert_eq!(autoscaling.record_lifecycle_heartbeat(&action()).await.unwrap_err().kind, ErrorKind::Retryable);
}
