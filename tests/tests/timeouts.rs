//! The getting-started page checks the config against the function timeout the stacks
//! actually deploy: a larger one there would pass a drain_timeout the functions cannot
//! outlast.

use ballast_tests::templates::{rendered, sam_translated, text, Variant};

#[test]
fn the_getting_started_config_check_uses_the_timeout_both_stacks_deploy() {
    let doc = std::fs::read_to_string(ballast_tests::repo_root().join("docs/src/getting-started.md")).expect("doc");
    let given: Vec<u64> = doc
        .lines()
        .filter(|l| l.trim_start().starts_with("ballast config check"))
        .filter_map(|l| l.split("--function-timeout ").nth(1))
        .map(|rest| rest.split_whitespace().next().unwrap_or_default().parse().expect("a number of seconds"))
        .collect();
    assert!(!given.is_empty(), "the page runs `ballast config check --function-timeout N`");
    let Some(sam) = sam_translated() else { return };
    let default = text(&sam["Parameters"]["FunctionTimeoutSeconds"]["Default"]);
    for variant in Variant::ALL {
        let Some(t) = rendered(variant) else { continue };
        let timeouts: Vec<String> =
            t.of_kind("AWS::Lambda::Function").map(|(_, f)| text(&f.properties["Timeout"])).collect();
        assert_eq!(timeouts.len(), 3, "{}", variant.name());
        for timeout in timeouts {
            assert_eq!(timeout, default, "{}: a function's Timeout", variant.name());
            for g in &given {
                assert_eq!(
                    g.to_string(),
                    timeout,
                    "{}: the page checks with {g} s, the stack deploys {timeout} s",
                    variant.name()
                );
            }
        }
    }
}
