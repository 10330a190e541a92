//! `config check --pods/--nodes`: the config held to the cluster's pods and nodes, as
//! kubectl prints them. Warns when a pool's workload pods fit in no pause pod it can run,
//! or in no node of the pool: room held in the wrong shape starts none of them.

mod objects;
mod placement;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ballast_core::config::{Config, HeadroomShapes, PoolConfig};
use ballast_core::shape::PodShape;

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
    /// the first pool whose node_selector its labels carry. Warns when pods (--pods) or a
    /// pause-pod shape of a pool are larger than every such node's allocatable. A pool
    /// with no node in the file is not judged.
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

/// The warnings the pods and nodes give about `config`'s pools.
pub fn warnings(config: &Config, args: &ClusterArgs) -> anyhow::Result<Vec<String>> {
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
    let mut warnings = Vec::new();
    // A file of another cluster, or a config whose selectors match nothing, would
    // otherwise pass in silence.
    if let Some(path) = &args.nodes {
        if !nodes.is_empty() && pool_nodes.iter().all(Vec::is_empty) {
            warnings.push(format!(
                "none of the {} node(s) in {} carries the node_selector of a pool: is it this cluster's?",
                nodes.len(),
                path.display()
            ));
        }
    }
    if let Some(path) = &args.pods {
        if unplaced > 0 && workloads.iter().all(Vec::is_empty) {
            warnings.push(format!(
                "none of the {unplaced} workload pod(s) in {} belongs to a pool (by its node's labels, or its node \
                 selector, required node affinity and tolerations): is it this cluster's?",
                path.display()
            ));
        }
    }
    let sources = Sources { pods: args.pods.as_deref(), nodes: args.nodes.as_deref() };
    for (index, pool) in config.pools.iter().enumerate() {
        pool_warnings(index, pool, &workloads[index], &pool_nodes[index], &sources, &mut warnings);
    }
    Ok(warnings)
}

/// The input files, named in the warnings.
struct Sources<'a> {
    pods: Option<&'a Path>,
    nodes: Option<&'a Path>,
}

/// The pause-pod shapes a pool may run, each with where the config sets it; for `auto`,
/// `pod_cpu`/`pod_memory`, its shape until pods are seen (learned shapes larger than
/// every node are never given pause pods).
fn pause_shapes(pool: &PoolConfig, index: usize) -> Vec<(String, PodShape)> {
    match &pool.headroom.shapes {
        HeadroomShapes::Auto => vec![(
            format!("pools[{index}].headroom.pod_cpu/pod_memory (the shape of `auto` until pods are seen)"),
            pool.headroom.unit_shape(),
        )],
        HeadroomShapes::Fixed => {
            vec![(format!("pools[{index}].headroom.pod_cpu/pod_memory"), pool.headroom.unit_shape())]
        }
        HeadroomShapes::Listed(list) => list
            .iter()
            .enumerate()
            .map(|(i, l)| (format!("pools[{index}].headroom.shapes[{i}] ({})", l.name), l.shape.clone()))
            .collect(),
    }
}

fn pool_warnings(
    index: usize,
    pool: &PoolConfig,
    pods: &[Workload],
    nodes: &[(&str, PodShape)],
    sources: &Sources,
    warnings: &mut Vec<String>,
) {
    let name = &pool.name;
    let shapes = pause_shapes(pool, index);
    // Without a node of the pool in the file, every pod and shape is taken to fit one.
    let fits_a_node = |shape: &PodShape| nodes.is_empty() || nodes.iter().any(|(_, a)| shape.fits_in(a));
    if let (Some(nodes_file), Some((largest_node, largest))) =
        (sources.nodes, nodes.iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0))))
    {
        let nodes_file = nodes_file.display();
        for (at, shape) in shapes.iter().filter(|(_, s)| !fits_a_node(s)) {
            warnings.push(format!(
                "{at}: pause pods of {shape} fit in no node of pool {name} in {nodes_file} (the largest allocatable: \
                 {largest}, node {largest_node}): they would stay Pending and hold no room; make the shape fit the pool's \
                 nodes"
            ));
        }
        let too_large: Vec<&Workload> = pods.iter().filter(|p| !fits_a_node(&p.shape)).collect();
        if let (Some(pods_file), Some(example)) = (sources.pods, largest_of(&too_large)) {
            warnings.push(format!(
                "pools[{index}] ({name}): {} of its {} workload pod(s) in {} are larger than every node of the pool \
                 in {nodes_file} (the largest allocatable: {largest}, node {largest_node}), e.g. {} ({}): no \
                 headroom and no scale-up starts them; give the pool larger instance types or make the pods smaller",
                too_large.len(),
                pods.len(),
                pods_file.display(),
                example.id,
                example.shape,
            ));
        }
    }
    // `auto` takes the shapes of the pods that arrive: every pod has a hole of its own.
    if shapes.is_empty() || matches!(pool.headroom.shapes, HeadroomShapes::Auto) {
        return;
    }
    // Pods no node holds are told of above: a pause pod their size would never be placed.
    // Nor does a shape no node holds hold room for anyone.
    let holding: Vec<&PodShape> = shapes.iter().map(|(_, s)| s).filter(|s| fits_a_node(s)).collect();
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
    warnings.push(format!(
        "pools[{index}].headroom.shapes: {} of the {} workload pod(s) of pool {name} in {} fit in no pause pod it runs \
         ({runs}), e.g. {} ({}): room held for them starts none; list a shape they fit in under \
         headroom.shapes{all_fit}, or use shapes: auto",
        unfit.len(),
        pods.len(),
        pods_file.display(),
        example.id,
        example.shape,
    ));
}

/// The largest pod (CPU first), the first of equals: the example a warning names.
fn largest_of<'a>(pods: &[&'a Workload]) -> Option<&'a Workload> {
    pods.iter().copied().reduce(|a, b| if b.shape > a.shape { b } else { a })
}
