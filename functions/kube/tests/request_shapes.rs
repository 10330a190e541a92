//! Exact requests the adapter sends, checked with a tower-test mock server: the
//! policy/v1 Eviction of current EKS (which the v1.20 test API server cannot show), the
//! v1beta1 fallback, a budget's 429, and server-side apply with its conflict handling.

use std::time::Duration;

use ballast_core::config::{Config, PoolConfig};
use ballast_core::ports::Cluster;
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
    let apply = tokio::spawn(async move { cluster.set_headroom_replicas(&pool, 5).await });
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
