//! How `ballast` says what is wrong: the exit code of every file-taking flag, errors as
//! one JSON object on stderr, config and scenario problems where they are written, AWS
//! failures in words.

use std::path::PathBuf;
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

mod common;
use common::NO_AWS;

fn ballast(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ballast"));
    command.args(args).current_dir(root()).env_remove("BALLAST_CONFIG_FILE").envs(NO_AWS);
    command.output().expect("ballast runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A directory of its own for one test.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("ballast-errors-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn example() -> String {
    std::fs::read_to_string(root().join("ballast.example.yaml")).unwrap()
}

/// The one error object `--json` prints on stderr, stdout left empty.
fn error_object(out: &Output, shown: &str) -> serde_json::Value {
    assert!(out.stdout.is_empty(), "{shown}: nothing on stdout, not {}", stdout(out));
    let object: serde_json::Value =
        serde_json::from_slice(&out.stderr).unwrap_or_else(|e| panic!("{shown}: {e}: {}", stderr(out)));
    object["error"].clone()
}

#[test]
fn events_check_json_says_an_unreadable_file_as_one_error_on_stderr() {
    let good = "events/spot-interruption-terminate.json";
    let out = ballast(&["events", "check", "--json", good, "no/such/event.json"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let error = error_object(&out, "events check --json");
    assert_eq!(error["kind"], "unreadable", "{error}");
    assert_eq!(error["input"], "no/such/event.json", "{error}");
    assert_eq!(error["exit_code"], 2, "{error}");
    assert!(error["message"].as_str().unwrap().contains("none was checked"), "{error}");
    // Without --json, the same: nothing checked, the error on stderr.
    let out = ballast(&["events", "check", good, "no/such/event.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
    assert!(stderr(&out).starts_with("error: 1 of 2 file(s) cannot be read (no/such/event.json)"), "{}", stderr(&out));
}

/// One rule for every flag that takes a file: one that cannot be read exits 2
/// (`unreadable`), one read but not valid exits 1 (`invalid`, or a problem in a
/// report), as the table in `ballast --help` says.
#[test]
fn every_file_taking_flag_exits_2_unreadable_and_1_invalid() {
    let dir = Scratch::new("flags");
    let missing = "no/such/file.yaml";
    let not_json = dir.file("not.json", "{ \"kind\": ");
    let not_yaml = dir.file("not.yaml", "cluster: [unclosed\n");
    let (config, state, event) =
        ("ballast.example.yaml", "events/states/steady.json", "events/spot-interruption-terminate.json");
    // (the flag, its arguments with FILE in place of the file, the malformed file, whether
    // the command reports on stdout rather than failing with an error object).
    let mut flags: Vec<(&str, Vec<&str>, &str, bool)> = vec![
        ("config check FILE", vec!["config", "check", "FILE"], not_yaml.as_str(), true),
        ("config check --rbac", vec!["config", "check", config, "--rbac", "FILE"], not_yaml.as_str(), true),
        ("config check --pods", vec!["config", "check", config, "--pods", "FILE"], not_json.as_str(), true),
        ("config check --nodes", vec!["config", "check", config, "--nodes", "FILE"], not_json.as_str(), true),
        ("config check --event", vec!["config", "check", config, "--event", "FILE"], not_json.as_str(), true),
        ("events check FILE", vec!["events", "check", "FILE"], not_json.as_str(), true),
        ("events check --config", vec!["events", "check", "--config", "FILE", event], not_yaml.as_str(), false),
        (
            "plan --config",
            vec!["plan", "--config", "FILE", "--state", state, "--event", event],
            not_yaml.as_str(),
            false,
        ),
        (
            "plan --state",
            vec!["plan", "--config", config, "--state", "FILE", "--event", event],
            not_json.as_str(),
            false,
        ),
        (
            "plan --event",
            vec!["plan", "--config", config, "--state", state, "--event", "FILE"],
            not_json.as_str(),
            false,
        ),
        ("simulate SCENARIO", vec!["simulate", "FILE", "--seeds", "1"], not_yaml.as_str(), false),
    ];
    if cfg!(feature = "aws") {
        flags.extend([
            (
                "invoke --event",
                vec!["invoke", "schedule", "--event", "FILE", "--config", config],
                not_json.as_str(),
                false,
            ),
            (
                "invoke --config",
                vec!["invoke", "schedule", "--event", event, "--config", "FILE"],
                not_yaml.as_str(),
                false,
            ),
            ("doctor --config", vec!["doctor", "--config", "FILE"], not_yaml.as_str(), false),
            ("dead-letters --config", vec!["dead-letters", "--config", "FILE"], not_yaml.as_str(), false),
            ("config push FILE", vec!["config", "push", "FILE"], not_yaml.as_str(), false),
        ]);
    }
    let mut wrong = Vec::new();
    for (flag, args, malformed, reports) in &flags {
        for (file, code, kind) in [(missing, 2, "unreadable"), (*malformed, 1, "invalid")] {
            let mut with_json: Vec<&str> = args.iter().map(|a| if *a == "FILE" { file } else { a }).collect();
            let plain = ballast(&with_json);
            with_json.push("--json");
            let out = ballast(&with_json);
            let shown = format!("{flag} {file}: exit {:?}\n{}{}", out.status.code(), stdout(&out), stderr(&out));
            if plain.status.code() != Some(code) || out.status.code() != Some(code) {
                wrong.push(format!("not exit {code}, without --json {:?}: {shown}", plain.status.code()));
                continue;
            }
            if *reports && code == 1 {
                // A report on stdout that names the file at fault.
                let report = stdout(&out);
                if !report.contains(file) || !out.stderr.is_empty() {
                    wrong.push(format!("no report naming the file on stdout: {shown}"));
                }
                continue;
            }
            let told = serde_json::from_slice::<serde_json::Value>(&out.stderr).ok().is_some_and(|object| {
                let error = &object["error"];
                error["kind"] == kind && error["exit_code"] == code && error["input"] == file
            });
            if !out.stdout.is_empty() || !told {
                wrong.push(format!("not one `{kind}` error naming the file on stderr and nothing on stdout: {shown}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// `plan` (and `doctor`, `invoke`, `config push`) say a config's problems where they are,
/// as `config check` does: `FILE:LINE:COLUMN: path: message`.
#[test]
fn every_command_places_config_problems_at_line_and_column() {
    let dir = Scratch::new("placed");
    let twice = example().replacen("      max: 40\n", "      max: 40\n      max: 41\n", 1);
    let line = twice.lines().position(|l| l == "      max: 41").unwrap() + 1;
    let first = line - 1;
    let file = dir.file("twice.yaml", &twice);
    let expected =
        format!("{file}:{line}:7: pools[0].headroom.max: written twice in the same mapping (first on line {first})");
    let event = "events/spot-interruption-terminate.json";
    let mut commands = vec![
        vec!["config", "check", file.as_str()],
        vec!["plan", "--config", &file, "--state", "events/states/steady.json", "--event", event],
        vec!["events", "check", "--config", &file, event],
    ];
    if cfg!(feature = "aws") {
        commands.extend([
            vec!["doctor", "--config", file.as_str()],
            vec!["dead-letters", "--config", &file],
            vec!["invoke", "schedule", "--event", event, "--config", &file],
            vec!["config", "push", &file],
        ]);
    }
    for args in commands {
        let out = ballast(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert!(said.contains(&expected), "{args:?}: {expected}\nnot in\n{said}");
    }
}

#[test]
fn a_number_too_large_says_what_the_key_takes() {
    let dir = Scratch::new("huge");
    let file =
        dir.file("huge.yaml", &example().replacen("max_on_demand: 20", "max_on_demand: 99999999999999999999999", 1));
    let out = ballast(&["config", "check", &file]);
    assert_eq!(out.status.code(), Some(1));
    let said = stderr(&out);
    assert!(
        said.contains(
            ":35:7: pools[0].fallback.max_on_demand: the number `99999999999999999999999` is too large: \
                       expected a whole number from 0 to 4294967295"
        ),
        "{said}"
    );
    assert!(!said.contains("u128") && !said.contains("YAML value"), "{said}");
}

/// `simulate FILE` says a scenario's problems as a config's: line and column, the nearest
/// key, the unit, no Rust type.
#[test]
fn scenario_files_are_told_as_configs_are() {
    let dir = Scratch::new("scenario");
    let steady = std::fs::read_to_string(root().join("events/scenarios/steady.yaml")).unwrap();
    let cases = [
        (
            steady.replace("  replicas: 12", "  replicaz: 12"),
            "static_overprovisioning.replicaz: unknown key `replicaz`; did you mean `replicas`?",
        ),
        (
            steady.replace("max: 100, initial: 12", "max: -100, initial: 12"),
            "node_groups[0].max: the number `-100` is out of range: expected a whole number",
        ),
        (steady.replace("duration: 24h", "duration: 24"), "duration: `24` has no unit"),
    ];
    for (n, (text, expected)) in cases.iter().enumerate() {
        let file = dir.file(&format!("{n}.yaml"), text);
        let out = ballast(&["simulate", &file, "--seeds", "1"]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let said = stderr(&out);
        let placed = said.lines().any(|l| {
            l.trim_start().strip_prefix(&format!("{file}:")).is_some_and(|rest| {
                let mut parts = rest.splitn(3, ':');
                let numbers = parts.next().is_some_and(|l| l.parse::<usize>().is_ok())
                    && parts.next().is_some_and(|c| c.parse::<usize>().is_ok());
                numbers && parts.next().is_some_and(|m| m.trim_start().starts_with(expected))
            })
        });
        assert!(placed, "`{file}:LINE:COLUMN: {expected}` not in\n{said}");
        for rust in ["u32", "u64", "i64", "u128", "struct "] {
            assert!(!said.contains(rust), "{rust} in {said}");
        }
    }
}

/// Nothing answers at the endpoint: every failed check's fix is about reaching AWS (the
/// region, the endpoint, the network, a VPC endpoint), never a permission to grant.
fn doctor_fixes_the_network_when_aws_cannot_be_reached(findings: &str) {
    let findings: serde_json::Value = serde_json::from_str(findings).expect("doctor --json's findings");
    let failed: Vec<&serde_json::Value> = findings.as_array().unwrap().iter().filter(|f| f["ok"] == false).collect();
    assert!(failed.len() > 10, "{findings}");
    for f in failed {
        let fix = f["fix"].as_str().unwrap_or_default();
        assert!(
            fix.starts_with("AWS did not answer: check the region (eu-west-1) and any AWS_ENDPOINT_URL")
                && fix.contains("VPC endpoint"),
            "{f}"
        );
        for iam in ["allow ", "permission", "deploy the stack"] {
            assert!(!fix.contains(iam), "an IAM or deploy fix for a network problem: {f}");
        }
    }
}

/// A local invoke whose run fails: with --json stderr holds the error object alone (the
/// run's EMF metrics in it, not lines of their own; no "which config" line), worded for a
/// local run (no dead-letter queue, no invoker to retry), and the metrics say the config's
/// dry run.
#[test]
#[cfg_attr(not(feature = "aws"), ignore = "needs the `aws` feature")]
fn a_failed_local_invoke_is_one_error_object_with_its_metrics() {
    let args = ["invoke", "schedule", "--event", "events/scheduler-reconcile.json", "--config", "ballast.example.yaml"];
    let run = |json: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ballast"));
        command.args(args).current_dir(root()).envs(NO_AWS).env("BALLAST_CLUSTER_ACCESS", "none");
        if json {
            command.arg("--json");
        }
        command.output().expect("ballast runs")
    };
    let out = run(true);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "one line on stderr:\n{err}");
    let object: serde_json::Value = serde_json::from_str(&err).expect("a JSON object");
    let message = object["error"]["message"].as_str().unwrap();
    assert!(message.contains("cannot reach DynamoDB"), "{message}");
    assert!(message.contains("a retry may mend this: invoke again"), "{message}");
    for lambdas in ["dead-letter queue", "retry later"] {
        assert!(!message.contains(lambdas), "`{lambdas}` in a local run's error: {message}");
    }
    let metrics = object["error"]["metrics"].as_array().expect("the run's metrics");
    assert!(!metrics.is_empty(), "{object}");
    for m in metrics {
        assert!(m["_aws"]["CloudWatchMetrics"].is_array(), "EMF: {m}");
        if let Some(dry_run) = m.get("DryRun") {
            assert_eq!(dry_run, true, "ballast.example.yaml is in dry run: {m}");
        }
    }
    // Without --json a person is told which config ran, and the error in words.
    let out = run(false);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("config ballast.example.yaml: cluster prod-eks\nerror: failed"),
        "{}",
        stderr(&out)
    );
}

/// A call to AWS that fails says which service, which call and why, in words: never the
/// SDK's Debug output (`DispatchFailure(DispatchFailure { source: ConnectorError ...`).
#[test]
#[cfg_attr(not(feature = "aws"), ignore = "needs the `aws` feature")]
fn aws_failures_are_said_in_words() {
    let event = "events/scheduled-reconcile.json";
    let config = "ballast.example.yaml";
    let commands: [(&[&str], &[&str]); 5] = [
        (&["doctor", "--config", config, "--no-cluster"], &["DescribeTable: cannot reach DynamoDB at its endpoint"]),
        (&["dead-letters", "--config", config], &["GetQueueUrl: cannot reach SQS at its endpoint"]),
        (&["config", "pull", "--cluster", "prod-eks"], &["GetParameter: cannot reach SSM at its endpoint"]),
        (&["config", "push", config], &["GetParameter: cannot reach SSM at its endpoint"]),
        (&["invoke", "schedule", "--event", event, "--config", config], &["DescribeCluster: cannot reach EKS"]),
    ];
    for (args, expected) in commands {
        // doctor takes half a minute to give up on every check: once is enough.
        let modes: &[bool] = if args[0] == "doctor" { &[true] } else { &[false, true] };
        for &json in modes {
            let mut args = args.to_vec();
            if json {
                args.push("--json");
            }
            let out = ballast(&args);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
            // doctor's failed checks are its findings, on stdout; every other command's
            // failure is its error alone: with --json one object on stderr, no other line.
            let said = if args[0] == "doctor" {
                doctor_fixes_the_network_when_aws_cannot_be_reached(&stdout(&out));
                format!("{}{}", stdout(&out), stderr(&out))
            } else {
                assert_eq!(stdout(&out), "", "{args:?}: nothing on stdout on failure");
                if json {
                    let err = stderr(&out);
                    assert_eq!(err.lines().count(), 1, "{args:?}: one line on stderr:\n{err}");
                    let object: serde_json::Value = serde_json::from_str(&err).expect("a JSON object");
                    object["error"]["message"].as_str().expect("a message").to_string()
                } else {
                    stderr(&out)
                }
            };
            for debug in ["DispatchFailure(", "ConnectorError", "Os {", " { source", "kind: Io"] {
                assert!(!said.contains(debug), "{args:?}: `{debug}` in\n{said}");
            }
            for words in expected {
                assert!(said.contains(words), "{args:?}: `{words}` not in\n{said}");
            }
            assert!(said.contains("Connection refused"), "{args:?}: the cause is said: {said}");
        }
    }
}

#[test]
fn config_check_warns_of_decimal_memory_and_strict_fails_on_it() {
    let dir = Scratch::new("memory");
    let file = dir.file("decimal.yaml", &example().replacen("pod_memory: 2Gi", "pod_memory: 2G", 1));
    let out = ballast(&["config", "check", &file]);
    assert_eq!(out.status.code(), Some(0), "valid: Kubernetes reads it so: {}", stderr(&out));
    let warning = format!(
        "warning: {file}:52:7: pools[0].headroom.pod_memory: `2G` is 2000000000 bytes: its suffix is a decimal one"
    );
    assert!(stderr(&out).contains(&warning), "{warning}\nnot in\n{}", stderr(&out));
    assert!(stderr(&out).contains("write `2Gi` (2147483648 bytes)"), "{}", stderr(&out));
    let strict = ballast(&["config", "check", "--strict", "--json", &file]);
    assert_eq!(strict.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&strict.stdout).unwrap();
    let warning = &report["warnings"][0];
    assert!(warning["message"].as_str().unwrap().contains("`2Gi`"), "{report}");
    assert_eq!((warning["line"].as_u64(), warning["column"].as_u64()), (Some(52), Some(7)), "{report}");
}

#[test]
fn config_check_accepts_x_keys_holding_anchors() {
    let dir = Scratch::new("anchors");
    let text = example().replacen(
        "cluster: prod-eks",
        "x-fallback: &fallback\n  max_on_demand: 7\n  failback_after: 45m\ncluster: prod-eks",
        1,
    );
    let text = text.replacen("    fallback:\n", "    fallback:\n      <<: *fallback\n", 1);
    let file = dir.file("anchors.yaml", &text);
    let out = ballast(&["config", "check", "--print", &file]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(!stdout(&out).contains("x-fallback"), "read, not kept: {}", stdout(&out));
    // Only `x-`: another unknown top-level key is still refused, with the nearest.
    let file = dir.file("typo.yaml", &example().replacen("cluster:", "clusterr:", 1));
    let out = ballast(&["config", "check", &file]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("did you mean `cluster`?"), "{}", stderr(&out));
}

#[test]
fn config_check_says_the_unit_and_kind_a_key_takes() {
    let dir = Scratch::new("kinds");
    let history = example().replacen(
        "    headroom:\n      percent: 10",
        "    headroom:\n      target: { wait_p95: 10s, history: 14 }\n      percent: 10",
        1,
    );
    let file = dir.file("history.yaml", &history);
    let said = stderr(&ballast(&["config", "check", &file]));
    assert!(
        said.contains("pools[0].headroom.target.history: `14` has no unit: history is counted in days; write `14d`"),
        "{said}"
    );
    let file = dir.file("asg.yaml", &example().replacen("on_demand_asg: eks-general-on-demand", "on_demand_asg: 5", 1));
    let said = stderr(&ballast(&["config", "check", &file]));
    assert!(said.contains("pools[0].on_demand_asg: expected an ASG's name"), "{said}");
    assert!(said.contains("`\"5\"`"), "{said}");
}

#[test]
fn the_example_line_numbers_these_tests_use_hold() {
    // The tests above name lines of ballast.example.yaml: fail here first if it moves.
    let example = example();
    let lines: Vec<&str> = example.lines().collect();
    assert!(lines[34].trim_start().starts_with("max_on_demand: 20"), "{}", lines[34]);
    assert!(lines[51].trim_start().starts_with("pod_memory: 2Gi"), "{}", lines[51]);
}

/// A check's findings go to stderr, as a compiler's do; stdout keeps what was asked for:
/// `events check`'s events read, and its count.
#[test]
fn events_check_says_an_invalid_event_on_stderr() {
    let (good, bad) = ("events/spot-interruption-terminate.json", "events/invalid/bad-time.json");
    let out = ballast(&["events", "check", good, bad]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).starts_with(&format!("invalid {bad}  ")), "{}", stderr(&out));
    assert!(stdout(&out).starts_with(&format!("ok      {good}  ")), "{}", stdout(&out));
    assert!(!stdout(&out).contains("invalid events/"), "{}", stdout(&out));
    assert!(stdout(&out).contains("2 file(s), 1 invalid"), "{}", stdout(&out));
}

/// serde's wording (`expected u32`, `unknown variant`) never reaches a state or event
/// file's reader: what to write, and where (a state file: its line and column).
#[test]
fn state_and_event_problems_say_what_to_write_never_a_rust_type() {
    let dir = Scratch::new("serde-words");
    let steady = std::fs::read_to_string(root().join("events/states/steady.json")).unwrap();
    // The first ASG's desired size, written -1, on one line as the review had it.
    let mut state: serde_json::Value = serde_json::from_str(&steady).unwrap();
    state["asgs"][0]["desired"] = serde_json::json!(-1);
    let file = dir.file("state.json", &serde_json::to_string(&state).unwrap());
    let out = ballast(&["plan", "--config", "ballast.example.yaml", "--state", &file, "--now", "2026-11-20T09:00:00Z"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let said = stderr(&out);
    // Where serde_json stops reading: just past the number.
    let column = serde_json::to_string(&state).unwrap().find("\"desired\":-1").unwrap() + "\"desired\":-1".len();
    assert!(
        said.contains(&format!(
            "{file}:1:{column}: asgs[0].desired: the number `-1` is out of range: expected a whole number, 0 or more"
        )),
        "{said}"
    );
    let events = [
        ("events/invalid/demand-negative-cpu.json", "the number `-5` is out of range: expected a whole number"),
        ("events/invalid/wrong-field-type.json", "expected text"),
        ("events/invalid/unknown-instance-action.json", "`explode` is not one of `terminate`, `stop`, `hibernate`"),
    ];
    for (event, words) in events {
        let out = ballast(&["events", "check", event]);
        assert_eq!(out.status.code(), Some(1), "{event}");
        assert!(stderr(&out).contains(words), "{event}: `{words}` not in {}", stderr(&out));
        said_in_words(&stderr(&out));
    }
    said_in_words(&said);
}

fn said_in_words(text: &str) {
    for rust in ["u32", "u64", "expected a string", "invalid type", "invalid value", "unknown variant", "unknown field"]
    {
        assert!(!text.contains(rust), "`{rust}` in:\n{text}");
    }
}
