//! The interruption function: SQS batches of AWS events (Spot, rebalance, state change,
//! launch failures, lifecycle actions, Health), partial batch failures for retries.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{service_fn, Error, LambdaEvent};

// One invocation at a time: a single-threaded runtime keeps memory down.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    ballast_lambda::init_tracing();
    let app = ballast_lambda::AwsLiveApp::from_env(ballast_lambda::Function::Interruption).await?;
    let app = &app;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        let deadline = ballast_lambda::handlers::deadline_of(&event.context);
        Ok::<SqsBatchResponse, Error>(app.interruption(event.payload, deadline).await)
    }))
    .await
}
