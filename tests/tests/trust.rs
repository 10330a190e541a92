//! The functions' SDK client trusts the CA bundle it is given, and only it: against the
//! TLS of a real kube-apiserver on 127.0.0.1, an SDK call with the API server's CA as the
//! bundle reaches the server (which answers it with an HTTP error), and with the system's
//! bundle the handshake is refused.

use aws_sdk_sqs::error::SdkError;
use ballast_tests::kube::{ControlPlane, Parts};

async fn call(plane: &ControlPlane, bundle: Vec<u8>) -> SdkError<aws_sdk_sqs::operation::list_queues::ListQueuesError> {
    let client = ballast_aws::https_client(Some(bundle)).expect("a bundle makes a client");
    let conf = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("eu-west-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "test"))
        .endpoint_url(plane.url())
        .http_client(client)
        .build();
    aws_sdk_sqs::Client::from_conf(conf).list_queues().send().await.expect_err("the API server is no SQS")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_trusts_the_bundle_it_is_given_and_only_it() {
    let Some(plane) = ControlPlane::start(Parts::ApiServer).await else { return };
    // An entry rustls cannot take beside the CA: left out, the call still goes through.
    let mut bundle = plane.ca_pem().into_bytes();
    bundle.extend_from_slice(b"\n-----BEGIN CERTIFICATE-----\nMIIBAAAA\n-----END CERTIFICATE-----\n");
    let trusted = call(&plane, bundle).await;
    assert!(
        matches!(trusted, SdkError::ServiceError(_) | SdkError::ResponseError(_)),
        "the handshake succeeded and the server answered: {trusted:?}"
    );
    let system = ballast_aws::trust_bundle(None).expect("the system's CA bundle");
    let refused = call(&plane, system).await;
    assert!(matches!(refused, SdkError::DispatchFailure(_)), "an unknown CA is refused: {refused:?}");
}
