//! A real moto server on 127.0.0.1 for the AWS tests, the SDK pointed at it, and
//! interceptors that record requests, hide instances a capacity error kept from
//! launching (moto has no capacity model), and inject faults.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_autoscaling::operation::describe_auto_scaling_groups::DescribeAutoScalingGroupsOutput;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextMut,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;

/// Where moto_server is: `BALLAST_MOTO_SERVER`, the test script's venv, or `PATH`.
fn moto_binary() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("BALLAST_MOTO_SERVER") {
        return Some(PathBuf::from(path));
    }
    let cached = crate::cache_dir().map(|c| c.join("venv/bin/moto_server"));
    cached.filter(|p| p.exists()).or_else(|| crate::on_path("moto_server"))
}

/// Whether a real counterpart that is missing must fail the run (CI) or skip a test.
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// A moto server for one test, killed when dropped.
pub struct Moto {
    child: Child,
    pub endpoint: String,
    /// moto's request log (its recorder), when started with [`Moto::start_recording`].
    recording: Option<PathBuf>,
}

impl Moto {
    /// Starts moto on a free loopback port. `None` (the test skips) only outside CI.
    pub fn start() -> Option<Moto> {
        Self::launch(false)
    }

    /// As [`Moto::start`], with every request logged (moto's recorder: method, URL,
    /// headers, body), to tell what each caller asked for.
    pub fn start_recording() -> Option<Moto> {
        Self::launch(true)
    }

    /// `scripts/moto-sam-server` (moto with what `sam deploy` and `cdk deploy` need from
    /// CloudFormation) run by the Python of moto's venv. `None` (skip) only outside CI.
    pub fn start_sam() -> Option<Moto> {
        let python = crate::cache_dir().map(|c| c.join("venv/bin/python")).filter(|p| p.exists());
        let Some(python) = python else {
            assert!(!required(), "CI=true but moto's venv is missing: run scripts/test");
            eprintln!("skipped: moto's venv not found (scripts/test installs it)");
            return None;
        };
        let mut command = Command::new(python);
        command.arg(crate::repo_root().join("scripts/moto-sam-server"));
        // It imports aws-sam-translator and boto3 before listening: slower than moto_server.
        Some(Self::launch_with(command, false, Duration::from_secs(60)))
    }

    fn launch(record: bool) -> Option<Moto> {
        let Some(binary) = moto_binary() else {
            assert!(!required(), "CI=true but moto_server is missing: run scripts/test, or set BALLAST_MOTO_SERVER");
            eprintln!("skipped: moto_server not found (scripts/test installs it)");
            return None;
        };
        // moto's venv Python runs `scripts/moto-server` (moto with the Auto Scaling
        // parameter it ignores honoured); a moto_server without its venv runs as it is.
        let python = binary.parent().map(|dir| dir.join("python")).filter(|p| p.exists());
        let command = match python {
            Some(python) => {
                let mut command = Command::new(python);
                command.arg(crate::repo_root().join("scripts/moto-server"));
                command
            }
            None => Command::new(binary),
        };
        Some(Self::launch_with(command, record, Duration::from_secs(20)))
    }

    fn launch_with(mut command: Command, record: bool, wait: Duration) -> Moto {
        let binary = command.get_program().to_string_lossy().into_owned();
        let port = crate::free_port();
        let recording = record.then(|| std::env::temp_dir().join(format!("ballast-moto-{port}.jsonl")));
        // moto's recorder writes to ./moto_recording unless told otherwise: never the work tree.
        let log = recording.clone().unwrap_or_else(|| std::env::temp_dir().join(format!("ballast-moto-{port}.unused")));
        command.env("MOTO_RECORDER_FILEPATH", &log);
        if record {
            command.env("MOTO_ENABLE_RECORDING", "true");
        }
        let child = command
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
        let mut moto = Moto { child, endpoint: format!("http://127.0.0.1:{port}"), recording };
        let deadline = Instant::now() + wait;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                let _ = moto.child.kill();
                panic!("moto_server did not listen on 127.0.0.1:{port} within {wait:?}");
            }
            if let Ok(Some(status)) = moto.child.try_wait() {
                panic!("moto_server exited: {status}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // Something answers; if another process held the port, ours exits on the failed
        // bind: never take the other server for ours.
        std::thread::sleep(Duration::from_millis(300));
        if let Ok(Some(status)) = moto.child.try_wait() {
            panic!("moto_server exited after 127.0.0.1:{port} answered (another process holds it?): {status}");
        }
        moto
    }

    /// The SDK config for this server: dummy credentials, a region, one attempt per
    /// call (unsupported calls then fail at once instead of backing off).
    pub async fn sdk(&self) -> SdkConfig {
        self.sdk_as("test").await
    }

    /// The same with access key `caller`: moto takes any key (account 123456789012) and its
    /// request log shows who called.
    pub async fn sdk_as(&self, caller: &str) -> SdkConfig {
        aws_config::defaults(BehaviorVersion::latest())
            .endpoint_url(&self.endpoint)
            .region(aws_config::Region::new("eu-west-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(caller, "test", None, None, "moto"))
            .retry_config(RetryConfig::standard().with_max_attempts(1))
            .load()
            .await
    }
}

impl Moto {
    /// Every request logged so far (started with [`Moto::start_recording`]).
    pub fn requests(&self) -> Vec<serde_json::Value> {
        let path = self.recording.as_ref().expect("moto was started with start_recording");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("a logged request"))
            .collect()
    }
}

impl Moto {
    /// A raw request to the server (no SDK has it: moto's own API, or a service this crate
    /// has no SDK for); `scope` is the SigV4 credential scope moto routes by. The status.
    fn post(&self, path: &str, scope: Option<&str>, content_type: &str, body: &str) -> u16 {
        use std::io::{Read, Write};
        let address = self.endpoint.trim_start_matches("http://");
        let mut stream = TcpStream::connect(address).expect("moto");
        let auth = scope.map_or(String::new(), |s| {
            format!("Authorization: AWS4-HMAC-SHA256 Credential=test/20261120/{s}/aws4_request, SignedHeaders=host, Signature=0\r\n")
        });
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: {content_type}\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).expect("request");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("answer");
        answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
    }

    /// Lambda invocations answered without running the function (no Docker here): what
    /// a test checks is the request, in the log.
    pub fn lambda_without_docker(&self) {
        let status = self.post("/moto-api/config", None, "application/json", r#"{"lambda": {"use_docker": false}}"#);
        assert_eq!(status, 201, "moto's config API");
    }

    /// A Lambda function by its name (its code never runs: see
    /// [`Moto::lambda_without_docker`], called here); its ARN.
    pub async fn function(&self, sdk: &SdkConfig, name: &str) -> String {
        self.lambda_without_docker();
        let empty_zip = b"PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0".to_vec();
        let created = aws_sdk_lambda::Client::new(sdk)
            .create_function()
            .function_name(name)
            .runtime(aws_sdk_lambda::types::Runtime::Providedal2023)
            .handler("bootstrap")
            .role(self.role(name))
            .code(
                aws_sdk_lambda::types::FunctionCode::builder().zip_file(aws_smithy_types::Blob::new(empty_zip)).build(),
            )
            .send()
            .await
            .expect("CreateFunction");
        created.function_arn().expect("an ARN").to_string()
    }

    /// What the functions answer next, in order (moto's Lambda without Docker echoes the
    /// event otherwise).
    pub fn lambda_answers(&self, answers: &[&str]) {
        let body = serde_json::json!({ "results": answers, "region": "eu-west-1" }).to_string();
        let status = self.post("/moto-api/static/lambda-simple/response", None, "application/json", &body);
        assert_eq!(status, 201, "moto's Lambda answers");
    }

    /// An IAM role (for a function to be created with), by its name; its ARN.
    pub fn role(&self, name: &str) -> String {
        let body = format!(
            "Action=CreateRole&Version=2010-05-08&RoleName={name}&AssumeRolePolicyDocument=%7B%22Version%22%3A%222012-10-17%22%2C%22Statement%22%3A%5B%5D%7D"
        );
        let status = self.post("/", Some("us-east-1/iam"), "application/x-www-form-urlencoded", &body);
        assert_eq!(status, 200, "CreateRole");
        format!("arn:aws:iam::123456789012:role/{name}")
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(path) = &self.recording {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Records every request's action (query protocols: `Action=...` in the body).
#[derive(Debug, Clone, Default)]
pub struct Recorder(pub Arc<Mutex<Vec<String>>>);

impl Recorder {
    pub fn calls(&self) -> Vec<String> {
        self.0.lock().expect("recorder").clone()
    }

    /// Recorded requests of one action, e.g. `SetDesiredCapacity`.
    pub fn of(&self, action: &str) -> Vec<String> {
        self.calls().into_iter().filter(|c| c.contains(&format!("Action={action}&"))).collect()
    }
}

impl Intercept for Recorder {
    fn name(&self) -> &'static str {
        "Recorder"
    }

    fn read_before_transmit(
        &self,
        ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let body = ctx.request().body().bytes().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
        self.0.lock().expect("recorder").push(body);
        Ok(())
    }
}

/// Hides instances from DescribeAutoScalingGroups: the ones a capacity error would have
/// kept from launching, since moto launches everything at once.
#[derive(Debug, Clone, Default)]
pub struct Unlaunched(pub Arc<Mutex<Vec<String>>>);

impl Unlaunched {
    pub fn hide(&self, ids: &[String]) {
        self.0.lock().expect("unlaunched").extend(ids.iter().cloned());
    }
}

impl Intercept for Unlaunched {
    fn name(&self) -> &'static str {
        "Unlaunched"
    }

    fn modify_before_completion(
        &self,
        ctx: &mut FinalizerInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let hidden = self.0.lock().expect("unlaunched").clone();
        if let Some(Ok(output)) = ctx.output_or_error_mut() {
            if let Some(out) = output.downcast_mut::<DescribeAutoScalingGroupsOutput>() {
                for group in out.auto_scaling_groups.iter_mut().flatten() {
                    if let Some(instances) = group.instances.as_mut() {
                        instances.retain(|i| !i.instance_id().is_some_and(|id| hidden.iter().any(|h| h == id)));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Turns a share of responses into 503 Throttling (query protocol), deterministically:
/// every `every`-th call fails, or, with a seed, each call fails with odds 1 in `every`
/// (a hash of the seed and the call's number), so failures do not fall in step with a
/// retry's calls.
#[derive(Debug, Clone)]
pub struct Faults {
    pub every: usize,
    pub seed: Option<u64>,
    pub count: Arc<Mutex<(usize, usize)>>,
    /// Off during setup: only Ballast's calls meet faults.
    pub enabled: Arc<std::sync::atomic::AtomicBool>,
}

impl Faults {
    pub fn every(every: usize) -> Self {
        Faults { every, seed: None, count: Arc::new(Mutex::new((0, 0))), enabled: Default::default() }
    }

    pub fn one_in(every: usize, seed: u64) -> Self {
        Faults { seed: Some(seed), ..Faults::every(every) }
    }

    fn fails(&self, call: usize) -> bool {
        match self.seed {
            None => call.is_multiple_of(self.every),
            // SplitMix64: a well-mixed hash of (seed, call), reproducible across runs.
            Some(seed) => {
                let mut z = seed ^ (call as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)).is_multiple_of(self.every as u64)
            }
        }
    }

    pub fn enable(&self) {
        self.enabled.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// (calls, injected faults)
    pub fn counts(&self) -> (usize, usize) {
        *self.count.lock().expect("faults")
    }
}

impl Intercept for Faults {
    fn name(&self) -> &'static str {
        "Faults"
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if !self.enabled.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        let mut count = self.count.lock().expect("faults");
        count.0 += 1;
        if !self.fails(count.0) {
            return Ok(());
        }
        count.1 += 1;
        let response = ctx.response_mut();
        *response.status_mut() = StatusCode::try_from(503u16).expect("503 is a status");
        *response.body_mut() = SdkBody::from(
            "<ErrorResponse><Error><Type>Receiver</Type><Code>Throttling</Code><Message>Rate exceeded (injected)</Message></Error><RequestId>fault</RequestId></ErrorResponse>",
        );
        Ok(())
    }
}
