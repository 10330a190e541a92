//! `ballast`: plan offline, check events and config.
//!
//! Exit codes mean the same for every command ([`commands::EXIT_CODES_HELP`]): 0 ok,
//! 1 findings or an invalid input, 2 a usage error or an input that cannot be read.

mod commands;
mod markdown_help;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ballast",
    version,
    about = "Fast, safe spot capacity for EKS: simulate, plan, check",
    after_help = commands::EXIT_CODES_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a pool with cluster-autoscaler, alone, with static overprovisioning and
    /// with Ballast, and compare (the built-in business day unless a scenario is named).
    Simulate(commands::simulate::SimulateArgs),
    /// Print the Plan (JSON) Ballast would make for events against a state snapshot.
    Plan(commands::plan::PlanArgs),
    /// Run a function's handler in-process against the AWS endpoint of the environment
    /// (e.g. AWS_ENDPOINT_URL=http://127.0.0.1:5000 for moto); print its result and the
    /// EMF metrics the run wrote (`metrics`) as one JSON object.
    #[cfg(feature = "aws")]
    Invoke(commands::aws::InvokeArgs),
    /// Check a deployment's wiring: rules, queues, table, ASGs; say how to fix what is wrong.
    #[cfg(feature = "aws")]
    Doctor(commands::aws::DoctorArgs),
    /// List the dead-letter queue's letters and why each is there; with `--replay`, send
    /// each back where it failed (an event to the events queue, a failed invocation to
    /// its function).
    #[cfg(feature = "aws")]
    DeadLetters(commands::aws::DeadLettersArgs),
    #[cfg(not(feature = "aws"))]
    #[command(hide = true)]
    Invoke(NeedsAws),
    #[cfg(not(feature = "aws"))]
    #[command(hide = true)]
    Doctor(NeedsAws),
    #[cfg(not(feature = "aws"))]
    #[command(hide = true)]
    DeadLetters(NeedsAws),
    /// Parse and validate event files.
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// Validate a ballast.yaml.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Print a shell completion script, e.g. `ballast completions bash > /etc/bash_completion.d/ballast`.
    Completions { shell: clap_complete::Shell },
    /// Print the CLI reference (docs/src/reference/cli.md) from these definitions; a test
    /// holds the committed page to it.
    #[command(hide = true)]
    MarkdownHelp,
}

#[derive(Subcommand)]
enum EventsCommand {
    /// Print each file's parsed signal or what is wrong with it; exit 0 when all are
    /// valid, 1 if any is invalid, 2 if any cannot be read.
    Check(commands::events::CheckArgs),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// List every problem with its path, line and column; exit 0 valid, 1 invalid (or,
    /// with --strict, warned about), 2 unreadable or a usage error.
    Check(commands::config::CheckArgs),
    /// Print the JSON Schema of ballast.yaml, for editors (yaml-language-server) and CI.
    Schema,
    /// Validate a config, show what changes against the live version, and write it to
    /// its SSM parameter; the functions and the forwarder take it within seconds.
    #[cfg(feature = "aws")]
    Push(commands::config_home::PushArgs),
    /// Print the live config (its version on stderr).
    #[cfg(feature = "aws")]
    Pull(commands::config_home::PullArgs),
    /// Needs the `aws` feature (this build has none).
    #[cfg(not(feature = "aws"))]
    #[command(hide = true)]
    Push(NeedsAws),
    /// Needs the `aws` feature (this build has none).
    #[cfg(not(feature = "aws"))]
    #[command(hide = true)]
    Pull(NeedsAws),
}

/// A command of the `aws` feature, asked of a build without it: takes any arguments and
/// says how to get a build that has it.
#[cfg(not(feature = "aws"))]
#[derive(clap::Args)]
struct NeedsAws {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _args: Vec<String>,
}

#[cfg(not(feature = "aws"))]
fn needs_aws(command: &str) -> anyhow::Result<ExitCode> {
    Err(commands::Unusable::Usage(format!(
        "`ballast {command}` talks to AWS, and this build has no `aws` feature: install the released binary \
         (docs/src/getting-started.md), or build with `cargo install --locked --path functions/cli --features aws`"
    ))
    .into())
}

/// A closed stdout (`ballast ... | head -1`) ends the command quietly, as it does any Unix
/// filter: Rust ignores SIGPIPE, so each print would otherwise panic on EPIPE.
#[cfg(unix)]
#[allow(unsafe_code)]
fn die_quietly_on_a_closed_pipe() {
    // SAFETY: restores the default disposition before any thread starts; no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn die_quietly_on_a_closed_pipe() {}

fn main() -> ExitCode {
    die_quietly_on_a_closed_pipe();
    // Every command that reports takes `--json`; with it, an error (clap's own usage
    // errors too) is one JSON object on stderr.
    let json = std::env::args_os().skip(1).any(|arg| arg == "--json");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version are not errors: clap prints them on stdout.
        Err(err) if json && err.use_stderr() => {
            let message = err.render().to_string();
            // clap's own text starts `error: ` and ends with the usage and where to look
            // for help: the first paragraph says what is wrong.
            let message = message.trim().trim_start_matches("error: ").split("\n\n").next().unwrap_or_default();
            return commands::report_error(&commands::usage(message), true);
        }
        Err(err) => err.exit(),
    };
    let result = match cli.command {
        Command::Simulate(args) => commands::simulate::run(args),
        Command::Plan(args) => commands::plan::run(args),
        #[cfg(feature = "aws")]
        Command::Invoke(args) => commands::aws::invoke(args),
        #[cfg(feature = "aws")]
        Command::Doctor(args) => commands::aws::doctor(args),
        #[cfg(feature = "aws")]
        Command::DeadLetters(args) => commands::aws::dead_letters(args),
        Command::Events { command: EventsCommand::Check(args) } => commands::events::check(args),
        #[cfg(not(feature = "aws"))]
        Command::Invoke(_) => needs_aws("invoke"),
        #[cfg(not(feature = "aws"))]
        Command::Doctor(_) => needs_aws("doctor"),
        #[cfg(not(feature = "aws"))]
        Command::DeadLetters(_) => needs_aws("dead-letters"),
        Command::Config { command: ConfigCommand::Check(args) } => commands::config::check(args),
        Command::Config { command: ConfigCommand::Schema } => commands::config::schema(),
        #[cfg(feature = "aws")]
        Command::Config { command: ConfigCommand::Push(args) } => commands::config_home::push(args),
        #[cfg(feature = "aws")]
        Command::Config { command: ConfigCommand::Pull(args) } => commands::config_home::pull(args),
        #[cfg(not(feature = "aws"))]
        Command::Config { command: ConfigCommand::Push(_) } => needs_aws("config push"),
        #[cfg(not(feature = "aws"))]
        Command::Config { command: ConfigCommand::Pull(_) } => needs_aws("config pull"),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "ballast", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::MarkdownHelp => {
            print!("{}", markdown_help::page(Cli::command()));
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(err) => commands::report_error(&err, json),
    }
}
