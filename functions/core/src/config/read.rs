//! Reading and validating the top level, each pool and its ASG, fallback and
//! interruption sections; every problem is pushed with its path.

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml_ng::Value;

use super::headroom::read_headroom;
use super::walk::{kind, Fields, Issues};
use super::{
    resolve, AsgSelector, Config, FallbackConfig, InterruptionConfig, PoolConfig, Toleration, TolerationOperator,
};

pub(super) fn read_config(value: &Value, issues: &mut Issues) -> Option<Config> {
    let mut f = Fields::of(value, "", issues);
    let cluster: Option<String> = f.required("cluster", issues);
    let region: Option<String> = f.required("region", issues);
    let account: Option<String> = f.optional("account", issues);
    let state_table: Option<String> = f.required("state_table", issues);
    let dry_run = f.or("dry_run", bool::default(), issues);
    let pools_value = f.raw("pools");
    // Taken out before (see `shared`); known here so a typo of it is suggested.
    let _ = f.raw("defaults");
    f.finish(issues);

    if let Some(why) = cluster.as_deref().and_then(super::cluster_name_mistake) {
        issues.push("cluster", why);
    }
    if let Some(why) = region.as_deref().and_then(super::region_mistake) {
        issues.push("region", why);
    }
    if let Some(region) = region.as_deref().filter(|r| super::partition(r) == Some(super::Partition::China)) {
        issues.warn(
            "region",
            format!(
                "{region} is in AWS's China partition, which Ballast does not support: the forwarder's role is given \
                 through EKS Pod Identity, which AWS does not offer in the China Regions, so it would get none ({})",
                super::COMPATIBILITY_PAGE
            ),
        );
    }
    if let Some(a) = &account {
        if a.len() != 12 || !a.bytes().all(|b| b.is_ascii_digit()) {
            issues.push("account", format!("`{a}` is not a 12-digit AWS account id (quote it in YAML)"));
        }
    }
    if let Some(t) = &state_table {
        if t.len() < 3 || t.len() > 255 || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) {
            issues.push("state_table", format!("`{t}` is not a DynamoDB table name (3-255 of a-z A-Z 0-9 _ . -)"));
        }
    }

    let mut pools = Vec::new();
    match pools_value {
        None => issues.push("pools", "is required: at least one pool"),
        Some(Value::Sequence(items)) if items.is_empty() => issues.push("pools", "must list at least one pool"),
        Some(Value::Sequence(items)) => {
            check_pool_names(items, issues);
            for (i, item) in items.iter().enumerate() {
                if let Some(pool) = read_pool(item, &format!("pools[{i}]"), issues) {
                    pools.push((i, pool));
                }
            }
        }
        Some(other) => issues.push("pools", format!("expected a list of pools, found {}", kind(other))),
    }
    check_across_pools(&pools, issues);
    if let Some(region) = &region {
        check_mirror_partitions(&pools, region, issues);
    }

    Some(Config {
        cluster: cluster?,
        region: region?,
        account,
        state_table: state_table?,
        dry_run,
        pools: pools.into_iter().map(|(_, p)| p).collect(),
    })
}

/// Duplicate names are found on the raw pools, so a pool with other errors still counts.
fn check_pool_names(items: &[Value], issues: &mut Issues) {
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let Some(name) = item.get("name").and_then(Value::as_str) else { continue };
        if let Some(first) = names.get(name) {
            issues.push(format!("pools[{i}].name"), format!("duplicate pool name `{name}` (also pools[{first}])"));
        } else {
            names.insert(name, i);
        }
    }
}

/// Tag selectors one of which asks for a subset of the other's tags: every ASG the wider
/// one matches, the narrower one matches too. Refused in two roles (within a pool or across
/// pools) as sure to overlap; other pairs are checked when the ASGs are resolved.
fn check_tag_overlaps(pools: &[(usize, PoolConfig)], issues: &mut Issues) {
    let mut seen: Vec<(usize, &str, resolve::Role, &BTreeMap<String, String>)> = Vec::new();
    for (i, pool) in pools {
        for (role, selector) in resolve::selectors(pool) {
            let AsgSelector::Tags(tags) = selector else { continue };
            let within =
                |a: &BTreeMap<String, String>, b: &BTreeMap<String, String>| a.iter().all(|(k, v)| b.get(k) == Some(v));
            let clash = seen.iter().find(|(j, _, other_role, other)| {
                (j != i || *other_role != role) && (within(tags, other) || within(other, tags))
            });
            if let Some((j, other_pool, other_role, other)) = clash {
                let field = match role {
                    resolve::Role::Spot => "spot_asgs",
                    resolve::Role::OnDemand => "on_demand_asg",
                };
                issues.push(
                    format!("pools[{i}].{field}"),
                    format!(
                        "`{selector}` ({} role of pool {}) and `{}` ({other_role} role of pool {other_pool}, pools[{j}]) \
                         select the same ASGs: an ASG serves one role of one pool; add a tag that tells them apart",
                        role, pool.name, AsgSelector::Tags((*other).clone())
                    ),
                );
            }
            seen.push((*i, &pool.name, role, tags));
        }
    }
}

fn check_across_pools(pools: &[(usize, PoolConfig)], issues: &mut Issues) {
    check_tag_overlaps(pools, issues);
    let mut asg_owner: BTreeMap<String, usize> = BTreeMap::new();
    for (i, pool) in pools {
        let named = pool
            .spot_asgs
            .iter()
            .chain(pool.on_demand_asg.as_ref())
            .filter_map(|s| match s {
                AsgSelector::Name(n) => Some(n.clone()),
                AsgSelector::Tags(_) => None,
            })
            .collect::<BTreeSet<_>>();
        for asg in named {
            if let Some(other) = asg_owner.insert(asg.clone(), *i) {
                if other != *i {
                    issues.push(
                        format!("pools[{i}]"),
                        format!("ASG `{asg}` also belongs to pools[{other}]; an ASG can serve one pool only"),
                    );
                }
            }
        }
    }
}

fn read_pool(value: &Value, path: &str, issues: &mut Issues) -> Option<PoolConfig> {
    let mut f = Fields::of(value, path, issues);
    let name: Option<String> = f.required("name", issues);
    let spot_value = f.raw("spot_asgs");
    let od_value = f.raw("on_demand_asg");
    let node_selector: BTreeMap<String, String> = f.or("node_selector", BTreeMap::new(), issues);
    let tolerations: Vec<Toleration> = f.or("tolerations", Vec::new(), issues);
    let fallback_value = f.raw("fallback").cloned().unwrap_or(Value::Null);
    let interruption_value = f.raw("interruption").cloned().unwrap_or(Value::Null);
    let headroom_value = f.raw("headroom").cloned().unwrap_or(Value::Null);
    let fallback_path = f.path("fallback");
    let interruption_path = f.path("interruption");
    let headroom_path = f.path("headroom");
    let spot_path = f.path("spot_asgs");
    let od_path = f.path("on_demand_asg");
    f.finish(issues);

    if let Some(n) = &name {
        if !is_dns_label(n) || n.len() > 40 {
            issues.push(
                format!("{path}.name"),
                format!("`{n}` must be a lowercase DNS label of at most 40 characters (it names Kubernetes objects)"),
            );
        }
    }

    let mut spot_asgs = Vec::new();
    match spot_value {
        None => issues.push(&spot_path, "is required: at least one spot ASG, in preference order"),
        Some(Value::Sequence(items)) if items.is_empty() => issues.push(&spot_path, "must list at least one spot ASG"),
        Some(Value::Sequence(items)) => {
            for (i, item) in items.iter().enumerate() {
                if let Some(sel) = read_selector(item, &format!("{spot_path}[{i}]"), issues) {
                    if spot_asgs.contains(&sel) {
                        issues.push(format!("{spot_path}[{i}]"), format!("`{sel}` is listed twice"));
                    }
                    spot_asgs.push(sel);
                }
            }
        }
        Some(other) => issues.push(&spot_path, format!("expected a list of ASGs, found {}", kind(other))),
    }
    // Absent: a spot-only pool. Present but unreadable: an error, not a spot-only pool.
    let on_demand_asg = match od_value {
        None => Some(None),
        Some(v) => read_selector(v, &od_path, issues).map(Some),
    };
    if let Some(Some(od)) = &on_demand_asg {
        if spot_asgs.contains(od) {
            issues.push(
                &od_path,
                format!("`{od}` is also listed in spot_asgs; the on-demand ASG must be a different group"),
            );
        }
    }
    for (i, t) in tolerations.iter().enumerate() {
        if t.operator == Some(TolerationOperator::Exists) && t.value.is_some() {
            issues.push(format!("{path}.tolerations[{i}].value"), "must be empty when operator is Exists");
        }
    }

    let fallback = read_fallback(&fallback_value, &fallback_path, issues);
    let interruption = read_interruption(&interruption_value, &interruption_path, issues);
    let headroom = read_headroom(&headroom_value, &headroom_path, issues);

    Some(PoolConfig {
        name: name?,
        spot_asgs,
        on_demand_asg: on_demand_asg?,
        node_selector,
        tolerations,
        fallback: fallback?,
        interruption: interruption?,
        headroom: headroom?,
    })
}

fn read_selector(value: &Value, path: &str, issues: &mut Issues) -> Option<AsgSelector> {
    // A bare string is the common case: the ASG's name.
    match value {
        Value::String(name) => return non_empty_name(name, path, issues),
        // `on_demand_asg: 5`: a name that YAML read as a number (or a boolean).
        Value::Number(_) | Value::Bool(_) => {
            let written = serde_yaml_ng::to_string(value).unwrap_or_default();
            let written = written.trim();
            issues.push(
                path,
                format!(
                    "expected an ASG's name (e.g. `eks-general-on-demand`) or a `tags:` selector, found `{written}`; \
                     quote a name that YAML would read otherwise: `\"{written}\"`"
                ),
            );
            return None;
        }
        _ => {}
    }
    let mut f = Fields::of(value, path, issues);
    let name: Option<String> = f.optional("name", issues);
    let tags: Option<BTreeMap<String, String>> = f.optional("tags", issues);
    f.finish(issues);
    match (name, tags) {
        (Some(name), None) => non_empty_name(&name, path, issues),
        (None, Some(tags)) if tags.is_empty() => {
            issues.push(format!("{path}.tags"), "must name at least one tag");
            None
        }
        (None, Some(tags)) => Some(AsgSelector::Tags(tags)),
        (Some(_), Some(_)) => {
            issues.push(path, "give either `name` or `tags`, not both");
            None
        }
        (None, None) => {
            issues.push(path, "give the ASG's `name` or a `tags` selector");
            None
        }
    }
}

fn non_empty_name(name: &str, path: &str, issues: &mut Issues) -> Option<AsgSelector> {
    if name.trim().is_empty() || name.len() > 255 {
        issues.push(path, "an ASG name must have 1 to 255 characters");
        return None;
    }
    Some(AsgSelector::Name(name.to_string()))
}

fn read_fallback(value: &Value, path: &str, issues: &mut Issues) -> Option<FallbackConfig> {
    let before = issues.0.len();
    let d = FallbackConfig::default();
    let mut f = Fields::of(value, path, issues);
    let spot_launch_grace = f.or("spot_launch_grace", d.spot_launch_grace, issues);
    let unavailable_ttl = f.or("unavailable_ttl", d.unavailable_ttl, issues);
    let max_on_demand = f.or("max_on_demand", d.max_on_demand, issues);
    let failback_after = f.or("failback_after", d.failback_after, issues);
    let failback_step = f.or("failback_step", d.failback_step, issues);
    let wait_and_retry = f.or("wait_and_retry", d.wait_and_retry, issues);
    let interruption_rate = f.or("interruption_rate", d.interruption_rate, issues);
    let step_path = f.path("failback_step");
    let rate_path = f.path("interruption_rate");
    let ttl_path = f.path("unavailable_ttl");
    f.finish(issues);
    if failback_step == 0 {
        issues.push(step_path, "must be at least 1, or failback never ends");
    }
    if interruption_rate.count == 0 {
        issues.push(format!("{rate_path}.count"), "must be at least 1");
    }
    if interruption_rate.window.0.is_zero() {
        issues.push(format!("{rate_path}.window"), "must be longer than zero");
    }
    if unavailable_ttl.0.is_zero() {
        issues.push(ttl_path, "must be longer than zero, or a capacity error is forgotten at once");
    }
    (issues.0.len() == before).then_some(FallbackConfig {
        spot_launch_grace,
        unavailable_ttl,
        max_on_demand,
        failback_after,
        failback_step,
        wait_and_retry,
        interruption_rate,
    })
}

fn read_interruption(value: &Value, path: &str, issues: &mut Issues) -> Option<InterruptionConfig> {
    let before = issues.0.len();
    let d = InterruptionConfig::default();
    let mut f = Fields::of(value, path, issues);
    let surge = f.or("surge", d.surge, issues);
    let drain = f.or("drain", d.drain, issues);
    let rebalance = f.or("rebalance", d.rebalance, issues);
    let drain_timeout = f.or("drain_timeout", d.drain_timeout, issues);
    let timeout_path = f.path("drain_timeout");
    f.finish(issues);
    if drain_timeout.0.as_secs() > 900 {
        issues.push(timeout_path, "must be at most 15m, the longest a Lambda function runs");
    }
    (issues.0.len() == before).then_some(InterruptionConfig { surge, drain, rebalance, drain_timeout })
}

/// A pause image mirrored in another partition's ECR cannot be pulled: the nodes'
/// credentials do not cross partitions (another region of the same one is fine).
fn check_mirror_partitions(pools: &[(usize, PoolConfig)], region: &str, issues: &mut Issues) {
    let Some(ours) = super::partition(region) else { return };
    for (i, pool) in pools {
        let Some(host) = super::image_ecr_host(&pool.headroom.image) else { continue };
        match super::partition(host.region) {
            Some(theirs) if theirs != ours => issues.push(
                format!("pools[{i}].headroom.image"),
                format!(
                    "the mirror is in {} (partition {}), the cluster in {region} (partition {}): nodes cannot pull \
                     across partitions; mirror the image to ECR in {region}'s partition",
                    host.region,
                    theirs.name(),
                    ours.name()
                ),
            ),
            _ => {}
        }
    }
}

pub(super) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub(super) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}
