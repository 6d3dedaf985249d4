//! Writing figures read at scrape time (a custom `Collector`'s job) in a few lines: one family
//! per call, one sample per row. An empty family is left out, as the registry does for its own.

use std::fmt::Error;

use prometheus_client::encoding::NoLabelSet;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::histogram::{BOUNDS, Buckets, KindHistograms};

/// One label: name and value.
pub type Label = (&'static str, String);

fn family<L: EncodeLabelSet, M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric_type: MetricType,
    rows: impl IntoIterator<Item = (L, M)>,
) -> Result<(), Error> {
    let mut rows = rows.into_iter().peekable();
    if rows.peek().is_none() {
        return Ok(());
    }
    let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (labels, metric) in rows {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A gauge family of whole numbers.
pub fn gauges<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, u64)>,
) -> Result<(), Error> {
    let rows = rows.into_iter().map(|(l, v)| (l, ConstGauge::new(v)));
    family(encoder, name, help, MetricType::Gauge, rows)
}

/// A gauge family of real numbers.
pub fn gauges_f64<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, f64)>,
) -> Result<(), Error> {
    let rows = rows.into_iter().map(|(l, v)| (l, ConstGauge::new(v)));
    family(encoder, name, help, MetricType::Gauge, rows)
}

/// A counter family (`name` without `_total`: the encoder adds it to the samples).
pub fn counters<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, u64)>,
) -> Result<(), Error> {
    let rows = rows.into_iter().map(|(l, v)| (l, ConstCounter::new(v)));
    family(encoder, name, help, MetricType::Counter, rows)
}

/// A histogram family of seconds, from [`KindHistograms`] (one series per kind with a sample).
pub fn histograms_by_kind(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    histograms: &KindHistograms,
) -> Result<(), Error> {
    let rows = histograms
        .by_kind()
        .into_iter()
        .map(|(kind, buckets, sum)| {
            let labels: [Label; 1] = [("kind", kind.as_str().to_owned())];
            (labels, ConstHistogram { buckets, sum })
        });
    family(encoder, name, help, MetricType::Histogram, rows)
}

/// A histogram read at scrape time: per-bucket counts on [`BOUNDS`], the last above them all.
struct ConstHistogram {
    buckets: Buckets,
    sum: f64,
}

impl EncodeMetric for ConstHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), Error> {
        let bounds = BOUNDS.iter().copied().chain(std::iter::once(f64::INFINITY));
        let buckets: Vec<(f64, u64)> = bounds.zip(self.buckets).collect();
        let count = self.buckets.iter().sum();
        encoder.encode_histogram::<NoLabelSet>(self.sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// One gauge without labels.
pub fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), Error> {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}
