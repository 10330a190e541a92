//! `ballast simulate`'s command line: the arguments, and the settings `--sweep`, `--set`
//! and `--pause-pod` take, read into what the simulator runs.

use std::path::PathBuf;

use anyhow::{bail, Context};
use ballast_core::shape::PodShape;
use ballast_sim::scenario::Scoring;
use ballast_sim::{HeadroomKnob, Strategy};
use clap::Args;

#[derive(Args)]
pub struct SimulateArgs {
    /// A built-in scenario (business-day, steady, spot-heavy, no-spot, large, batch-from-zero,
    /// ml-watermark, priority-fallback, two-pools, week, ml-gpu, mixed) or a YAML file.
    #[arg(default_value = ballast_sim::scenario::DEFAULT_NAME)]
    pub(super) scenario: String,
    /// First random seed: the same seeds give identical output.
    #[arg(long, default_value_t = 42)]
    pub(super) seed: u64,
    /// How many seeds to run (SEED, SEED+1, ...): figures are the mean ± the standard
    /// deviation over them. One seed gives one run's figures.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub(super) seeds: u64,
    /// Print JSON instead of a table: per strategy (`strategy`, and `id` as `--strategy`
    /// takes it) a `summary` of each figure's `mean`, `sd` and `runs`, keyed as each run's
    /// report is (`pod_wait_p95_s`, `cost_usd`), and the `runs`; with `--sweep`, the
    /// `sweep` points. An error is a JSON object on stderr.
    #[arg(long)]
    pub(super) json: bool,
    /// Write an SVG: spot and on-demand nodes, pending pods and headroom over time, per strategy.
    #[arg(long, value_name = "FILE.svg")]
    pub(super) plot: Option<PathBuf>,
    /// Run one strategy only (without it, the baselines run again with Capacity
    /// Rebalancing too).
    #[arg(long, value_enum)]
    pub(super) strategy: Option<StrategyArg>,
    /// Vary one of Ballast's headroom settings: cost against p95 wait, and how long
    /// `headroom.max`/`min` held the pause pods. SETTING is `headroom` (the percent,
    /// fixed all day), `headroom.min`, `headroom.max` or `target` (the wait target,
    /// learned headroom); e.g. `headroom=0:50:5`, `target=5s:60s:5s`.
    #[arg(long, value_name = "SETTING=FROM:TO:STEP")]
    pub(super) sweep: Option<String>,
    /// Set one of the settings `--sweep` varies, in every Ballast pool, before any sweep
    /// (repeatable, applied in order). `headroom=0` fixes the percent and clears
    /// schedules and a wait target, so `--set headroom=0 --sweep target=10s:90s:10s`
    /// learns with no percent to start from.
    #[arg(long = "set", value_name = "SETTING=VALUE")]
    pub(super) set: Vec<String>,
    /// Run the scenario's span N times in a row (a one-day scenario becomes N days: its
    /// batches, spot capacity losses and storms come again each day): what learns from
    /// history (`headroom.target`) has some. The first span counts in every figure.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=60))]
    pub(super) repeat: u32,
    /// How the scheduler picks a node among those a pod fits on: `first-fit` (the first,
    /// tight packing) or `least-allocated` (kube-scheduler's default: the emptiest by CPU
    /// and memory share). Default: the scenario's (`scheduler.scoring`, first-fit unless set).
    #[arg(long, value_enum)]
    pub(super) scoring: Option<ScoringArg>,
    /// Pause pods of one fixed shape, `CPU/MEMORY` (e.g. `4/14Gi`), with extended
    /// resources after commas (`3/12Gi,nvidia.com/gpu=1`), in every pool, for Ballast
    /// and the static baseline alike: what a fixed pause-pod shape does against the
    /// shapes Ballast learns. `headroom.min` and `.max` keep the room they bound, in pods
    /// of this shape; the static replicas count pods of this shape.
    #[arg(long, value_name = "CPU/MEMORY[,RESOURCE=N]", value_parser = parse_pause_pod)]
    pub(super) pause_pod: Option<PodShape>,
}

/// `CPU/MEMORY[,RESOURCE=N...]` as Kubernetes quantities, each more than zero.
fn parse_pause_pod(text: &str) -> Result<PodShape, String> {
    let mut parts = text.split(',');
    let requests = parts.next().unwrap_or_default();
    let (cpu, memory) = requests
        .split_once('/')
        .ok_or_else(|| format!("expected CPU/MEMORY, e.g. 4/14Gi or 3/12Gi,nvidia.com/gpu=1, got `{text}`"))?;
    let cpu = ballast_core::units::parse_cpu_millis(cpu).map_err(|e| format!("CPU `{cpu}`: {e}"))?;
    let memory = ballast_core::units::parse_memory_bytes(memory).map_err(|e| format!("memory `{memory}`: {e}"))?;
    if cpu == 0 || memory == 0 {
        return Err(format!("`{text}`: CPU and memory must be more than zero"));
    }
    let mut shape = PodShape::new(cpu, memory);
    for resource in parts {
        let (name, count) = resource
            .split_once('=')
            .ok_or_else(|| format!("`{resource}`: expected RESOURCE=N, e.g. nvidia.com/gpu=1"))?;
        let count: u64 = count.parse().map_err(|_| format!("`{resource}`: N must be a whole number"))?;
        if name.is_empty() || count == 0 {
            return Err(format!("`{resource}`: a resource name and a count of at least 1"));
        }
        shape.extended.insert(name.into(), count);
    }
    Ok(shape)
}

/// A shape as `--pause-pod` reads it back.
pub(super) fn pause_pod_arg(shape: &PodShape) -> String {
    use ballast_core::units::{format_cpu_millis, format_memory_bytes};
    let mut arg = format!("{}/{}", format_cpu_millis(shape.cpu_millis), format_memory_bytes(shape.memory_bytes));
    for (name, count) in &shape.extended {
        arg += &format!(",{name}={count}");
    }
    arg
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(super) enum ScoringArg {
    #[value(alias = "first_fit")]
    FirstFit,
    #[value(alias = "least_allocated")]
    LeastAllocated,
}

impl From<ScoringArg> for Scoring {
    fn from(s: ScoringArg) -> Scoring {
        match s {
            ScoringArg::FirstFit => Scoring::FirstFit,
            ScoringArg::LeastAllocated => Scoring::LeastAllocated,
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(super) enum StrategyArg {
    /// cluster-autoscaler alone
    Ca,
    /// cluster-autoscaler with fixed pause pods
    Static,
    /// cluster-autoscaler with Ballast
    Ballast,
}

impl StrategyArg {
    /// The name `--strategy` takes.
    pub(super) fn name(self) -> String {
        use clap::ValueEnum;
        self.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
    }

    /// The name `--strategy` takes for the strategy a report labels (`CA alone`: `ca`).
    pub(super) fn name_of_label(label: &str) -> Option<String> {
        use clap::ValueEnum;
        StrategyArg::value_variants().iter().find(|arg| Strategy::from(**arg).label() == label).map(|arg| arg.name())
    }
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

fn parse_knob(flag: &str, key: &str) -> anyhow::Result<HeadroomKnob> {
    HeadroomKnob::parse(key).with_context(|| {
        format!("{flag}: `{key}` is not a setting it can vary (headroom, headroom.min, headroom.max, target)")
    })
}

/// A value of `knob`: a whole number, or for a wait target whole seconds (`5s`, `1m`, `90`)
/// within what ballast.yaml allows.
fn parse_value(flag: &str, knob: HeadroomKnob, p: &str) -> anyhow::Result<u32> {
    let value = parse_amount(flag, knob, p)?;
    if knob == HeadroomKnob::Target && !(1..=3600).contains(&value) {
        bail!("{flag}: `{p}`: a wait target is 1s to 60m, as in ballast.yaml");
    }
    Ok(value)
}

/// The same without the bounds (a sweep's step is no target).
fn parse_amount(flag: &str, knob: HeadroomKnob, p: &str) -> anyhow::Result<u32> {
    if knob != HeadroomKnob::Target {
        return p.parse::<u32>().with_context(|| format!("{flag}: `{p}` is not a whole number"));
    }
    let secs = match p.parse::<u32>() {
        Ok(n) => u64::from(n),
        Err(_) => {
            let d =
                p.parse::<ballast_core::units::HumanDuration>().map_err(|e| anyhow::anyhow!("{flag}: `{p}`: {e}"))?;
            if d.0.subsec_nanos() != 0 {
                bail!("{flag}: `{p}` is not a whole number of seconds");
            }
            d.0.as_secs()
        }
    };
    u32::try_from(secs).with_context(|| format!("{flag}: `{p}` is too long"))
}

pub(super) fn parse_sweep(spec: &str) -> anyhow::Result<(HeadroomKnob, Vec<u32>)> {
    let Some((key, range)) = spec.split_once('=') else {
        bail!("--sweep: expected SETTING=FROM:TO:STEP, e.g. headroom=0:50:5, got `{spec}`")
    };
    let knob = parse_knob("--sweep", key)?;
    let parts: Vec<&str> = range.split(':').collect();
    let [from, to, step] = parts[..] else { bail!("--sweep: expected three numbers FROM:TO:STEP, got `{range}`") };
    let (from, to) = (parse_value("--sweep", knob, from)?, parse_value("--sweep", knob, to)?);
    let step = parse_amount("--sweep", knob, step)?;
    if step == 0 || from > to || to > 10_000 {
        bail!("--sweep: need FROM <= TO <= 10000 and STEP > 0");
    }
    Ok((knob, (from..=to).step_by(step as usize).collect()))
}

pub(super) fn parse_set(spec: &str) -> anyhow::Result<(HeadroomKnob, u32)> {
    let Some((key, value)) = spec.split_once('=') else {
        bail!("--set: expected SETTING=VALUE, e.g. headroom=0 or target=30s, got `{spec}`")
    };
    let knob = parse_knob("--set", key)?;
    let value = parse_value("--set", knob, value)?;
    if value > 10_000 {
        bail!("--set: {value} is above 10000, as --sweep allows");
    }
    Ok((knob, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_pod_shape_reads_back_as_written() {
        for text in ["4/14Gi", "500m/1Gi", "3/12Gi,nvidia.com/gpu=1"] {
            let shape = parse_pause_pod(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(pause_pod_arg(&shape), text);
        }
        assert_eq!(parse_pause_pod("3/12Gi,nvidia.com/gpu=1").unwrap().extended["nvidia.com/gpu"], 1);
        for bad in
            ["4", "0/1Gi", "4/0", "4/14Gi,nvidia.com/gpu", "4/14Gi,nvidia.com/gpu=0", "4/14Gi,=1", "4/14Gi,gpu=x"]
        {
            assert!(parse_pause_pod(bad).is_err(), "{bad} was read");
        }
    }
}
