use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use ballast_sim::scenario::{InterruptionHandling, Scoring};
use ballast_sim::{simulate, with_headroom, HeadroomKnob, Report, Scenario, ScenarioError, Strategy};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

mod args;
pub use args::SimulateArgs;
use args::{parse_set, parse_sweep};

fn load(name: &str) -> anyhow::Result<Scenario> {
    let path = PathBuf::from(name);
    if path.extension().is_some_and(|e| e == "yaml" || e == "yml") || path.exists() {
        let text = super::read_text(&path)?;
        return Scenario::from_yaml(&text).map_err(|e| {
            let file = path.display().to_string();
            match e {
                // Where it is, as `config check` says a config's problems.
                ScenarioError::Field(issue) => {
                    let at = super::located(&file, &issue.path, &issue.message, issue.line, issue.column);
                    let message = format!("{file} is not a valid scenario:\n  {at}");
                    super::Invalid { input: Some(path.clone()), message, problems: vec![issue] }.into()
                }
                other => super::Invalid::input(&path, format!("{file} is not a valid scenario: {other}")).into(),
            }
        });
    }
    // An unknown name is a usage error, like any other bad argument.
    Scenario::built_in(name).map_err(|e| super::Unusable::Usage(e.to_string()).into())
}

/// `--plot`'s file, refused before anything runs when the plot could not be written
/// there: another format than SVG (a usage error), or a file that cannot be created or
/// written (a missing directory, a read-only one). A file made only to find that out is
/// removed again.
fn check_plot_path(path: &Path) -> Result<(), super::Unusable> {
    if !path.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg")) {
        return Err(super::Unusable::Usage(format!("--plot {}: only SVG is drawn: name a .svg file", path.display())));
    }
    let existed = path.exists();
    let unwritable = |source| super::Unusable::Unwritable { path: path.to_path_buf(), source };
    std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(path).map_err(unwritable)?;
    if !existed {
        std::fs::remove_file(path).map_err(unwritable)?;
    }
    Ok(())
}

/// One simulation to run.
struct Job<'a> {
    label: String,
    scenario: &'a Scenario,
    strategy: Strategy,
    seed: u64,
}

/// Each strategy on each seed, in that order; `tag` marks the progress bars.
fn jobs_for<'a>(strategies: &[Strategy], scenario: &'a Scenario, seeds: &[u64], tag: &str) -> Vec<Job<'a>> {
    strategies
        .iter()
        .flat_map(|&strategy| {
            seeds.iter().map(move |&seed| Job {
                label: format!("{}{tag} #{seed}", strategy.label()),
                scenario,
                strategy,
                seed,
            })
        })
        .collect()
}

/// Runs the jobs on the machine's cores, with progress bars on a terminal; results in job order.
fn run_all(jobs: Vec<Job<'_>>) -> Vec<Report> {
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
                let report =
                    simulate(job.scenario, job.strategy, job.seed, &mut |f| bar.set_position((f * 100.0) as u64));
                bar.finish_and_clear();
                results.lock().expect("results").push((index, report));
            });
        }
    });
    let mut results = results.into_inner().expect("results");
    results.sort_by_key(|(index, _)| *index);
    results.into_iter().map(|(_, report)| report).collect()
}

fn humanise(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The figures of one seed's run, or their mean ± standard deviation over several.
/// Mean and sample standard deviation (0 for one value); `None` for no values.
fn mean_sd(values: &[f64]) -> Option<(f64, f64)> {
    let n = values.len() as f64;
    let mean = (n > 0.0).then(|| values.iter().sum::<f64>() / n)?;
    let sd = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt();
    Some((mean, sd))
}

fn cell(values: &[Option<f64>], show: &dyn Fn(f64) -> String) -> String {
    let seen: Vec<f64> = values.iter().flatten().copied().collect();
    let Some((mean, sd)) = mean_sd(&seen) else { return "—".into() };
    let mut text = show(mean);
    if values.len() > 1 {
        text = format!("{text} ± {}", show(sd));
        if seen.len() < values.len() {
            text = format!("{text} ({}/{})", seen.len(), values.len());
        }
    }
    text
}

/// Whether aws-node-termination-handler drained the run's nodes on spot signals (in a
/// Ballast run, those of groups outside its pools).
fn nth(r: &Report) -> bool {
    r.interruption_handling == InterruptionHandling::NodeTerminationHandler
}

fn capacity_rebalance(r: &Report) -> bool {
    r.interruption_handling == InterruptionHandling::CapacityRebalance
}

/// A row of the table: its label for people, its key in `--json`'s summary (the
/// report's field, the unit in its name), its value in one run and how it is shown.
struct Row {
    label: &'static str,
    key: &'static str,
    value: fn(&Report) -> Option<f64>,
    show: fn(f64) -> String,
}

const fn row(
    label: &'static str,
    key: &'static str,
    value: fn(&Report) -> Option<f64>,
    show: fn(f64) -> String,
) -> Row {
    Row { label, key, value, show }
}

const WAIT_P95: &str = "first-start wait p95";

fn count(v: f64) -> String {
    format!("{v:.1}")
}

fn percent(v: f64) -> String {
    format!("{v:.1}%")
}

const ROWS: [Row; 21] = [
    row("first-start wait p50", "pod_wait_p50_s", |r| Some(r.pod_wait_p50_s), humanise),
    row(WAIT_P95, "pod_wait_p95_s", |r| Some(r.pod_wait_p95_s), humanise),
    row("first-start wait max", "pod_wait_max_s", |r| Some(r.pod_wait_max_s), humanise),
    row("re-placed wait p95", "replaced_wait_p95_s", |r| Some(r.replaced_wait_p95_s), humanise),
    row("pending pod-seconds", "pending_pod_seconds", |r| Some(r.pending_pod_seconds), |v| format!("{v:.0}")),
    row("spot node-hours", "spot_node_hours", |r| Some(r.spot_node_hours), |v| format!("{v:.1}")),
    row("on-demand node-hours", "on_demand_node_hours", |r| Some(r.on_demand_node_hours), |v| format!("{v:.1}")),
    row("cost", "cost_usd", |r| Some(r.cost), |v| format!("${v:.2}")),
    row("mean spare capacity", "mean_spare_capacity_pct", |r| Some(r.mean_spare_capacity_pct), percent),
    row("spot loss → on-demand", "spot_loss_to_on_demand_s", |r| r.spot_loss_to_on_demand_s, humanise),
    row("back to spot after", "return_to_spot_s", |r| r.return_to_spot_s, humanise),
    row("spot interruptions", "interruptions", |r| Some(f64::from(r.interruptions)), count),
    row("rebalance signals", "rebalance_recommendations", |r| Some(f64::from(r.rebalance_recommendations)), count),
    row(
        "  of them false",
        "false_rebalance_recommendations",
        |r| Some(f64::from(r.false_rebalance_recommendations)),
        count,
    ),
    row("NTH drains", "nth_drains", |r| nth(r).then_some(f64::from(r.nth_drains)), count),
    row(
        "CR replacements",
        "rebalance_replacements",
        |r| capacity_rebalance(r).then_some(f64::from(r.rebalance_replacements)),
        count,
    ),
    row("peak nodes", "peak_nodes", |r| Some(f64::from(r.peak_nodes)), count),
    row("headroom held at max", "headroom_held_at_max_pct", |r| r.headroom_held_at_max_pct, percent),
    row("headroom held at min", "headroom_held_at_min_pct", |r| r.headroom_held_at_min_pct, percent),
    row("CA stale slots taken", "ca_stale_slots_taken", |r| r.ca_stale_slots_taken.map(f64::from), count),
    row("raises made again", "raises_remade", |r| r.raises_remade.map(f64::from), count),
];

/// A row that only some scenarios have: its label, its key in `--json`'s summary and
/// its value in one run's report.
type ScenarioRow = (String, String, Box<dyn Fn(&Report) -> Option<f64>>);

/// Rows printed under `first-start wait p95`: with Jobs in the scenario, the p95 of
/// long-running workloads' pods and of Jobs' pods apart (a Job burst can set the p95
/// alone); over several days, each day's p95 (the first has no history to learn from).
fn wait_rows(scenario: &Scenario) -> Vec<ScenarioRow> {
    let mut rows: Vec<ScenarioRow> = Vec::new();
    if !scenario.batches.is_empty() {
        let long_running = |r: &Report| r.long_running_wait_p95_s;
        rows.push(("  long-running p95".into(), "long_running_wait_p95_s".into(), Box::new(long_running)));
        rows.push(("  Jobs p95".into(), "job_wait_p95_s".into(), Box::new(|r: &Report| r.job_wait_p95_s)));
    }
    let days = scenario.days();
    if days > 1 {
        for day in 0..days as usize {
            let value = move |r: &Report| r.daily_wait_p95_s.get(day).copied().flatten();
            let (label, key) = (format!("  day {} p95", day + 1), format!("day_{}_wait_p95_s", day + 1));
            rows.push((label, key, Box::new(value)));
        }
    }
    rows
}

/// How the runs without Ballast act on spot signals, as the table names it.
fn handling_name(handling: InterruptionHandling) -> &'static str {
    match handling {
        InterruptionHandling::NodeTerminationHandler => "aws-node-termination-handler",
        InterruptionHandling::CapacityRebalance => "Capacity Rebalancing",
        InterruptionHandling::None => "no interruption handler",
    }
}

fn table_width(seeds: &[u64]) -> usize {
    if seeds.len() > 1 {
        25
    } else {
        15
    }
}

/// The strategies' names, then every row; `skip_empty`: leave out rows with no figure
/// in any column.
fn print_rows(scenario: &Scenario, seeds: &[u64], runs: &[Vec<Report>], skip_empty: bool) {
    let width = table_width(seeds);
    print!("{:<22}", "");
    for reports in runs {
        print!("{:>width$}", reports.first().map_or("", |r| r.strategy));
    }
    println!();
    let print_row = |label: &str, value: &dyn Fn(&Report) -> Option<f64>, show: fn(f64) -> String| {
        let cells: Vec<Vec<Option<f64>>> = runs.iter().map(|reports| reports.iter().map(value).collect()).collect();
        if skip_empty && cells.iter().flatten().all(Option::is_none) {
            return;
        }
        print!("{label:<22}");
        for values in &cells {
            print!("{:>width$}", cell(values, &show));
        }
        println!();
    };
    for row in ROWS {
        print_row(row.label, &row.value, row.show);
        if row.label == WAIT_P95 {
            for (label, _, value) in wait_rows(scenario) {
                print_row(&label, &*value, humanise);
            }
        }
    }
}

/// `runs[s]` holds strategy `s`'s reports, one per seed; `other_handling`, the baselines'
/// run again under Capacity Rebalancing (empty if not run).
fn print_table(scenario: &Scenario, seeds: &[u64], runs: &[Vec<Report>], other_handling: &[Vec<Report>]) {
    println!("scenario {} — {}", scenario.name, scenario.description);
    let seeds_text = match seeds {
        [one] => format!("seed {one}"),
        many => format!("{} seeds ({}–{}), mean ± standard deviation", many.len(), many[0], many[many.len() - 1]),
    };
    let scoring = match scenario.scheduler.scoring {
        Scoring::FirstFit => String::new(),
        other => format!(", scheduler {}", other.name()),
    };
    println!(
        "{} simulated, {seeds_text}, cluster-autoscaler {} (fail-fast {}){scoring}\n",
        humanise(scenario.duration.0.as_secs_f64()),
        scenario.ca.version,
        if scenario.ca.fail_fast { "on" } else { "off" }
    );
    print_rows(scenario, seeds, runs, false);
    let width = table_width(seeds);
    // With several pools, the two rows above count a moment in which any pool was held;
    // each pool's share follows.
    let pools = scenario.pools();
    if pools.len() > 1 {
        for (i, pool) in pools.iter().enumerate() {
            for (bound, at_max) in [("max", true), ("min", false)] {
                print!("{:<22}", format!("  at {bound}, {}", pool.name));
                for reports in runs {
                    let values: Vec<Option<f64>> = reports
                        .iter()
                        .map(|r| {
                            let p = r.headroom_by_pool.get(i)?;
                            if at_max {
                                p.held_at_max_pct
                            } else {
                                p.held_at_min_pct
                            }
                        })
                        .collect();
                    print!("{:>width$}", cell(&values, &percent));
                }
                println!();
            }
        }
    }
    if let Some(first) = other_handling.first().and_then(|r| r.first()) {
        println!(
            "\nthe baselines again, with {} (EKS managed node groups) instead of {}:\n",
            handling_name(first.interruption_handling),
            handling_name(scenario.interruption_handling)
        );
        print_rows(scenario, seeds, other_handling, true);
    }
    if let Some(cut) = pending_cut(runs, other_handling) {
        let (least, most) = (&cut.against[0], &cut.against[cut.against.len() - 1]);
        let range = if cut.against.len() == 1 {
            format!("{:.0}%", least.cut_pct)
        } else if least.cut_pct.round() < 0.0 {
            // More pending than some baseline: a dash would read as a range of cuts.
            format!("{:.0}% (more pending) to {:.0}%", least.cut_pct, most.cut_pct)
        } else {
            format!("{:.0}–{:.0}%", least.cut_pct, most.cut_pct)
        };
        println!(
            "\nBallast cuts pending pod-seconds by {range} against the baselines (least: {} with {}; most: {} with {})",
            least.strategy,
            handling_name(least.interruption_handling),
            most.strategy,
            handling_name(most.interruption_handling)
        );
    }
}

/// How much Ballast cuts the mean pending pod-seconds against one baseline.
#[derive(Debug, Clone, serde::Serialize)]
struct Cut {
    strategy: &'static str,
    interruption_handling: InterruptionHandling,
    cut_pct: f64,
}

/// Ballast's cut against every baseline run, least first: the range, not one number,
/// since it depends on what the baseline runs beside CA.
#[derive(Debug, Clone, serde::Serialize)]
struct PendingCut {
    min_pct: f64,
    max_pct: f64,
    against: Vec<Cut>,
}

fn pending_cut(runs: &[Vec<Report>], other_handling: &[Vec<Report>]) -> Option<PendingCut> {
    let mean = |reports: &[Report]| {
        mean_sd(&reports.iter().map(|r| r.pending_pod_seconds).collect::<Vec<_>>()).map(|(m, _)| m)
    };
    let ballast = runs.iter().find(|r| r.first().is_some_and(|r| r.strategy == Strategy::Ballast.label()))?;
    let ballast = mean(ballast)?;
    let mut against: Vec<Cut> = runs
        .iter()
        .chain(other_handling)
        .filter_map(|reports| {
            let first = reports.first()?;
            let baseline = mean(reports)?;
            (first.strategy != Strategy::Ballast.label() && baseline > 0.0).then(|| Cut {
                strategy: first.strategy,
                interruption_handling: first.interruption_handling,
                cut_pct: 100.0 * (1.0 - ballast / baseline),
            })
        })
        .collect();
    against.sort_by(|a, b| a.cut_pct.total_cmp(&b.cut_pct));
    Some(PendingCut { min_pct: against.first()?.cut_pct, max_pct: against.last()?.cut_pct, against })
}

/// Mean and standard deviation of what the runs measured (`None`s left out).
fn summary(scenario: &Scenario, runs: &[Report]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    let mut put = |key: &str, value: &dyn Fn(&Report) -> Option<f64>| {
        let seen: Vec<f64> = runs.iter().filter_map(value).collect();
        let (mean, sd) = mean_sd(&seen).unzip();
        out.insert(key.into(), serde_json::json!({ "mean": mean, "sd": sd, "runs": seen.len() }));
    };
    for row in ROWS {
        put(row.key, &row.value);
    }
    for (_, key, value) in wait_rows(scenario) {
        put(&key, &*value);
    }
    serde_json::Value::Object(out)
}

/// Each pool's `pod_cpu`/`pod_memory`, as `--pause-pod` reads it, once each.
fn unit_shapes(scenario: &Scenario) -> Vec<String> {
    let units: std::collections::BTreeSet<_> = scenario.pools().iter().map(|p| p.headroom.unit_shape()).collect();
    units.iter().map(args::pause_pod_arg).collect()
}

pub fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let scenario = load(&args.scenario)?;
    let mut scenario = if args.repeat > 1 { scenario.repeated(args.repeat) } else { scenario };
    if let Some(scoring) = args.scoring {
        scenario = scenario.with_scoring(scoring.into());
    }
    if let Some(shape) = &args.pause_pod {
        scenario = scenario.with_pause_pod(shape);
    }
    let sweep =
        args.sweep.as_deref().map(parse_sweep).transpose().map_err(|e| super::Unusable::Usage(format!("{e:#}")))?;
    for spec in &args.set {
        // A malformed --set is a usage error, like any other bad argument.
        let (knob, value) = parse_set(spec).map_err(|e| super::Unusable::Usage(format!("{e:#}")))?;
        if knob == HeadroomKnob::Target && sweep.as_ref().is_some_and(|(k, _)| *k == HeadroomKnob::Percent) {
            let why = "--set target has no effect under --sweep headroom: a fixed percent clears the wait target";
            return Err(super::Unusable::Usage(why.into()).into());
        }
        scenario = with_headroom(&scenario, knob, value);
    }
    // A sweep varies Ballast's settings: only Ballast has them.
    if let (Some(_), Some(strategy)) = (&sweep, args.strategy) {
        if Strategy::from(strategy) != Strategy::Ballast {
            return Err(super::usage(format!(
                "--sweep varies Ballast's headroom settings and runs Ballast alone: --strategy {} has none to vary \
                 (leave --strategy out, or give --strategy ballast)",
                strategy.name()
            )));
        }
    }
    if let Some(path) = &args.plot {
        check_plot_path(path)?;
    }
    let seeds: Vec<u64> = (0..args.seeds).map(|k| args.seed.wrapping_add(k)).collect();
    let started = Instant::now();
    if let Some((knob, values)) = sweep {
        let scenarios: Vec<Scenario> = values.iter().map(|v| with_headroom(&scenario, knob, *v)).collect();
        let jobs = scenarios
            .iter()
            .zip(&values)
            .flat_map(|(scenario, v)| {
                seeds.iter().map(move |&seed| Job {
                    label: format!("{} {v} #{seed}", knob.key()),
                    scenario,
                    strategy: Strategy::Ballast,
                    seed,
                })
            })
            .collect();
        let reports = run_all(jobs);
        let mean = |runs: &[Report], f: fn(&Report) -> f64| {
            mean_sd(&runs.iter().map(f).collect::<Vec<_>>()).map_or(0.0, |(mean, _)| mean)
        };
        let points: Vec<ballast_sim::plot::SweepPoint> = values
            .iter()
            .zip(reports.chunks(seeds.len()))
            .map(|(v, runs)| ballast_sim::plot::SweepPoint {
                setting: knob.key(),
                value: *v,
                cost: mean(runs, |r| r.cost),
                pod_wait_p95_s: mean(runs, |r| r.pod_wait_p95_s),
                mean_spare_capacity_pct: mean(runs, |r| r.mean_spare_capacity_pct),
                held_at_max_pct: mean(runs, |r| r.headroom_held_at_max_pct.unwrap_or(0.0)),
                held_at_min_pct: mean(runs, |r| r.headroom_held_at_min_pct.unwrap_or(0.0)),
                runs: runs
                    .iter()
                    .zip(&seeds)
                    .map(|(r, &seed)| ballast_sim::plot::SweepRun {
                        seed,
                        cost: r.cost,
                        pod_wait_p95_s: r.pod_wait_p95_s,
                        window_wait_p95_s: r.window_wait_p95_s.clone(),
                        pool_wait_p95_s: r.waits_by_pool.iter().map(|p| p.pod_wait_p95_s).collect(),
                    })
                    .collect(),
            })
            .collect();
        // The plot first: a plot that fails leaves nothing on stdout.
        if let Some(path) = &args.plot {
            ballast_sim::plot::sweep(path, &scenario.name, &seeds, &points)?;
            if !args.json {
                eprintln!("wrote {}", path.display());
            }
        }
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "scenario": scenario.name,
                    "seeds": seeds,
                    "workload_shapes": scenario.workload_shapes().iter().map(args::pause_pod_arg).collect::<Vec<_>>(),
                    "unit_shapes": unit_shapes(&scenario),
                    "days": scenario.days(),
                    "sweep": points,
                }))?
            );
        } else {
            println!(
                "scenario {} — Ballast {} sweep, {} seed(s) from {}, means",
                scenario.name,
                knob.key(),
                seeds.len(),
                args.seed
            );
            let pools = scenario.pools();
            let settings: Vec<String> = pools
                .iter()
                .map(|pool| {
                    let cfg = &pool.headroom;
                    let named = if pools.len() > 1 { format!("pool {}: ", pool.name) } else { String::new() };
                    let schedules = if cfg.schedules.is_empty() { "" } else { " with schedules" };
                    format!("{named}headroom {}%{schedules}, min {}, max {}", cfg.percent, cfg.min, cfg.max)
                })
                .collect();
            println!("otherwise as the scenario sets it: {}\n", settings.join("; "));
            println!(
                "{:>16} {:>10} {:>16} {:>11} {:>12} {:>12}",
                knob.key(),
                "cost",
                "first-start p95",
                "mean spare",
                "held at max",
                "held at min"
            );
            for p in &points {
                let value = match knob {
                    HeadroomKnob::Percent => format!("{}%", p.value),
                    HeadroomKnob::Target => format!("{}s", p.value),
                    _ => p.value.to_string(),
                };
                println!(
                    "{value:>16} {:>10} {:>16} {:>10.1}% {:>11.1}% {:>11.1}%",
                    format!("${:.2}", p.cost),
                    humanise(p.pod_wait_p95_s),
                    p.mean_spare_capacity_pct,
                    p.held_at_max_pct,
                    p.held_at_min_pct
                );
            }
            if points.iter().any(|p| p.held_at_max_pct > 0.0 || p.held_at_min_pct > 0.0) {
                println!(
                    "\nheld at max/min: share of the run in which headroom.max kept the pause pods below\n\
                     what the percent asked for, or headroom.min above it."
                );
            }
        }
    } else {
        let strategies: Vec<Strategy> = match args.strategy {
            Some(one) => vec![one.into()],
            None => Strategy::ALL.to_vec(),
        };
        // The full comparison runs the baselines again under Capacity Rebalancing, the
        // managed node groups' default, unless the scenario has them run under it already.
        let rebalancing = scenario.with_interruption_handling(InterruptionHandling::CapacityRebalance);
        let again: Vec<Strategy> =
            if args.strategy.is_some() || scenario.interruption_handling == InterruptionHandling::CapacityRebalance {
                Vec::new()
            } else {
                strategies.iter().copied().filter(|&s| s != Strategy::Ballast).collect()
            };
        let mut jobs = jobs_for(&strategies, &scenario, &seeds, "");
        jobs.extend(jobs_for(&again, &rebalancing, &seeds, " (CR)"));
        let reports = run_all(jobs);
        let mut runs: Vec<Vec<Report>> = reports.chunks(seeds.len()).map(<[Report]>::to_vec).collect();
        let other_handling = runs.split_off(strategies.len());
        if let Some(path) = &args.plot {
            // The timeline of the first seed's runs.
            let first: Vec<Report> = runs.iter().map(|r| r[0].clone()).collect();
            // With a wait target (the first pool's that has one), its panel.
            let target = scenario.pools().iter().find_map(|p| p.headroom.target).map(|t| t.wait_p95.0.as_secs_f64());
            ballast_sim::plot::timeline(path, &scenario, seeds[0], &first, target)?;
            if !args.json {
                eprintln!("wrote {}", path.display());
            }
        }
        if args.json {
            let strategies: Vec<serde_json::Value> = runs
                .iter()
                .map(|runs| {
                    serde_json::json!({
                        "strategy": runs[0].strategy,
                        "id": args::StrategyArg::name_of_label(runs[0].strategy),
                        "summary": summary(&scenario, runs),
                        "runs": runs,
                    })
                })
                .collect();
            let again: Vec<serde_json::Value> = other_handling
                .iter()
                .map(|runs| {
                    serde_json::json!({
                        "strategy": runs[0].strategy,
                        "id": args::StrategyArg::name_of_label(runs[0].strategy),
                        "interruption_handling": runs[0].interruption_handling,
                        "summary": summary(&scenario, runs),
                        "runs": runs,
                    })
                })
                .collect();
            let mut out = serde_json::json!({ "scenario": scenario.name, "seeds": seeds, "strategies": strategies });
            if !again.is_empty() {
                out["capacity_rebalance_baselines"] = serde_json::Value::Array(again);
            }
            if let Some(cut) = pending_cut(&runs, &other_handling) {
                out["pending_pod_cut"] = serde_json::to_value(cut)?;
            }
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            print_table(&scenario, &seeds, &runs, &other_handling);
        }
    }
    // With --json, stderr holds an error or nothing.
    if !args.json {
        eprintln!("\n(simulated in {:.1}s)", started.elapsed().as_secs_f64());
    }
    Ok(ExitCode::SUCCESS)
}
