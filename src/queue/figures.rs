//! The queue's depth as `/metrics` shows it, read from Redis at scrape time: by a serve process
//! with `--queue` (the producer side) and by stream workers. Every figure Redis could not give is
//! left out rather than shown as zero, so an alert on it does not fire on a blind scrape.

use std::fmt::Write as _;

use redis::Value;

use super::Queue;
use super::keys::GROUP;
use super::reply;
use crate::telemetry::metrics::escape;

/// One queue's depth at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueFigures {
    /// The queue's configured name (the `queue` label).
    pub queue: String,
    /// Entries not yet delivered to any worker (what KEDA scales on).
    pub lag: Option<u64>,
    /// Entries delivered to a worker and not yet acknowledged.
    pub pending: Option<u64>,
    /// Entries waiting in the retry schedule for a later attempt.
    pub retry_scheduled: Option<u64>,
    /// Entries in the dead-letter stream.
    pub dead_letters: Option<u64>,
}

impl Queue {
    /// Reads the queue's depth; each figure independently, so one failed call hides one figure.
    pub async fn figures(&self) -> QueueFigures {
        let keys = self.keys();
        let mut conn = self.conn();
        let groups: Option<Value> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(keys.tasks())
            .query_async(&mut conn)
            .await
            .ok();
        let (lag, pending) = match &groups {
            Some(groups) => (group_field(groups, "lag"), group_field(groups, "pending")),
            // No stream yet: nothing waits.
            None if self.lag().await.ok().flatten() == Some(0) => (Some(0), Some(0)),
            None => (None, None),
        };
        let retry_scheduled: Option<u64> = redis::cmd("ZCARD")
            .arg(keys.retry())
            .query_async(&mut conn)
            .await
            .ok();
        let dead_letters: Option<u64> = redis::cmd("XLEN")
            .arg(keys.dead())
            .query_async(&mut conn)
            .await
            .ok();
        QueueFigures {
            queue: self.settings().name.clone(),
            lag,
            pending,
            retry_scheduled,
            dead_letters,
        }
    }
}

/// A number field of group [`GROUP`] in an `XINFO GROUPS` reply (RESP2 arrays or RESP3 maps).
fn group_field(groups: &Value, field: &str) -> Option<u64> {
    let Value::Array(groups) = groups else {
        return None;
    };
    groups.iter().find_map(|group| {
        let pairs = reply::pairs(group);
        let name = pairs.iter().find(|(k, _)| k == "name").map(|(_, v)| *v)?;
        if reply::text(name).as_deref() != Some(GROUP) {
            return None;
        }
        pairs
            .iter()
            .find(|(k, _)| k == field)
            .and_then(|(_, v)| match v {
                Value::Int(n) => u64::try_from(*n).ok(),
                _ => None,
            })
    })
}

impl QueueFigures {
    /// The gauges as OpenMetrics text (no `# EOF`).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let q = format!("queue=\"{}\"", escape(&self.queue));
        let gauges = [
            (
                "lag",
                "Entries not yet delivered to any worker (what KEDA scales on)",
                self.lag,
            ),
            (
                "pending",
                "Entries delivered to a worker and not yet acknowledged",
                self.pending,
            ),
            (
                "retry_scheduled",
                "Entries scheduled for a later attempt",
                self.retry_scheduled,
            ),
            (
                "dead_letters",
                "Entries in the dead-letter stream",
                self.dead_letters,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                let _ = writeln!(
                    out,
                    "# HELP captcha_gateway_queue_{name} {help}.\n# TYPE captcha_gateway_queue_{name} gauge\ncaptcha_gateway_queue_{name}{{{q}}} {value}"
                );
            }
        }
        out
    }
}

/// `exposition` (ending in `# EOF`) with the queue gauges inserted before its end.
pub fn splice(mut exposition: String, figures: &QueueFigures) -> String {
    const EOF: &str = "# EOF\n";
    if exposition.ends_with(EOF) {
        exposition.truncate(exposition.len() - EOF.len());
    }
    exposition.push_str(&figures.render());
    exposition.push_str(EOF);
    exposition
}
