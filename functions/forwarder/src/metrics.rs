//! The forwarder's Prometheus metrics, served on `/metrics` by the health server
//! (OpenMetrics text). Counters follow what the loop and the sender did; the per-pool
//! gauges are set from the state on each tick; memory is read from `/proc/self/status`
//! at scrape time (Linux only: elsewhere the memory gauges stay 0).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::bus::Delivery;
use crate::state::{Kind, PoolTotals};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The event's detail-type, e.g. `Pool Demand Changed`.
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
    pool_cpu: Family<PoolLabel, Gauge>,
    pool_memory: Family<PoolLabel, Gauge>,
    pool_unschedulable: Family<PoolLabel, Gauge>,
    pool_first_start_wait: Family<PoolLabel, Histogram, fn() -> Histogram>,
    tracked_pods: Gauge,
    tracked_nodes: Gauge,
    resident: Gauge,
    resident_peak: Gauge,
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
        let mut registry = Registry::with_prefix("ballast_forwarder");
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
            pool_cpu: Family::default(),
            pool_memory: Family::default(),
            pool_unschedulable: Family::default(),
            pool_first_start_wait: Family::new_with_constructor(wait_histogram),
            tracked_pods: Gauge::default(),
            tracked_nodes: Gauge::default(),
            resident: Gauge::default(),
            resident_peak: Gauge::default(),
            config_version: Gauge::default(),
            config_refused: Counter::default(),
        };
        registry.register(
            "config_version",
            "The version of the config's SSM parameter the forwarder runs on (0: a file, no version)",
            m.config_version.clone(),
        );
        registry.register(
            "config_refused",
            "Config versions refused (invalid); the forwarder stays on the last good one",
            m.config_refused.clone(),
        );
        registry.register("events_published", "Events EventBridge accepted, by detail-type", m.published.clone());
        registry.register("events_dropped", "Events given up after the last PutEvents attempt", m.dropped.clone());
        registry.register(
            "put_events_failed_entries",
            "PutEvents entries EventBridge refused (each is retried until the last attempt)",
            m.failed_entries.clone(),
        );
        registry.register(
            "put_events_failed_calls",
            "PutEvents calls that failed as a whole (throttling, 5xx, network, refused)",
            m.failed_calls.clone(),
        );
        registry.register("put_events_retries", "PutEvents calls that retried earlier failures", m.retries.clone());
        registry.register(
            "watch_relists",
            "Lists after the first (after a 410 Gone or a lost watch), by resource",
            m.relists.clone(),
        );
        registry.register("watch_errors", "Watch or list failures, by resource", m.watch_errors.clone());
        registry.register("pool_pods", "Workload pods counted as the pool's demand", m.pool_pods.clone());
        registry.register("pool_nodes", "Nodes of the pool present in the cluster", m.pool_nodes.clone());
        registry.register("pool_cpu_millis", "The pool's workload CPU requests (millicores)", m.pool_cpu.clone());
        registry.register_with_unit(
            "pool_memory",
            "The pool's workload memory requests",
            Unit::Bytes,
            m.pool_memory.clone(),
        );
        registry.register(
            "pool_unschedulable_pods",
            "The pool's workload pods the scheduler could not place",
            m.pool_unschedulable.clone(),
        );
        registry.register_with_unit(
            "pool_first_start_wait",
            "How long the pool's new workload pods waited, from creation to the scheduler binding them",
            Unit::Seconds,
            m.pool_first_start_wait.clone(),
        );
        registry.register(
            "tracked_pods",
            "Pod records held (workload pods of any pool or none)",
            m.tracked_pods.clone(),
        );
        registry.register("tracked_nodes", "Node records held for nodes present", m.tracked_nodes.clone());
        registry.register_with_unit(
            "resident_memory",
            "The forwarder's resident set size (Linux: /proc/self/status VmRSS)",
            Unit::Bytes,
            m.resident.clone(),
        );
        registry.register_with_unit(
            "resident_memory_peak",
            "The forwarder's peak resident set size (Linux: /proc/self/status VmHWM)",
            Unit::Bytes,
            m.resident_peak.clone(),
        );
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
            self.published.get_or_create(&KindLabel { kind: (*kind).to_string() }).inc_by(*sent as u64);
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
            self.pool_cpu.get_or_create(&pool).set(gauge(t.cpu_millis));
            self.pool_memory.get_or_create(&pool).set(gauge(t.memory_bytes));
            let stuck = unschedulable.get(i).copied().flatten().unwrap_or(0);
            self.pool_unschedulable.get_or_create(&pool).set(i64::from(stuck));
        }
        self.tracked_pods.set(gauge(tracked.0 as u64));
        self.tracked_nodes.set(gauge(tracked.1 as u64));
    }

    /// The registry as OpenMetrics text, memory read now.
    pub fn encode(&self) -> String {
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            let memory = memory_from_status(&status);
            self.resident.set(gauge(memory.resident_bytes));
            self.resident_peak.set(gauge(memory.peak_bytes));
        }
        let mut out = String::new();
        // Writing to a String cannot fail; an encoding error would leave a partial page.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "cannot encode the metrics");
        }
        out
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    pub resident_bytes: u64,
    pub peak_bytes: u64,
}

/// `VmRSS` and `VmHWM` from the text of `/proc/self/status` (in kB there); absent or
/// unreadable lines are 0.
pub fn memory_from_status(status: &str) -> Memory {
    let kib = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |v| v.saturating_mul(1024))
    };
    Memory { resident_bytes: kib("VmRSS:"), peak_bytes: kib("VmHWM:") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_from_proc_status_in_kib() {
        let status = "Name:\tforwarder\nVmPeak:\t  999 kB\nVmHWM:\t   30720 kB\nVmRSS:\t   20480 kB\nThreads:\t3\n";
        assert_eq!(memory_from_status(status), Memory { resident_bytes: 20 << 20, peak_bytes: 30 << 20 });
        assert_eq!(memory_from_status("VmRSS:\tlots kB\n"), Memory::default());
    }

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
            "ballast_forwarder_events_published_total{kind=\"Pool Demand Changed\"} 2",
            "ballast_forwarder_events_published_total{kind=\"Node Lifecycle\"} 1",
            "ballast_forwarder_events_dropped_total 1",
            "ballast_forwarder_put_events_failed_entries_total 2",
            "ballast_forwarder_put_events_retries_total 2",
            "ballast_forwarder_watch_errors_total{resource=\"pods\"} 1",
            "ballast_forwarder_watch_relists_total{resource=\"nodes\"} 2",
            "ballast_forwarder_pool_cpu_millis{pool=\"general\"} 1500",
            "ballast_forwarder_pool_memory_bytes{pool=\"general\"} 1073741824",
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
        assert!(page.contains("# TYPE ballast_forwarder_resident_memory_bytes gauge"), "{page}");
        assert!(page.ends_with("# EOF\n"));
    }
}
