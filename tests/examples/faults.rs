//! Benchmark: faults. The same events go to deployments in moto: one clean, the others
//! behind an interceptor that answers Auto Scaling calls with 503 Throttling after moto
//! carried them out (every 10th call; then 1 in 10 at random, seeded). Failed messages
//! are redelivered (as SQS would) and failed ticks re-run until all succeed. Prints the
//! final states side by side and checks that total capacity never dropped below where it
//! started, and that at rest each faulty run holds at least the clean run's capacity and
//! no more above it than the surplus Ballast named (a raise whose answer was lost is
//! made again: doubts go to surplus, never loss). Run with `scripts/bench-aws`.

use ballast_tests::fault_run::{interruptions_then_capacity_error, problems as problems_of, Outcome, INITIAL_TOTAL};
use ballast_tests::moto::Faults;

async fn run(faults: Option<Faults>) -> Outcome {
    interruptions_then_capacity_error(faults).await.expect("moto_server (scripts/bench-aws installs it)")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // The plans' notes (why each surplus was left) with RUST_LOG=info.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .init();
    const SEEDS: std::ops::RangeInclusive<u64> = 1..=5;
    println!(
        "faults: 30 interruptions, a capacity error, 6 ticks; Auto Scaling calls answered 503 Throttling after moto \
         carried them out: every 10th call, then 1 in 10 at random (seeds {}-{})",
        SEEDS.start(),
        SEEDS.end()
    );
    let clean = run(None).await;
    let mut runs = vec![("clean".to_string(), clean)];
    runs.push(("every 10th".to_string(), run(Some(Faults::every(10))).await));
    for seed in SEEDS {
        runs.push((format!("seed {seed}"), run(Some(Faults::one_in(10, seed))).await));
    }
    println!(
        "{:<12}{:>7}{:>8}{:>6}{:>6}{:>7}{:>7}{:>8}{:>8}{:>8}",
        "run", "faults", "retries", "spot", "od", "units", "total", "+clean", "named", "lowest"
    );
    let clean = runs[0].1.state;
    let mut problems = Vec::new();
    for (name, r) in &runs {
        let s = r.state;
        let over = s.total() - clean.total();
        println!(
            "{name:<12}{:>7}{:>8}{:>6}{:>6}{:>7}{:>7}{:>8}{:>8}{:>8}",
            r.injected,
            r.redeliveries,
            s.spot_desired,
            s.on_demand_desired,
            s.fallback_units,
            s.total(),
            format!("{over:+}"),
            r.surplus_named,
            r.lowest_total.as_ref().map_or("?".to_string(), |l| l.to_string())
        );
        problems.extend(problems_of(&clean, r).into_iter().map(|p| format!("{name}: {p}")));
    }
    assert_eq!(runs[0].1.surplus_named, 0, "the clean run named surplus");
    let faulty = &runs[1..];
    assert!(faulty.iter().all(|(_, r)| r.injected > 0), "a run had no fault injected");
    assert!(problems.is_empty(), "{problems:#?}");
    let injected: usize = faulty.iter().map(|(_, r)| r.injected).sum();
    let most_over = faulty.iter().map(|(_, r)| r.state.total() - clean.total()).max().unwrap_or(0);
    let same = faulty.iter().filter(|(_, r)| r.state == clean).count();
    let lowest = faulty.iter().filter_map(|(_, r)| r.lowest_total.clone().ok()).min().unwrap_or(INITIAL_TOTAL);
    println!(
        "row: {} faulty runs, {injected} faults injected: {same} at rest in the clean run's state, the others above it by \
         at most {most_over} instance(s), each within the surplus Ballast named (metric SurplusNamed); total desired \
         after every write (replayed from moto's requests) never below its start ({INITIAL_TOTAL}; lowest {lowest})",
        faulty.len()
    );
}
