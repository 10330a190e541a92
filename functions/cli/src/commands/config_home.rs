//! `ballast config push` and `ballast config pull`: the config's one home, an SSM
//! parameter that the functions and the forwarder follow.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use ballast_core::config::{Config, PARAMETER_MAX_BYTES};
use clap::Args;

use super::{Unusable, INVALID};

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
    /// Show what would change against the live version and write nothing.
    #[arg(long)]
    diff: bool,
}

#[derive(Args)]
pub struct PullArgs {
    /// The SSM parameter (default `/ballast/CLUSTER/config`).
    #[arg(long, required_unless_present = "cluster")]
    parameter: Option<String>,
    /// Names the parameter `/ballast/CLUSTER/config`.
    #[arg(long)]
    cluster: Option<String>,
}

/// The parameter the templates name by default for `cluster`.
pub fn default_parameter(cluster: &str) -> String {
    format!("/ballast/{cluster}/config")
}

/// The config text with its top-level `dry_run` set to `on` (the key is added when the
/// text has none); comments and layout kept.
pub fn with_dry_run(text: &str, on: bool) -> String {
    let value = if on { "true" } else { "false" };
    let mut found = false;
    let mut out: Vec<String> = text
        .lines()
        .map(|line| {
            let Some(rest) = line.strip_prefix("dry_run") else { return line.to_string() };
            let Some(after) = rest.trim_start().strip_prefix(':') else { return line.to_string() };
            found = true;
            // Only the value changes: the spacing and a trailing comment stay as written.
            let spaces = after.len() - after.trim_start().len();
            let tail =
                after[spaces..].find(|c: char| c.is_whitespace() || c == '#').map_or("", |i| &after[spaces + i..]);
            format!("dry_run:{}{value}{tail}", &after[..spaces])
        })
        .collect();
    if !found {
        out.insert(0, format!("dry_run: {value}"));
    }
    let mut joined = out.join("\n");
    if text.ends_with('\n') {
        joined.push('\n');
    }
    joined
}

/// Why a text cannot be the config, as `config check` lists it.
fn refuse_invalid(what: &str, text: &str) -> anyhow::Result<Config> {
    if text.len() > PARAMETER_MAX_BYTES {
        bail!(
            "{what} has {} bytes; an SSM parameter (Advanced tier) holds at most {PARAMETER_MAX_BYTES}: \
             shorten its comments or move pools to another deployment",
            text.len()
        );
    }
    Config::from_yaml(text).map_err(|errors| {
        let lines: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
        anyhow::anyhow!("{what} is invalid, nothing written:\n  {}", lines.join("\n  "))
    })
}

pub fn push(args: PushArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let sdk = ballast_aws::sdk_config().await;
        let client = aws_sdk_ssm::Client::new(&sdk);
        let (what, text, named) = match &args.file {
            Some(path) => {
                let text = String::from_utf8(super::read(path)?)
                    .with_context(|| format!("{} is not UTF-8 text", path.display()))?;
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
        let text = if args.dry_run { with_dry_run(&text, true) } else { text };
        let config = match refuse_invalid(&what, &text) {
            Ok(config) => config,
            Err(e) => {
                eprintln!("error: {e:#}");
                return Ok(ExitCode::from(INVALID));
            }
        };
        let parameter = match named {
            Some(parameter) => parameter,
            None => parameter_of(&args.parameter, Some(&config.cluster))?,
        };
        let live = ballast_aws::ssm::read_if_any(&client, &parameter).await?;
        match &live {
            Some(live) if live.text == text => {
                println!("{parameter}: unchanged (version {}), nothing written", live.version);
                return Ok(ExitCode::SUCCESS);
            }
            Some(live) => {
                let label = format!("{parameter} (version {})", live.version);
                print!("{}", diff(&live.text, &text, &label, &what));
            }
            None => println!("{parameter}: none yet; it will be created"),
        }
        if args.diff {
            println!("--diff: nothing written");
            return Ok(ExitCode::SUCCESS);
        }
        let version = ballast_aws::ssm::write(&client, &parameter, &text).await?;
        println!(
            "{parameter}: wrote version {version} (cluster {}, {}); the functions take it on its change event within \
             seconds, at most a minute later if that event is lost",
            config.cluster,
            if config.dry_run { "dry run" } else { "live" },
        );
        Ok(ExitCode::SUCCESS)
    })
}

pub fn pull(args: PullArgs) -> anyhow::Result<ExitCode> {
    let parameter = parameter_of(&args.parameter, args.cluster.as_deref())?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let sdk = ballast_aws::sdk_config().await;
        let live = ballast_aws::ssm::read(&aws_sdk_ssm::Client::new(&sdk), &parameter).await?;
        eprintln!("{parameter}: version {}", live.version);
        print!("{}", live.text);
        Ok(ExitCode::SUCCESS)
    })
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

    #[test]
    fn dry_run_is_set_in_place_keeping_its_comment_or_added() {
        let text = "cluster: c\ndry_run: false   # go live\npools: []\n";
        assert_eq!(with_dry_run(text, true), "cluster: c\ndry_run: true   # go live\npools: []\n");
        assert_eq!(with_dry_run("dry_run:false\n", true), "dry_run:true\n");
        assert_eq!(with_dry_run("cluster: c\n", true), "dry_run: true\ncluster: c\n");
        // A pool's own key of the same name, indented, is not the deployment's.
        assert_eq!(with_dry_run("pools:\n  - dry_run: false\n", true), "dry_run: true\npools:\n  - dry_run: false\n");
    }

    #[test]
    fn the_example_config_set_to_dry_run_is_still_valid_and_dry() {
        let example = include_str!("../../../../ballast.example.yaml");
        let live = with_dry_run(example, false);
        assert!(!Config::from_yaml(&live).unwrap().dry_run);
        let killed = with_dry_run(&live, true);
        assert!(Config::from_yaml(&killed).unwrap().dry_run);
        assert_eq!(killed, example, "only the one line changes");
    }

    #[test]
    fn a_config_over_the_parameter_limit_is_refused_before_anything_is_written() {
        let example = include_str!("../../../../ballast.example.yaml");
        let big = format!("{example}{}", "# padding\n".repeat(500));
        let err = refuse_invalid("big.yaml", &big).unwrap_err().to_string();
        assert!(
            err.starts_with("big.yaml has 8645 bytes; an SSM parameter (Advanced tier) holds at most 8192"),
            "{err}"
        );
    }
}
