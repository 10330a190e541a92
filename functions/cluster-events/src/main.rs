//! The cluster-events function: the in-cluster forwarder's events.

use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::Value;

// One invocation at a time: a single-threaded runtime keeps memory down.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    ballast_lambda::init_tracing();
    let app = ballast_lambda::AwsLiveApp::from_env(ballast_lambda::Function::ClusterEvents).await?;
    let app = &app;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        app.direct(event.payload, ballast_lambda::handlers::deadline_of(&event.context)).await
    }))
    .await
}
