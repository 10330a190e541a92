//! The forwarder's Prometheus metrics, served on `/metrics` by the health server
//! (OpenMetrics text), named by Prometheus's conventions: `ballast_forwarder_` then what is
//! measured, in base units (seconds, bytes, cores), counters ending in `_total`, label
//! values without spaces. Counters follow what the loop and the sender did; the per-pool
//! gauges are set from the state on each tick; the process's own use (`process_*`) and
//! its container's memory limit are read at scrape time (`crate::process`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

use crate::bus::Delivery;
use crate::process::{MemoryLimitCollector, ProcessCollector};
use crate::state::{Kind, PoolTotals};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The event's detail-type in snake case, e.g. `pool_demand_changed`.
    pub kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    /// `pods` or `nodes`.
    pub resource: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabel {
    pub pool: String,
}

pub struct Metrics {
    registry: Registry,
    published: Family<KindLabel, Counter>,
    dropped: Counter,
    failed_entries: Counter,
    failed_calls: Counter,
    retries: Counter,
    relists: Family<ResourceLabel, Counter>,
    watch_errors: Family<ResourceLabel, Counter>,
    pool_pods: Family<PoolLabel, Gauge>,
    pool_nodes: Family<PoolLabel, Gauge>,
    pool_cpu_cores: Family<PoolLabel, Gauge<f64, AtomicU64>>,
    pool_memory: Family<PoolLabel, Gauge>,
    pool_unschedulable: Family<PoolLabel, Gauge>,
    pool_first_start_wait: Family<PoolLabel, Histogram, fn() -> Histogram>,
    tracked_pods: Gauge,
    tracked_nodes: Gauge,
    config_version: Gauge,
    config_refused: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn resource(kind: Kind) -> ResourceLabel {
    ResourceLabel { resource: if kind == Kind::Pods { "pods" } else { "nodes" }.to_string() }
}

/// The buckets the Pool Waits Measured events count, so a dashboard and the learner
/// see the same pods over a target.
fn wait_histogram() -> Histogram {
    Histogram::new(ballast_core::event::WAIT_BUCKETS_SECONDS)
}

/// `build_info{version, git_commit}` = 1; the commit is known when the build sets
/// `BALLAST_GIT_COMMIT` (scripts/release does; the Dockerfile takes it as a build argument).
fn build_info() -> Info<Vec<(String, String)>> {
    let mut labels = vec![("version".to_string(), env!("CARGO_PKG_VERSION").to_string())];
    if let Some(commit) = option_env!("BALLAST_GIT_COMMIT").filter(|c| !c.is_empty()) {
        labels.push(("git_commit".to_string(), commit.to_string()));
    }
    Info::new(labels)
}

/// A detail-type as a label value: `Pool Demand Changed` is `pool_demand_changed`.
pub fn kind_label(detail_type: &str) -> String {
    detail_type.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect()
}

fn gauge(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Metrics {
    /// The config version in force.
    pub fn config_in_force(&self, version: Option<i64>) {
        self.config_version.set(version.unwrap_or(0));
    }

    /// A config version refused.
    pub fn config_refused(&self) {
        self.config_refused.inc();
    }

    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            published: Family::default(),
            dropped: Counter::default(),
            failed_entries: Counter::default(),
            failed_calls: Counter::default(),
            retries: Counter::default(),
            relists: Family::default(),
            watch_errors: Family::default(),
            pool_pods: Family::default(),
            pool_nodes: Family::default(),
            pool_cpu_cores: Family::default(),
            pool_memory: Family::default(),
            pool_unschedulable: Family::default(),
            pool_first_start_wait: Family::new_with_constructor(wait_histogram),
            tracked_pods: Gauge::default(),
            tracked_nodes: Gauge::default(),
            config_version: Gauge::default(),
            config_refused: Counter::default(),
        };
        // `process_*` keep their standard names: no prefix on the root registry.
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let own = registry.sub_registry_with_prefix("ballast_forwarder");
        own.register("build", "The forwarder's version (value 1)", build_info());
        own.register_collector(Box::new(MemoryLimitCollector));
        own.register(
            "config_version",
            "The version of the config's SSM parameter the forwarder runs on (0: a file, no version)",
            m.config_version.clone(),
        );
        own.register(
            "config_refused",
            "Config versions refused (invalid); the forwarder stays on the last good one",
            m.config_refused.clone(),
        );
        own.register("events_published", "Events EventBridge accepted, by detail-type", m.published.clone());
        own.register("events_dropped", "Events given up after the last PutEvents attempt", m.dropped.clone());
        own.register(
            "put_events_failed_entries",
            "PutEvents entries EventBridge refused (each is retried until the last attempt)",
            m.failed_entries.clone(),
        );
        own.register(
            "put_events_failed_calls",
            "PutEvents calls that failed as a whole (throttling, 5xx, network, refused)",
            m.failed_calls.clone(),
        );
        own.register("put_events_retries", "PutEvents calls that retried earlier failures", m.retries.clone());
        own.register(
            "watch_relists",
            "Lists after the first (after a 410 Gone or a lost watch), by resource",
            m.relists.clone(),
        );
        own.register("watch_errors", "Watch or list failures, by resource", m.watch_errors.clone());
        own.register("pool_pods", "Workload pods counted as the pool's demand", m.pool_pods.clone());
        own.register("pool_nodes", "Nodes of the pool present in the cluster", m.pool_nodes.clone());
        own.register(
            "pool_cpu_requests_cores",
            "The CPU its workload pods request, in cores",
            m.pool_cpu_cores.clone(),
        );
        own.register_with_unit(
            "pool_memory_requests",
            "The memory its workload pods request",
            Unit::Bytes,
            m.pool_memory.clone(),
        );
        own.register(
            "pool_unschedulable_pods",
            "The pool's workload pods the scheduler could not place",
            m.pool_unschedulable.clone(),
        );
        own.register_with_unit(
            "pool_first_start_wait",
            "How long the pool's new workload pods waited, from creation to the scheduler binding them",
            Unit::Seconds,
            m.pool_first_start_wait.clone(),
        );
        own.register("tracked_pods", "Pod records held (workload pods of any pool or none)", m.tracked_pods.clone());
        own.register("tracked_nodes", "Node records held for nodes present", m.tracked_nodes.clone());
        // Zeros from the start, so that a dashboard's rate() has a first sample.
        for kind in [Kind::Pods, Kind::Nodes] {
            let _ = m.watch_errors.get_or_create(&resource(kind));
            let _ = m.relists.get_or_create(&resource(kind));
        }
        Metrics { registry, ..m }
    }

    /// What the sender did with one batch.
    pub fn delivered(&self, delivery: &Delivery) {
        for (kind, sent) in &delivery.sent_by_kind {
            self.published.get_or_create(&KindLabel { kind: kind_label(kind) }).inc_by(*sent as u64);
        }
        self.dropped.inc_by(delivery.dropped as u64);
        self.failed_entries.inc_by(delivery.failed_entries as u64);
        self.failed_calls.inc_by(delivery.failed_calls as u64);
        self.retries.inc_by(delivery.retries as u64);
    }

    pub fn watch_error(&self, kind: Kind) {
        self.watch_errors.get_or_create(&resource(kind)).inc();
    }

    /// The relists counted so far (a total from the state; the counter only goes up).
    pub fn relisted(&self, kind: Kind, total: u32) {
        let counter = self.relists.get_or_create(&resource(kind));
        counter.inc_by(u64::from(total).saturating_sub(counter.get()));
    }

    /// A workload pod of `pool` was bound `seconds` after its creation.
    pub fn first_start(&self, pool: &str, seconds: f64) {
        self.pool_first_start_wait.get_or_create(&PoolLabel { pool: pool.to_string() }).observe(seconds);
    }

    /// Per-pool gauges from the totals, in the config's pool order.
    pub fn pools<'a>(
        &self,
        names: impl Iterator<Item = &'a str>,
        totals: &[PoolTotals],
        unschedulable: &[Option<u32>],
        tracked: (usize, usize),
    ) {
        for (i, name) in names.enumerate() {
            let pool = PoolLabel { pool: name.to_string() };
            let t = totals.get(i).copied().unwrap_or_default();
            self.pool_pods.get_or_create(&pool).set(i64::from(t.pods));
            self.pool_nodes.get_or_create(&pool).set(i64::from(t.nodes));
            self.pool_cpu_cores.get_or_create(&pool).set(t.cpu_millis as f64 / 1000.0);
            self.pool_memory.get_or_create(&pool).set(gauge(t.memory_bytes));
            let stuck = unschedulable.get(i).copied().flatten().unwrap_or(0);
            self.pool_unschedulable.get_or_create(&pool).set(i64::from(stuck));
        }
        self.tracked_pods.set(gauge(tracked.0 as u64));
        self.tracked_nodes.set(gauge(tracked.1 as u64));
    }

    /// The registry as OpenMetrics text, the process read now.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; an encoding error would leave a partial page.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "cannot encode the metrics");
        }
        out
    }
}

/// A page with a sample in every family: what `/metrics` holds once the forwarder has
/// published, watched and seen a pool (a family with no sample yet is left off the page).
/// With [`sample_names`], the names a dashboard or an alert may query.
pub fn example_page() -> String {
    let m = Metrics::new();
    m.delivered(&Delivery { sent_by_kind: vec![("Pool Demand Changed", 1)], ..Delivery::default() });
    m.pools(["general"].into_iter(), &[PoolTotals::default()], &[None], (0, 0));
    m.first_start("general", 1.0);
    m.encode()
}

/// The names of the samples a page of OpenMetrics text holds or may hold, from its
/// `# TYPE` lines (so a family described with no sample counts): a counter's `NAME_total`, a
/// histogram's `_bucket`, `_sum` and `_count`, an info's `_info`, a gauge's own name.
/// What a query may name; the monitoring component's test checks its queries against it.
pub fn sample_names(page: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in page.lines() {
        let Some((family, kind)) = line.strip_prefix("# TYPE ").and_then(|rest| rest.split_once(' ')) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            "summary" => &["", "_sum", "_count"],
            "info" => &["_info"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|suffix| format!("{family}{suffix}")));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_every_family_with_its_counts() {
        let m = Metrics::new();
        let delivery = Delivery {
            sent: 3,
            dropped: 1,
            calls: 3,
            failed_entries: 2,
            failed_calls: 0,
            retries: 2,
            sent_by_kind: vec![("Pool Demand Changed", 2), ("Node Lifecycle", 1)],
        };
        m.delivered(&delivery);
        m.watch_error(Kind::Pods);
        m.relisted(Kind::Nodes, 2);
        m.relisted(Kind::Nodes, 2);
        let totals = [PoolTotals { cpu_millis: 1500, memory_bytes: 1 << 30, pods: 3, nodes: 2 }];
        m.pools(["general"].into_iter(), &totals, &[Some(1)], (4, 2));
        m.first_start("general", 0.4);
        m.first_start("general", 12.0);
        let page = m.encode();
        for line in [
            "ballast_forwarder_events_published_total{kind=\"pool_demand_changed\"} 2",
            "ballast_forwarder_events_published_total{kind=\"node_lifecycle\"} 1",
            "ballast_forwarder_events_dropped_total 1",
            "ballast_forwarder_put_events_failed_entries_total 2",
            "ballast_forwarder_put_events_retries_total 2",
            "ballast_forwarder_watch_errors_total{resource=\"pods\"} 1",
            "ballast_forwarder_watch_relists_total{resource=\"nodes\"} 2",
            "ballast_forwarder_pool_cpu_requests_cores{pool=\"general\"} 1.5",
            "ballast_forwarder_pool_memory_requests_bytes{pool=\"general\"} 1073741824",
            "ballast_forwarder_pool_pods{pool=\"general\"} 3",
            "ballast_forwarder_pool_nodes{pool=\"general\"} 2",
            "ballast_forwarder_pool_unschedulable_pods{pool=\"general\"} 1",
            "ballast_forwarder_tracked_pods 4",
            "# TYPE ballast_forwarder_pool_first_start_wait_seconds histogram",
            "ballast_forwarder_pool_first_start_wait_seconds_count{pool=\"general\"} 2",
            "ballast_forwarder_pool_first_start_wait_seconds_sum{pool=\"general\"} 12.4",
            "ballast_forwarder_pool_first_start_wait_seconds_bucket{le=\"0.5\",pool=\"general\"} 1",
            "ballast_forwarder_pool_first_start_wait_seconds_bucket{le=\"10.0\",pool=\"general\"} 1",
            "ballast_forwarder_pool_first_start_wait_seconds_bucket{le=\"+Inf\",pool=\"general\"} 2",
        ] {
            assert!(page.lines().any(|l| l == line), "missing {line:?} in\n{page}");
        }
        assert!(page.contains("# TYPE ballast_forwarder_memory_limit_bytes gauge"), "{page}");
        let build = format!("ballast_forwarder_build_info{{version=\"{}\"", env!("CARGO_PKG_VERSION"));
        assert!(page.lines().any(|l| l.starts_with(&build) && l.ends_with("} 1")), "{page}");
        assert!(page.ends_with("# EOF\n"));
    }
}
