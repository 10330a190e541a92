//! Reading and validating a pool's `headroom` section: its target, schedules and
//! pause pod size.

use chrono_tz::Tz;
use serde_yaml_ng::Value;

use super::cron::parse_cron;
use super::read::{is_dns_label, is_dns_subdomain};
use super::walk::{self, kind, Fields, Issues};
use super::{
    check_image, HeadroomConfig, HeadroomSchedule, HeadroomShapes, ListedShape, WaitTarget, CA_EXPENDABLE_CUTOFF,
    DEFAULT_SCHEDULE_TIME_ZONE,
};
use crate::units::{parse_cpu_millis, parse_memory_bytes, HumanDuration};

const MAX_PERCENT: u32 = 1000;

pub(super) fn read_headroom(value: &Value, path: &str, issues: &mut Issues) -> Option<HeadroomConfig> {
    let before = issues.0.len();
    let d = HeadroomConfig::default();
    let mut f = Fields::of(value, path, issues);
    let percent_written = f.raw("percent").is_some_and(|v| !v.is_null());
    let percent = f.or("percent", d.percent, issues);
    let target_value = f.raw("target").cloned();
    let cpu = f.raw("pod_cpu");
    let memory = f.raw("pod_memory");
    let shapes_value = f.raw("shapes").cloned();
    let min = f.or("min", d.min, issues);
    let max = f.or("max", d.max, issues);
    let namespace: String = f.or("namespace", d.namespace, issues);
    let priority_class = f.or("priority_class", d.priority_class, issues);
    let image: String = f.or("image", d.image, issues);
    let schedules_value = f.raw("schedules").cloned();
    let interruption_boost = f.or("interruption_boost", d.interruption_boost, issues);
    let boost_for = f.or("boost_for", d.boost_for, issues);
    let p = |key: &str| walk::join(path, key);
    f.finish(issues);

    if percent > MAX_PERCENT {
        issues.push(
            p("percent"),
            format!("{percent} is above {MAX_PERCENT}%: write a percentage from 0 to {MAX_PERCENT}"),
        );
    }
    let pod_cpu_millis = match cpu {
        None => d.pod_cpu_millis,
        Some(v) => positive_quantity(Resource::Cpu, v, &p("pod_cpu"), issues),
    };
    let pod_memory_bytes = match memory {
        None => d.pod_memory_bytes,
        Some(v) => positive_quantity(Resource::Memory, v, &p("pod_memory"), issues),
    };
    let shapes = match shapes_value {
        None | Some(Value::Null) => HeadroomShapes::Auto,
        Some(v) => read_shapes(&v, &p("shapes"), issues).unwrap_or(HeadroomShapes::Fixed),
    };
    if min > max {
        issues.push(p("min"), format!("min ({min}) is greater than max ({max})"));
    }
    if !is_dns_label(&namespace) {
        issues.push(
            p("namespace"),
            format!(
                "`{namespace}` is not a Kubernetes namespace name: lowercase letters, digits and `-`, at most 63 \
                 (e.g. `ballast-headroom`)"
            ),
        );
    }
    if !is_dns_subdomain(&priority_class.name) {
        issues.push(
            p("priority_class.name"),
            format!(
                "`{}` is not a Kubernetes object name: lowercase letters, digits, `-` and `.` (e.g. `ballast-headroom`)",
                priority_class.name
            ),
        );
    }
    if priority_class.value < CA_EXPENDABLE_CUTOFF {
        issues.push(
            p("priority_class.value"),
            format!(
                "{} is below {CA_EXPENDABLE_CUTOFF}: cluster-autoscaler ignores pending pods under its \
                 expendable cutoff ({CA_EXPENDABLE_CUTOFF}), so evicted pause pods would never bring a node back",
                priority_class.value
            ),
        );
    } else if priority_class.value >= 0 {
        issues.push(
            p("priority_class.value"),
            format!(
                "{} is not negative: pause pods must rank below workloads (priority 0) so they are preempted",
                priority_class.value
            ),
        );
    }
    if let Err(why) = check_image(&image) {
        issues.push(p("image"), why.to_string());
    }
    let mut schedules = Vec::new();
    match schedules_value {
        None | Some(Value::Null) => {}
        Some(Value::Sequence(items)) => {
            for (i, item) in items.iter().enumerate() {
                if let Some(s) = read_schedule(item, &format!("{}[{i}]", p("schedules")), issues) {
                    schedules.push(s);
                }
            }
        }
        Some(other) => issues.push(p("schedules"), format!("expected a list, found {}", kind(&other))),
    }
    if interruption_boost > MAX_PERCENT {
        issues.push(
            p("interruption_boost"),
            format!("{interruption_boost} is above {MAX_PERCENT}%: write a percentage from 0 to {MAX_PERCENT}"),
        );
    }
    let target = match target_value {
        None | Some(Value::Null) => None,
        Some(v) => read_target(&v, &p("target"), percent_written, issues),
    };
    (issues.0.len() == before).then_some(HeadroomConfig {
        percent,
        pod_cpu_millis,
        pod_memory_bytes,
        shapes,
        min,
        max,
        namespace,
        priority_class,
        image,
        schedules,
        interruption_boost,
        boost_for,
        target,
    })
}

/// `auto`, `fixed` or a list of `{ name, cpu, memory, resources }`; `None` after
/// reporting what is wrong.
fn read_shapes(value: &Value, path: &str, issues: &mut Issues) -> Option<HeadroomShapes> {
    let items = match value {
        Value::String(s) if s == "auto" => return Some(HeadroomShapes::Auto),
        Value::String(s) if s == "fixed" => return Some(HeadroomShapes::Fixed),
        Value::Sequence(items) => items,
        other => {
            let found = match other {
                Value::String(s) => format!("`{s}`"),
                other => kind(other).to_string(),
            };
            issues.push(path, format!("expected `auto`, `fixed` or a list of shapes, found {found}"));
            return None;
        }
    };
    let before = issues.0.len();
    let max = crate::shape::MAX_SLOT_SHAPES;
    if items.is_empty() || items.len() > max {
        issues.push(path, format!("{} shapes listed: list 1 to {max}", items.len()));
    }
    let mut listed: Vec<ListedShape> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let mut f = Fields::of(item, &at, issues);
        let name: Option<String> = f.required("name", issues);
        let cpu = f.raw("cpu").cloned();
        let memory = f.raw("memory").cloned();
        let resources: std::collections::BTreeMap<String, u64> = f.or("resources", Default::default(), issues);
        f.finish(issues);
        let p = |key: &str| walk::join(&at, key);
        let cpu_millis = match cpu {
            Some(v) => positive_quantity(Resource::Cpu, &v, &p("cpu"), issues),
            None => {
                issues.push(p("cpu"), "is required");
                0
            }
        };
        let memory_bytes = match memory {
            Some(v) => positive_quantity(Resource::Memory, &v, &p("memory"), issues),
            None => {
                issues.push(p("memory"), "is required");
                0
            }
        };
        for (name, count) in &resources {
            // Extended resources are domain-qualified (`nvidia.com/gpu`); cpu and memory
            // have their own fields.
            if !name.contains('/') || !is_dns_subdomain(name.split('/').next().unwrap_or("")) {
                issues.push(
                    walk::join(&p("resources"), name),
                    "is not an extended resource name (`vendor.example/name`, e.g. `nvidia.com/gpu`)",
                );
            } else if *count == 0 {
                // A pause pod asking for none is one that does not name it: written as 0,
                // it would never read back as written.
                issues.push(walk::join(&p("resources"), name), "must be more than zero (leave it out instead)");
            }
        }
        let Some(name) = name else { continue };
        if !is_dns_label(&name) || name.len() > 20 {
            issues.push(p("name"), format!("`{name}` is not a DNS label of at most 20 characters"));
        } else if listed.iter().any(|l| l.name == name) {
            issues.push(p("name"), format!("`{name}` is listed twice"));
        }
        let shape = crate::shape::PodShape { cpu_millis, memory_bytes, extended: resources };
        if listed.iter().any(|l| l.shape == shape) {
            issues.push(at.clone(), format!("{shape} is listed twice"));
        }
        listed.push(ListedShape { name, shape });
    }
    (issues.0.len() == before).then_some(HeadroomShapes::Listed(listed))
}

/// The shortest and longest wait objective taken: below a second is below what the
/// forwarder measures to; above an hour is no headroom question.
const TARGET_WAIT_RANGE: (u64, u64) = (1, 3600);
/// History is kept per day of the ring; four weeks bound the state record's size.
const MAX_HISTORY_DAYS: u64 = 28;

fn read_target(value: &Value, path: &str, percent_written: bool, issues: &mut Issues) -> Option<WaitTarget> {
    let before = issues.0.len();
    let mut f = Fields::of(value, path, issues);
    let wait_p95: Option<HumanDuration> = f.required("wait_p95", issues);
    // A bare number of days is the usual mistake: say the unit this key is counted in.
    let history: HumanDuration = match f.raw("history") {
        Some(Value::Number(n)) => {
            issues.push(
                walk::join(path, "history"),
                format!("`{n}` has no unit: history is counted in days; write `{n}d` (1d to {MAX_HISTORY_DAYS}d)"),
            );
            super::types::default_history()
        }
        _ => f.or("history", super::types::default_history(), issues),
    };
    let floor: bool = f.or("floor", percent_written, issues);
    let tz_text: String = f.or("time_zone", super::types::default_time_zone().name().to_string(), issues);
    let p = |key: &str| walk::join(path, key);
    f.finish(issues);
    let time_zone = tz_text.parse::<Tz>().map_err(|_| {
        issues.push(
            p("time_zone"),
            format!("`{tz_text}` is not an IANA time zone (e.g. Europe/Paris, America/New_York, UTC)"),
        )
    });
    if let Some(wait) = wait_p95 {
        let secs = wait.0.as_secs_f64();
        let (lo, hi) = TARGET_WAIT_RANGE;
        if secs < lo as f64 || secs > hi as f64 {
            issues.push(p("wait_p95"), format!("{wait} is outside {lo}s..{}m", hi / 60));
        }
    }
    let days = history.0.as_secs_f64() / 86_400.0;
    if !(1.0..=MAX_HISTORY_DAYS as f64).contains(&days) {
        let secs = history.0.as_secs();
        let written = if secs.is_multiple_of(86_400) { format!("{}d", secs / 86_400) } else { history.to_string() };
        issues.push(p("history"), format!("{written} is outside 1d..{MAX_HISTORY_DAYS}d"));
    }
    let time_zone = time_zone.ok()?;
    (issues.0.len() == before).then_some(WaitTarget { wait_p95: wait_p95?, history, floor, time_zone })
}

/// Which request a quantity is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Resource {
    /// Cores or millicores.
    Cpu,
    /// Bytes.
    Memory,
}

impl Resource {
    /// The most of it one node can have (millicores or bytes).
    fn largest_instance(self) -> u64 {
        match self {
            Resource::Cpu => LARGEST_INSTANCE.cpu_millis,
            Resource::Memory => LARGEST_INSTANCE.memory_bytes,
        }
    }
}

/// An EC2 instance type's name and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceType {
    /// Its name (`m6i.large`).
    pub name: &'static str,
    /// Its vCPUs, in millicores.
    pub cpu_millis: u64,
    /// Its memory, in bytes.
    pub memory_bytes: u64,
}

/// The largest EC2 instance type, u7inh-32tb.480xlarge: 1,920 vCPUs and 32,768 GiB, the
/// most of each that any type offers (AWS's memory-optimized instance specifications,
/// <https://docs.aws.amazon.com/ec2/latest/instancetypes/mo.html>, as of November 2026).
/// A pause pod asking for more fits no node any ASG can launch, so `pod_cpu`, `pod_memory`
/// and every listed shape are held to it even without the cluster's nodes to compare with.
/// A larger type made later needs a newer Ballast to be used to the full.
pub const LARGEST_INSTANCE: InstanceType =
    InstanceType { name: "u7inh-32tb.480xlarge", cpu_millis: 1_920_000, memory_bytes: 32_768 << 30 };

/// Why `text`, a bare number (`2048`), is refused as memory: it is bytes to Kubernetes.
/// The unit offered keeps the likely meaning: a pause pod of `2048` is most likely 2 GiB
/// (`2048Mi`), of `2` most likely `2Gi`; anything else is asked for, not guessed.
fn bare_memory_mistake(text: &str, n: u64) -> String {
    let meant = match n {
        1..=64 => format!("`{text}Gi` if you meant gibibytes"),
        _ if (n >= 128 && n.is_power_of_two()) || n.is_multiple_of(1024) => {
            let gib = if n.is_multiple_of(1024) { format!(" ({} GiB)", n / 1024) } else { String::new() };
            format!("`{text}Mi`{gib} if you meant mebibytes")
        }
        _ => "its unit (`Mi` for mebibytes, `Gi` for gibibytes)".to_string(),
    };
    format!("`{text}` is {text} bytes: a memory quantity without a suffix is bytes; write {meant}")
}

/// A quantity that must be more than zero (0 when it is not, after reporting why). As in
/// Kubernetes, it may be written as a string (`500m`, `2Gi`) or a plain number (`2`,
/// `1073741824`, `0.5`).
fn positive_quantity(resource: Resource, value: &Value, path: &str, issues: &mut Issues) -> u64 {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => {
            issues
                .push(path, format!("expected a Kubernetes quantity (e.g. `500m`, `2`, `2Gi`), found {}", kind(other)));
            return 0;
        }
    };
    let parsed = match resource {
        Resource::Cpu => parse_cpu_millis(&text),
        Resource::Memory => parse_memory_bytes(&text),
    };
    match parsed {
        Ok(0) => {
            issues.push(path, "must be more than zero");
            0
        }
        // A bare number is bytes: `pod_memory: 2048` meant a unit, not 2048 bytes.
        Ok(v) if resource == Resource::Memory && v < 1 << 20 && text.bytes().all(|b| b.is_ascii_digit()) => {
            issues.push(path, bare_memory_mistake(&text, v));
            0
        }
        Ok(v) if v > resource.largest_instance() => {
            let (what, has) = match resource {
                Resource::Cpu => ("CPU", format!("{} vCPUs", LARGEST_INSTANCE.cpu_millis / 1000)),
                Resource::Memory => ("memory", format!("{}Gi", LARGEST_INSTANCE.memory_bytes >> 30)),
            };
            issues.push(
                path,
                format!(
                    "`{text}` is more {what} than any EC2 instance has (the largest, {}, has {has}): no node can hold \
                     such a pause pod, so it would stay Pending and hold no room",
                    LARGEST_INSTANCE.name
                ),
            );
            v
        }
        Ok(v) => {
            if resource == Resource::Memory {
                if let Some(binary) = binary_suffix_meant(&text) {
                    let meant = parse_memory_bytes(&binary).map(|b| format!(" ({b} bytes)")).unwrap_or_default();
                    issues.warn(
                        path,
                        format!(
                            "`{text}` is {v} bytes: its suffix is a decimal one (powers of 1000), not what memory is usually \
                             counted in; write `{binary}`{meant} if that is what you meant"
                        ),
                    );
                }
            }
            v
        }
        Err(e) => {
            issues.push(path, e.to_string());
            0
        }
    }
}

/// `2G` as `2Gi`: a memory quantity with a decimal suffix (k, M, G, T, P, E), which is
/// almost always meant in the binary one; `None` for any other form.
fn binary_suffix_meant(text: &str) -> Option<String> {
    let text = text.trim();
    let (number, suffix) = text.split_at(text.find(|c: char| c.is_ascii_alphabetic())?);
    match suffix {
        "k" => Some(format!("{number}Ki")),
        "M" | "G" | "T" | "P" | "E" => Some(format!("{number}{suffix}i")),
        _ => None,
    }
}

fn read_schedule(value: &Value, path: &str, issues: &mut Issues) -> Option<HeadroomSchedule> {
    let before = issues.0.len();
    let mut f = Fields::of(value, path, issues);
    let cron_text: Option<String> = f.required("cron", issues);
    let tz_text: String = f.or("time_zone", DEFAULT_SCHEDULE_TIME_ZONE.name().to_string(), issues);
    let percent: Option<u32> = f.required("percent", issues);
    let p = |key: &str| walk::join(path, key);
    f.finish(issues);
    let cron = cron_text.as_deref().and_then(|text| match parse_cron(text) {
        Ok(c) => Some(c),
        Err(e) => {
            issues.push(p("cron"), e.to_string());
            None
        }
    });
    let time_zone = match tz_text.parse::<Tz>() {
        Ok(tz) => Some(tz),
        Err(_) => {
            issues.push(
                p("time_zone"),
                format!("`{tz_text}` is not an IANA time zone (e.g. Europe/Paris, America/New_York, UTC)"),
            );
            None
        }
    };
    if let Some(pc) = percent {
        if pc > MAX_PERCENT {
            issues.push(
                p("percent"),
                format!("{pc} is above {MAX_PERCENT}%: write a percentage from 0 to {MAX_PERCENT}"),
            );
        }
    }
    if issues.0.len() != before {
        return None;
    }
    Some(HeadroomSchedule { cron_text: cron_text?, cron: cron?, time_zone: time_zone?, percent: percent? })
}
