use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use ballast_core::config::{Config, ConfigIssue, PARAMETER_MAX_BYTES, PARAMETER_WARN_BYTES};
use ballast_core::shape;
use serde_yaml_ng::Value;

pub use ballast_core::config::FUNCTIONS_GROUP;

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The config file (default: $BALLAST_CONFIG_FILE).
    #[arg(env = "BALLAST_CONFIG_FILE")]
    file: PathBuf,
    /// The functions' RBAC (e.g. infra/k8s/functions-rbac.yaml): every pool's headroom
    /// namespace, Deployment and PriorityClass must be covered by it.
    #[arg(long)]
    rbac: Option<PathBuf>,
    #[command(flatten)]
    cluster: super::config_pods::ClusterArgs,
    /// The functions' deployed timeout, in seconds (FunctionTimeoutSeconds): warns when a
    /// drain of the longest drain_timeout would not fit.
    #[arg(long, value_name = "SECONDS")]
    function_timeout: Option<u64>,
    /// Print the effective config, every default filled in, as YAML on stdout (the
    /// summary goes to stderr); it reads back as the same config.
    #[arg(long)]
    print: bool,
    /// One JSON object on stdout: `valid` (whether the check passed, as the exit code says:
    /// false under --strict with a warning too), `errors` and `warnings` (each with its
    /// `input` file, `path`, `message` and, when known, `line` and `column`), and with
    /// `--print` the effective `config`.
    #[arg(long)]
    json: bool,
    /// Warnings fail the check too (exit 1), for a CI gate.
    #[arg(long)]
    strict: bool,
    /// Headroom override events (an EventBridge envelope or a Scheduler's input, as
    /// `events check` reads them; repeatable): each must be valid, come from the config's
    /// account and region, and name one of its pools.
    #[arg(long = "event", value_name = "FILE")]
    events: Vec<PathBuf>,
}

/// One finding of the check, a problem or a warning: which input file, where in it, and
/// why (as `--json` prints it).
#[derive(serde::Serialize)]
pub struct Finding {
    input: String,
    path: String,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    column: Option<usize>,
}

impl Finding {
    pub fn new(input: impl Into<String>, path: impl Into<String>, message: impl Into<String>) -> Self {
        Finding { input: input.into(), path: path.into(), message: message.into(), line: None, column: None }
    }

    /// A problem or warning of the config, placed in its text.
    fn of_issue(input: &str, issue: ConfigIssue) -> Finding {
        Finding {
            input: input.to_string(),
            path: issue.path,
            message: issue.message,
            line: issue.line,
            column: issue.column,
        }
    }

    /// `FILE:LINE:COLUMN: path: message`, as compilers print it (editors jump there).
    fn line(&self) -> String {
        super::located(&self.input, &self.path, &self.message, self.line, self.column)
    }

    /// [`Finding::line`], naming its file even where it is not placed: a line alone.
    fn placed(&self) -> String {
        match self.line {
            None if !self.input.is_empty() => format!("{}: {}", self.input, self.line()),
            _ => self.line(),
        }
    }

    /// A side input (--rbac, --pods, --nodes) read but not valid: one problem of that file.
    fn of_invalid(invalid: &super::Invalid) -> Finding {
        let input = invalid.input.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
        Finding::new(input, "", invalid.message.clone())
    }
}

/// What the check found: problems fail it, warnings fail it under `--strict`, notes say
/// what it did not judge.
#[derive(Default)]
pub struct Findings {
    pub problems: Vec<Finding>,
    pub warnings: Vec<Finding>,
    pub notes: Vec<String>,
}

/// Prints the JSON Schema of `ballast.yaml` (docs/src/reference/ballast.schema.json).
pub fn schema() -> anyhow::Result<ExitCode> {
    println!("{}", serde_json::to_string_pretty(&ballast_core::config::json_schema())?);
    Ok(ExitCode::SUCCESS)
}

/// Each headroom override event of `files` that does not parse, does not come from the
/// config's account and region, or names no pool of it.
fn override_problems(config: &Config, files: &[PathBuf]) -> anyhow::Result<Vec<Finding>> {
    use ballast_core::event::Signal;
    let mut problems = Vec::new();
    let pools: Vec<&str> = config.pools.iter().map(|p| p.name.as_str()).collect();
    for file in files {
        let bytes = super::read(file)?;
        let input = file.display().to_string();
        for (_, parsed) in super::events::events_in(&bytes, Some(&config.origin())) {
            match parsed.map(|event| event.signal) {
                Err(error) => problems.push(Finding::new(&input, "", error.to_string())),
                Ok(Signal::HeadroomOverride { pool, .. }) if !pools.contains(&pool.as_str()) => {
                    let near = ballast_core::config::nearest_pool(&pool, &pools)
                        .map(|n| format!("did you mean `{n}`? "))
                        .unwrap_or_default();
                    problems.push(Finding::new(
                        &input,
                        "detail.pool",
                        format!("`{pool}` names no pool of the config; {near}(its pools: {})", pools.join(", ")),
                    ));
                }
                Ok(Signal::HeadroomOverride { .. }) => {}
                Ok(other) => problems.push(Finding::new(
                    &input,
                    "",
                    format!("not a headroom override ({}): --event takes overrides", serde_json::to_string(&other)?),
                )),
            }
        }
    }
    Ok(problems)
}

pub fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let file = &args.file;
    let input = file.display().to_string();
    let mut found = Findings::default();
    let text = super::read_config_text(file)?;
    let parsed = match &text {
        Ok(text) => Config::from_yaml_with_warnings(text),
        Err(errors) => Err(errors.clone()),
    };
    let config = match parsed {
        Ok((config, warnings)) => {
            found.warnings.extend(warnings.into_iter().map(|w| Finding::of_issue(&input, w)));
            Some(config)
        }
        Err(errors) => {
            found.problems.extend(errors.0.into_iter().map(|i| Finding::of_issue(&input, i)));
            None
        }
    };
    // The config's home is an SSM parameter: a file it cannot hold is refused here, not
    // at `config push` (or, worse, at a deploy).
    let size = std::fs::metadata(file).map(|m| m.len() as usize).unwrap_or(0);
    let parameter = format!("an SSM parameter (Advanced tier), the config's home, holds {PARAMETER_MAX_BYTES} bytes");
    if size > PARAMETER_MAX_BYTES {
        found.problems.push(Finding::new(
            &input,
            "(file)",
            format!(
                "{size} bytes: more than {parameter}; shorten its comments or split its pools into two deployments"
            ),
        ));
    } else if size >= PARAMETER_WARN_BYTES {
        found.warnings.push(Finding::new(&input, "(file)", format!("{size} bytes: near what {parameter}")));
    }
    if let Some(config) = &config {
        side_checks(config, &input, &args, &mut found)?;
    }
    // Every finding of the config where it is written (of its nearest written ancestor).
    if let Ok(text) = &text {
        for finding in found.problems.iter_mut().chain(found.warnings.iter_mut()) {
            if finding.input == input && finding.line.is_none() && !finding.path.starts_with('(') {
                if let Some((line, column)) = ballast_core::config::locate_path(text, &finding.path) {
                    (finding.line, finding.column) = (Some(line), Some(column));
                }
            }
        }
    }
    let Findings { problems, warnings, notes } = found;
    let valid = problems.is_empty();
    let passed = valid && (!args.strict || warnings.is_empty());
    let code = if passed { ExitCode::SUCCESS } else { ExitCode::from(super::INVALID) };
    if args.json {
        // `valid` is the exit code's answer: false under --strict with a warning too, so a
        // script that reads it fails where the exit code does.
        let mut out = serde_json::json!({
            "input": input, "valid": passed, "strict": args.strict, "errors": problems, "warnings": warnings
        });
        if let (true, true, Some(config)) = (args.print, valid, &config) {
            out["config"] = serde_json::to_value(config)?;
        }
        println!("{out}");
        return Ok(code);
    }
    // Problems, warnings and notes go to stderr, as a compiler's do; stdout has what was
    // asked for: the summary of a valid config, or with --print the config alone (and the
    // summary on stderr).
    // Refused by --strict, the check failed: its summary is no answer on stdout either.
    let refused = args.strict && !warnings.is_empty();
    let say = |line: String| if args.print || refused { eprintln!("{line}") } else { println!("{line}") };
    let mut by_input: Vec<(&str, Vec<&Finding>)> = Vec::new();
    for p in &problems {
        match by_input.iter_mut().find(|(i, _)| *i == p.input) {
            Some((_, list)) => list.push(p),
            None => by_input.push((&p.input, vec![p])),
        }
    }
    for (source, list) in by_input {
        if source == input {
            eprintln!("{input}: {} problem(s)", list.len());
        } else {
            eprintln!("{input}: {} problem(s) read against {source}", list.len());
        }
        for p in list {
            eprintln!("  {}", p.line());
        }
    }
    if let (true, Some(config)) = (valid, &config) {
        let names: Vec<&str> = config.pools.iter().map(|p| p.name.as_str()).collect();
        say(format!(
            "{input}: {}: cluster {}, {} pool(s) ({}){}{}",
            if refused { "valid but for its warnings" } else { "valid" },
            config.cluster,
            names.len(),
            names.join(", "),
            if config.dry_run { ", dry_run" } else { "" },
            if args.rbac.is_some() { ", covered by the RBAC" } else { "" },
        ));
        for pool in &config.pools {
            say(format!("  {} headroom: {}", pool.name, pool.headroom.explain()));
        }
    }
    for warning in &warnings {
        eprintln!("warning: {}", warning.placed());
    }
    for note in &notes {
        eprintln!("note: {note}");
    }
    if valid && args.cluster.nodes.is_none() {
        // The config names ASGs, not instance types: node sizes come from the cluster.
        eprintln!(
            "note: pause pods are held to the largest EC2 instance ({}), not to the pool's nodes (the config does not \
             say them): pass --nodes (kubectl get nodes -o json) to check that each fits a node of its pool",
            ballast_core::config::LARGEST_INSTANCE.name
        );
    }
    if refused {
        eprintln!("{input}: {} warning(s), refused by --strict", warnings.len());
    }
    if let (true, true, false, Some(config)) = (args.print, valid, refused, &config) {
        print!("{}", serde_yaml_ng::to_string(config)?);
    }
    Ok(code)
}

/// The checks of a valid config against the other inputs (--rbac, --event, --pods,
/// --nodes, --function-timeout) and Lambda's limits.
fn side_checks(config: &Config, input: &str, args: &CheckArgs, found: &mut Findings) -> anyhow::Result<()> {
    // A side input that cannot be read stops the check (exit 2); one read but not valid
    // is a problem of that file, reported with the config's (exit 1).
    let side_input = |result: anyhow::Result<()>, found: &mut Findings| match result {
        Err(e) => match e.downcast::<super::Invalid>() {
            Ok(invalid) => {
                found.problems.push(Finding::of_invalid(&invalid));
                Ok(())
            }
            Err(other) => Err(other),
        },
        ok => ok,
    };
    if let Some(rbac) = &args.rbac {
        let read = (|| {
            let text = super::read_text(rbac)?;
            let issues = rbac_issues(config, &text)
                .map_err(|e| super::Invalid::input(rbac, format!("cannot read {} as RBAC: {e:#}", rbac.display())))?;
            found.problems.extend(issues.into_iter().map(|issue| {
                let (path, message) = issue.split_once(": ").unwrap_or(("", issue.as_str()));
                Finding::new(rbac.display().to_string(), path, message)
            }));
            Ok(())
        })();
        side_input(read, found)?;
    }
    found.problems.extend(override_problems(config, &args.events)?);
    let cluster = super::config_pods::check(config, input, &args.cluster, found);
    side_input(cluster, found)?;
    // A Lambda function runs 15 minutes at most: a drain that leaves a run less than its
    // margin is always cut short, whatever the templates say.
    let longest_run = std::time::Duration::from_secs(900);
    for (index, pool) in config.pools.iter().enumerate() {
        let drain = pool.interruption.drain_timeout;
        if drain.0 + ballast_core::config::FUNCTION_TIMEOUT_MARGIN > longest_run {
            found.warnings.push(Finding::new(
                input,
                format!("pools[{index}].interruption.drain_timeout"),
                format!(
                    "{drain} leaves a run less than its 120 s beyond the drain within Lambda's 15 minutes: its drains \
                     are always cut short (to at most 13m)"
                ),
            ));
        }
    }
    if let Some(timeout) = args.function_timeout {
        let needed = config.min_function_timeout().as_secs();
        // Placed at the drain that needs it: the longest (the first of equals).
        let longest = config.pools.iter().enumerate().rev().max_by_key(|(_, p)| p.interruption.drain_timeout.0);
        if let (true, Some((index, _))) = (timeout < needed, longest) {
            found.warnings.push(Finding::new(
                input,
                format!("pools[{index}].interruption.drain_timeout"),
                format!(
                    "the functions' timeout (--function-timeout {timeout}) is shorter than this drain_timeout plus \
                     120 s ({needed}s): drains would be cut short; set FunctionTimeoutSeconds to at least {needed}"
                ),
            ));
        }
    }
    Ok(())
}

/// One RBAC rule, as far as the check needs it.
struct Rule {
    groups: Vec<String>,
    resources: Vec<String>,
    names: Vec<String>,
    verbs: Vec<String>,
}

impl Rule {
    fn grants(&self, group: &str, resource: &str, name: &str, verbs: &[&str]) -> bool {
        let any = |list: &[String], x: &str| list.iter().any(|v| v == x || v == "*");
        any(&self.groups, group)
            && any(&self.resources, resource)
            && (self.names.is_empty() || self.names.iter().any(|n| n == name))
            && verbs.iter().all(|v| any(&self.verbs, v))
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence().into_iter().flatten().filter_map(|x| x.as_str().map(str::to_string)).collect()
}

/// What the functions' group may not do that the config needs: each pool's Deployment in
/// its headroom namespace (create, get, patch: server-side apply), its PriorityClass (get;
/// made by the RBAC file itself).
pub fn rbac_issues(config: &Config, text: &str) -> anyhow::Result<Vec<String>> {
    use serde::Deserialize;
    let mut roles: Vec<(String, Option<String>, Vec<Rule>)> = Vec::new(); // (kind/name, namespace, rules)
    let mut bindings: Vec<(String, Option<String>)> = Vec::new(); // (role kind/name, binding namespace)
    let mut priority_classes: Vec<(String, i64)> = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let doc = Value::deserialize(document)?;
        let kind = doc["kind"].as_str().unwrap_or_default();
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = doc["metadata"]["namespace"].as_str().map(str::to_string);
        match kind {
            "PriorityClass" => priority_classes.push((name.to_string(), doc["value"].as_i64().unwrap_or_default())),
            "Role" | "ClusterRole" => {
                let rules = doc["rules"]
                    .as_sequence()
                    .into_iter()
                    .flatten()
                    .map(|r| Rule {
                        groups: strings(&r["apiGroups"]),
                        resources: strings(&r["resources"]),
                        names: strings(&r["resourceNames"]),
                        verbs: strings(&r["verbs"]),
                    })
                    .collect();
                roles.push((format!("{kind}/{name}"), namespace, rules));
            }
            "RoleBinding" | "ClusterRoleBinding" => {
                let ours = doc["subjects"]
                    .as_sequence()
                    .into_iter()
                    .flatten()
                    .any(|s| s["kind"] == "Group" && s["name"] == FUNCTIONS_GROUP);
                if ours {
                    let role = format!(
                        "{}/{}",
                        doc["roleRef"]["kind"].as_str().unwrap_or_default(),
                        doc["roleRef"]["name"].as_str().unwrap_or_default()
                    );
                    bindings.push((role, if kind == "RoleBinding" { namespace } else { None }));
                }
            }
            _ => {}
        }
    }
    // The rules the group has in `namespace` (None: cluster-wide).
    let rules_in = |namespace: Option<&str>| -> Vec<&Rule> {
        bindings
            .iter()
            .filter(|(_, bound)| bound.is_none() || bound.as_deref() == namespace)
            .filter_map(|(role, bound)| {
                roles.iter().find(|(r, ns, _)| {
                    r == role && (role.starts_with("ClusterRole/") || ns.as_deref() == bound.as_deref())
                })
            })
            .flat_map(|(_, _, rules)| rules.iter())
            .collect()
    };
    let mut issues = Vec::new();
    let mut classes = BTreeSet::new();
    for (i, pool) in config.pools.iter().enumerate() {
        let h = &pool.headroom;
        let rules = rules_in(Some(&h.namespace));
        // Every Deployment the pool's `headroom.shapes` may run, one per slot.
        let names: Vec<String> =
            (0..h.shapes.deployments()).map(|slot| shape::deployment_name(&pool.name, slot)).collect();
        let creates = names.iter().all(|d| rules.iter().any(|r| r.grants("apps", "deployments", d, &["create"])));
        let uncovered: Vec<&str> = names
            .iter()
            .filter(|d| !rules.iter().any(|r| r.grants("apps", "deployments", d, &["get", "patch"])))
            .map(String::as_str)
            .collect();
        let them = |names: &[&str]| if names.len() == 1 { "it" } else { "them" };
        if !creates || uncovered.len() == names.len() {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            issues.push(format!(
                "pools[{i}].headroom.namespace: `{}` is not covered: nothing bound to group {FUNCTIONS_GROUP} may {} Deployment{} {} there (add {} to the Role's resourceNames, or bind the Role in that namespace)",
                h.namespace,
                if creates { "get and patch" } else { "create, get and patch" },
                if names.len() == 1 { "" } else { "s" },
                names.join(", "),
                them(&names),
            ));
        } else if !uncovered.is_empty() {
            // The first slot is covered, not every slot `headroom.shapes` may use.
            issues.push(format!(
                "pools[{i}].headroom.shapes: the pool may run {} pause-pod Deployments, and nothing bound to group {FUNCTIONS_GROUP} may get and patch {} in `{}` (add {} to the Role's resourceNames, or set `shapes: fixed`)",
                names.len(),
                uncovered.join(", "),
                h.namespace,
                them(&uncovered),
            ));
        }
        let class = &h.priority_class;
        if classes.insert(class.name.clone()) {
            if !rules_in(None).iter().any(|r| r.grants("scheduling.k8s.io", "priorityclasses", &class.name, &["get"])) {
                issues.push(format!(
                    "pools[{i}].headroom.priority_class.name: nothing bound to group {FUNCTIONS_GROUP} may get PriorityClass {} (add it to the ClusterRole's resourceNames)",
                    class.name
                ));
            }
            match priority_classes.iter().find(|(n, _)| *n == class.name) {
                Some((_, value)) if *value == i64::from(class.value) => {}
                Some((_, value)) => issues.push(format!(
                    "pools[{i}].headroom.priority_class.value: {} but the RBAC file makes PriorityClass {} with value {value}",
                    class.value, class.name
                )),
                None => issues.push(format!(
                    "pools[{i}].headroom.priority_class.name: the RBAC file does not make PriorityClass {} (the functions may only read it)",
                    class.name
                )),
            }
        }
    }
    Ok(issues)
}
