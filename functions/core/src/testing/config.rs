//! The smallest valid config: one pool, one spot ASG `s`, the on-demand ASG `od`, dry
//! run. Tests that need a config and not a particular one start from it.

/// [`minimal_config`] with nothing added.
pub const MINIMAL_CONFIG: &str = "cluster: c\nregion: eu-west-1\nstate_table: ballast-state\ndry_run: true\npools:\n  - name: general\n    spot_asgs: [s]\n    on_demand_asg: od\n";

/// The minimal config with `pool_extra` (YAML lines indented by four spaces) added to
/// its pool `general`.
pub fn minimal_config(pool_extra: &str) -> String {
    format!("{MINIMAL_CONFIG}{pool_extra}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn the_minimal_config_is_valid_and_takes_pool_lines() {
        let config = Config::from_yaml(MINIMAL_CONFIG).unwrap();
        assert!(config.dry_run);
        assert_eq!(config.pools.len(), 1);
        let with = Config::from_yaml(&minimal_config("    node_selector: { ballast.io/pool: general }\n")).unwrap();
        assert_eq!(with.pools[0].node_selector.get("ballast.io/pool").map(String::as_str), Some("general"));
    }
}
