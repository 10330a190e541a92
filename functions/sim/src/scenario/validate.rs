//! Turns the raw file into a [`Scenario`]: every quantity, range and reference checked,
//! each error with its path; and the Ballast config the scenario's pools make.

use std::collections::BTreeMap;

use ballast_core::config::Config;
use ballast_core::units::{parse_cpu_millis, parse_memory_bytes, HumanDuration};
use serde_yaml_ng::Value;

// The raw file types are private to the parent, which a child module may read.
use super::*;

fn quantity(
    parse: fn(&str) -> Result<u64, ballast_core::units::QuantityError>,
    text: &str,
    path: String,
) -> Result<u64, ScenarioError> {
    match parse(text) {
        Ok(0) => Err(field(path, "must be more than zero")),
        Ok(v) => Ok(v),
        Err(e) => Err(field(path, e.to_string())),
    }
}

fn range(r: &[HumanDuration; 2], path: &str) -> Result<(), ScenarioError> {
    if r[0] > r[1] {
        return Err(field(path, format!("the range {}..{} is reversed", r[0], r[1])));
    }
    Ok(())
}

pub(super) fn validate(raw: Raw) -> Result<Scenario, ScenarioError> {
    let raw_pools = RawPools::new(&raw.ballast)?;
    let pool_names = raw_pools.names()?;
    let time_zone: Tz = raw
        .time_zone
        .parse()
        .map_err(|_| field("time_zone", format!("`{}` is not an IANA time zone", raw.time_zone)))?;
    if raw.duration.0.is_zero() {
        return Err(field("duration", "must be longer than zero"));
    }
    if raw.availability_zones.is_empty() {
        return Err(field("availability_zones", "list at least one"));
    }
    let mut instance_types = BTreeMap::new();
    for (name, t) in &raw.instance_types {
        let path = format!("instance_types.{name}");
        if t.on_demand_price < 0.0 || t.spot_price < 0.0 {
            return Err(field(&path, "prices must not be negative"));
        }
        let cpu_millis = quantity(parse_cpu_millis, &t.cpu, format!("{path}.cpu"))?;
        let memory_bytes = quantity(parse_memory_bytes, &t.memory, format!("{path}.memory"))?;
        let (capacity_cpu_millis, capacity_memory_bytes) = match &t.capacity {
            Some(c) => (
                quantity(parse_cpu_millis, &c.cpu, format!("{path}.capacity.cpu"))?,
                quantity(parse_memory_bytes, &c.memory, format!("{path}.capacity.memory"))?,
            ),
            None => (cpu_millis, memory_bytes),
        };
        if capacity_cpu_millis < cpu_millis || capacity_memory_bytes < memory_bytes {
            return Err(field(format!("{path}.capacity"), "is less than the allocatable cpu or memory"));
        }
        instance_types.insert(
            name.clone(),
            InstanceType {
                cpu_millis,
                memory_bytes,
                capacity_cpu_millis,
                capacity_memory_bytes,
                on_demand_price: t.on_demand_price,
                spot_price: t.spot_price,
                gpus: t.gpu,
            },
        );
    }
    let mut groups = Vec::new();
    for (i, g) in raw.node_groups.iter().enumerate() {
        let path = format!("node_groups[{i}]");
        let types: Vec<String> = match (&g.instance_type, g.instance_types.is_empty()) {
            (Some(one), true) => vec![one.clone()],
            (None, false) => g.instance_types.clone(),
            (Some(_), false) => {
                return Err(field(&path, "give instance_type or instance_types (a mixed-instances group), not both"))
            }
            (None, true) => return Err(field(&path, "needs instance_type or instance_types")),
        };
        for (t, name) in types.iter().enumerate() {
            if !instance_types.contains_key(name) {
                let at =
                    if g.instance_type.is_some() { "instance_type".into() } else { format!("instance_types[{t}]") };
                return Err(field(format!("{path}.{at}"), format!("`{name}` is not in instance_types")));
            }
        }
        if g.max_pods == 0 {
            return Err(field(format!("{path}.max_pods"), "must be more than zero"));
        }
        if g.min > g.max || g.initial > g.max || g.initial < g.min {
            return Err(field(&path, format!("need min <= initial <= max, got {} / {} / {}", g.min, g.initial, g.max)));
        }
        if groups.iter().any(|o: &Group| o.name == g.name) {
            return Err(field(format!("{path}.name"), format!("duplicate group `{}`", g.name)));
        }
        let pool = group_pool(g, &pool_names, &path)?;
        groups.push(Group {
            name: g.name.clone(),
            market: g.market,
            instance_types: types,
            min: g.min,
            max: g.max,
            initial: g.initial,
            expander_priority: None,
            labels: g.labels.clone(),
            taints: g.taints.clone(),
            max_pods: g.max_pods,
            pool,
            template_tagged: g.node_template_tags,
        });
    }
    expander_priorities(&raw.cluster_autoscaler, &mut groups)?;
    for (p, name) in pool_names.iter().enumerate() {
        if pool_groups(&groups, p, Market::OnDemand).count() > 1 {
            return Err(field(
                "node_groups",
                format!("Ballast's pool `{name}` takes at most one on-demand group (mark others `ballast: false`)"),
            ));
        }
        if pool_groups(&groups, p, Market::Spot).next().is_none() {
            return Err(field("node_groups", format!("need at least one spot group in Ballast's pool `{name}`")));
        }
    }
    let (mut daemonset_cpu, mut daemonset_mem) = (0, 0);
    for (i, d) in raw.daemonsets.iter().enumerate() {
        let path = format!("daemonsets[{i}]");
        daemonset_cpu += parse_cpu_millis(&d.cpu).map_err(|e| field(format!("{path}.cpu"), e.to_string()))?;
        daemonset_mem += parse_memory_bytes(&d.memory).map_err(|e| field(format!("{path}.memory"), e.to_string()))?;
        if raw.daemonsets[..i].iter().any(|o| o.name == d.name) {
            return Err(field(format!("{path}.name"), format!("duplicate DaemonSet `{}`", d.name)));
        }
    }
    let daemonset_pods = raw.daemonsets.len() as u32;
    for (i, g) in groups.iter().enumerate() {
        for t in &g.instance_types {
            let it = &instance_types[t];
            if it.cpu_millis <= daemonset_cpu || it.memory_bytes <= daemonset_mem || g.max_pods <= daemonset_pods {
                return Err(field(
                    format!("node_groups[{i}]"),
                    format!("the DaemonSets leave nothing of a {t} (or of its max_pods) for other pods"),
                ));
            }
        }
    }
    // The first classes are the pools' pause pods', set once Ballast's pools are known.
    let pause_classes = pool_names.len();
    let mut classes = vec![Placement::default(); pause_classes];
    let mut class_of = |node_selector: &BTreeMap<String, String>, tolerations: &[Toleration], path: String| {
        let placement = Placement { node_selector: node_selector.clone(), tolerations: tolerations.to_vec() };
        if !groups.iter().any(|g| placement.fits(&g.labels, &g.taints)) {
            return Err(field(path, "fits no node group (node selector or taints): its pods would never run"));
        }
        Ok(match classes.iter().skip(pause_classes).position(|c| *c == placement) {
            Some(k) => k + pause_classes,
            None => {
                classes.push(placement);
                classes.len() - 1
            }
        })
    };
    let mut deployments = Vec::new();
    for (i, d) in raw.workload.deployments.iter().enumerate() {
        let path = format!("workload.deployments[{i}]");
        if d.min_replicas > d.peak_replicas {
            return Err(field(&path, "min_replicas is above peak_replicas"));
        }
        deployments.push(Deployment {
            name: d.name.clone(),
            cpu_millis: quantity(parse_cpu_millis, &d.cpu, format!("{path}.cpu"))?,
            memory_bytes: quantity(parse_memory_bytes, &d.memory, format!("{path}.memory"))?,
            gpus: d.gpu,
            min_replicas: d.min_replicas,
            peak_replicas: d.peak_replicas,
            curve: d.curve,
            class: class_of(&d.node_selector, &d.tolerations, path)?,
        });
    }
    let mut batches = Vec::new();
    for (i, b) in raw.workload.batch.iter().enumerate() {
        let path = format!("workload.batch[{i}]");
        range(&b.duration, &format!("{path}.duration"))?;
        let mut at = b.at.clone();
        if let Some(every) = b.every {
            if every.0.is_zero() {
                return Err(field(format!("{path}.every"), "must be longer than zero"));
            }
            if let Some(late) = b.at.iter().find(|a| a.0 >= every.0) {
                return Err(field(
                    format!("{path}.at"),
                    format!("{late} is not within one period (`every: {every}`): give offsets inside the period"),
                ));
            }
            let mut period = every.0;
            while period < raw.duration.0 {
                at.extend(b.at.iter().map(|a| HumanDuration(a.0 + period)));
                period += every.0;
            }
            at.retain(|a| a.0 < raw.duration.0);
        }
        batches.push(Batch {
            name: b.name.clone(),
            at,
            jobs: b.jobs,
            cpu_millis: quantity(parse_cpu_millis, &b.cpu, format!("{path}.cpu"))?,
            memory_bytes: quantity(parse_memory_bytes, &b.memory, format!("{path}.memory"))?,
            gpus: b.gpu,
            duration: b.duration,
            class: class_of(&b.node_selector, &b.tolerations, path)?,
        });
    }
    range(&raw.nodes.boot, "nodes.boot")?;
    range(&raw.nodes.network_attach, "nodes.network_attach")?;
    range(&raw.spot.rebalance_lead, "spot.rebalance_lead")?;
    if !(0.0..=1.0).contains(&raw.spot.rebalance_fraction) {
        return Err(field("spot.rebalance_fraction", "must be between 0 and 1"));
    }
    if raw.spot.false_rebalances_per_node_hour < 0.0 {
        return Err(field("spot.false_rebalances_per_node_hour", "must not be negative"));
    }
    if raw.spot.interruptions_per_node_hour < 0.0 {
        return Err(field("spot.interruptions_per_node_hour", "must not be negative"));
    }
    for (i, loss) in raw.spot.capacity_losses.iter().enumerate() {
        if !instance_types.contains_key(&loss.instance_type) {
            return Err(field(
                format!("spot.capacity_losses[{i}].instance_type"),
                format!("`{}` is not in instance_types", loss.instance_type),
            ));
        }
        if let Some(az) = &loss.availability_zone {
            if !raw.availability_zones.contains(az) {
                return Err(field(
                    format!("spot.capacity_losses[{i}].availability_zone"),
                    format!("`{az}` is not in availability_zones"),
                ));
            }
        }
    }
    for (i, storm) in raw.spot.storms.iter().enumerate() {
        if !(0.0..=1.0).contains(&storm.fraction) {
            return Err(field(format!("spot.storms[{i}].fraction"), "must be between 0 and 1"));
        }
    }
    let ballast = ballast_config(&raw_pools, &groups)?;
    for (p, pool) in ballast.pools.iter().enumerate() {
        classes[p] = Placement { node_selector: pool.node_selector.clone(), tolerations: pool.tolerations.clone() };
        if !groups.iter().any(|g| g.pool == Some(p) && classes[p].fits(&g.labels, &g.taints)) {
            return Err(field(
                raw_pools.path(p),
                "its pause pods (node_selector, tolerations) fit none of the pool's node groups",
            ));
        }
        // Headroom held on another pool's nodes (or a group Ballast does not manage) is
        // headroom the pool does not have.
        if let Some(other) = groups.iter().find(|g| g.pool != Some(p) && classes[p].fits(&g.labels, &g.taints)) {
            let whose = match other.pool {
                Some(o) => format!("of pool `{}`", pool_names[o]),
                None => "outside Ballast's pools".into(),
            };
            return Err(field(
                raw_pools.path(p),
                format!(
                    "its pause pods (node_selector, tolerations) also fit node group `{}` {whose}: give the pool a node_selector only its groups' labels match",
                    other.name
                ),
            ));
        }
    }
    let static_overprovisioning = static_spec(raw.static_overprovisioning, &pool_names)?;
    let accepts: Vec<Vec<bool>> =
        classes.iter().map(|c| groups.iter().map(|g| c.fits(&g.labels, &g.taints)).collect()).collect();
    // A pod asking for GPUs runs only where its placement and the type's devices allow.
    let gpu_pods =
        deployments.iter().enumerate().map(|(i, d)| (format!("workload.deployments[{i}].gpu"), d.gpus, d.class));
    let gpu_jobs = batches.iter().enumerate().map(|(i, b)| (format!("workload.batch[{i}].gpu"), b.gpus, b.class));
    for (path, gpus, class) in gpu_pods.chain(gpu_jobs).filter(|(_, gpus, _)| *gpus > 0) {
        let fits = groups
            .iter()
            .enumerate()
            .any(|(g, group)| accepts[class][g] && group.instance_types.iter().any(|t| instance_types[t].gpus >= gpus));
        if !fits {
            return Err(field(path, format!("no node group its pods fit has an instance type with {gpus} GPU(s)")));
        }
    }
    let class_pool = accepts
        .iter()
        .map(|takes| (0..pool_names.len()).find(|&p| groups.iter().zip(takes).any(|(g, &t)| t && g.pool == Some(p))))
        .collect();
    Ok(Scenario {
        name: raw.name,
        description: raw.description,
        start: raw.start,
        duration: raw.duration,
        time_zone,
        availability_zones: raw.availability_zones,
        instance_types,
        groups,
        daemonset_cpu,
        daemonset_mem,
        daemonset_pods,
        classes,
        accepts,
        class_pool,
        nodes: raw.nodes,
        scheduler: raw.scheduler,
        deployments,
        batches,
        spot: raw.spot,
        ca: raw.cluster_autoscaler,
        static_overprovisioning,
        interruption_handling: raw.interruption_handling,
        delivery_delay: raw.ballast.delivery_delay,
        ballast,
    })
}

/// Each group's priority as CA's priority expander matches it: the highest priority
/// with a regex found in the group's name (Go's `regexp.MatchString`: unanchored).
fn expander_priorities(ca: &CaSpec, groups: &mut [Group]) -> Result<(), ScenarioError> {
    let Some(priorities) = &ca.priorities else {
        for g in groups.iter_mut() {
            g.expander_priority = Some(if g.market == Market::Spot { 50 } else { 10 });
        }
        return Ok(());
    };
    for (priority, patterns) in priorities.iter().rev() {
        for (i, pattern) in patterns.iter().enumerate() {
            let regex = regex_lite::Regex::new(pattern)
                .map_err(|e| field(format!("cluster_autoscaler.priorities.{priority}[{i}]"), e.to_string()))?;
            for g in groups.iter_mut().filter(|g| g.expander_priority.is_none() && regex.is_match(&g.name)) {
                g.expander_priority = Some(*priority);
            }
        }
    }
    if groups.iter().all(|g| g.expander_priority.is_none()) {
        return Err(field(
            "cluster_autoscaler.priorities",
            "no node group matches: cluster-autoscaler would never scale up",
        ));
    }
    Ok(())
}

/// Ballast's pool settings as the scenario gives them: `ballast.pool` (one pool) or
/// `ballast.pools` (several, each named).
struct RawPools {
    pools: Vec<Value>,
    /// Given as the list `ballast.pools`.
    listed: bool,
}

impl RawPools {
    fn new(raw: &RawBallast) -> Result<RawPools, ScenarioError> {
        match (&raw.pools, raw.pool.is_null()) {
            (None, _) => Ok(RawPools { pools: vec![raw.pool.clone()], listed: false }),
            (Some(pools), _) if pools.is_empty() => Err(field("ballast.pools", "list at least one pool")),
            (Some(pools), true) => Ok(RawPools { pools: pools.clone(), listed: true }),
            (Some(_), false) => Err(field("ballast", "give pool (one pool) or pools (several), not both")),
        }
    }

    /// Where pool `p`'s settings are in the scenario.
    fn path(&self, p: usize) -> String {
        if self.listed {
            format!("ballast.pools[{p}]")
        } else {
            "ballast.pool".into()
        }
    }

    /// The pools' names: each listed pool names itself; a single pool may, else `sim`.
    fn names(&self) -> Result<Vec<String>, ScenarioError> {
        let mut names: Vec<String> = Vec::new();
        for (p, pool) in self.pools.iter().enumerate() {
            let name = match pool.get("name") {
                Some(Value::String(name)) => name.clone(),
                Some(_) => return Err(field(format!("{}.name", self.path(p)), "expected a string")),
                None if self.listed => {
                    return Err(field(format!("{}.name", self.path(p)), "name each of several pools"))
                }
                None => "sim".into(),
            };
            if names.contains(&name) {
                return Err(field(format!("{}.name", self.path(p)), format!("duplicate pool `{name}`")));
            }
            names.push(name);
        }
        Ok(names)
    }
}

/// The Ballast pool of a node group: none with `ballast: false`; the one it names; or
/// the only pool.
fn group_pool(g: &RawGroup, pool_names: &[String], path: &str) -> Result<Option<usize>, ScenarioError> {
    match (&g.pool, g.ballast) {
        (Some(_), false) => Err(field(format!("{path}.pool"), "a group with `ballast: false` is in no pool")),
        (None, false) => Ok(None),
        (Some(name), true) => match pool_names.iter().position(|n| n == name) {
            Some(p) => Ok(Some(p)),
            None => Err(field(
                format!("{path}.pool"),
                format!("`{name}` is not one of Ballast's pools ({})", pool_names.join(", ")),
            )),
        },
        (None, true) if pool_names.len() == 1 => Ok(Some(0)),
        (None, true) => Err(field(
            format!("{path}.pool"),
            format!("name one of Ballast's pools ({}) or set `ballast: false`", pool_names.join(", ")),
        )),
    }
}

fn static_spec(raw: RawStatic, pool_names: &[String]) -> Result<StaticSpec, ScenarioError> {
    let replicas = match raw.replicas {
        RawReplicas::Each(n) => vec![n; pool_names.len()],
        RawReplicas::PerPool(map) => {
            if let Some(unknown) = map.keys().find(|k| !pool_names.contains(k)) {
                return Err(field(
                    format!("static_overprovisioning.replicas.{unknown}"),
                    format!("is not one of Ballast's pools ({})", pool_names.join(", ")),
                ));
            }
            pool_names.iter().map(|n| map.get(n).copied().unwrap_or(0)).collect()
        }
    };
    Ok(StaticSpec { replicas, priority: raw.priority })
}

/// Builds a whole `ballast.yaml` around the scenario's pool settings and validates it
/// with the production config code.
fn ballast_config(raw: &RawPools, groups: &[Group]) -> Result<Config, ScenarioError> {
    let mut pools = Vec::new();
    for (p, pool) in raw.pools.iter().enumerate() {
        let path = raw.path(p);
        let mut pool_map = match pool {
            Value::Mapping(m) => m.clone(),
            Value::Null => Default::default(),
            _ => return Err(field(path, "expected a mapping of pool settings")),
        };
        for reserved in ["spot_asgs", "on_demand_asg"] {
            if pool_map.contains_key(reserved) {
                return Err(field(format!("{path}.{reserved}"), "is set by the simulator from node_groups"));
            }
        }
        // The pool's name is the scenario's to give, as in ballast.yaml; `sim` if it does not.
        if !pool_map.contains_key("name") {
            pool_map.insert("name".into(), "sim".into());
        }
        let spot: Vec<Value> = pool_groups(groups, p, Market::Spot).map(|(_, g)| Value::from(g.name.clone())).collect();
        pool_map.insert("spot_asgs".into(), Value::Sequence(spot));
        // None: a spot-only pool.
        if let Some((_, od)) = pool_groups(groups, p, Market::OnDemand).next() {
            pool_map.insert("on_demand_asg".into(), od.name.clone().into());
        }
        pools.push(Value::Mapping(pool_map));
    }
    let mut top = serde_yaml_ng::Mapping::new();
    top.insert("cluster".into(), "sim".into());
    top.insert("region".into(), "eu-west-1".into());
    top.insert("account".into(), "000000000000".into());
    top.insert("state_table".into(), "ballast-sim".into());
    top.insert("pools".into(), Value::Sequence(pools));
    Config::from_value(Value::Mapping(top)).map_err(|errors| {
        let first = &errors.0[0];
        let message = first.message.clone();
        // `pools[P]...` in ballast.yaml is where the scenario gave pool P.
        let at = first.path.strip_prefix("pools[").and_then(|rest| {
            let (p, tail) = rest.split_once(']')?;
            Some(format!("{}{tail}", raw.path(p.parse().ok()?)))
        });
        field(at.unwrap_or_else(|| first.path.clone()), message)
    })
}
