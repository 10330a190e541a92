use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use ballast_sim::{simulate, with_headroom_percent, Report, Scenario, Strategy};
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

#[derive(Args)]
pub struct SimulateArgs {
    /// A built-in scenario (business-day, steady, spot-heavy, no-spot, large) or a YAML file.
    #[arg(default_value = ballast_sim::scenario::DEFAULT_NAME)]
    scenario: String,
    /// Random seed: the same seed gives identical output.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write an SVG: spot and on-demand nodes, pending pods and headroom over time, per strategy.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Run one strategy only.
    #[arg(long, value_enum)]
    strategy: Option<StrategyArg>,
    /// Vary Ballast's headroom percent, e.g. `headroom=0:50:5`: cost against p95 wait.
    #[arg(long, value_name = "headroom=FROM:TO:STEP")]
    sweep: Option<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum StrategyArg {
    /// cluster-autoscaler alone
    Ca,
    /// cluster-autoscaler with fixed pause pods
    Static,
    /// cluster-autoscaler with Ballast
    Ballast,
}

impl From<StrategyArg> for Strategy {
    fn from(s: StrategyArg) -> Strategy {
        match s {
            StrategyArg::Ca => Strategy::ClusterAutoscaler,
            StrategyArg::Static => Strategy::StaticOverprovisioning,
            StrategyArg::Ballast => Strategy::Ballast,
        }
    }
}

fn load(name: &str) -> anyhow::Result<Scenario> {
    let path = PathBuf::from(name);
    if path.extension().is_some_and(|e| e == "yaml" || e == "yml") || path.exists() {
        let text =
            String::from_utf8(super::read(&path)?).with_context(|| format!("{} is not UTF-8 text", path.display()))?;
        return Scenario::from_yaml(&text).with_context(|| format!("{} is not a valid scenario", path.display()));
    }
    // An unknown name is a usage error, like any other bad argument.
    Scenario::built_in(name).map_err(|e| super::Unusable::Usage(e.to_string()).into())
}

fn parse_sweep(spec: &str) -> anyhow::Result<Vec<u32>> {
    let Some(range) = spec.strip_prefix("headroom=") else {
        bail!("--sweep: expected headroom=FROM:TO:STEP, got `{spec}`")
    };
    let parts: Vec<u32> = range
        .split(':')
        .map(|p| p.parse::<u32>().with_context(|| format!("--sweep: `{p}` is not a whole number")))
        .collect::<anyhow::Result<_>>()?;
    let [from, to, step] = parts[..] else { bail!("--sweep: expected three numbers FROM:TO:STEP, got `{range}`") };
    if step == 0 || from > to || to > 1000 {
        bail!("--sweep: need FROM <= TO <= 1000 and STEP > 0");
    }
    Ok((from..=to).step_by(step as usize).collect())
}

/// One simulation to run.
struct Job<'a> {
    label: String,
    scenario: &'a Scenario,
    strategy: Strategy,
}

/// Runs the jobs on the machine's cores, with progress bars on a terminal; results in job order.
fn run_all(jobs: Vec<Job<'_>>, seed: u64) -> Vec<Report> {
    let bars = MultiProgress::new();
    let show = std::io::stderr().is_terminal();
    let style = ProgressStyle::with_template("{prefix:>16} [{bar:30}] {percent:>3}%")
        .expect("a valid template")
        .progress_chars("=> ");
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).min(jobs.len()).max(1);
    let queue = std::sync::Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>());
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let Some((index, job)) = queue.lock().expect("queue").pop() else { break };
                let bar = if show { bars.add(ProgressBar::new(100)) } else { ProgressBar::hidden() };
                bar.set_style(style.clone());
                bar.set_prefix(job.label);
                let report = simulate(job.scenario, job.strategy, seed, &mut |f| bar.set_position((f * 100.0) as u64));
                bar.finish_and_clear();
                results.lock().expect("results").push((index, report));
            });
        }
    });
    let mut results = results.into_inner().expect("results");
    results.sort_by_key(|(index, _)| *index);
    results.into_iter().map(|(_, report)| report).collect()
}

fn duration(seconds: Option<f64>) -> String {
    match seconds {
        None => "—".into(),
        Some(s) => humanise(s),
    }
}

fn humanise(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

fn print_table(scenario: &Scenario, seed: u64, reports: &[Report]) {
    println!("scenario {} — {}", scenario.name, scenario.description);
    println!(
        "{} simulated, seed {seed}, CA fail-fast {}\n",
        humanise(scenario.duration.0.as_secs_f64()),
        if scenario.ca.fail_fast { "on (1.24+)" } else { "off (before 1.24)" }
    );
    let mut rows: Vec<(&str, Vec<String>)> = vec![
        ("pod wait p50", reports.iter().map(|r| humanise(r.pod_wait_p50_s)).collect()),
        ("pod wait p95", reports.iter().map(|r| humanise(r.pod_wait_p95_s)).collect()),
        ("pod wait max", reports.iter().map(|r| humanise(r.pod_wait_max_s)).collect()),
        ("pending pod-seconds", reports.iter().map(|r| format!("{:.0}", r.pending_pod_seconds)).collect()),
        ("spot node-hours", reports.iter().map(|r| format!("{:.1}", r.spot_node_hours)).collect()),
        ("on-demand node-hours", reports.iter().map(|r| format!("{:.1}", r.on_demand_node_hours)).collect()),
        ("cost", reports.iter().map(|r| format!("${:.2}", r.cost)).collect()),
        ("mean spare capacity", reports.iter().map(|r| format!("{:.1}%", r.mean_spare_capacity_pct)).collect()),
        ("spot loss → on-demand", reports.iter().map(|r| duration(r.spot_loss_to_on_demand_s)).collect()),
        ("back to spot after", reports.iter().map(|r| duration(r.return_to_spot_s)).collect()),
    ];
    rows.push(("spot interruptions", reports.iter().map(|r| r.interruptions.to_string()).collect()));
    rows.push(("peak nodes / pods", reports.iter().map(|r| format!("{} / {}", r.peak_nodes, r.peak_pods)).collect()));
    print!("{:<22}", "");
    for r in reports {
        print!("{:>15}", r.strategy);
    }
    println!();
    for (label, cells) in rows {
        print!("{label:<22}");
        for c in cells {
            print!("{c:>15}");
        }
        println!();
    }
}

pub fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let scenario = load(&args.scenario)?;
    let seed = args.seed;
    let started = Instant::now();
    if let Some(spec) = &args.sweep {
        // A malformed --sweep is a usage error, like any other bad argument.
        let percents = parse_sweep(spec).map_err(|e| super::Unusable::Usage(format!("{e:#}")))?;
        let scenarios: Vec<Scenario> = percents.iter().map(|p| with_headroom_percent(&scenario, *p)).collect();
        let jobs = scenarios
            .iter()
            .zip(&percents)
            .map(|(scenario, p)| Job { label: format!("headroom {p}%"), scenario, strategy: Strategy::Ballast })
            .collect();
        let reports = run_all(jobs, seed);
        let points: Vec<ballast_sim::plot::SweepPoint> = percents
            .iter()
            .zip(&reports)
            .map(|(p, r)| ballast_sim::plot::SweepPoint {
                headroom_percent: *p,
                cost: r.cost,
                pod_wait_p95_s: r.pod_wait_p95_s,
                mean_spare_capacity_pct: r.mean_spare_capacity_pct,
            })
            .collect();
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({ "scenario": scenario.name, "seed": seed, "sweep": points })
                )?
            );
        } else {
            println!("scenario {} — Ballast headroom sweep, seed {seed}\n", scenario.name);
            println!("{:>10} {:>10} {:>14} {:>14}", "headroom", "cost", "pod wait p95", "mean spare");
            for p in &points {
                println!(
                    "{:>9}% {:>10} {:>14} {:>13.1}%",
                    p.headroom_percent,
                    format!("${:.2}", p.cost),
                    humanise(p.pod_wait_p95_s),
                    p.mean_spare_capacity_pct
                );
            }
        }
        if let Some(path) = &args.plot {
            ballast_sim::plot::sweep(path, &scenario.name, &points)?;
            eprintln!("wrote {}", path.display());
        }
    } else {
        let strategies: Vec<Strategy> = match args.strategy {
            Some(one) => vec![one.into()],
            None => Strategy::ALL.to_vec(),
        };
        let jobs = strategies
            .iter()
            .map(|&strategy| Job { label: strategy.label().to_string(), scenario: &scenario, strategy })
            .collect();
        let reports = run_all(jobs, seed);
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({ "scenario": scenario.name, "seed": seed, "strategies": reports })
                )?
            );
        } else {
            print_table(&scenario, seed, &reports);
        }
        if let Some(path) = &args.plot {
            ballast_sim::plot::timeline(path, &scenario.name, &reports)?;
            eprintln!("wrote {}", path.display());
        }
    }
    if !args.json {
        eprintln!("\n(simulated in {:.1}s)", started.elapsed().as_secs_f64());
    }
    Ok(ExitCode::SUCCESS)
}
