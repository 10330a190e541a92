//! `ballast config check`, as users run it: problems and warnings on stderr where they
//! are written (`FILE:LINE:COLUMN: path: message`), stdout for what was asked (the
//! summary, `--print`'s config, `--json`'s report), exit 1 for what will fail later.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ballast(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ballast"));
    command.args(args).current_dir(root()).env_remove("BALLAST_CONFIG_FILE").output().expect("ballast runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ballast-config-check-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn config_check_accepts_the_example_and_lists_every_problem() {
    let ok = ballast(&["config", "check", "ballast.example.yaml"]);
    assert!(ok.status.success());
    assert!(stdout(&ok).contains("valid: cluster prod-eks, 2 pool(s) (general, batch), dry_run"));

    let bad = ballast(&["config", "check", "functions/cli/tests/data/broken.yaml"]);
    assert_eq!(bad.status.code(), Some(1));
    // The problems are a compiler's: on stderr, nothing on stdout.
    assert!(bad.stdout.is_empty(), "{}", stdout(&bad));
    let text = stderr(&bad);
    for expected in [
        "pools[0].on_demand_asg: `eks-general-od` is also listed in spot_asgs",
        "pools[0].headroom.min: min (10) is greater than max (2)",
        "pools[0].headroom.priority_class.value: -20 is below -10: cluster-autoscaler ignores",
        "pools[0].headroom.schedules[0].time_zone: `Europe/Atlantis` is not an IANA time zone",
        "pools[1].fallback.unavailable_ttl: `forever` is not a duration",
        "pools[1].name: duplicate pool name `general` (also pools[0])",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in:\n{text}");
    }
    assert!(text.contains("6 problem(s)"), "{text}");
}

#[test]
fn config_check_holds_the_config_to_the_functions_rbac_and_timeout() {
    let ok = ballast(&[
        "config",
        "check",
        "ballast.example.yaml",
        "--rbac",
        "infra/k8s/functions-rbac.yaml",
        "--function-timeout",
        "300",
    ]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(stdout(&ok).contains("covered by the RBAC"), "{}", stdout(&ok));
    assert!(!stderr(&ok).contains("warning"), "{}", stderr(&ok));

    let dir = std::env::temp_dir().join(format!("ballast-cli-rbac-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let example = std::fs::read_to_string(root().join("ballast.example.yaml")).unwrap();
    let elsewhere = dir.join("elsewhere.yaml");
    std::fs::write(&elsewhere, example.replacen("namespace: ballast-headroom", "namespace: kube-system", 1)).unwrap();
    let out = ballast(&["config", "check", elsewhere.to_str().unwrap(), "--rbac", "infra/k8s/functions-rbac.yaml"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("pools[0].headroom.namespace: `kube-system` is not covered"), "{}", stderr(&out));
    let renamed = dir.join("renamed.yaml");
    std::fs::write(&renamed, example.replacen("- name: general", "- name: web", 1)).unwrap();
    let out = ballast(&["config", "check", renamed.to_str().unwrap(), "--rbac", "infra/k8s/functions-rbac.yaml"]);
    assert!(
        stderr(&out).contains(
            "may get and patch Deployments ballast-headroom-web, ballast-headroom-web-2, ballast-headroom-web-3 there"
        ),
        "{}",
        stderr(&out)
    );
    // RBAC that names each pool's first Deployment only: enough for `shapes: fixed`, not
    // for `auto` (the default), which may run three.
    let rbac = std::fs::read_to_string(root().join("infra/k8s/functions-rbac.yaml")).unwrap();
    let first_only = dir.join("first-only-rbac.yaml");
    let names = "      - ballast-headroom-general\n      - ballast-headroom-general-2\n      - ballast-headroom-general-3\n      - ballast-headroom-batch\n      - ballast-headroom-batch-2\n      - ballast-headroom-batch-3\n";
    assert!(rbac.contains(names), "the shipped RBAC names the example's slots");
    std::fs::write(
        &first_only,
        rbac.replace(names, "      - ballast-headroom-general\n      - ballast-headroom-batch\n"),
    )
    .unwrap();
    let out = ballast(&["config", "check", "ballast.example.yaml", "--rbac", first_only.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "pools[0].headroom.shapes: the pool may run 3 pause-pod Deployments, and nothing bound to group \
             ballast:functions may get and patch ballast-headroom-general-2, ballast-headroom-general-3 in \
             `ballast-headroom`"
        ),
        "{}",
        stderr(&out)
    );
    let fixed = dir.join("fixed.yaml");
    std::fs::write(
        &fixed,
        example
            .replace("      namespace: ballast-headroom\n", "      namespace: ballast-headroom\n      shapes: fixed\n")
            .replace("      max: 10\n", "      max: 10\n      shapes: fixed\n"),
    )
    .unwrap();
    let out = ballast(&["config", "check", fixed.to_str().unwrap(), "--rbac", first_only.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let unpinned = dir.join("unpinned.yaml");
    let image = image_line(&example);
    std::fs::write(&unpinned, example.replace(&image, "      image: registry.k8s.io/pause:3.10")).unwrap();
    let out = ballast(&["config", "check", unpinned.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("pools[0].headroom.image: `registry.k8s.io/pause:3.10` is not pinned"),
        "{}",
        stderr(&out)
    );

    // Every warning is placed where it is written: the longest drain_timeout here.
    let drain = example.lines().position(|l| l.trim_start().starts_with("drain_timeout: 90s")).unwrap() + 1;
    let short = ballast(&["config", "check", "ballast.example.yaml", "--function-timeout", "120"]);
    assert!(short.status.success());
    let expected = format!(
        "warning: ballast.example.yaml:{drain}:7: pools[0].interruption.drain_timeout: the functions' timeout \
         (--function-timeout 120) is shorter than this drain_timeout plus 120 s (210s)"
    );
    assert!(stderr(&short).contains(&expected), "{expected}\nnot in\n{}", stderr(&short));
    let long = dir.join("long-drain.yaml");
    std::fs::write(&long, example.replacen("drain_timeout: 90s", "drain_timeout: 14m", 1)).unwrap();
    let out = ballast(&["config", "check", long.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let expected = format!(
        "warning: {}:{drain}:7: pools[0].interruption.drain_timeout: 14m leaves a run less than its 120 s",
        long.display()
    );
    assert!(stderr(&out).contains(&expected), "{expected}\nnot in\n{}", stderr(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The example's `image:` line.
fn image_line(example: &str) -> String {
    example.lines().find(|l| l.trim_start().starts_with("image:")).expect("an image line").to_string()
}

/// tests/data/ml-pools.yaml with its gpu pool's `headroom.shapes` written as `shapes`.
fn ml_pools(dir: &Path, name: &str, shapes: &str) -> String {
    let fixed = std::fs::read_to_string(root().join("functions/cli/tests/data/ml-pools.yaml")).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, fixed.replace("      shapes: fixed\n", &format!("      shapes: {shapes}\n"))).unwrap();
    path.display().to_string()
}

const PODS: &str = "functions/cli/tests/data/pods.json";
const NODES: &str = "functions/cli/tests/data/nodes.json";

/// Each warning line's text after its `FILE:LINE:COLUMN: `, which these tests check apart.
fn warnings(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("warning: "))
        .map(|l| l.splitn(4, ':').last().unwrap().trim_start())
        .collect()
}

#[test]
fn config_check_warns_of_pods_that_fit_in_no_pause_pod_or_no_node() {
    let dir = scratch("pods");
    let check = |config: &str, nodes: bool| {
        let mut args = vec!["config", "check", config, "--pods", PODS];
        if nodes {
            args.extend(["--nodes", NODES]);
        }
        let out = ballast(&args);
        assert_eq!(out.status.code(), Some(0), "warnings never fail a check\n{}", stderr(&out));
        stderr(&out)
    };
    // The web pod has no node selector: it would start in the first pool its taints
    // admit. Its runtime overhead counts (900m + 250m).
    let general = "pools[0].headroom.shapes: 1 of the 1 workload pod(s) of pool general in functions/cli/tests/data/pods.json \
                   fit in no pause pod it runs (shapes: fixed, pod_cpu/pod_memory 1 CPU / 2Gi), e.g. \
                   shop/web-6b7f9d5c8-m2l9d (1150m CPU / 1144Mi): room held for them starts none; list a shape they fit \
                   in under headroom.shapes, or use shapes: auto";
    let too_large = "pools[1]: 1 of the 4 workload pod(s) of pool gpu in functions/cli/tests/data/pods.json are larger than \
                     every node of the pool in functions/cli/tests/data/nodes.json (the largest allocatable: 7910m CPU / \
                     29Gi + 1 nvidia.com/gpu, node ip-10-0-1-10.eu-west-1.compute.internal), e.g. ml/train-large-0 (16 CPU \
                     / 64Gi): no headroom and no scale-up starts them";

    // `fixed`: the job, the inference pod (2 CPU with its sidecar) and the data
    // preparation (3 CPU / 16Gi in its init container) fit in no 1 CPU / 2Gi pause pod.
    // The DaemonSet, mirror, pause and finished pods, all larger than the node, are not
    // demand: had any counted, a count would differ.
    let fixed_file = ml_pools(&dir, "fixed.yaml", "fixed");
    let fixed = check(&fixed_file, true);
    let told = warnings(&fixed);
    for expected in [
        general,
        too_large,
        "pools[1].headroom.shapes: 3 of the 4 workload pod(s) of pool gpu in functions/cli/tests/data/pods.json fit in no \
         pause pod it runs (shapes: fixed, pod_cpu/pod_memory 1 CPU / 2Gi), e.g. ml/train-7f9c2-x4k2p (4 CPU / 14Gi + 1 \
         nvidia.com/gpu): room held for them starts none; list a shape they fit in under headroom.shapes (all fit in 4 CPU \
         / 16Gi + 1 nvidia.com/gpu), or use shapes: auto",
    ] {
        assert!(told.iter().any(|t| t.starts_with(expected)), "{expected:?} not in\n{fixed}");
    }
    assert_eq!(told.len(), 3, "{fixed}");
    // Each where it is written: the pool's item, the pool's `shapes` key.
    assert!(fixed.contains(&format!("warning: {fixed_file}:11:5: pools[1]: 1 of the 4")), "{fixed}");
    assert!(fixed.contains(&format!("warning: {fixed_file}:10:16: pools[0].headroom.shapes: ")), "{fixed}");

    // Without the nodes, the 16-CPU pod is one more that fits in no pause pod.
    let no_nodes = check(&ml_pools(&dir, "fixed.yaml", "fixed"), false);
    let all_four =
        "4 of the 4 workload pod(s) of pool gpu in functions/cli/tests/data/pods.json fit in no pause pod it \
                    runs (shapes: fixed, pod_cpu/pod_memory 1 CPU / 2Gi), e.g. ml/train-large-0 (16 CPU / 64Gi)";
    assert!(no_nodes.contains(all_four), "{no_nodes}");
    assert_eq!(warnings(&no_nodes).len(), 2, "{no_nodes}");

    // Listed shapes: the inference pod fits its own; the GPU job fits none (the training
    // shape forgot the GPU), nor does the preparation's 16Gi init container.
    let listed = check(
        &ml_pools(
            &dir,
            "listed.yaml",
            "[{name: training, cpu: 4, memory: 14Gi}, {name: inference, cpu: 2, memory: 8Gi}]",
        ),
        true,
    );
    let told = warnings(&listed);
    for expected in [
        general,
        too_large,
        "pools[1].headroom.shapes: 2 of the 4 workload pod(s) of pool gpu in functions/cli/tests/data/pods.json fit in no \
         pause pod it runs (the shapes listed: training 4 CPU / 14Gi, inference 2 CPU / 8Gi), e.g. \
         ml/train-7f9c2-x4k2p (4 CPU / 14Gi + 1 nvidia.com/gpu): room held for them starts none; list a shape they fit in \
         under headroom.shapes (all fit in 4 CPU / 16Gi + 1 nvidia.com/gpu), or use shapes: auto",
    ] {
        assert!(told.iter().any(|t| t.starts_with(expected)), "{expected:?} not in\n{listed}");
    }
    assert_eq!(told.len(), 3, "{listed}");

    // `auto` learns the shapes: only the pod no node holds is told of.
    let auto = check(&ml_pools(&dir, "auto.yaml", "auto"), true);
    let told = warnings(&auto);
    assert!(told.iter().any(|t| t.starts_with(too_large)) && told.iter().any(|t| t.starts_with(general)), "{auto}");
    assert_eq!(told.len(), 2, "{auto}");

    let out =
        ballast(&["config", "check", "--json", &ml_pools(&dir, "auto.yaml", "auto"), "--pods", PODS, "--nodes", NODES]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["valid"], true, "{v}");
    // Warnings are placed as problems are: input, path, line, column, message.
    let listed_warnings = v["warnings"].as_array().unwrap();
    assert_eq!(listed_warnings.len(), 2, "{v}");
    let gpu = &listed_warnings[1];
    assert_eq!(
        (gpu["path"].as_str(), gpu["line"].as_u64(), gpu["column"].as_u64()),
        (Some("pools[1]"), Some(11), Some(5)),
        "{v}"
    );
    assert!(gpu["input"].as_str().unwrap().ends_with("auto.yaml"), "{v}");
    assert!(gpu["message"].as_str().unwrap().starts_with("1 of the 4 workload pod(s)"), "{v}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A pause pod that fits in no node of its pool would stay Pending and hold no room: a
/// problem (exit 1, not a warning `--strict` was needed for), placed at the key too large.
/// A pool with no node in the file is not held to it, and a note says so.
#[test]
fn config_check_refuses_a_pause_pod_that_fits_no_node_of_its_pool() {
    let dir = scratch("pause-too-big");
    let listed =
        ml_pools(&dir, "listed.yaml", "[{name: training, cpu: 4, memory: 14Gi}, {name: huge, cpu: 16, memory: 64Gi}]");
    let out = ballast(&["config", "check", &listed, "--nodes", NODES]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
    let expected = format!(
        "  {listed}:19:56: pools[1].headroom.shapes[1]: pause pods of 16 CPU / 64Gi (shape huge) fit in no node of pool \
         gpu in {NODES} (the largest allocatable: 7910m CPU / 29Gi + 1 nvidia.com/gpu, node \
         ip-10-0-1-10.eu-west-1.compute.internal): they would stay Pending and hold no room"
    );
    assert!(stderr(&out).contains(&expected), "{expected}\nnot in\n{}", stderr(&out));

    // `auto` starts with pause pods of `pod_cpu`/`pod_memory`.
    let big = ml_pools(&dir, "auto-big.yaml", "auto");
    let text = std::fs::read_to_string(&big).unwrap().replace("      pod_cpu: \"1\"\n", "      pod_cpu: \"16\"\n");
    std::fs::write(&big, text).unwrap();
    let out = ballast(&["config", "check", &big, "--nodes", NODES]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let expected = format!(
        "  {big}:17:7: pools[1].headroom.pod_cpu: pause pods of 16 CPU / 2Gi (pod_cpu/pod_memory, the shape of `auto` \
         until pods are seen) fit in no node of pool gpu"
    );
    assert!(stderr(&out).contains(&expected), "{expected}\nnot in\n{}", stderr(&out));

    // Without the nodes, held to the largest EC2 instance: more than it has is refused.
    let example = std::fs::read_to_string(root().join("ballast.example.yaml")).unwrap();
    let cpu_line = example.lines().position(|l| l.trim_start().starts_with("pod_cpu:")).unwrap() + 1;
    let huge = dir.join("huge.yaml");
    std::fs::write(&huge, example.replacen("pod_cpu: \"1\"", "pod_cpu: \"100000\"", 1)).unwrap();
    let out = ballast(&["config", "check", huge.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let expected = format!(
        "{}:{cpu_line}:7: pools[0].headroom.pod_cpu: `100000` is more CPU than any EC2 instance has",
        huge.display()
    );
    assert!(stderr(&out).contains(&expected), "{expected}\nnot in\n{}", stderr(&out));

    // The example's batch pool has no node in the file: not judged, and told so.
    let out = ballast(&["config", "check", "ballast.example.yaml", "--nodes", NODES]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("note: pool batch has no node in {NODES} (none carries its node_selector)")),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn config_check_names_where_a_pods_or_nodes_file_is_wrong() {
    let dir = scratch("pods-wrong");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let bad_cpu = write(
        "bad-cpu.json",
        r#"{"kind": "PodList", "items": [{"metadata": {"name": "p", "namespace": "ml"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}}]}"#,
    );
    let bad_field = write("bad-field.json", r#"{"kind": "NodeList", "items": [{"status": {"allocatable": []}}]}"#);
    let truncated = write("truncated.json", r#"{"kind": "PodList", "items": ["#);
    // The example's pools are general and batch: its GPU node is in neither.
    let nodes: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root().join(NODES)).unwrap()).unwrap();
    let gpu_only = serde_json::json!({"kind": "NodeList", "items": [nodes["items"][0]]}).to_string();
    let cases = [
        (
            vec!["--pods", bad_cpu.as_str()],
            format!(
                "error: cannot read {bad_cpu} as kubectl's Pod list: items[0].spec.containers[0].resources.requests.cpu = \
                 \"lots\": `lots` is not a Kubernetes quantity"
            ),
        ),
        (
            vec!["--nodes", bad_field.as_str()],
            format!(
                "error: cannot read {bad_field} as kubectl's Node list: items[0].status.allocatable: expected an object \
                 (`{{...}}`), found an array"
            ),
        ),
        (vec!["--pods", truncated.as_str()], format!("error: cannot read {truncated} as kubectl's Pod list: not JSON")),
        (
            vec!["--nodes", PODS],
            String::new(), // a List of pods holds no node: nothing to hold the pools to
        ),
        (
            vec!["--nodes", "ballast.example.yaml"],
            "error: cannot read ballast.example.yaml as kubectl's Node list: not JSON".to_string(),
        ),
        (vec!["--pods", "no/such/pods.json"], "error: cannot read no/such/pods.json".to_string()),
    ];
    // Files of another cluster are told of, not passed in silence.
    let elsewhere = write(
        "elsewhere.json",
        r#"{"kind": "PodList", "items": [{"metadata": {"name": "p", "namespace": "ml"},
            "spec": {"nodeSelector": {"ballast.io/pool": "tpu"}, "containers": [{"resources": {"requests": {"cpu": "1"}}}]}}]}"#,
    );
    let out = ballast(&["config", "check", "ballast.example.yaml", "--pods", &elsewhere, "--nodes", NODES]);
    assert_eq!(out.status.code(), Some(0));
    let expected = format!(
        "warning: {elsewhere}: none of its 1 workload pod(s) belongs to a pool of ballast.example.yaml (by its node's \
         labels, or its node selector, required node affinity and tolerations): is it this cluster's?"
    );
    assert!(stderr(&out).contains(&expected), "{}", stderr(&out));
    let out = ballast(&["config", "check", "ballast.example.yaml", "--nodes", &write("gpu-only.json", &gpu_only)]);
    assert!(
        stderr(&out).contains("gpu-only.json: none of its 1 node(s) carries the node_selector of a pool of"),
        "{}",
        stderr(&out)
    );

    for (args, expected) in cases {
        let mut all = vec!["config", "check", "functions/cli/tests/data/ml-pools.yaml"];
        all.extend(&args);
        let out = ballast(&all);
        let said = stderr(&out);
        if expected.is_empty() {
            assert_eq!(out.status.code(), Some(0), "{args:?}: {said}");
        } else if expected.starts_with("error: cannot read no/such/") {
            // Unreadable: the check cannot run (exit 2).
            assert_eq!(out.status.code(), Some(2), "{args:?}: {said}");
            assert!(said.starts_with(&expected), "{args:?}: {expected:?} not at the start of {said}");
        } else {
            // Read but not valid: a problem of that file, reported with the config's (exit 1).
            assert_eq!(out.status.code(), Some(1), "{args:?}: {said}");
            let problem = format!("  {}", expected.trim_start_matches("error: "));
            assert!(stderr(&out).contains(&problem), "{args:?}: {problem:?} not in {}", stderr(&out));
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn config_check_refuses_huge_and_deep_files_with_a_precise_error() {
    let dir = scratch("bounded");
    let huge = dir.join("huge.yaml");
    std::fs::write(&huge, "# padding\n".repeat(1_500_000)).unwrap();
    let deep = dir.join("deep.yaml");
    std::fs::write(&deep, "[".repeat(100_000)).unwrap();
    let out = ballast(&["config", "check", huge.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("(file): more bytes than a config may have (1048576 bytes, 1 MiB)"),
        "{}",
        stderr(&out)
    );
    let out = ballast(&["config", "check", deep.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("(file): line 1: lists and mappings nested 33 deep, more than a config may have (32)"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The three mistakes people make most, as `config check` reports them: where (file, line,
/// column), which key, and what to write.
#[test]
fn config_check_points_at_each_mistake_and_says_what_to_write() {
    let dir = scratch("mistakes");
    let file = dir.join("ballast.yaml");
    std::fs::write(
        &file,
        "cluster: prod-eks\nregion: eu-wst-1\nstate_table: ballast-state\npools:\n  - name: general\n    spot_asg: [eks-spot]\n    fallback:\n      spot_launch_grace: 180\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let out = ballast(&["config", "check", path]);
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    for expected in [
        format!("{path}:2:1: region: `eu-wst-1` is not an AWS region; did you mean `eu-west-1`?"),
        format!("{path}:6:5: pools[0].spot_asg: unknown key; did you mean `spot_asgs`?"),
        format!("{path}:8:7: pools[0].fallback.spot_launch_grace: `180` has no unit: write `180s` for seconds"),
    ] {
        assert!(text.contains(&expected), "missing `{expected}` in:\n{text}");
    }
    for rust in ["u32", "invalid type", "expected a string"] {
        assert!(!text.contains(rust), "`{rust}` in:\n{text}");
    }
    let json: serde_json::Value =
        serde_json::from_slice(&ballast(&["config", "check", "--json", path]).stdout).unwrap();
    let region = json["errors"].as_array().unwrap().iter().find(|e| e["path"] == "region").unwrap();
    assert_eq!((region["line"].as_u64(), region["column"].as_u64()), (Some(2), Some(1)), "{json}");
}

/// `--strict` turns warnings into exit 1 (a CI gate); without it they leave exit 0.
#[test]
fn config_check_strict_fails_on_warnings() {
    let warned = ["config", "check", "ballast.example.yaml", "--function-timeout", "120"];
    let out = ballast(&warned);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("warning: "));
    let strict = ballast(&[&warned[..], &["--strict"]].concat());
    assert_eq!(strict.status.code(), Some(1), "{}", stderr(&strict));
    assert!(stderr(&strict).contains("warning(s), refused by --strict"), "{}", stderr(&strict));
    // A refused check says nothing on stdout: not "valid", not the config with --print.
    assert_eq!(stdout(&strict), "", "{}", stderr(&strict));
    assert!(stderr(&strict).contains("ballast.example.yaml: valid but for its warnings"), "{}", stderr(&strict));
    let printed = ballast(&[&warned[..], &["--strict", "--print"]].concat());
    assert_eq!((printed.status.code(), stdout(&printed)), (Some(1), String::new()), "{}", stderr(&printed));
    let clean = ballast(&["config", "check", "--strict", "ballast.example.yaml"]);
    assert_eq!(clean.status.code(), Some(0), "{}", stderr(&clean));
    // `valid` says what the exit code says: a script reading it fails where CI does.
    let strict_json = ballast(&[&warned[..], &["--strict", "--json"]].concat());
    assert_eq!(strict_json.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&strict_json.stdout).unwrap();
    assert_eq!((json["valid"].as_bool(), json["strict"].as_bool()), (Some(false), Some(true)), "{json}");
    assert_eq!(json["errors"], serde_json::json!([]), "{json}");
    let warned_json: serde_json::Value =
        serde_json::from_slice(&ballast(&[&warned[..], &["--json"]].concat()).stdout).unwrap();
    assert_eq!(warned_json["valid"].as_bool(), Some(true), "{warned_json}");
    let warning = &warned_json["warnings"][0];
    assert_eq!(warning["path"], "pools[0].interruption.drain_timeout", "{warned_json}");
    assert!(warning["line"].is_u64() && warning["column"].is_u64() && warning["input"] == "ballast.example.yaml");
    // Without --nodes, it says what pause pods are held to.
    assert!(
        stderr(&clean).contains("note: pause pods are held to the largest EC2 instance (u7inh-32tb.480xlarge)"),
        "{}",
        stderr(&clean)
    );
    // Stdout has the summary alone: no warning, no note.
    assert!(!stdout(&out).contains("warning") && !stdout(&clean).contains("note:"), "{}", stdout(&out));
}

/// A headroom override event must name a pool of the config.
#[test]
fn config_check_refuses_an_override_naming_no_pool() {
    let dir = scratch("overrides");
    let good = "events/headroom-override.json";
    let typo = dir.join("genral.json");
    std::fs::write(&typo, std::fs::read_to_string(root().join(good)).unwrap().replace("\"general\"", "\"genral\""))
        .unwrap();
    let ok = ballast(&["config", "check", "ballast.example.yaml", "--event", good]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let out = ballast(&["config", "check", "ballast.example.yaml", "--event", good, "--event", typo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(
            "detail.pool: `genral` names no pool of the config; did you mean `general`? (its pools: general, batch)"
        ),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("1 problem(s) read against ") && !stderr(&out).contains("RBAC"), "{}", stderr(&out));
    let missing = ballast(&["config", "check", "ballast.example.yaml", "--event", "no/such/event.json"]);
    assert_eq!(missing.status.code(), Some(2));
}
