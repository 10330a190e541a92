//! The model honours known facts about cluster-autoscaler and the scheduler.

use ballast_core::units::HumanDuration;

use crate::engine::Engine;
use crate::event::Ev;
use crate::scenario::Scenario;
use crate::time::{DAY, HOUR, MINUTE, SECOND};
use crate::{simulate, with_headroom, HeadroomKnob, Strategy};

/// A small pool of 4-vCPU nodes, no spot interruptions, batch pods for the tests.
fn tiny(extra: &str, batch: &str) -> Scenario {
    Scenario::from_yaml(&tiny_yaml(extra, batch)).unwrap_or_else(|e| panic!("{e}"))
}

fn tiny_yaml(extra: &str, batch: &str) -> String {
    format!(
        r#"
name: tiny
start: 2026-11-16T23:00:00Z
duration: 2h
time_zone: UTC
availability_zones: [az-a, az-b]
instance_types:
  c.xlarge: {{ cpu: "4", memory: 16Gi, on_demand_price: 0.2, spot_price: 0.08 }}
node_groups:
  - {{ name: spot, market: spot, instance_type: c.xlarge, min: 0, max: 20, initial: 0 }}
  - {{ name: od, market: on-demand, instance_type: c.xlarge, min: 0, max: 20, initial: 0 }}
nodes: {{ boot: [45s, 45s], network_attach: [0s, 0s] }}
workload:
  batch: [{batch}]
spot:
  interruptions_per_node_hour: 0
{extra}
ballast:
  pool:
    headroom: {{ percent: 0, min: 0, max: 10, pod_cpu: "1", pod_memory: 1Gi }}
"#
    )
}

fn no_progress() -> impl FnMut(f64) {
    |_| {}
}

/// A run of `strategy` on `sc`, started and carried on to `until`.
fn started(sc: &Scenario, strategy: Strategy, seed: u64, until: u64) -> Engine<'_> {
    let mut sim = Engine::new(sc, strategy, seed);
    sim.start();
    sim.run_until(until, &mut no_progress());
    sim
}

#[test]
fn five_one_cpu_pods_on_an_empty_pool_of_four_cpu_nodes_make_two_nodes() {
    let sc = tiny("", "{ name: b, at: [65s], jobs: 5, cpu: '1', memory: 1Gi, duration: [1h, 1h] }");
    let sim = started(&sc, Strategy::ClusterAutoscaler, 1, 10 * MINUTE);
    assert_eq!(sim.model.asgs[0].nodes.len(), 2, "spot preferred, two nodes");
    assert_eq!(sim.model.asgs[1].nodes.len(), 0);
    assert_eq!(sim.model.cluster.pending_workload, 0, "all five running");
}

#[test]
fn scale_up_waits_for_the_next_scan() {
    let sc = tiny("", "{ name: b, at: [65s], jobs: 3, cpu: '1', memory: 1Gi, duration: [1h, 1h] }");
    let mut sim = started(&sc, Strategy::ClusterAutoscaler, 1, 70 * SECOND - 1);
    assert_eq!(sim.model.asgs[0].desired, 0, "pending at 65s, no scale-up before the 70s scan");
    sim.run_until(70 * SECOND, &mut no_progress());
    assert_eq!(sim.model.asgs[0].desired, 1, "the 70s scan asks for one node");
    sim.run_until(115 * SECOND, &mut no_progress());
    assert_eq!(sim.model.cluster.pending_workload, 3, "booting takes 45s, binding a scheduler cycle more");
    sim.run_until(115 * SECOND + 200, &mut no_progress());
    assert_eq!(sim.model.cluster.pending_workload, 0);
}

fn fallback_seconds(fail_fast: bool, seed: u64) -> f64 {
    let extra = format!(
        "  capacity_losses: [{{ instance_type: c.xlarge, at: 0s, for: 2h }}]\ncluster_autoscaler: {{ fail_fast: {fail_fast} }}"
    );
    let sc = tiny(&extra, "{ name: b, at: [65s], jobs: 3, cpu: '1', memory: 1Gi, duration: [1h, 1h] }");
    let report = simulate(&sc, Strategy::ClusterAutoscaler, seed, &mut no_progress());
    report.spot_loss_to_on_demand_s.expect("CA falls back eventually")
}

#[test]
fn falling_back_takes_fifteen_minutes_before_1_24_and_up_to_a_cache_refresh_with_fail_fast() {
    let old = fallback_seconds(false, 1);
    assert!((900.0..=910.0).contains(&old), "max-node-provision-time: {old}s");
    // Fail-fast is seen at the ASG cache's next refresh (every minute, at CA's own
    // phase), then the next scan: anywhere from at once to 70 s, not a fixed minute.
    let seen: Vec<f64> = (1..=20).map(|seed| fallback_seconds(true, seed)).collect();
    assert!(seen.iter().all(|s| (0.0..=70.0).contains(s)), "{seen:?}");
    let (lo, hi) = seen.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &s| (lo.min(s), hi.max(s)));
    assert!(lo <= 25.0 && hi >= 45.0, "spread over the refresh period: {seen:?}");
}

#[test]
fn ballast_falls_back_within_seconds() {
    let extra = "  capacity_losses: [{ instance_type: c.xlarge, at: 0s, for: 2h }]";
    let sc = tiny(extra, "{ name: b, at: [65s], jobs: 3, cpu: '1', memory: 1Gi, duration: [1h, 1h] }");
    let report = simulate(&sc, Strategy::Ballast, 1, &mut no_progress());
    let seconds = report.spot_loss_to_on_demand_s.expect("Ballast falls back");
    assert!(seconds <= 5.0, "{seconds}s: the launch failure event (2s delivery) moves the shortfall");
}

#[test]
fn pause_pods_below_the_cutoff_never_trigger_scale_up() {
    let below = tiny("static_overprovisioning: { replicas: 6, priority: -11 }", "");
    let report = simulate(&below, Strategy::StaticOverprovisioning, 1, &mut no_progress());
    assert_eq!(report.peak_nodes, 0, "CA ignores pods under its expendable cutoff");
    let at_cutoff = tiny("static_overprovisioning: { replicas: 6, priority: -10 }", "");
    let report = simulate(&at_cutoff, Strategy::StaticOverprovisioning, 1, &mut no_progress());
    assert_eq!(report.peak_nodes, 2, "at -10 they bring nodes: six 1-CPU pods on 4-CPU nodes");
}

#[test]
fn workload_preempts_headroom_and_starts_at_once() {
    let sc = tiny(
        "static_overprovisioning: { replicas: 4 }",
        "{ name: b, at: [10m], jobs: 4, cpu: '1', memory: 1Gi, duration: [1h, 1h] }",
    );
    let report = simulate(&sc, Strategy::StaticOverprovisioning, 1, &mut no_progress());
    assert_eq!(report.pod_wait_max_s, 2.2, "the four jobs take the pause pods' place: a cycle, then 2 s of preemption");
    let cold = simulate(&sc, Strategy::ClusterAutoscaler, 1, &mut no_progress());
    assert!(cold.pod_wait_max_s >= 45.0, "without headroom they wait for a node: {}", cold.pod_wait_max_s);
}

#[test]
fn same_seed_same_output_and_another_seed_differs() {
    let sc = Scenario::built_in("spot-heavy").unwrap();
    let run = |seed| serde_json::to_string(&simulate(&sc, Strategy::Ballast, seed, &mut no_progress())).unwrap();
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn every_built_in_scenario_loads_and_runs() {
    for (name, _) in crate::scenario::BUILT_IN {
        let sc = Scenario::built_in(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        if *name == "large" {
            continue; // the benchmark runs it in release
        }
        for strategy in Strategy::ALL {
            let r = simulate(&sc, strategy, 3, &mut no_progress());
            assert!(r.pods_started > 0, "{name} {strategy:?}");
            assert!(r.cost > 0.0);
        }
    }
}

#[test]
fn ballast_beats_ca_alone_on_the_default_day() {
    let sc = Scenario::built_in("business-day").unwrap();
    let ca = simulate(&sc, Strategy::ClusterAutoscaler, 42, &mut no_progress());
    let ballast = simulate(&sc, Strategy::Ballast, 42, &mut no_progress());
    assert!(ballast.pending_pod_seconds < ca.pending_pod_seconds);
    assert!(ballast.on_demand_node_hours < ca.on_demand_node_hours);
    assert!(ballast.spot_loss_to_on_demand_s.unwrap() < ca.spot_loss_to_on_demand_s.unwrap());
    assert!(ballast.ballast_invocations > 1000, "Ballast really ran: {}", ballast.ballast_invocations);
}

#[test]
fn sweep_headroom_trades_cost_for_wait() {
    let sc = Scenario::built_in("steady").unwrap();
    let none = simulate(&with_headroom(&sc, HeadroomKnob::Percent, 0), Strategy::Ballast, 5, &mut no_progress());
    let lots = simulate(&with_headroom(&sc, HeadroomKnob::Percent, 40), Strategy::Ballast, 5, &mut no_progress());
    assert!(lots.cost > none.cost);
    assert!(lots.mean_spare_capacity_pct > none.mean_spare_capacity_pct);
    assert!(lots.pending_pod_seconds <= none.pending_pod_seconds);
}

/// The sweep says when `headroom.max`/`min`, not the percent, set the pause pods: a max
/// below what the percent asks holds them there all run, a min above it likewise, and
/// neither holds them when both are out of the way.
#[test]
fn the_report_says_how_long_headroom_min_and_max_held_the_pause_pods() {
    let sc = with_headroom(&Scenario::built_in("steady").unwrap(), HeadroomKnob::Percent, 20);
    let run = |knob, value| {
        let report = simulate(&with_headroom(&sc, knob, value), Strategy::Ballast, 3, &mut no_progress());
        (report.headroom_held_at_max_pct.unwrap(), report.headroom_held_at_min_pct.unwrap(), report)
    };
    // steady's min is 2.
    let (at_max, at_min, capped) = run(HeadroomKnob::Max, 2);
    assert!(at_max > 99.0 && at_min == 0.0, "max 2 holds them all run: {at_max}% / {at_min}%");
    assert!(capped.series.iter().all(|s| s.headroom_pods <= 2), "never more pause pods than max");
    let (at_max, at_min, _) = run(HeadroomKnob::Min, 1_000);
    assert!(at_min > 99.0 && at_max == 0.0, "min 1000 holds them all run: {at_max}% / {at_min}%");
    let (at_max, at_min, _) = run(HeadroomKnob::Max, 1_000);
    assert!(at_max == 0.0 && at_min == 0.0, "out of the way: {at_max}% / {at_min}%");
    let ca = simulate(&sc, Strategy::ClusterAutoscaler, 3, &mut no_progress());
    assert_eq!((ca.headroom_held_at_max_pct, ca.headroom_held_at_min_pct), (None, None), "Ballast only");
}

#[test]
fn bad_scenarios_name_the_field() {
    let err = Scenario::from_yaml(
        &include_str!("../../../events/scenarios/steady.yaml").replace("spot_price: 0.176", "spot_price: -1"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("line 10, column 3: instance_types.m6i.2xlarge: prices must not be negative"), "{err}");
    let err = Scenario::from_yaml(
        &include_str!("../../../events/scenarios/steady.yaml").replace("min: 2, max: 40 }", "min: 50, max: 40 }"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("ballast.pool.headroom.min: min (50) is greater than max (40)"), "{err}");
    let err = Scenario::from_yaml("name: x\n").unwrap_err().to_string();
    assert!(err.contains("`start` is required"), "{err}");
    assert!(Scenario::built_in("nope").is_err());
}

/// A scenario's mistakes are told as a config's: line and column, the nearest key, the
/// unit, and never a Rust type.
#[test]
fn bad_scenarios_are_told_as_configs_are() {
    let steady = include_str!("../../../events/scenarios/steady.yaml");
    let err = |yaml: String| Scenario::from_yaml(&yaml).unwrap_err().to_string();
    let typo = err(steady.replace("  replicas: 12", "  replicaz: 12"));
    assert!(
        typo.starts_with(
            "line 25, column 3: static_overprovisioning.replicaz: unknown key `replicaz`; did you mean `replicas`?"
        ),
        "{typo}"
    );
    let negative = err(steady.replace("min: 0, max: 100, initial: 12", "min: 0, max: -100, initial: 12"));
    assert!(negative.starts_with("line 13, column "), "{negative}");
    assert!(
        negative.contains("node_groups[0].max: the number `-100` is out of range: expected a whole number"),
        "{negative}"
    );
    let no_unit = err(steady.replace("duration: 24h", "duration: 24"));
    assert!(no_unit.contains("duration: `24` has no unit"), "{no_unit}");
    let twice = err(steady.replace("duration: 24h\n", "duration: 24h\nduration: 12h\n"));
    assert!(twice.starts_with("line 7, column 1: duration: written twice"), "{twice}");
    for text in [typo, negative, no_unit, twice] {
        for rust in ["u32", "u64", "i64", "f64", "struct ", "u128"] {
            assert!(!text.contains(rust), "{rust} in {text}");
        }
    }
}

#[test]
fn a_flat_workload_on_fragmented_nodes_never_makes_ca_evict_a_pod_that_fits_nowhere() {
    // Two nodes each hold a 3-CPU pod (1 CPU free on each), a third holds one 1.5-CPU
    // pod (37.5 %: unneeded). 2 CPU are free elsewhere in total, but no node has 1.5.
    let sc = tiny(
        "",
        "{ name: big, at: [65s], jobs: 2, cpu: '3', memory: 1Gi, duration: [2h, 2h] }, \
         { name: small, at: [66s], jobs: 1, cpu: 1500m, memory: 1Gi, duration: [2h, 2h] }",
    );
    let mut sim = started(&sc, Strategy::ClusterAutoscaler, 1, 5 * MINUTE);
    assert_eq!(sim.model.asgs[0].nodes.len(), 3, "three nodes come up");
    sim.run_until(110 * MINUTE, &mut no_progress());
    assert_eq!(sim.model.asgs[0].nodes.len(), 3, "none removed");
    let moved: Vec<u32> = sim.model.cluster.pods.iter().filter(|p| p.is_workload()).map(|p| p.generation).collect();
    assert_eq!(moved, vec![1, 1, 1], "every pod bound once, never evicted");
}

#[test]
fn the_unneeded_timer_runs_during_the_delay_after_a_scale_up() {
    // A 1-CPU job for 3 minutes brings a node at 70 s (Ready at 115 s); it is empty from
    // about 5 min. The delay after that scale-up ends at 70 s + 10 min; the node has been
    // unneeded since about 5 min, so it goes at the first scan after 15 min (unneeded 10
    // min), not 10 min after the delay ends.
    let sc = tiny("", "{ name: b, at: [65s], jobs: 1, cpu: '1', memory: 1Gi, duration: [3m, 3m] }");
    let mut sim = started(&sc, Strategy::ClusterAutoscaler, 1, 2 * MINUTE);
    assert_eq!(sim.model.asgs[0].nodes.len(), 1);
    sim.run_until(16 * MINUTE, &mut no_progress());
    assert_eq!(sim.model.asgs[0].nodes.len(), 0, "removed about 10 minutes after it became empty");
}

#[test]
fn strategies_on_one_seed_face_the_same_market_slot_by_slot() {
    // Six spot nodes from the start, kept (min 6), a high interruption rate. Ballast
    // launches surges that CA alone does not; with one shared random stream those shifted
    // every later draw. Per-slot draws: each initial node is interrupted at the same
    // minute under every strategy (while it lives).
    let mut sc = tiny("", "{ name: b, at: [65s], jobs: 20, cpu: '1', memory: 1Gi, duration: [3h, 3h] }");
    sc.duration = ballast_core::units::HumanDuration::from_secs(3 * 3600);
    (sc.groups[0].min, sc.groups[0].initial) = (6, 6);
    sc.nodes.boot =
        [ballast_core::units::HumanDuration::from_secs(40), ballast_core::units::HumanDuration::from_secs(80)];
    sc.spot.interruptions_per_node_hour = 0.4;
    sc.pools_mut()[0].headroom.percent = 10;
    let first_of_initial = |strategy| {
        let mut sim = Engine::new(&sc, strategy, 7);
        sim.run(&mut no_progress());
        let mut initial: Vec<(u64, u64)> = sim
            .market
            .interrupted
            .iter()
            .filter(|(g, slot, _)| *g == 0 && *slot < 6)
            .map(|&(_, s, at)| (s, at))
            .collect();
        initial.sort_unstable();
        (initial, sim.market.interrupted.len())
    };
    let (alone, alone_total) = first_of_initial(Strategy::ClusterAutoscaler);
    let (ballast, ballast_total) = first_of_initial(Strategy::Ballast);
    assert!(alone.len() >= 3, "the rate interrupts most initial nodes: {alone:?}");
    assert_eq!(alone, ballast, "same slots, same minutes");
    assert!(ballast_total > alone.len() && alone_total >= alone.len());
}

#[test]
fn first_start_waits_are_reported_apart_from_re_placements() {
    // Two 1-CPU jobs on spot nodes interrupted often: each starts once, then again
    // every time its node is reclaimed. Only the first start counts as a new pod's wait.
    let sc = tiny("", "{ name: b, at: [65s], jobs: 2, cpu: '1', memory: 1Gi, duration: [2h, 2h] }");
    let mut sc = sc;
    sc.spot.interruptions_per_node_hour = 2.0;
    sc.spot.rebalance_fraction = 0.0;
    let report = simulate(&sc, Strategy::ClusterAutoscaler, 3, &mut no_progress());
    assert_eq!(report.pods_started, 2, "two pods, each first started once");
    assert!(report.pods_replaced >= 2, "reclaims restart them: {}", report.pods_replaced);
    assert!(report.interruptions >= 2);
}

#[test]
fn some_rebalance_recommendations_are_not_followed_by_an_interruption() {
    let mut sc = tiny("", "{ name: b, at: [65s], jobs: 8, cpu: '1', memory: 1Gi, duration: [2h, 2h] }");
    sc.spot.interruptions_per_node_hour = 0.0;
    sc.spot.false_rebalances_per_node_hour = 1.0;
    let mut sim = Engine::new(&sc, Strategy::Ballast, 5);
    sim.run(&mut no_progress());
    assert_eq!(sim.market.interruptions, 0, "no interruption at all");
    let bridge = sim.ballast.as_ref().unwrap();
    assert!(bridge.rebalances_sent > 0, "yet recommendations came");
}

/// The report counts the recommendations, the false ones among them and NTH's drains:
/// with only false recommendations every one is false and NTH drains a node on each; with
/// only recommendations ahead of interruptions none is false.
#[test]
fn the_report_counts_rebalance_recommendations_false_ones_and_nth_drains() {
    let jobs = "{ name: b, at: [65s], jobs: 8, cpu: '1', memory: 1Gi, duration: [2h, 2h] }";
    let mut sc = tiny("", jobs);
    sc.spot.interruptions_per_node_hour = 0.0;
    sc.spot.false_rebalances_per_node_hour = 1.0;
    let r = simulate(&sc, Strategy::ClusterAutoscaler, 5, &mut no_progress());
    assert_eq!(r.interruptions, 0);
    assert!(r.rebalance_recommendations > 0, "false recommendations came");
    assert_eq!(r.false_rebalance_recommendations, r.rebalance_recommendations, "none was followed by an interruption");
    assert!(r.nth_drains > 0 && r.nth_drains <= r.rebalance_recommendations, "NTH drained on them: {}", r.nth_drains);
    assert_eq!(r.rebalance_replacements, 0, "no Capacity Rebalancing");

    let mut sc = tiny("interruption_handling: capacity-rebalance", jobs);
    sc.spot.interruptions_per_node_hour = 2.0;
    sc.spot.rebalance_fraction = 1.0;
    sc.spot.false_rebalances_per_node_hour = 0.0;
    let r = simulate(&sc, Strategy::ClusterAutoscaler, 5, &mut no_progress());
    assert!(r.interruptions > 0);
    assert_eq!(r.rebalance_recommendations, r.interruptions, "each interruption had one ahead of it");
    assert_eq!(r.false_rebalance_recommendations, 0);
    assert_eq!(r.nth_drains, 0, "no NTH here");
    assert!(r.rebalance_replacements > 0, "Capacity Rebalancing replaced the nodes");
}

/// Two spot groups and on-demand, all empty, for the expander tests.
fn three_groups(ca: &str, batch: &str) -> Scenario {
    let yaml = tiny_yaml(ca, batch).replace(
        "  - { name: od,",
        "  - { name: spot-b, market: spot, instance_type: c.xlarge, min: 0, max: 20, initial: 0 }\n  - { name: od,",
    );
    let sc = Scenario::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}"));
    let yaml_groups: Vec<&str> = sc.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(yaml_groups, ["spot", "spot-b", "od"]);
    sc
}

#[test]
fn the_priority_expander_scales_one_group_per_scan_and_never_an_unmatched_one() {
    // 20 one-CPU jobs: five nodes' worth. With spot at 50 and on-demand at 10 every
    // scan picks one group; on-demand is never used while spot can take the pods.
    let sc = tiny(
        "cluster_autoscaler: { priorities: { 50: ['^spot$'], 10: ['^od$'] } }",
        "{ name: b, at: [65s], jobs: 20, cpu: '1', memory: 1Gi, duration: [1h, 1h] }",
    );
    let sim = started(&sc, Strategy::ClusterAutoscaler, 1, 70 * SECOND);
    assert_eq!((sim.model.asgs[0].desired, sim.model.asgs[1].desired), (5, 0), "one group, all five nodes");
    // Only on-demand listed: the spot group is never used, even though it comes first.
    let sc = tiny(
        "cluster_autoscaler: { priorities: { 10: ['^od$'] } }",
        "{ name: b, at: [65s], jobs: 20, cpu: '1', memory: 1Gi, duration: [1h, 1h] }",
    );
    let report = simulate(&sc, Strategy::ClusterAutoscaler, 1, &mut no_progress());
    assert_eq!(report.spot_node_hours, 0.0, "an unmatched group is never scaled up");
    assert!(report.on_demand_node_hours > 0.0);
}

#[test]
fn the_priority_expander_breaks_ties_at_random() {
    let sc = three_groups(
        "cluster_autoscaler: { priorities: { 50: ['spot'], 10: ['^od$'] } }",
        "{ name: b, at: [65s], jobs: 4, cpu: '1', memory: 1Gi, duration: [1h, 1h] }",
    );
    let picked: Vec<usize> = (1..=16)
        .map(|seed| {
            let sim = started(&sc, Strategy::ClusterAutoscaler, seed, 70 * SECOND);
            assert_eq!(sim.model.asgs[2].desired, 0, "on-demand ranks lower");
            assert_eq!(sim.model.asgs[0].desired + sim.model.asgs[1].desired, 1, "one node, one group");
            usize::from(sim.model.asgs[1].desired == 1)
        })
        .collect();
    assert!(picked.contains(&0) && picked.contains(&1), "both spot groups picked over 16 seeds: {picked:?}");
}

#[test]
fn a_version_written_as_a_number_is_refused_with_how_to_write_it() {
    let err = Scenario::from_yaml(
        &include_str!("../../../events/scenarios/steady.yaml")
            .replace("ballast:\n", "cluster_autoscaler: { version: 1.30 }\nballast:\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("cluster_autoscaler.version") && err.contains("quoted"), "{err}");
    let err = Scenario::from_yaml(
        &include_str!("../../../events/scenarios/steady.yaml")
            .replace("ballast:\n", "cluster_autoscaler: { priorities: { 10: ['(unclosed'] } }\nballast:\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("line "), "placed in the text: {err}");
    assert!(err.contains("cluster_autoscaler.priorities.10[0]:"), "{err}");
}

/// Backoff after the second failed spot scale-up: spot capacity is gone for the first
/// 20 min and again from 40 min; a spot scale-up succeeds in between (at 25 min).
fn second_backoff_minutes(version: &str) -> u64 {
    let extra = format!(
        "  capacity_losses: [{{ instance_type: c.xlarge, at: 0s, for: 20m }}, {{ instance_type: c.xlarge, at: 40m, for: 1h }}]\n\
         cluster_autoscaler: {{ version: \"{version}\", priorities: {{ 50: ['^spot$'], 10: ['^od$'] }} }}"
    );
    let sc = tiny(
        &extra,
        "{ name: first, at: [65s], jobs: 1, cpu: '3', memory: 1Gi, duration: [2h, 2h] }, \
         { name: between, at: [25m], jobs: 1, cpu: '3', memory: 1Gi, duration: [2h, 2h] }, \
         { name: second, at: [41m], jobs: 1, cpu: '3', memory: 1Gi, duration: [2h, 2h] }",
    );
    let mut sim = started(&sc, Strategy::ClusterAutoscaler, 1, 30 * MINUTE);
    assert_eq!(sim.model.asgs[0].nodes.len(), 1, "{version}: the spot scale-up between the losses succeeded");
    sim.run_until(44 * MINUTE, &mut no_progress());
    let view = &sim.ca.group(0);
    assert!(view.last_failure.is_some_and(|t| t > 40 * MINUTE), "{version}: the second scale-up failed");
    view.backoff_ms / MINUTE
}

#[test]
fn backoff_resets_on_success_before_1_30_and_only_after_three_hours_from_1_30() {
    assert_eq!(second_backoff_minutes("1.29"), 5, "the successful scale-up removed the backoff");
    assert_eq!(second_backoff_minutes("1.30"), 10, "the last failure is within 3 h: doubled");
}

#[test]
fn cluster_autoscaler_scales_up_only_for_pods_the_scheduler_found_no_room_for() {
    // One spot node with room; a job created at 70 s, the very moment of a CA scan, is
    // pending but not yet tried by the scheduler: CA must not add a node for it.
    let mut sc = tiny("", "{ name: b, at: [70s], jobs: 2, cpu: '1', memory: 1Gi, duration: [1h, 1h] }");
    (sc.groups[0].min, sc.groups[0].initial) = (1, 1);
    let mut sim = started(&sc, Strategy::ClusterAutoscaler, 1, 70 * SECOND);
    assert_eq!(sim.model.cluster.pending_workload, 2, "created, not yet bound");
    sim.run_until(10 * MINUTE, &mut no_progress());
    assert_eq!(sim.model.asgs[0].desired, 1, "they fit on the node there is: no scale-up");
    assert_eq!(sim.model.cluster.pending_workload, 0);
}

/// Six one-CPU jobs on two 4-CPU spot nodes: a drained node's pods do not all fit on
/// the other, so they wait for cluster-autoscaler or for a replacement.
fn interrupted(handling: &str, seed: u64) -> (Engine<'static>, usize) {
    let sc = Box::leak(Box::new(tiny(
        &format!("interruption_handling: {handling}"),
        "{ name: b, at: [65s], jobs: 6, cpu: '1', memory: 1Gi, duration: [3h, 3h] }",
    )));
    let sim = started(sc, Strategy::ClusterAutoscaler, seed, 10 * MINUTE);
    assert_eq!(
        (sim.model.asgs[0].nodes.len(), sim.model.cluster.pending_workload),
        (2, 0),
        "two spot nodes, all running"
    );
    let node = sim.model.asgs[0].nodes[0];
    assert!(!sim.model.cluster.nodes[node].pods.is_empty());
    (sim, node)
}

#[test]
fn node_termination_handler_drains_on_the_warning_before_the_reclaim() {
    let (mut sim, node) = interrupted("node-termination-handler", 1);
    let warned = sim.now;
    sim.at(warned, Ev::Warning(node));
    sim.at(warned + 2 * MINUTE, Ev::Reclaim(node));
    sim.run_until(warned + 2 * SECOND - 1, &mut no_progress());
    assert!(!sim.model.cluster.nodes[node].cordoned, "not before EventBridge and SQS delivered it (2s)");
    sim.run_until(warned + 3 * SECOND, &mut no_progress());
    assert!(
        sim.model.cluster.nodes[node].cordoned && sim.model.cluster.nodes[node].pods.is_empty(),
        "cordoned and drained"
    );
    assert!(sim.model.cluster.pending_workload > 0, "its pods wait for room: cluster-autoscaler's next scan");

    let (mut bare, node) = interrupted("none", 1);
    bare.at(warned, Ev::Warning(node));
    bare.run_until(warned + MINUTE, &mut no_progress());
    assert!(
        !bare.model.cluster.nodes[node].cordoned && !bare.model.cluster.nodes[node].pods.is_empty(),
        "nothing acts"
    );
}

#[test]
fn node_termination_handler_drains_on_a_recommendation_and_ca_removes_the_empty_node() {
    let (mut sim, node) = interrupted("node-termination-handler", 2);
    let at = sim.now;
    sim.at(at, Ev::Rebalance(node));
    sim.run_until(at + 5 * SECOND, &mut no_progress());
    assert!(sim.model.cluster.nodes[node].cordoned && sim.model.cluster.nodes[node].pods.is_empty());
    // No interruption follows; NTH never uncordons: the empty node is CA's to remove
    // (a cordoned node is a scale-down candidate), once unneeded for 10 minutes.
    sim.run_until(at + 30 * MINUTE, &mut no_progress());
    assert_eq!(sim.model.cluster.nodes[node].phase, crate::cluster::NodePhase::Gone, "scaled down by CA");
    assert_eq!(sim.model.cluster.pending_workload, 0);
}

#[test]
fn capacity_rebalancing_replaces_first_then_drains_the_old_node() {
    let (mut sim, node) = interrupted("capacity-rebalance", 3);
    let (at, desired) = (sim.now, sim.model.asgs[0].desired);
    sim.at(at, Ev::Rebalance(node));
    sim.run_until(at + SECOND, &mut no_progress());
    assert_eq!(sim.model.asgs[0].nodes.len(), 3, "a replacement launched beside it");
    assert_eq!(sim.model.asgs[0].desired, desired, "desired capacity unchanged");
    assert!(!sim.model.cluster.nodes[node].cordoned, "the old node serves until the replacement is Ready");
    sim.run_until(at + 44 * SECOND, &mut no_progress());
    assert_ne!(sim.model.cluster.nodes[node].phase, crate::cluster::NodePhase::Gone);
    sim.run_until(at + 46 * SECOND, &mut no_progress());
    assert_eq!(sim.model.cluster.nodes[node].phase, crate::cluster::NodePhase::Gone, "drained and terminated");
    assert_eq!((sim.model.asgs[0].nodes.len(), sim.model.asgs[0].desired), (2, desired));
    sim.run_until(at + 47 * SECOND, &mut no_progress());
    assert_eq!(sim.model.cluster.pending_workload, 0, "its pods went to the replacement");

    // A warning before the replacement is Ready drains the old node at once.
    let (mut sim, node) = interrupted("capacity-rebalance", 3);
    let at = sim.now;
    sim.at(at, Ev::Rebalance(node));
    sim.at(at + 10 * SECOND, Ev::Warning(node));
    sim.run_until(at + 10 * SECOND, &mut no_progress());
    assert!(sim.model.cluster.nodes[node].cordoned && sim.model.cluster.nodes[node].pods.is_empty());

    // A warning with no recommendation before it is not acted on.
    let (mut sim, node) = interrupted("capacity-rebalance", 3);
    let at = sim.now;
    sim.at(at, Ev::Warning(node));
    sim.run_until(at + MINUTE, &mut no_progress());
    assert!(!sim.model.cluster.nodes[node].cordoned && !sim.model.cluster.nodes[node].pods.is_empty());
}

/// A batch pool on spot, scaled from zero, behind a stable on-demand group that only
/// cluster-autoscaler manages: node selectors, taints, DaemonSets, max pods, mixed
/// instances and a spot-only Ballast pool.
fn pools(extra: &str, daemonsets: &str, batch_group: &str) -> Scenario {
    let yaml = format!(
        r#"
name: pools
start: 2026-11-16T23:00:00Z
duration: 2h
availability_zones: [az-a, az-b]
instance_types:
  c6i.xlarge: {{ cpu: "4", memory: 8Gi, on_demand_price: 0.17, spot_price: 0.07 }}
  c5.xlarge: {{ cpu: "4", memory: 8Gi, on_demand_price: 0.17, spot_price: 0.06 }}
  m6i.large: {{ cpu: "2", memory: 8Gi, on_demand_price: 0.096, spot_price: 0.04 }}
node_groups:
  - {batch_group}
  - {{ name: stable, market: on-demand, instance_type: m6i.large, min: 2, max: 4, initial: 2, ballast: false,
       labels: {{ pool: stable }} }}
daemonsets: [{daemonsets}]
nodes: {{ boot: [45s, 45s], network_attach: [0s, 0s] }}
workload:
  deployments:
    - {{ name: web, cpu: 500m, memory: 512Mi, min_replicas: 4, peak_replicas: 4, curve: flat,
         node_selector: {{ pool: stable }} }}
  batch:
    - {{ name: jobs, at: [65s], jobs: 5, cpu: "1", memory: 1Gi, duration: [1h, 1h],
         node_selector: {{ pool: batch }}, tolerations: [{{ key: batch, operator: Exists, effect: NoSchedule }}] }}
spot:
  interruptions_per_node_hour: 0
  false_rebalances_per_node_hour: 0
{extra}
ballast:
  pool:
    name: batch
    node_selector: {{ pool: batch }}
    tolerations: [{{ key: batch, operator: Exists, effect: NoSchedule }}]
    headroom: {{ percent: 0, min: 0, max: 10, pod_cpu: "1", pod_memory: 1Gi }}
"#
    );
    Scenario::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}"))
}

const BATCH: &str =
    "{ name: batch, market: spot, instance_types: [c6i.xlarge, c5.xlarge], min: 0, max: 10, initial: 0, \
                     labels: { pool: batch }, taints: [{ key: batch, effect: NoSchedule }] }";

fn batch_nodes_at(sc: &Scenario, strategy: Strategy, at: u64) -> (Engine<'_>, u32) {
    let sim = started(sc, strategy, 1, at);
    let n = sim.model.asgs[0].desired;
    (sim, n)
}

#[test]
fn scale_from_zero_uses_the_instance_types_capacity_less_daemonsets() {
    // 4 vCPU, nothing taken: five 1-CPU jobs make two nodes.
    let sc = pools("", "", BATCH);
    let (sim, nodes) = batch_nodes_at(&sc, Strategy::ClusterAutoscaler, 70 * SECOND);
    assert_eq!(nodes, 2, "from the c6i.xlarge template: 4 pods per node");
    assert_eq!(sim.model.asgs[1].desired, 2, "the stable group is not touched");
    // DaemonSets taking 1.1 CPU leave 2.9: two jobs per node, three nodes.
    let sc =
        pools("", "{ name: aws-node, cpu: 600m, memory: 100Mi }, { name: agent, cpu: 500m, memory: 200Mi }", BATCH);
    let (_, nodes) = batch_nodes_at(&sc, Strategy::ClusterAutoscaler, 70 * SECOND);
    assert_eq!(nodes, 3);
    // max_pods 4 with the two DaemonSet pods: two more pods per node. Untagged, the AWS
    // provider's template assumes 110 pods: CA asks for two nodes, finds one pod left
    // over once they are Ready, and asks for a third from a copy of a real node.
    let small = "{ name: aws-node, cpu: 10m, memory: 10Mi }, { name: agent, cpu: 10m, memory: 10Mi }";
    let sc = pools("", small, &BATCH.replace("initial: 0,", "initial: 0, max_pods: 4,"));
    let (mut sim, nodes) = batch_nodes_at(&sc, Strategy::ClusterAutoscaler, 70 * SECOND);
    assert_eq!(nodes, 2, "the untagged template's 110 pods");
    sim.run_until(5 * MINUTE, &mut no_progress());
    assert_eq!((sim.model.asgs[0].desired, sim.model.cluster.pending_workload), (3, 0));
    assert!(sim.model.asgs[0].nodes.iter().all(|&n| sim.model.cluster.nodes[n].pods.len() <= 2));
    // With node-template tags the template knows: three nodes at once.
    let sc = pools("", small, &BATCH.replace("initial: 0,", "initial: 0, max_pods: 4, node_template_tags: true,"));
    let (_, nodes) = batch_nodes_at(&sc, Strategy::ClusterAutoscaler, 70 * SECOND);
    assert_eq!(nodes, 3);
}

/// A spot group outside Ballast's pool keeps what the cluster runs on spot signals,
/// in a Ballast run too: Ballast is not told about nodes it does not manage.
#[test]
fn signals_for_groups_outside_ballasts_pool_go_to_the_clusters_handler() {
    let text = include_str!("../../../events/scenarios/batch-from-zero.yaml")
        .replace("name: stable-on-demand, market: on-demand", "name: stable-spot, market: spot");
    let sc = Scenario::from_yaml(&text).unwrap();
    assert!(!sc.groups[1].in_pool());
    let mut sim = started(&sc, Strategy::Ballast, 1, MINUTE);
    let node = sim.model.asgs[1].nodes[0];
    assert!(!sim.model.cluster.nodes[node].pods.is_empty());
    sim.at(MINUTE, Ev::Warning(node));
    sim.run_until(MINUTE + 3 * SECOND, &mut no_progress());
    assert!(sim.model.cluster.nodes[node].cordoned, "node-termination-handler drained it");
    assert!(sim.model.cluster.nodes[node].pods.is_empty());
}

#[test]
fn pods_go_only_where_their_selector_and_tolerations_allow() {
    let sc = pools("", "", BATCH);
    let (mut sim, _) = batch_nodes_at(&sc, Strategy::ClusterAutoscaler, 0);
    sim.run_until(5 * MINUTE, &mut no_progress());
    assert_eq!(sim.model.cluster.pending_workload, 0);
    for (g, state) in sim.model.asgs.iter().enumerate() {
        for &n in &state.nodes {
            for &p in &sim.model.cluster.nodes[n].pods {
                let batch_pod = matches!(sim.model.cluster.pods[p].kind, crate::cluster::PodKind::Batch { .. });
                assert_eq!(batch_pod, g == 0, "batch pods on the batch group only, web on stable only");
            }
        }
    }
    // Without the toleration the taint keeps the jobs off: refused, they would never run.
    let untolerated = Scenario::from_yaml(
        &tiny_yaml("", "")
            .replace(
                "- { name: spot, market: spot, instance_type: c.xlarge,",
                "- { name: spot, market: spot, instance_type: c.xlarge, taints: [{ key: k, effect: NoSchedule }],",
            )
            .replace(
                "- { name: od, market: on-demand, instance_type: c.xlarge,",
                "- { name: od, market: on-demand, instance_type: c.xlarge, taints: [{ key: k, effect: NoExecute }],",
            )
            .replace(
                "  batch: []",
                "  batch: [{ name: b, at: [1m], jobs: 1, cpu: '1', memory: 1Gi, duration: [1m, 1m] }]",
            ),
    )
    .unwrap_err()
    .to_string();
    assert!(untolerated.contains("workload.batch[0]: fits no node group"), "{untolerated}");
}

#[test]
fn a_mixed_instances_group_launches_the_next_type_when_the_first_has_no_capacity() {
    let sc = pools("  capacity_losses: [{ instance_type: c6i.xlarge, at: 0s, for: 2h }]", "", BATCH);
    let (mut sim, _) = batch_nodes_at(&sc, Strategy::ClusterAutoscaler, 0);
    sim.run_until(5 * MINUTE, &mut no_progress());
    assert_eq!(sim.model.cluster.pending_workload, 0, "no launch failed");
    assert!(sim.model.asgs[0].failures.is_empty());
    assert!(sim.model.asgs[0].nodes.iter().all(|&n| sim.model.cluster.nodes[n].instance_type == "c5.xlarge"));
    // One type only: the same loss fails the launches.
    let sc = pools(
        "  capacity_losses: [{ instance_type: c6i.xlarge, at: 0s, for: 2h }]",
        "",
        &BATCH.replace("instance_types: [c6i.xlarge, c5.xlarge]", "instance_type: c6i.xlarge"),
    );
    let (mut sim, _) = batch_nodes_at(&sc, Strategy::ClusterAutoscaler, 0);
    sim.run_until(5 * MINUTE, &mut no_progress());
    assert!(!sim.model.asgs[0].failures.is_empty() && sim.model.cluster.pending_workload == 5);
}

#[test]
fn ballast_runs_a_spot_only_pool_beside_a_group_it_does_not_manage() {
    let sc = pools("", "", BATCH);
    let pool = &sc.pools()[0];
    assert_eq!(pool.on_demand_asg, None, "spot-only: no on-demand group in the pool");
    assert_eq!(pool.name, "batch", "named by the scenario; nothing assumes a name");
    assert_eq!(pool.spot_asgs.len(), 1);
    let with_headroom = with_headroom(&sc, HeadroomKnob::Percent, 50);
    let sim = started(&with_headroom, Strategy::Ballast, 1, 10 * MINUTE);
    let workload = sim.model.pool_workload(0);
    assert_eq!((workload.pods, workload.cpu), (5, 5000), "the pool's demand is the batch jobs, not web");
    assert_eq!(sim.model.pause_targets[0], 3, "50% of 5 CPU at 1 CPU per pause pod");
    assert_eq!(sim.model.asgs[1].desired, 2, "Ballast never touches the stable group");
    assert_eq!(sim.model.cluster.pending_workload, 0);
}

#[test]
fn scenario_groups_and_pools_are_checked() {
    let err = |yaml: String| Scenario::from_yaml(&yaml).unwrap_err().to_string();
    let both = err(tiny_yaml("", "").replace(
        "instance_type: c.xlarge, min: 0, max: 20",
        "instance_type: c.xlarge, instance_types: [c.xlarge], min: 0, max: 20",
    ));
    assert!(both.contains("node_groups[0]: give instance_type or instance_types"), "{both}");
    let two_od = err(tiny_yaml("", "").replace("- { name: spot, market: spot,", "- { name: spot, market: on-demand,"));
    assert!(
        two_od.contains("need at least one spot group in Ballast's pool")
            || two_od.contains("at most one on-demand group"),
        "{two_od}"
    );
    let twice = err(tiny_yaml("", "").replace(
        "workload:",
        "daemonsets: [{ name: aws-node, cpu: 25m, memory: 64Mi }, { name: aws-node, cpu: 25m, memory: 64Mi }]\nworkload:",
    ));
    assert!(twice.contains("daemonsets[1].name: duplicate DaemonSet `aws-node`"), "{twice}");
}

/// The simulator page says where Ballast loses; this keeps it true (means over seeds 42–44).
#[test]
fn the_readme_says_where_ballast_loses() {
    let mean = |name: &str, strategy, f: fn(&crate::Report) -> f64| {
        let sc = Scenario::built_in(name).unwrap();
        (42..45).map(|seed| f(&simulate(&sc, strategy, seed, &mut no_progress()))).sum::<f64>() / 3.0
    };
    let cost = |r: &crate::Report| r.cost;
    let p95 = |r: &crate::Report| r.pod_wait_p95_s;
    assert!(
        mean("batch-from-zero", Strategy::Ballast, cost) > mean("batch-from-zero", Strategy::ClusterAutoscaler, cost)
    );
    assert!(
        mean("batch-from-zero", Strategy::Ballast, p95)
            > mean("batch-from-zero", Strategy::StaticOverprovisioning, p95)
    );
    assert!(mean("steady", Strategy::Ballast, cost) > mean("steady", Strategy::ClusterAutoscaler, cost));
    // Words, not lines: the page may be wrapped anywhere.
    let page = include_str!("../../../docs/src/simulator.md").split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(page.contains("on `batch-from-zero` its headroom"), "the simulator page states it");
}

/// A launch that Ballast's own call started and that failed reaches Ballast as the ASG's
/// EventBridge rule sends it (after the delivery delay), not at the ASG's next loop:
/// an interruption's surge on a spot ASG without capacity moves to on-demand in seconds.
#[test]
fn a_failed_launch_of_ballasts_own_surge_reaches_ballast_at_once() {
    let sc = tiny(
        "  capacity_losses: [{ instance_type: c.xlarge, at: 30m, for: 1h }]",
        "{ name: b, at: [65s], jobs: 6, cpu: '1', memory: 1Gi, duration: [2h, 2h] }",
    );
    let mut sim = started(&sc, Strategy::Ballast, 1, 40 * MINUTE);
    assert_eq!(sim.model.asgs[1].desired, 0, "on spot so far");
    let node = sim.model.asgs[0].nodes[0];
    sim.at(40 * MINUTE, Ev::Warning(node));
    let sent = |sim: &Engine| sim.ballast.as_ref().unwrap().launch_failures_sent;
    assert_eq!(sent(&sim), 0);
    // Warning delivered at +2 s: Ballast surges on spot, whose launch fails at once.
    sim.run_until(40 * MINUTE + 2 * SECOND, &mut no_progress());
    assert!(!sim.model.asgs[0].failures.is_empty(), "the surge's launch failed");
    assert!(sent(&sim) > 0, "its failure event is on its way to Ballast, not left to the ASG's next loop");
    sim.run_until(40 * MINUTE + 5 * SECOND, &mut no_progress());
    assert!(sim.model.asgs[1].desired > 0, "the surge went to on-demand within 5 s");
}

/// Every pause pod on a node sits on a node of its own pool.
fn assert_pause_pods_in_their_pools(sim: &Engine) {
    let c = &sim.model.cluster;
    for node in c.nodes.iter().filter(|n| n.phase != crate::cluster::NodePhase::Gone) {
        for &p in &node.pods {
            if c.pods[p].kind == crate::cluster::PodKind::Pause {
                assert_eq!(sim.model.sc.groups[node.group].pool, Some(c.pods[p].class), "pause pod {p}");
            }
        }
    }
}

/// Several Ballast pools in one run: each keeps its own pause pods on its own nodes and
/// reports its own demand; a spot capacity loss moves only the pool it hits to
/// on-demand, and that pool alone comes back.
#[test]
fn two_pools_keep_their_own_headroom_and_fall_back_apart() {
    let sc = Scenario::built_in("two-pools").unwrap();
    let names: Vec<&str> = sc.pools().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["services", "batch"]);
    let group = |name: &str| sc.groups.iter().position(|g| g.name == name).unwrap();
    let (services_od, batch_od) = (group("services-on-demand"), group("batch-on-demand"));
    let mut sim = started(&sc, Strategy::Ballast, 42, 8 * HOUR + 10 * MINUTE);
    assert!(sim.model.pause_targets.iter().all(|&t| t > 0), "{:?}", sim.model.pause_targets);
    assert_pause_pods_in_their_pools(&sim);
    // The forwarder's demand per pool splits the cluster's workload between them.
    let (services, batch) = (sim.model.pool_workload(0), sim.model.pool_workload(1));
    assert_eq!(services.pods + batch.pods, sim.model.cluster.workload_pods);
    assert!(services.pods > 0 && batch.pods > 0, "{services:?} {batch:?}");
    assert_eq!((sim.model.asgs[services_od].desired, sim.model.asgs[batch_od].desired), (0, 0), "on spot");
    // 08:15: the services pool's spot types go; its next scale-up fails on spot.
    sim.run_until(8 * HOUR + 40 * MINUTE, &mut no_progress());
    assert!(sim.model.asgs[services_od].desired > 0, "the services pool fell back");
    assert_eq!(sim.model.asgs[batch_od].desired, 0, "the batch pool did not");
    // 14:00: the batch pool's; the services pool is back on spot by then.
    sim.run_until(14 * HOUR + 10 * MINUTE, &mut no_progress());
    assert_eq!(sim.model.asgs[services_od].desired, 0, "the services pool returned to spot");
    assert!(sim.model.asgs[batch_od].desired > 0, "the batch pool fell back");
    assert_pause_pods_in_their_pools(&sim);
    sim.run_until(16 * HOUR, &mut no_progress());
    assert_eq!(sim.model.asgs[batch_od].desired, 0, "the batch pool returned to spot");
    // The forwarder reported each pool's unschedulable pods (the ramp's, the jobs').
    let reports = &sim.ballast.as_ref().unwrap().unschedulable_reports;
    assert!(reports.iter().all(|&n| n > 0), "{reports:?}");
}

/// A spot warning for a node of the second pool reaches Ballast, which drains it in that
/// pool and leaves the other pool's groups as they were. No interruption handler runs
/// beside it: only Ballast can have cordoned the node.
#[test]
fn a_warning_in_one_pool_is_handled_in_that_pool() {
    let text = include_str!("../../../events/scenarios/two-pools.yaml")
        .replace("interruption_handling: node-termination-handler", "interruption_handling: none");
    let sc = Scenario::from_yaml(&text).unwrap();
    let batch_spot = sc.groups.iter().position(|g| g.name == "batch-spot").unwrap();
    let mut sim = started(&sc, Strategy::Ballast, 42, HOUR + 5 * MINUTE);
    let node = *sim.model.asgs[batch_spot].nodes.first().expect("the 01:00 jobs brought batch nodes");
    let desired_before: Vec<u32> = sim.model.asgs.iter().map(|a| a.desired).collect();
    sim.at(sim.now, Ev::Warning(node));
    let at = sim.now;
    sim.run_until(at + 5 * SECOND, &mut no_progress());
    assert!(sim.model.cluster.nodes[node].cordoned, "Ballast drained it");
    for (g, a) in sim.model.asgs.iter().enumerate() {
        if sc.groups[g].pool == Some(0) {
            assert_eq!(a.desired, desired_before[g], "{} untouched", sc.groups[g].name);
        }
    }
    // The same warning without Ballast and without a handler: nobody cordons it.
    let mut alone = started(&sc, Strategy::ClusterAutoscaler, 42, HOUR + 5 * MINUTE);
    let node = *alone.model.asgs[batch_spot].nodes.first().unwrap();
    alone.at(alone.now, Ev::Warning(node));
    let at = alone.now;
    alone.run_until(at + 5 * SECOND, &mut no_progress());
    assert!(!alone.model.cluster.nodes[node].cordoned);
}

/// Static overprovisioning takes one count for every pool or one per pool; a sweep sets
/// every pool.
#[test]
fn static_replicas_and_sweeps_apply_per_pool() {
    let sc = Scenario::built_in("two-pools").unwrap();
    assert_eq!(sc.static_overprovisioning.replicas, [8, 3]);
    let sim = started(&sc, Strategy::StaticOverprovisioning, 1, MINUTE);
    assert_eq!(sim.model.pause_targets, [8, 3]);
    let text = include_str!("../../../events/scenarios/two-pools.yaml");
    let each = Scenario::from_yaml(&text.replace("replicas: { services: 8, batch: 3 }", "replicas: 2")).unwrap();
    assert_eq!(each.static_overprovisioning.replicas, [2, 2]);
    let swept = with_headroom(&sc, HeadroomKnob::Max, 5);
    assert!(swept.pools().iter().all(|p| p.headroom.max == 5));
}

#[test]
fn several_pools_are_checked() {
    let text = include_str!("../../../events/scenarios/two-pools.yaml");
    let err = |yaml: String| Scenario::from_yaml(&yaml).unwrap_err().to_string();
    let unnamed_group = err(text.replacen("}, pool: services }", "} }", 1));
    assert!(
        unnamed_group.contains("node_groups[0].pool: name one of Ballast's pools (services, batch)"),
        "{unnamed_group}"
    );
    let unknown = err(text.replacen("}, pool: services }", "}, pool: service }", 1));
    assert!(unknown.contains("node_groups[0].pool: `service` is not one of Ballast's pools"), "{unknown}");
    let unnamed_pool = err(text.replace("    - name: batch\n      node_selector", "    - node_selector"));
    assert!(unnamed_pool.contains("ballast.pools[1]"), "{unnamed_pool}");
    let duplicate = err(text.replace("    - name: batch\n", "    - name: services\n"));
    assert!(duplicate.contains("ballast.pools[1].name: duplicate pool `services`"), "{duplicate}");
    let no_spot = err(text.replace("market: spot,      instance_types", "market: on-demand, instance_types"));
    assert!(no_spot.contains("Ballast's pool `batch` takes at most one on-demand group"), "{no_spot}");
    let no_spot = err(text
        .replace("market: spot,      instance_types", "market: on-demand, instance_types")
        .replace("NoSchedule }], pool: batch }\n\ndaemonsets", "NoSchedule }], ballast: false }\n\ndaemonsets"));
    assert!(no_spot.contains("need at least one spot group in Ballast's pool `batch`"), "{no_spot}");
    let empty = err(text.split("ballast:\n  pools:").next().unwrap().to_string() + "ballast:\n  pools: []\n");
    assert!(empty.contains("ballast.pools: list at least one pool"), "{empty}");
    let elsewhere = err(text.replace(
        "    - name: batch\n      node_selector: { pool: batch }\n",
        "    - name: batch\n      node_selector: {}\n",
    ));
    assert!(
        elsewhere.contains("ballast.pools[1]: its pause pods (node_selector, tolerations) also fit node group `services-spot-m6i` of pool `services`"),
        "{elsewhere}"
    );
    let static_unknown = err(text.replace("{ services: 8, batch: 3 }", "{ services: 8, batches: 3 }"));
    assert!(static_unknown.contains("static_overprovisioning.replicas.batches"), "{static_unknown}");
    let pause_selector = "node_selector: { pool: batch }\n      tolerations: [{ key: pool, operator: Equal, value: batch, effect: NoSchedule }]\n      headroom";
    let misplaced = err(text.replace(pause_selector, &pause_selector.replace("pool: batch }", "pool: gpu }")));
    assert!(misplaced.contains("ballast.pools[1]: its pause pods"), "{misplaced}");
    let invalid = err(text.replace("min: 1, max: 8", "min: 9, max: 8"));
    assert!(invalid.contains("ballast.pools[1].headroom"), "{invalid}");
    let not_both = err(text.replace("ballast:\n  pools:", "ballast:\n  pool: { name: x }\n  pools:"));
    assert!(not_both.contains("ballast: give pool (one pool) or pools (several), not both"), "{not_both}");
}

/// Two untainted pools whose groups both take a Deployment with no node selector.
fn overlapping_pools_yaml() -> String {
    r#"
name: overlap
start: 2026-11-16T23:00:00Z
duration: 2h
time_zone: UTC
availability_zones: [az-a, az-b]
instance_types:
  c.xlarge: { cpu: "4", memory: 16Gi, on_demand_price: 0.2, spot_price: 0.08 }
node_groups:
  - { name: a-spot, market: spot, instance_type: c.xlarge, min: 0, max: 20, initial: 1, labels: { pool: a }, pool: a }
  - { name: a-od, market: on-demand, instance_type: c.xlarge, min: 0, max: 20, initial: 0, labels: { pool: a }, pool: a }
  - { name: b-spot, market: spot, instance_type: c.xlarge, min: 0, max: 20, initial: 1, labels: { pool: b }, pool: b }
  - { name: b-od, market: on-demand, instance_type: c.xlarge, min: 0, max: 20, initial: 0, labels: { pool: b }, pool: b }
nodes: { boot: [45s, 45s], network_attach: [0s, 0s] }
workload:
  deployments:
    - { name: web, cpu: "1", memory: 1Gi, min_replicas: 30, peak_replicas: 30, curve: flat }
spot:
  interruptions_per_node_hour: 0
ballast:
  pools:
    - { name: a, node_selector: { pool: a }, headroom: { percent: 10, min: 0, max: 50, pod_cpu: "1", pod_memory: 1Gi } }
    - { name: b, node_selector: { pool: b }, headroom: { percent: 10, min: 0, max: 50, pod_cpu: "1", pod_memory: 1Gi } }
"#
    .into()
}

/// A pending pod that fits two pools counts in the first, as the forwarder and the
/// cluster adapter count it (`PoolMatcher::pending_pod_pool`): the pools' demands add up
/// to the cluster's workload, and the second pool's is only what runs on its nodes.
#[test]
fn a_pending_pod_that_fits_two_pools_counts_in_the_first() {
    let sc = Scenario::from_yaml(&overlapping_pools_yaml()).unwrap_or_else(|e| panic!("{e}"));
    let mut sim = started(&sc, Strategy::Ballast, 1, 0);
    for until in [0, 30 * SECOND, 10 * MINUTE] {
        sim.run_until(until, &mut no_progress());
        let (a, b) = (sim.model.pool_workload(0), sim.model.pool_workload(1));
        let c = &sim.model.cluster;
        assert_eq!(a.pending + b.pending, c.pending_workload, "at {until} ms");
        assert_eq!(b.pending, 0, "pending pods count in pool a, the first they fit");
        assert_eq!((a.cpu + b.cpu, a.pods + b.pods), (c.workload_cpu, c.workload_pods), "at {until} ms");
        let bound_to_b: u64 = c
            .nodes
            .iter()
            .filter(|n| sc.groups[n.group].pool == Some(1))
            .flat_map(|n| &n.pods)
            .map(|&p| &c.pods[p])
            .filter(|p| p.is_workload())
            .map(|p| p.cpu)
            .sum();
        assert_eq!(b.cpu, bound_to_b);
        // What Ballast's cluster port answers for each pool is that pool's count.
        let observed = sim.ballast.as_ref().unwrap().observed_demand(&sim.model, sim.now);
        let seen: Vec<(u64, u32)> = observed.iter().map(|d| d.map_or((0, 0), |d| (d.cpu_millis, d.pods))).collect();
        assert_eq!(seen, [(a.cpu, a.pods), (b.cpu, b.pods)]);
    }
    assert!(sim.model.cluster.pending_workload == 0, "all placed by 10 min");
}

/// Fallback figures are per pool: each pool's reaction and return are measured on its
/// own on-demand group, its own failed launches and the losses of its own instance types,
/// then averaged; another pool's on-demand nodes are not its baseline.
#[test]
fn fallback_figures_are_measured_per_pool() {
    let text = include_str!("../../../events/scenarios/two-pools.yaml")
        .replace(
            "{ instance_type: c6i.xlarge,  at: 14h,    for: 1h }",
            "{ instance_type: c6i.xlarge,  at: 9h 5m, for: 1h }",
        )
        .replace(
            "{ instance_type: c5.xlarge,   at: 14h,    for: 1h }",
            "{ instance_type: c5.xlarge,   at: 9h 5m, for: 1h }",
        );
    let sc = Scenario::from_yaml(&text).unwrap();
    let group = |name: &str| sc.groups.iter().position(|g| g.name == name).unwrap();
    let (services_od, batch_od) = (group("services-on-demand"), group("batch-on-demand"));
    let (services_spot, batch_spot) = (group("services-spot-m6i"), group("batch-spot"));
    let pause = vec![crate::model::PausePods { cpu: 1000, mem: 1 << 30, priority: -10 }; 2];
    let mut model = crate::model::Model::new(&sc, pause);
    let mut m = crate::metrics::Metrics::new(&sc);
    let set = |m: &mut crate::metrics::Metrics, model: &mut crate::model::Model, t: u64, g: usize, d: u32| {
        m.advance(t, model);
        model.asgs[g].desired = d;
        m.advance(t, model);
    };
    // services: loss 08:15–09:00; fails at 08:16, on-demand 5 s later, back at 09:20.
    m.advance(8 * HOUR + 16 * MINUTE, &model);
    m.spot_launch_failed(&sc, services_spot, 8 * HOUR + 16 * MINUTE);
    set(&mut m, &mut model, 8 * HOUR + 16 * MINUTE + 5 * SECOND, services_od, 5);
    // batch: loss 09:05–10:05; fails at 09:06, on-demand 65 s later, back at 10:30.
    m.advance(9 * HOUR + 6 * MINUTE, &model);
    m.spot_launch_failed(&sc, batch_spot, 9 * HOUR + 6 * MINUTE);
    set(&mut m, &mut model, 9 * HOUR + 7 * MINUTE + 5 * SECOND, batch_od, 3);
    set(&mut m, &mut model, 9 * HOUR + 20 * MINUTE, services_od, 0);
    set(&mut m, &mut model, 10 * HOUR + 30 * MINUTE, batch_od, 0);
    m.advance(24 * HOUR, &model);
    let report = m.report(&sc, "ballast", 0, 0);
    // (5 s + 65 s) / 2; services back 20 min after its loss, batch 25 min after its own.
    assert_eq!(report.spot_loss_to_on_demand_s, Some(35.0));
    assert_eq!(report.return_to_spot_s, Some(22.5 * 60.0));
}

/// The windowed view: each five-minute window with first starts gets its own p95, so a
/// run's p95 within target can show the windows that were not; re-placements and windows
/// without starts are not in it, and pods still pending at the end count in the last window.
#[test]
fn first_start_waits_are_also_reported_per_five_minute_window() {
    let sc = Scenario::built_in("business-day").unwrap();
    let mut m = crate::metrics::Metrics::new(&sc);
    // 00:00–00:05: twenty pods, one of them slow: the window's p95 is the 19th wait.
    for k in 0..20 {
        m.pod_started(k * 10 * SECOND, if k == 7 { 90 * SECOND } else { (k + 1) * SECOND }, true, None, false);
    }
    // 00:10–00:15: one slow pod and a re-placement (not a first start).
    m.pod_started(11 * MINUTE, 45 * SECOND, true, None, false);
    m.pod_started(12 * MINUTE, 300 * SECOND, false, None, false);
    // 00:15–00:20: only a re-placement; 00:20–00:25: three quick pods.
    m.pod_started(16 * MINUTE, 300 * SECOND, false, None, false);
    for k in 0..3 {
        m.pod_started(21 * MINUTE + k * SECOND, 2 * SECOND, true, None, false);
    }
    // One pod starts on the 00:25 boundary: the window from 00:25.
    m.pod_started(25 * MINUTE, 3 * SECOND, true, None, false);
    let r = m.report(&sc, "ballast", 0, 0);
    assert_eq!(r.window_wait_p95_s, [20.0, 45.0, 2.0, 3.0]);
    // The run has one p95 for all 25 first starts.
    assert_eq!(r.pod_wait_p95_s, 45.0);
    assert_eq!(r.pods_started, 25);
    // A pod still pending when the run ends at 00:30 counts in the last window (00:25–00:30),
    // not in one that would begin at the end.
    let mut cluster = crate::cluster::Cluster::new(-10, 2000, vec![vec![true]]);
    cluster.create_pod(
        crate::cluster::PodKind::Deployment(0),
        0,
        crate::cluster::Requests { cpu: 100, mem: 1 << 20, gpu: 0 },
        0,
        28 * MINUTE,
    );
    m.finish(&cluster, 30 * MINUTE);
    let r = m.report(&sc, "ballast", 0, 0);
    assert_eq!(r.window_wait_p95_s, [20.0, 45.0, 2.0, 120.0]);
}

/// A Job burst can set a run's p95 alone: Jobs' and long-running workloads' first starts
/// get a p95 each, and a run of several days one per day (a day without starts: none);
/// a Job still pending at the end counts as a Job.
#[test]
fn first_start_waits_are_split_by_kind_and_by_day() {
    let sc = Scenario::built_in("week").unwrap();
    let mut m = crate::metrics::Metrics::new(&sc);
    for k in 0..20 {
        m.pod_started(HOUR + k * SECOND, 2 * SECOND, true, None, false);
        m.pod_started(2 * HOUR + k * SECOND, 90 * SECOND, true, None, true);
    }
    m.pod_started(DAY + HOUR, 5 * SECOND, true, None, false);
    m.pod_started(DAY + 2 * HOUR, 5 * SECOND, true, None, false);
    let r = m.report(&sc, "ballast", 0, 0);
    assert_eq!((r.long_running_wait_p95_s, r.long_running_started), (Some(5.0), 22));
    assert_eq!((r.job_wait_p95_s, r.jobs_started), (Some(90.0), 20));
    assert_eq!(r.pod_wait_p95_s, 90.0);
    assert_eq!(r.daily_wait_p95_s, [Some(90.0), Some(5.0), None, None, None, None, None]);
    let mut cluster = crate::cluster::Cluster::new(-10, 2000, vec![vec![true]]);
    cluster.create_pod(
        crate::cluster::PodKind::Batch { duration_ms: MINUTE },
        0,
        crate::cluster::Requests { cpu: 100, mem: 1 << 20, gpu: 0 },
        0,
        7 * DAY - MINUTE,
    );
    m.finish(&cluster, 7 * DAY);
    let r = m.report(&sc, "ballast", 0, 0);
    assert_eq!(r.jobs_started, 21);
    assert_eq!(r.daily_wait_p95_s[6], Some(60.0));
    // A start at the very end (a scheduling pass at the end time) is the last day's.
    m.pod_started(7 * DAY, 120 * SECOND, true, None, false);
    assert_eq!(m.report(&sc, "ballast", 0, 0).daily_wait_p95_s[6], Some(120.0));
    // A run of one day has no per-day figures.
    let day = Scenario::built_in("business-day").unwrap();
    assert!(crate::metrics::Metrics::new(&day).report(&day, "ballast", 0, 0).daily_wait_p95_s.is_empty());
}

/// `two-pools` with Ballast, seed 42.
fn two_pools_with_ballast() -> (Scenario, crate::Report) {
    let sc = Scenario::built_in("two-pools").unwrap();
    let r = simulate(&sc, Strategy::Ballast, 42, &mut no_progress());
    (sc, r)
}

/// With several pools each pool's first starts are also measured apart (a wait target is
/// per pool): here the pools split the run's pods, so the run's p95 lies between theirs.
#[test]
fn first_start_waits_are_reported_per_pool() {
    let (sc, r) = two_pools_with_ballast();
    let names: Vec<&str> = r.waits_by_pool.iter().map(|p| p.pool.as_str()).collect();
    assert_eq!(names, ["services", "batch"]);
    assert!(r.waits_by_pool.iter().all(|p| p.pods_started > 0), "{:?}", r.waits_by_pool);
    assert_eq!(r.waits_by_pool.iter().map(|p| p.pods_started).sum::<usize>(), r.pods_started);
    let p95s: Vec<f64> = r.waits_by_pool.iter().map(|p| p.pod_wait_p95_s.unwrap()).collect();
    let (low, high) = (p95s[0].min(p95s[1]), p95s[0].max(p95s[1]));
    assert!(low <= r.pod_wait_p95_s && r.pod_wait_p95_s <= high, "{p95s:?} vs {}", r.pod_wait_p95_s);
    assert_ne!(p95s[0], p95s[1], "the pools wait differently: {p95s:?}");
    let one = simulate(&Scenario::built_in("business-day").unwrap(), Strategy::Ballast, 42, &mut no_progress());
    assert!(one.waits_by_pool.is_empty(), "one pool: the figures above are its own");
    // A pod still pending at the end counts in the pool a pending pod of its class counts
    // in (as the forwarder counts it); a pool where none started has no p95.
    let mut m = crate::metrics::Metrics::new(&sc);
    let batch = sc.class_pool.iter().position(|p| *p == Some(1)).expect("a class of the batch pool");
    let mut cluster = crate::cluster::Cluster::new(-10, 2000, sc.accepts.clone());
    cluster.create_pod(
        crate::cluster::PodKind::Deployment(0),
        batch,
        crate::cluster::Requests { cpu: 100, mem: 1 << 20, gpu: 0 },
        0,
        10 * MINUTE,
    );
    m.finish(&cluster, 20 * MINUTE);
    let r = m.report(&sc, "ballast", 0, 0);
    let by_pool: Vec<(usize, Option<f64>)> =
        r.waits_by_pool.iter().map(|p| (p.pods_started, p.pod_wait_p95_s)).collect();
    assert_eq!(by_pool, [(0, None), (1, Some(600.0))]);
    assert_eq!(r.pods_started, 1);
}

/// With several pools the report says which pool `headroom.min`/`max` held.
#[test]
fn headroom_held_is_reported_per_pool() {
    let (_, r) = two_pools_with_ballast();
    let names: Vec<&str> = r.headroom_by_pool.iter().map(|p| p.pool.as_str()).collect();
    assert_eq!(names, ["services", "batch"]);
    let (services, batch) = (&r.headroom_by_pool[0], &r.headroom_by_pool[1]);
    // The batch pool is idle most of the day: its one pause pod (min 1) is above 20 % of nothing.
    assert!(batch.held_at_min_pct.unwrap() > 30.0, "{batch:?}");
    assert!(services.held_at_min_pct.unwrap() < batch.held_at_min_pct.unwrap(), "{services:?}");
    assert!(r.headroom_held_at_min_pct.unwrap() >= batch.held_at_min_pct.unwrap());
    let one = simulate(&Scenario::built_in("business-day").unwrap(), Strategy::Ballast, 42, &mut no_progress());
    assert!(one.headroom_by_pool.is_empty(), "one pool: the figures above are its own");
}

/// A batch with `every: 1d` repeats its offsets each day until the end; offsets must lie
/// within the period; without `every` a batch runs once, as before.
#[test]
fn a_batch_repeats_every_period_until_the_end() {
    let week = |batch: &str| {
        Scenario::from_yaml(&tiny_yaml("", batch).replace("duration: 2h", "duration: 3d 12h"))
            .map(|sc| sc.batches[0].at.iter().map(|a| a.0.as_secs() / 3600).collect::<Vec<_>>())
    };
    let b = "{ name: b, at: [9h, 13h], every: 1d, jobs: 1, cpu: '1', memory: 1Gi, duration: [1m, 1m] }";
    assert_eq!(week(b).unwrap(), [9, 13, 33, 37, 57, 61, 81]);
    let once = "{ name: b, at: [9h, 13h], jobs: 1, cpu: '1', memory: 1Gi, duration: [1m, 1m] }";
    assert_eq!(week(once).unwrap(), [9, 13]);
    let late = week(&b.replace("[9h, 13h]", "[25h]")).unwrap_err().to_string();
    assert!(late.contains("workload.batch[0].at: 1day 1h is not within one period (`every: 1day`)"), "{late}");
    // Each repetition brings its jobs.
    let sc = Scenario::from_yaml(&tiny_yaml("", b).replace("duration: 2h", "duration: 2d")).unwrap();
    let r = simulate(&sc, Strategy::ClusterAutoscaler, 1, &mut no_progress());
    assert_eq!(r.pods_started, 4);
}

/// `--repeat`: the span runs again, with its batches, capacity losses and storms, each
/// time; the first span is unchanged.
#[test]
fn a_repeated_scenario_runs_its_span_again_with_its_batches_and_spot_events() {
    let day = Scenario::built_in("spot-heavy").unwrap();
    let week = day.repeated(7);
    assert_eq!(week.duration.0, day.duration.0 * 7);
    let hours = |at: &[HumanDuration]| at.iter().map(|a| a.0.as_secs() / 3600).collect::<Vec<_>>();
    assert_eq!(hours(&day.batches[0].at), hours(&week.batches[0].at[..day.batches[0].at.len()]));
    assert_eq!(week.batches[0].at.len(), 7 * day.batches[0].at.len());
    assert_eq!(
        hours(&week.batches[0].at[day.batches[0].at.len()..][..1]),
        [24 + day.batches[0].at[0].0.as_secs() / 3600]
    );
    assert_eq!(week.spot.capacity_losses.len(), 7 * day.spot.capacity_losses.len());
    assert_eq!(week.spot.storms.len(), 7 * day.spot.storms.len());
    let last = week.spot.storms.last().unwrap();
    assert_eq!(last.at.0, day.spot.storms.last().unwrap().at.0 + day.duration.0 * 6);
    assert_eq!(day.repeated(1).duration.0, day.duration.0);
    // Every day brings its jobs: three times the pods of one day, near enough.
    let steady = Scenario::built_in("steady").unwrap();
    let one = simulate(&steady, Strategy::ClusterAutoscaler, 3, &mut no_progress());
    let three = simulate(&steady.repeated(3), Strategy::ClusterAutoscaler, 3, &mut no_progress());
    // Each later day brings its 60 report jobs.
    assert!(three.pods_started >= one.pods_started + 2 * 60, "{} vs {}", three.pods_started, one.pods_started);
}

/// Tiny with report jobs each day at 09:00 (20 × 1 CPU, 10 minutes), over two days, and
/// Ballast's headroom learned from a 10 s wait target.
fn daily_bursts(target: &str) -> Scenario {
    let yaml =
        tiny_yaml("", "{ name: reports, at: [9h], every: 1d, jobs: 20, cpu: '1', memory: 1Gi, duration: [10m, 10m] }")
            .replace("duration: 2h", "duration: 2d")
            .replace(
                "headroom: { percent: 0, min: 0, max: 10,",
                &format!("headroom: {{ percent: 0, min: 0, max: 30, {target}"),
            );
    Scenario::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_forwarder_sums_up_first_start_waits_every_five_minutes_where_pods_started() {
    let sc = daily_bursts("target: { wait_p95: 10s },");
    let sim = started(&sc, Strategy::Ballast, 1, 9 * 60 * MINUTE + 20 * MINUTE);
    let bridge = sim.ballast.as_ref().unwrap();
    // Only the burst's windows had pods start: a few reports, not one every 5 minutes.
    assert!((1..=4).contains(&bridge.waits_reports[0]), "{:?}", bridge.waits_reports);
    // Without a wait target nobody reads them: the forwarder does not publish them.
    let plain = daily_bursts("");
    let sim = started(&plain, Strategy::Ballast, 1, 9 * 60 * MINUTE + 20 * MINUTE);
    assert_eq!(sim.ballast.as_ref().unwrap().waits_reports, [0]);
}

/// The simulator sends what AWS and the forwarder send about a launch: Auto Scaling's
/// Launch Successful (with its start) and the forwarder's Node Lifecycle Ready. The
/// learner times the pool's lead from them: the 45 s boot of tiny's nodes, to the second;
/// and cluster-autoscaler's reaction, from the forwarder's Pods Unschedulable to the
/// launch: within its 10 s scan interval.
#[test]
fn the_lead_time_is_learned_from_launch_and_node_ready_events() {
    let sc = daily_bursts("target: { wait_p95: 10s },");
    let sim = started(&sc, Strategy::Ballast, 1, 9 * 60 * MINUTE + 20 * MINUTE);
    let record = sim.ballast.as_ref().unwrap().record(0).unwrap();
    let learned = record.learned.unwrap();
    assert!(!learned.lead.lead_secs.is_empty(), "the burst launched nodes");
    assert!(learned.lead.lead_secs.iter().all(|&s| s == 45), "{:?}", learned.lead.lead_secs);
    println!("lead times {:?} s, reactions {:?} s", learned.lead.lead_secs, learned.reaction.reaction_secs);
    assert!(!learned.reaction.reaction_secs.is_empty(), "the burst's pods waited for cluster-autoscaler");
    assert!(learned.reaction.reaction_secs.iter().all(|&s| s <= 10), "{:?}", learned.reaction.reaction_secs);
    assert!(learned.reaction().observed);
}

#[test]
fn a_wait_target_learns_a_daily_burst_and_holds_room_only_around_it() {
    let sc = daily_bursts("target: { wait_p95: 10s },");
    let report = simulate(&sc, Strategy::Ballast, 1, &mut no_progress());
    // Day 1: no room (percent 0, nothing rose yet), the burst waits for nodes; day 2: the
    // room is placed before 09:00 from day 1's rise, two lead times (2 × 45 s boots, as
    // the launch and Ready events timed them) ahead.
    let day = |d: u32| report.series.iter().filter(move |s| s.minute / (24 * 60) == d);
    let at = |d: u32, minute: u32| day(d).find(|s| s.minute % (24 * 60) == minute).unwrap().headroom_pods;
    assert_eq!(at(0, 9 * 60), 0, "nothing learned on the first morning");
    assert_eq!(at(1, 9 * 60 - 3), 0, "not yet on day 2 at 08:57: {}", at(1, 9 * 60 - 3));
    assert!(at(1, 9 * 60) >= 20, "room for the 20 jobs as they come on day 2: {}", at(1, 9 * 60));
    let night = |d: u32| day(d).find(|s| s.minute % (24 * 60) == 3 * 60).unwrap().headroom_pods;
    assert_eq!(night(1), 0, "and none at 03:00, when nothing rises");
    let waits = |d: u32| day(d).filter_map(|s| s.recent_wait_p95_ms).max().unwrap_or(0);
    assert!(waits(0) > 30_000, "day 1's burst waited for nodes: {} ms", waits(0));
    assert!(waits(1) <= 10_000, "day 2's did not: {} ms", waits(1));
    // No static percentage can: the pool's demand before 09:00 is nothing, and so is
    // any percentage of it.
    let flat = simulate(&with_headroom(&sc, HeadroomKnob::Percent, 100), Strategy::Ballast, 1, &mut no_progress());
    assert!(flat.pod_wait_p95_s > 10.0, "a percentage of no demand is no room: {}", flat.pod_wait_p95_s);
}

/// The forwarder's Pool Demand Changed reaches the simulated Ballast by the forwarder's
/// own rule: never twice within the debounce, at least every heartbeat, and sooner when
/// the morning ramp moves demand.
#[test]
fn the_forwarder_publishes_demand_with_its_debounce_and_heartbeat() {
    let sc = Scenario::built_in("business-day").unwrap();
    let sim = started(&sc, Strategy::Ballast, 1, 12 * 60 * MINUTE);
    let published = &sim.ballast.as_ref().unwrap().demand_published[0];
    let gaps: Vec<u64> = published.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(published.first() == Some(&0), "the first at once: {published:?}");
    assert!(gaps.iter().all(|&g| g >= 30 * SECOND), "debounced: {gaps:?}");
    assert!(gaps.iter().all(|&g| g <= 5 * MINUTE), "a heartbeat at least every 5 minutes: {gaps:?}");
    assert!(gaps.iter().any(|&g| g < 5 * MINUTE), "demand moved: some sooner than the heartbeat: {gaps:?}");
}

/// Pods Unschedulable by the forwarder's rule: at once for the first pods, then only for
/// pods newly unschedulable, at most every 5 s; pods that stay pending are not reported
/// again.
#[test]
fn the_forwarder_reports_unschedulable_pods_when_new_at_most_every_five_seconds() {
    // No headroom: each job waits for a node. Jobs at 65 s, 67 s and 69 s, then 80 s.
    let sc = tiny("", "{ name: b, at: [65s, 67s, 69s, 80s], jobs: 1, cpu: '3', memory: 1Gi, duration: [1h, 1h] }");
    let sim = started(&sc, Strategy::Ballast, 1, 5 * MINUTE);
    let published = &sim.ballast.as_ref().unwrap().unschedulable_published[0];
    let seconds: Vec<f64> = published.iter().map(|&(t, _)| t as f64 / 1000.0).collect();
    // Each a scheduler cycle (200 ms) after the job; 67 s and 69 s wait out the 5 s.
    assert_eq!(seconds, [65.2, 70.2, 80.2], "{seconds:?}");
    // Each says, as the forwarder's does, when its oldest pod became unschedulable: the
    // 65 s job's pass, still pending while the nodes boot.
    let oldest: Vec<f64> = published.iter().map(|&(_, o)| o as f64 / 1000.0).collect();
    assert_eq!(oldest, [65.2, 65.2, 65.2], "{oldest:?}");
}

/// The headline holds whichever way the scheduler scores nodes: Ballast's first-start
/// p95 beats cluster-autoscaler alone on the default day, packing first-fit or spreading
/// as kube-scheduler's default LeastAllocated does.
#[test]
fn ballast_beats_ca_alone_under_either_scoring() {
    use crate::scenario::Scoring;
    let day = Scenario::built_in("business-day").unwrap();
    for scoring in [Scoring::FirstFit, Scoring::LeastAllocated] {
        let sc = day.with_scoring(scoring);
        let ca = simulate(&sc, Strategy::ClusterAutoscaler, 42, &mut no_progress());
        let ballast = simulate(&sc, Strategy::Ballast, 42, &mut no_progress());
        assert!(
            ballast.pod_wait_p95_s < ca.pod_wait_p95_s,
            "{scoring:?}: p95 {} with Ballast, {} CA alone",
            ballast.pod_wait_p95_s,
            ca.pod_wait_p95_s
        );
        assert!(ballast.pending_pod_seconds < ca.pending_pod_seconds, "{scoring:?}");
    }
}

/// Every node's GPUs against what its pods request, counted afresh from the pods.
/// Returns whether some node had its GPUs taken with CPU and memory left for another
/// pod asking for one (so the GPU, not room, kept it off).
fn assert_no_gpu_shared(sim: &Engine) -> bool {
    let cluster = &sim.model.cluster;
    let gpu_pods: Vec<(u64, u64)> =
        sim.model.sc.batches.iter().filter(|b| b.gpus > 0).map(|b| (b.cpu_millis, b.memory_bytes)).collect();
    let mut gpu_was_the_limit = false;
    for (id, node) in cluster.nodes.iter().enumerate() {
        let requested: u32 = node.pods.iter().map(|&p| cluster.pods[p].gpu).sum();
        assert!(requested <= node.gpu, "node {id}: {requested} GPUs requested of {}", node.gpu);
        assert_eq!(requested, node.gpu_used, "node {id}: the count kept matches its pods");
        let (cpu, mem) = node.free();
        gpu_was_the_limit |=
            node.gpu > 0 && requested == node.gpu && gpu_pods.iter().any(|&(c, m)| cpu >= c && mem >= m);
    }
    gpu_was_the_limit
}

/// The two built-ins with GPUs and with mixed shapes run under every strategy and both
/// scorings: pods start, waits are measured, and no node's GPU ever goes to two pods
/// (checked every simulated ten minutes).
#[test]
fn the_gpu_and_mixed_pools_run_sanely_and_never_share_a_gpu() {
    use crate::scenario::Scoring;
    for name in ["ml-gpu", "mixed"] {
        let built_in = Scenario::built_in(name).unwrap();
        for (seed, scoring) in [(1, Scoring::FirstFit), (2, Scoring::LeastAllocated)] {
            let sc = built_in.with_scoring(scoring);
            for strategy in Strategy::ALL {
                let mut sim = Engine::new(&sc, strategy, seed);
                sim.start();
                let (mut t, mut gpu_was_the_limit) = (0, false);
                while t < sc.end_ms() {
                    t += 10 * MINUTE;
                    sim.run_until(t, &mut no_progress());
                    gpu_was_the_limit |= assert_no_gpu_shared(&sim);
                }
                sim.finish(&mut no_progress());
                let r = crate::report(&sim, &sc, strategy);
                let what = format!("{name} {strategy:?} {scoring:?} seed {seed}");
                assert!(r.long_running_started > 0 && r.jobs_started > 0, "{what}: both kinds started");
                assert!(r.job_wait_p95_s.is_some_and(|w| w > 0.0), "{what}: Jobs waited for nodes");
                assert!(r.pod_wait_p95_s < 3600.0, "{what}: p95 {}", r.pod_wait_p95_s);
                assert!(r.cost > 0.0 && r.peak_nodes > 0, "{what}");
                if name == "ml-gpu" {
                    assert!(gpu_was_the_limit, "{what}: a training pod's CPU and memory fit beside another's");
                }
            }
        }
    }
    let gpu = Scenario::built_in("ml-gpu").unwrap();
    assert!(gpu.batches.iter().any(|b| b.gpus == 1) && gpu.instance_types.values().all(|t| t.gpus == 1));
    assert_eq!(gpu.days(), 7, "a week");
}

#[test]
fn gpu_requests_are_checked() {
    let yaml = tiny_yaml("", "{ name: b, at: [65s], jobs: 1, cpu: '1', memory: 1Gi, gpu: 1, duration: [1h, 1h] }");
    let err = Scenario::from_yaml(&yaml).unwrap_err().to_string();
    assert!(err.contains("workload.batch[0].gpu: no node group"), "{err}");
    let with_gpus = yaml.replace("spot_price: 0.08 }", "spot_price: 0.08, gpu: 1 }");
    Scenario::from_yaml(&with_gpus).unwrap_or_else(|e| panic!("{e}"));
}

/// A fixed pause-pod shape keeps the room `min` and `max` bound (the quota is written for
/// it), and one asking for a GPU is listed with it, so its pause pods hold a GPU each.
#[test]
fn a_fixed_pause_pod_shape_keeps_the_room_and_asks_for_what_it_names() {
    use ballast_core::config::HeadroomShapes;
    use ballast_core::shape::PodShape;
    let sc = Scenario::built_in("steady").unwrap();
    let (min, max) = (sc.pools()[0].headroom.min, sc.pools()[0].headroom.max);
    assert_eq!((min, max), (2, 40), "1 CPU / 2Gi pods");
    let big = sc.with_pause_pod(&PodShape::new(4000, 14 << 30));
    let h = &big.pools()[0].headroom;
    // 40 CPU / 80Gi of room: 10 pods by CPU, 5 by memory; a floor of 2 such pods is some room.
    assert_eq!((h.min, h.max, h.shapes.clone()), (1, 5, HeadroomShapes::Fixed));
    let small = sc.with_pause_pod(&PodShape::new(500, 1 << 30));
    assert_eq!((small.pools()[0].headroom.min, small.pools()[0].headroom.max), (4, 80));

    let gpu = Scenario::built_in("ml-gpu").unwrap();
    let shapes: Vec<String> = gpu.workload_shapes().iter().map(ToString::to_string).collect();
    assert_eq!(shapes, ["2 CPU / 8Gi", "3 CPU / 12Gi + 1 nvidia.com/gpu"]);
    let fixed = gpu.with_pause_pod(&gpu.workload_shapes()[1]);
    assert!(matches!(&fixed.pools()[0].headroom.shapes, HeadroomShapes::Listed(l) if l.len() == 1));
    let sim = started(&fixed, Strategy::Ballast, 42, 9 * HOUR);
    let slots = sim.model.pause_slots(0);
    assert!(slots.iter().any(|s| s.target > 0), "{slots:?}");
    assert!(slots.iter().filter(|s| s.target > 0).all(|s| s.requests.gpu == 1), "{slots:?}");
}
