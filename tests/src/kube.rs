//! A real Kubernetes control plane v1.20.2 for the tests: etcd, kube-apiserver and,
//! where scheduling, preemption, ReplicaSets or PodDisruptionBudget status matter,
//! kube-scheduler and kube-controller-manager. Built by `scripts/kube-apiserver`
//! (cached), listening on 127.0.0.1 only, stopped when dropped.
//!
//! There is no kubelet: nodes are API objects the tests make Ready, and pods are marked
//! Running by patching their status.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use crate::moto::required;
use crate::{free_port, on_path};

/// Static tokens the API server accepts, by who they stand for.
pub const ADMIN_TOKEN: &str = "admin-token";
/// A user in the group the Lambda role maps to through the EKS access entry.
pub const FUNCTIONS_TOKEN: &str = "functions-token";
pub const FUNCTIONS_GROUP: &str = "ballast:functions";
/// The forwarder's ServiceAccount (infra/k8s).
pub const FORWARDER_TOKEN: &str = "forwarder-token";

fn binaries() -> Option<PathBuf> {
    let dir = match std::env::var_os("BALLAST_KUBE_BIN") {
        Some(dir) => PathBuf::from(dir),
        None => crate::cache_dir()?.join("kube-1.20.2"),
    };
    let complete = ["kube-apiserver", "kube-scheduler", "kube-controller-manager"].iter().all(|b| dir.join(b).exists());
    (complete && on_path("etcd").is_some() && on_path("openssl").is_some()).then_some(dir)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parts {
    /// etcd and kube-apiserver.
    ApiServer,
    /// Also kube-scheduler and kube-controller-manager (Deployments, ReplicaSets,
    /// PodDisruptionBudget status).
    WithControllers,
}

pub struct ControlPlane {
    dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
    etcd: Child,
    apiserver: Option<Child>,
    others: Vec<Child>,
}

fn run(cmd: &mut Command) {
    let out = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).output().expect("openssl runs");
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn spawn(program: &Path, args: &[String], log: &Path) -> Child {
    let log = std::fs::File::create(log).expect("log file");
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()))
}

fn wait_for_port(port: u16, what: &str, child: &mut Child, log: &Path) {
    if let Err(exited) = wait_listening(port, what, child, log) {
        panic!("{exited}");
    }
}

/// Waits until `child` listens on `port`; `Err` with its log if it exited first.
fn wait_listening(port: u16, what: &str, child: &mut Child, log: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{what} exited ({status}): {}", tail(log)));
        }
        assert!(Instant::now() < deadline, "{what} did not listen on 127.0.0.1:{port}: {}", tail(log));
        std::thread::sleep(Duration::from_millis(100));
    }
    // Something answers; if another process held the port, ours exits on the failed
    // bind within moments: never take the other one for ours.
    std::thread::sleep(Duration::from_millis(300));
    if let Ok(Some(status)) = child.try_wait() {
        return Err(format!("{what} exited ({status}): {}", tail(log)));
    }
    Ok(())
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// etcd on two fresh ports. Another process can still take a port between our check and
/// etcd's bind: then etcd exits saying so, and it is started again on other ports.
fn start_etcd(dir: &Path) -> (Child, u16) {
    let log = dir.join("etcd.log");
    let mut attempts = 0;
    loop {
        let port = free_port();
        let mut etcd = spawn(
            &on_path("etcd").expect("etcd"),
            &[
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{port}"),
                format!("--advertise-client-urls=http://127.0.0.1:{port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{}", free_port()),
                "--unsafe-no-fsync".into(),
            ],
            &log,
        );
        match wait_listening(port, "etcd", &mut etcd, &log) {
            Ok(()) => return (etcd, port),
            Err(exited) if exited.contains("address already in use") && attempts < 3 => attempts += 1,
            Err(exited) => panic!("{exited}"),
        }
    }
}

impl ControlPlane {
    /// `None` (the test skips) only outside CI when the binaries are missing.
    pub async fn start(parts: Parts) -> Option<ControlPlane> {
        let Some(bin) = binaries() else {
            assert!(
                !required(),
                "CI=true but the Kubernetes control plane is missing: run scripts/kube-apiserver (scripts/test does)"
            );
            eprintln!("skipped: kube-apiserver v1.20.2 not built (scripts/kube-apiserver builds it)");
            return None;
        };
        let dir = std::env::temp_dir().join(format!("ballast-kube-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        make_certificates(&dir);
        std::fs::write(
            dir.join("tokens.csv"),
            format!(
                "{ADMIN_TOKEN},admin,admin,system:masters\n\
                 {FUNCTIONS_TOKEN},ballast-functions,ballast-functions,{FUNCTIONS_GROUP}\n\
                 {FORWARDER_TOKEN},system:serviceaccount:ballast:ballast-forwarder,forwarder,system:serviceaccounts\n"
            ),
        )
        .expect("token file");
        let (etcd, etcd_port) = start_etcd(&dir);
        std::fs::write(dir.join("etcd-port"), etcd_port.to_string()).expect("etcd port");
        let mut plane = ControlPlane { dir, bin, port: free_port(), etcd, apiserver: None, others: Vec::new() };
        plane.start_apiserver().await;
        if parts == Parts::WithControllers {
            plane.start_controllers();
        }
        Some(plane)
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    async fn start_apiserver(&mut self) {
        let etcd_port = std::fs::read_to_string(self.dir.join("etcd-port")).expect("etcd port");
        let log = self.dir.join("kube-apiserver.log");
        let args = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={}", self.port),
            "--insecure-port=0".into(),
            format!("--tls-cert-file={}", self.path("server.crt")),
            format!("--tls-private-key-file={}", self.path("server.key")),
            format!("--token-auth-file={}", self.path("tokens.csv")),
            "--authorization-mode=RBAC".into(),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", self.path("sa.pub")),
            format!("--service-account-signing-key-file={}", self.path("sa.key")),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            // No token controller, no kubelet: nothing would clear these.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition".into(),
        ];
        let mut child = spawn(&self.bin.join("kube-apiserver"), &args, &log);
        wait_for_port(self.port, "kube-apiserver", &mut child, &log);
        self.apiserver = Some(child);
        let client = self.client(ADMIN_TOKEN);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let request = http::Request::get("/readyz").body(Vec::new()).expect("request");
            match client.request_text(request).await {
                Ok(text) if text.trim() == "ok" => break,
                other => assert!(Instant::now() < deadline, "kube-apiserver not ready: {other:?}: {}", tail(&log)),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn start_controllers(&mut self) {
        let kubeconfig = self.write_kubeconfig(ADMIN_TOKEN);
        let common = [format!("--kubeconfig={kubeconfig}"), "--leader-elect=false".into(), "--port=0".into()];
        let mut scheduler_args = common.to_vec();
        scheduler_args.push("--secure-port=0".into());
        let mut cm_args = common.to_vec();
        cm_args.extend([
            "--secure-port=0".into(),
            // What the tests need, and nothing that would fight nodes without a kubelet.
            "--controllers=deployment,replicaset,disruption".into(),
        ]);
        let scheduler = spawn(&self.bin.join("kube-scheduler"), &scheduler_args, &self.dir.join("kube-scheduler.log"));
        let cm =
            spawn(&self.bin.join("kube-controller-manager"), &cm_args, &self.dir.join("kube-controller-manager.log"));
        self.others.extend([scheduler, cm]);
    }

    /// Stops the API server and starts it again on the same port and etcd: watchers see
    /// their connection drop, then (their resource version now older than the new watch
    /// cache) 410 Gone.
    pub async fn restart_apiserver(&mut self) {
        if let Some(mut child) = self.apiserver.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.start_apiserver().await;
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    pub fn ca_pem(&self) -> String {
        std::fs::read_to_string(self.dir.join("ca.crt")).expect("CA")
    }

    pub fn kube_config(&self, token: &str) -> kube::Config {
        let mut config = kube::Config::new(self.url().parse().expect("URL"));
        config.root_cert =
            Some(ballast_kube::connect::ca_certificates(&STANDARD.encode(self.ca_pem())).expect("CA bundle"));
        config.auth_info.token = Some(token.to_string().into());
        config
    }

    pub fn client(&self, token: &str) -> kube::Client {
        kube::Client::try_from(self.kube_config(token)).expect("client")
    }

    pub fn write_kubeconfig(&self, token: &str) -> String {
        let path = self.path(&format!("kubeconfig-{token}"));
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority: {}\n\
             users:\n- name: test\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context: {{cluster: test, user: test}}\n\
             current-context: test\n",
            self.url(),
            self.path("ca.crt")
        );
        std::fs::write(&path, text).expect("kubeconfig");
        path
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        for child in self.others.iter_mut().chain(self.apiserver.as_mut()).chain(std::iter::once(&mut self.etcd)) {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::env::var_os("BALLAST_KEEP_KUBE_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn make_certificates(dir: &Path) {
    let openssl = || {
        let mut c = Command::new("openssl");
        c.current_dir(dir);
        c
    };
    run(openssl().args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]).args([
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/CN=ballast-test-ca",
    ]));
    run(openssl()
        .args(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr"])
        .args(["-subj", "/CN=kube-apiserver"]));
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("ext file");
    run(openssl().args(["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key"]).args([
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        "-out",
        "server.crt",
    ]));
    run(openssl().args(["genrsa", "-out", "sa.key", "2048"]));
    run(openssl().args(["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]));
}

/// A node object as a kubelet would register it, then made Ready.
pub async fn add_node(client: &kube::Client, name: &str, labels: &[(&str, &str)], cpu: &str, memory: &str) -> Node {
    add_instance_node(client, name, &format!("i-{:017x}", hash(name)), labels, cpu, memory).await
}

/// A Ready node for an EC2 instance (its provider ID names the instance).
pub async fn add_instance_node(
    client: &kube::Client,
    name: &str,
    instance: &str,
    labels: &[(&str, &str)],
    cpu: &str,
    memory: &str,
) -> Node {
    let nodes: Api<Node> = Api::all(client.clone());
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain([("kubernetes.io/hostname".to_string(), name.to_string())])
        .collect();
    let node: Node = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": { "providerID": format!("aws:///eu-west-1a/{instance}") },
    }))
    .expect("node");
    nodes.create(&PostParams::default(), &node).await.expect("create node");
    let size = json!({"cpu": cpu, "memory": memory, "pods": "110"});
    let status = json!({ "status": { "capacity": size, "allocatable": size } });
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("node size");
    set_node_ready(client, name, true).await
}

fn hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3)) >> 4
}

pub async fn set_node_ready(client: &kube::Client, name: &str, ready: bool) -> Node {
    let nodes: Api<Node> = Api::all(client.clone());
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let status = json!({ "status": {
        "conditions": [{ "type": "Ready", "status": if ready { "True" } else { "False" },
            "reason": "KubeletReady", "lastHeartbeatTime": now, "lastTransitionTime": now }],
    }});
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("node status")
}

/// Marks a pod Running and Ready, as its kubelet would.
pub async fn mark_running(client: &kube::Client, namespace: &str, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let status = json!({ "status": { "phase": "Running", "conditions": [
        { "type": "Ready", "status": "True", "lastTransitionTime": now },
        { "type": "PodScheduled", "status": "True", "lastTransitionTime": now },
    ]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("pod status")
}

/// Polls `check` until it holds, or panics with `what` after `timeout`.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What a pod spec (as JSON, the API's field names) breaks of the `restricted` Pod
/// Security Standard (<https://kubernetes.io/docs/concepts/security/pod-security-standards/>),
/// checked here because v1.20's API server predates the PodSecurity admission plugin.
pub fn restricted_violations(spec: &serde_json::Value) -> Vec<String> {
    let mut wrong = Vec::new();
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec[host] == true {
            wrong.push(format!("{host} is set"));
        }
    }
    let allowed_volumes =
        ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];
    for v in spec["volumes"].as_array().into_iter().flatten() {
        let kinds: Vec<&String> =
            v.as_object().into_iter().flatten().map(|(k, _)| k).filter(|k| *k != "name").collect();
        if !kinds.iter().all(|k| allowed_volumes.contains(&k.as_str())) {
            wrong.push(format!("volume {} is of a type restricted forbids: {kinds:?}", v["name"]));
        }
    }
    let pod = &spec["securityContext"];
    let containers: Vec<&serde_json::Value> =
        ["initContainers", "containers"].iter().flat_map(|k| spec[*k].as_array().into_iter().flatten()).collect();
    for c in containers {
        let name = c["name"].as_str().unwrap_or("?");
        let sc = &c["securityContext"];
        if sc["privileged"] == true {
            wrong.push(format!("{name}: privileged"));
        }
        if sc["allowPrivilegeEscalation"] != false {
            wrong.push(format!("{name}: allowPrivilegeEscalation is not false"));
        }
        let drops = sc["capabilities"]["drop"].as_array().cloned().unwrap_or_default();
        if !drops.iter().any(|d| d == "ALL") {
            wrong.push(format!("{name}: capabilities do not drop ALL"));
        }
        for add in sc["capabilities"]["add"].as_array().into_iter().flatten() {
            if add != "NET_BIND_SERVICE" {
                wrong.push(format!("{name}: adds capability {add}"));
            }
        }
        let non_root = if sc["runAsNonRoot"].is_null() { &pod["runAsNonRoot"] } else { &sc["runAsNonRoot"] };
        if non_root != true {
            wrong.push(format!("{name}: runAsNonRoot is not true"));
        }
        if sc["runAsUser"] == 0 || (sc["runAsUser"].is_null() && pod["runAsUser"] == 0) {
            wrong.push(format!("{name}: runs as user 0"));
        }
        let seccomp = if sc["seccompProfile"].is_null() { &pod["seccompProfile"] } else { &sc["seccompProfile"] };
        if !matches!(seccomp["type"].as_str(), Some("RuntimeDefault" | "Localhost")) {
            wrong.push(format!("{name}: seccompProfile is not RuntimeDefault or Localhost"));
        }
        if c["ports"].as_array().into_iter().flatten().any(|p| !p["hostPort"].is_null() && p["hostPort"] != 0) {
            wrong.push(format!("{name}: uses a hostPort"));
        }
    }
    wrong
}

/// Debian's kubectl 1.20 (`scripts/kubectl` unpacks it): `BALLAST_KUBECTL`, else the
/// cache. `None` (the test skips) only outside CI.
pub fn kubectl() -> Option<PathBuf> {
    let path = match std::env::var_os("BALLAST_KUBECTL") {
        Some(p) => PathBuf::from(p),
        None => crate::cache_dir()?.join("kubernetes-client-1.20.2/usr/bin/kubectl"),
    };
    if path.exists() {
        return Some(path);
    }
    assert!(!crate::moto::required(), "CI=true but kubectl is missing: run scripts/kubectl (scripts/test does)");
    eprintln!("skipped: Debian's kubectl 1.20 not unpacked (scripts/kubectl does it)");
    None
}

/// `kubectl kustomize DIR`, as objects.
pub fn kustomize(kubectl: &Path, dir: &Path) -> Vec<serde_json::Value> {
    let out = Command::new(kubectl).arg("kustomize").arg(dir).output().expect("run kubectl");
    assert!(out.status.success(), "kubectl kustomize {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    yaml_objects(&String::from_utf8(out.stdout).expect("UTF-8"))
}

/// The documents of a YAML stream, as objects (empty documents left out).
fn yaml_objects(text: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| serde_json::Value::deserialize(d).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// Applies `objects` in order with server-side apply (`--dry-run=server` if asked), as an
/// admin would with `kubectl apply --server-side`; returns them as the server answered.
pub async fn apply_objects(
    client: &kube::Client,
    objects: &[serde_json::Value],
    dry_run: bool,
) -> Vec<serde_json::Value> {
    use kube::api::{DynamicObject, GroupVersionKind};
    let mut applied = Vec::new();
    for value in objects {
        let object: DynamicObject = serde_json::from_value(value.clone()).expect("a Kubernetes object");
        let types = object.types.clone().expect("apiVersion and kind");
        let gvk = GroupVersionKind::try_from(&types).expect("group version kind");
        let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await.expect("known kind");
        let api: Api<DynamicObject> = match (capabilities.scope, object.metadata.namespace.as_deref()) {
            (kube::discovery::Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
            _ => Api::all_with(client.clone(), &resource),
        };
        let name = object.metadata.name.clone().expect("name");
        let mut params = PatchParams::apply("test-admin").force();
        params.dry_run = dry_run;
        let object = api
            .patch(&name, &params, &Patch::Apply(value))
            .await
            .unwrap_or_else(|e| panic!("apply {} {name}: {e}", types.kind));
        applied.push(serde_json::to_value(object).expect("object as JSON"));
    }
    applied
}

/// Applies the manifests of `infra/k8s/FILE` whose kind is in `kinds`, as an admin would
/// with `kubectl apply --server-side`.
pub async fn apply_manifests(client: &kube::Client, file: &str, kinds: &[&str]) {
    apply_manifests_with(client, file, kinds, false).await;
}

/// The same with `--dry-run=server`: the server validates, admits and discards. Returns
/// the objects as the server answered them.
pub async fn apply_manifests_with(
    client: &kube::Client,
    file: &str,
    kinds: &[&str],
    dry_run: bool,
) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(crate::repo_root().join("infra/k8s").join(file)).expect("manifest");
    let objects: Vec<serde_json::Value> =
        yaml_objects(&text).into_iter().filter(|o| o["kind"].as_str().is_some_and(|k| kinds.contains(&k))).collect();
    apply_objects(client, &objects, dry_run).await
}
