//! Deploying a release's prebuilt zips, with no Rust toolchain: the CDK app with
//! `-c lambdaZips=DIR` and the SAM template scripts/release ships (ballast-VERSION-sam.yaml)
//! are the stacks of the source build, with only the functions' code changed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use ballast_core::function::Function;
use ballast_tests::templates::{cdk_synthesized, infra_python, sam_translated, sam_translated_file};
use serde_json::Value;

const FUNCTIONS: [&str; 3] = Function::NAMES;

/// The release's version: ballast-cli's, as scripts/release reads it.
fn version() -> String {
    let cargo =
        std::fs::read_to_string(ballast_tests::repo_root().join("functions/cli/Cargo.toml")).expect("Cargo.toml");
    let line = cargo.lines().find(|l| l.starts_with("version = ")).expect("a version line");
    line.trim_start_matches("version = ").trim_matches('"').to_string()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ballast-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// infra/cdk with its node_modules (`None`, the test skips, only outside CI).
fn cdk_app() -> Option<PathBuf> {
    let dir = ballast_tests::repo_root().join("infra/cdk");
    if dir.join("node_modules/ts-node").exists() {
        return Some(dir);
    }
    assert!(!ballast_tests::moto::required(), "CI=true but infra/cdk has no node_modules: run scripts/test");
    eprintln!("skipped: infra/cdk not installed (scripts/test runs npm ci there)");
    None
}

fn is_function(r: &Value) -> bool {
    r["Type"] == "AWS::Lambda::Function"
}

/// A template's resources without what says where the code comes from: each function's
/// Code, the metadata of its asset or build, and the CDK's own usage metadata.
fn without_code(template: &Value) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (id, r) in template["Resources"].as_object().expect("Resources") {
        if r["Type"] == "AWS::CDK::Metadata" {
            continue;
        }
        let mut r = r.clone();
        if is_function(&r) {
            r["Properties"].as_object_mut().expect("Properties").remove("Code");
        }
        // The CDK's asset metadata; SAM's build metadata, which the released template drops
        // (the translator copies it to each function's EventInvokeConfig too).
        if let Some(meta) = r.get_mut("Metadata").and_then(Value::as_object_mut) {
            meta.retain(|k, _| !k.starts_with("aws:asset:") && k != "BuildMethod" && k != "BuildProperties");
            if meta.is_empty() {
                r.as_object_mut().expect("resource").remove("Metadata");
            }
        }
        out.insert(id.clone(), r);
    }
    out
}

fn differences(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> Vec<String> {
    let ids: std::collections::BTreeSet<_> = a.keys().chain(b.keys()).collect();
    ids.into_iter()
        .filter(|id| a.get(*id) != b.get(*id))
        .map(|id| {
            format!(
                "{id}:\n  source: {}\n  zips:   {}",
                a.get(id).unwrap_or(&Value::Null),
                b.get(id).unwrap_or(&Value::Null)
            )
        })
        .collect()
}

#[test]
fn the_cdk_app_on_release_zips_deploys_those_zips_and_changes_nothing_else() {
    let Some(app) = cdk_app() else { return };
    let Some(source) = cdk_synthesized(false) else { return };
    let tmp = scratch("cdk-zips");
    let zips = tmp.join("zips");
    std::fs::create_dir_all(&zips).unwrap();
    let ver = version();
    // Each zip's bytes are its own: a function given another's code would show.
    let mut bytes = BTreeMap::new();
    for f in FUNCTIONS {
        let data = format!("not a real zip: the {f} function of {ver}").into_bytes();
        std::fs::write(zips.join(format!("ballast-{ver}-lambda-{f}-arm64.zip")), &data).unwrap();
        bytes.insert(f, data);
    }
    // What else a release directory holds is left alone.
    std::fs::write(zips.join("SHA256SUMS"), "").unwrap();
    std::fs::write(zips.join(format!("ballast-{ver}-x86_64-linux-musl.tar.gz")), "").unwrap();
    let out = tmp.join("cdk.out");
    // As a user runs it: `cdk synth` (no BALLAST_CDK_SKIP_BUILD) builds nothing with the zips.
    let synth = Command::new("npx")
        .current_dir(&app)
        .env_remove("BALLAST_CDK_SKIP_BUILD")
        .args(["cdk", "synth", "--quiet", "-o"])
        .arg(&out)
        .arg("-c")
        .arg(format!("lambdaZips={}", zips.display()))
        .output()
        .expect("npx cdk synth runs");
    assert!(synth.status.success(), "cdk synth: {}", String::from_utf8_lossy(&synth.stderr));
    let read = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(out.join(name)).expect(name)).expect("JSON")
    };
    let zipped = read("ballast-prod-eks.template.json");
    let assets = read("ballast-prod-eks.assets.json");

    let mut seen = Vec::new();
    for (id, r) in zipped["Resources"].as_object().unwrap().iter().filter(|(_, r)| is_function(r)) {
        let p = &r["Properties"];
        let name = p["FunctionName"].as_str().unwrap_or_default();
        let f = FUNCTIONS.iter().find(|f| name.ends_with(&format!("-{f}"))).unwrap_or_else(|| panic!("{id}: {name}"));
        assert_eq!((&p["Runtime"], &p["Handler"]), (&Value::from("provided.al2023"), &Value::from("bootstrap")), "{f}");
        assert_eq!(p["Architectures"], serde_json::json!(["arm64"]), "{f}");
        let key = p["Code"]["S3Key"].as_str().unwrap_or_else(|| panic!("{f}: Code {}", p["Code"]));
        let asset = &assets["files"][key.trim_end_matches(".zip")];
        assert_eq!(asset["source"]["packaging"], "file", "{f}: the zip is uploaded as it is, not re-zipped: {asset}");
        let uploaded =
            std::fs::read(out.join(asset["source"]["path"].as_str().expect("asset path"))).expect("asset file");
        assert!(uploaded == bytes[f], "{f}: the asset is not ballast-{ver}-lambda-{f}-arm64.zip");
        assert_eq!(r["Metadata"]["aws:asset:is-bundled"], false, "{f}: nothing built");
        seen.push(*f);
    }
    seen.sort();
    assert_eq!(seen, ["cluster-events", "interruption", "schedule"]);
    let wrong = differences(&without_code(&source), &without_code(&zipped));
    assert!(wrong.is_empty(), "the stack on zips differs from the source build beyond the code:\n{}", wrong.join("\n"));
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn release_zips_that_are_missing_or_of_two_releases_are_refused_before_synth() {
    let Some(app) = cdk_app() else { return };
    let tmp = scratch("cdk-zips-refused");
    let make = |dir: &str, files: &[&str]| {
        let d = tmp.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        for f in files {
            std::fs::write(d.join(f), "zip").unwrap();
        }
        d.display().to_string()
    };
    let one = ["interruption", "schedule", "cluster-events"].map(|f| format!("ballast-0.1.0-lambda-{f}-arm64.zip"));
    let cases = serde_json::json!([
        ["whole", make("whole", &one.each_ref().map(String::as_str))],
        ["one missing", make("missing", &[&one[0], &one[1]])],
        ["two releases", make("mixed", &[&one[0], &one[1], &one[2], "ballast-0.2.0-lambda-schedule-arm64.zip"])],
        ["x86_64 zips", make("x86", &["ballast-0.1.0-lambda-interruption-x86_64.zip"])],
        ["no directory", tmp.join("nowhere").display().to_string()],
    ]);
    let script = r#"
const { releaseZips } = require('./lib/function-code');
for (const [name, dir] of JSON.parse(process.argv[1])) {
  try { console.log(`${name}: ok ${Object.keys(releaseZips(dir)).sort().join(',')}`); }
  catch (e) { console.log(`${name}: ${e.message}`); }
}
"#;
    let out = Command::new("node")
        .current_dir(&app)
        .env("TS_NODE_TRANSPILE_ONLY", "1")
        .args(["-r", "ts-node/register", "-e", script, &cases.to_string()])
        .output()
        .expect("node runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for (case, want) in [
        ("whole", "ok cluster-events,interruption,schedule"),
        ("one missing", "no zip for cluster-events"),
        ("two releases", "zips of several releases (0.1.0, 0.2.0)"),
        ("x86_64 zips", "no zip for interruption, schedule, cluster-events"),
        ("no directory", "not a readable directory"),
    ] {
        let line = text.lines().find(|l| l.starts_with(&format!("{case}: "))).unwrap_or_default();
        assert!(line.contains(want), "{case}: want `{want}`, got `{line}` in:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn the_released_sam_template_deploys_the_zips_and_is_the_source_template_otherwise() {
    let Some(source) = sam_translated() else { return };
    let python = infra_python().expect("the venv that translated the source template");
    let ver = version();
    let tmp = scratch("sam-prebuilt");
    let path = tmp.join(format!("ballast-{ver}-sam.yaml"));
    let out = Command::new(&python)
        .arg(ballast_tests::repo_root().join("scripts/release"))
        .arg("--sam-template")
        .arg(&path)
        .output()
        .expect("scripts/release runs");
    assert!(out.status.success(), "scripts/release --sam-template: {}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&path).expect("the released template");
    for f in FUNCTIONS {
        let uri = format!("CodeUri: ballast-{ver}-lambda-{f}-arm64.zip\n");
        assert_eq!(text.matches(&uri).count(), 1, "{f}: its zip beside the template ({uri:?})");
    }
    assert!(!text.contains("BuildMethod") && !text.contains("CodeUri: ../.."), "nothing left to build:\n{text}");
    let released = sam_translated_file(&path).expect("translated");
    // translate.py gives every local CodeUri the same S3 location, so the code aside the
    // two must be equal resource by resource.
    let wrong = differences(&without_code(&source), &without_code(&released));
    assert!(wrong.is_empty(), "the released template differs from infra/sam/template.yaml:\n{}", wrong.join("\n"));
    assert_eq!(source["Outputs"], released["Outputs"]);
    assert_eq!(source["Parameters"], released["Parameters"]);
    let _ = std::fs::remove_dir_all(&tmp);
}
