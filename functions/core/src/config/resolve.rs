//! Which ASGs a pool's selectors pick: one pure rule for every adapter (AWS, the
//! `ballast plan` snapshot, the test doubles), applied to the ASGs they listed.

use std::collections::BTreeMap;

use super::{AsgSelector, PoolConfig};

/// An ASG as listed, for resolution: its name and tags.
#[derive(Debug, Clone, Copy)]
pub struct AsgRef<'a> {
    /// The ASG's name.
    pub name: &'a str,
    /// The ASG's tags.
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
    /// A spot selector matches no ASG listed.
    #[error("pool {pool}: no ASG matches spot selector `{selector}`")]
    NoSpot {
        /// The pool whose selector it is.
        pool: String,
        /// The selector as configured.
        selector: AsgSelector,
    },
    /// The on-demand selector matches no ASG listed.
    #[error("pool {pool}: no ASG matches on-demand selector `{selector}`")]
    NoOnDemand {
        /// The pool whose selector it is.
        pool: String,
        /// The selector as configured.
        selector: AsgSelector,
    },
    /// The on-demand selector matches more than one ASG.
    #[error("pool {pool}: on-demand selector `{selector}` matches {count} ASGs; it must match one")]
    ManyOnDemand {
        /// The pool whose selector it is.
        pool: String,
        /// The selector as configured.
        selector: AsgSelector,
        /// How many ASGs it matches.
        count: usize,
    },
    /// Sized for two roles, an ASG would be moved twice by one plan (or by two pools' plans),
    /// so neither pool is planned until the selectors tell them apart.
    #[error(
        "ASG {asg} is selected as pool {pool}'s {role} ASG by `{selector}` and as pool {other_pool}'s {other_role} \
         ASG by `{other_selector}`: an ASG serves one role of one pool; narrow the selectors (pool {pool} is not \
         planned until then)"
    )]
    TwoRoles {
        /// The ASG selected twice.
        asg: String,
        /// The pool refused: not planned until the selectors tell the roles apart.
        pool: String,
        /// What `pool` selects the ASG as.
        role: Role,
        /// The selector of `pool` that picks it.
        selector: Box<AsgSelector>,
        /// The pool that selects it too (`pool` itself when its spot and on-demand selectors
        /// both pick it).
        other_pool: String,
        /// What `other_pool` selects the ASG as.
        other_role: Role,
        /// The selector of `other_pool` that picks it.
        other_selector: Box<AsgSelector>,
    },
}

/// What a pool uses an ASG for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// One of the pool's spot ASGs (`spot_asgs`).
    Spot,
    /// The pool's on-demand ASG (`on_demand_asg`).
    OnDemand,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Spot => "spot",
            Role::OnDemand => "on-demand",
        })
    }
}

/// Every selector of a pool with the role it selects for.
pub fn selectors(pool: &PoolConfig) -> impl Iterator<Item = (Role, &AsgSelector)> {
    pool.spot_asgs.iter().map(|s| (Role::Spot, s)).chain(pool.on_demand_asg.iter().map(|s| (Role::OnDemand, s)))
}

/// Refuses `pool` when one of its ASGs (`asgs`, as resolved for it) is selected by another
/// pool too. Each pool is resolved alone, so this is checked against the other pools'
/// selectors, from the ASG's own name and tags.
pub fn check_one_role<'a>(
    pool: &PoolConfig,
    pools: &[PoolConfig],
    asgs: impl IntoIterator<Item = AsgRef<'a>>,
) -> Result<(), ResolveError> {
    for asg in asgs {
        let Some((role, selector)) = selectors(pool).find(|(_, s)| s.matches(asg.name, asg.tags)) else { continue };
        for other in pools.iter().filter(|p| p.name != pool.name) {
            if let Some((other_role, other_selector)) = selectors(other).find(|(_, s)| s.matches(asg.name, asg.tags)) {
                return Err(ResolveError::TwoRoles {
                    asg: asg.name.to_string(),
                    pool: pool.name.clone(),
                    role,
                    selector: Box::new(selector.clone()),
                    other_pool: other.name.clone(),
                    other_role,
                    other_selector: Box::new(other_selector.clone()),
                });
            }
        }
    }
    Ok(())
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
        (Some(asg), 0) => match pool.spot_asgs.iter().find(|s| s.matches(asg.name, asg.tags)) {
            Some(spot_selector) => Err(ResolveError::TwoRoles {
                asg: asg.name.to_string(),
                pool: pool.name.clone(),
                role: Role::Spot,
                selector: Box::new(spot_selector.clone()),
                other_pool: pool.name.clone(),
                other_role: Role::OnDemand,
                other_selector: Box::new(selector.clone()),
            }),
            None => Ok(ResolvedPool { spot, on_demand: Some(asg.name) }),
        },
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
    fn an_asg_in_two_roles_is_refused_naming_it_both_selectors_and_pools() {
        let asgs = listed();
        let p = pool("[{tags: {ballast.io/pool: general}}]", "spot-fallback");
        let err = resolve_pool_asgs(&p, asgs.refs()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ASG spot-fallback is selected as pool p's spot ASG by `tags(ballast.io/pool=general)` and as pool p's \
             on-demand ASG by `spot-fallback`: an ASG serves one role of one pool; narrow the selectors (pool p is \
             not planned until then)"
        );
        // Across pools, from the ASG's own tags: the other pool's on-demand selector.
        let mut other = pool("[other]", "{tags: {ballast.io/capacity: spot-fallback}}");
        other.name = "q".into();
        let mine = pool("[spot-z, {tags: {ballast.io/pool: general}}]", "od");
        let resolved = resolve_pool_asgs(&mine, asgs.refs()).unwrap();
        let refs = || asgs.refs().filter(|a| resolved.spot.contains(&a.name));
        let err = check_one_role(&mine, &[mine.clone(), other.clone()], refs()).unwrap_err();
        assert!(
            matches!(
                &err,
                ResolveError::TwoRoles { asg, other_pool, other_role: Role::OnDemand, .. } if asg == "spot-fallback" && other_pool == "q"
            ),
            "{err}"
        );
        assert_eq!(check_one_role(&mine, std::slice::from_ref(&mine), refs()), Ok(()), "a pool alone");
    }

    #[test]
    fn an_asg_listed_twice_counts_once() {
        let mut asgs = listed();
        asgs.0.push(("od", BTreeMap::new()));
        let resolved = resolve_pool_asgs(&pool("[spot-a]", "od"), asgs.refs()).unwrap();
        assert_eq!(resolved, ResolvedPool { spot: vec!["spot-a"], on_demand: Some("od") });
    }
}
