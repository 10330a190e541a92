//! End to end: the three functions built and run by the Lambda runtime emulator
//! (`cargo lambda watch`), invoked with the `events/` fixtures (the interruption
//! function's wrapped as an SQS event), against moto and a real kube-apiserver (reached
//! through a kubeconfig, as the functions' RBAC group); results checked in both. Every AWS
//! call the functions make (moto's request log, by invocation) is evaluated against their
//! roles in both templates: all must be allowed.

use ballast_tests::aws::*;
use ballast_tests::emulator::Emulator;
use ballast_tests::iam::{caller, refused, role_of, Call, Inventory};
use ballast_tests::kube::{add_instance_node, apply_manifests, ControlPlane, Parts, ADMIN_TOKEN, FUNCTIONS_TOKEN};
use ballast_tests::moto::Moto;
use k8s_openapi::api::apps::v1::Deployment as KubeDeployment;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::{json, Value};

fn write(dir: &std::path::Path, name: &str, value: &Value) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn the_three_functions_under_the_runtime_emulator() {
    let Some(moto) = Moto::start_recording() else { return };
    let Some(plane) = ControlPlane::start(Parts::ApiServer).await else { return };
    let admin = plane.client(ADMIN_TOKEN);
    apply_manifests(&admin, "namespace.yaml", &["Namespace"]).await;
    apply_manifests(
        &admin,
        "functions-rbac.yaml",
        &["PriorityClass", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"],
    )
    .await;
    let d = Deployment::create(&moto, 3, (0, 1), "2026-11-20T09:12:10Z".parse().unwrap()).await;
    let (_, ids) = d.asg(SPOT).await;
    add_instance_node(&admin, "ip-10-0-0-1.eu-west-1.compute.internal", &ids[0], &[], "4", "16Gi").await;
    let dir = std::env::temp_dir().join(format!("ballast-emulator-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("ballast.yaml");
    std::fs::write(&config, config_yaml(false, "")).unwrap();
    let kubeconfig = plane.write_kubeconfig(FUNCTIONS_TOKEN);
    let env: Vec<(String, String)> = [
        ("AWS_ENDPOINT_URL", moto.endpoint.as_str()),
        ("AWS_REGION", "eu-west-1"),
        // Not the test's own key: moto's log tells the functions' calls apart.
        ("AWS_ACCESS_KEY_ID", "functions"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_MAX_ATTEMPTS", "1"),
        ("BALLAST_CONFIG_FILE", config.to_str().unwrap()),
        ("BALLAST_DEAD_LETTER_QUEUE_URL", d.dlq_url.as_str()),
        ("BALLAST_CLUSTER_ACCESS", "kubeconfig"),
        ("KUBECONFIG", kubeconfig.as_str()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let Some(emulator) = Emulator::start(&env) else { return };
    let mut inventory = Inventory::default();
    inventory.snapshot(&d).await;
    let mut seen = 0;
    let mut calls: Vec<Call> = Vec::new();
    // The calls since the last look, as `function` made them.
    let mut take = |function: &str, inventory: &Inventory| {
        let requests = moto.requests();
        for request in &requests[seen..] {
            if caller(request).as_deref() == Some("functions") {
                for mut call in inventory.calls(request) {
                    call.caller = function.to_string();
                    if !calls.contains(&call) {
                        calls.push(call);
                    }
                }
            }
        }
        seen = requests.len();
    };

    // interruption: an SQS batch with a warning for a real spot instance and a malformed message.
    let warning = fixture_json("spot-interruption-terminate.json", |v| {
        v["detail"]["instance-id"] = json!(ids[0]);
        v["resources"] = json!([format!("arn:aws:ec2:eu-west-1:123456789012:instance/{}", ids[0])]);
    });
    let batch = json!({ "Records": [
        { "messageId": "m-warning", "body": warning.to_string(), "eventSource": "aws:sqs" },
        { "messageId": "m-broken", "body": "{\"version\":\"0\",\"id\":", "eventSource": "aws:sqs" },
    ]});
    let out = emulator.invoke("interruption", &write(&dir, "sqs.json", &batch));
    take("interruption", &inventory);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let response: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(
        response["batchItemFailures"],
        json!([]),
        "the malformed message went to the DLQ, not back to the queue"
    );
    let (desired, now_ids) = d.asg(SPOT).await;
    assert_eq!(desired, 3);
    assert!(!now_ids.contains(&ids[0]), "the interrupted instance was replaced");
    let node = Api::<Node>::all(admin.clone()).get("ip-10-0-0-1.eu-west-1.compute.internal").await.unwrap();
    assert_eq!(node.spec.unwrap().unschedulable, Some(true), "its node was cordoned (and drained) first");
    assert_eq!(d.dead_letters().await, vec!["{\"version\":\"0\",\"id\":".to_string()]);

    // schedule: the rate reconcile, and a headroom override from EventBridge Scheduler.
    // The functions run on the real clock: the override starts now, not on the fixture's day.
    let now = chrono::Utc::now().to_rfc3339();
    for fixture in ["scheduled-reconcile.json", "scheduler-headroom-override.json"] {
        let value = fixture_json(fixture, |v| v["time"] = json!(now));
        let file = write(&dir, fixture, &value);
        let out = emulator.invoke("schedule", &file);
        take("schedule", &inventory);
        assert!(out.status.success(), "{fixture}: {}", String::from_utf8_lossy(&out.stderr));
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["pools"][0]["pool"], "general", "{fixture}: {summary}");
    }
    let record = ballast_aws::DynamoStore::new(&d.sdk, TABLE);
    let stored = ballast_core::ports::StateStore::load(&record, "general").await.unwrap().value;
    assert_eq!(stored.headroom_override.map(|o| o.percent), Some(40), "the override is in DynamoDB");

    // cluster-events: the forwarder's demand (observed now: the reconcile above measured
    // demand itself, and an older event must not override that); a foreign event is refused.
    let now = chrono::Utc::now().to_rfc3339();
    let demand = fixture_json("forwarder-pool-demand-changed.json", |v| {
        v["time"] = json!(now);
        v["detail"]["observed_at"] = json!(now);
    });
    let demand = write(&dir, "demand.json", &demand);
    let out = emulator.invoke("cluster-events", &demand);
    take("cluster-events", &inventory);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["errors"], json!([]), "{summary}");
    // 182.5 CPU of demand at 10%, one CPU per pause pod: 19, capped at the pool's max of 10.
    let headroom = Api::<KubeDeployment>::namespaced(admin.clone(), "ballast-headroom");
    let applied = headroom.get("ballast-headroom-general").await.unwrap();
    assert_eq!(applied.spec.unwrap().replicas, Some(10), "{summary}");
    let foreign = ballast_tests::repo_root().join("events/invalid/foreign-account.json");
    let out = emulator.invoke("cluster-events", &foreign);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("999999999999"), "rejected with the reason: {text}");
    drop(emulator);
    std::fs::remove_dir_all(&dir).unwrap();

    let made: std::collections::BTreeSet<(String, String)> =
        calls.iter().map(|c| (c.caller.clone(), c.action.clone())).collect();
    for f in ["interruption", "schedule", "cluster-events"] {
        assert!(made.iter().any(|(c, _)| c == f), "no AWS call recorded for {f}: {made:?}");
    }
    let Some(refused) = refused(&calls, role_of) else { return };
    assert!(refused.is_empty(), "calls the functions' roles would refuse: {refused:#?}");
}
