//! `ballast config push` and `ballast config pull`: the config's one home, an SSM
//! parameter that the functions and the forwarder follow.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ballast_core::config::{Config, PARAMETER_MAX_BYTES};
use clap::Args;

use super::{Invalid, Unusable, INVALID};

#[derive(Args)]
pub struct PushArgs {
    /// The config to write. Omit it with `--dry-run` to set the live config to dry run
    /// (the kill switch: no local copy needed).
    file: Option<PathBuf>,
    /// The SSM parameter (default `/ballast/CLUSTER/config`, CLUSTER from the config or
    /// `--cluster`).
    #[arg(long)]
    parameter: Option<String>,
    /// Names the parameter when no file is given.
    #[arg(long)]
    cluster: Option<String>,
    /// Write it with `dry_run: true`: the functions plan and log, and change nothing,
    /// within seconds.
    #[arg(long)]
    dry_run: bool,
    /// Show what would change against the live version and write nothing (exit 1 when
    /// something would).
    #[arg(long)]
    diff: bool,
    /// The region of the parameter when no file is given (a file's own region otherwise;
    /// default: the environment's).
    #[arg(long)]
    region: Option<String>,
    /// One JSON object on stdout: `parameter`, `live_version` (none before the first
    /// push), `changed`, `diff` (unified, when changed), `written`, `version` (the one
    /// written), `cluster` and `dry_run`.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct PullArgs {
    /// The SSM parameter (default `/ballast/CLUSTER/config`).
    #[arg(long, required_unless_present = "cluster")]
    parameter: Option<String>,
    /// Names the parameter `/ballast/CLUSTER/config`.
    #[arg(long)]
    cluster: Option<String>,
    /// The parameter's region (default: the environment's).
    #[arg(long)]
    region: Option<String>,
    /// One JSON object on stdout, `parameter`, `version` and `config` (the text as
    /// stored), instead of the text alone.
    #[arg(long)]
    json: bool,
}

/// The parameter the templates name by default for `cluster`.
pub fn default_parameter(cluster: &str) -> String {
    format!("/ballast/{cluster}/config")
}

/// The config text with its top-level `dry_run` set to `on`, and nothing else changed.
/// The line is edited in place where that is plain (comments, layout and line endings
/// kept); otherwise (a flow mapping, a tagged or multi-line value) the YAML is written
/// again, comments lost. Either way the result must read as the same config but for
/// `dry_run`, or it is refused.
pub fn with_dry_run(text: &str, on: bool) -> Result<String, String> {
    let before = Config::from_yaml(text).map_err(|e| format!("it is not a valid config: {e}"))?;
    let wanted = Config { dry_run: on, ..before };
    let reads_as_wanted = |edited: &str| Config::from_yaml(edited).is_ok_and(|c| c == wanted);
    let edited = edit_in_place(text, on);
    if reads_as_wanted(&edited) {
        return Ok(edited);
    }
    let mut value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    let mapping = value.as_mapping_mut().ok_or("the config is not a mapping")?;
    mapping.insert("dry_run".into(), on.into());
    let rewritten = serde_yaml_ng::to_string(&value).map_err(|e| e.to_string())?;
    if reads_as_wanted(&rewritten) {
        Ok(rewritten)
    } else {
        Err("setting dry_run changed more than dry_run".into())
    }
}

/// `dry_run`'s value replaced on its own top-level line (the key quoted or not), or the
/// key added after any leading comments, directives and document marker.
fn edit_in_place(text: &str, on: bool) -> String {
    let value = if on { "true" } else { "false" };
    let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let key_line = lines.iter().position(|line| {
        ["dry_run", "\"dry_run\"", "'dry_run'"]
            .iter()
            .any(|k| line.strip_prefix(k).is_some_and(|r| r.trim_start().starts_with(':')))
    });
    match key_line {
        Some(i) => {
            let line = &lines[i];
            let colon = line.find(':').unwrap_or(line.len());
            let (key, after) = line.split_at(colon);
            let after = &after[1..];
            let spaces = after.len() - after.trim_start().len();
            let tail =
                after[spaces..].find(|c: char| c.is_whitespace() || c == '#').map_or("", |j| &after[spaces + j..]);
            lines[i] = format!("{key}:{}{value}{tail}", &after[..spaces]);
        }
        None => {
            let at = lines
                .iter()
                .position(|l| {
                    let t = l.trim();
                    !(t.is_empty() || t.starts_with('#') || t.starts_with('%') || t == "---")
                })
                .unwrap_or(lines.len());
            lines.insert(at, format!("dry_run: {value}"));
        }
    }
    let mut joined = lines.join(newline);
    if text.ends_with('\n') {
        joined.push_str(newline);
    }
    joined
}

/// Why a text cannot be the config, as `config check` lists it.
fn refuse_invalid(what: &str, text: &str) -> Result<Config, Invalid> {
    if text.len() > PARAMETER_MAX_BYTES {
        let why = format!(
            "{what} has {} bytes; an SSM parameter (Advanced tier) holds at most {PARAMETER_MAX_BYTES}: \
             shorten its comments or move pools to another deployment",
            text.len()
        );
        return Err(Invalid::input(Path::new(what), why));
    }
    Config::from_yaml(text).map_err(|errors| {
        let lines: Vec<String> =
            errors.0.iter().map(|i| super::located(what, &i.path, &i.message, i.line, i.column)).collect();
        let message = format!("{what} is invalid, nothing written:\n  {}", lines.join("\n  "));
        Invalid { input: Some(what.into()), message, problems: errors.0 }
    })
}

pub fn push(args: PushArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let sdk = ballast_aws::sdk_config().await;
        // With no file, the parameter is read where --region (or the environment) says.
        let client = ssm_client(&sdk, args.region.as_deref());
        let (what, text, named) = match &args.file {
            Some(path) => {
                let text = super::read_text(path)?;
                (path.display().to_string(), text, None)
            }
            None if args.dry_run => {
                let parameter = parameter_of(&args.parameter, args.cluster.as_deref())?;
                let live = ballast_aws::ssm::read(&client, &parameter).await?;
                (format!("{parameter} (version {})", live.version), live.text, Some(parameter))
            }
            None => {
                return Err(Unusable::Usage(
                    "name the config file to push (or give --dry-run alone: the kill switch)".into(),
                )
                .into())
            }
        };
        let text = if args.dry_run {
            with_dry_run(&text, true).map_err(|why| {
                Invalid::input(Path::new(&what), format!("cannot set dry_run in {what}: {why}; nothing written"))
            })?
        } else {
            text
        };
        let config = refuse_invalid(&what, &text)?;
        let parameter = match named {
            Some(parameter) => parameter,
            None => parameter_of(&args.parameter, Some(&config.cluster))?,
        };
        // The functions read the parameter in the config's region, whatever the shell's.
        if args.region.as_deref().is_some_and(|r| r != config.region) {
            return Err(Unusable::Usage(format!(
                "--region {} but the config's region is {}: the functions read it there",
                args.region.unwrap_or_default(),
                config.region
            ))
            .into());
        }
        let client = ssm_client(&sdk, Some(&config.region));
        let live = ballast_aws::ssm::read_if_any(&client, &parameter).await?;
        let changed = live.as_ref().is_none_or(|live| live.text != text);
        let unified = live
            .as_ref()
            .filter(|_| changed)
            .map(|live| diff(&live.text, &text, &format!("{parameter} (version {})", live.version), &what));
        let report = |version: Option<i64>| {
            serde_json::json!({
                "parameter": parameter,
                "live_version": live.as_ref().map(|l| l.version),
                "changed": changed,
                "diff": unified,
                "written": version.is_some(),
                "version": version,
                "cluster": config.cluster,
                "dry_run": config.dry_run,
            })
        };
        // As `diff` does, --diff exits 1 when there is a difference (a CI gate can ask
        // for none); nothing is written either way.
        let done = if changed && args.diff { ExitCode::from(INVALID) } else { ExitCode::SUCCESS };
        if !changed || args.diff {
            if args.json {
                println!("{}", report(None));
            } else if let (false, Some(live)) = (changed, &live) {
                println!("{parameter}: unchanged (version {}), nothing written", live.version);
            } else {
                print!("{}", unified.as_deref().unwrap_or(&format!("{parameter}: none yet; it would be created\n")));
                println!("--diff: nothing written");
            }
            return Ok(done);
        }
        let version = ballast_aws::ssm::write(&client, &parameter, &text).await?;
        if args.json {
            println!("{}", report(Some(version)));
        } else {
            match &unified {
                Some(unified) => print!("{unified}"),
                None => println!("{parameter}: none yet; it will be created"),
            }
            println!(
                "{parameter}: wrote version {version} (cluster {}, {}); the functions take it on its change event \
                 within seconds, at most a minute later if that event is lost",
                config.cluster,
                if config.dry_run { "dry run" } else { "live" },
            );
        }
        Ok(done)
    })
}

pub fn pull(args: PullArgs) -> anyhow::Result<ExitCode> {
    let parameter = parameter_of(&args.parameter, args.cluster.as_deref())?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let sdk = ballast_aws::sdk_config().await;
        let live = ballast_aws::ssm::read(&ssm_client(&sdk, args.region.as_deref()), &parameter).await?;
        if args.json {
            println!("{}", serde_json::json!({ "parameter": parameter, "version": live.version, "config": live.text }));
        } else {
            eprintln!("{parameter}: version {}", live.version);
            print!("{}", live.text);
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn ssm_client(sdk: &aws_config::SdkConfig, region: Option<&str>) -> aws_sdk_ssm::Client {
    let mut conf = aws_sdk_ssm::config::Builder::from(sdk);
    if let Some(region) = region {
        conf = conf.region(aws_config::Region::new(region.to_string()));
    }
    aws_sdk_ssm::Client::from_conf(conf.build())
}

fn parameter_of(given: &Option<String>, cluster: Option<&str>) -> anyhow::Result<String> {
    match (given, cluster) {
        (Some(p), _) if p.starts_with('/') => Ok(p.clone()),
        (Some(p), _) => Err(Unusable::Usage(format!("--parameter {p}: a parameter name starts with `/`")).into()),
        (None, Some(cluster)) => Ok(default_parameter(cluster)),
        (None, None) => {
            Err(Unusable::Usage("give --parameter or --cluster to name the config's parameter".into()).into())
        }
    }
}

/// A unified diff of the live text against the new one.
fn diff(live: &str, new: &str, live_label: &str, new_label: &str) -> String {
    similar::TextDiff::from_lines(live, new).unified_diff().context_radius(2).header(live_label, new_label).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The minimal config gone live, with a comment on the line.
    fn live() -> String {
        ballast_core::testing::MINIMAL_CONFIG.replace("dry_run: true", "dry_run: false   # go live")
    }

    fn dry(text: &str) -> Config {
        Config::from_yaml(&with_dry_run(text, true).unwrap_or_else(|e| panic!("{e}: {text}"))).unwrap()
    }

    #[test]
    fn dry_run_is_set_in_place_keeping_its_comment_and_line_endings() {
        let edited = with_dry_run(&live(), true).unwrap();
        assert_eq!(edited, live().replace("dry_run: false   # go live", "dry_run: true   # go live"));
        let crlf = live().replace('\n', "\r\n");
        assert_eq!(with_dry_run(&crlf, true).unwrap(), edited.replace('\n', "\r\n"), "only the one line changes");
    }

    #[test]
    fn dry_run_is_set_in_every_form_yaml_allows() {
        let without = live().replace("dry_run: false   # go live\n", "");
        let forms = [
            format!("---\n{without}"),
            format!("# ballast\n%YAML 1.2\n---\n{without}"),
            live().replace("dry_run: false", "\"dry_run\": false"),
            live().replace("dry_run: false", "'dry_run': false"),
            live().replace("dry_run: false   # go live", "dry_run:\n  false"),
            live().replace("dry_run: false", "dry_run: !!bool false"),
            "{cluster: c, region: eu-west-1, state_table: ballast-state, dry_run: false, pools: [{name: general, spot_asgs: [s], on_demand_asg: od}]}\n".to_string(),
        ];
        let wanted = Config { dry_run: true, ..Config::from_yaml(&live()).unwrap() };
        for form in forms {
            assert_eq!(dry(&form), wanted, "{form}");
        }
        // A pool's own key of the same name, indented, is not the deployment's.
        let nested = format!("{without}  # dry_run: false\n");
        assert_eq!(dry(&nested), wanted);
    }

    #[test]
    fn an_invalid_config_is_not_edited() {
        assert!(with_dry_run("cluster: [", true).unwrap_err().starts_with("it is not a valid config"));
    }

    #[test]
    fn the_example_config_set_to_dry_run_is_still_valid_and_dry() {
        let example = include_str!("../../../../ballast.example.yaml");
        let live = with_dry_run(example, false).unwrap();
        assert!(!Config::from_yaml(&live).unwrap().dry_run);
        let killed = with_dry_run(&live, true).unwrap();
        assert_eq!(killed, example, "only the one line changes");
    }

    #[test]
    fn a_config_over_the_parameter_limit_is_refused_before_anything_is_written() {
        let example = include_str!("../../../../ballast.example.yaml");
        let big = format!("{example}{}", "# padding\n".repeat(PARAMETER_MAX_BYTES / 10));
        let err = refuse_invalid("big.yaml", &big).unwrap_err().to_string();
        let expected = format!("big.yaml has {} bytes; an SSM parameter (Advanced tier) holds at most 8192", big.len());
        assert!(err.starts_with(&expected), "{err}");
    }
}
