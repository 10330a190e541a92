//! `ballast invoke`, `ballast doctor` and `ballast dead-letters` (the `aws` feature) against moto.
#![cfg(feature = "aws")]

use std::process::Command;

use ballast_tests::aws::{config_yaml, fixture_json, Deployment, SPOT};
use ballast_tests::moto::Moto;
use serde_json::{json, Value};

fn ballast(args: &[&str], endpoint: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ballast"))
        .args(args)
        .current_dir(ballast_tests::repo_root())
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_REGION", "eu-west-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_MAX_ATTEMPTS", "1")
        // moto has no Kubernetes behind its EKS: Auto Scaling only.
        .env("BALLAST_CLUSTER_ACCESS", "none")
        .env_remove("BALLAST_CONFIG")
        .env_remove("BALLAST_CONFIG_PARAMETER")
        .output()
        .expect("ballast runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn invoke_doctor_and_dead_letters_against_moto() {
    // Recording: which functions a replay invoked.
    let Some(moto) = Moto::start_recording() else { return };
    let d = Deployment::create(&moto, 3, (0, 1), chrono::Utc::now()).await;
    d.wire().await;
    let dir = std::env::temp_dir().join(format!("ballast-cli-aws-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("ballast.yaml");
    std::fs::write(&config, config_yaml(false, "")).unwrap();
    let config = config.to_str().unwrap();

    // moto has no Kubernetes behind its EKS (tests/tests/rehearsal.rs runs the cluster side).
    let out = ballast(&["doctor", "--no-cluster", "--config", config], &moto.endpoint);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL config /ballast/test/config: not there") && text.contains("fix: ballast config push"),
        "{text}"
    );
    assert!(ballast(&["config", "push", config], &moto.endpoint).status.success());
    // The forwarder says its version in its demand events; the functions note it.
    let forwarder = ballast_core::ports::VersionNote { part: "forwarder".into(), version: 1, at: chrono::Utc::now() };
    use ballast_core::ports::ConfigVersions;
    ballast_aws::DynamoStore::new(&d.sdk, ballast_tests::aws::TABLE).note(&forwarder).await.unwrap();
    let out = ballast(&["doctor", "--no-cluster", "--config", config], &moto.endpoint);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("17 check(s), 0 problem(s) (cluster side skipped: --no-cluster)"), "{text}");
    // Without --no-cluster, a cluster EKS does not know and no kubeconfig are each named.
    let mut doctor = Command::new(env!("CARGO_BIN_EXE_ballast"));
    let out = doctor
        .args(["doctor", "--config", config])
        .env("AWS_ENDPOINT_URL", &moto.endpoint)
        .env("AWS_REGION", "eu-west-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_MAX_ATTEMPTS", "1")
        .env("KUBECONFIG", dir.join("no-kubeconfig"))
        .env("HOME", &dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL cluster access entries: cannot describe cluster test"), "{text}");
    assert!(text.contains("FAIL cluster: cannot reach it with the kubeconfig"), "{text}");
    assert!(text.contains("fix: aws eks update-kubeconfig --name test --region eu-west-1"), "{text}");

    let (_, ids) = d.asg(SPOT).await;
    let warning = fixture_json("spot-interruption-terminate.json", |v| {
        v["detail"]["instance-id"] = json!(ids[0]);
        v["resources"] = json!([format!("arn:aws:ec2:eu-west-1:123456789012:instance/{}", ids[0])]);
    });
    let event = dir.join("warning.json");
    std::fs::write(&event, warning.to_string()).unwrap();
    let out =
        ballast(&["invoke", "interruption", "--event", event.to_str().unwrap(), "--config", config], &moto.endpoint);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["batchItemFailures"], json!([]));
    assert_eq!(result["summary"]["pools"][0]["pool"], "general");
    let (desired, now_ids) = d.asg(SPOT).await;
    assert_eq!(desired, 3);
    assert!(!now_ids.contains(&ids[0]));
    // An event the handler refuses is answered, in part: its result says why, and the
    // run exits 1, as every command's invalid input does.
    let invalid = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/invalid/missing-detail.json");
    for function in ["interruption", "schedule"] {
        let out =
            ballast(&["invoke", function, "--event", invalid.to_str().unwrap(), "--config", config], &moto.endpoint);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{function}: {text}");
        let result: Value = serde_json::from_slice(&out.stdout).unwrap();
        let refused = &result["summary"]["invalid"];
        assert!(refused.as_array().is_some_and(|a| !a.is_empty()), "{function}: {result:#}");
    }

    // Dead letters, listed with why and left; then each sent back to the interruption
    // function (which its moto stand-in answers as handled).
    moto.function(&d.sdk, "ballast-test-interruption").await;
    let why = "pool general: SetDesiredCapacity: AccessDenied";
    for id in ["refused-1", "refused-2", "refused-3"] {
        let letter = fixture_json("spot-interruption-terminate.json", |v| v["id"] = json!(id)).to_string();
        ballast_core::ports::DeadLetters::send(&ballast_aws::SqsDeadLetters::new(&d.sdk, &d.dlq_url), &letter, why)
            .await
            .unwrap();
    }
    let dead_letters = |extra: &[&str]| {
        let mut args = vec!["dead-letters", "--config", config];
        args.extend_from_slice(extra);
        let out = ballast(&args, &moto.endpoint);
        (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    };
    // Letters waiting are findings: exit 1, as doctor's failed checks.
    let (code, text) = dead_letters(&[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains(&format!("(id refused-1): {why}")), "{text}");
    assert!(text.contains("3 letter(s) read in ballast-test-events-dlq;"), "{text}");
    // Capped by --max, it says more may be left: a full page is not the whole queue.
    let (_, text) = dead_letters(&["--max", "2"]);
    assert!(
        text.contains("2 letter(s) read in ballast-test-events-dlq (--max reached: more may be in the queue)"),
        "{text}"
    );
    // --replay lists where each would go and sends nothing without --yes.
    let (code, text) = dead_letters(&["--replay"]);
    assert_eq!(code, Some(1), "nothing sent, the letters still wait: {text}");
    assert!(text.contains("-> ballast-test-interruption"), "{text}");
    assert!(text.contains("3 letter(s) read in ballast-test-events-dlq; nothing sent: add --yes"), "{text}");
    assert!(!moto.requests().iter().any(|r| r["url"].as_str().is_some_and(|u| u.ends_with("/invocations"))));
    let (code, text) = dead_letters(&["--replay", "--yes", "--max", "2"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("2 of 2 letter(s) handled by their functions and deleted (--max reached"), "{text}");
    let (code, text) = dead_letters(&["--replay", "--yes"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("1 of 1 letter(s) handled by their functions and deleted\n"), "{text}");
    let (code, text) = dead_letters(&[]);
    assert!(text.contains("0 letter(s) read"), "{text}");
    assert_eq!(code, Some(0), "an empty queue is no finding: {text}");

    // Anyone who may write to the queue could name any function: a letter naming one that
    // is not this stack's is listed as refused, never invoked, and kept.
    let mut record: Value = serde_json::from_str(
        &std::fs::read_to_string(ballast_tests::repo_root().join("events/dead-letters/on-failure-record.json"))
            .unwrap(),
    )
    .unwrap();
    let foreign = "arn:aws:lambda:eu-west-1:123456789012:function:someone-elses";
    record["requestContext"]["functionArn"] = json!(foreign);
    moto.function(&d.sdk, "someone-elses").await;
    d.sqs.send_message().queue_url(&d.dlq_url).message_body(record.to_string()).send().await.unwrap();
    let (code, text) = dead_letters(&["--replay"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains(&format!("-> refused: names {foreign}, not one of this stack's functions")), "{text}");
    let (code, text) = dead_letters(&["--replay", "--yes"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("not sent back, kept:") && text.contains("0 of 1 letter(s) handled"), "{text}");
    let invoked = |name: &str| {
        moto.requests()
            .iter()
            .any(|r| r["url"].as_str().is_some_and(|u| u.contains(&format!("/functions/{name}/invocations"))))
    };
    assert!(!invoked("someone-elses"), "the foreign function was invoked");
    let (_, text) = dead_letters(&[]);
    assert!(text.contains("1 letter(s) read"), "kept: {text}");

    // A broken config is named, not panicked on.
    std::fs::write(dir.join("bad.yaml"), "cluster: x\n").unwrap();
    let out = ballast(&["doctor", "--config", dir.join("bad.yaml").to_str().unwrap()], &moto.endpoint);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("region: is required"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The kill switch as the docs give it: one `ballast config push --dry-run` while a warm
/// function runs live; the parameter's change event (moto emits none: delivered here as
/// EventBridge would) puts the function on the new version at once, with no restart.
#[tokio::test(flavor = "multi_thread")]
async fn config_push_reaches_a_warm_function_and_the_kill_switch_stops_it() {
    use ballast_core::ports::ConfigHome;
    use ballast_lambda::live::{Build, Live};
    use ballast_lambda::LiveApp;
    use std::sync::Arc;

    let Some(moto) = Moto::start() else { return };
    let d = Arc::new(Deployment::create(&moto, 3, (0, 1), chrono::Utc::now()).await);
    d.wire().await;
    let dir = std::env::temp_dir().join(format!("ballast-cli-push-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ballast.yaml");
    std::fs::write(&file, config_yaml(false, "")).unwrap();
    let file = file.to_str().unwrap();
    let parameter = "/ballast/test/config";

    // The first push creates the parameter (Advanced tier) and says the function goes live.
    let out = ballast(&["config", "push", file], &moto.endpoint);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("/ballast/test/config: none yet; it will be created"), "{text}");
    assert!(text.contains("wrote version 1 (cluster test, live)"), "{text}");
    let pulled = ballast(&["config", "pull", "--cluster", "test"], &moto.endpoint);
    assert_eq!(String::from_utf8_lossy(&pulled.stdout), config_yaml(false, ""), "pull gives back what was pushed");
    let again = ballast(&["config", "push", file], &moto.endpoint);
    assert!(String::from_utf8_lossy(&again.stdout).contains("unchanged (version 1), nothing written"));

    // A warm schedule function, as Lambda keeps it between invocations.
    let home: Box<dyn ConfigHome> = Box::new(ballast_aws::ssm::ParameterHome::new(&d.sdk, parameter));
    let deployment = Arc::clone(&d);
    let build: Build<ballast_tests::aws::MotoApp> = Box::new(move |config| {
        let app = deployment.app_as(config, "schedule", &deployment.sdk).0;
        Box::pin(async move { Ok(app) })
    });
    let function = LiveApp::new("schedule", Live::new("schedule", home, build, |_| {}));
    let tick = |id: &str| fixture_json("scheduled-reconcile.json", |v| v["id"] = json!(id));
    let summary = function.direct(tick("tick-1"), None).await.expect("a live tick");
    assert_eq!(summary.config_version, Some(1));
    assert!(summary.pools.iter().all(|p| !p.dry_run) && !summary.pools.is_empty(), "{summary:?}");

    // A config that fails validation is refused by push: nothing written.
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, config_yaml(false, "").replace("max_on_demand: 10", "max_on_demand: ten")).unwrap();
    let out = ballast(&["config", "push", bad.to_str().unwrap()], &moto.endpoint);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is invalid, nothing written"));

    // The kill switch: no local file needed.
    let out = ballast(&["config", "push", "--dry-run", "--cluster", "test"], &moto.endpoint);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("-dry_run: false") && text.contains("+dry_run: true"), "the diff shows it: {text}");
    assert!(text.contains("wrote version 2 (cluster test, dry run)"), "{text}");

    let change = fixture_json("ssm-parameter-change.json", |v| {
        v["detail"]["name"] = json!(parameter);
        v["resources"] = json!([format!("arn:aws:ssm:eu-west-1:123456789012:parameter{parameter}")]);
    });
    let summary = function.direct(change.clone(), None).await.expect("the change event is taken");
    assert_eq!(summary.config_version, Some(2));
    assert!(summary.unrouted.iter().any(|u| u.contains("read again")), "{summary:?}");
    let summary = function.direct(tick("tick-2"), None).await.expect("a dry tick");
    assert_eq!(summary.config_version, Some(2));
    assert!(summary.pools.iter().all(|p| p.dry_run) && !summary.pools.is_empty(), "{summary:?}");

    // A bad version written by hand (its change event read at once) leaves the function
    // on the last good one.
    let written = ballast_aws::ssm::write(&aws_sdk_ssm::Client::new(&d.sdk), parameter, "cluster: [").await.unwrap();
    assert_eq!(written, 3);
    let summary = function.direct(change, None).await.expect("still running");
    assert_eq!(summary.config_version, Some(2));
    let summary = function.direct(tick("tick-3"), None).await.expect("still running");
    assert_eq!(summary.config_version, Some(2));
    assert!(summary.pools.iter().all(|p| p.dry_run) && !summary.pools.is_empty(), "{summary:?}");

    // Each part notes the version it runs on for doctor: the functions their own, the
    // cluster-events function the one the forwarder says in its demand events. A cold
    // function needs a good latest version (the bad one above has no fallback yet).
    let ssm = aws_sdk_ssm::Client::new(&d.sdk);
    assert_eq!(ballast_aws::ssm::write(&ssm, parameter, &config_yaml(true, "")).await.unwrap(), 4);
    let home: Box<dyn ConfigHome> = Box::new(ballast_aws::ssm::ParameterHome::new(&d.sdk, parameter));
    let deployment = Arc::clone(&d);
    let build: Build<ballast_tests::aws::MotoApp> = Box::new(move |config| {
        let app = deployment.app_as(config, "cluster-events", &deployment.sdk).0;
        Box::pin(async move { Ok(app) })
    });
    let cluster_events = LiveApp::new("cluster-events", Live::new("cluster-events", home, build, |_| {}));
    let demand = fixture_json("forwarder-pool-demand-changed.json", |v| {
        v["detail"]["config_version"] = json!(1);
        v["detail"]["observed_at"] = json!(chrono::Utc::now());
    });
    cluster_events.direct(demand, None).await.expect("demand taken");
    let store = ballast_aws::DynamoStore::new(&d.sdk, ballast_tests::aws::TABLE);
    let notes = store.config_versions(&["schedule", "cluster-events", "forwarder"]).await.unwrap();
    let said: Vec<(&str, i64)> = notes.iter().map(|n| (n.part.as_str(), n.version)).collect();
    assert_eq!(said, [("schedule", 2), ("cluster-events", 4), ("forwarder", 1)]);
}

/// `config push --json` and `config pull --json`: one object on stdout each, the same
/// exit codes as without (`--diff` exits 1 when something would change).
#[tokio::test(flavor = "multi_thread")]
async fn config_push_and_pull_report_as_json() {
    let Some(moto) = Moto::start() else { return };
    let dir = std::env::temp_dir().join(format!("ballast-cli-push-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ballast.yaml");
    std::fs::write(&file, config_yaml(false, "")).unwrap();
    let file = file.to_str().unwrap();
    let push = |args: &[&str]| {
        let out = ballast(&[&["config", "push", "--json"], args].concat(), &moto.endpoint);
        assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
        (out.status.code(), serde_json::from_slice::<Value>(&out.stdout).unwrap())
    };

    let (code, created) = push(&[file]);
    assert_eq!(code, Some(0), "{created}");
    assert_eq!(created["parameter"], "/ballast/test/config");
    assert_eq!((&created["live_version"], &created["version"]), (&Value::Null, &json!(1)), "{created}");
    assert_eq!(
        (&created["changed"], &created["written"], &created["diff"]),
        (&json!(true), &json!(true), &Value::Null)
    );
    assert_eq!((&created["cluster"], &created["dry_run"]), (&json!("test"), &json!(false)));

    let (code, unchanged) = push(&[file]);
    assert_eq!(code, Some(0));
    assert_eq!(
        (&unchanged["changed"], &unchanged["written"], &unchanged["live_version"]),
        (&json!(false), &json!(false), &json!(1))
    );

    std::fs::write(file, config_yaml(true, "")).unwrap();
    let (code, would) = push(&[file, "--diff"]);
    assert_eq!(code, Some(1), "--diff: 1 when something would change");
    assert_eq!((&would["changed"], &would["written"], &would["version"]), (&json!(true), &json!(false), &Value::Null));
    let diff = would["diff"].as_str().unwrap();
    assert!(diff.contains("-dry_run: false") && diff.contains("+dry_run: true"), "{diff}");

    let pulled = ballast(&["config", "pull", "--cluster", "test", "--json"], &moto.endpoint);
    assert!(pulled.status.success() && pulled.stderr.is_empty(), "{}", String::from_utf8_lossy(&pulled.stderr));
    let pulled: Value = serde_json::from_slice(&pulled.stdout).unwrap();
    assert_eq!(pulled, json!({ "parameter": "/ballast/test/config", "version": 1, "config": config_yaml(false, "") }));
    std::fs::remove_dir_all(&dir).unwrap();
}
