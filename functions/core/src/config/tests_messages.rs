//! The messages of the config's less common mistakes: where they point and what they say.

use super::*;

fn minimal_with(pool_extra: &str) -> String {
    format!(
        "cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:\n  - name: p\n    spot_asgs: [s1]\n    on_demand_asg: od\n{pool_extra}"
    )
}

fn only_issue(yaml: &str) -> ConfigIssue {
    let errors = Config::from_yaml(yaml).unwrap_err();
    assert_eq!(errors.0.len(), 1, "{errors}");
    errors.0.into_iter().next().unwrap()
}

#[test]
fn a_key_written_twice_is_placed_at_its_second_writing() {
    let issue = only_issue("cluster: c\nregion: eu-west-1\nstate_table: tbl\nregion: eu-west-2\npools: []\n");
    assert_eq!((issue.path.as_str(), issue.line, issue.column), ("region", Some(4), Some(1)), "{issue:?}");
    assert!(issue.message.contains("first on line 2"), "{issue:?}");

    let nested = minimal_with("    headroom:\n      pod_cpu: \"1\"\n      max: 4\n      pod_cpu: \"2\"\n");
    let issue = only_issue(&nested);
    assert_eq!(issue.path, "pools[0].headroom.pod_cpu", "{issue:?}");
    assert_eq!((issue.line, issue.column), (Some(11), Some(7)), "{issue:?}");
    assert!(issue.message.contains("first on line 9"), "{issue:?}");
}

#[test]
fn a_number_too_large_to_read_says_what_the_key_takes() {
    let issue = only_issue(&minimal_with("    fallback:\n      max_on_demand: 99999999999999999999999\n"));
    assert_eq!(issue.path, "pools[0].fallback.max_on_demand");
    assert_eq!(issue.line, Some(9), "{issue:?}");
    assert!(!issue.message.contains("u128"), "{issue:?}");
    assert!(
        issue.message.contains("`99999999999999999999999` is too large: expected a whole number from 0 to 4294967295"),
        "{issue:?}"
    );
    let issue = only_issue(&minimal_with("    headroom:\n      priority_class: { value: -99999999999999999999999 }\n"));
    assert!(issue.message.contains("a whole number from -10 to -1"), "{issue:?}");
    // Where the schema has no such key, the largest any key takes.
    let issue = only_issue("nothing: 99999999999999999999999\n");
    assert!(issue.message.contains("too large") && !issue.message.contains("u128"), "{issue:?}");
}

#[test]
fn history_without_a_unit_is_told_it_counts_days() {
    let issue = only_issue(&minimal_with("    headroom:\n      target: { wait_p95: 10s, history: 14 }\n"));
    assert_eq!(issue.path, "pools[0].headroom.target.history");
    assert!(issue.message.contains("write `14d`"), "{issue:?}");
    assert!(!issue.message.contains("14s") && !issue.message.contains("14m"), "{issue:?}");
}

#[test]
fn an_asg_name_written_as_a_number_is_told_a_name_is_expected() {
    let yaml = "cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:\n  - name: p\n    spot_asgs: [s1, 7]\n    on_demand_asg: 5\n";
    let errors = Config::from_yaml(yaml).unwrap_err();
    for (path, written) in [("pools[0].on_demand_asg", "5"), ("pools[0].spot_asgs[1]", "7")] {
        let issue = errors.0.iter().find(|i| i.path == path).unwrap_or_else(|| panic!("{path}: {errors}"));
        assert!(issue.message.starts_with("expected an ASG's name"), "{issue:?}");
        assert!(issue.message.contains(&format!("`\"{written}\"`")), "{issue:?}");
        assert!(!issue.message.contains("mapping"), "{issue:?}");
    }
}

#[test]
fn a_decimal_memory_suffix_is_a_warning_naming_the_binary_one() {
    let (config, warnings) =
        Config::from_yaml_with_warnings(&minimal_with("    headroom:\n      pod_memory: 2G\n")).unwrap();
    assert_eq!(config.pools[0].headroom.pod_memory_bytes, 2_000_000_000, "accepted as Kubernetes reads it");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].path, "pools[0].headroom.pod_memory");
    assert_eq!((warnings[0].line, warnings[0].column), (Some(9), Some(7)), "{warnings:?}");
    assert!(warnings[0].message.contains("write `2Gi` (2147483648 bytes)"), "{warnings:?}");
    // In `defaults:`, once, there.
    let yaml = "cluster: c\nregion: eu-west-1\nstate_table: tbl\ndefaults:\n  headroom: { pod_memory: 500M }\npools:\n  - {name: a, spot_asgs: [s1]}\n  - {name: b, spot_asgs: [s2]}\n";
    let (_, warnings) = Config::from_yaml_with_warnings(yaml).unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].path, "defaults.headroom.pod_memory");
    assert!(warnings[0].message.contains("`500Mi`"), "{warnings:?}");
    for binary in ["2Gi", "512Mi", "1073741824", "1e9"] {
        let (_, warnings) =
            Config::from_yaml_with_warnings(&minimal_with(&format!("    headroom:\n      pod_memory: {binary}\n")))
                .unwrap();
        assert!(warnings.is_empty(), "{binary}: {warnings:?}");
    }
}

#[test]
fn top_level_x_keys_hold_anchors_and_are_not_read() {
    let yaml = "x-fallback: &fallback\n  max_on_demand: 3\n  anything: goes here\nx-notes: [free, form]\n\
                cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:\n  - name: p\n    spot_asgs: [s1]\n    \
                fallback:\n      <<: *fallback\n      anything: ~\n";
    // The block itself is free-form; what the pool takes from it is read as the pool's.
    let errors = Config::from_yaml(yaml).unwrap_err();
    assert_eq!(errors.0.len(), 1, "{errors}");
    assert_eq!(errors.0[0].path, "pools[0].fallback.anything");
    let yaml = yaml.replace("  anything: goes here\n", "").replace("      anything: ~\n", "");
    let config = Config::from_yaml(&yaml).unwrap();
    assert_eq!(config.pools[0].fallback.max_on_demand, 3);
    // Only at the top level, and only `x-`.
    let issue = only_issue(&minimal_with("    x-notes: free\n"));
    assert!(issue.message.starts_with("unknown key"), "{issue:?}");
    let schema = json_schema();
    assert!(schema["patternProperties"]["^x-"].is_object(), "editors take `x-` keys too");
}

/// A bare memory number is bytes to Kubernetes: the unit offered keeps its likely meaning
/// (`2048` as 2 GiB, `2048Mi`), and is asked for, not guessed, when none is likely.
#[test]
fn a_bare_memory_number_is_offered_the_unit_it_likely_meant() {
    for (written, expected) in [
        ("2048", "`2048` is 2048 bytes: a memory quantity without a suffix is bytes; write `2048Mi` (2 GiB) if you meant mebibytes"),
        ("512", "write `512Mi` if you meant mebibytes"),
        ("2", "write `2Gi` if you meant gibibytes"),
        ("1000", "write its unit (`Mi` for mebibytes, `Gi` for gibibytes)"),
    ] {
        let issue = only_issue(&minimal_with(&format!("    headroom:\n      pod_memory: {written}\n")));
        assert_eq!(issue.path, "pools[0].headroom.pod_memory");
        assert!(issue.message.contains(expected), "{written}: {issue:?}");
        assert!(!issue.message.contains(&format!("`{written}Gi`")) || written == "2", "{written}: {issue:?}");
    }
}

/// Without the cluster's nodes, a pause pod is held to the largest EC2 instance: one
/// larger would stay Pending on every node any ASG can launch.
#[test]
fn a_pause_pod_larger_than_any_ec2_instance_is_refused() {
    let yaml = minimal_with("    headroom:\n      pod_cpu: \"100000\"\n      pod_memory: 900Ti\n");
    let errors = Config::from_yaml(&yaml).unwrap_err();
    let find = |path: &str| errors.0.iter().find(|i| i.path == path).unwrap_or_else(|| panic!("{path}: {errors}"));
    let cpu = find("pools[0].headroom.pod_cpu");
    assert_eq!((cpu.line, cpu.column), (Some(9), Some(7)), "{cpu:?}");
    assert_eq!(
        cpu.message,
        "`100000` is more CPU than any EC2 instance has (the largest, u7inh-32tb.480xlarge, has 1920 vCPUs): no \
         node can hold such a pause pod, so it would stay Pending and hold no room"
    );
    assert!(find("pools[0].headroom.pod_memory").message.starts_with(
        "`900Ti` is more memory than any EC2 instance has (the largest, u7inh-32tb.480xlarge, has 32768Gi)"
    ));
    // Every listed shape too; the largest instance itself is taken.
    let listed = minimal_with("    headroom:\n      shapes:\n        - { name: all, cpu: 1920, memory: 32Ti }\n        - { name: more, cpu: 1921, memory: 1Gi }\n");
    let issue = only_issue(&listed);
    assert_eq!(issue.path, "pools[0].headroom.shapes[1].cpu", "{issue:?}");
    assert_eq!(LARGEST_INSTANCE.memory_bytes, 32 << 40);
}

/// China's regions are valid regions, but Ballast's forwarder needs EKS Pod Identity,
/// which AWS does not offer there: a warning (`--strict` fails), with the page that says so.
#[test]
fn a_china_region_is_warned_of_with_the_compatibility_page() {
    for region in ["cn-north-1", "cn-northwest-1"] {
        let (_, warnings) = Config::from_yaml_with_warnings(&minimal_with("").replace("eu-west-1", region)).unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!((warnings[0].path.as_str(), warnings[0].line), ("region", Some(2)), "{warnings:?}");
        assert!(warnings[0].message.contains("EKS Pod Identity"), "{warnings:?}");
        assert!(warnings[0].message.contains("docs/src/compatibility.md"), "{warnings:?}");
    }
    for region in ["eu-west-1", "us-gov-west-1"] {
        let (_, warnings) = Config::from_yaml_with_warnings(&minimal_with("").replace("eu-west-1", region)).unwrap();
        assert!(warnings.is_empty(), "{region}: {warnings:?}");
    }
}
