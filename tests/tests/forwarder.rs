//! The forwarder against a real kube-apiserver v1.20.2 (+ scheduler), publishing to an
//! EventBridge bus in moto whose rule delivers to an SQS queue: the events read back
//! must match the cluster as pods come, go and turn pending, as nodes turn Ready and
//! NotReady, join and leave, and across an API server restart (410, relist). Its
//! `/metrics`, scraped over HTTP, count what the test saw arrive.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast_forwarder::bus::EventBridgeBus;
use ballast_forwarder::health;
use ballast_forwarder::publisher::Timing;
use ballast_forwarder::run::Forwarder;
use ballast_tests::aws::EventInbox;
use ballast_tests::kube::{
    add_node, apply_manifests, mark_running, set_node_ready, ControlPlane, Parts, ADMIN_TOKEN, FORWARDER_TOKEN,
};
use ballast_tests::moto::Moto;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

const BUS: &str = "ballast-test-forwarder";

/// What the forwarder published, as (detail-type, detail), each checked to parse as the
/// functions will parse it.
struct Inbox {
    inbox: EventInbox,
    seen: Vec<(String, Value)>,
    /// Every event received, by detail-type.
    received: BTreeMap<String, u64>,
}

impl Inbox {
    async fn drain(&mut self) {
        for envelope in self.inbox.take().await {
            assert_eq!(envelope["source"], "ballast.kubernetes");
            ballast_core::event::parse_event(envelope.to_string().as_bytes(), None)
                .unwrap_or_else(|e| panic!("{e}: {envelope}"));
            let kind = envelope["detail-type"].as_str().unwrap().to_string();
            *self.received.entry(kind.clone()).or_default() += 1;
            self.seen.push((kind, envelope["detail"].clone()));
        }
    }

    /// Waits for an event matching `want`; returns it.
    async fn expect(&mut self, what: &str, want: impl Fn(&str, &Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.drain().await;
            if let Some(at) = self.seen.iter().position(|(t, d)| want(t, d)) {
                // What came after it stays for the next expectation: one drain may hold
                // both (an unschedulable pod's event and the demand that counts it).
                let detail = self.seen[at].1.clone();
                self.seen.drain(..=at);
                return detail;
            }
            assert!(Instant::now() < deadline, "no event: {what}; got {:#?}", self.seen);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn demand(cpu: u64, pods: u64, nodes: u64) -> impl Fn(&str, &Value) -> bool {
    move |t, d| {
        t == "Pool Demand Changed"
            && d["pool"] == "general"
            && d["cpu_millis"] == cpu
            && d["pods"] == pods
            && d["nodes"] == nodes
    }
}

fn node_event(node: &'static str, condition: &'static str) -> impl Fn(&str, &Value) -> bool {
    move |t, d| t == "Node Lifecycle" && d["node"] == node && d["condition"] == condition
}

fn pod(name: &str, node: Option<&str>, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "nodeName": node,
            "nodeSelector": { "ballast.io/pool": "general" },
            "tolerations": [{ "key": "dedicated", "operator": "Equal", "value": "general", "effect": "NoSchedule" }],
            "containers": [{ "name": "app", "image": "app:1", "resources": { "requests": { "cpu": cpu, "memory": "256Mi" } } }],
        },
    }))
    .unwrap()
}

/// `GET /metrics` over plain HTTP/1.0, as Prometheus would: the samples by their line's
/// name and labels.
async fn scrape(addr: std::net::SocketAddr) -> BTreeMap<String, f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: forwarder\r\n\r\n").await.unwrap();
    let mut page = String::new();
    stream.read_to_string(&mut page).await.unwrap();
    assert!(page.starts_with("HTTP/1.0 200"), "{page}");
    let (_, body) = page.split_once("\r\n\r\n").unwrap();
    assert!(body.ends_with("# EOF\n"), "{body}");
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(name, value)| (name.to_string(), value.parse().unwrap_or_else(|e| panic!("{name} {value}: {e}"))))
        .collect()
}

fn sample(metrics: &BTreeMap<String, f64>, name: &str) -> f64 {
    *metrics.get(name).unwrap_or_else(|| panic!("no {name} in {metrics:#?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn forwarder_events_follow_the_cluster_across_an_api_server_restart() {
    let Some(moto) = Moto::start() else { return };
    let Some(mut plane) = ControlPlane::start(Parts::WithControllers).await else { return };
    let admin = plane.client(ADMIN_TOKEN);
    apply_manifests(&admin, "namespace.yaml", &["Namespace"]).await;
    apply_manifests(&admin, "forwarder.yaml", &["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]).await;
    let spot = [("ballast.io/pool", "general"), ("eks.amazonaws.com/capacityType", "SPOT")];
    add_node(&admin, "general-1", &spot, "4", "16Gi").await;
    add_node(&admin, "other-1", &[("ballast.io/pool", "other")], "4", "16Gi").await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    pods.create(&PostParams::default(), &pod("web-1", Some("general-1"), "500m")).await.unwrap();
    mark_running(&admin, "default", "web-1").await;

    let sdk = moto.sdk().await;
    let mut inbox = Inbox { inbox: EventInbox::create(&sdk, BUS).await, seen: Vec::new(), received: BTreeMap::new() };
    let mut config = ballast_tests::example_config();
    // The general pool sizes its headroom from a wait target: its waits are published.
    config.pools[0].headroom.target = Some(ballast_core::config::WaitTarget {
        wait_p95: "10s".parse().unwrap(),
        history: "14d".parse().unwrap(),
        floor: true,
        time_zone: "UTC".parse().unwrap(),
    });
    // As the forwarder's ServiceAccount: the manifests' read-only RBAC must be enough.
    let client = plane.client(FORWARDER_TOKEN);
    let timing = Timing {
        debounce: Duration::from_millis(500),
        heartbeat: Duration::from_secs(600),
        threshold_percent: 5,
        unschedulable_every: Duration::from_millis(500),
        waits_every: Duration::from_secs(2),
    };
    let mut forwarder = Forwarder::new(client, Arc::new(EventBridgeBus::new(&sdk, BUS)), &config, timing);
    forwarder.tick = Duration::from_millis(200);
    // The pages are small so that the lists here take several calls, as on a big cluster.
    forwarder.page_size = 2;
    let (metrics_addr, server) =
        health::serve("127.0.0.1:0".parse().unwrap(), forwarder.health.clone(), forwarder.metrics.clone())
            .await
            .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(forwarder.run(async move {
        let _ = stopped.await;
    }));

    // The first demand: one pod, one pool node (other-1 is not the pool's).
    inbox.expect("first demand", demand(500, 1, 1)).await;

    // A pod comes; one no node can hold goes pending, and the scheduler says so.
    pods.create(&PostParams::default(), &pod("web-2", Some("general-1"), "1")).await.unwrap();
    inbox.expect("demand with web-2", demand(1500, 2, 1)).await;
    pods.create(&PostParams::default(), &pod("huge", None, "8")).await.unwrap();
    let stuck = inbox
        .expect("pods unschedulable", |t, d| t == "Pods Unschedulable" && d["count"] == 1 && d["cpu_millis"] == 8000)
        .await;
    assert_eq!(stuck["pool"], "general");
    inbox.expect("demand counts the pending pod", demand(9500, 3, 1)).await;

    // A pod goes.
    pods.delete("web-2", &DeleteParams::default().grace_period(0)).await.unwrap();
    inbox.expect("demand without web-2", demand(8500, 2, 1)).await;

    // Nodes: NotReady, a join (Ready), a departure.
    set_node_ready(&admin, "general-1", false).await;
    let not_ready = inbox.expect("general-1 not ready", node_event("general-1", "not_ready")).await;
    assert_eq!(not_ready["capacity_type"], "spot");
    assert!(not_ready["instance_id"].as_str().unwrap().starts_with("i-"));
    add_node(&admin, "general-2", &spot, "4", "16Gi").await;
    inbox.expect("general-2 ready", node_event("general-2", "ready")).await;
    Api::<Node>::all(admin.clone()).delete("general-2", &DeleteParams::default()).await.unwrap();
    inbox.expect("general-2 left", node_event("general-2", "left")).await;

    // Writes the watchers do not see move etcd on, so after a restart their resource
    // version is older than the new watch cache: 410 Gone, then a relist.
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    for i in 0..20 {
        let cm: ConfigMap = serde_json::from_value(json!({ "metadata": { "name": format!("bump-{i}") } })).unwrap();
        configmaps.create(&PostParams::default(), &cm).await.unwrap();
    }
    plane.restart_apiserver().await;
    let admin = plane.client(ADMIN_TOKEN);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    set_node_ready(&admin, "general-1", true).await;
    inbox.expect("general-1 ready again", node_event("general-1", "ready")).await;
    pods.delete("huge", &DeleteParams::default().grace_period(0)).await.unwrap();
    inbox.expect("demand after the restart", demand(500, 1, 1)).await;

    // What /metrics says, against what arrived (the forwarder may have published more
    // since the last drain: at least, not equal).
    let deadline = Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        let metrics = scrape(metrics_addr).await;
        // The gauges are set on the tick: wait for the one after the last deletion.
        if metrics.get("ballast_forwarder_pool_cpu_requests_cores{pool=\"general\"}") == Some(&0.5) {
            break metrics;
        }
        assert!(Instant::now() < deadline, "the pool gauges never showed the cluster: {metrics:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    inbox.drain().await;
    for (kind, received) in &inbox.received {
        let label = ballast_forwarder::metrics::kind_label(kind);
        let published = sample(&metrics, &format!("ballast_forwarder_events_published_total{{kind=\"{label}\"}}"));
        assert!(published >= *received as f64, "{kind}: {published} published, {received} received");
    }
    assert!(inbox.received.len() >= 3, "all three kinds were seen: {:?}", inbox.received);
    assert_eq!(sample(&metrics, "ballast_forwarder_pool_pods{pool=\"general\"}"), 1.0);
    assert_eq!(sample(&metrics, "ballast_forwarder_pool_nodes{pool=\"general\"}"), 1.0);
    assert_eq!(
        sample(&metrics, "ballast_forwarder_pool_memory_requests_bytes{pool=\"general\"}"),
        256.0 * 1024.0 * 1024.0
    );
    assert_eq!(sample(&metrics, "ballast_forwarder_pool_unschedulable_pods{pool=\"general\"}"), 0.0);
    assert_eq!(sample(&metrics, "ballast_forwarder_events_dropped_total"), 0.0);
    assert_eq!(sample(&metrics, "ballast_forwarder_put_events_failed_entries_total"), 0.0);
    assert!(metrics.contains_key("ballast_forwarder_put_events_retries_total"));
    assert!(metrics.contains_key("ballast_forwarder_put_events_failed_calls_total"));
    let relists = sample(&metrics, "ballast_forwarder_watch_relists_total{resource=\"pods\"}")
        + sample(&metrics, "ballast_forwarder_watch_relists_total{resource=\"nodes\"}");
    assert!(relists >= 1.0, "the restart made the watchers list again");
    let errors = sample(&metrics, "ballast_forwarder_watch_errors_total{resource=\"pods\"}")
        + sample(&metrics, "ballast_forwarder_watch_errors_total{resource=\"nodes\"}");
    assert!(errors >= 1.0, "the restart broke the watches");
    // A pod the scheduler binds: its wait from creation to binding is in the pool's histogram.
    assert!(!metrics.contains_key("ballast_forwarder_pool_first_start_wait_seconds_count{pool=\"general\"}"));
    pods.create(&PostParams::default(), &pod("scheduled", None, "100m")).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let waits = loop {
        let metrics = scrape(metrics_addr).await;
        if let Some(count) = metrics.get("ballast_forwarder_pool_first_start_wait_seconds_count{pool=\"general\"}") {
            break (*count, sample(&metrics, "ballast_forwarder_pool_first_start_wait_seconds_sum{pool=\"general\"}"));
        }
        assert!(Instant::now() < deadline, "no first-start wait for the scheduled pod: {metrics:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(waits.0, 1.0, "one pod scheduled");
    assert!((0.0..30.0).contains(&waits.1), "{waits:?}");
    // The same wait, summed up for the functions (a wait target's correction).
    let measured = inbox
        .expect("the pool's waits", |t, d| t == "Pool Waits Measured" && d["pool"] == "general" && d["pods"] == 1)
        .await;
    let p95 = measured["p95_seconds"].as_f64().unwrap();
    assert!((p95 - waits.1).abs() < 1e-9 && measured["max_seconds"] == measured["p95_seconds"], "{measured}");
    // Its buckets are the histogram's: a budget and a dashboard count the same pods over.
    let mut histogram: Vec<(f64, f64)> = scrape(metrics_addr)
        .await
        .into_iter()
        .filter_map(|(key, count)| {
            let labels = key.strip_prefix("ballast_forwarder_pool_first_start_wait_seconds_bucket{")?;
            if !labels.contains("pool=\"general\"") {
                return None;
            }
            let le = labels.split("le=\"").nth(1)?.split('"').next()?.parse::<f64>().ok()?;
            le.is_finite().then_some((le, count))
        })
        .collect();
    let buckets: Vec<(f64, f64)> = measured["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .map(|b| (b["le"].as_f64().unwrap(), b["pods"].as_f64().unwrap()))
        .collect();
    histogram.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(buckets, histogram, "{measured}");
    assert!(sample(&metrics, "process_resident_memory_bytes") > 1e6);

    stop.send(()).unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(10), running).await.expect("stops on signal").unwrap();
    assert!(summary.relists >= 1, "the watchers relisted after the restart: {summary:?}");
    assert_eq!(summary.dropped, 0);
    assert!(summary.relists as f64 >= relists, "the metric counts what the summary counts");
    server.abort();
}

/// An EventBridge that takes everything and keeps it.
#[derive(Default)]
struct Kept(std::sync::Mutex<Vec<ballast_forwarder::publisher::Outgoing>>);

#[async_trait::async_trait]
impl ballast_forwarder::bus::EventBus for Kept {
    async fn put(
        &self,
        events: &[ballast_forwarder::publisher::Outgoing],
    ) -> Result<Vec<Option<String>>, ballast_core::ports::PortError> {
        self.0.lock().unwrap().extend(events.iter().cloned());
        Ok(vec![None; events.len()])
    }
}

/// A forwarder on `plane` whose events are kept, once it has listed the cluster: the
/// events kept, the sender that stops it, and its run.
async fn listening_forwarder(
    plane: &ControlPlane,
    config: &ballast_core::config::Config,
    timing: Timing,
) -> (Arc<Kept>, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<ballast_forwarder::run::Summary>) {
    let bus = Arc::new(Kept::default());
    let mut forwarder = Forwarder::new(plane.client(FORWARDER_TOKEN), bus.clone(), config, timing);
    forwarder.tick = Duration::from_millis(200);
    let health = forwarder.health.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(forwarder.run(async move {
        let _ = stopped.await;
    }));
    ballast_tests::kube::eventually(Duration::from_secs(30), "the forwarder listed the cluster", || {
        let ready = health.answer("/readyz", chrono::Utc::now().timestamp()).0.as_u16() == 200;
        async move { ready }
    })
    .await;
    (bus, stop, running)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_kept_off_held_room_by_anti_affinity_waits_over_with_room() {
    // A 2 s target; a Running 1-CPU pause pod on general-1 beside a database pod. A
    // 500m pod that must not share a node with the database cannot use that room (the
    // scheduler says so: no preemption helps) and waits until general-2 joins: a wait no
    // pause pod shortens, published as such so that the learner does not raise for it.
    let Some(plane) = ControlPlane::start(Parts::WithControllers).await else { return };
    let admin = plane.client(ADMIN_TOKEN);
    apply_manifests(&admin, "namespace.yaml", &["Namespace"]).await;
    apply_manifests(&admin, "forwarder.yaml", &["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]).await;
    let pool = [("ballast.io/pool", "general")];
    add_node(&admin, "general-1", &pool, "4", "16Gi").await;
    let default: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let mut db = pod("db", Some("general-1"), "500m");
    db.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
    default.create(&PostParams::default(), &db).await.unwrap();
    mark_running(&admin, "default", "db").await;
    let headroom: Api<Pod> = Api::namespaced(admin.clone(), "ballast-headroom");
    let mut pause = pod("ballast-headroom-general-x1", Some("general-1"), "1");
    pause.metadata.labels = Some(
        [("ballast.io/headroom", "true"), ("ballast.io/pool", "general")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into(),
    );
    headroom.create(&PostParams::default(), &pause).await.unwrap();
    mark_running(&admin, "ballast-headroom", "ballast-headroom-general-x1").await;

    let mut config = ballast_tests::example_config();
    assert_eq!(config.pools[0].name, "general");
    config.pools[0].headroom.target = Some(ballast_core::config::WaitTarget {
        wait_p95: "2s".parse().unwrap(),
        history: "14d".parse().unwrap(),
        floor: true,
        time_zone: "UTC".parse().unwrap(),
    });
    let timing = Timing { waits_every: Duration::from_secs(2), ..Timing::default() };
    let (bus, stop, running) = listening_forwarder(&plane, &config, timing).await;

    let mut picky = pod("picky", None, "500m");
    picky.spec.as_mut().unwrap().affinity = Some(
        serde_json::from_value(json!({ "podAntiAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": [
            { "labelSelector": { "matchLabels": { "app": "db" } }, "topologyKey": "kubernetes.io/hostname" }] } }))
        .unwrap(),
    );
    default.create(&PostParams::default(), &picky).await.unwrap();
    // Past the target before there is a node it may use.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let unbound = default.get("picky").await.unwrap();
    assert!(unbound.spec.unwrap().node_name.is_none(), "room was free but not for it: it waits");
    add_node(&admin, "general-2", &pool, "4", "16Gi").await;

    let deadline = Instant::now() + Duration::from_secs(60);
    let waits = loop {
        let published = bus.0.lock().unwrap().clone();
        let found = published.into_iter().find_map(|e| match e {
            ballast_forwarder::publisher::Outgoing::PoolWaits(w) if w.pool == "general" => Some(w),
            _ => None,
        });
        if let Some(w) = found {
            break w;
        }
        assert!(Instant::now() < deadline, "no Pool Waits Measured for general");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let bound = default.get("picky").await.unwrap();
    assert_eq!(bound.spec.unwrap().node_name.as_deref(), Some("general-2"));
    assert_eq!(waits.pods, 1, "{waits:?}");
    assert!(waits.max_seconds > 2.0, "it waited past the target: {waits:?}");
    assert_eq!(waits.over_with_room, 1, "beside a Running pause pod its size: {waits:?}");
    // As the functions read it.
    let detail = ballast_forwarder::publisher::Outgoing::PoolWaits(waits).detail_json();
    let read: ballast_core::event::PoolWaitsDetail = serde_json::from_str(&detail).unwrap();
    assert_eq!(read.over_with_room, 1, "{detail}");
    let _ = stop.send(());
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn demand_reports_carry_the_shapes_of_pods_that_started_and_of_those_waiting() {
    // The scheduler binds a web pod and a Job's pod; a GPU pod waits (no node has GPUs).
    // A pod running before the forwarder started, and a pause pod, are no arrivals.
    use ballast_core::shape::{PodShape, ShapeCount, WorkloadKind};
    use ballast_forwarder::publisher::Outgoing;
    let Some(plane) = ControlPlane::start(Parts::WithControllers).await else { return };
    let admin = plane.client(ADMIN_TOKEN);
    apply_manifests(&admin, "namespace.yaml", &["Namespace"]).await;
    apply_manifests(&admin, "forwarder.yaml", &["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]).await;
    add_node(&admin, "general-1", &[("ballast.io/pool", "general")], "8", "32Gi").await;
    let default: Api<Pod> = Api::namespaced(admin.clone(), "default");
    default.create(&PostParams::default(), &pod("old", Some("general-1"), "300m")).await.unwrap();

    let config = ballast_tests::example_config();
    // A heartbeat every 2 s: a pending pod's binding changes no sum, and its start is
    // told in the next report.
    let timing =
        Timing { debounce: Duration::from_millis(300), heartbeat: Duration::from_secs(2), ..Timing::default() };
    let (bus, stop, running) = listening_forwarder(&plane, &config, timing).await;

    default.create(&PostParams::default(), &pod("web", None, "500m")).await.unwrap();
    // The Job's pod as the Job controller (not run here) would make it.
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(admin.clone(), "default");
    let job = serde_json::from_value(json!({ "metadata": { "name": "train" }, "spec": { "template": {
        "spec": { "restartPolicy": "Never", "containers": [{ "name": "train", "image": "train:1" }] } } } }))
    .unwrap();
    let job = jobs.create(&PostParams::default(), &job).await.unwrap();
    let mut train = pod("train-x1", None, "2");
    train.metadata.owner_references = Some(vec![serde_json::from_value(json!({ "apiVersion": "batch/v1",
        "kind": "Job", "name": "train", "uid": job.metadata.uid.unwrap(), "controller": true }))
    .unwrap()]);
    default.create(&PostParams::default(), &train).await.unwrap();
    let mut gpu = pod("gpu", None, "4");
    // An extended resource is asked for in limits (requests, if given, equal them).
    let one_gpu = [("nvidia.com/gpu".to_string(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()))];
    let resources = gpu.spec.as_mut().unwrap().containers[0].resources.as_mut().unwrap();
    resources.requests.as_mut().unwrap().extend(one_gpu.clone());
    resources.limits = Some(one_gpu.into());
    default.create(&PostParams::default(), &gpu).await.unwrap();
    let headroom: Api<Pod> = Api::namespaced(admin.clone(), "ballast-headroom");
    let mut pause = pod("ballast-headroom-general-x1", None, "1");
    pause.metadata.labels = Some(
        [("ballast.io/headroom", "true"), ("ballast.io/pool", "general")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into(),
    );
    headroom.create(&PostParams::default(), &pause).await.unwrap();

    let web = PodShape::new(500, 256 << 20);
    let job_shape = PodShape::new(2000, 256 << 20);
    let mut gpu_shape = PodShape::new(4000, 256 << 20);
    gpu_shape.extended.insert("nvidia.com/gpu".into(), 1);
    // Started counts add up over reports; the newest says what waits.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (started, latest) = loop {
        let reports: Vec<ballast_core::event::PoolDemandDetail> = bus
            .0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                Outgoing::PoolDemand(d) if d.pool == "general" => Some(d.clone()),
                _ => None,
            })
            .collect();
        let mut started: BTreeMap<(PodShape, WorkloadKind), u32> = BTreeMap::new();
        for report in &reports {
            ballast_core::shape::check_report(&report.shapes).unwrap();
            // As the functions read it.
            let read: ballast_core::event::PoolDemandDetail =
                serde_json::from_str(&Outgoing::PoolDemand(report.clone()).detail_json()).unwrap();
            assert_eq!(read.shapes, report.shapes);
            for s in report.shapes.iter().filter(|s| s.started > 0) {
                *started.entry((s.shape.clone(), s.kind)).or_default() += s.started;
            }
        }
        let latest = reports.last().map(|r| r.shapes.clone()).unwrap_or_default();
        let waiting_gpu = latest.iter().any(|s| s.shape == gpu_shape && s.waiting == 1);
        if started.len() >= 2 && waiting_gpu {
            break (started, latest);
        }
        assert!(Instant::now() < deadline, "no report of both starts and the GPU pod waiting: {reports:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        started,
        BTreeMap::from([((web, WorkloadKind::LongRunning), 1), ((job_shape, WorkloadKind::Job), 1)]),
        "the pod running before, the pause pod and the waiting GPU pod did not start"
    );
    assert_eq!(
        latest.iter().filter(|s| s.waiting > 0).cloned().collect::<Vec<_>>(),
        vec![ShapeCount { shape: gpu_shape, kind: WorkloadKind::LongRunning, started: 0, waiting: 1 }],
        "{latest:?}"
    );
    assert!(default.get("gpu").await.unwrap().spec.unwrap().node_name.is_none(), "no node has a GPU");
    let _ = stop.send(());
    running.await.unwrap();
}

/// An EventBridge whose PutEvents does not answer until `until` (a stalled connection),
/// then takes everything.
struct Stalled {
    until: tokio::time::Instant,
    got: std::sync::Mutex<Vec<ballast_forwarder::publisher::Outgoing>>,
}

#[async_trait::async_trait]
impl ballast_forwarder::bus::EventBus for Stalled {
    async fn put(
        &self,
        events: &[ballast_forwarder::publisher::Outgoing],
    ) -> Result<Vec<Option<String>>, ballast_core::ports::PortError> {
        tokio::time::sleep_until(self.until).await;
        self.got.lock().unwrap().extend(events.iter().cloned());
        Ok(vec![None; events.len()])
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_event_bus_never_stops_the_watch_loop_and_loses_no_node_change() {
    // The sender is stuck on its first call for 4 s; each tick has demand to publish (a
    // 200 ms heartbeat) and the queue holds one batch. A loop waiting for the sender would
    // stop reading the watches and ticking the liveness probe, and the kubelet would
    // restart the pod into a full relist, for an EventBridge outage. A node
    // that joins while the queue is full must still be announced once the bus is back.
    let Some(plane) = ControlPlane::start(Parts::ApiServer).await else { return };
    let admin = plane.client(ADMIN_TOKEN);
    apply_manifests(&admin, "namespace.yaml", &["Namespace"]).await;
    apply_manifests(&admin, "forwarder.yaml", &["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]).await;
    let pool = [("ballast.io/pool", "general")];
    add_node(&admin, "general-1", &pool, "4", "16Gi").await;
    let timing = Timing {
        debounce: Duration::from_millis(100),
        heartbeat: Duration::from_millis(200),
        threshold_percent: 5,
        unschedulable_every: Duration::from_millis(100),
        waits_every: Duration::from_secs(60),
    };
    let bus =
        Arc::new(Stalled { until: tokio::time::Instant::now() + Duration::from_secs(4), got: Default::default() });
    let config = ballast_tests::example_config();
    let mut forwarder = Forwarder::new(plane.client(FORWARDER_TOKEN), bus.clone(), &config, timing);
    forwarder.tick = Duration::from_millis(100);
    forwarder.queue = 1;
    let health = forwarder.health.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(forwarder.run(async move {
        let _ = stopped.await;
    }));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    add_node(&admin, "general-2", &pool, "4", "16Gi").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Alive means a tick within the last 2 s (the probe allows 30).
    let now = chrono::Utc::now().timestamp();
    assert_eq!(health.answer("/healthz", now + 28).0.as_u16(), 200, "the loop still ticks");
    assert_eq!(health.answer("/readyz", now).0.as_u16(), 200, "and listed the cluster");
    assert!(bus.got.lock().unwrap().is_empty(), "still stalled");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = bus.got.lock().unwrap().clone();
    let joined = got.iter().any(|e| {
        matches!(e, ballast_forwarder::publisher::Outgoing::NodeLifecycle(d) if d.node == "general-2" && matches!(d.condition, ballast_core::event::NodeCondition::Joined | ballast_core::event::NodeCondition::Ready))
    });
    assert!(joined, "general-2's join, made while the queue was full, arrives: {got:#?}");
    let _ = stop.send(());
    let summary = running.await.unwrap();
    assert_eq!(summary.dropped, 0, "demand goes again, node changes are held: nothing lost");
}

#[tokio::test]
async fn a_put_events_call_that_never_answers_gives_up() {
    // A listener that accepts and never answers: the real SDK client, as the forwarder
    // builds it, abandons the call within its timeouts instead of waiting forever.
    use ballast_forwarder::bus::{EventBus, CALL_TIMEOUT};
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            open.push(stream);
        }
    });
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("eu-west-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new("test", "test", None, None, "test"))
        .load()
        .await;
    let bus = EventBridgeBus::new(&sdk, BUS);
    let event = ballast_forwarder::publisher::Outgoing::PoolDemand(ballast_core::event::PoolDemandDetail {
        shapes: Vec::new(),
        pool: "general".into(),
        cpu_millis: 1,
        memory_bytes: 1,
        pods: 1,
        nodes: 1,
        observed_at: chrono::Utc::now(),
    });
    let started = Instant::now();
    let answer = tokio::time::timeout(CALL_TIMEOUT * 2, bus.put(&[event])).await;
    let took = started.elapsed();
    held.abort();
    let err = answer.expect("the call gave up on its own").expect_err("no answer is an error");
    assert!(err.is_retryable(), "{err}");
    assert!(took <= CALL_TIMEOUT + Duration::from_secs(2), "{took:?}");
}
