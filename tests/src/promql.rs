//! The metric names a PromQL expression (or a Grafana query, `$variables` and
//! `label_values(...)` included) reads: enough of PromQL's lexical rules to tell a metric
//! from a function, an aggregation, a keyword, a label or a duration, so that a test can
//! check every name a rule or a dashboard queries against what an exporter serves.

use std::collections::BTreeSet;

/// Aggregations and binary keywords: identifiers that are never metric names.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "and",
    "or",
    "unless",
    "atan2",
    "bool",
    "offset",
    "inf",
    "nan",
];

/// Keywords whose parenthesised list that follows names labels, not metrics.
const LABEL_LISTS: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The metric names `expr` reads, e.g. `{"x_total", "up"}` for
/// `sum by (pool) (rate(x_total{a="b"}[5m])) / on(pool) up`.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            // Strings, label matchers and ranges hold no metric name.
            '"' | '\'' | '`' => i = skip_string(&chars, i),
            '{' => i = skip_to(&chars, i, '}'),
            '[' => i = skip_to(&chars, i, ']'),
            // A Grafana variable: `$pool`, `${datasource}`, `$__rate_interval`.
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    i = skip_to(&chars, i, '}');
                } else {
                    while i < chars.len() && is_word(chars[i]) {
                        i += 1;
                    }
                }
            }
            // A number or a duration (`0.95`, `5m`, `1e3`).
            c if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) => {
                while i < chars.len() && (is_word(chars[i]) || chars[i] == '.') {
                    i += 1;
                }
            }
            c if is_word(c) || c == ':' => {
                let start = i;
                while i < chars.len() && (is_word(chars[i]) || chars[i] == ':') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().position(|c| !c.is_whitespace()).map(|n| i + n);
                let before_paren = next.is_some_and(|n| chars[n] == '(');
                let lower = word.to_ascii_lowercase();
                if LABEL_LISTS.contains(&lower.as_str()) {
                    if let Some(n) = next.filter(|_| before_paren) {
                        i = skip_to(&chars, n, ')');
                    }
                } else if lower == "label_values" && before_paren {
                    // Grafana's `label_values(metric{...}, label)`: only the metric.
                    let open = next.unwrap_or(i);
                    let close = skip_to(&chars, open, ')');
                    let inner: String = chars[open + 1..close.saturating_sub(1)].iter().collect();
                    let metric = inner.rsplit_once(',').map_or(inner.as_str(), |(m, _)| m);
                    names.extend(metric_names(metric));
                    i = close;
                } else if !before_paren && !KEYWORDS.contains(&lower.as_str()) {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The index after the string that opens at `open` (a backslash escapes in `"` and `'`).
fn skip_string(chars: &[char], open: usize) -> usize {
    let quote = chars[open];
    let mut i = open + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The index after the `close` that ends the bracket opening at `open`, strings and
/// nested brackets of the same kind skipped.
fn skip_to(chars: &[char], open: usize, close: char) -> usize {
    let opening = chars[open];
    let mut depth = 0;
    let mut i = open;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => {
                i = skip_string(chars, i);
                continue;
            }
            c if c == opening => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(expr: &str) -> Vec<String> {
        metric_names(expr).into_iter().collect()
    }

    #[test]
    fn metrics_are_told_from_functions_labels_and_durations() {
        assert_eq!(
            names(
                r#"histogram_quantile(0.95, sum by (le, pool) (rate(wait_seconds_bucket{pool=~"$pool",x="a}b"}[5m])))"#
            ),
            ["wait_seconds_bucket"]
        );
        assert_eq!(
            names("process_resident_memory_bytes{job=\"f\"} / on (pod) group_left(version) limit_bytes > 0.85"),
            ["limit_bytes", "process_resident_memory_bytes"]
        );
        assert_eq!(names("absent(up{job=\"f\"}) or vector(1)"), ["up"]);
        assert_eq!(names("sum without (kind) (a_total) and ignoring(x) b unless c offset 1h"), ["a_total", "b", "c"]);
        assert_eq!(names("increase(x_total[$__rate_interval]) > 1e3"), ["x_total"]);
        assert_eq!(names("rate(x_total[${interval}])"), ["x_total"]);
        assert_eq!(names("SUM(x) BY (pool)"), ["x"]);
        assert_eq!(names(r#"label_values(pool_pods{job=~"$job"}, pool)"#), ["pool_pods"]);
        assert_eq!(names("label_values(build_info, job)"), ["build_info"]);
    }

    #[test]
    fn a_misspelt_metric_is_still_a_metric() {
        assert_eq!(names("rate(proces_cpu_seconds_total[5m])"), ["proces_cpu_seconds_total"]);
    }
}
