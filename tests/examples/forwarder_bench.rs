//! The forwarder on a large cluster: loads 5,000 nodes and 150,000 pods into a real
//! kube-apiserver v1.20.2, starts the release forwarder binary against it (EventBridge in
//! moto, read back through an SQS queue), and reports its peak RSS, the time to its first
//! correct demand event, the events it publishes under 100 pod changes per second, and
//! the CPU seconds it used. Run by `scripts/bench-forwarder`.
//!
//! Sizes: BENCH_NODES (5000), BENCH_PODS (150000), BENCH_CHURN_SECS (120).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ballast_tests::aws::EventInbox;
use ballast_tests::kube::{apply_manifests, ControlPlane, Parts, ADMIN_TOKEN, FORWARDER_TOKEN};
use ballast_tests::moto::Moto;
use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

const POOLS: [&str; 3] = ["general", "batch", "gpu"];
const CONCURRENCY: usize = 48;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn config_yaml() -> String {
    let pools: String = POOLS
        .iter()
        .map(|p| {
            format!(
                "  - name: {p}\n    spot_asgs: [{p}-spot]\n    on_demand_asg: {p}-od\n    node_selector: {{ballast.io/pool: {p}}}\n"
            )
        })
        .collect();
    format!("cluster: bench\nregion: eu-west-1\nstate_table: ballast-bench\npools:\n{pools}")
}

fn node(i: usize) -> Node {
    let pool = POOLS[i % POOLS.len()];
    serde_json::from_value(json!({
        "metadata": { "name": format!("node-{i}"), "labels": {
            "ballast.io/pool": pool, "kubernetes.io/hostname": format!("node-{i}"),
            "eks.amazonaws.com/capacityType": if i.is_multiple_of(2) { "SPOT" } else { "ON_DEMAND" } } },
        "spec": { "providerID": format!("aws:///eu-west-1a/i-{i:017x}") },
    }))
    .expect("node")
}

/// Where pod `i` is: bound to node `i % nodes`, except every 100th, pending; and its pool.
fn placement(i: usize, nodes: usize) -> (Option<usize>, usize) {
    let bound = (!i.is_multiple_of(100)).then_some(i % nodes);
    (bound, bound.unwrap_or(i) % POOLS.len())
}

/// Pod `i`'s requests: 100-400m CPU, 128-512Mi.
fn requests(i: usize) -> (u64, u64) {
    (100 * (1 + i % 4) as u64, (128u64 << (i % 3)) << 20)
}

fn pod(i: usize, nodes: usize) -> Pod {
    let (bound, pool) = placement(i, nodes);
    let (cpu, mem) = requests(i);
    serde_json::from_value(json!({
        "metadata": { "name": format!("pod-{i}"), "labels": { "app": format!("app-{}", i % 50) } },
        "spec": {
            "nodeName": bound.map(|n| format!("node-{n}")),
            "nodeSelector": { "ballast.io/pool": POOLS[pool] },
            "containers": [{ "name": "app", "image": "registry.example/app:1",
                "resources": { "requests": { "cpu": format!("{cpu}m"), "memory": format!("{}Mi", mem >> 20) } } }],
        },
    }))
    .expect("pod")
}

async fn load(admin: &kube::Client, nodes: usize, pods: usize) {
    let started = Instant::now();
    let node_api: Api<Node> = Api::all(admin.clone());
    stream::iter(0..nodes)
        .for_each_concurrent(CONCURRENCY, |i| {
            let api = node_api.clone();
            async move {
                api.create(&PostParams::default(), &node(i)).await.expect("node");
                let ready = json!({ "status": { "conditions": [{ "type": "Ready", "status": "True" }],
                    "capacity": { "cpu": "16", "memory": "64Gi", "pods": "110" } } });
                api.patch_status(&format!("node-{i}"), &PatchParams::default(), &Patch::Merge(&ready))
                    .await
                    .expect("ready");
            }
        })
        .await;
    eprintln!("loaded {nodes} nodes in {:.0?}", started.elapsed());
    let pod_api: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let started = Instant::now();
    stream::iter(0..pods)
        .for_each_concurrent(CONCURRENCY, |i| {
            let api = pod_api.clone();
            async move {
                api.create(&PostParams::default(), &pod(i, nodes)).await.expect("pod");
                if i % 10_000 == 0 {
                    eprintln!("  {i} pods…");
                }
            }
        })
        .await;
    eprintln!("loaded {pods} pods in {:.0?}", started.elapsed());
}

/// (anonymous, file-backed) resident KiB of a process now: its heap and stacks, and the
/// pages of its binary and libraries it has touched.
fn resident(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("RssAnon:"), field("RssFile:"))
}

/// (peak RSS KiB, CPU seconds) of a process.
#[allow(unsafe_code)]
fn usage(pid: u32) -> (u64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(") ").map(|(_, rest)| rest.split(' ').collect()).unwrap_or_default();
    let ticks: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (hwm, ticks as f64 / hz)
}

fn count(
    envelopes: Vec<Value>,
    received: &mut BTreeMap<String, usize>,
    demand_at: &mut BTreeMap<String, Vec<chrono::DateTime<chrono::Utc>>>,
) {
    for e in envelopes {
        let kind = e["detail-type"].as_str().unwrap_or_default().to_string();
        if kind == "Pool Demand Changed" {
            let at = e["detail"]["observed_at"].as_str().and_then(|t| t.parse().ok()).expect("observed_at");
            demand_at.entry(e["detail"]["pool"].as_str().unwrap_or_default().to_string()).or_default().push(at);
        }
        *received.entry(kind).or_default() += 1;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let nodes = env_usize("BENCH_NODES", 5000);
    let pods = env_usize("BENCH_PODS", 150_000);
    let churn_secs = env_usize("BENCH_CHURN_SECS", 120);
    let forwarder_bin = std::env::var("FORWARDER_BIN").expect("FORWARDER_BIN: the release forwarder binary");
    let moto = Moto::start().expect("moto_server (scripts/test installs it)");
    let plane = ControlPlane::start(Parts::ApiServer).await.expect("kube-apiserver (scripts/kube-apiserver builds it)");
    let admin = plane.client(ADMIN_TOKEN);
    apply_manifests(&admin, "namespace.yaml", &["Namespace"]).await;
    apply_manifests(&admin, "forwarder.yaml", &["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]).await;
    load(&admin, nodes, pods).await;

    // What a correct first demand event says, per pool.
    let mut expected: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
    for i in 0..pods {
        let (cpu, mem) = requests(i);
        let e = expected.entry(POOLS[placement(i, nodes).1]).or_default();
        e.0 += cpu;
        e.1 += mem;
        e.2 += 1;
    }

    let sdk = moto.sdk().await;
    let inbox = EventInbox::create(&sdk, "bench").await;
    let dir = std::env::temp_dir().join(format!("ballast-bench-forwarder-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("ballast.yaml"), config_yaml()).expect("config");
    let debounce = 30u32;
    let started = Instant::now();
    let mut child = Command::new(&forwarder_bin)
        .env("KUBECONFIG", plane.write_kubeconfig(FORWARDER_TOKEN))
        .env("BALLAST_CONFIG_FILE", dir.join("ballast.yaml"))
        .env("BALLAST_EVENT_BUS", "bench")
        .env("BALLAST_DEBOUNCE", format!("{debounce}s"))
        // Every change counts: under churn, only the debounce window holds demand events back.
        .env("BALLAST_DEMAND_THRESHOLD_PERCENT", "0")
        .env("BALLAST_HEALTH_ADDR", "127.0.0.1:0")
        .env("AWS_ENDPOINT_URL", &moto.endpoint)
        .env("AWS_REGION", "eu-west-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("forwarder");
    let pid = child.id();

    // When each pool's demand events were observed (the first ones included): the debounce
    // is measured on these.
    let mut demand_at: BTreeMap<String, Vec<chrono::DateTime<chrono::Utc>>> = BTreeMap::new();
    // Time to the first demand event that is right for every pool.
    let mut correct: BTreeMap<String, bool> = BTreeMap::new();
    let first_correct = loop {
        for envelope in inbox.take().await {
            let d = &envelope["detail"];
            if envelope["detail-type"] != "Pool Demand Changed" {
                continue;
            }
            let pool = d["pool"].as_str().unwrap_or_default().to_string();
            let want = expected.get(pool.as_str()).copied().unwrap_or_default();
            let got = (
                d["cpu_millis"].as_u64().unwrap_or(0),
                d["memory_bytes"].as_u64().unwrap_or(0),
                d["pods"].as_u64().unwrap_or(0),
            );
            assert_eq!(got, want, "pool {pool}: the first demand event must be right");
            let at = d["observed_at"].as_str().and_then(|t| t.parse().ok()).expect("observed_at");
            demand_at.entry(pool.clone()).or_default().push(at);
            correct.insert(pool, true);
        }
        if correct.len() == POOLS.len() {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(600), "no demand event within 10 minutes");
        assert!(child.try_wait().expect("wait").is_none(), "the forwarder exited");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (rss_after_list, cpu_after_list) = usage(pid);

    // Churn: 100 pod changes per second (create and delete), pods spread over the pools;
    // each second one node flips Ready/NotReady, every 5 s one pending pod turns unschedulable.
    let pod_api: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let node_api: Api<Node> = Api::all(admin.clone());
    let churn_started = Instant::now();
    let mut changes = 0usize;
    let mut flips = 0usize;
    let mut stuck = 0usize;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut received: BTreeMap<String, usize> = BTreeMap::new();
    let mut next = pods;
    let mut round = 0usize;
    while churn_started.elapsed() < Duration::from_secs(churn_secs as u64) {
        tick.tick().await;
        round += 1;
        if round.is_multiple_of(10) {
            let ready = if (round / 10).is_multiple_of(2) { "True" } else { "False" };
            let status = json!({ "status": { "conditions": [{ "type": "Ready", "status": ready }] } });
            node_api.patch_status("node-0", &PatchParams::default(), &Patch::Merge(&status)).await.expect("flip");
            flips += 1;
        }
        if round.is_multiple_of(50) {
            // Pending pods are every 100th: pod-0, pod-100, …
            let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let status = json!({ "status": { "phase": "Pending", "conditions": [{ "type": "PodScheduled",
                "status": "False", "reason": "Unschedulable", "lastTransitionTime": now }] } });
            let name = format!("pod-{}", stuck * 100);
            pod_api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("unschedulable");
            stuck += 1;
        }
        // 10 changes per 100 ms: 5 creates, 5 deletes of the oldest churn pods.
        let batch: Vec<(bool, usize)> = (0..5).flat_map(|k| [(true, next + k), (false, next + k - 5)]).collect();
        next += 5;
        stream::iter(batch)
            .for_each_concurrent(10, |(create, i)| {
                let api = pod_api.clone();
                async move {
                    if create {
                        let _ = api.create(&PostParams::default(), &pod(i, nodes)).await;
                    } else if i >= pods {
                        let _ = api.delete(&format!("pod-{i}"), &DeleteParams::default().grace_period(0)).await;
                    }
                }
            })
            .await;
        changes += 10;
        if changes.is_multiple_of(1000) {
            count(inbox.take().await, &mut received, &mut demand_at);
        }
    }
    let churn_elapsed = churn_started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    count(inbox.take().await, &mut received, &mut demand_at);
    let (rss_peak, cpu_total) = usage(pid);
    let (rss_anon, rss_file) = resident(pid);
    // SAFETY: plain signal to our own child.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid as i32, libc::SIGTERM)
    };
    let status = child.wait().expect("forwarder exit");

    let minutes = churn_elapsed.as_secs_f64() / 60.0;
    let demand = received.get("Pool Demand Changed").copied().unwrap_or(0);
    // The shortest time between two demand events of the same pool.
    let min_gap = demand_at
        .values()
        .flat_map(|times| times.windows(2).map(|w| (w[1] - w[0]).num_milliseconds() as f64 / 1000.0))
        .fold(f64::INFINITY, f64::min);
    println!("forwarder benchmark: {nodes} nodes, {pods} pods, {} pools, release binary", POOLS.len());
    println!("  time to first correct demand event (all pools): {:.1} s", first_correct.as_secs_f64());
    println!(
        "  after the initial list: RSS peak {:.1} MiB, CPU {:.1} s",
        rss_after_list as f64 / 1024.0,
        cpu_after_list
    );
    println!(
        "  churn: {changes} pod changes in {:.0} s ({:.0}/s)",
        churn_elapsed.as_secs_f64(),
        changes as f64 / churn_elapsed.as_secs_f64()
    );
    for (kind, n) in &received {
        println!("    {kind}: {n} ({:.1}/min)", *n as f64 / minutes);
    }
    println!(
        "    demand events: {demand}; shortest gap between two of one pool: {min_gap:.1} s (debounce {debounce} s)"
    );
    println!("    node Ready flips made: {flips}; pods made unschedulable: {stuck} (one every 5 s)");
    println!("  peak RSS: {:.1} MiB (goal 32 MiB)", rss_peak as f64 / 1024.0);
    println!(
        "  RSS at the end: {:.1} MiB anonymous, {:.1} MiB of mapped files",
        rss_anon as f64 / 1024.0,
        rss_file as f64 / 1024.0
    );
    let elapsed = started.elapsed().as_secs_f64();
    println!("  CPU used: {cpu_total:.1} s in {elapsed:.0} s");
    println!("  stopped on SIGTERM: {status}");
    // The result cell of scripts/bench-forwarder's row in docs/src/benchmarks.md (checked
    // against the page by a test of ballast-cli).
    let per_minute: Vec<String> =
        received.iter().map(|(kind, n)| format!("{kind} {:.1}/min", *n as f64 / minutes)).collect();
    println!(
        "row: **peak RSS {:.1} MiB** (goal ≤ 32 MiB); first correct demand event for every pool {:.1} s after start; \
         CPU {cpu_after_list:.1} s for the initial list, {cpu_total:.1} s in all ({elapsed:.0} s); under churn \
         ({} pod changes/s): {}; shortest gap between two demand events of one pool {min_gap:.1} s (debounce {debounce} s)",
        rss_peak as f64 / 1024.0,
        first_correct.as_secs_f64(),
        (changes as f64 / churn_elapsed.as_secs_f64()).round(),
        per_minute.join(", "),
    );
    assert!(demand > 0, "demand moved under churn: some demand events were due");
    assert!(min_gap >= f64::from(debounce), "two demand events of one pool within {debounce} s");
    let _ = std::fs::remove_dir_all(&dir);
}
