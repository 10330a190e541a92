//! `ballast`: plan offline, check events and config.

mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "ballast", version, about = "Fast, safe spot capacity for EKS: simulate, plan, check")]
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
    /// (e.g. AWS_ENDPOINT_URL=http://127.0.0.1:5000 for moto).
    #[cfg(feature = "aws")]
    Invoke(commands::aws::InvokeArgs),
    /// Check a deployment's wiring: rules, queues, table, ASGs; say how to fix what is wrong.
    #[cfg(feature = "aws")]
    Doctor(commands::aws::DoctorArgs),
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
}

#[derive(Subcommand)]
enum EventsCommand {
    /// Print each file's parsed signal or what is wrong with it; exit 1 if any is invalid.
    Check(commands::events::CheckArgs),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// List every problem with its path; exit 0 only when valid.
    Check(commands::config::CheckArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => commands::simulate::run(args),
        Command::Plan(args) => commands::plan::run(args),
        #[cfg(feature = "aws")]
        Command::Invoke(args) => commands::aws::invoke(args),
        #[cfg(feature = "aws")]
        Command::Doctor(args) => commands::aws::doctor(args),
        Command::Events { command: EventsCommand::Check(args) } => commands::events::check(args),
        Command::Config { command: ConfigCommand::Check(args) } => commands::config::check(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
