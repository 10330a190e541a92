use super::*;

const EXAMPLE: &str = include_str!("../../../../ballast.example.yaml");

fn issues(yaml: &str) -> Vec<String> {
    match Config::from_yaml(yaml) {
        Ok(_) => Vec::new(),
        Err(ConfigErrors(list)) => list.iter().map(ToString::to_string).collect(),
    }
}

fn minimal_with(pool_extra: &str) -> String {
    format!(
        "cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:\n  - name: p\n    spot_asgs: [s1]\n    on_demand_asg: od\n{pool_extra}"
    )
}

#[test]
fn example_is_valid_and_complete() {
    let config = Config::from_yaml(EXAMPLE).expect("the shipped example must be valid");
    assert_eq!(config.cluster, "prod-eks");
    assert!(config.dry_run);
    let general = config.pool("general").unwrap();
    assert_eq!(general.spot_asgs.len(), 2);
    assert!(matches!(&general.spot_asgs[1], AsgSelector::Tags(t) if t.len() == 2));
    assert_eq!(general.on_demand_asg, Some(AsgSelector::Name("eks-general-on-demand".into())));
    assert_eq!(general.fallback.max_on_demand, 20);
    assert_eq!(general.fallback.spot_launch_grace.0.as_secs(), 180);
    assert_eq!(general.headroom.pod_memory_bytes, 2 << 30);
    assert_eq!(general.headroom.schedules.len(), 2);
    assert_eq!(general.headroom.schedules[0].time_zone, chrono_tz::Europe::Paris);
    assert_eq!(general.tolerations[0].effect, Some(TaintEffect::NoSchedule));
    let batch = config.pool("batch").unwrap();
    assert_eq!(batch.interruption.rebalance, RebalancePolicy::Surge);
    assert_eq!(batch.headroom.priority_class.value, -10, "defaults apply");
}

#[test]
fn minimal_config_gets_defaults() {
    let config = Config::from_yaml(&minimal_with("")).unwrap();
    let pool = &config.pools[0];
    assert!(!config.dry_run);
    assert_eq!(pool.fallback.failback_step, 1);
    assert_eq!(pool.interruption.drain_timeout.0.as_secs(), 90);
    assert_eq!(pool.headroom.percent, 10);
}

#[test]
fn reports_every_problem_with_its_path() {
    let yaml = r#"
cluster: c
region: eu-west-1
state_table: tbl
pools:
  - name: a
    spot_asgs: [s1]
    on_demand_asg: od1
  - name: b
    spot_asgs: [s2, od2]
    on_demand_asg: od2
    fallback:
      spot_launch_grace: soon
      failback_step: 0
    headroom:
      min: 5
      max: 2
      pod_cpu: lots
      priority_class: { name: pc, value: -100 }
      schedules:
        - cron: "61 * * * *"
          time_zone: Mars/Olympus
          percent: 10
"#;
    let found = issues(yaml);
    let expect = [
        "pools[1].on_demand_asg: `od2` is also listed in spot_asgs",
        "pools[1].fallback.spot_launch_grace: `soon` is not a duration",
        "pools[1].fallback.failback_step: must be at least 1",
        "pools[1].headroom.pod_cpu: `lots` is not a Kubernetes quantity",
        "pools[1].headroom.min: min (5) is greater than max (2)",
        "pools[1].headroom.priority_class.value: -100 is below -10: cluster-autoscaler ignores",
        "pools[1].headroom.schedules[0].cron: `61 * * * *`: its minute field (the first), `61`: 61 is outside 0-59",
        "pools[1].headroom.schedules[0].time_zone: `Mars/Olympus` is not an IANA time zone",
    ];
    for e in expect {
        assert!(found.iter().any(|f| f.starts_with(e)), "missing `{e}` in {found:#?}");
    }
    assert_eq!(found.len(), expect.len(), "{found:#?}");
}

#[test]
fn duplicate_pools_and_shared_asgs() {
    let yaml = "cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:\n  - {name: p, spot_asgs: [s1], on_demand_asg: od}\n  - {name: p, spot_asgs: [s1], on_demand_asg: od9}\n";
    let found = issues(yaml);
    assert!(
        found.iter().any(|f| f.starts_with("pools[1].name: duplicate pool name `p` (also pools[0])")),
        "{found:#?}"
    );
    assert!(found.iter().any(|f| f.contains("ASG `s1` also belongs to pools[0]")), "{found:#?}");
}

#[test]
fn missing_and_unknown_fields() {
    let found = issues("region: mars\npools: []\nextra: 1\n");
    for e in [
        "cluster: is required",
        "state_table: is required",
        "region: `mars` is not an AWS region",
        "pools: must list at least one pool",
        "extra: unknown key",
    ] {
        assert!(found.iter().any(|f| f.starts_with(e)), "missing `{e}` in {found:#?}");
    }
}

#[test]
fn wrong_types_name_the_field() {
    let found = issues(&minimal_with("    headroom:\n      max: many\n      schedules: nope\n"));
    assert!(
        found.iter().any(
            |f| f == "pools[0].headroom.max: expected a whole number, 0 or more (e.g. `10`), found the text `many`"
        ),
        "{found:#?}"
    );
    assert!(found.iter().any(|f| f.starts_with("pools[0].headroom.schedules: expected a list")), "{found:#?}");
    let found = issues(&minimal_with("    tolerations:\n      - key: k\n        effect: Sometimes\n"));
    assert!(
        found.iter().any(|f| {
            f
            == "pools[0].tolerations[0].effect: `Sometimes` is not one of `NoSchedule`, `PreferNoSchedule`, `NoExecute`"
        }),
        "{found:#?}"
    );
}

#[test]
fn priority_must_be_negative_but_not_below_cutoff() {
    let found = issues(&minimal_with("    headroom:\n      priority_class: {name: x, value: 0}\n"));
    assert!(found[0].contains("must rank below workloads"), "{found:#?}");
    assert!(issues(&minimal_with("    headroom:\n      priority_class: {name: x, value: -10}\n")).is_empty());
    assert!(issues(&minimal_with("    headroom:\n      priority_class: {name: x, value: -5}\n")).is_empty());
}

#[test]
fn selector_forms() {
    let found = issues(&minimal_with("").replace("on_demand_asg: od", "on_demand_asg: {name: a, tags: {k: v}}"));
    assert!(found.iter().any(|f| f == "pools[0].on_demand_asg: give either `name` or `tags`, not both"), "{found:#?}");
    let found = issues(&minimal_with("").replace("[s1]", "[s1, s1]"));
    assert!(found.iter().any(|f| f == "pools[0].spot_asgs[1]: `s1` is listed twice"), "{found:#?}");
}

#[test]
fn broken_yaml_is_one_issue() {
    let found = issues("cluster: [unclosed\n");
    assert_eq!(found.len(), 1);
    assert!(found[0].starts_with("(file): not valid YAML"), "{found:#?}");
}

#[test]
fn the_pause_image_must_be_pinned_and_from_an_allowed_repository() {
    use super::check_image;
    let digest = "ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a";
    assert_eq!(check_image(super::DEFAULT_PAUSE_IMAGE), Ok(()));
    assert_eq!(check_image(&format!("public.ecr.aws/eks-distro/kubernetes/pause@sha256:{digest}")), Ok(()));
    assert_eq!(
        check_image(&format!("111122223333.dkr.ecr.eu-west-1.amazonaws.com/mirror/pause:3.10@sha256:{digest}")),
        Ok(())
    );
    use super::ImageError;
    assert_eq!(check_image("  "), Err(ImageError::Empty));
    let unpinned = check_image("registry.k8s.io/pause:3.10").unwrap_err();
    assert_eq!(unpinned, ImageError::Unpinned { image: "registry.k8s.io/pause:3.10".into() });
    assert!(unpinned.to_string().contains("is not pinned"), "{unpinned}");
    let short = check_image("registry.k8s.io/pause@sha256:abc").unwrap_err();
    assert!(matches!(short, ImageError::BadDigest { .. }), "{short:?}");
    assert!(short.to_string().contains("64 lowercase hex"), "{short}");
    let foreign = check_image(&format!("docker.io/evil/pause:3.10@sha256:{digest}")).unwrap_err();
    assert_eq!(foreign, ImageError::NotAllowed { repository: "docker.io/evil/pause".into() });
    assert_eq!(
        foreign.to_string(),
        "`docker.io/evil/pause` is not an allowed pause image repository (registry.k8s.io/pause, \
         public.ecr.aws/eks-distro/kubernetes/pause, or a private ECR mirror ACCOUNT.dkr.ecr.REGION.amazonaws.com/..., \
         .amazonaws.com.cn in China, dkr.ecr-fips. for FIPS)"
    );
    let fake_ecr =
        check_image(&format!("evil.dkr.ecr.eu-west-1.amazonaws.com.example/pause@sha256:{digest}")).unwrap_err();
    assert!(fake_ecr.to_string().contains("not an allowed"), "{fake_ecr}");

    let yaml = |image: &str| {
        format!(
            "cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:\n  - name: general\n    spot_asgs: [a]\n    on_demand_asg: b\n    headroom: {{ image: \"{image}\" }}\n"
        )
    };
    let issues = Config::from_yaml(&yaml("registry.k8s.io/pause:3.10")).unwrap_err().to_string();
    assert!(issues.contains("pools[0].headroom.image: `registry.k8s.io/pause:3.10` is not pinned"), "{issues}");
}

#[test]
fn the_function_timeout_covers_the_longest_drain_and_its_margin() {
    let yaml = "cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:\n  - name: a\n    spot_asgs: [a]\n    on_demand_asg: b\n  - name: b\n    spot_asgs: [c]\n    on_demand_asg: d\n    interruption: { drain_timeout: 5m }\n";
    let config = Config::from_yaml(yaml).unwrap();
    assert_eq!(config.min_function_timeout(), std::time::Duration::from_secs(300 + 120));
}

#[test]
fn an_empty_file_names_every_missing_required_field_at_once() {
    for empty in ["", "\n", "# only a comment\n", "---\n", "~\n"] {
        let found = issues(empty);
        for field in ["cluster", "region", "state_table", "pools"] {
            assert!(found.iter().any(|f| f.starts_with(&format!("{field}: is required"))), "{empty:?}: {found:#?}");
        }
        assert_eq!(found.len(), 4, "{empty:?}: {found:#?}");
    }
}

#[test]
fn an_unknown_field_lists_each_expected_key_once() {
    let found = issues("cluster: c\nregion: eu-west-1\nstate_table: tbl\nclusters: x\npools: []\n");
    let unknown = found.iter().find(|f| f.starts_with("clusters: unknown key")).expect("reported");
    assert!(
        unknown.ends_with(
            "did you mean `cluster`? (this mapping takes `cluster`, `region`, `account`, `state_table`, `dry_run`, `pools`, `defaults`)"
        ),
        "{unknown}"
    );
    let found =
        issues(&minimal_with("    headroom:\n      schedules:\n        - {cron: '0 7 * * *', percent: 5, tz: UTC}\n"));
    let unknown = found.iter().find(|f| f.contains("unknown key")).expect("reported");
    assert!(unknown.ends_with("this mapping takes `cron`, `time_zone`, `percent`"), "{unknown}");
}

#[test]
fn quantities_may_be_written_as_numbers() {
    let config =
        Config::from_yaml(&minimal_with("    headroom:\n      pod_cpu: 2\n      pod_memory: 1073741824\n")).unwrap();
    assert_eq!(config.pools[0].headroom.pod_cpu_millis, 2000);
    assert_eq!(config.pools[0].headroom.pod_memory_bytes, 1 << 30);
    let config = Config::from_yaml(&minimal_with("    headroom:\n      pod_cpu: 0.5\n")).unwrap();
    assert_eq!(config.pools[0].headroom.pod_cpu_millis, 500);
    let found = issues(&minimal_with("    headroom:\n      pod_cpu: [1]\n      pod_memory: 0\n"));
    assert!(
        found.iter().any(|f| f.starts_with("pools[0].headroom.pod_cpu: expected a Kubernetes quantity")),
        "{found:#?}"
    );
    assert!(found.iter().any(|f| f == "pools[0].headroom.pod_memory: must be more than zero"), "{found:#?}");
}

#[test]
fn a_config_too_big_is_refused_before_it_is_parsed() {
    // 14 MB of otherwise valid YAML: refused by its size, not parsed.
    let mut big = minimal_with("    node_selector:\n");
    while big.len() <= 14_000_000 {
        big.push_str(&format!("      label-{}: value\n", big.len()));
    }
    let found = issues(&big);
    assert_eq!(found.len(), 1, "{:?}", &found[..found.len().min(3)]);
    assert!(found[0].starts_with("(file): "), "{}", found[0]);
    assert!(found[0].contains("is more than a config may have (1048576 bytes, 1 MiB)"), "{}", found[0]);
    // Just under the cap is parsed as usual (and here valid).
    let mut under = minimal_with("    node_selector:\n");
    while under.len() < MAX_CONFIG_BYTES - 100 {
        under.push_str(&format!("      l{}: v\n", under.len()));
    }
    assert!(under.len() <= MAX_CONFIG_BYTES);
    Config::from_yaml(&under).expect("a config under the cap is read");
}

#[test]
fn a_config_nested_too_deep_is_refused_before_it_is_parsed() {
    for (what, text) in [
        ("flow lists", "[".repeat(100_000)),
        ("flow mappings", format!("cluster: {}", "{a: ".repeat(100_000))),
        ("compact block lists", format!("pools:\n{}x\n", "- ".repeat(100_000))),
        ("indented mappings", (0..200).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect::<String>()),
        ("flow inside block", format!("pools:\n  - name: p\n    headroom: {}\n", "[".repeat(40))),
    ] {
        let found = issues(&text);
        assert_eq!(found.len(), 1, "{what}: {found:#?}");
        assert!(
            found[0].starts_with("(file): line ") && found[0].contains("more than a config may have (32)"),
            "{what}: {}",
            found[0]
        );
    }
    // Brackets in quotes, comments and block text are not nesting.
    let quoted = minimal_with(&format!(
        "    node_selector:\n      a: \"{0}\"\n      b: '{0}'\n      # {0}\n      c: |\n        {0}\n",
        "[".repeat(100)
    ));
    Config::from_yaml(&quoted).expect("brackets in text are not nesting");
    Config::from_yaml(EXAMPLE).expect("the example is well within the limit");
}

#[test]
fn from_value_reads_a_yaml_value_as_from_yaml_reads_its_text() {
    let value: Value = serde_yaml_ng::from_str(EXAMPLE).unwrap();
    assert_eq!(Config::from_value(value).unwrap(), Config::from_yaml(EXAMPLE).unwrap());
    let errors = Config::from_value(Value::Null).unwrap_err();
    assert_eq!(errors.0.len(), 4, "{errors}");
    let errors = Config::from_value(serde_yaml_ng::from_str("cluster: c\nregion: x\n").unwrap()).unwrap_err();
    assert!(errors.0.iter().any(|i| i.path == "region"), "{errors}");
}

#[test]
fn a_config_prints_with_every_default_and_reads_back_equal() {
    for text in [EXAMPLE.to_string(), minimal_with("")] {
        let config = Config::from_yaml(&text).unwrap();
        let printed = serde_yaml_ng::to_string(&config).unwrap();
        assert_eq!(Config::from_yaml(&printed).unwrap(), config, "{printed}");
    }
    let printed = serde_yaml_ng::to_string(&Config::from_yaml(&minimal_with("")).unwrap()).unwrap();
    for line in [
        "dry_run: false",
        "spot_launch_grace: 3m",
        "drain_timeout: 1m 30s",
        "rebalance: ignore",
        "pod_cpu: '1'",
        "pod_memory: 2Gi",
        "namespace: ballast",
        "name: ballast-headroom",
        "value: -10",
        "boost_for: 30m",
    ] {
        assert!(printed.contains(line), "missing `{line}` in:\n{printed}");
    }
}

/// A spot-only pool is valid: no fallback, headroom and interruption handling as usual;
/// `--print` leaves the key out and reads back the same.
#[test]
fn a_pool_without_an_on_demand_asg_is_spot_only() {
    let yaml = "cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:\n  - name: p\n    spot_asgs: [s1]\n";
    let config = Config::from_yaml(yaml).expect("valid");
    assert_eq!(config.pools[0].on_demand_asg, None);
    let printed = serde_yaml_ng::to_string(&config).unwrap();
    assert!(!printed.contains("on_demand_asg"), "{printed}");
    assert_eq!(Config::from_yaml(&printed).unwrap(), config);
    // Present but unreadable is an error, not a spot-only pool.
    let errors = issues(&minimal_with("").replace("on_demand_asg: od", "on_demand_asg: ''"));
    assert!(errors.iter().any(|e| e.starts_with("pools[0].on_demand_asg")), "{errors:?}");
}

#[test]
fn a_wait_target_is_read_with_its_floor_and_bounds() {
    let with_target = |headroom: &str| Config::from_yaml(&minimal_with(headroom));
    let cfg = with_target("    headroom:\n      percent: 5\n      target: { wait_p95: 10s }\n").unwrap();
    let target = cfg.pools[0].headroom.target.unwrap();
    assert_eq!(
        (target.wait_p95.0.as_secs(), target.history_days(), target.floor),
        (10, 14, true),
        "percent written: a floor"
    );
    let cfg = with_target("    headroom:\n      target: { wait_p95: 30s, history: 7d }\n").unwrap();
    let target = cfg.pools[0].headroom.target.unwrap();
    assert_eq!((target.history_days(), target.floor), (7, false), "percent not written: only until there is history");
    let cfg = with_target("    headroom:\n      percent: 5\n      target: { wait_p95: 10s, floor: false }\n").unwrap();
    assert!(!cfg.pools[0].headroom.target.unwrap().floor);
    assert_eq!(cfg.pools[0].headroom.target.unwrap().time_zone, chrono_tz::Tz::UTC, "days in UTC unless said");
    let explained = |headroom: &str| with_target(headroom).unwrap().pools[0].headroom.explain();
    let short = explained("    headroom:\n      target: { wait_p95: 10s, history: 7d }\n");
    assert!(short.contains("(history under 14 days: never by time of week)"), "{short}");
    assert!(explained("    headroom:\n      target: { wait_p95: 10s }\n").contains("by time of week once two weeks"));
    assert!(explained("    headroom:\n      target: { wait_p95: 10s }\n").contains("the target's 5 % is a budget"));
    let bare = explained("    headroom:\n      percent: 0\n      target: { wait_p95: 10s }\n");
    assert!(bare.contains("only what rises now and bursts that missed the target (percent 0"), "{bare}");
    let scheduled = explained(
        "    headroom:\n      percent: 0\n      schedules: [{cron: '0 7 * * *', percent: 20}]\n      target: { wait_p95: 10s }\n",
    );
    assert!(
        scheduled.contains("0% of the workload requests (1 schedule(s) change it when they fire) until a past day"),
        "{scheduled}"
    );
    let cfg = with_target("    headroom:\n      target: { wait_p95: 10s, time_zone: Europe/Paris }\n").unwrap();
    assert_eq!(cfg.pools[0].headroom.target.unwrap().time_zone, chrono_tz::Tz::Europe__Paris);
    let printed = serde_yaml_ng::to_string(&cfg).unwrap();
    assert_eq!(Config::from_yaml(&printed).unwrap(), cfg, "{printed}");
    // The effective config reads back the same.
    let printed = serde_yaml_ng::to_string(&cfg).unwrap();
    assert_eq!(Config::from_yaml(&printed).unwrap(), cfg, "{printed}");
    for (headroom, expected) in [
        ("target: { history: 7d }", "pools[0].headroom.target.wait_p95: is required"),
        ("target: { wait_p95: 0s }", "pools[0].headroom.target.wait_p95: 0s is outside 1s..60m"),
        ("target: { wait_p95: 2h }", "pools[0].headroom.target.wait_p95: 2h is outside 1s..60m"),
        ("target: { wait_p95: 10s, history: 1h }", "pools[0].headroom.target.history: 1h is outside 1d..28d"),
        ("target: { wait_p95: 10s, history: 60d }", "pools[0].headroom.target.history: 60d is outside 1d..28d"),
        (
            "target: { wait_p95: 10s, p99: 1s }",
            "pools[0].headroom.target.p99: unknown key; this mapping takes `wait_p95`, `history`, `floor`, `time_zone`",
        ),
        (
            "target: { wait_p95: 10s, time_zone: Paris }",
            "pools[0].headroom.target.time_zone: `Paris` is not an IANA time zone",
        ),
        ("target: 10s", "pools[0].headroom.target: expected a mapping"),
    ] {
        let all = issues(&minimal_with(&format!("    headroom:\n      {headroom}\n")));
        assert!(all.iter().any(|i| i.starts_with(expected)), "{headroom}: {all:?}");
    }
}

/// A cron the parser refuses is told in the text as written: which field, what it
/// takes, the name meant; never the parser's types or its rewriting of the field.
#[test]
fn a_bad_cron_says_which_field_is_wrong_and_what_it_takes() {
    let err = super::parse_cron("0 7 * * MON-FRY").unwrap_err();
    assert_eq!(
        err.to_string(),
        "`0 7 * * MON-FRY`: its day-of-week field (the fifth), `MON-FRY`: `FRY` is not a day; day-of-week takes \
         0-7 (0 and 7 are Sunday) or the names SUN-SAT; did you mean `FRI`?"
    );
    assert!(std::error::Error::source(&err).is_some(), "the parser's error is kept as the source");
    for (cron, expected) in [
        ("61 * * * *", "`61 * * * *`: its minute field (the first), `61`: 61 is outside 0-59; minute takes 0-59"),
        ("0 24 * * *", "its hour field (the second), `24`: 24 is outside 0-23"),
        ("0 7 0 * *", "its day-of-month field (the third), `0`: 0 is outside 1-31"),
        ("0 7 * JNU *", "its month field (the fourth), `JNU`: `JNU` is not a month; month takes 1-12 or the names JAN-DEC; did you mean `JUN`?"),
        ("0 7 * * FRIDAY", "`FRIDAY` is not a day; day-of-week takes 0-7 (0 and 7 are Sunday) or the names SUN-SAT; did you mean `FRI`?"),
        ("0 7 * * 8", "`8`: 8 is outside 0-7"),
        ("*/0 7 * * *", "its minute field (the first), `*/0`: `/0`: a step is a whole number, 1 or more"),
        ("0 7 * * FRI-MON", "`FRI-MON` runs backwards"),
        ("0 7 * *", "`0 7 * *`: 4 field(s), not the five a cron has (minute hour day-of-month month day-of-week"),
        ("0 0 7 * * 1", "6 field(s), not the five a cron has (minute hour day-of-month month day-of-week, e.g. `0 7 * * MON-FRI`); seconds and years are not taken"),
    ] {
        let said = super::parse_cron(cron).map(|_| ()).unwrap_err().to_string();
        assert!(said.contains(expected), "{cron}: {said}");
        for parser in ["Pattern", "illegal", "CronError"] {
            assert!(!said.contains(parser), "{cron}: the parser's words in {said}");
        }
    }
    for good in ["0 7 * * 1-5", "0 7 * * mon-fri", "*/15 8-18 * JAN-DEC SUN,SAT", "0 7 * * 7", "0 0 L * *"] {
        assert!(super::parse_cron(good).is_ok(), "{good}");
    }
}

/// `headroom.shapes`: `auto` by default, `fixed`, or a list of at most three named
/// shapes with extended resources; each mistake named with its path.
#[test]
fn headroom_shapes_read_as_written_and_name_each_mistake() {
    let shapes = |text: &str| Config::from_yaml(&minimal_with(text)).map(|c| c.pools[0].headroom.shapes.clone());
    assert_eq!(shapes("").unwrap(), HeadroomShapes::Auto);
    assert_eq!(shapes("    headroom: { shapes: fixed }\n").unwrap(), HeadroomShapes::Fixed);
    let listed = shapes(
        "    headroom:\n      shapes:\n        - { name: training, cpu: 4, memory: 14Gi, resources: { nvidia.com/gpu: 1 } }\n        - { name: inference, cpu: \"2\", memory: 8Gi }\n",
    )
    .unwrap();
    let HeadroomShapes::Listed(list) = &listed else { panic!("{listed:?}") };
    assert_eq!(list[0].shape.to_string(), "4 CPU / 14Gi + 1 nvidia.com/gpu");
    assert_eq!(list[1].name, "inference");
    assert_eq!(listed.deployments(), 2);
    // --print writes it back the way it reads.
    let config = Config::from_yaml(&minimal_with(
        "    headroom:\n      shapes:\n        - { name: training, cpu: 4, memory: 14Gi, resources: { nvidia.com/gpu: 1 } }\n",
    ))
    .unwrap();
    let printed = serde_yaml_ng::to_string(&config).unwrap();
    assert!(printed.contains("name: training") && printed.contains("nvidia.com/gpu: 1"), "{printed}");
    assert_eq!(Config::from_yaml(&printed).unwrap(), config, "{printed}");

    let wrong = issues(&minimal_with(
        "    headroom:\n      shapes:\n        - { name: Big_One, cpu: 0, memory: 14Gi, resources: { gpu: 1 } }\n        - { name: b, cpu: 1 }\n        - { name: c, cpu: 1, memory: 1Gi }\n        - { name: c, cpu: 2, memory: 1Gi }\n",
    ));
    for expected in [
        "pools[0].headroom.shapes: 4 shapes listed: list 1 to 3",
        "pools[0].headroom.shapes[0].cpu: must be more than zero",
        "pools[0].headroom.shapes[0].resources.gpu: is not an extended resource name",
        "pools[0].headroom.shapes[0].name: `Big_One` is not a DNS label",
        "pools[0].headroom.shapes[1].memory: is required",
        "pools[0].headroom.shapes[3].name: `c` is listed twice",
    ] {
        assert!(wrong.iter().any(|w| w.contains(expected)), "{expected}: {wrong:#?}");
    }
    let zero = issues(&minimal_with(
        "    headroom:\n      shapes:\n        - { name: a, cpu: 1, memory: 1Gi, resources: { nvidia.com/gpu: 0 } }\n",
    ));
    assert!(zero.iter().any(|w| w.contains("resources.nvidia.com/gpu: must be more than zero")), "{zero:?}");
    let bad = issues(&minimal_with("    headroom: { shapes: learned }\n"));
    assert!(bad.iter().any(|w| w.contains("expected `auto`, `fixed` or a list of shapes, found `learned`")), "{bad:?}");
}

/// Every kind of mistake says which key, where, and what to write: never a Rust type.
#[test]
fn an_unknown_key_suggests_the_nearest_known_one() {
    for (extra, path, near) in [
        ("    spot_asg: [s2]\n", "pools[0].spot_asg", "spot_asgs"),
        ("    fallback: { max_ondemand: 3 }\n", "pools[0].fallback.max_ondemand", "max_on_demand"),
        ("    headroom: { podCpu: 2 }\n", "pools[0].headroom.podCpu", "pod_cpu"),
        ("    interruption: { drain-timeout: 2m }\n", "pools[0].interruption.drain-timeout", "drain_timeout"),
        ("    tolerations: [{ key: k, efect: NoSchedule }]\n", "pools[0].tolerations[0]", "effect"),
    ] {
        let found = issues(&minimal_with(extra));
        assert!(
            found.iter().any(|f| f.starts_with(path) && f.contains(&format!("did you mean `{near}`?"))),
            "{extra}: {found:#?}"
        );
    }
    let far = issues(&minimal_with("    colour: blue\n"));
    assert!(far.iter().any(|f| f.starts_with("pools[0].colour: unknown key; this mapping takes `name`")), "{far:#?}");
}

#[test]
fn a_wrong_value_says_what_to_write_never_a_rust_type() {
    for (extra, expected) in [
        (
            "    fallback: { spot_launch_grace: 180 }\n",
            "pools[0].fallback.spot_launch_grace: `180` has no unit: write `180s` for seconds (or `180m` for minutes)",
        ),
        (
            "    fallback: { interruption_rate: { count: 5, window: 10 } }\n",
            "pools[0].fallback.interruption_rate.window: `10` has no unit: write `10s`",
        ),
        (
            "    interruption: { drain_timeout: soon }\n",
            "pools[0].interruption.drain_timeout: `soon` is not a duration: write a number and its unit, e.g. `90s`",
        ),
        (
            "    fallback: { max_on_demand: -1 }\n",
            "pools[0].fallback.max_on_demand: the number `-1` is out of range: expected a whole number, 0 or more",
        ),
        (
            "    fallback: { max_on_demand: 2.5 }\n",
            "pools[0].fallback.max_on_demand: expected a whole number, 0 or more (e.g. `10`), found the number `2.5`",
        ),
        (
            "    interruption: { surge: yes }\n",
            "pools[0].interruption.surge: expected `true` or `false`, found the text `yes`",
        ),
        (
            "    interruption: { rebalance: surg }\n",
            "pools[0].interruption.rebalance: `surg` is not one of `surge`, `ignore`; did you mean `surge`?",
        ),
        ("    node_selector: [a]\n", "pools[0].node_selector: expected a mapping (`key: value` lines), found a list"),
        ("    headroom: { pod_memory: 2GB }\n", "pools[0].headroom.pod_memory: `2GB` is not a Kubernetes quantity"),
        (
            "    headroom: { percent: 2000 }\n",
            "pools[0].headroom.percent: 2000 is above 1000%: write a percentage from 0 to 1000",
        ),
        (
            "    headroom: { namespace: Ballast_Headroom }\n",
            "pools[0].headroom.namespace: `Ballast_Headroom` is not a Kubernetes namespace name: lowercase letters",
        ),
        (
            "    headroom: { pod_memory: 2 }\n",
            "pools[0].headroom.pod_memory: `2` is 2 bytes: a memory quantity without a suffix is bytes; write `2Gi`",
        ),
        (
            "    headroom: { priority_class: { name: x, valu: -5 } }\n",
            "pools[0].headroom.priority_class.valu: unknown key `valu`; did you mean `value`?",
        ),
    ] {
        let found = issues(&minimal_with(extra));
        assert!(found.iter().any(|f| f.starts_with(expected)), "{extra}: expected `{expected}` in {found:#?}");
        for rust in ["u32", "u64", "i32", "i64", "invalid type", "invalid value", "struct ", "enum ", "variant"] {
            assert!(!found.iter().any(|f| f.contains(rust)), "{extra}: `{rust}` in {found:#?}");
        }
    }
}

#[test]
fn errors_point_at_the_line_and_column_of_the_yaml() {
    let yaml = "cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:\n  - name: p\n    spot_asgs: [s1]\n    fallback:\n      spot_launch_grace: 180\n    headroom: {percnt: 5}\n";
    let ConfigErrors(found) = Config::from_yaml(yaml).unwrap_err();
    let at = |path: &str| found.iter().find(|i| i.path == path).map(|i| (i.line, i.column));
    assert_eq!(at("pools[0].fallback.spot_launch_grace"), Some((Some(8), Some(7))), "{found:#?}");
    assert_eq!(at("pools[0].headroom.percnt"), Some((Some(9), Some(16))), "{found:#?}");
    let errors = Config::from_yaml(yaml).unwrap_err().to_string();
    assert!(errors.contains("  line 8, column 7: pools[0].fallback.spot_launch_grace: `180` has no unit"), "{errors}");
    // A list item, a required key missing (its mapping), broken YAML.
    let ConfigErrors(found) =
        Config::from_yaml(&minimal_with("    tolerations:\n      - {key: k, value: v, operator: Exists}\n"))
            .unwrap_err();
    assert_eq!((found[0].line, found[0].column), (Some(9), Some(18)), "{found:#?}");
    let ConfigErrors(found) =
        Config::from_yaml("cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:\n  - name: p\n").unwrap_err();
    assert_eq!((found[0].path.as_str(), found[0].line), ("pools[0].spot_asgs", Some(5)), "{found:#?}");
    let ConfigErrors(found) = Config::from_yaml("cluster: c\npools: [\n").unwrap_err();
    assert!(found[0].line.is_some(), "{found:#?}");
}

#[test]
fn regions_are_checked_against_the_real_ones_with_the_nearest_suggested() {
    let with_region = |region: &str| minimal_with("").replace("eu-west-1", region);
    let found = issues(&with_region("eu-wst-1"));
    assert_eq!(found, ["region: `eu-wst-1` is not an AWS region; did you mean `eu-west-1`?"]);
    let found = issues(&with_region("mars-central-9"));
    assert!(found[0].starts_with("region: `mars-central-9` is not an AWS region (e.g."), "{found:?}");
    for region in [
        "us-east-1",
        "cn-north-1",
        "cn-northwest-1",
        "us-gov-west-1",
        "us-iso-east-1",
        "us-isob-east-1",
        "ap-southeast-7",
    ] {
        assert_eq!(issues(&with_region(region)), Vec::<String>::new(), "{region}");
    }
}

#[test]
fn a_cluster_name_the_templates_refuse_is_refused_here() {
    let template = include_str!("../../../../infra/sam/template.yaml");
    let pattern = format!("^[a-zA-Z0-9][a-zA-Z0-9-]{{0,{}}}$", MAX_CLUSTER_NAME - 1);
    assert!(
        template.contains(&format!("AllowedPattern: \"{pattern}\"")),
        "the SAM template's ClusterName pattern moved"
    );
    let cdk = include_str!("../../../../infra/cdk/lib/ballast-stack.ts");
    assert!(cdk.contains(&format!("/{pattern}/")), "the CDK stack's clusterName check moved");
    let named = |cluster: &str| issues(&minimal_with("").replace("cluster: c", &format!("cluster: {cluster}")));
    assert_eq!(named(&"a".repeat(36)), Vec::<String>::new());
    let long = named(&"a".repeat(37));
    assert!(long[0].starts_with("cluster: `aaaa") && long[0].contains("37 characters, more than the 36"), "{long:?}");
    assert!(named("my_cluster")[0].contains("letters, digits and hyphens"));
}

#[test]
fn pause_image_mirrors_in_private_china_govcloud_and_fips_ecr() {
    let digest = "ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a";
    let config = |region: &str, host: &str| {
        minimal_with(&format!("    headroom: {{ image: \"{host}/pause:3.10@sha256:{digest}\" }}\n"))
            .replace("eu-west-1", region)
    };
    for (region, host) in [
        ("eu-west-1", "123456789012.dkr.ecr.eu-west-1.amazonaws.com"),
        ("eu-west-1", "123456789012.dkr.ecr.us-east-1.amazonaws.com"),
        ("cn-north-1", "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn"),
        ("cn-northwest-1", "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn"),
        ("us-gov-west-1", "123456789012.dkr.ecr.us-gov-west-1.amazonaws.com"),
        ("us-gov-east-1", "123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com"),
        ("us-east-1", "123456789012.dkr.ecr-fips.us-east-1.amazonaws.com"),
    ] {
        assert_eq!(issues(&config(region, host)), Vec::<String>::new(), "{region} {host}");
    }
    for (region, host, expected) in [
        ("cn-north-1", "123456789012.dkr.ecr.cn-north-1.amazonaws.com", "ECR in cn-north-1 is at `.amazonaws.com.cn`"),
        (
            "eu-west-1",
            "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn",
            "the mirror is in cn-north-1 (partition aws-cn), the cluster in eu-west-1 (partition aws)",
        ),
        ("us-gov-west-1", "123456789012.dkr.ecr.us-east-1.amazonaws.com", "nodes cannot pull across partitions"),
        ("eu-west-1", "123456789012.dkr.ecr-fips.eu-west-1.amazonaws.com", "ECR has no FIPS endpoint in eu-west-1"),
        ("eu-west-1", "123456789012.dkr.ecr.eu-wst-1.amazonaws.com", "did you mean `eu-west-1`?"),
    ] {
        let found = issues(&config(region, host));
        assert!(
            found.iter().any(|f| f.starts_with("pools[0].headroom.image: ") && f.contains(expected)),
            "{region} {host}: {found:#?}"
        );
    }
}

/// Shared settings written once: YAML anchors and merge keys, or a `defaults:` block.
#[test]
fn shared_settings_by_merge_keys_or_a_defaults_block_read_as_written_out() {
    let spelled_out = "cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:\n  - name: a\n    spot_asgs: [s1]\n    fallback: { max_on_demand: 4 }\n    headroom: { percent: 20, min: 2 }\n  - name: b\n    spot_asgs: [s2]\n    fallback: { max_on_demand: 4 }\n    headroom: { percent: 5, min: 2 }\n";
    let merged = "cluster: c\nregion: eu-west-1\nstate_table: tbl\nx-shared: &shared\n  fallback: { max_on_demand: 4 }\n  headroom: &headroom { percent: 20, min: 2 }\npools:\n  - name: a\n    spot_asgs: [s1]\n    <<: *shared\n  - name: b\n    spot_asgs: [s2]\n    <<: *shared\n    headroom: { <<: *headroom, percent: 5 }\n";
    let defaults = "cluster: c\nregion: eu-west-1\nstate_table: tbl\ndefaults:\n  fallback: { max_on_demand: 4 }\n  headroom: { percent: 20, min: 2 }\npools:\n  - name: a\n    spot_asgs: [s1]\n  - name: b\n    spot_asgs: [s2]\n    headroom: { percent: 5 }\n";
    let expected = Config::from_yaml(spelled_out).unwrap();
    // Anchors live under an `x-` top-level key (docker-compose's convention), or in
    // `defaults:` itself.
    assert_eq!(Config::from_yaml(merged).unwrap(), expected);
    let merged = merged.replace("x-shared: &shared", "defaults: &shared");
    assert_eq!(Config::from_yaml(&merged).unwrap(), expected);
    assert_eq!(Config::from_yaml(defaults).unwrap(), expected);

    // A mistake in `defaults:` is reported there, once, where it is written.
    let bad = defaults.replace("min: 2", "min: many");
    let ConfigErrors(found) = Config::from_yaml(&bad).unwrap_err();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].path, "defaults.headroom.min");
    assert_eq!(found[0].line, Some(6), "{found:#?}");
    let found = issues(&defaults.replace("defaults:\n", "defaults:\n  name: x\n  headrom: {}\n"));
    assert!(found.iter().any(|f| f.starts_with("defaults.name: names one pool")), "{found:#?}");
    assert!(
        found.iter().any(|f| f.starts_with("defaults.headrom: unknown key; did you mean `headroom`?")),
        "{found:#?}"
    );
}

const SCHEMA_FILE: &str = include_str!("../../../../docs/src/reference/ballast.schema.json");
const REFERENCE: &str = include_str!("../../../../docs/src/reference/config.md");

fn schema_validator() -> jsonschema::Validator {
    jsonschema::draft7::new(&json_schema()).expect("the schema is a valid draft-07 schema")
}

/// YAML as the JSON a schema validator reads (merge keys applied, as the reader does).
fn as_json(yaml: &str) -> serde_json::Value {
    let mut value: Value = serde_yaml_ng::from_str(yaml).unwrap();
    value.apply_merge().unwrap();
    serde_json::to_value(value).unwrap()
}

fn schema_errors(validator: &jsonschema::Validator, instance: &serde_json::Value) -> Vec<String> {
    validator.iter_errors(instance).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

/// The committed schema is what `ballast config schema` prints: regenerate it with
/// `ballast config schema > docs/src/reference/ballast.schema.json`.
#[test]
fn the_committed_schema_is_the_generated_one() {
    let generated = serde_json::to_string_pretty(&json_schema()).unwrap() + "\n";
    assert!(
        SCHEMA_FILE == generated,
        "docs/src/reference/ballast.schema.json is stale: regenerate it with `ballast config schema`"
    );
}

/// The repo's configs validate against the schema: the example, the CLI tests' configs,
/// every scenario's pool settings, and a config printed with every default.
#[test]
fn the_example_configs_validate_against_the_schema() {
    let validator = schema_validator();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut checked = 0;
    for file in ["ballast.example.yaml", "functions/cli/tests/data/ml-pools.yaml"] {
        let text = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
        Config::from_yaml(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(schema_errors(&validator, &as_json(&text)), Vec::<String>::new(), "{file}");
        checked += 1;
    }
    let printed = serde_yaml_ng::to_string(&Config::from_yaml(EXAMPLE).unwrap()).unwrap();
    assert_eq!(schema_errors(&validator, &as_json(&printed)), Vec::<String>::new(), "{printed}");
    for entry in std::fs::read_dir(format!("{root}/events/scenarios")).unwrap() {
        let path = entry.unwrap().path();
        let scenario: serde_json::Value = as_json(&std::fs::read_to_string(&path).unwrap());
        let ballast = &scenario["ballast"];
        let pools: Vec<serde_json::Value> = match (&ballast["pool"], &ballast["pools"]) {
            (serde_json::Value::Object(_), _) => vec![ballast["pool"].clone()],
            (_, serde_json::Value::Array(pools)) => pools.clone(),
            _ => panic!("{}: no ballast.pool or ballast.pools", path.display()),
        };
        // The simulator names the pool and its ASGs.
        let pools: Vec<serde_json::Value> = pools
            .into_iter()
            .enumerate()
            .map(|(i, mut pool)| {
                pool["spot_asgs"] = serde_json::json!(["spot"]);
                pool.as_object_mut().unwrap().entry("name").or_insert(format!("p{i}").into());
                pool
            })
            .collect();
        let config = serde_json::json!({"cluster": "c", "region": "eu-west-1", "state_table": "tbl", "pools": pools});
        assert_eq!(schema_errors(&validator, &config), Vec::<String>::new(), "{}", path.display());
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} configs checked");
}

/// A config with a typo'd key (or a duration without its unit, or an unknown region) is
/// refused by the schema too, as by the reader.
#[test]
fn the_schema_refuses_what_the_reader_refuses() {
    let validator = schema_validator();
    for (mistake, yaml) in [
        ("typo'd pool key", minimal_with("    spot_asg: [s2]\n")),
        ("typo'd top-level key", minimal_with("").replace("cluster: c", "clustr: c")),
        ("typo'd headroom key", minimal_with("    headroom: { percnt: 5 }\n")),
        ("duration without unit", minimal_with("    fallback: { spot_launch_grace: 180 }\n")),
        ("unknown region", minimal_with("").replace("eu-west-1", "eu-wst-1")),
        ("cluster name too long", minimal_with("").replace("cluster: c", &format!("cluster: {}", "c".repeat(37)))),
        ("typo in defaults", minimal_with("").replace("pools:", "defaults: { headroom: { percnt: 5 } }\npools:")),
        ("missing spot_asgs", minimal_with("").replace("    spot_asgs: [s1]\n", "")),
        ("unknown rebalance", minimal_with("    interruption: { rebalance: always }\n")),
    ] {
        assert!(Config::from_yaml(&yaml).is_err(), "{mistake}: the reader takes it");
        assert!(!validator.is_valid(&as_json(&yaml)), "{mistake}: the schema takes it:\n{yaml}");
    }
    let with_defaults = minimal_with("").replace("pools:", "defaults: { headroom: { percent: 5 } }\npools:");
    assert!(validator.is_valid(&as_json(&with_defaults)));
}

/// Every key of the schema as the reference page writes it (`pools[].headroom.min`), with
/// its default (`None`: none) and whether it is required.
fn schema_keys() -> Vec<(String, Option<serde_json::Value>, bool)> {
    use serde_json::Value as J;
    let schema = json_schema();
    fn resolve<'s>(schema: &'s J, node: &'s J) -> &'s J {
        let target = node
            .get("$ref")
            .or_else(|| node.get("allOf").and_then(|a| a.get(0)).and_then(|r| r.get("$ref")))
            .or_else(|| node.get("anyOf").and_then(|a| a.get(0)).and_then(|r| r.get("$ref")));
        match target.and_then(J::as_str).and_then(|r| r.strip_prefix("#/definitions/")) {
            Some(name) => resolve(schema, &schema["definitions"][name]),
            None => node,
        }
    }
    fn walk(schema: &J, node: &J, path: &str, default: Option<&J>, out: &mut Vec<(String, Option<J>, bool)>) {
        let node = resolve(schema, node);
        let required: Vec<&str> = node["required"].as_array().into_iter().flatten().filter_map(J::as_str).collect();
        let Some(properties) = node["properties"].as_object() else { return };
        for (key, property) in properties {
            let at = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
            let own = property.get("default").or_else(|| default.and_then(|d| d.get(key)));
            let resolved = resolve(schema, property);
            let items = resolved.get("items").map(|i| resolve(schema, i));
            if key == "defaults" && path.is_empty() {
                out.push((at, None, false));
            } else if resolved.get("properties").is_some() {
                walk(schema, resolved, &at, own, out);
            } else if let Some(items) = items.filter(|i| i.get("properties").is_some()) {
                walk(schema, items, &format!("{at}[]"), None, out);
            } else if let Some(listed) = resolved["oneOf"].as_array().and_then(|o| {
                o.iter()
                    .find_map(|v| v.get("items"))
                    .map(|i| resolve(schema, i))
                    .filter(|i| i.get("properties").is_some())
            }) {
                out.push((at.clone(), own.cloned(), required.contains(&key.as_str())));
                walk(schema, listed, &format!("{at}[]"), None, out);
            } else {
                out.push((at, own.cloned(), required.contains(&key.as_str())));
            }
        }
    }
    let mut out = Vec::new();
    walk(&schema, &schema, "", None, &mut out);
    out
}

/// The rows of the reference page's key table: (key, default cell).
fn reference_rows() -> Vec<(String, String)> {
    REFERENCE
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
            (cells[0].trim_matches('`').to_string(), cells[1].to_string())
        })
        .collect()
}

/// The reference page lists every key of the schema with the schema's default (the
/// code's), and no key the schema does not know: it cannot drift.
#[test]
fn the_reference_page_lists_every_schema_key_with_its_default() {
    let rows = reference_rows();
    let keys = schema_keys();
    assert!(keys.len() >= 45, "{keys:#?}");
    for (key, default, required) in &keys {
        let Some((_, cell)) = rows.iter().find(|(k, _)| k == key) else {
            panic!("the reference page has no row for `{key}`")
        };
        let expected = match default {
            Some(serde_json::Value::Array(a)) if a.is_empty() => "none".to_string(),
            Some(serde_json::Value::Object(o)) if o.is_empty() => "none".to_string(),
            Some(serde_json::Value::String(s)) => format!("`{s}`"),
            Some(v) => format!("`{v}`"),
            None if *required => "required".to_string(),
            None => continue,
        };
        assert_eq!(cell, &expected, "the reference page's default for `{key}`");
    }
    for (key, _) in &rows {
        assert!(
            keys.iter().any(|(k, _, _)| k == key),
            "the reference page lists `{key}`, which the schema does not know"
        );
    }
}

/// Setting a key to the default the page gives changes nothing: the page's defaults are
/// the ones the reader applies, not only the schema's.
#[test]
fn the_reference_page_states_the_defaults_the_reader_applies() {
    let defaults = Config::from_yaml(&minimal_with("")).unwrap();
    let mut checked = 0;
    for (key, cell) in reference_rows() {
        let Some(value) = cell.strip_prefix('`').and_then(|c| c.strip_suffix('`')) else { continue };
        let text = match key.strip_prefix("pools[].") {
            None => minimal_with("").replace("cluster: c\n", &format!("cluster: c\n{key}: {value}\n")),
            // Lists, and mappings whose keys are all required, are not set one key at a time.
            Some(rest)
                if !["[]", "target.", "priority_class.", "interruption_rate."].iter().any(|s| rest.contains(s)) =>
            {
                let parts: Vec<&str> = rest.split('.').collect();
                let mut inline = format!("\"{value}\"");
                if value.parse::<f64>().is_ok() || value == "true" || value == "false" {
                    inline = value.to_string();
                }
                for part in parts.iter().skip(1).rev() {
                    inline = format!("{{ {part}: {inline} }}");
                }
                minimal_with(&format!("    {}: {inline}\n", parts[0]))
            }
            Some(_) => continue,
        };
        let config = Config::from_yaml(&text).unwrap_or_else(|e| panic!("{key}: {value}: {e}"));
        assert_eq!(config, defaults, "the page's default for {key} ({value}) is not the reader's");
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} defaults checked");
}
