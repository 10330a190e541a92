//! Exact requests the adapter sends, checked with a tower-test mock server: the
//! policy/v1 Eviction of current EKS (which the v1.20 test API server cannot show), the
//! v1beta1 fallback, a budget's 429, and server-side apply with its conflict handling.

use std::time::Duration;

use ballast_core::config::{Config, HeadroomShapes, PoolConfig};
use ballast_core::ports::Cluster;
use ballast_core::shape::{PodShape, SlotState};
use ballast_kube::{Connector, KubeCluster};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::{json, Value};
use tower_test::mock::{self, Handle, SendResponse};

type MockHandle = Handle<Request<Body>, Response<Body>>;

fn example_pools() -> Vec<PoolConfig> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../ballast.example.yaml")).unwrap();
    Config::from_yaml(&text).unwrap().pools
}

fn cluster() -> (KubeCluster, MockHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let cluster =
        KubeCluster::new(Connector::Fixed(client), &example_pools()).with_drain_poll(Duration::from_millis(1));
    (cluster, handle)
}

struct Seen {
    method: String,
    uri: String,
    content_type: String,
    body: Value,
    send: SendResponse<Response<Body>>,
}

async fn next(handle: &mut MockHandle) -> Seen {
    let (request, send) = handle.next_request().await.expect("a request");
    let method = request.method().to_string();
    let uri = request.uri().to_string();
    let content_type =
        request.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let bytes = request.into_body().collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
    Seen { method, uri, content_type, body, send }
}

fn reply(send: SendResponse<Response<Body>>, status: StatusCode, body: Value) {
    let response = Response::builder().status(status).body(Body::from(serde_json::to_vec(&body).unwrap())).unwrap();
    send.send_response(response);
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": code, "reason": reason, "message": message })
}

fn discovery(version: &str) -> Value {
    json!({ "kind": "APIResourceList", "groupVersion": "v1", "resources": [
        { "name": "pods", "namespaced": true, "kind": "Pod", "verbs": ["get", "list"], "singularName": "" },
        { "name": "pods/eviction", "namespaced": true, "group": "policy", "version": version, "kind": "Eviction", "verbs": ["create"], "singularName": "" },
    ]})
}

fn pod_list(pods: Value) -> Value {
    json!({ "kind": "PodList", "apiVersion": "v1", "metadata": { "resourceVersion": "1" }, "items": pods })
}

async fn drain_with_discovery(version: &str) -> Value {
    let (cluster, mut handle) = cluster();
    let drain = tokio::spawn(async move { cluster.drain("ip-10-0-1-1", Duration::from_secs(60)).await });
    let seen = next(&mut handle).await;
    assert_eq!((seen.method.as_str(), seen.uri.as_str()), ("GET", "/api/v1"));
    reply(seen.send, StatusCode::OK, discovery(version));
    let seen = next(&mut handle).await;
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.uri, "/api/v1/pods?&fieldSelector=spec.nodeName%3Dip-10-0-1-1&limit=500");
    let pod = json!({ "metadata": { "name": "web-1", "namespace": "shop" },
        "spec": { "containers": [{ "name": "app" }], "terminationGracePeriodSeconds": 45, "nodeName": "ip-10-0-1-1" } });
    reply(seen.send, StatusCode::OK, pod_list(json!([pod])));
    let eviction = next(&mut handle).await;
    assert_eq!(
        (eviction.method.as_str(), eviction.uri.as_str()),
        ("POST", "/api/v1/namespaces/shop/pods/web-1/eviction?")
    );
    assert_eq!(eviction.content_type, "application/json");
    reply(eviction.send, StatusCode::CREATED, status(201, "", ""));
    let seen = next(&mut handle).await;
    reply(seen.send, StatusCode::OK, pod_list(json!([])));
    let report = drain.await.unwrap().unwrap();
    assert_eq!((report.evicted, report.complete()), (1, true));
    eviction.body
}

#[tokio::test]
async fn current_servers_get_a_policy_v1_eviction_with_delete_options() {
    let body = drain_with_discovery("v1").await;
    assert_eq!(
        body,
        json!({ "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": { "name": "web-1", "namespace": "shop" },
            "deleteOptions": { "gracePeriodSeconds": 45 } })
    );
}

#[tokio::test]
async fn older_servers_get_the_v1beta1_eviction() {
    let body = drain_with_discovery("v1beta1").await;
    assert_eq!(body["apiVersion"], "policy/v1beta1");
    assert_eq!(body["deleteOptions"]["gracePeriodSeconds"], 45);
}

#[tokio::test]
async fn a_429_is_a_blocking_budget_retried_until_the_deadline_and_nothing_goes_around_it() {
    let (cluster, mut handle) = cluster();
    let drain = tokio::spawn(async move { cluster.drain("n1", Duration::from_millis(300)).await });
    let seen = next(&mut handle).await;
    reply(seen.send, StatusCode::OK, discovery("v1"));
    let pod = json!({ "metadata": { "name": "db-0", "namespace": "data" }, "spec": { "containers": [{ "name": "db" }], "nodeName": "n1" } });
    let mut evictions = 0;
    while !drain.is_finished() {
        let Ok(Some((request, send))) = tokio::time::timeout(Duration::from_millis(100), handle.next_request()).await
        else {
            continue;
        };
        let (method, uri) = (request.method().to_string(), request.uri().to_string());
        match method.as_str() {
            "GET" => reply(send, StatusCode::OK, pod_list(json!([pod.clone()]))),
            "POST" if uri.ends_with("/eviction?") => {
                evictions += 1;
                let why = "Cannot evict pod as it would violate the pod's disruption budget.";
                reply(send, StatusCode::TOO_MANY_REQUESTS, status(429, "TooManyRequests", why));
            }
            _ => panic!("unexpected {method} {uri}: a drain only lists and evicts"),
        }
    }
    let report = drain.await.unwrap().unwrap();
    assert!(evictions >= 2, "tried again while blocked ({evictions})");
    assert_eq!(report.evicted, 0);
    assert_eq!(report.blocked[0].0, "data/db-0");
    assert!(report.blocked[0].1.contains("disruption budget"), "{report:?}");
}

#[tokio::test]
async fn headroom_is_server_side_applied_as_ballast_and_forced_only_after_a_conflict() {
    let (cluster, mut handle) = cluster();
    let pool = example_pools().remove(0);
    let apply = tokio::spawn(async move { cluster.set_headroom(&pool, 0, &pool.headroom.unit_shape(), 5).await });
    let seen = next(&mut handle).await;
    assert_eq!(
        (seen.method.as_str(), seen.uri.as_str()),
        ("GET", "/apis/scheduling.k8s.io/v1/priorityclasses/ballast-headroom")
    );
    reply(seen.send, StatusCode::NOT_FOUND, status(404, "NotFound", "not found"));
    let seen = next(&mut handle).await;
    assert_eq!(seen.method, "PATCH");
    assert_eq!(seen.uri, "/apis/scheduling.k8s.io/v1/priorityclasses/ballast-headroom?&fieldManager=ballast");
    assert_eq!(seen.content_type, "application/apply-patch+yaml");
    assert_eq!((&seen.body["value"], &seen.body["preemptionPolicy"]), (&json!(-10), &json!("Never")));
    let body = seen.body.clone();
    reply(seen.send, StatusCode::OK, body);
    let seen = next(&mut handle).await;
    assert_eq!(
        (seen.method.as_str(), seen.uri.as_str()),
        ("GET", "/apis/apps/v1/namespaces/ballast-headroom/deployments/ballast-headroom-general")
    );
    reply(seen.send, StatusCode::NOT_FOUND, status(404, "NotFound", "not found"));
    let seen = next(&mut handle).await;
    assert_eq!(seen.method, "PATCH");
    assert_eq!(
        seen.uri,
        "/apis/apps/v1/namespaces/ballast-headroom/deployments/ballast-headroom-general?&fieldManager=ballast"
    );
    assert_eq!((&seen.body["apiVersion"], &seen.body["spec"]["replicas"]), (&json!("apps/v1"), &json!(5)));
    let conflict = "Apply failed with 1 conflict: conflict with \"kubectl-scale\": .spec.replicas";
    reply(seen.send, StatusCode::CONFLICT, status(409, "Conflict", conflict));
    let seen = next(&mut handle).await;
    assert_eq!(seen.method, "PATCH");
    assert_eq!(
        seen.uri,
        "/apis/apps/v1/namespaces/ballast-headroom/deployments/ballast-headroom-general?&force=true&fieldManager=ballast"
    );
    let applied =
        json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "ballast-headroom-general" } });
    reply(seen.send, StatusCode::OK, applied);
    apply.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_gpu_slot_is_applied_under_its_slot_name_with_the_gpu_in_requests_and_limits() {
    let (cluster, mut handle) = cluster();
    let pool = example_pools().remove(0);
    let mut gpu = PodShape::new(4000, 14 << 30);
    gpu.extended.insert("nvidia.com/gpu".into(), 1);
    let apply = tokio::spawn(async move { cluster.set_headroom(&pool, 1, &gpu, 2).await });
    let seen = next(&mut handle).await;
    assert_eq!(seen.uri, "/apis/scheduling.k8s.io/v1/priorityclasses/ballast-headroom");
    reply(
        seen.send,
        StatusCode::OK,
        json!({ "metadata": { "name": "ballast-headroom" }, "value": -10, "preemptionPolicy": "Never" }),
    );
    let seen = next(&mut handle).await;
    assert_eq!(
        (seen.method.as_str(), seen.uri.as_str()),
        ("GET", "/apis/apps/v1/namespaces/ballast-headroom/deployments/ballast-headroom-general-2")
    );
    reply(seen.send, StatusCode::NOT_FOUND, status(404, "NotFound", "not found"));
    let seen = next(&mut handle).await;
    assert_eq!(
        (seen.method.as_str(), seen.uri.as_str()),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/ballast-headroom/deployments/ballast-headroom-general-2?&fieldManager=ballast"
        )
    );
    let container = &seen.body["spec"]["template"]["spec"]["containers"][0];
    let want = json!({ "cpu": "4", "memory": "14Gi", "nvidia.com/gpu": "1" });
    assert_eq!((&container["resources"]["requests"], &container["resources"]["limits"]), (&want, &want));
    assert_eq!(seen.body["spec"]["selector"]["matchLabels"]["ballast.io/headroom-slot"], "1");
    assert_eq!(seen.body["spec"]["replicas"], 2);
    let body = seen.body.clone();
    reply(seen.send, StatusCode::OK, body);
    apply.await.unwrap().unwrap();
}

/// Reads the pool's headroom with `shapes`, answering its requests with `replies` in turn:
/// the names it asked for, and what it read.
async fn read_headroom(
    shapes: HeadroomShapes,
    mut replies: Vec<(StatusCode, Value)>,
) -> (Vec<String>, Result<Vec<SlotState>, ballast_core::ports::PortError>) {
    let (cluster, mut handle) = cluster();
    let mut pool = example_pools().remove(0);
    pool.headroom.shapes = shapes;
    let read = tokio::spawn(async move { cluster.headroom(&pool).await });
    let mut names = Vec::new();
    while !read.is_finished() {
        let Ok(Some((request, send))) = tokio::time::timeout(Duration::from_millis(100), handle.next_request()).await
        else {
            continue;
        };
        assert_eq!(request.method(), "GET", "{}", request.uri());
        names.push(request.uri().path().rsplit('/').next().unwrap().to_string());
        let (code, body) = replies.remove(0);
        reply(send, code, body);
    }
    (names, read.await.unwrap())
}

#[tokio::test]
async fn headroom_gets_each_slot_by_name_and_a_403_fails_only_the_first() {
    let pool = example_pools().remove(0);
    let unit = pool.headroom.unit_shape();
    let slot0 = serde_json::to_value(ballast_kube::headroom::deployment(&pool, 0, &unit, 4)).unwrap();
    let forbidden = || (StatusCode::FORBIDDEN, status(403, "Forbidden", "deployments.apps is forbidden"));
    let all = ["ballast-headroom-general", "ballast-headroom-general-2", "ballast-headroom-general-3"];

    // `fixed`: one slot of its own; the others are read in case an earlier config made
    // them, and RBAC that does not name them is no error.
    let (names, read) =
        read_headroom(HeadroomShapes::Fixed, vec![(StatusCode::OK, slot0.clone()), forbidden(), forbidden()]).await;
    assert_eq!(names, all);
    assert_eq!(read.unwrap(), vec![SlotState { slot: 0, shape: unit.clone(), replicas: Some(4) }]);

    // `auto` uses all three: a 403 on one it may use (RBAC from before shapes) reads as
    // forbidden, so the planner places no room there; the pool's reconcile goes on.
    let (names, read) =
        read_headroom(HeadroomShapes::Auto, vec![(StatusCode::OK, slot0.clone()), forbidden(), forbidden()]).await;
    assert_eq!(names, all);
    assert_eq!(
        read.unwrap(),
        vec![
            SlotState { slot: 0, shape: unit.clone(), replicas: Some(4) },
            SlotState::forbidden(1),
            SlotState::forbidden(2)
        ]
    );
    // On the first slot, the one every RBAC names, it is the error it is.
    let (_, read) = read_headroom(HeadroomShapes::Auto, vec![forbidden()]).await;
    assert!(read.unwrap_err().message.starts_with("403"));

    // A missing slot is no slot; a GPU slot reads back with its GPU.
    let mut gpu = PodShape::new(4000, 14 << 30);
    gpu.extended.insert("nvidia.com/gpu".into(), 1);
    let slot2 = serde_json::to_value(ballast_kube::headroom::deployment(&pool, 2, &gpu, 1)).unwrap();
    let missing = (StatusCode::NOT_FOUND, status(404, "NotFound", "not found"));
    let (_, read) =
        read_headroom(HeadroomShapes::Auto, vec![(StatusCode::OK, slot0), missing, (StatusCode::OK, slot2)]).await;
    assert_eq!(
        read.unwrap(),
        vec![
            SlotState { slot: 0, shape: unit, replicas: Some(4) },
            SlotState { slot: 2, shape: gpu, replicas: Some(1) },
        ]
    );
}
