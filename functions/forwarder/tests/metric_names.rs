//! `/metrics`, scraped over HTTP as Prometheus would, after every family has a sample,
//! follows Prometheus's naming conventions (https://prometheus.io/docs/practices/naming/):
//! one prefix, base units spelled as the last word of the name, `_total` on counters and
//! only there, label values without spaces, `ballast_forwarder_build_info` and the
//! standard `process_*` metrics.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use ballast_forwarder::bus::Delivery;
use ballast_forwarder::health::{self, Health};
use ballast_forwarder::metrics::{example_page, sample_names, Metrics};
use ballast_forwarder::state::{Kind, PoolTotals};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The forwarder's metrics with a sample in every family it fills itself.
fn busy_metrics() -> Metrics {
    let m = Metrics::new();
    m.delivered(&Delivery {
        sent: 4,
        dropped: 1,
        calls: 3,
        failed_entries: 2,
        failed_calls: 1,
        retries: 2,
        sent_by_kind: vec![
            ("Pool Demand Changed", 1),
            ("Pods Unschedulable", 1),
            ("Node Lifecycle", 1),
            ("Pool Waits Measured", 1),
        ],
    });
    m.watch_error(Kind::Pods);
    m.relisted(Kind::Nodes, 1);
    let totals = [PoolTotals { cpu_millis: 2500, memory_bytes: 3 << 30, pods: 5, nodes: 2 }];
    m.pools(["general"].into_iter(), &totals, &[Some(2)], (7, 2));
    m.first_start("general", 3.0);
    m.config_in_force(Some(4));
    m.config_refused();
    m
}

async fn scrape(addr: SocketAddr) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: forwarder\r\n\r\n").await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a header and a body");
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    body.to_string()
}

/// A sample line's name and its labels (`name{a="x",b="y"} value`), escapes undone.
fn parse_sample(line: &str) -> (String, Vec<(String, String)>) {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let (name, rest) = line.split_at(name_end);
    let mut labels = Vec::new();
    if let Some(rest) = rest.strip_prefix('{') {
        let mut chars = rest.chars();
        loop {
            let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
            if key.is_empty() || key.starts_with('}') {
                break;
            }
            assert_eq!(chars.next(), Some('"'), "a quoted value in {line:?}");
            let mut value = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.push(chars.next().expect("an escaped character")),
                    '"' => break,
                    c => value.push(c),
                }
            }
            labels.push((key.trim_start_matches(',').to_string(), value));
            if chars.clone().next() == Some('}') {
                break;
            }
        }
    }
    (name.to_string(), labels)
}

/// Words that name a unit other than the base one (or a scaled base unit).
const NOT_BASE_UNITS: &[&str] = &[
    "millis",
    "milliseconds",
    "ms",
    "micros",
    "microseconds",
    "nanoseconds",
    "minutes",
    "hours",
    "days",
    "kb",
    "kib",
    "mb",
    "mib",
    "gb",
    "gib",
    "millicores",
    "percent",
];

/// A word in the name that says what is measured, and the unit suffixes it takes.
const MEASURES: &[(&str, &[&str])] = &[
    ("memory", &["_bytes"]),
    ("cpu", &["_cores", "_seconds"]),
    ("wait", &["_seconds"]),
    ("time", &["_seconds"]),
    ("duration", &["_seconds"]),
    ("latency", &["_seconds"]),
    ("size", &["_bytes"]),
];

#[tokio::test]
async fn every_name_on_the_page_follows_the_conventions() {
    let (addr, server) =
        health::serve("127.0.0.1:0".parse().unwrap(), Arc::new(Health::default()), Arc::new(busy_metrics()))
            .await
            .unwrap();
    let page = scrape(addr).await;
    server.abort();

    let types: BTreeMap<&str, &str> = page.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' ')).collect();
    assert!(types.len() >= 20, "{page}");
    for (family, kind) in &types {
        assert!(
            family.starts_with("ballast_forwarder_") || family.starts_with("process_"),
            "{family}: one prefix for the forwarder's own"
        );
        assert!(
            family.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{family}: snake case"
        );
        // An OpenMetrics family is named without `_total`; its samples carry it.
        assert!(!family.ends_with("_total"), "{family}: `_total` is a counter's, added to its samples");
        let words: Vec<&str> = family.split('_').collect();
        for word in &words {
            assert!(!NOT_BASE_UNITS.contains(word), "{family}: `{word}` is not a base unit");
        }
        for (measure, suffixes) in MEASURES {
            if words.contains(measure) && *kind != "info" {
                assert!(
                    suffixes.iter().any(|s| family.ends_with(s)),
                    "{family} ({kind}) measures {measure}: it ends in one of {suffixes:?}"
                );
            }
        }
    }
    // A declared unit is the name's last word.
    for line in page.lines().filter_map(|l| l.strip_prefix("# UNIT ")) {
        let (family, unit) = line.split_once(' ').unwrap();
        assert!(family.ends_with(&format!("_{unit}")), "{family} is in {unit}");
    }

    let samples: Vec<(String, Vec<(String, String)>)> =
        page.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).map(parse_sample).collect();
    let names = sample_names(&page);
    // What the monitoring's test checks queries against: the same families as here.
    assert_eq!(sample_names(&example_page()), names, "example_page() leaves a family out");
    for (name, labels) in &samples {
        assert!(names.contains(name), "{name} is a sample of no declared family");
        let family = types.keys().filter(|f| name.starts_with(**f)).max_by_key(|f| f.len()).expect("its family");
        assert_eq!(name.ends_with("_total"), types[family] == "counter", "{name}: `_total` on counters only");
        for (key, value) in labels {
            assert!(!value.is_empty() && !value.contains(char::is_whitespace), "{name}: {key}={value:?} has a space");
        }
    }
    // Every family the forwarder fills has a sample here (the ones read from the host may
    // be empty: no memory limit outside a container).
    for family in types.keys().filter(|f| **f != "ballast_forwarder_memory_limit_bytes") {
        assert!(samples.iter().any(|(n, _)| n.starts_with(*family)), "{family} has no sample:\n{page}");
    }
    let mut kinds: Vec<&str> = samples
        .iter()
        .filter(|(n, _)| n == "ballast_forwarder_events_published_total")
        .flat_map(|(_, labels)| labels.iter().filter(|(k, _)| k == "kind").map(|(_, v)| v.as_str()))
        .collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["node_lifecycle", "pods_unschedulable", "pool_demand_changed", "pool_waits_measured"]);

    let build: Vec<&(String, Vec<(String, String)>)> =
        samples.iter().filter(|(n, _)| n == "ballast_forwarder_build_info").collect();
    assert_eq!(build.len(), 1, "{page}");
    assert!(build[0].1.contains(&("version".to_string(), env!("CARGO_PKG_VERSION").to_string())), "{build:?}");
    assert!(page.lines().any(|l| l.starts_with("ballast_forwarder_build_info{") && l.ends_with("} 1")), "{page}");

    // The standard process metrics, as a process collector names them (Linux: /proc).
    if cfg!(target_os = "linux") {
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_start_time_seconds",
            "process_open_fds",
            "process_max_fds",
            "process_threads",
        ] {
            assert!(samples.iter().any(|(n, _)| n == name), "no {name} in\n{page}");
        }
    }
    for gone in ["resident_memory", "cpu_millis", "pool_memory_bytes"] {
        assert!(!page.contains(&format!("ballast_forwarder_{gone}")), "{gone} is an old name");
    }
}

#[test]
fn a_sample_line_is_read_with_its_labels() {
    assert_eq!(
        parse_sample(r#"x_bucket{le="0.5",pool="a \"b\""} 3"#),
        ("x_bucket".to_string(), vec![("le".into(), "0.5".into()), ("pool".into(), "a \"b\"".into())])
    );
    assert_eq!(parse_sample("up 1"), ("up".to_string(), vec![]));
}
