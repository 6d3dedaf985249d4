//! Reads a `/metrics` text and says what a PromQL query needs from it that is not there.

use std::collections::BTreeMap;

use super::promql::Query;

/// Series Prometheus adds itself rather than reading them from a target.
const PROMETHEUS_OWN: [&str; 1] = ["up"];
/// Labels Prometheus attaches to every scraped series.
const TARGET_LABELS: [&str; 2] = ["job", "instance"];
/// One sample line's name and labels.
type Sample = (String, BTreeMap<String, String>);

/// The samples of a Prometheus / OpenMetrics text (comments and `# EOF` skipped).
pub fn samples(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).expect("a sample line has a value");
        let name = line[..name_end].to_owned();
        let mut labels = BTreeMap::new();
        if line[name_end..].starts_with('{') {
            let mut chars = line[name_end + 1..].chars().peekable();
            loop {
                let label: String = chars.by_ref().take_while(|c| *c != '=').collect();
                assert_eq!(chars.next(), Some('"'), "{line}");
                let mut value = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => value.extend(chars.next()),
                        '"' => break,
                        c => value.push(c),
                    }
                }
                labels.insert(label.trim_start_matches(',').to_owned(), value);
                match chars.next() {
                    Some(',') if chars.peek() == Some(&'}') => break,
                    Some(',') => continue,
                    _ => break,
                }
            }
        }
        out.push((name, labels));
    }
    out
}

/// What a query needs from the scrape and is not there.
pub fn missing(query: &Query, scraped: &[Sample]) -> Vec<String> {
    let mut out = Vec::new();
    fn of<'a>(scraped: &'a [Sample], metric: &'a str) -> impl Iterator<Item = &'a Sample> {
        scraped.iter().filter(move |(n, _)| n == metric)
    }
    for metric in &query.metrics {
        if !PROMETHEUS_OWN.contains(&metric.as_str()) && of(scraped, metric).next().is_none() {
            out.push(format!("metric {metric}"));
        }
    }
    for label in &query.labels {
        let on_any = query.metrics.iter().any(|m| {
            PROMETHEUS_OWN.contains(&m.as_str())
                || of(scraped, m).any(|(_, l)| l.contains_key(label))
        });
        if !TARGET_LABELS.contains(&label.as_str()) && !on_any {
            out.push(format!("label {label} on any of {:?}", query.metrics));
        }
    }
    for (metric, label, value) in &query.equals {
        let seen = of(scraped, metric).any(|(_, l)| l.get(label) == Some(value));
        if !value.contains('$') && !seen {
            out.push(format!("{metric}{{{label}=\"{value}\"}}"));
        }
    }
    out
}

#[test]
fn the_scrape_reader_reads_labels_with_escapes() {
    let text = "# TYPE a counter\na_total{x=\"1\",y=\"q\\\"uote,}\"} 3\nb 1\nc{z=\"\"} 0\n# EOF\n";
    let got = samples(text);
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].0, "a_total");
    assert_eq!(got[0].1["y"], "q\"uote,}");
    assert_eq!(got[0].1["x"], "1");
    assert!(got[1].1.is_empty());
    assert_eq!(got[2].1["z"], "");
}
