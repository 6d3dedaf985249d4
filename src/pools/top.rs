//! The bounded per-target report (a fixed number of series, whatever the targets): configured
//! pools always,
//! then the busiest `metrics_top_targets` targets by callers, and everything else summed into
//! one `other` row. A scraper's thousands of pages then cost a fixed-size scrape, table and
//! `GET /v1/pools` answer, however many targets are live.
//!
//! For `/metrics` rows are grouped by label first: the label is kind and host, so two pages of
//! one site are two targets with one label, and two samples with one label set are a scrape
//! Prometheus rejects. `GET /v1/pools` keeps targets apart (each has its id).

use std::collections::HashMap;

use super::Pools;
use super::view::{PoolView, ratio};
use crate::engine::TargetFigures;

/// The label and id of the row that sums every target not shown on its own. Real labels are
/// `kind:host`, so they never equal it.
pub const OTHER: &str = "other";

/// How rows are keyed before ranking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    /// One row per label (`/metrics`, `/`): every series unique.
    Label,
    /// One row per target id (`GET /v1/pools`).
    Target,
}

impl Pools {
    /// [`Pools::views`] bounded: configured pools, the `top` busiest other rows, then `other`.
    pub fn top_views(&self, figures: Vec<TargetFigures>, top: usize, by: GroupBy) -> Vec<PoolView> {
        bound(self.views(figures), top, by)
    }
}

/// Groups, ranks and cuts `views` (see the module docs).
pub fn bound(views: Vec<PoolView>, top: usize, by: GroupBy) -> Vec<PoolView> {
    let mut rows: Vec<PoolView> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for v in views {
        let key = match by {
            GroupBy::Label => v.figures.label.clone(),
            GroupBy::Target => v.figures.id.clone(),
        };
        match index.get(&key) {
            Some(&i) => rows[i] = merge(std::mem::take(&mut rows[i]), v),
            None => {
                index.insert(key, rows.len());
                rows.push(v);
            }
        }
    }
    let (mut shown, mut rest): (Vec<_>, Vec<_>) =
        rows.into_iter().partition(|v| v.target_size.is_some());
    // Busiest first; ties by label and id, so the cut is the same on every scrape.
    rest.sort_by(|a, b| {
        b.arrivals
            .cmp(&a.arrivals)
            .then_with(|| a.figures.label.cmp(&b.figures.label))
            .then_with(|| a.figures.id.cmp(&b.figures.id))
    });
    let others = rest.split_off(top.min(rest.len()));
    shown.extend(rest);
    shown.sort_by(|a, b| (&a.figures.label, &a.figures.id).cmp(&(&b.figures.label, &b.figures.id)));
    if let Some(mut other) = others.into_iter().reduce(merge) {
        other.figures.id = OTHER.to_owned();
        other.figures.label = OTHER.to_owned();
        other.kind = None;
        shown.push(other);
    }
    shown
}

/// One row summing two: counters add up, ratios are recomputed from the sums.
fn merge(mut a: PoolView, b: PoolView) -> PoolView {
    let (f, g) = (&mut a.figures, &b.figures);
    f.pooled += g.pooled;
    f.in_flight += g.in_flight;
    f.waiting += g.waiting;
    f.pool_hits += g.pool_hits;
    f.waits_served += g.waits_served;
    f.new_tasks += g.new_tasks;
    f.refills += g.refills;
    f.expired_unused += g.expired_unused;
    if a.kind != b.kind {
        a.kind = None;
    }
    a.imported += b.imported;
    a.arrivals += b.arrivals;
    a.targets = Some(a.targets.unwrap_or(1) + b.targets.unwrap_or(1));
    a.target_size = match (a.target_size, b.target_size) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0) + y.unwrap_or(0)),
    };
    if a.mode != b.mode {
        a.mode = a.mode.or(b.mode);
    }
    let produced = a.figures.new_tasks.saturating_sub(a.figures.in_flight) + a.imported;
    a.hit_rate = ratio(a.figures.pool_hits, a.arrivals);
    a.waste_rate = ratio(a.figures.expired_unused, produced);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, label: &str, arrivals: u64, pool_hits: u64, size: Option<u32>) -> PoolView {
        PoolView {
            figures: TargetFigures {
                id: id.into(),
                label: label.into(),
                pool_hits,
                new_tasks: arrivals - pool_hits,
                ..TargetFigures::default()
            },
            arrivals,
            target_size: size,
            ..PoolView::default()
        }
    }

    #[test]
    fn labels_merge_configured_stay_and_the_rest_is_other() {
        let views = vec![
            row("a1", "turnstile:a.example", 4, 2, None),
            row("a2", "turnstile:a.example", 6, 0, None),
            row("b", "turnstile:b.example", 9, 9, None),
            row("c", "turnstile:c.example", 1, 0, None),
            row("d", "turnstile:d.example", 2, 0, None),
            row("quiet", "turnstile:quiet.example", 0, 0, Some(5)),
        ];
        let by_label = bound(views.clone(), 2, GroupBy::Label);
        let labels: Vec<&str> = by_label.iter().map(|r| r.figures.label.as_str()).collect();
        // a (10 callers over two pages) and b (9) are the busiest; the configured pool stays.
        assert_eq!(
            labels,
            [
                "turnstile:a.example",
                "turnstile:b.example",
                "turnstile:quiet.example",
                OTHER
            ]
        );
        let a = &by_label[0];
        assert_eq!(
            (a.arrivals, a.targets, a.hit_rate),
            (10, Some(2), Some(0.2))
        );
        let other = &by_label[3];
        assert_eq!((other.arrivals, other.targets), (3, Some(2)));
        assert_eq!(other.kind, None);

        // Per target, nothing merges: b and a2 are the busiest two.
        let by_target = bound(views, 2, GroupBy::Target);
        let ids: Vec<&str> = by_target.iter().map(|r| r.figures.id.as_str()).collect();
        assert_eq!(ids, ["a2", "b", "quiet", OTHER]);
        assert_eq!(by_target[3].targets, Some(3));

        // Nothing left out: no `other` row.
        let all = bound(
            vec![row("x", "turnstile:x.example", 1, 0, None)],
            5,
            GroupBy::Label,
        );
        assert_eq!(all.len(), 1);
    }
}
