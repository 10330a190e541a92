//! End to end: the three functions built and run by the Lambda runtime emulator
//! (`cargo lambda watch`), invoked with the `events/` fixtures (the interruption
//! function's wrapped as an SQS event), against moto; results checked in moto.

use ballast_tests::aws::*;
use ballast_tests::emulator::Emulator;
use ballast_tests::moto::Moto;
use serde_json::{json, Value};

fn write(dir: &std::path::Path, name: &str, value: &Value) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn the_three_functions_under_the_runtime_emulator() {
    let Some(moto) = Moto::start() else { return };
    let d = Deployment::create(&moto, 3, (0, 1), "2026-11-20T09:12:10Z".parse().unwrap()).await;
    let dir = std::env::temp_dir().join(format!("ballast-emulator-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("ballast.yaml");
    std::fs::write(&config, config_yaml(false, "")).unwrap();
    let env: Vec<(String, String)> = [
        ("AWS_ENDPOINT_URL", moto.endpoint.as_str()),
        ("AWS_REGION", "eu-west-1"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_MAX_ATTEMPTS", "1"),
        ("BALLAST_CONFIG_FILE", config.to_str().unwrap()),
        ("BALLAST_DEAD_LETTER_QUEUE_URL", d.dlq_url.as_str()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let Some(emulator) = Emulator::start(&env) else { return };

    // interruption: an SQS batch with a warning for a real spot instance and a malformed message.
    let (_, ids) = d.asg(SPOT).await;
    let warning = fixture_json("spot-interruption-terminate.json", |v| {
        v["detail"]["instance-id"] = json!(ids[0]);
        v["resources"] = json!([format!("arn:aws:ec2:eu-west-1:123456789012:instance/{}", ids[0])]);
    });
    let batch = json!({ "Records": [
        { "messageId": "m-warning", "body": warning.to_string(), "eventSource": "aws:sqs" },
        { "messageId": "m-broken", "body": "{\"version\":\"0\",\"id\":", "eventSource": "aws:sqs" },
    ]});
    let out = emulator.invoke("interruption", &write(&dir, "sqs.json", &batch));
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
    assert_eq!(d.dead_letters().await, vec!["{\"version\":\"0\",\"id\":".to_string()]);

    // schedule: the rate reconcile, and a headroom override from EventBridge Scheduler.
    // The functions run on the real clock: the override starts now, not on the fixture's day.
    let now = chrono::Utc::now().to_rfc3339();
    for fixture in ["scheduled-reconcile.json", "scheduler-headroom-override.json"] {
        let value = fixture_json(fixture, |v| v["time"] = json!(now));
        let file = write(&dir, fixture, &value);
        let out = emulator.invoke("schedule", &file);
        assert!(out.status.success(), "{fixture}: {}", String::from_utf8_lossy(&out.stderr));
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["pools"][0]["pool"], "general", "{fixture}: {summary}");
    }
    let record = ballast_aws::DynamoStore::new(&d.sdk, TABLE);
    let stored = ballast_core::ports::StateStore::load(&record, "general").await.unwrap().value;
    assert_eq!(stored.headroom_override.map(|o| o.percent), Some(40), "the override is in DynamoDB");

    // cluster-events: the forwarder's demand; a foreign event is refused.
    let demand = ballast_tests::repo_root().join("events/forwarder-pool-demand-changed.json");
    let out = emulator.invoke("cluster-events", &demand);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Demand sizes headroom; without the Kubernetes adapter the change is refused, said
    // plainly (and as a permanent error: the invoker does not retry it).
    let errors = summary["errors"].to_string();
    assert!(errors.contains("pool general") && errors.contains("no Kubernetes adapter"), "{summary}");
    let foreign = ballast_tests::repo_root().join("events/invalid/foreign-account.json");
    let out = emulator.invoke("cluster-events", &foreign);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("999999999999"), "rejected with the reason: {text}");
    drop(emulator);
    std::fs::remove_dir_all(&dir).unwrap();
}
