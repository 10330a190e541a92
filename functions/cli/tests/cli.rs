//! The `ballast` binary, as users run it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ballast(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ballast")).args(args).current_dir(root()).output().expect("ballast runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json_files(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| p.strip_prefix(root()).unwrap().display().to_string())
        .collect();
    files.sort();
    files
}

#[test]
fn events_check_accepts_every_fixture() {
    let files = json_files(Path::new("events"));
    let mut args = vec!["events", "check", "--config", "ballast.example.yaml"];
    args.extend(files.iter().map(String::as_str));
    let out = ballast(&args);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).contains(&format!("{} file(s), 0 invalid", files.len())));
}

#[test]
fn events_check_names_the_field_of_every_invalid_fixture() {
    let files = json_files(Path::new("events/invalid"));
    let mut args = vec!["events", "check", "--config", "ballast.example.yaml", "--json"];
    args.extend(files.iter().map(String::as_str));
    let out = ballast(&args);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<serde_json::Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), files.len());
    for line in &lines {
        assert_eq!(line["valid"], false, "{line}");
        assert!(line["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    let foreign = lines.iter().find(|l| l["file"].as_str().unwrap().ends_with("foreign-account.json")).unwrap();
    assert!(foreign["error"].as_str().unwrap().starts_with("account: event from account `999999999999`"));
}

#[test]
fn events_check_never_panics_on_garbage() {
    let dir = std::env::temp_dir().join(format!("ballast-cli-garbage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut paths = Vec::new();
    let mut seed = 0x9e3779b97f4a7c15u64;
    for n in 0..40 {
        let len = (n * 37) % 700;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed & 0xff) as u8
            })
            .collect();
        let path = dir.join(format!("{n}.json"));
        std::fs::write(&path, bytes).unwrap();
        paths.push(path.display().to_string());
    }
    let mut args = vec!["events", "check"];
    args.extend(paths.iter().map(String::as_str));
    let out = ballast(&args);
    assert_eq!(out.status.code(), Some(1), "invalid input is exit 1, never a panic (101)");
    let missing = dir.join("missing.json").display().to_string();
    args.push(&missing);
    let out = ballast(&args);
    assert_eq!(out.status.code(), Some(2), "a file that cannot be read is exit 2, as for every command");
    assert!(out.stdout.is_empty(), "none is checked: {}", stdout(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 of 41 file(s) cannot be read"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn config_check_explains_how_each_pools_headroom_is_sized() {
    let out = ballast(&["config", "check", "functions/cli/tests/data/wait-target.yaml"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let text = stdout(&out);
    for expected in [
        "web headroom: learned for a first-start wait of at most 10s at p95 from up to 7 day(s) of history",
        "10% of the workload requests until a past day shows the time of day (not a floor: `floor: false` or percent not written)",
        "batch headroom: learned for a first-start wait of at most 1m at p95 from up to 14 day(s) of history",
        "5% of the workload requests until a past day shows the time of day, and as a floor under the learned size",
    ] {
        assert!(text.contains(expected), "{expected:?} not in {text}");
    }
    let example = stdout(&ballast(&["config", "check", "ballast.example.yaml"]));
    assert!(example.contains("general headroom: 10% of the pool's workload requests (2 schedule(s) change it when they fire); +10% for 30m after a spot interruption; within [1, 40] pause pods of 1 CPU / 2Gi; a headroom override event wins while it lasts"), "{example}");
}

#[test]
fn plan_prints_the_fallback_for_a_capacity_error() {
    let out = ballast(&[
        "plan",
        "--config",
        "ballast.example.yaml",
        "--state",
        "events/states/spot-short.json",
        "--event",
        "events/launch-unsuccessful-no-spot-capacity.json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan = &v["plans"][0];
    assert_eq!(plan["pool"], "general");
    assert_eq!(plan["dry_run"], true);
    let actions = plan["actions"].as_array().unwrap();
    let set = |asg: &str| {
        actions.iter().find(|a| a["action"] == "set_desired_capacity" && a["asg"] == asg).map(|a| a["to"].clone())
    };
    assert_eq!(set("eks-general-spot-m6"), Some(4.into()));
    assert_eq!(set("eks-general-on-demand"), Some(4.into()));
    assert!(actions.iter().all(|a| a["reason"].as_str().is_some_and(|r| !r.is_empty())));
    assert_eq!(plan["record"]["fallback_units"], 2);
}

/// Every launch in the account comes by the launch rule; only a pool with a wait target
/// reads one. Without one it is ignored before anything is described.
#[test]
fn plan_ignores_a_successful_launch_unless_a_pool_has_a_wait_target() {
    let plan = |config: &str| {
        let out = ballast(&[
            "plan",
            "--config",
            config,
            "--state",
            "events/states/steady.json",
            "--event",
            "events/launch-successful.json",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let v = plan("ballast.example.yaml");
    assert_eq!(v["plans"], serde_json::json!([]));
    let why = v["unrouted"][0]["why"].as_str().unwrap();
    assert!(why.starts_with("ignored: a successful launch only times a wait target's lead"), "{why}");
    let dir = scratch("launch");
    let with_target = dir.join("ballast.yaml");
    let example = std::fs::read_to_string(root().join("ballast.example.yaml")).unwrap();
    std::fs::write(&with_target, example.replace("# target: { wait_p95", "target: { wait_p95")).unwrap();
    let v = plan(with_target.to_str().unwrap());
    let why = v["unrouted"][0]["why"].as_str().unwrap();
    assert_eq!(why, "ASG sampleLuanchSucASG is in none of the configured pools", "AWS's sample names its own ASG");
    std::fs::remove_dir_all(&dir).ok();
}

/// AWS's EC2 retirement sample names its instance only by ARN: the pool holding it
/// replaces it ahead of the retirement; a host retirement is left to the operator, warned.
#[test]
fn plan_replaces_the_instance_of_aws_health_retirement_sample() {
    let dir = scratch("health-arn");
    let state = dir.join("state.json");
    let steady = std::fs::read_to_string(root().join("events/states/steady.json")).unwrap();
    std::fs::write(&state, steady.replace("i-0a1b2c3d4e5f60001", "i-1234567890abcdef0")).unwrap();
    let plan = |event: &str| {
        let out = ballast(&[
            "plan",
            "--config",
            "ballast.example.yaml",
            "--state",
            state.to_str().unwrap(),
            "--event",
            event,
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let v = plan("events/health-instance-retirement-aws-sample.json");
    assert_eq!(v["unrouted"], serde_json::json!([]), "{v:#}");
    let general = v["plans"].as_array().unwrap().iter().find(|p| p["pool"] == "general").expect("a plan for general");
    let actions = general["actions"].as_array().unwrap();
    assert!(
        actions.iter().any(|a| a["action"] == "cordon_node" && a["node"] == "ip-10-0-0-10.eu-west-1.compute.internal"),
        "{general:#}"
    );
    assert!(
        actions
            .iter()
            .any(|a| a["action"] == "set_desired_capacity" && a["asg"] == "eks-general-spot-m6" && a["to"] == 5),
        "a replacement surged ahead: {general:#}"
    );
    let v = plan("events/health-dedicated-host.json");
    assert_eq!(v["unrouted"][0]["warning"], true, "{v:#}");
    std::fs::remove_dir_all(&dir).ok();
}

/// What the queue delivered, as is: a Lambda SQS batch, or one record (a dead letter).
#[test]
fn events_check_and_plan_read_each_body_of_an_sqs_batch_or_record() {
    let out = ballast(&[
        "events",
        "check",
        "--config",
        "ballast.example.yaml",
        "events/sqs/batch.json",
        "events/sqs/record.json",
    ]);
    assert!(out.status.success(), "{}", stdout(&out));
    let text = stdout(&out);
    for line in [
        "ok      events/sqs/batch.json [059f36b4-87a3-44ab-83d2-661975830a7d]  {\"kind\":\"spot_interruption\"",
        "ok      events/sqs/batch.json [2e1424d4-f796-459a-8184-9c92662be6da]  {\"kind\":\"launch_unsuccessful\"",
        "ok      events/sqs/record.json [c80e8021-a70a-42c7-a470-796e1186f753]  {\"kind\":\"spot_interruption\"",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }

    // A bad body is named by its message id; the others are still read.
    let dir = scratch("sqs");
    let mut batch: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("events/sqs/batch.json")).unwrap()).unwrap();
    batch["Records"][1]["body"] = r#"{"version":"0","id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2026-11-20T09:12:04Z","region":"eu-west-1","detail":{"instance-id":"vm-1","instance-action":"terminate"}}"#.into();
    let bad = dir.join("bad-batch.json");
    std::fs::write(&bad, batch.to_string()).unwrap();
    let out = ballast(&["events", "check", "--config", "ballast.example.yaml", "--json", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<serde_json::Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!((lines[0]["valid"].clone(), lines[1]["valid"].clone()), (true.into(), false.into()));
    assert_eq!(lines[1]["message_id"], "2e1424d4-f796-459a-8184-9c92662be6da");
    assert!(lines[1]["error"].as_str().unwrap().contains("`vm-1` is not an EC2 instance id"), "{lines:?}");
    let out = ballast(&[
        "plan",
        "--config",
        "ballast.example.yaml",
        "--state",
        "events/states/steady.json",
        "--event",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("message 2e1424d4-f796-459a-8184-9c92662be6da is not a valid event"), "{err}");

    // The batch plans as its two envelopes do.
    let plan = |events: &[&str]| {
        let mut args = vec!["plan", "--config", "ballast.example.yaml", "--state", "events/states/spot-short.json"];
        for e in events {
            args.extend(["--event", e]);
        }
        let out = ballast(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let from_batch = plan(&["events/sqs/batch.json"]);
    assert_eq!(
        from_batch,
        plan(&["events/spot-interruption-terminate.json", "events/launch-unsuccessful-no-spot-capacity.json"])
    );
    let v: serde_json::Value = serde_json::from_slice(&from_batch).unwrap();
    assert!(v["plans"][0]["actions"].as_array().unwrap().iter().any(|a| a["action"] == "terminate_instance"), "{v:#}");
    assert_eq!(plan(&["events/sqs/record.json"]), plan(&["events/spot-interruption-terminate.json"]));
    std::fs::remove_dir_all(&dir).ok();
}

/// An ASG two selectors take, in two roles of a pool or in two pools, is refused where the
/// pool is resolved, naming the ASG, both selectors and pools; nothing of the pool is planned.
/// Tag selectors sure to overlap are refused by `config check` already.
#[test]
fn an_asg_selected_in_two_roles_is_refused_not_sized_twice() {
    let dir = scratch("two-roles");
    let example = std::fs::read_to_string(root().join("ballast.example.yaml")).unwrap();
    let general_spot = "    spot_asgs:\n      - eks-general-spot-m6\n      - tags:\n          ballast.io/pool: general\n          ballast.io/capacity: spot-fallback\n";
    assert!(example.contains(general_spot));
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    // The example's pattern mirrored: spot by the pool's tag, on-demand by the pool's tag
    // and a capacity tag. Every on-demand ASG is a spot one too.
    let mirrored = write(
        "mirrored.yaml",
        example.replace(general_spot, "    spot_asgs:\n      - tags: { ballast.io/pool: general }\n").replace(
            "on_demand_asg: eks-general-on-demand",
            "on_demand_asg: { tags: { ballast.io/pool: general, ballast.io/capacity: on-demand } }",
        ),
    );
    let out = ballast(&["config", "check", &mirrored]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("pools[0].on_demand_asg")
            && text.contains(
                "`tags(ballast.io/capacity=on-demand,ballast.io/pool=general)` (on-demand role of pool general)"
            )
            && text.contains("`tags(ballast.io/pool=general)` (spot role of pool general, pools[0])"),
        "{text}"
    );
    // Across pools: general's `{capacity: spot}` against batch's `{capacity: spot, pool: batch}`.
    let across = write(
        "across.yaml",
        example.replace(general_spot, "    spot_asgs:\n      - tags: { ballast.io/capacity: spot }\n").replace(
            "      - eks-batch-spot-c6\n",
            "      - tags: { ballast.io/capacity: spot, ballast.io/pool: batch }\n",
        ),
    );
    let out = ballast(&["config", "check", &across]);
    let problems = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{problems}");
    assert!(problems.contains("pools[1].spot_asgs") && problems.contains("pool batch"), "{problems}");

    // What only the ASGs' tags tell: a name and a tag selector taking the same ASG.
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("events/states/spot-short.json")).unwrap()).unwrap();
    let tagged = |tags: &[(&str, &[(&str, &str)])]| {
        let mut s = state.clone();
        for asg in s["asgs"].as_array_mut().unwrap() {
            for (name, pairs) in tags {
                if asg["name"] == *name {
                    for (k, v) in *pairs {
                        asg["tags"][*k] = (*v).into();
                    }
                }
            }
        }
        s.to_string()
    };
    let plan = |config: &str, state: &str| {
        ballast(&[
            "plan",
            "--config",
            config,
            "--state",
            state,
            "--event",
            "events/launch-unsuccessful-no-spot-capacity.json",
        ])
    };
    let within = write(
        "within.yaml",
        example.replace(general_spot, "    spot_asgs:\n      - tags: { ballast.io/pool: general }\n"),
    );
    assert!(ballast(&["config", "check", &within]).status.success());
    let state_within = write("within.json", tagged(&[("eks-general-on-demand", &[("ballast.io/pool", "general")])]));
    let out = plan(&within, &state_within);
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "ASG eks-general-on-demand is selected as pool general's spot ASG by `tags(ballast.io/pool=general)` \
             and as pool general's on-demand ASG by `eks-general-on-demand`"
        ),
        "{err}"
    );
    assert!(!stdout(&out).contains("set_desired_capacity"), "nothing planned: {}", stdout(&out));

    let across_pools = write(
        "across-pools.yaml",
        example.replace(general_spot, "    spot_asgs:\n      - tags: { ballast.io/capacity: spot }\n"),
    );
    assert!(ballast(&["config", "check", &across_pools]).status.success());
    let state_across = write(
        "across.json",
        tagged(&[
            ("eks-general-spot-m6", &[("ballast.io/capacity", "spot")]),
            ("eks-batch-spot-c6", &[("ballast.io/capacity", "spot")]),
        ]),
    );
    let out = plan(&across_pools, &state_across);
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "ASG eks-batch-spot-c6 is selected as pool general's spot ASG by `tags(ballast.io/capacity=spot)` \
             and as pool batch's spot ASG by `eks-batch-spot-c6`"
        ),
        "{err}"
    );
    // Told apart, the same state plans.
    let out = plan(
        &across_pools,
        &write("apart.json", tagged(&[("eks-general-spot-m6", &[("ballast.io/capacity", "spot")])])),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn plan_is_stable_and_failback_starts_from_the_shipped_state() {
    let args = [
        "plan",
        "--config",
        "ballast.example.yaml",
        "--state",
        "events/states/in-fallback.json",
        "--event",
        "events/scheduled-reconcile.json",
    ];
    let first = ballast(&args);
    let second = ballast(&args);
    assert!(first.status.success());
    assert_eq!(first.stdout, second.stdout, "same inputs, same bytes");
    let v: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let general = v["plans"].as_array().unwrap().iter().find(|p| p["pool"] == "general").unwrap();
    let surge = general["actions"].as_array().unwrap().iter().find(|a| a["asg"] == "eks-general-spot-m6").unwrap();
    assert_eq!(surge["to"], 6, "failback step of 2 onto the preferred spot ASG");
    assert!(surge["reason"].as_str().unwrap().starts_with("failback: spot healthy for"));
}

#[test]
fn plan_rejects_bad_inputs_with_a_reason() {
    let out = ballast(&[
        "plan",
        "--config",
        "ballast.example.yaml",
        "--state",
        "events/states/steady.json",
        "--event",
        "events/invalid/foreign-region.json",
    ]);
    assert_eq!(out.status.code(), Some(1), "an invalid event is exit 1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("foreign-region.json is not a valid event")
            && err.contains("region: event from region `us-east-1`"),
        "{err}"
    );
    let out = ballast(&[
        "plan",
        "--config",
        "ballast.example.yaml",
        "--state",
        "events/spot-interruption-stop.json",
        "--now",
        "2026-11-20T09:00:00Z",
    ]);
    assert_eq!(out.status.code(), Some(1), "an invalid state is exit 1");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown key"), "a state file is checked field by field");
}

#[test]
fn plan_names_the_real_fields_of_a_state_with_a_typo() {
    let dir = std::env::temp_dir().join(format!("ballast-cli-state-typo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let steady = std::fs::read_to_string(root().join("events/states/steady.json")).unwrap();
    let cases = [
        (steady.replacen(r#""ready": true"#, r#""ready": true, "cordoned": true"#, 1), "nodes[0].cordoned: unknown key `cordoned`; (this mapping takes `name`, `instance_id`, `ready`, `unschedulable`"),
        (steady.replacen(r#""version": 7"#, r#""version": 7, "evicted": 0"#, 1), "pools.general.evicted: unknown key `evicted`; (this mapping takes `record`, `version`, `demand`, `headroom_replicas`"),
        (steady.replacen(r#""asgs""#, r#""calls": [], "asgs""#, 1), "calls: unknown key `calls`; (this mapping takes `asgs`, `nodes`, `pools`"),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let file = dir.join(format!("state-{i}.json"));
        std::fs::write(&file, text).unwrap();
        let out = ballast(&[
            "plan",
            "--config",
            "ballast.example.yaml",
            "--state",
            file.to_str().unwrap(),
            "--now",
            "2026-11-20T09:00:00Z",
        ]);
        assert_eq!(out.status.code(), Some(1), "an invalid state is exit 1");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{err}");
        for test_only in ["`pdb_blocked_pods`", "`pods`", "`leases`", "`seen`", "`dead_letters`", "`spot_prices`"] {
            assert!(!err.contains(test_only), "{err}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn simulate_default_compares_three_strategies() {
    let out = ballast(&["simulate", "--json", "--seeds", "3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["scenario"], "business-day");
    assert_eq!(v["seeds"], serde_json::json!([42, 43, 44]));
    let names: Vec<&str> =
        v["strategies"].as_array().unwrap().iter().map(|s| s["strategy"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["CA alone", "CA + static", "CA + Ballast"]);
    let ids: Vec<&str> = v["strategies"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["ca", "static", "ballast"], "as --strategy takes them");
    for strategy in v["strategies"].as_array().unwrap() {
        let runs = strategy["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 3, "one run per seed");
        // The summary is the mean of the runs.
        let costs: Vec<f64> = runs.iter().map(|r| r["cost_usd"].as_f64().unwrap()).collect();
        let mean = strategy["summary"]["cost_usd"]["mean"].as_f64().unwrap();
        assert!((mean - costs.iter().sum::<f64>() / 3.0).abs() < 1e-9, "{mean} {costs:?}");
        let s = &runs[0];
        for field in [
            "pod_wait_p50_s",
            "pod_wait_p95_s",
            "pod_wait_max_s",
            "pending_pod_seconds",
            "spot_node_hours",
            "on_demand_node_hours",
            "cost_usd",
            "mean_spare_capacity_pct",
        ] {
            assert!(s[field].is_number(), "{field} in {s}");
        }
        // The summary's keys are identifiers, each the runs' own key for that figure.
        let summary = strategy["summary"].as_object().unwrap();
        assert!(summary.len() >= 21, "{summary:?}");
        for key in summary.keys() {
            let identifier = key.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            assert!(identifier && s.get(key).is_some(), "summary key `{key}` is not a run's key");
        }
    }
    // The baselines again under Capacity Rebalancing, and Ballast's cut in pending
    // pod-seconds as a range over all four baselines.
    let rebalancing = v["capacity_rebalance_baselines"].as_array().unwrap();
    let again: Vec<(&str, &str)> = rebalancing
        .iter()
        .map(|s| (s["strategy"].as_str().unwrap(), s["interruption_handling"].as_str().unwrap()))
        .collect();
    assert_eq!(again, vec![("CA alone", "capacity-rebalance"), ("CA + static", "capacity-rebalance")]);
    let mean_pending = |s: &serde_json::Value| s["summary"]["pending_pod_seconds"]["mean"].as_f64().unwrap();
    let with_ballast = mean_pending(&v["strategies"][2]);
    let cut = &v["pending_pod_cut"];
    let cuts: Vec<f64> = v["strategies"].as_array().unwrap()[..2]
        .iter()
        .chain(rebalancing)
        .map(|s| 100.0 * (1.0 - with_ballast / mean_pending(s)))
        .collect();
    let (min, max) = cuts.iter().fold((f64::MAX, f64::MIN), |(lo, hi), c| (lo.min(*c), hi.max(*c)));
    assert!((cut["min_pct"].as_f64().unwrap() - min).abs() < 1e-9, "{cut} {cuts:?}");
    assert!((cut["max_pct"].as_f64().unwrap() - max).abs() < 1e-9, "{cut} {cuts:?}");
    assert_eq!(cut["against"].as_array().unwrap().len(), 4);
    for strategy in v["strategies"].as_array().unwrap().iter().chain(rebalancing) {
        let run = &strategy["runs"][0];
        for field in
            ["rebalance_recommendations", "false_rebalance_recommendations", "nth_drains", "rebalance_replacements"]
        {
            assert!(run[field].is_u64(), "{field} in {run}");
        }
        assert!(run["false_rebalance_recommendations"].as_u64() <= run["rebalance_recommendations"].as_u64());
    }
    assert_eq!(rebalancing[0]["runs"][0]["nth_drains"], 0, "no NTH beside Capacity Rebalancing");
    // One strategy alone is that strategy only.
    let one = ballast(&["simulate", "steady", "--json", "--seeds", "1", "--strategy", "ca"]);
    let one: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    assert_eq!(one["strategies"].as_array().unwrap().len(), 1);
    assert!(one.get("capacity_rebalance_baselines").is_none() && one.get("pending_pod_cut").is_none(), "{one}");
    // The same seed gives identical output.
    let again = ballast(&["simulate", "--json", "--seeds", "3"]);
    assert_eq!(out.stdout, again.stdout);
    let other = ballast(&["simulate", "--json", "--seeds", "3", "--seed", "7"]);
    assert_ne!(out.stdout, other.stdout);
}

#[test]
fn simulate_table_plot_and_sweep() {
    let dir = std::env::temp_dir().join(format!("ballast-cli-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plot = dir.join("day.svg");
    let out = ballast(&["simulate", "steady", "--plot", plot.to_str().unwrap()]);
    assert!(out.status.success());
    let table = stdout(&out);
    for row in [
        "first-start wait p95",
        "re-placed wait p95",
        "pending pod-seconds",
        "spot node-hours",
        "on-demand node-hours",
        "cost",
        "mean spare capacity",
        "spot loss → on-demand",
        "back to spot after",
        "rebalance signals",
        "  of them false",
        "NTH drains",
        "the baselines again, with Capacity Rebalancing",
        "CR replacements",
        "Ballast cuts pending pod-seconds by ",
    ] {
        assert!(table.contains(row), "missing {row} in\n{table}");
    }
    assert!(!table.contains("scheduler least-allocated"), "first-fit by default: {table}");
    // The scheduler's scoring, from the command line.
    let spread = ballast(&["simulate", "steady", "--seeds", "1", "--scoring", "least-allocated"]);
    assert!(spread.status.success());
    let spread = stdout(&spread);
    assert!(spread.contains("scheduler least-allocated"), "{spread}");
    assert_ne!(
        spread.lines().skip(2).collect::<Vec<_>>(),
        stdout(&ballast(&["simulate", "steady", "--seeds", "1"])).lines().skip(2).collect::<Vec<_>>(),
        "another placement, other figures"
    );
    // A fixed pause-pod shape, for static and Ballast alike; a malformed one is a usage
    // error that says what it expects.
    let run = |extra: &[&str]| {
        let mut args = vec!["simulate", "steady", "--seeds", "1", "--strategy", "static", "--json"];
        args.extend_from_slice(extra);
        let out = ballast(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    assert_ne!(run(&["--pause-pod", "4/14Gi"]), run(&[]), "other pause pods, other figures");
    let bad = ballast(&["simulate", "steady", "--pause-pod", "4"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected CPU/MEMORY, e.g. 4/14Gi"), "{bad:?}");
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("CA + Ballast") && svg.contains("headroom pods"));

    let sweep_plot = dir.join("sweep.svg");
    let out = ballast(&[
        "simulate",
        "steady",
        "--sweep",
        "headroom=0:20:10",
        "--seeds",
        "2",
        "--json",
        "--plot",
        sweep_plot.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let percents: Vec<u64> = v["sweep"].as_array().unwrap().iter().map(|p| p["value"].as_u64().unwrap()).collect();
    assert_eq!(percents, vec![0, 10, 20]);
    assert!(v["sweep"].as_array().unwrap().iter().all(|p| p["setting"] == "headroom.percent"));
    assert!(std::fs::read_to_string(&sweep_plot).unwrap().contains("cost vs p95 pod wait"));

    // headroom.max swept: a max of 1 holds the pause pods all run, and the table says so.
    let out = ballast(&["simulate", "steady", "--sweep", "headroom.max=1:201:200", "--seeds", "1"]);
    assert!(out.status.success());
    let table = stdout(&out);
    assert!(table.contains("headroom.max sweep") && table.contains("held at max"), "{table}");
    let row = |value: &str| -> Vec<String> {
        let line = table.lines().find(|l| l.split_whitespace().next() == Some(value)).unwrap();
        line.split_whitespace().map(str::to_string).collect()
    };
    let held = |cells: Vec<String>| cells[cells.len() - 2].trim_end_matches('%').parse::<f64>().unwrap();
    assert!(held(row("1")) > 99.0, "{table}");
    assert_eq!(held(row("201")), 0.0, "{table}");
    assert!(table.contains("held at max/min: share of the run"), "{table}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn simulate_sweeps_a_wait_target_and_plots_the_waits_against_it() {
    let out = ballast(&["simulate", "week", "--seeds", "1", "--sweep", "target=10s:70s:30s", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let points = json["sweep"].as_array().unwrap();
    let values: Vec<u64> = points.iter().map(|p| p["value"].as_u64().unwrap()).collect();
    assert_eq!(values, [10, 40, 70]);
    assert!(points
        .iter()
        .all(|p| p["setting"] == "headroom.target.wait_p95" && p["runs"].as_array().unwrap().len() == 1));
    let bad = ballast(&["simulate", "week", "--sweep", "target=1500ms:3s:1s"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("`1500ms` is not a whole number of seconds"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let dir = std::env::temp_dir().join(format!("ballast-cli-target-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("week.svg");
    let plotted =
        ballast(&["simulate", "week", "--seeds", "1", "--strategy", "ballast", "--plot", svg.to_str().unwrap()]);
    assert!(plotted.status.success());
    let text = std::fs::read_to_string(&svg).unwrap();
    for expected in ["week: CA + Ballast, first-start wait", "target (p95)", "headroom pods"] {
        assert!(text.contains(expected), "{expected} not in the plot");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--set headroom=0` before a target sweep: the learner with no percent to start from.
/// On `ml-watermark` (20 % until a past day shows the time) the first day then holds
/// only what the learner asks for, and costs less.
#[test]
fn simulate_sets_a_headroom_setting_before_the_sweep() {
    let cost = |extra: &[&str]| {
        let mut args = vec!["simulate", "ml-watermark", "--seeds", "1", "--sweep", "target=30s:30s:1s", "--json"];
        args.extend_from_slice(extra);
        let out = ballast(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        json["sweep"][0]["cost"].as_f64().unwrap()
    };
    let (with_percent, without) = (cost(&[]), cost(&["--set", "headroom=0"]));
    assert!(without < with_percent, "no percent to start from: {without} vs {with_percent} with 20 %");
    for (bad, reason) in [
        ("headroom", "expected SETTING=VALUE"),
        ("target=0s", "a wait target is 1s to 60m"),
        ("headroom.boost=1", "`headroom.boost` is not a setting it can vary"),
        ("headroom.max=lots", "`lots` is not a whole number"),
        ("headroom.max=20000", "20000 is above 10000"),
    ] {
        let out = ballast(&["simulate", "steady", "--set", bad]);
        assert_eq!(out.status.code(), Some(2), "--set {bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(reason),
            "--set {bad}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = ballast(&["simulate", "steady", "--set", "target=30s", "--sweep", "headroom=0:20:10"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no effect under --sweep headroom"));
}

#[test]
fn simulate_rejects_bad_input_with_a_reason() {
    let out = ballast(&["simulate", "nowhere"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown built-in scenario `nowhere`"));
    let out = ballast(&["simulate", "--sweep", "headroom=5:1:1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("FROM <= TO"));
    // A step of nothing is a step, not a wait target out of bounds.
    let out = ballast(&["simulate", "--sweep", "target=10s:90s:0s"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("STEP > 0"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = ballast(&["simulate", "--sweep", "target=0s:90s:10s"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`0s`: a wait target is 1s to 60m"));
    let out = ballast(&["simulate", "--sweep", "headroom.boost=1:2:1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`headroom.boost` is not a setting it can vary"));
    let out = ballast(&["simulate", "ballast.example.yaml"]);
    assert_eq!(out.status.code(), Some(1), "a config is not a scenario: an invalid input");
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a valid scenario"));
}

/// `--plot` is refused before anything runs when the plot could not be written: another
/// format than SVG is a usage error; a path that cannot be written (no such directory, a
/// file where a directory should be, a file system that takes no new file) is unwritable.
/// Either way exit 2 and nothing on stdout, and no file left behind.
#[test]
fn simulate_refuses_a_plot_it_cannot_write_before_running() {
    let dir = scratch("plot-refused");
    let png = dir.join("day.png");
    let mut cases = vec![
        (png.clone(), "usage", "only SVG is drawn"),
        (dir.join("day"), "usage", "only SVG is drawn"),
        (dir.join("missing/day.svg"), "unwritable", "No such file or directory"),
        (root().join("Cargo.toml/day.svg"), "unwritable", "Not a directory"),
    ];
    // sysfs takes no new file from anyone, root included (these tests may run as root,
    // for whom a read-only mode bit is no obstacle).
    if cfg!(target_os = "linux") && Path::new("/sys/kernel").is_dir() {
        cases.push((PathBuf::from("/sys/ballast-day.svg"), "unwritable", "Permission denied"));
    }
    for (path, kind, reason) in cases {
        let started = std::time::Instant::now();
        let out = ballast(&["simulate", "business-day", "--json", "--plot", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", path.display());
        assert!(out.stdout.is_empty(), "nothing on stdout on failure");
        let error: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
        assert_eq!(error["error"]["kind"], kind, "{error}");
        assert!(error["error"]["message"].as_str().unwrap().contains(reason), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "refused before simulating");
        assert!(!path.exists(), "{} left behind", path.display());
    }
    // Without --json the reason is a line on stderr, and the exit the same.
    let out = ballast(&["simulate", "steady", "--plot", png.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: --plot "), "{out:?}");
    // A file that is there already is written over, not refused.
    let there = dir.join("there.svg");
    std::fs::write(&there, "old").unwrap();
    // With --json, stderr says nothing when all went well.
    let plot = there.to_str().unwrap();
    let out = ballast(&["simulate", "steady", "--seeds", "1", "--strategy", "ca", "--json", "--plot", plot]);
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(&there).unwrap().starts_with("<svg"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The timeline names the seed its runs had and shades the scenario's spot capacity
/// losses and storms, each labelled.
#[test]
fn simulate_plot_names_its_seed_and_marks_capacity_losses_and_storms() {
    let dir = scratch("plot-marks");
    let svg = dir.join("day.svg");
    let out = ballast(&["simulate", "business-day", "--seed", "7", "--seeds", "2", "--plot", svg.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    for expected in [
        "business-day: CA alone, seed 7",
        "business-day: CA + Ballast, seed 7",
        "no spot: m6i.2xlarge, m5.2xlarge",
        "storm: 30% of spot nodes",
        "spot capacity loss / storm",
    ] {
        assert!(text.contains(expected), "{expected} not in the plot");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A sweep varies Ballast's settings and runs Ballast alone: `--strategy ballast` is the
/// same sweep, another strategy a usage error that says why.
#[test]
fn simulate_sweep_takes_strategy_ballast_and_refuses_the_others() {
    let sweep = |extra: &[&str]| {
        let mut args = vec!["simulate", "steady", "--seeds", "1", "--sweep", "headroom=0:10:10", "--json"];
        args.extend_from_slice(extra);
        ballast(&args)
    };
    let (plain, ballast_only) = (sweep(&[]), sweep(&["--strategy", "ballast"]));
    assert!(ballast_only.status.success(), "{}", String::from_utf8_lossy(&ballast_only.stderr));
    assert_eq!(plain.stdout, ballast_only.stdout, "the same sweep");
    for other in ["ca", "static"] {
        let out = sweep(&["--strategy", other]);
        assert_eq!(out.status.code(), Some(2), "--strategy {other}");
        assert!(out.stdout.is_empty());
        let error: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
        assert_eq!(error["error"]["kind"], "usage");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("runs Ballast alone: --strategy {other} has none to vary")), "{message}");
    }
}

/// The README and the simulator page show what `ballast simulate` prints on the embedded
/// default; they must stay what the binary prints (only the wall-clock line after it
/// differs run to run). `scripts/readme-simulate` writes both.
#[test]
fn the_readme_shows_what_simulate_prints() {
    let out = ballast(&["simulate"]);
    assert!(out.status.success());
    let printed = stdout(&out);
    let printed = printed.split("\n\n(simulated in").next().unwrap().trim_end();
    for page in ["README.md", "docs/src/simulator.md"] {
        let text = std::fs::read_to_string(root().join(page)).unwrap();
        let start = text.find("```\nscenario business-day").unwrap_or_else(|| panic!("{page}: the simulate block")) + 4;
        let shown = text[start..].split("\n```").next().unwrap().trim_end();
        assert_eq!(
            shown, printed,
            "update {page}'s `ballast simulate` block from the binary's output (scripts/readme-simulate)"
        );
    }
}

/// Where the measured figures live: each with the script that makes it.
const BENCHMARKS_PAGE: &str = "docs/src/benchmarks.md";

/// The benchmarks page's table (docs/src/benchmarks.md) shows what the scripts last printed:
/// each script that writes `benchmarks/<script>.txt` ends it with `row: ` and the result
/// cell of its row (`| `scripts/<script>` | what | result |`; `benchmarks/<script>.<part>.txt` for a
/// row `| `scripts/<script>` (<part>) | ...`), and no row of the table is without its file.
#[test]
fn the_readme_benchmark_rows_come_from_the_scripts() {
    let page = std::fs::read_to_string(root().join(BENCHMARKS_PAGE)).unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("benchmarks"))
        .expect("benchmarks/: the bench scripts' latest figures")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    let mut wrong = Vec::new();
    let mut rows_with_files = Vec::new();
    for file in &files {
        let script = file.file_stem().unwrap().to_str().unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        let Some(printed) = text.lines().next_back().and_then(|l| l.strip_prefix("row: ")) else {
            wrong.push(format!("{}: the last line is not `row: ...`", file.display()));
            continue;
        };
        let prefix = match script.split_once('.') {
            Some((name, part)) => format!("| `scripts/{name}` ({part}) |"),
            None => format!("| `scripts/{script}` |"),
        };
        rows_with_files.push(prefix.clone());
        let Some(line) = page.lines().find(|l| l.starts_with(&prefix)) else {
            wrong.push(format!("{BENCHMARKS_PAGE} has no benchmark row for scripts/{script}"));
            continue;
        };
        let shown = line.trim_end().strip_suffix('|').unwrap_or(line).rsplit(" | ").next().unwrap().trim();
        if shown != printed.trim() {
            wrong
                .push(format!("scripts/{script}: {BENCHMARKS_PAGE} shows\n  {shown}\nthe script printed\n  {printed}"));
        }
    }
    let table = page.split("\n## Results").nth(1).expect("the benchmarks page has a Results section");
    let table = table.split("\n## ").next().unwrap();
    for row in table.lines().filter(|l| l.starts_with("| `scripts/")) {
        if !rows_with_files.iter().any(|prefix| row.starts_with(prefix.as_str())) {
            wrong.push(format!("no benchmarks/*.txt behind the row {}", row.split(" | ").next().unwrap()));
        }
    }
    assert!(files.len() >= 3, "benchmarks/ holds the figures of bench-package, bench-forwarder and bench-simulate");
    assert!(wrong.is_empty(), "update {BENCHMARKS_PAGE}'s rows from benchmarks/*.txt:\n{}", wrong.join("\n"));
}

/// The figures of the benchmarks page's wait-target text (every decimal in it, from its
/// first paragraph to the next heading) are read off `benchmarks/report-wait-target.txt`,
/// which `scripts/report-wait-target` writes.
#[test]
fn the_wait_target_figures_come_from_the_report() {
    let page = std::fs::read_to_string(root().join(BENCHMARKS_PAGE)).unwrap();
    let report = std::fs::read_to_string(root().join("benchmarks/report-wait-target.txt")).unwrap();
    let start = page.find("**Headroom from a wait target.**").expect("the wait-target paragraph");
    let paragraph = &page[start..start + page[start..].find("\n#").unwrap_or(page.len() - start)];
    let decimals: Vec<&str> = paragraph
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|t| t.trim_matches('.'))
        .filter(|t| t.contains('.') && t.split('.').all(|d| !d.is_empty()))
        .collect();
    assert!(decimals.len() >= 5, "the paragraph quotes the report: {decimals:?}");
    let missing: Vec<&&str> = decimals.iter().filter(|d| !report.contains(**d)).collect();
    assert!(missing.is_empty(), "{BENCHMARKS_PAGE}: wait-target figures not in the report: {missing:?}");
}

/// The CLI reference page, as the released build (with `aws`) prints it from the clap
/// definitions: everything above this line of the page is `ballast markdown-help`'s output
/// (`scripts/cli-reference` writes it), and the notes after it are written by hand.
const CLI_PAGE: &str = "docs/src/reference/cli.md";
const CLI_PAGE_NOTES: &str = "<!-- The reference above is `ballast markdown-help`'s output (scripts/cli-reference); notes below are written by hand. -->";

#[cfg(feature = "aws")]
#[test]
fn the_cli_reference_page_is_generated_from_the_clap_definitions() {
    let out = ballast(&["markdown-help"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let generated = stdout(&out);
    assert!(generated.contains("## `ballast config check`"), "every command is in it:\n{generated}");
    assert!(!generated.contains("markdown-help"), "hidden commands stay out of it");
    let page = std::fs::read_to_string(root().join(CLI_PAGE)).unwrap();
    let Some((committed, _notes)) = page.split_once(CLI_PAGE_NOTES) else {
        panic!("{CLI_PAGE} has no line `{CLI_PAGE_NOTES}`");
    };
    assert!(
        committed.trim_end() == generated.trim_end(),
        "{CLI_PAGE} differs from the clap definitions: run scripts/cli-reference (it prints:\n{generated})"
    );
}

fn ballast_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ballast"));
    command.args(args).current_dir(root()).env_remove("BALLAST_CONFIG_FILE");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("ballast runs")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ballast-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What one command line must exit with, and with `--json` added, what it prints: a
/// report on stdout (`None`), or nothing there and one error object of that kind on stderr.
struct Case<'a> {
    args: Vec<&'a str>,
    code: i32,
    error: Option<&'a str>,
}

fn case<'a>(args: &[&'a str], code: i32, error: Option<&'a str>) -> Case<'a> {
    Case { args: args.to_vec(), code, error }
}

/// Every command, by the table in `ballast --help`: 0 ok, 1 findings or invalid input,
/// 2 usage or an input that cannot be read; with `--json`, the same exit, a failure as
/// `{"error": {"kind", "message", "exit_code", ...}}` on stderr and nothing on stdout, a
/// report as JSON on stdout. (`config check` has its own test.) The AWS commands are
/// asked only what they answer before calling AWS, or of an endpoint nothing listens on.
#[test]
fn every_command_exits_by_the_table_and_fails_as_one_json_object() {
    let dir = scratch("json-errors");
    let empty = dir.join("empty.yaml");
    std::fs::write(&empty, "").unwrap();
    let (empty, missing, config) = (empty.to_str().unwrap(), "no/such/file.yaml", "ballast.example.yaml");
    let (state, event) = ("events/states/steady.json", "events/spot-interruption-terminate.json");
    let invalid_event = "events/invalid/bad-time.json";
    let mut cases = vec![
        case(&["simulate", "steady", "--seeds", "1", "--strategy", "ca"], 0, None),
        case(&["simulate", "nowhere"], 2, Some("usage")),
        case(&["simulate", "no/such/scenario.yaml"], 2, Some("unreadable")),
        case(&["simulate", config], 1, Some("invalid")),
        case(&["simulate", "--seeds", "0"], 2, Some("usage")),
        case(&["simulate", "--plot", "day.pdf"], 2, Some("usage")),
        case(&["plan", "--config", config, "--state", state, "--event", event], 0, None),
        case(&["plan", "--config", empty, "--state", state, "--event", event], 1, Some("invalid")),
        case(&["plan", "--config", config, "--state", state, "--event", invalid_event], 1, Some("invalid")),
        case(&["plan", "--config", config, "--state", config, "--event", event], 1, Some("invalid")),
        case(&["plan", "--config", missing, "--state", state, "--event", event], 2, Some("unreadable")),
        case(&["plan", "--config", config, "--state", state], 2, Some("usage")),
        case(&["events", "check", event], 0, None),
        case(&["events", "check", invalid_event], 1, None),
        case(&["events", "check", "--config", empty, event], 1, Some("invalid")),
        case(&["events", "check", "--config", missing, event], 2, Some("unreadable")),
        case(&["events", "check", "--account", "123456789012", event], 2, Some("usage")),
        case(&["no-such-command"], 2, Some("usage")),
    ];
    if cfg!(feature = "aws") {
        cases.extend([
            case(&["invoke", "schedule", "--event", missing], 2, Some("unreadable")),
            case(&["invoke", "schedule", "--event", config], 1, Some("invalid")),
            case(&["invoke", "no-such-function", "--event", event], 2, Some("usage")),
            case(&["doctor", "--config", missing], 2, Some("unreadable")),
            case(&["doctor", "--config", empty], 1, Some("invalid")),
            case(&["dead-letters", "--config", missing], 2, Some("unreadable")),
            case(&["dead-letters", "--config", empty], 1, Some("invalid")),
            case(&["dead-letters", "--config", config, "--yes"], 2, Some("usage")),
            case(&["config", "push"], 2, Some("usage")),
            case(&["config", "push", empty], 1, Some("invalid")),
            case(&["config", "push", missing], 2, Some("unreadable")),
            case(&["config", "push", config, "--region", "us-east-1"], 2, Some("usage")),
            case(&["config", "pull"], 2, Some("usage")),
            case(&["config", "pull", "--parameter", "no-slash"], 2, Some("usage")),
            case(&["config", "pull", "--cluster", "prod-eks"], 1, Some("failed")),
        ]);
    } else {
        cases.push(case(&["doctor", "--config", config], 2, Some("usage")));
    }
    let aws = common::NO_AWS;
    let mut wrong = Vec::new();
    for Case { args, code, error } in &cases {
        let out = ballast_env(args, &aws);
        if out.status.code() != Some(*code) {
            wrong.push(format!("ballast {}: exit {:?}, not {code}", args.join(" "), out.status.code()));
        }
        let mut with_json = args.clone();
        with_json.push("--json");
        let out = ballast_env(&with_json, &aws);
        let shown =
            format!("ballast {}: {}{}", with_json.join(" "), stdout(&out), String::from_utf8_lossy(&out.stderr));
        if out.status.code() != Some(*code) {
            wrong.push(format!("exit {:?}, not {code}: {shown}", out.status.code()));
            continue;
        }
        match error {
            Some(kind) => {
                let object = serde_json::from_slice::<serde_json::Value>(&out.stderr).unwrap_or_default();
                let error = &object["error"];
                let told = error["kind"] == *kind
                    && error["exit_code"] == *code
                    && error["message"].as_str().is_some_and(|m| !m.is_empty());
                if !out.stdout.is_empty() || !told {
                    wrong.push(format!("not nothing on stdout and one `{kind}` error on stderr: {shown}"));
                }
            }
            None => {
                let text = stdout(&out);
                let json = serde_json::from_str::<serde_json::Value>(&text).is_ok()
                    || text.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok());
                if text.is_empty() || !json || String::from_utf8_lossy(&out.stderr).contains("\"error\"") {
                    wrong.push(format!("not a JSON report on stdout: {shown}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The table is in `ballast --help`, and so in the CLI reference made from it.
    let help = stdout(&ballast(&["--help"]));
    for line in ["Exit codes (every command):", "  0  ok", "  1  findings or invalid input", "  2  usage"] {
        assert!(help.contains(line), "{line} not in\n{help}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// 0 valid, 1 invalid input, 2 usage error or unreadable file: the same for every command.
#[test]
fn exit_codes_mean_the_same_for_every_command() {
    let dir = scratch("codes");
    let empty = dir.join("empty.yaml");
    std::fs::write(&empty, "").unwrap();
    let (empty, missing) = (empty.to_str().unwrap(), "no/such/file.yaml");
    let state = "events/states/steady.json";
    let event = "events/spot-interruption-terminate.json";
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["config", "check", "ballast.example.yaml"], 0),
        (vec!["config", "check", empty], 1),
        (vec!["config", "check", missing], 2),
        (vec!["config", "check", "ballast.example.yaml", "--rbac", missing], 2),
        (vec!["config", "check", "ballast.example.yaml", "--pods", missing], 2),
        (vec!["config", "check"], 2),
        (vec!["events", "check", event], 0),
        (vec!["events", "check", "events/invalid/truncated.json"], 1),
        (vec!["events", "check", missing], 2),
        (vec!["events", "check", "--config", empty, event], 1),
        (vec!["events", "check", "--config", missing, event], 2),
        (vec!["events", "check", "--account", "123456789012", event], 2),
        (vec!["plan", "--config", "ballast.example.yaml", "--state", state, "--event", event], 0),
        (vec!["plan", "--config", empty, "--state", state, "--event", event], 1),
        (vec!["plan", "--config", missing, "--state", state, "--event", event], 2),
        (vec!["plan", "--config", "ballast.example.yaml", "--state", missing, "--event", event], 2),
        (vec!["plan", "--config", "ballast.example.yaml", "--state", state, "--event", missing], 2),
        (vec!["plan", "--config", "ballast.example.yaml", "--state", state], 2),
        (vec!["simulate", "no/such/scenario.yaml"], 2),
        (vec!["completions", "powershell-ish"], 2),
        (vec!["no-such-command"], 2),
    ];
    let mut wrong = Vec::new();
    for (args, code) in &cases {
        if args == &["events", "check", "events/invalid/truncated.json"] && !root().join(args[2]).exists() {
            continue;
        }
        let out = ballast_env(args, &[]);
        if out.status.code() != Some(*code) {
            wrong.push(format!(
                "ballast {}: exit {:?}, not {code}\n{}{}",
                args.join(" "),
                out.status.code(),
                stdout(&out),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn config_check_json_says_which_input_is_wrong_and_why() {
    let out = ballast_env(&["config", "check", "--json", "ballast.example.yaml"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["errors"], serde_json::json!([]));

    let broken = "functions/cli/tests/data/broken.yaml";
    let out = ballast_env(&["config", "check", "--json", broken], &[]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["valid"], false);
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 6, "{v}");
    assert!(errors.iter().all(|e| e["input"] == broken), "{v}");
    assert!(
        errors.iter().any(|e| e["path"] == "pools[1].fallback.unavailable_ttl"
            && e["message"].as_str().unwrap().contains("`forever` is not a duration")),
        "{v}"
    );

    let dir = scratch("json");
    let example = std::fs::read_to_string(root().join("ballast.example.yaml")).unwrap();
    let elsewhere = dir.join("elsewhere.yaml");
    std::fs::write(&elsewhere, example.replacen("namespace: ballast-headroom", "namespace: kube-system", 1)).unwrap();
    let rbac = "infra/k8s/functions-rbac.yaml";
    let out = ballast_env(&["config", "check", "--json", elsewhere.to_str().unwrap(), "--rbac", rbac], &[]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["errors"][0]["input"], rbac, "{v}");
    assert_eq!(v["errors"][0]["path"], "pools[0].headroom.namespace", "{v}");

    let out = ballast_env(&["config", "check", "--json", "no/such.yaml"], &[]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn config_check_print_shows_every_default_and_reads_back_equal() {
    use ballast_core::config::Config;
    let dir = scratch("print");
    let minimal = dir.join("minimal.yaml");
    std::fs::write(
        &minimal,
        "cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:\n  - {name: p, spot_asgs: [s], on_demand_asg: od}\n",
    )
    .unwrap();
    for file in [root().join("ballast.example.yaml"), minimal.clone()] {
        let out = ballast_env(&["config", "check", "--print", file.to_str().unwrap()], &[]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains("valid: cluster"), "the summary goes to stderr");
        let printed = stdout(&out);
        let original = Config::from_yaml(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(Config::from_yaml(&printed).expect("the printed config is valid"), original, "{printed}");
        if file == minimal {
            for default in ["dry_run: false", "failback_after: 30m", "surge: true", "pod_memory: 2Gi", "max: 50"] {
                assert!(printed.contains(default), "`{default}` missing from:\n{printed}");
            }
        }
    }
    let out = ballast_env(&["config", "check", "--print", "--json", minimal.to_str().unwrap()], &[]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["config"]["pools"][0]["headroom"]["percent"], 10, "{v}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn completions_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let out = ballast_env(&["completions", shell], &[]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = stdout(&out);
        for word in ["ballast", "simulate", "plan", "config", "--print"] {
            assert!(script.contains(word), "{shell}: `{word}` missing");
        }
    }
}

#[test]
fn every_command_that_takes_a_config_reads_ballast_config_file() {
    let env = [("BALLAST_CONFIG_FILE", "ballast.example.yaml")];
    let out = ballast_env(&["config", "check"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("ballast.example.yaml: valid: cluster prod-eks"));

    let out = ballast_env(
        &[
            "plan",
            "--state",
            "events/states/spot-short.json",
            "--event",
            "events/launch-unsuccessful-no-spot-capacity.json",
        ],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("eks-general-on-demand"));

    // The config's account is checked: the foreign event is rejected only with it.
    let out = ballast_env(&["events", "check", "events/invalid/foreign-account.json"], &env);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let out = ballast_env(&["events", "check", "events/invalid/foreign-account.json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // An explicit argument wins over the variable.
    let out = ballast_env(&["config", "check", "functions/cli/tests/data/broken.yaml"], &env);
    assert_eq!(out.status.code(), Some(1));
}

/// `ballast ... | head -1`: every command ends quietly when its stdout is closed. The
/// pipe's reading end is closed before the command starts, so every write meets EPIPE
/// (with `head` that happens only when the output outruns it, a third of the runs).
#[cfg(unix)]
#[test]
fn every_command_ends_quietly_when_its_output_is_closed() {
    use std::os::unix::process::ExitStatusExt;
    let events = json_files(Path::new("events"));
    let mut check: Vec<&str> = vec!["events", "check", "--config", "ballast.example.yaml"];
    check.extend(events.iter().map(String::as_str));
    let commands: Vec<Vec<&str>> = vec![
        vec!["config", "check", "ballast.example.yaml"],
        vec!["config", "check", "--print", "ballast.example.yaml"],
        vec!["completions", "bash"],
        vec!["simulate", "--json", "--seeds", "1"],
        vec!["simulate", "--seeds", "1"],
        check,
        vec![
            "plan",
            "--config",
            "ballast.example.yaml",
            "--state",
            "events/states/spot-short.json",
            "--event",
            "events/launch-unsuccessful-no-spot-capacity.json",
        ],
        vec!["--help"],
    ];
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_ballast"))
            .args(&args)
            .current_dir(root())
            .env_remove("BALLAST_CONFIG_FILE")
            .stdout(writer)
            .output()
            .expect("ballast runs");
        // Nothing beyond what the command says on stderr when its output is read.
        let read = ballast_env(&args, &[]);
        assert!(read.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(read.stderr.starts_with(&out.stderr), "{args:?}: {stderr}");
        let quiet = out.status.success() || out.status.signal() == Some(libc::SIGPIPE);
        assert!(quiet, "{args:?}: {:?}", out.status);
    }
}

/// `ballast config schema` prints the committed schema, which the example validates against.
#[test]
fn config_schema_prints_the_committed_schema() {
    let out = ballast(&["config", "schema"]);
    assert_eq!(out.status.code(), Some(0));
    let committed = std::fs::read_to_string(root().join("docs/src/reference/ballast.schema.json")).unwrap();
    assert!(
        stdout(&out) == committed,
        "docs/src/reference/ballast.schema.json is stale: regenerate it with `ballast config schema`"
    );
    let schema: serde_json::Value = serde_json::from_str(&committed).unwrap();
    assert!(schema["$comment"].as_str().unwrap().contains("# yaml-language-server: $schema="));
}
