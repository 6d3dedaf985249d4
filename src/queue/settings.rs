//! The queue's knobs: every default in `impl Default` with its reason, every value from outside
//! range-checked by name ([`QueueSettings::check`]).

use std::time::Duration;

use serde::Deserialize;

use crate::setting::{ConfigError, bad};

#[derive(Debug, Clone)]
pub struct QueueSettings {
    /// The queue's name inside its keys (`cg:q:{NAME}:...`).
    pub name: String,
    /// How long a result (and an idempotency key) stays readable.
    pub result_ttl: Duration,
    /// The worker's lease: the same one its instance holds in the store (`redis_lease_s`), so
    /// there is one to set. Held entries are renewed every third of it; see
    /// [`QueueSettings::taken_for_dead`] for when they move.
    pub lease: Duration,
    /// Deliveries (retries included) before an entry goes to the dead-letter stream.
    pub max_deliveries: u32,
    /// First retry delay; doubled per attempt, with full jitter.
    pub retry_base: Duration,
    /// Longest retry delay.
    pub retry_cap: Duration,
    /// Entries one worker process keeps in flight.
    pub concurrency: u32,
    /// How long one `XREADGROUP` blocks waiting for entries.
    pub block: Duration,
}

impl Default for QueueSettings {
    fn default() -> Self {
        Self {
            name: "captcha".into(),
            // An hour: longer than any producer waits for an answer it asked for, and short enough
            // that a million results a day stay a bounded set.
            result_ttl: Duration::from_secs(3600),
            // The instance's lease (renewed every second): a crashed worker's entries move
            // within about 4.5 s, after its provider tasks became adoptable.
            lease: crate::engine::store::redis::DEFAULT_LEASE,
            // Five: a transient provider outage is ridden out by the backoff, a poison entry
            // costs at most five upstream attempts.
            max_deliveries: 5,
            // One second doubling to a minute: the provider's own advice for server errors
            // ("retry ~10 s") is reached by the third attempt.
            retry_base: Duration::from_secs(1),
            retry_cap: Duration::from_secs(60),
            // As many as a typical plan's share per worker: solves are mostly waiting.
            concurrency: 32,
            // Five seconds: a stop or a lost connection is noticed within it.
            block: Duration::from_secs(5),
        }
    }
}

/// The `[queue]` table of the `--config` TOML; flags win over it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueFile {
    pub name: Option<String>,
    pub concurrency: Option<i64>,
    pub lease_s: Option<f64>,
    pub max_deliveries: Option<i64>,
    pub result_ttl_s: Option<f64>,
    pub retry_base_s: Option<f64>,
    pub retry_cap_s: Option<f64>,
    pub grace_s: Option<f64>,
}

/// Seconds within `min..=max`, by name.
pub fn seconds(setting: &str, s: f64, min: f64, max: f64) -> Result<Duration, ConfigError> {
    if s.is_finite() && s >= min && s <= max {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(bad(
            setting,
            format!("{s:?} is out of range"),
            format!("use seconds from {min} to {max}"),
        ))
    }
}

/// A whole number within `min..=max`, by name.
pub fn whole(setting: &str, n: i64, min: i64, max: i64) -> Result<u32, ConfigError> {
    if (min..=max).contains(&n) {
        Ok(n as u32)
    } else {
        Err(bad(
            setting,
            format!("{n} is out of range"),
            format!("use a whole number from {min} to {max}"),
        ))
    }
}

/// A queue name: it goes into key names and a hash tag, so no braces, spaces or control bytes.
pub fn check_name(setting: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
    if ok {
        Ok(())
    } else {
        Err(bad(
            setting,
            format!(
                "`{}` is not a usable queue name",
                name.chars()
                    .take(80)
                    .flat_map(char::escape_debug)
                    .collect::<String>()
            ),
            "use 1-64 characters from A-Z a-z 0-9 _ - . :",
        ))
    }
}

impl QueueSettings {
    /// The settings of a `[queue]` table over the defaults.
    pub fn from_file(file: &QueueFile) -> Result<QueueSettings, ConfigError> {
        let mut s = QueueSettings::default();
        if let Some(name) = &file.name {
            check_name("queue.name", name)?;
            s.name = name.clone();
        }
        if let Some(n) = file.concurrency {
            s.concurrency = whole("queue.concurrency", n, 1, 10_000)?;
        }
        if let Some(v) = file.lease_s {
            s.lease = seconds("queue.lease_s", v, 1.0, 3600.0)?;
        }
        if let Some(n) = file.max_deliveries {
            s.max_deliveries = whole("queue.max_deliveries", n, 1, 100)?;
        }
        if let Some(v) = file.result_ttl_s {
            s.result_ttl = seconds("queue.result_ttl_s", v, 1.0, 30.0 * 86_400.0)?;
        }
        if let Some(v) = file.retry_base_s {
            s.retry_base = seconds("queue.retry_base_s", v, 0.01, 3600.0)?;
        }
        if let Some(v) = file.retry_cap_s {
            s.retry_cap = seconds("queue.retry_cap_s", v, 0.01, 86_400.0)?;
        }
        s.check()?;
        Ok(s)
    }

    /// Checks what single fields cannot: the block time fits in a lease (renewals run beside
    /// it, but a reader that blocks past a lease delays noticing a stop), the cap is above base.
    pub fn check(&self) -> Result<(), ConfigError> {
        check_name("--queue", &self.name)?;
        if self.retry_cap < self.retry_base {
            return Err(bad(
                "queue.retry_cap_s",
                "is below queue.retry_base_s",
                "set retry_cap_s at least as large as retry_base_s",
            ));
        }
        Ok(())
    }

    /// How long a worker is silent before its entries move to another: its lease and one more
    /// beat. The beat is there for the order: the dead worker's instance lease (the same
    /// length, renewed on its own beat) has lapsed by then, so the store has let its provider
    /// tasks go and the worker that takes an entry adopts its provider task instead of paying
    /// for a second one.
    pub fn taken_for_dead(&self) -> Duration {
        self.lease + self.beat()
    }

    /// How often held entries are renewed and stalled ones looked for: a third of a lease.
    pub fn beat(&self) -> Duration {
        self.lease / 3
    }

    /// The block time of one read: never longer than a third of a lease.
    pub fn read_block(&self) -> Duration {
        self.block
            .min(self.lease / 3)
            .max(Duration::from_millis(100))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_settings_name_themselves() {
        let file = |f: fn(&mut QueueFile)| {
            let mut q = QueueFile::default();
            f(&mut q);
            QueueSettings::from_file(&q).unwrap_err().setting
        };
        assert_eq!(file(|q| q.lease_s = Some(0.0)), "queue.lease_s");
        assert_eq!(file(|q| q.lease_s = Some(f64::NAN)), "queue.lease_s");
        assert_eq!(file(|q| q.concurrency = Some(0)), "queue.concurrency");
        assert_eq!(
            file(|q| q.max_deliveries = Some(-1)),
            "queue.max_deliveries"
        );
        assert_eq!(file(|q| q.result_ttl_s = Some(1e30)), "queue.result_ttl_s");
        assert_eq!(file(|q| q.name = Some("a}b".into())), "queue.name");
        assert_eq!(
            file(|q| {
                q.retry_base_s = Some(10.0);
                q.retry_cap_s = Some(1.0)
            }),
            "queue.retry_cap_s"
        );
        let ok = QueueSettings::from_file(&QueueFile {
            lease_s: Some(2.0),
            ..QueueFile::default()
        })
        .unwrap();
        assert_eq!(ok.lease, Duration::from_secs(2));
    }
}
