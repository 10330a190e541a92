//! The deploy rehearsed end to end: every ```sh block of
//! docs/src/getting-started.md run as written, in order, with bash, against moto (the
//! patched scripts/moto-sam-server, through AWS_ENDPOINT_URL) and a real kube-apiserver,
//! with the user's own tools on PATH (`ballast` with its `aws` feature, the `aws` CLI, the
//! SAM CLI, kubectl). Between the blocks the test reads what a user would look at: the
//! stack's outputs, the functions' environment, the config parameter, the cluster's
//! objects; then runs the three functions under the Lambda emulator with the environment
//! the stack gave them, and sees the plans follow the pushed config (dry run, live, kill
//! switch) without a restart. The CDK output is deployed the same way into a second moto
//! (scripts/rehearse-deploy) and compared. A static check of the deploy command (the
//! values SAM CLI would really pass, the capabilities against the template's named IAM
//! resources, the 4,096-byte parameter limit) runs on the doc and on variants of it with
//! the old README's failures, which it must catch.
//!
//! Under CI=true a missing part fails the test; elsewhere the test skips.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ballast_core::config::{AsgSelector, Config};
use ballast_core::function::Function;
use ballast_tests::emulator::Emulator;
use ballast_tests::kube::{kubectl, ControlPlane, Parts, ADMIN_TOKEN, FUNCTIONS_GROUP, FUNCTIONS_TOKEN};
use ballast_tests::moto::{required, Moto};
use ballast_tests::{cache_dir, repo_root};
use serde_json::{json, Value};

const DOC: &str = "docs/src/getting-started.md";
/// CloudFormation's limit on one parameter value.
const PARAMETER_VALUE_MAX: usize = 4096;
const FUNCTIONS: [&str; 3] = Function::NAMES;
/// The forwarder's image as the user built and pushed it, by digest.
const FORWARDER_IMAGE: &str =
    "123456789012.dkr.ecr.eu-west-1.amazonaws.com/ballast-forwarder@sha256:2222222222222222222222222222222222222222222222222222222222222222";

/// A deploy command that fails in ways the check must catch: the config as a parameter
/// (the shell truncates it), `--guided` (whose capability prompt defaults to CAPABILITY_IAM).
const OLD_README_DEPLOY: &str = "sam deploy --guided \\\n  --parameter-overrides ClusterName=prod-eks \
                                 \"BallastConfig=$(cat ballast.yaml)\" StateTableName=ballast-state\n";

/// The fenced blocks of `language` in a Markdown text, in order.
fn fenced_blocks(markdown: &str, language: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<(bool, String)> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        match &mut current {
            None if trimmed.starts_with("```") => current = Some((trimmed[3..].trim() == language, String::new())),
            Some((wanted, text)) if trimmed.starts_with("```") => {
                if *wanted {
                    blocks.push(std::mem::take(text));
                }
                current = None;
            }
            Some((_, text)) => {
                text.push_str(line);
                text.push('\n');
            }
            None => {}
        }
    }
    blocks
}

fn block_with<'a>(blocks: &'a [String], needle: &str) -> &'a str {
    blocks.iter().find(|b| b.contains(needle)).unwrap_or_else(|| panic!("no sh block with `{needle}` in {DOC}"))
}

/// A part the rehearsal needs: present, or the test fails (CI) or skips.
fn need(path: Option<PathBuf>, what: &str) -> Option<PathBuf> {
    match path.filter(|p| p.exists()) {
        Some(p) => Some(p),
        None => {
            assert!(!required(), "CI=true but {what} is missing: run scripts/test");
            eprintln!("skipped: {what} is missing (scripts/test installs it)");
            None
        }
    }
}

/// `ballast` with the `aws` feature: the test command (`cargo test --workspace
/// --all-features`) builds it next to this test's binary for ballast-cli's own tests.
/// Not built here: a build with other features would replace the binary other tests run.
fn ballast_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().expect("test binary");
    let candidate = exe.parent().and_then(Path::parent).map(|d| d.join("ballast"));
    let found = need(candidate, "target/debug/ballast (cargo build --workspace --all-features --bin ballast)")?;
    let help = Command::new(&found).args(["config", "push", "--help"]).output().expect("ballast runs");
    if !help.status.success() {
        assert!(
            !required(),
            "CI=true but {} lacks the aws feature (`config push`): build it with --all-features",
            found.display()
        );
        eprintln!("skipped: {} lacks the aws feature", found.display());
        return None;
    }
    Some(found)
}

/// Kills a process group when dropped (scripts/rehearse-deploy and the node it starts).
struct Group(Child);

impl Drop for Group {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if let Ok(group) = i32::try_from(self.0.id()) {
            if group > 1 {
                // SAFETY: kill(2) with a negative pid signals that process group only.
                unsafe {
                    libc::kill(-group, libc::SIGKILL);
                }
            }
        }
        let _ = self.0.wait();
    }
}

/// Removes the work directory when the test ends (BALLAST_KEEP_REHEARSAL keeps it).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("BALLAST_KEEP_REHEARSAL").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else {
            eprintln!("kept {}", self.0.display());
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        // node_modules and cdk.out are the CDK's, deployed apart by scripts/rehearse-deploy.
        if name == "node_modules" || name.to_string_lossy().starts_with("cdk.out") {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &to.join(&name));
        } else {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

/// The user's shell: the doc's blocks run one after another, each in a fresh bash that
/// starts from the variables the blocks before it exported (as in one terminal).
struct Shell {
    work: PathBuf,
    bin: PathBuf,
    env: Vec<(String, String)>,
    exported: PathBuf,
    timings: Vec<(String, Duration)>,
}

impl Shell {
    fn script(&self, block: &str, path_first: Option<&Path>, save: bool) -> String {
        let mut s = String::new();
        if self.exported.exists() {
            s.push_str(&format!("source '{}'\n", self.exported.display()));
        }
        if let Some(dir) = path_first {
            s.push_str(&format!("export PATH='{}':\"$PATH\"\n", dir.display()));
        }
        // Stop at the first failing command, as a user would: what follows relies on it.
        s.push_str(&format!("cd '{}'\nset -eo pipefail\n", self.work.display()));
        s.push_str(block);
        if save {
            s.push_str(&format!("\nexport -p > '{}'\n", self.exported.display()));
        }
        s
    }

    fn bash(&self, script: &str, extra_env: &[(&str, &str)]) -> Output {
        Command::new("bash")
            .arg("-c")
            .arg(script)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(extra_env.iter().copied())
            .current_dir(&self.work)
            .output()
            .expect("bash runs")
    }

    /// Runs one of the doc's blocks as written; panics with its output if it fails.
    fn run(&mut self, label: &str, block: &str) -> String {
        eprintln!(
            "\n==> {label}\n{}",
            block.trim_end().lines().map(|l| format!("  $ {l}")).collect::<Vec<_>>().join("\n")
        );
        let start = Instant::now();
        let out = self.bash(&self.script(block, None, true), &[]);
        let took = start.elapsed();
        self.timings.push((label.to_string(), took));
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let shown: Vec<&str> = text.lines().collect();
        let tail = shown[shown.len().saturating_sub(25)..].join("\n");
        eprintln!("{tail}\n({label}: {}, {:.1} s)", out.status, took.as_secs_f64());
        assert!(out.status.success(), "{label} failed as written in {DOC}:\n{text}");
        text
    }

    /// A variable the blocks exported so far.
    fn var(&self, name: &str) -> String {
        let out = self.bash(&self.script(&format!("printf %s \"${name}\""), None, false), &[]);
        String::from_utf8(out.stdout).unwrap()
    }

    /// The `sam` command line a block runs, as the shell expands it: the block runs with
    /// a `sam` that only records its arguments (the real deploy runs apart).
    fn sam_argv(&self, block: &str) -> Vec<String> {
        let stub = self.work.join(".sam-stub");
        std::fs::create_dir_all(&stub).unwrap();
        let record = stub.join("argv");
        let _ = std::fs::remove_file(&record);
        std::fs::write(stub.join("sam"), "#!/bin/sh\nprintf '%s\\0' \"$@\" > \"$REHEARSAL_SAM_ARGV\"\n").unwrap();
        std::fs::set_permissions(stub.join("sam"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let out =
            self.bash(&self.script(block, Some(&stub), false), &[("REHEARSAL_SAM_ARGV", record.to_str().unwrap())]);
        assert!(
            out.status.success(),
            "the deploy block with a recording sam: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::read(&record).expect("the block ran sam");
        let _ = std::fs::remove_dir_all(&stub);
        bytes.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
    }

    /// The test's own `aws` calls (not the doc's): JSON output.
    fn aws(&self, args: &[&str]) -> Value {
        let out = Command::new(self.bin.join("aws"))
            .args(args)
            .args(["--output", "json"])
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("AWS_DEFAULT_REGION", "eu-west-1")
            .output()
            .expect("aws runs");
        assert!(out.status.success(), "aws {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    }
}

/// What SAM CLI makes of a `sam deploy` command line, through its own code: the
/// parameter overrides as its parser reads them (and as the shell gave them), and the
/// capabilities (the command's, else its samconfig.toml's, else `--guided`'s default).
const SAM_READS: &str = r#"
import json, os, sys
from samcli.cli.types import CfnParameterOverridesType
from samcli.lib.config.samconfig import SamConfig

req = json.load(sys.stdin)
argv, cwd = req["argv"], req["cwd"]
assert argv[:1] == ["deploy"], argv
opts, key = {}, None
for a in argv[1:]:
    if a.startswith("--"):
        key, _, value = a.partition("=")
        opts.setdefault(key, [])
        if value:
            opts[key].append(value)
    elif key:
        opts[key].append(a)
config_file = (opts.get("--config-file") or ["samconfig.toml"])[0]
path = config_file if os.path.isabs(config_file) else os.path.join(cwd, config_file)
from_file = {}
if os.path.exists(path):
    from_file = SamConfig(os.path.dirname(path), os.path.basename(path)).get_all(
        ["deploy"], "parameters", (opts.get("--config-env") or ["default"])[0])
caps = opts.get("--capabilities") or from_file.get("capabilities")
if isinstance(caps, str):
    caps = caps.split()
if not caps and "--guided" in opts:
    caps = ["CAPABILITY_IAM"]  # the guided prompt's default
raw = opts.get("--parameter-overrides") or from_file.get("parameter_overrides") or []
if isinstance(raw, str):
    raw = [raw]
given = {}
# The shell's words: one value each (samconfig.toml's string holds many, parsed by SAM only).
for token in opts.get("--parameter-overrides") or []:
    k, sep, v = token.partition("=")
    if sep and not k.startswith("ParameterKey"):
        if len(v) > 1 and v[0] == v[-1] and v[0] in "'\"":
            v = v[1:-1]
        given[k] = v
print(json.dumps({"config_file": path, "config_found": os.path.exists(path), "capabilities": caps or [],
                  "parsed": CfnParameterOverridesType().convert(tuple(raw), None, None), "given": given}))
"#;

/// IAM resources whose name the template fixes, which CloudFormation creates only with
/// CAPABILITY_NAMED_IAM.
const NAMED_IAM: [(&str, &str); 5] = [
    ("AWS::IAM::Role", "RoleName"),
    ("AWS::IAM::ManagedPolicy", "ManagedPolicyName"),
    ("AWS::IAM::User", "UserName"),
    ("AWS::IAM::Group", "GroupName"),
    ("AWS::IAM::InstanceProfile", "InstanceProfileName"),
];

/// What would go wrong with the deploy command in `block`, checked statically against
/// the SAM template as CloudFormation sees it (moto applies none of these rules).
fn deploy_problems(shell: &Shell, python: &Path, block: &str, template: &Value) -> Vec<String> {
    let argv = shell.sam_argv(block);
    let mut child = Command::new(python)
        .arg("-c")
        .arg(SAM_READS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the SAM CLI's python");
    let request = json!({ "argv": argv, "cwd": shell.work });
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), request.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "SAM CLI's reading of {argv:?}: {}", String::from_utf8_lossy(&out.stderr));
    let read: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut problems = Vec::new();
    let parameters = template["Parameters"].as_object().cloned().unwrap_or_default();
    let parsed = read["parsed"].as_object().cloned().unwrap_or_default();
    for (key, given) in read["given"].as_object().into_iter().flatten() {
        let given = given.as_str().unwrap_or_default();
        let sent = parsed.get(key).and_then(Value::as_str);
        if sent != Some(given) {
            problems.push(format!(
                "{key}: the shell gave {} bytes but SAM CLI would send {:?} (its parser ends an unquoted value at the first space)",
                given.len(),
                sent.map(|s| s.chars().take(40).collect::<String>())
            ));
        }
        if given.len() > PARAMETER_VALUE_MAX {
            problems.push(format!(
                "{key}: {} bytes, over CloudFormation's {PARAMETER_VALUE_MAX}-byte limit for a parameter value",
                given.len()
            ));
        }
    }
    for (key, value) in &parsed {
        if !parameters.contains_key(key) {
            problems.push(format!("{key} is not a parameter of infra/sam/template.yaml (CloudFormation refuses it)"));
        }
        if value.as_str().is_some_and(|v| v.len() > PARAMETER_VALUE_MAX) && !read["given"][key].is_string() {
            problems.push(format!("{key}: over CloudFormation's {PARAMETER_VALUE_MAX}-byte limit"));
        }
    }
    for (key, p) in &parameters {
        if p["Default"].as_str().is_some_and(|d| d.len() > PARAMETER_VALUE_MAX) {
            problems.push(format!("{key}: its default is over {PARAMETER_VALUE_MAX} bytes"));
        }
    }
    let capabilities: BTreeSet<String> =
        read["capabilities"].as_array().into_iter().flatten().filter_map(|c| c.as_str().map(String::from)).collect();
    let resources = template["Resources"].as_object().cloned().unwrap_or_default();
    let named: Vec<String> = resources
        .iter()
        .filter(|(_, r)| NAMED_IAM.iter().any(|(t, p)| r["Type"] == *t && !r["Properties"][*p].is_null()))
        .map(|(id, r)| format!("{id} ({})", r["Type"].as_str().unwrap_or_default()))
        .collect();
    let any_iam = resources.values().any(|r| r["Type"].as_str().is_some_and(|t| t.starts_with("AWS::IAM::")));
    if !named.is_empty() && !capabilities.contains("CAPABILITY_NAMED_IAM") {
        problems.push(format!(
            "named IAM resources {} need CAPABILITY_NAMED_IAM; the command passes {capabilities:?} (config file {} {})",
            named.join(", "),
            read["config_file"],
            if read["config_found"] == true { "read" } else { "not found" }
        ));
    } else if any_iam && !capabilities.iter().any(|c| c == "CAPABILITY_IAM" || c == "CAPABILITY_NAMED_IAM") {
        problems.push(format!("IAM resources need CAPABILITY_IAM; the command passes {capabilities:?}"));
    }
    problems
}

/// The doc with its deploy block replaced by `deploy`, written to a file, and its sh
/// blocks read back from there (a changed doc is what the check sees).
fn variant_deploy_block(doc: &str, deploy: &str, dir: &Path, name: &str) -> String {
    let original = block_with(&fenced_blocks(doc, "sh"), "sam deploy").to_string();
    let path = dir.join(name);
    std::fs::write(&path, doc.replacen(&original, deploy, 1)).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    block_with(&fenced_blocks(&text, "sh"), "sam deploy").to_string()
}

/// What the user already has in the account: the EKS cluster, every ASG the doc and the
/// config name (with a launch template; a tag selector gets one ASG carrying its tags),
/// and no Lambda function.
async fn existing_account(moto: &Moto, cluster: &str, config: &Config, doc_asgs: &[String]) {
    let sdk = moto.sdk().await;
    let lambda = aws_sdk_lambda::Client::new(&sdk);
    assert_eq!(lambda.list_functions().send().await.unwrap().functions().len(), 0, "a Lambda-less account");
    aws_sdk_eks::Client::new(&sdk)
        .create_cluster()
        .name(cluster)
        .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder().subnet_ids("subnet-0aaaaaaaaaaaaaaa1").build(),
        )
        .send()
        .await
        .expect("EKS cluster");
    aws_sdk_ec2::Client::new(&sdk)
        .create_launch_template()
        .launch_template_name("eks-nodes")
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .image_id("ami-12c6146b")
                .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
                .build(),
        )
        .send()
        .await
        .expect("launch template");
    let mut asgs: BTreeMap<String, BTreeMap<String, String>> =
        doc_asgs.iter().map(|a| (a.clone(), BTreeMap::new())).collect();
    for pool in &config.pools {
        for selector in pool.spot_asgs.iter().chain(pool.on_demand_asg.as_ref()) {
            match selector {
                AsgSelector::Name(name) => {
                    asgs.entry(name.clone()).or_default();
                }
                AsgSelector::Tags(tags) => {
                    // Named after its tags (the example's: eks-general-spot-fallback), as
                    // the page names it.
                    let values: Vec<&str> = tags.values().map(String::as_str).filter(|v| *v != pool.name).collect();
                    asgs.insert(format!("eks-{}-{}", pool.name, values.join("-")), tags.clone());
                }
            }
        }
    }
    let spot: BTreeSet<String> = config
        .pools
        .iter()
        .flat_map(|p| &p.spot_asgs)
        .filter_map(|s| match s {
            AsgSelector::Name(n) => Some(n.clone()),
            AsgSelector::Tags(_) => None,
        })
        .chain(asgs.iter().filter(|(_, t)| !t.is_empty()).map(|(n, _)| n.clone()))
        .collect();
    let autoscaling = aws_sdk_autoscaling::Client::new(&sdk);
    for (name, tags) in &asgs {
        let tags = tags.iter().map(|(k, v)| {
            aws_sdk_autoscaling::types::Tag::builder()
                .resource_id(name)
                .resource_type("auto-scaling-group")
                .key(k)
                .value(v)
                .propagate_at_launch(false)
                .build()
        });
        use aws_sdk_autoscaling::types::{InstancesDistribution, LaunchTemplate, MixedInstancesPolicy};
        let template = aws_sdk_autoscaling::types::LaunchTemplateSpecification::builder()
            .launch_template_name("eks-nodes")
            .build();
        // A spot ASG buys spot only (what `ballast doctor` checks); on-demand ones plainly.
        let (plain, mixed) = if spot.contains(name) {
            let policy = MixedInstancesPolicy::builder()
                .launch_template(LaunchTemplate::builder().launch_template_specification(template).build())
                .instances_distribution(
                    InstancesDistribution::builder()
                        .on_demand_base_capacity(0)
                        .on_demand_percentage_above_base_capacity(0)
                        .build(),
                )
                .build();
            (None, Some(policy))
        } else {
            (Some(template), None)
        };
        autoscaling
            .create_auto_scaling_group()
            .auto_scaling_group_name(name)
            .set_launch_template(plain)
            .set_mixed_instances_policy(mixed)
            .min_size(0)
            .max_size(10)
            .desired_capacity(1)
            .availability_zones("eu-west-1a")
            .set_tags(Some(tags.collect()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("ASG {name}: {e:?}"));
    }
    eprintln!("moto: cluster {cluster}, ASGs {:?}", asgs.keys().collect::<Vec<_>>());
}

/// The ASGs the doc's tagging loop names (`for VAR in [POOL:]ASG ...; do`).
fn doc_asgs(block: &str) -> Vec<String> {
    let joined = block.replace("\\\n", " ");
    let Some(list) = joined.lines().find_map(|l| l.trim().strip_prefix("for ")?.split_once(" in ")) else {
        return Vec::new();
    };
    let words = list.1.split(';').next().unwrap_or_default().split_whitespace();
    words.map(|w| w.rsplit(':').next().unwrap_or(w).to_string()).collect()
}

/// A function's answer to one event under the emulator, as JSON.
fn invoke(emulator: &Emulator, function: &str, dir: &Path, name: &str, event: &Value) -> Value {
    let file = dir.join(name);
    std::fs::write(&file, serde_json::to_vec_pretty(event).unwrap()).unwrap();
    let out = emulator.invoke(function, &file);
    assert!(out.status.success(), "{function} {name}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{function} {name}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn fixture(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(repo_root().join("events").join(name)).unwrap()).unwrap()
}

/// The tick each minute's rule sends, dated now (the functions run on the real clock).
fn tick() -> Value {
    let mut v = fixture("scheduled-reconcile.json");
    v["time"] = json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    v["id"] = json!(fresh_id());
    v
}

/// Each EventBridge event has its own id (a live run records the ids it handled).
fn fresh_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!("0a7e5a1e-0000-4000-8000-{:012x}", N.fetch_add(1, Ordering::SeqCst))
}

/// Parameter Store's change event for `parameter` (moto emits none: the test delivers it
/// to the rule's three targets as EventBridge would).
fn parameter_changed(parameter: &str, account: &str) -> Value {
    let mut v = fixture("ssm-parameter-change.json");
    v["time"] = json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    v["account"] = json!(account);
    v["id"] = json!(fresh_id());
    v["detail"]["name"] = json!(parameter);
    v["resources"] = json!([format!("arn:aws:ssm:eu-west-1:{account}:parameter{parameter}")]);
    v
}

fn deliver_change(emulator: &Emulator, dir: &Path, event: &Value) {
    for function in ["schedule", "cluster-events"] {
        let answer = invoke(emulator, function, dir, &format!("change-{function}.json"), event);
        assert_eq!(answer["errors"], json!([]), "{function} on the change event: {answer}");
    }
    // The rule's third target is the events queue, which the interruption function polls.
    let batch =
        json!({ "Records": [{ "messageId": "config-changed", "body": event.to_string(), "eventSource": "aws:sqs" }] });
    let answer = invoke(emulator, "interruption", dir, "change-interruption.json", &batch);
    assert_eq!(answer["batchItemFailures"], json!([]), "interruption on the change event: {answer}");
}

/// The plan of a tick: (config version, each pool's dry_run).
fn plan(emulator: &Emulator, dir: &Path) -> (Option<i64>, BTreeMap<String, bool>, Value) {
    let summary = invoke(emulator, "schedule", dir, "tick.json", &tick());
    let pools = summary["pools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| (p["pool"].as_str().unwrap_or_default().to_string(), p["dry_run"] == true))
        .collect();
    (summary["config_version"].as_i64(), pools, summary)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_getting_started_page_deploys_and_goes_live() {
    let started = Instant::now();
    let root = repo_root();
    let doc = std::fs::read_to_string(root.join(DOC)).expect("the getting-started page");
    let blocks = fenced_blocks(&doc, "sh");
    assert!(blocks.len() >= 7, "{DOC} has {} sh blocks", blocks.len());
    let Some(ballast) = ballast_binary() else { return };
    let Some(cache) = cache_dir() else { return };
    let infra_venv = cache.join("venv-infra/bin");
    let Some(aws) = need(Some(infra_venv.join("aws")), "the aws CLI in venv-infra") else { return };
    let Some(sam) = need(Some(infra_venv.join("sam")), "the SAM CLI in venv-infra") else { return };
    let Some(python) = need(Some(infra_venv.join("python")), "venv-infra's python") else { return };
    let Some(kubectl) = kubectl() else { return };
    let Some(template) = ballast_tests::templates::sam_translated() else { return };
    let Some(moto) = Moto::start_sam() else { return };
    let Some(plane) = ControlPlane::start(Parts::ApiServer).await else { return };
    let mut phases: Vec<(&str, Duration)> = vec![("servers", started.elapsed())];

    // The user's directory: the repository's files the page uses; ballast.yaml and
    // deploy/ are written there by the blocks.
    let work = TempDir(std::env::temp_dir().join(format!("ballast-rehearsal-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&work.0);
    let dir = work.0.join("user");
    copy_tree(&root.join("infra/sam"), &dir.join("infra/sam"));
    copy_tree(&root.join("infra/k8s"), &dir.join("infra/k8s"));
    std::fs::copy(root.join("ballast.example.yaml"), dir.join("ballast.example.yaml")).unwrap();
    let bin = work.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, target) in [("ballast", &ballast), ("aws", &aws), ("sam", &sam), ("kubectl", &kubectl)] {
        std::os::unix::fs::symlink(target, bin.join(name)).unwrap();
    }
    let home = work.0.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let kubeconfig = plane.write_kubeconfig(ADMIN_TOKEN);
    let env: Vec<(String, String)> = [
        ("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display())),
        // No ~/.aws of the machine's: the account is moto's, reached by the endpoint.
        ("HOME", home.display().to_string()),
        ("AWS_CONFIG_FILE", home.join("aws-config").display().to_string()),
        ("AWS_SHARED_CREDENTIALS_FILE", home.join("aws-credentials").display().to_string()),
        ("AWS_ENDPOINT_URL", moto.endpoint.clone()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "eu-west-1".into()),
        ("KUBECONFIG", kubeconfig.clone()),
        ("SAM_CLI_TELEMETRY", "0".into()),
        // What the user pushed as "before you start" says (no registry here: no kubelet pulls).
        ("FORWARDER_IMAGE", FORWARDER_IMAGE.into()),
        ("LANG", "C.UTF-8".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut shell =
        Shell { work: dir.clone(), bin: bin.clone(), env, exported: work.0.join("exported.sh"), timings: Vec::new() };
    let events_dir = work.0.join("events");
    std::fs::create_dir_all(&events_dir).unwrap();

    // 1. What the user has: the cluster and ASGs the page and the example config name.
    let example = Config::from_yaml(&std::fs::read_to_string(root.join("ballast.example.yaml")).unwrap()).unwrap();
    let names = block_with(&blocks, "export CLUSTER=");
    let cluster = names
        .lines()
        .find_map(|l| l.trim().strip_prefix("export CLUSTER="))
        .expect("the page names the cluster")
        .to_string();
    existing_account(&moto, &cluster, &example, &doc_asgs(block_with(&blocks, "put-lifecycle-hook"))).await;

    // 2. The page's blocks, in order. The deploy runs from what `sam build` leaves
    // (.aws-sam/build/template.yaml): the only substitution. `sam build` compiles the
    // three functions with cargo-lambda in release mode for arm64 (minutes, and not what
    // is rehearsed: the emulator runs the functions below); its stand-in is the template
    // with each CodeUri at a zip, as scripts/rehearse-deploy does for prebuilt zips. The
    // zips hold a placeholder bootstrap: moto's Lambda never runs code here.
    let zips = work.0.join("zips");
    let build = Command::new(&python)
        .arg("-c")
        .arg(
            "import importlib.machinery, importlib.util, sys\nfrom pathlib import Path\n\
             loader = importlib.machinery.SourceFileLoader('rd', sys.argv[1])\n\
             spec = importlib.util.spec_from_loader('rd', loader); rd = importlib.util.module_from_spec(spec)\n\
             loader.exec_module(rd)\nzips = Path(sys.argv[3])\nrd.make_zips(zips)\n\
             out = Path(sys.argv[2]) / '.aws-sam' / 'build'\n\
             rd.sam_template_with_zips(Path(sys.argv[2]) / 'infra/sam/template.yaml', zips, out)\n\
             (out / 'samconfig.toml').unlink(missing_ok=True)\n",
        )
        .arg(root.join("scripts/rehearse-deploy"))
        .arg(&dir)
        .arg(&zips)
        .env("BALLAST_REHEARSE_REEXEC", "1")
        .output()
        .unwrap();
    assert!(build.status.success(), "the sam build stand-in: {}", String::from_utf8_lossy(&build.stderr));

    let mut ran = 0;
    let mut run_until = |shell: &mut Shell, needle: &str| {
        while ran < blocks.len() {
            let block = &blocks[ran];
            ran += 1;
            shell.run(&format!("sh block {ran}"), block);
            if block.contains(needle) {
                return;
            }
        }
        panic!("no sh block with `{needle}` in {DOC}");
    };
    run_until(&mut shell, "export CLUSTER=");
    let account = shell.var("ACCOUNT");
    assert_eq!(shell.var("CLUSTER"), cluster);

    // 6 (started now, it runs beside the rest): the CDK app deployed the same way into a
    // second moto, with the context the page's CDK commands give (a `bash` block: `npx
    // cdk deploy` builds the functions itself, so scripts/rehearse-deploy deploys the
    // synthesized assembly with the same zips).
    let Some(moto_cdk) = Moto::start_sam() else { return };
    let cdk_block = fenced_blocks(&doc, "bash").into_iter().find(|b| b.contains("cdk deploy")).expect("the CDK block");
    let mut cdk_context = Vec::new();
    let words: Vec<&str> = cdk_block.lines().find(|l| l.contains("cdk deploy")).unwrap().split_whitespace().collect();
    for pair in words.windows(2).filter(|w| w[0] == "-c") {
        let mut value = pair[1].to_string();
        for var in ["CLUSTER", "ACCOUNT", "AWS_REGION"] {
            value = value.replace(&format!("${var}"), &shell.var(var));
        }
        cdk_context.extend(["--cdk-context".to_string(), value]);
    }
    let cdk_report = work.0.join("cdk.json");
    let cdk_log = std::fs::File::create(work.0.join("cdk.log")).unwrap();
    let cdk_started = Instant::now();
    let cdk = Group(
        Command::new(root.join("scripts/rehearse-deploy"))
            .args(["--only", "cdk", "--keep", "--endpoint", &moto_cdk.endpoint, "--zips"])
            .arg(&zips)
            .arg("--json")
            .arg(&cdk_report)
            .args(&cdk_context)
            .env_remove("AWS_ENDPOINT_URL")
            .stdout(Stdio::null())
            .stderr(cdk_log)
            .process_group(0)
            .spawn()
            .expect("scripts/rehearse-deploy"),
    );

    run_until(&mut shell, "ballast config push");
    let parameter = format!("/ballast/{cluster}/config");
    let sdk = moto.sdk().await;
    let ssm = aws_sdk_ssm::Client::new(&sdk);
    let stored = ssm.get_parameter().name(&parameter).send().await.expect("config pushed").parameter.unwrap();
    let written = std::fs::read_to_string(dir.join("ballast.yaml")).unwrap();
    // The whole file, as pushed (the old `BallastConfig=$(cat ...)` delivered "#").
    assert_eq!(stored.value().map(str::trim_end), Some(written.trim_end()), "the parameter holds all of ballast.yaml");
    assert_eq!(stored.version, 1);
    let config = Config::from_yaml(&written).unwrap();
    assert!(config.dry_run, "the page pushes a dry run first");

    // 3. Before deploying: what SAM CLI would send (statically; moto checks none of it).
    let deploy_block = block_with(&blocks, "sam deploy").to_string();
    let problems = deploy_problems(&shell, &python, &deploy_block, &template);
    assert!(problems.is_empty(), "the page's deploy command: {problems:#?}");
    phases.push(("blocks before the deploy", started.elapsed()));
    run_until(&mut shell, "sam deploy");
    let stack = format!("ballast-{cluster}");
    let described = shell.aws(&["cloudformation", "describe-stacks", "--stack-name", &stack]);
    let described = &described["Stacks"][0];
    assert_eq!(described["StackStatus"], "CREATE_COMPLETE", "{described}");
    for p in described["Parameters"].as_array().into_iter().flatten() {
        let value = p["ParameterValue"].as_str().unwrap_or_default();
        assert!(value.len() <= PARAMETER_VALUE_MAX, "{}: {} bytes", p["ParameterKey"], value.len());
    }
    let outputs: BTreeMap<String, String> = described["Outputs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| (o["OutputKey"].as_str().unwrap().to_string(), o["OutputValue"].as_str().unwrap().to_string()))
        .collect();
    eprintln!("stack outputs: {outputs:#?}");
    assert_eq!(outputs.get("ConfigParameter"), Some(&parameter), "the stack follows the pushed parameter");
    assert_eq!(outputs.get("StateTable"), Some(&config.state_table));
    let functions = stack_functions(&shell, &sdk, &stack).await;
    assert_eq!(functions.keys().cloned().collect::<BTreeSet<_>>(), FUNCTIONS.iter().map(|f| f.to_string()).collect());
    for (function, env) in &functions {
        assert_eq!(env.get("BALLAST_CONFIG_PARAMETER"), Some(&parameter), "{function}: {env:?}");
        assert_eq!(env.get("BALLAST_ACCOUNT_ID"), Some(&account), "{function}: {env:?}");
        assert!(!env.contains_key("BALLAST_CONFIG"), "{function}: no config in the environment");
    }
    // moto's CloudFormation drops AWS::DynamoDB::Table's TimeToLiveSpecification (its
    // model takes no TTL): set it as CloudFormation would, from the template, so that
    // `ballast doctor` sees the table a real deploy makes.
    let ttl = template["Resources"]
        .as_object()
        .unwrap()
        .values()
        .find(|r| r["Type"] == "AWS::DynamoDB::Table")
        .map(|r| r["Properties"]["TimeToLiveSpecification"].clone())
        .expect("the state table");
    assert_eq!(ttl["Enabled"], true, "the template enables the table's TTL: {ttl}");
    aws_sdk_dynamodb::Client::new(&sdk)
        .update_time_to_live()
        .table_name(&config.state_table)
        .time_to_live_specification(
            aws_sdk_dynamodb::types::TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(ttl["AttributeName"].as_str().unwrap())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("TTL");
    phases.push(("sam deploy", started.elapsed()));

    // 4. The cluster side, applied to the real API server by the page's kubectl.
    run_until(&mut shell, "kubectl apply");
    let admin = plane.client(ADMIN_TOKEN);
    cluster_side(&admin, &outputs).await;

    // The rest of the page up to going live (`ballast doctor`).
    run_until(&mut shell, "ballast doctor");
    phases.push(("cluster side and doctor", started.elapsed()));

    // 5. The three functions under the Lambda emulator with the stack's environment. The
    // cluster is reached through a kubeconfig as a user of the group the access entries
    // map the roles to (ballast:functions), not BALLAST_CLUSTER_ACCESS=eks: moto's EKS
    // gives a made-up endpoint and CA, not this API server's.
    let mut function_env: BTreeMap<String, String> = BTreeMap::new();
    for (function, env) in &functions {
        for (k, v) in env {
            if let Some(other) = function_env.insert(k.clone(), v.clone()) {
                assert_eq!(&other, v, "{function}: {k} differs between the functions");
            }
        }
    }
    assert!(
        function_env.get("BALLAST_CLUSTER_ACCESS").is_none_or(|v| v == "eks"),
        "the stack gives EKS access: {function_env:?}"
    );
    let functions_kubeconfig = plane.write_kubeconfig(FUNCTIONS_TOKEN);
    function_env.extend(
        [
            ("AWS_ENDPOINT_URL", moto.endpoint.as_str()),
            // Lambda's own: the region, and the role's credentials (moto takes any).
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "functions"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_MAX_ATTEMPTS", "1"),
            ("BALLAST_CLUSTER_ACCESS", "kubeconfig"),
            ("KUBECONFIG", functions_kubeconfig.as_str()),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let Some(emulator) = Emulator::start(&function_env.into_iter().collect::<Vec<_>>()) else { return };
    let pools: BTreeSet<String> = config.pools.iter().map(|p| p.name.clone()).collect();
    let (version, planned, summary) = plan(&emulator, &events_dir);
    let first_look = Instant::now();
    eprintln!("first plan: {summary}");
    assert_eq!(version, Some(1), "{summary}");
    assert_eq!(planned.keys().cloned().collect::<BTreeSet<_>>(), pools, "a plan for every pool: {summary}");
    assert!(planned.values().all(|dry| *dry), "dry run: {summary}");
    assert_eq!(summary["errors"], json!([]), "{summary}");
    phases.push(("functions in dry run", started.elapsed()));

    // Going live: the page's push, then the change event; no restart.
    run_until(&mut shell, "dry_run: false");
    let live = ssm.get_parameter().name(&parameter).send().await.unwrap().parameter.unwrap();
    assert_eq!(live.version, 2);
    assert!(!Config::from_yaml(live.value().unwrap()).unwrap().dry_run);
    if first_look.elapsed() < Duration::from_secs(50) {
        // Within the functions' once-a-minute look, only the event can bring version 2:
        // this tick shows what a lost event would leave for up to a minute.
        let (version, _, summary) = plan(&emulator, &events_dir);
        assert_eq!(version, Some(1), "no change event yet: {summary}");
    }
    deliver_change(&emulator, &events_dir, &parameter_changed(&parameter, &account));
    let (version, planned, summary) = plan(&emulator, &events_dir);
    eprintln!("live plan: {summary}");
    assert_eq!(version, Some(2), "{summary}");
    assert_eq!(planned.keys().cloned().collect::<BTreeSet<_>>(), pools);
    assert!(planned.values().all(|dry| !dry), "live: {summary}");

    // The kill switch.
    run_until(&mut shell, "--dry-run");
    let killed = ssm.get_parameter().name(&parameter).send().await.unwrap().parameter.unwrap();
    assert_eq!(killed.version, 3);
    deliver_change(&emulator, &events_dir, &parameter_changed(&parameter, &account));
    let (version, planned, summary) = plan(&emulator, &events_dir);
    eprintln!("after the kill switch: {summary}");
    assert_eq!(version, Some(3), "{summary}");
    assert_eq!(planned.keys().cloned().collect::<BTreeSet<_>>(), pools);
    assert!(planned.values().all(|dry| *dry), "back to dry run: {summary}");
    drop(emulator);
    assert_eq!(ran, blocks.len(), "every sh block ran");
    phases.push(("live and kill switch", started.elapsed()));

    // 7. The check catches the old README's failures, on variants of the page.
    let variants = work.0.join("variants");
    std::fs::create_dir_all(&variants).unwrap();
    let old = variant_deploy_block(&doc, OLD_README_DEPLOY, &variants, "old-readme.md");
    let problems = deploy_problems(&shell, &python, &old, &template);
    eprintln!("the old README's command: {problems:#?}");
    assert!(problems.iter().any(|p| p.starts_with("BallastConfig: the shell gave")), "truncation: {problems:#?}");
    assert!(problems.iter().any(|p| p.contains("need CAPABILITY_NAMED_IAM")), "capabilities: {problems:#?}");
    // Quoted (`'$(cat ...)'`), with a third pool like the first: over the limit.
    let first = written.find("  - name: general").expect("the example's first pool");
    let second = written.find("  - name: batch").expect("the example's second pool");
    let mut three = written.clone();
    three.push_str(&written[first..second].replace("general", "general-2"));
    std::fs::write(dir.join("three-pools.yaml"), &three).unwrap();
    let quoted = "sam deploy --config-file infra/sam/samconfig.toml --stack-name \"ballast-$CLUSTER\" \\\n  \
                  --parameter-overrides ClusterName=$CLUSTER \"BallastConfig='$(cat three-pools.yaml)'\"\n";
    let problems =
        deploy_problems(&shell, &python, &variant_deploy_block(&doc, quoted, &variants, "quoted.md"), &template);
    assert!(problems.iter().any(|p| p.contains("over CloudFormation's 4096-byte limit")), "size: {problems:#?}");
    // Quoted, it is still cut: at the first ' of the YAML (a comment's "pool's").
    assert!(problems.iter().any(|p| p.contains("the shell gave")), "quoted: {problems:#?}");
    // The page's command without its samconfig.toml, or with --guided's default.
    let without = deploy_block.replace("--config-file infra/sam/samconfig.toml ", "");
    let iam = "--capabilities CAPABILITY_IAM --no-confirm-changeset";
    let guided_default = deploy_block.replace("--no-confirm-changeset", iam);
    for (name, block) in [("no-samconfig.md", without), ("capability-iam.md", guided_default)] {
        assert_ne!(block, deploy_block, "{name}: the variant changes the command");
        let problems =
            deploy_problems(&shell, &python, &variant_deploy_block(&doc, &block, &variants, name), &template);
        assert!(problems.iter().any(|p| p.contains("need CAPABILITY_NAMED_IAM")), "{name}: {problems:#?}");
    }
    phases.push(("old failures caught", started.elapsed()));

    // 6. The CDK stack: its outputs and functions' environment against SAM's.
    let mut cdk = cdk;
    let status = loop {
        if let Some(status) = cdk.0.try_wait().unwrap() {
            break status;
        }
        assert!(cdk_started.elapsed() < Duration::from_secs(300), "scripts/rehearse-deploy (CDK) took over 5 minutes");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let log = std::fs::read_to_string(work.0.join("cdk.log")).unwrap_or_default();
    assert!(status.success(), "scripts/rehearse-deploy --only cdk: {status}\n{log}");
    let report: Value = serde_json::from_slice(&std::fs::read(&cdk_report).unwrap()).unwrap();
    compare_cdk(&report["stacks"]["cdk"], &outputs, &functions);
    phases.push(("CDK deploy (in parallel) compared", started.elapsed()));

    eprintln!("\nrehearsal timings:");
    for (label, took) in &shell.timings {
        eprintln!("  {label:<14} {:>6.1} s", took.as_secs_f64());
    }
    eprintln!(
        "  CDK (rehearse-deploy, in parallel) {:>6.1} s: {}",
        cdk_started.elapsed().as_secs_f64(),
        report["timings_s"]
    );
    for (label, at) in &phases {
        eprintln!("  {label:<36} done at {:>6.1} s", at.as_secs_f64());
    }
}

/// Each function of the stack (by its kind: the name's last part) with its environment,
/// as moto's Lambda holds it.
async fn stack_functions(
    shell: &Shell,
    sdk: &aws_config::SdkConfig,
    stack: &str,
) -> BTreeMap<String, BTreeMap<String, String>> {
    let resources = shell.aws(&["cloudformation", "list-stack-resources", "--stack-name", stack]);
    let lambda = aws_sdk_lambda::Client::new(sdk);
    let mut out = BTreeMap::new();
    for r in resources["StackResourceSummaries"].as_array().into_iter().flatten() {
        if r["ResourceType"] != "AWS::Lambda::Function" {
            continue;
        }
        let name = r["PhysicalResourceId"].as_str().unwrap();
        let c = lambda.get_function_configuration().function_name(name).send().await.unwrap();
        let kind = FUNCTIONS.iter().find(|f| name.ends_with(&format!("-{f}"))).unwrap_or_else(|| panic!("{name}"));
        let env = c.environment().and_then(|e| e.variables()).cloned().unwrap_or_default();
        out.insert(kind.to_string(), env.into_iter().collect());
    }
    out
}

/// What `kubectl apply -k` must have made: both namespaces, the functions' RBAC for
/// their group, the forwarder on the user's image (not the base's placeholder digest) and
/// its settings naming the stack's bus and parameter.
async fn cluster_side(admin: &kube::Client, outputs: &BTreeMap<String, String>) {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
    use kube::api::ListParams;
    use kube::Api;
    for ns in ["ballast", "ballast-headroom"] {
        Api::<Namespace>::all(admin.clone()).get(ns).await.unwrap_or_else(|e| panic!("namespace {ns}: {e}"));
    }
    let group_bound = |subjects: Option<&Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.is_some_and(|s| s.iter().any(|s| s.kind == "Group" && s.name == FUNCTIONS_GROUP))
    };
    let cluster_bindings = Api::<ClusterRoleBinding>::all(admin.clone()).list(&ListParams::default()).await.unwrap();
    assert!(
        cluster_bindings.items.iter().any(|b| group_bound(b.subjects.as_ref())),
        "a ClusterRoleBinding for {FUNCTIONS_GROUP}"
    );
    let bindings =
        Api::<RoleBinding>::namespaced(admin.clone(), "ballast-headroom").list(&ListParams::default()).await.unwrap();
    assert!(
        bindings.items.iter().any(|b| group_bound(b.subjects.as_ref())),
        "a RoleBinding in ballast-headroom for {FUNCTIONS_GROUP}"
    );
    let forwarder =
        Api::<Deployment>::namespaced(admin.clone(), "ballast").get("ballast-forwarder").await.expect("the forwarder");
    let settings = Api::<ConfigMap>::namespaced(admin.clone(), "ballast").list(&ListParams::default()).await.unwrap();
    let settings = settings
        .items
        .iter()
        .find(|c| c.metadata.name.as_deref().is_some_and(|n| n.starts_with("ballast-forwarder-settings")))
        .expect("the forwarder's settings");
    let data = settings.data.clone().unwrap_or_default();
    assert_eq!(data.get("BALLAST_EVENT_BUS"), outputs.get("EventBusName"), "the overlay names the stack's bus");
    assert_eq!(data.get("BALLAST_CONFIG_PARAMETER"), outputs.get("ConfigParameter"), "and its config parameter");
    let containers = forwarder.spec.as_ref().and_then(|s| s.template.spec.as_ref()).map(|s| &s.containers);
    let images: Vec<Option<&str>> = containers.into_iter().flatten().map(|c| c.image.as_deref()).collect();
    assert_eq!(images, [Some(FORWARDER_IMAGE)], "the overlay runs the forwarder image the user pushed");
    let spec = serde_json::to_string(&forwarder.spec).unwrap();
    let name = settings.metadata.name.clone().unwrap();
    assert!(spec.contains(&name), "the forwarder reads {name} (kustomize's hashed name): {spec}");
    // No kubelet runs here: the Deployment says its pod is up, as the deployment controller
    // would once it ran (`ballast doctor` checks it).
    let status = serde_json::json!({ "status": { "replicas": 1, "readyReplicas": 1, "availableReplicas": 1 } });
    Api::<Deployment>::namespaced(admin.clone(), "ballast")
        .patch_status("ballast-forwarder", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(status))
        .await
        .expect("the forwarder's status");
}

/// The CDK stack against SAM's: the same outputs where both have them (names the
/// templates fix, not generated ones), and the same environment for each function.
fn compare_cdk(
    cdk: &Value,
    sam_outputs: &BTreeMap<String, String>,
    sam_functions: &BTreeMap<String, BTreeMap<String, String>>,
) {
    assert!(cdk["status"].as_str().is_some_and(|s| s.ends_with("_COMPLETE") && !s.contains("ROLLBACK")), "{cdk}");
    let outputs = cdk["outputs"].as_object().cloned().unwrap_or_default();
    eprintln!("CDK outputs: {outputs:#?}");
    for key in ["ConfigParameter", "EventBusName", "VpcEndpointServices"] {
        assert_eq!(outputs.get(key).and_then(Value::as_str), sam_outputs.get(key).map(String::as_str), "{key}");
    }
    let mut functions: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for f in cdk["functions"].as_object().into_iter().flatten().map(|(_, f)| f) {
        let name = f["FunctionName"].as_str().unwrap_or_default();
        let kind = FUNCTIONS.iter().find(|k| name.ends_with(&format!("-{k}"))).unwrap_or_else(|| panic!("{name}"));
        let env = f["Environment"].as_object().into_iter().flatten();
        functions.insert(
            kind.to_string(),
            env.map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect(),
        );
    }
    assert_eq!(functions.keys().collect::<Vec<_>>(), sam_functions.keys().collect::<Vec<_>>());
    for (kind, sam) in sam_functions {
        let cdk = &functions[kind];
        assert_eq!(cdk.keys().collect::<Vec<_>>(), sam.keys().collect::<Vec<_>>(), "{kind}: the same variables");
        for (k, v) in sam {
            // A queue's URL is its server's: the queue's name must agree.
            let name = |url: &str| {
                if url.starts_with("http") {
                    url.rsplit('/').next().unwrap_or(url).to_string()
                } else {
                    url.to_string()
                }
            };
            assert_eq!(name(v), name(&cdk[k]), "{kind}: {k}");
        }
    }
}
