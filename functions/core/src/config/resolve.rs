//! Which ASGs a pool's selectors pick: one pure rule for every adapter (AWS, the
//! `ballast plan` snapshot, the test doubles), applied to the ASGs they listed.

use std::collections::BTreeMap;

use super::{AsgSelector, PoolConfig};

/// An ASG as listed, for resolution: its name and tags.
#[derive(Debug, Clone, Copy)]
pub struct AsgRef<'a> {
    pub name: &'a str,
    pub tags: &'a BTreeMap<String, String>,
}

/// A pool's ASGs by name: the spot ones in the pool's preference order, then on-demand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPool<'a> {
    /// Each spot selector's matches in name order, selectors in the config's order; an
    /// ASG two selectors match is listed once, where it first appears.
    pub spot: Vec<&'a str>,
    /// `None` for a spot-only pool.
    pub on_demand: Option<&'a str>,
}

/// Why a pool's selectors do not resolve against the ASGs listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("pool {pool}: no ASG matches spot selector `{selector}`")]
    NoSpot { pool: String, selector: AsgSelector },
    #[error("pool {pool}: no ASG matches on-demand selector `{selector}`")]
    NoOnDemand { pool: String, selector: AsgSelector },
    #[error("pool {pool}: on-demand selector `{selector}` matches {count} ASGs; it must match one")]
    ManyOnDemand { pool: String, selector: AsgSelector, count: usize },
}

/// Resolves `pool`'s selectors against `asgs` (any order; names are unique). Each spot
/// selector must match at least one ASG, the on-demand selector exactly one.
pub fn resolve_pool_asgs<'a>(
    pool: &PoolConfig,
    asgs: impl IntoIterator<Item = AsgRef<'a>>,
) -> Result<ResolvedPool<'a>, ResolveError> {
    let mut listed: Vec<AsgRef<'a>> = asgs.into_iter().collect();
    listed.sort_by(|a, b| a.name.cmp(b.name));
    listed.dedup_by(|a, b| a.name == b.name);
    fn matching<'l, 'a>(
        listed: &'l [AsgRef<'a>],
        selector: &'l AsgSelector,
    ) -> impl Iterator<Item = &'l AsgRef<'a>> + 'l {
        listed.iter().filter(move |a| selector.matches(a.name, a.tags))
    }
    let mut spot: Vec<&'a str> = Vec::new();
    for selector in &pool.spot_asgs {
        let mut any = false;
        for asg in matching(&listed, selector) {
            any = true;
            if !spot.contains(&asg.name) {
                spot.push(asg.name);
            }
        }
        if !any {
            return Err(ResolveError::NoSpot { pool: pool.name.clone(), selector: selector.clone() });
        }
    }
    let Some(selector) = &pool.on_demand_asg else {
        return Ok(ResolvedPool { spot, on_demand: None });
    };
    let mut on_demand = matching(&listed, selector);
    match (on_demand.next(), on_demand.count()) {
        (Some(asg), 0) => Ok(ResolvedPool { spot, on_demand: Some(asg.name) }),
        (None, _) => Err(ResolveError::NoOnDemand { pool: pool.name.clone(), selector: selector.clone() }),
        (Some(_), more) => {
            Err(ResolveError::ManyOnDemand { pool: pool.name.clone(), selector: selector.clone(), count: more + 1 })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn pool(spot: &str, on_demand: &str) -> PoolConfig {
        let yaml = format!(
            "cluster: c\nregion: eu-west-1\nstate_table: tbl\npools:\n  - name: p\n    spot_asgs: {spot}\n    on_demand_asg: {on_demand}\n"
        );
        Config::from_yaml(&yaml).expect("valid").pools.remove(0)
    }

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    struct Listed(Vec<(&'static str, BTreeMap<String, String>)>);

    impl Listed {
        fn refs(&self) -> impl Iterator<Item = AsgRef<'_>> {
            self.0.iter().map(|(name, tags)| AsgRef { name, tags })
        }
    }

    fn listed() -> Listed {
        let pool = tags(&[("ballast.io/pool", "general")]);
        let fallback = tags(&[("ballast.io/pool", "general"), ("ballast.io/capacity", "spot-fallback")]);
        Listed(vec![
            ("spot-z", pool.clone()),
            ("od", BTreeMap::new()),
            ("spot-fallback", fallback),
            ("spot-a", pool),
            ("other", BTreeMap::new()),
        ])
    }

    #[test]
    fn spot_selectors_in_config_order_each_in_name_order_without_repeats() {
        let asgs = listed();
        let p = pool("[spot-z, {tags: {ballast.io/pool: general}}]", "od");
        let resolved = resolve_pool_asgs(&p, asgs.refs()).unwrap();
        assert_eq!(resolved.spot, vec!["spot-z", "spot-a", "spot-fallback"]);
        assert_eq!(resolved.on_demand, Some("od"));
    }

    #[test]
    fn a_spot_selector_that_matches_nothing_is_an_error() {
        let asgs = listed();
        let p = pool("[spot-a, {tags: {ballast.io/pool: batch}}]", "od");
        let err = resolve_pool_asgs(&p, asgs.refs()).unwrap_err();
        assert_eq!(err.to_string(), "pool p: no ASG matches spot selector `tags(ballast.io/pool=batch)`");
    }

    #[test]
    fn the_on_demand_selector_must_match_exactly_one() {
        let asgs = listed();
        let err = resolve_pool_asgs(&pool("[spot-a]", "missing"), asgs.refs()).unwrap_err();
        assert_eq!(err.to_string(), "pool p: no ASG matches on-demand selector `missing`");
        let err = resolve_pool_asgs(&pool("[spot-a]", "{tags: {ballast.io/pool: general}}"), asgs.refs()).unwrap_err();
        assert_eq!(
            err,
            ResolveError::ManyOnDemand {
                pool: "p".into(),
                selector: AsgSelector::Tags(tags(&[("ballast.io/pool", "general")])),
                count: 3
            }
        );
        assert_eq!(
            err.to_string(),
            "pool p: on-demand selector `tags(ballast.io/pool=general)` matches 3 ASGs; it must match one"
        );
    }

    #[test]
    fn an_asg_listed_twice_counts_once() {
        let mut asgs = listed();
        asgs.0.push(("od", BTreeMap::new()));
        let resolved = resolve_pool_asgs(&pool("[spot-a]", "od"), asgs.refs()).unwrap();
        assert_eq!(resolved, ResolvedPool { spot: vec!["spot-a"], on_demand: Some("od") });
    }
}
