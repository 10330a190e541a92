//! A call that hangs (a server that accepts the connection and never answers) ends
//! within its own bound, well before the invocation's deadline: the run fails the call
//! by its kind (a timeout is retryable), and its plan is logged. Short bounds are given
//! here through the same config the functions use; their own values are tested beside
//! them (`ballast-aws timeouts`, `ballast-kube every_call_is_bounded`).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use ballast_aws::{AwsAutoscaling, CallTimeouts, DynamoStore};
use ballast_core::config::PoolConfig;
use ballast_core::observe::{AsgSize, ObservedAsg};
use ballast_core::plan::LifecycleRef;
use ballast_core::ports::{Autoscaling, Cluster, PortError, StateStore};
use ballast_core::reconcile::Reconciler;
use ballast_core::testing::{Call, InMemory};
use ballast_kube::connect::KubeTimeouts;
use ballast_lambda::app::SystemClock;
use ballast_lambda::App;
use ballast_tests::aws::{fixture_json, sqs_batch};
use ballast_tests::{config_with_dry_run, state};

/// Bounds short enough for a test, long enough for a loaded machine's loopback.
const SHORT: CallTimeouts = CallTimeouts {
    connect: Duration::from_millis(300),
    attempt: Duration::from_millis(400),
    operation: Duration::from_millis(1_000),
};
const SHORT_KUBE: KubeTimeouts = KubeTimeouts {
    connect: Duration::from_millis(300),
    read: Duration::from_millis(800),
    write: Duration::from_millis(800),
};
/// Far beyond every bound above: a call still running then hangs.
const HANG: Duration = Duration::from_secs(20);

/// A server on 127.0.0.1 that accepts every connection, reads nothing and never
/// answers. Its URL.
async fn hung_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    format!("http://{address}")
}

async fn hung_sdk(endpoint: &str) -> aws_config::SdkConfig {
    ballast_aws::sdk_loader(SHORT)
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("eu-west-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new("AKID", "secret", None, None, "test"))
        .load()
        .await
}

fn general() -> PoolConfig {
    config_with_dry_run(false).pools[0].clone()
}

/// Within the operation bound and a second of slack, not at [`HANG`].
async fn bounded<T>(what: &str, call: impl std::future::Future<Output = Result<T, PortError>>) -> PortError {
    let started = Instant::now();
    let result = tokio::time::timeout(HANG, call).await;
    let took = started.elapsed();
    let Ok(result) = result else { panic!("{what} still hung after {HANG:?}: no bound on the call") };
    let Err(err) = result else { panic!("{what} answered by a server that never answers") };
    assert!(took < SHORT.operation + Duration::from_secs(1), "{what} took {took:?}: {err}");
    assert!(err.is_retryable(), "{what}: a timeout is retryable: {err:?}");
    err
}

#[tokio::test]
async fn a_hung_aws_call_fails_within_its_bound_naming_the_operation() {
    let sdk = hung_sdk(&hung_server().await).await;
    let err = bounded("describe_pool", AwsAutoscaling::new(&sdk).describe_pool(&general())).await;
    assert!(err.to_string().contains("DescribeAutoScalingGroups"), "{err}");
    let err =
        bounded("set_desired_capacity", AwsAutoscaling::new(&sdk).set_desired_capacity("eks-general-spot", 3)).await;
    assert!(err.to_string().contains("SetDesiredCapacity"), "{err}");
    let store = DynamoStore::new(&sdk, "ballast-state".to_string());
    let err = bounded("load", store.load("general")).await;
    assert!(err.to_string().to_lowercase().contains("getitem") || err.to_string().contains("load"), "{err}");
}

#[tokio::test]
async fn a_hung_kubernetes_call_fails_within_its_bound_naming_the_operation() {
    let url = hung_server().await;
    let config = kube::Config::new(url.parse().expect("a URL"));
    let connector = ballast_kube::Connector::fixed_with(config, SHORT_KUBE).expect("connector");
    let cluster = ballast_kube::KubeCluster::new(connector, &config_with_dry_run(false).pools);
    let err = bounded("pool_nodes", cluster.pool_nodes(&general())).await;
    assert!(err.to_string().contains("list nodes"), "{err}");
    let err = bounded("cordon", cluster.cordon("ip-10-0-0-1.eu-west-1.compute.internal")).await;
    assert!(err.to_string().contains("ip-10-0-0-1"), "{err}");
}

/// Auto Scaling as the run sees it: reads from the in-memory world, every write through
/// the real SDK adapter to the server that never answers.
struct WritesHang {
    memory: InMemory,
    aws: AwsAutoscaling,
}

#[async_trait]
impl Autoscaling for WritesHang {
    async fn describe_pool(&self, pool: &PoolConfig) -> Result<(Vec<ObservedAsg>, Option<ObservedAsg>), PortError> {
        self.memory.describe_pool(pool).await
    }
    async fn asgs_of_instances(&self, ids: &[String]) -> Result<std::collections::BTreeMap<String, String>, PortError> {
        self.memory.asgs_of_instances(ids).await
    }
    async fn launched_by(
        &self,
        ids: &[String],
    ) -> Result<std::collections::BTreeMap<String, ballast_core::observe::LaunchedBy>, PortError> {
        self.memory.launched_by(ids).await
    }
    async fn asg_tags(
        &self,
        asgs: &[String],
    ) -> Result<std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>, PortError> {
        self.memory.asg_tags(asgs).await
    }
    async fn asg_size(&self, asg: &str) -> Result<AsgSize, PortError> {
        self.memory.asg_size(asg).await
    }
    async fn set_desired_capacity(&self, asg: &str, desired: u32) -> Result<(), PortError> {
        self.aws.set_desired_capacity(asg, desired).await
    }
    async fn terminate_instance(&self, id: &str, decrement: bool) -> Result<(), PortError> {
        self.aws.terminate_instance(id, decrement).await
    }
    async fn record_lifecycle_heartbeat(&self, a: &LifecycleRef) -> Result<(), PortError> {
        self.aws.record_lifecycle_heartbeat(a).await
    }
    async fn complete_lifecycle_action(&self, a: &LifecycleRef) -> Result<(), PortError> {
        self.aws.complete_lifecycle_action(a).await
    }
}

#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A spot warning whose surge hangs in SetDesiredCapacity: before, the run waited for
/// the answer until Lambda killed it (nothing logged, the intent never taken back). Now
/// the call fails at its bound, the message is reported failed for a retry, the plan
/// the run stopped in is logged, and the surge's intent is taken back for that retry.
#[tokio::test]
async fn a_run_whose_call_hangs_ends_before_its_deadline_with_its_plan_logged() {
    use tracing_subscriber::util::SubscriberInitExt;
    let logs = Logs::default();
    let sink = logs.clone();
    let _logging = tracing_subscriber::fmt().with_ansi(false).with_writer(move || sink.clone()).set_default();

    let sdk = hung_sdk(&hung_server().await).await;
    let memory = InMemory::new(state("steady.json"));
    let config = config_with_dry_run(false);
    let now = chrono::Utc::now();
    let warning = fixture_json("spot-interruption-terminate.json", |e| e["time"] = now.to_rfc3339().into());
    let app = App {
        function: "interruption",
        origin: config.origin(),
        reconciler: Reconciler {
            autoscaling: WritesHang { memory: memory.clone(), aws: AwsAutoscaling::new(&sdk) },
            cluster: memory.clone(),
            store: memory.clone(),
            clock: SystemClock,
            owner: "hung-run".into(),
            config: Arc::new(config),
        },
        dead_letters: None::<ballast_aws::SqsDeadLetters>,
        max_receives: None,
        redelivery: None,
        metrics: |_| {},
    };
    let deadline = now + chrono::Duration::seconds(60);
    let started = Instant::now();
    let batch = sqs_batch(&[("m-1".to_string(), warning)]);
    let Ok((response, summary)) = tokio::time::timeout(HANG, app.interruption_until(batch, Some(deadline))).await
    else {
        panic!("the run still hung after {HANG:?}, its deadline {deadline} far off: no bound on the call");
    };
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "the run took {took:?}");
    let failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    assert_eq!(failed, ["m-1"], "a timeout is retryable: the message comes back; {:?}", summary.errors);
    assert!(summary.errors.iter().any(|e| e.contains("SetDesiredCapacity")), "{:?}", summary.errors);
    let logged = String::from_utf8(logs.0.lock().expect("logs").clone()).expect("text");
    assert!(logged.contains("plan (stopped part-way)"), "{logged}");
    assert!(logged.contains("surge a replacement"), "the plan with its reasons: {logged}");
    // Nothing reached past the hung call; its surge is planned again by the retry.
    assert!(!memory.world().calls.iter().any(|c| matches!(c, Call::Terminate { .. })), "{:?}", memory.world().calls);
}
