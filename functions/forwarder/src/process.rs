//! What the forwarder's process uses, read at scrape time: the standard `process_*`
//! metrics every Prometheus client library exports (read by `metrics-process`, the Go
//! client's collector rewritten in Rust), and the memory limit of its container, so an
//! alert can compare the two without cAdvisor or kube-state-metrics.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

/// `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds` and the
/// rest, under the names the Prometheus docs give them (no prefix: register it on a
/// registry without one). A value the platform does not give is left out, not sent as 0;
/// a limit of 0 (unlimited) is left out too.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let m = metrics_process::collector::collect();
        if let Some(seconds) = m.cpu_seconds_total {
            let counter = ConstCounter::new(seconds);
            let metric = encoder.encode_descriptor(
                "process_cpu",
                "Total user and system CPU time spent in seconds",
                Some(&Unit::Seconds),
                counter.metric_type(),
            )?;
            counter.encode(metric)?;
        }
        let limited = |v: Option<u64>| v.filter(|&v| v > 0);
        let gauges: [(&str, &str, Option<Unit>, Option<u64>); 7] = [
            ("process_open_fds", "Number of open file descriptors", None, m.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors", None, limited(m.max_fds)),
            ("process_virtual_memory", "Virtual memory size in bytes", Some(Unit::Bytes), m.virtual_memory_bytes),
            (
                "process_virtual_memory_max",
                "Maximum amount of virtual memory available in bytes",
                Some(Unit::Bytes),
                limited(m.virtual_memory_max_bytes),
            ),
            ("process_resident_memory", "Resident memory size in bytes", Some(Unit::Bytes), m.resident_memory_bytes),
            (
                "process_start_time",
                "Start time of the process since the Unix epoch in seconds",
                Some(Unit::Seconds),
                m.start_time_seconds,
            ),
            ("process_threads", "Number of OS threads in the process", None, m.threads),
        ];
        for (name, help, unit, value) in &gauges {
            let Some(value) = value else { continue };
            let gauge = ConstGauge::new(*value);
            let metric = encoder.encode_descriptor(name, help, unit.as_ref(), gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}

/// `memory_limit_bytes`: the memory limit of the cgroup the process runs in (its
/// container's `resources.limits.memory`), read at scrape time. Where there is none (no
/// limit, not Linux) the family is described with no sample, so that a ratio to it finds
/// nothing rather than dividing by 0.
#[derive(Debug, Default)]
pub struct MemoryLimitCollector;

impl Collector for MemoryLimitCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let limit = cgroup_memory_limit(|path| std::fs::read_to_string(path).ok());
        let metric = encoder.encode_descriptor(
            "memory_limit",
            "The memory limit of the forwarder's container (its cgroup's memory.max)",
            Some(&Unit::Bytes),
            MetricType::Gauge,
        )?;
        match limit {
            Some(limit) => ConstGauge::new(limit).encode(metric),
            None => Ok(()),
        }
    }
}

/// cgroup v2 (`memory.max`, `max` when unlimited), else cgroup v1
/// (`memory.limit_in_bytes`, a page-rounded `i64::MAX` when unlimited), as mounted in a
/// container's own namespace.
pub fn cgroup_memory_limit(read: impl Fn(&str) -> Option<String>) -> Option<u64> {
    // v1's "no limit" is i64::MAX rounded down to a page; anything that large is no limit.
    const UNLIMITED_V1: u64 = 1 << 62;
    if let Some(text) = read("/sys/fs/cgroup/memory.max") {
        return text.trim().parse::<u64>().ok();
    }
    read("/sys/fs/cgroup/memory/memory.limit_in_bytes")
        .and_then(|text| text.trim().parse::<u64>().ok())
        .filter(|&v| v < UNLIMITED_V1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files<'a>(files: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |path| files.iter().find(|(p, _)| *p == path).map(|(_, text)| (*text).to_string())
    }

    #[test]
    fn the_memory_limit_is_the_cgroups_and_none_when_unlimited() {
        assert_eq!(cgroup_memory_limit(files(&[("/sys/fs/cgroup/memory.max", "134217728\n")])), Some(128 << 20));
        assert_eq!(cgroup_memory_limit(files(&[("/sys/fs/cgroup/memory.max", "max\n")])), None);
        let v1 = "/sys/fs/cgroup/memory/memory.limit_in_bytes";
        assert_eq!(cgroup_memory_limit(files(&[(v1, "67108864\n")])), Some(64 << 20));
        assert_eq!(cgroup_memory_limit(files(&[(v1, "9223372036854771712\n")])), None);
        assert_eq!(cgroup_memory_limit(files(&[])), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_metrics_have_their_standard_names() {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut page = String::new();
        prometheus_client::encoding::text::encode(&mut page, &registry).unwrap();
        let sample = |name: &str| {
            page.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no {name} in\n{page}"))
        };
        assert!(sample("process_resident_memory_bytes") > 1e6);
        assert!(sample("process_cpu_seconds_total") >= 0.0);
        assert!(sample("process_start_time_seconds") > 1.5e9);
        assert!(sample("process_open_fds") >= 3.0);
        assert!(page.contains("# TYPE process_cpu_seconds counter"), "{page}");
    }
}
