//! `config check --pods/--nodes`: the config held to the cluster's pods and nodes, as
//! kubectl prints them. Refuses a pause pod that fits in no node of its pool (it would
//! stay Pending); warns when a pool's workload pods fit in no pause pod it can run, or in
//! no node of the pool: room held in the wrong shape starts none of them.

mod objects;
mod placement;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ballast_core::config::{Config, HeadroomShapes, PoolConfig};
use ballast_core::shape::PodShape;

use super::config::{Finding, Findings};
use super::Invalid;
use objects::{ListError, Node, Pod, Role};
use placement::Pools;

#[derive(clap::Args)]
pub struct ClusterArgs {
    /// The cluster's pods, as `kubectl get pods -A -o json` prints them: warns when a
    /// pool's workload pods (not DaemonSet, mirror, finished or pause pods) fit in no pause
    /// pod it runs (`shapes: fixed`: pod_cpu/pod_memory; a list: every shape listed;
    /// `auto` learns them) or, with --nodes, in no node of the pool. A pod belongs to its
    /// node's pool (with --nodes); a pending one, or one whose node is not known, to the
    /// first pool (config order) whose nodes its node selector, required node affinity and
    /// tolerations admit, as the forwarder places pending pods.
    #[arg(long, value_name = "FILE")]
    pods: Option<PathBuf>,
    /// The cluster's nodes, as `kubectl get nodes -o json` prints them: a node belongs to
    /// the first pool whose node_selector its labels carry. A pause-pod shape of a pool
    /// larger than every such node's allocatable is a problem (it would stay Pending);
    /// pods (--pods) larger than all of them are a warning. A pool with no node in the
    /// file is not held to them (a note says so).
    #[arg(long, value_name = "FILE")]
    pub nodes: Option<PathBuf>,
}

/// A file read as a list of `kind`: unreadable (exit 2), or not such a list (an invalid
/// input, exit 1, as any file read but not valid).
fn read_list<T: serde::de::DeserializeOwned>(path: &Path, kind: &'static str) -> anyhow::Result<Vec<(usize, T)>> {
    let bytes = super::read(path)?;
    objects::read_list(&bytes, kind).map_err(|e| malformed(path, kind, e).into())
}

fn malformed(path: &Path, kind: &'static str, why: ListError) -> Invalid {
    Invalid::input(path, format!("cannot read {} as kubectl's {kind} list: {why}", path.display()))
}

/// A workload pod of a pool.
struct Workload {
    id: String,
    shape: PodShape,
}

/// What the pods and nodes tell of `config`'s pools (read from `input`): problems,
/// warnings and notes, added to `found`.
pub fn check(config: &Config, input: &str, args: &ClusterArgs, found: &mut Findings) -> anyhow::Result<()> {
    let nodes: Vec<(usize, Node)> = match &args.nodes {
        Some(path) => read_list(path, "Node")?,
        None => Vec::new(),
    };
    let pools = Pools::new(&config.pools, &nodes.iter().map(|(_, n)| n).collect::<Vec<_>>());
    // Each pool's nodes, by allocatable.
    let mut pool_nodes: Vec<Vec<(&str, PodShape)>> = vec![Vec::new(); config.pools.len()];
    if let Some(path) = &args.nodes {
        for (index, node) in &nodes {
            let Some(pool) = pools.node_pool(&node.metadata.labels) else { continue };
            let allocatable = objects::shape_of(&node.status.allocatable, "status.allocatable")
                .map_err(|why| malformed(path, "Node", ListError::Quantity { index: *index, why }))?;
            pool_nodes[pool].push((&node.metadata.name, allocatable));
        }
    }
    let by_name: BTreeMap<&str, &Node> = nodes.iter().map(|(_, n)| (n.metadata.name.as_str(), n)).collect();
    let mut workloads: Vec<Vec<Workload>> = (0..config.pools.len()).map(|_| Vec::new()).collect();
    let mut unplaced = 0usize;
    if let Some(path) = &args.pods {
        let headroom_namespaces: Vec<&str> = config.pools.iter().map(|p| p.headroom.namespace.as_str()).collect();
        for (index, pod) in read_list::<Pod>(path, "Pod")? {
            if pod.role(&headroom_namespaces) != Role::Workload {
                continue;
            }
            let shape =
                pod.spec.requests().map_err(|why| malformed(path, "Pod", ListError::Quantity { index, why }))?;
            if shape.is_empty() {
                continue; // it needs no room
            }
            let pool = match pod.spec.node_name.as_deref().and_then(|name| by_name.get(name)) {
                Some(node) => pools.node_pool(&node.metadata.labels),
                None => pools.pending_pod_pool(&pod.spec),
            };
            match pool {
                Some(pool) => workloads[pool].push(Workload { id: pod.id(), shape }),
                None => unplaced += 1,
            }
        }
    }
    // A file of another cluster, or a config whose selectors match nothing, would
    // otherwise pass in silence.
    if let Some(path) = &args.nodes {
        if !nodes.is_empty() && pool_nodes.iter().all(Vec::is_empty) {
            found.warnings.push(Finding::new(
                path.display().to_string(),
                "",
                format!(
                    "none of its {} node(s) carries the node_selector of a pool of {input}: is it this cluster's?",
                    nodes.len()
                ),
            ));
        }
    }
    if let Some(path) = &args.pods {
        if unplaced > 0 && workloads.iter().all(Vec::is_empty) {
            found.warnings.push(Finding::new(
                path.display().to_string(),
                "",
                format!(
                    "none of its {unplaced} workload pod(s) belongs to a pool of {input} (by its node's labels, or its \
                     node selector, required node affinity and tolerations): is it this cluster's?"
                ),
            ));
        }
    }
    let sources = Sources { config: input, pods: args.pods.as_deref(), nodes: args.nodes.as_deref() };
    for (index, pool) in config.pools.iter().enumerate() {
        // In a file of this cluster (a pool has nodes in it), a pool without is not judged.
        if let (Some(path), true) = (&args.nodes, pool_nodes[index].is_empty()) {
            if pool_nodes.iter().any(|n| !n.is_empty()) {
                found.notes.push(format!(
                    "pool {} has no node in {} (none carries its node_selector): its pause pods are held to the \
                     largest EC2 instance only",
                    pool.name,
                    path.display()
                ));
            }
        }
        pool_findings(index, pool, &workloads[index], &pool_nodes[index], &sources, found);
    }
    Ok(())
}

/// The input files, named in the findings.
struct Sources<'a> {
    config: &'a str,
    pods: Option<&'a Path>,
    nodes: Option<&'a Path>,
}

/// One pause-pod shape a pool may run: where the config sets it, what it is called in a
/// message, and its size.
struct PauseShape {
    /// The key whose value is too large (`pod_cpu` or `pod_memory` for the pool's own
    /// shape, the list item for a listed one).
    path: String,
    what: String,
    shape: PodShape,
}

/// The pause-pod shapes a pool may run; for `auto`, `pod_cpu`/`pod_memory`, its shape
/// until pods are seen (learned shapes larger than every node are never given pause pods).
fn pause_shapes(pool: &PoolConfig, index: usize, nodes: &[(&str, PodShape)]) -> Vec<PauseShape> {
    let own = |what: &str| {
        let shape = pool.headroom.unit_shape();
        // Blame the key no node has enough of (CPU first).
        let cpu_fits = nodes.iter().any(|(_, a)| shape.cpu_millis <= a.cpu_millis);
        let key = if cpu_fits { "pod_memory" } else { "pod_cpu" };
        PauseShape { path: format!("pools[{index}].headroom.{key}"), what: what.to_string(), shape }
    };
    match &pool.headroom.shapes {
        HeadroomShapes::Auto => vec![own("pod_cpu/pod_memory, the shape of `auto` until pods are seen")],
        HeadroomShapes::Fixed => vec![own("pod_cpu/pod_memory")],
        HeadroomShapes::Listed(list) => list
            .iter()
            .enumerate()
            .map(|(i, l)| PauseShape {
                path: format!("pools[{index}].headroom.shapes[{i}]"),
                what: format!("shape {}", l.name),
                shape: l.shape.clone(),
            })
            .collect(),
    }
}

fn pool_findings(
    index: usize,
    pool: &PoolConfig,
    pods: &[Workload],
    nodes: &[(&str, PodShape)],
    sources: &Sources,
    found: &mut Findings,
) {
    let name = &pool.name;
    let shapes = pause_shapes(pool, index, nodes);
    // Without a node of the pool in the file, every pod and shape is taken to fit one.
    let fits_a_node = |shape: &PodShape| nodes.is_empty() || nodes.iter().any(|(_, a)| shape.fits_in(a));
    if let (Some(nodes_file), Some((largest_node, largest))) =
        (sources.nodes, nodes.iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0))))
    {
        let nodes_file = nodes_file.display();
        for pause in shapes.iter().filter(|p| !fits_a_node(&p.shape)) {
            found.problems.push(Finding::new(
                sources.config,
                &pause.path,
                format!(
                    "pause pods of {} ({}) fit in no node of pool {name} in {nodes_file} (the largest allocatable: \
                     {largest}, node {largest_node}): they would stay Pending and hold no room; make the shape fit the \
                     pool's nodes",
                    pause.shape, pause.what
                ),
            ));
        }
        let too_large: Vec<&Workload> = pods.iter().filter(|p| !fits_a_node(&p.shape)).collect();
        if let (Some(pods_file), Some(example)) = (sources.pods, largest_of(&too_large)) {
            found.warnings.push(Finding::new(
                sources.config,
                format!("pools[{index}]"),
                format!(
                    "{} of the {} workload pod(s) of pool {name} in {} are larger than every node of the pool in \
                     {nodes_file} (the largest allocatable: {largest}, node {largest_node}), e.g. {} ({}): no headroom \
                     and no scale-up starts them; give the pool larger instance types or make the pods smaller",
                    too_large.len(),
                    pods.len(),
                    pods_file.display(),
                    example.id,
                    example.shape,
                ),
            ));
        }
    }
    // `auto` takes the shapes of the pods that arrive: every pod has a hole of its own.
    if shapes.is_empty() || matches!(pool.headroom.shapes, HeadroomShapes::Auto) {
        return;
    }
    // Pods no node holds are told of above: a pause pod their size would never be placed.
    // Nor does a shape no node holds hold room for anyone.
    let holding: Vec<&PodShape> = shapes.iter().map(|p| &p.shape).filter(|s| fits_a_node(s)).collect();
    let unfit: Vec<&Workload> =
        pods.iter().filter(|p| fits_a_node(&p.shape) && !holding.iter().any(|s| p.shape.fits_in(s))).collect();
    let (Some(pods_file), Some(example)) = (sources.pods, largest_of(&unfit)) else { return };
    let runs = match &pool.headroom.shapes {
        HeadroomShapes::Listed(list) => {
            let listed: Vec<String> = list.iter().map(|l| format!("{} {}", l.name, l.shape)).collect();
            format!("the shapes listed: {}", listed.join(", "))
        }
        _ => format!("shapes: fixed, pod_cpu/pod_memory {}", pool.headroom.unit_shape()),
    };
    let all = unfit.iter().fold(PodShape::default(), |all, p| all.covering(&p.shape));
    let all_fit = if unfit.len() > 1 && fits_a_node(&all) { format!(" (all fit in {all})") } else { String::new() };
    found.warnings.push(Finding::new(
        sources.config,
        format!("pools[{index}].headroom.shapes"),
        format!(
            "{} of the {} workload pod(s) of pool {name} in {} fit in no pause pod it runs ({runs}), e.g. {} ({}): \
             room held for them starts none; list a shape they fit in under headroom.shapes{all_fit}, or use shapes: \
             auto",
            unfit.len(),
            pods.len(),
            pods_file.display(),
            example.id,
            example.shape,
        ),
    ));
}

/// The largest pod (CPU first), the first of equals: the example a warning names.
fn largest_of<'a>(pods: &[&'a Workload]) -> Option<&'a Workload> {
    pods.iter().copied().reduce(|a, b| if b.shape > a.shape { b } else { a })
}
