//! The simulator's knobs ([`SimSettings`]) and the text forms the CLI takes for them:
//! latency ranges (`"2s..5s"`, `"1.5s"`) and per-kind pairs (`"recaptcha_v2=2s..5s"`,
//! `"turnstile=300s"`).
//!
//! Owns parsing and validation of those values. Does not read flags or files: the CLI does, and
//! hands a finished `SimSettings` to [`Simulator::new`](super::Simulator::new).

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::error::SettingsError;
use super::faults::Faults;
use crate::model::Kind;
use crate::wire::inphp::codes;

/// Everything that makes one simulated provider behave the way it does.
#[derive(Debug, Clone)]
pub struct SimSettings {
    /// The plan's thread limit: tasks solved at once before `in.php` answers `capacity_code`.
    pub threads: u32,
    /// Solve time per kind, drawn uniformly from the range. A kind missing here uses its default.
    pub latency: HashMap<Kind, LatencyRange>,
    /// How long an answer stays valid from the moment it is ready. A kind missing here uses
    /// [`Kind::default_lifetime`].
    pub lifetimes: HashMap<Kind, Duration>,
    /// Share of accepted tasks that end in `ERROR_CAPTCHA_UNSOLVABLE` (0.0-1.0).
    pub unsolvable_rate: f64,
    /// The failures injected when the simulator starts (server errors, HTML pages, capacity,
    /// zero balance, dropped connections, malformed and slow replies); changeable while it runs.
    pub faults: Faults,
    /// What `in.php` answers when every thread is busy.
    pub capacity_code: String,
    /// Accepted API keys; empty means any 32-character key.
    pub keys: Vec<String>,
    /// What `getbalance` answers, verbatim.
    pub balance: String,
    /// Seed for every random draw (latency, failures, task ids), for reproducible runs.
    pub seed: Option<u64>,
}

impl Default for SimSettings {
    fn default() -> Self {
        Self {
            // 50 threads: a mid-size CaptchaAI plan, big enough that a quick start never sees
            // capacity errors, small enough that a benchmark can reach the limit.
            threads: 50,
            // Observed solve times of real providers per kind, so plans sized against the
            // simulator hold up against the real thing.
            latency: Kind::ALL
                .into_iter()
                .map(|k| (k, LatencyRange::default_for(k)))
                .collect(),
            // The real lifetimes (docs/PROTOCOL.md "Answer lifetimes"), so freshness logic is
            // exercised against the same deadlines as in production.
            lifetimes: Kind::ALL
                .into_iter()
                .map(|k| (k, k.default_lifetime()))
                .collect(),
            // Failures are off by default so a quick start shows the happy path; turn them on
            // to rehearse retry and failover handling.
            unsolvable_rate: 0.0,
            faults: Faults::default(),
            // What 2captcha and CaptchaAI's blog send; CaptchaAI's docs say
            // `ERROR_ZERO_BALANCE`, which callers can select to test that path.
            capacity_code: codes::NO_SLOT_AVAILABLE.to_owned(),
            // Any well-formed key works, so clients run without setup.
            keys: Vec::new(),
            // A plausible positive balance: clients that check it before submitting proceed.
            balance: "100.00".to_owned(),
            // Fresh randomness per run unless the caller asks for reproducibility.
            seed: None,
        }
    }
}

impl SimSettings {
    /// The solve-time range of `kind`, falling back to its default.
    pub fn latency_for(&self, kind: Kind) -> LatencyRange {
        self.latency
            .get(&kind)
            .copied()
            .unwrap_or_else(|| LatencyRange::default_for(kind))
    }

    /// The answer lifetime of `kind`, falling back to [`Kind::default_lifetime`].
    pub fn lifetime_for(&self, kind: Kind) -> Duration {
        self.lifetimes
            .get(&kind)
            .copied()
            .unwrap_or_else(|| kind.default_lifetime())
    }

    /// Checks what the types cannot: rates are probabilities that together fit in one draw.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if !(0.0..=1.0).contains(&self.unsolvable_rate) {
            return Err(SettingsError::Rate {
                name: "unsolvable_rate",
                value: self.unsolvable_rate,
            });
        }
        self.faults.validate()?;
        if self.capacity_code.is_empty() {
            return Err(SettingsError::EmptyCapacityCode);
        }
        Ok(())
    }
}

/// A solve time drawn uniformly from `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyRange {
    pub min: Duration,
    pub max: Duration,
}

impl LatencyRange {
    /// A range that always takes exactly `d`.
    pub fn fixed(d: Duration) -> Self {
        Self { min: d, max: d }
    }

    /// Typical solve times of real providers per kind (its declaration's).
    pub fn default_for(kind: Kind) -> Self {
        let (min, max) = kind.spec().typical.solve_ms;
        LatencyRange {
            min: Duration::from_millis(min),
            max: Duration::from_millis(max),
        }
    }
}

impl FromStr for LatencyRange {
    type Err = SettingsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once("..") {
            None => parse_duration(s).map(LatencyRange::fixed),
            Some((min, max)) => {
                let range = LatencyRange {
                    min: parse_duration(min)?,
                    max: parse_duration(max)?,
                };
                if range.min > range.max {
                    return Err(SettingsError::Reversed(s.trim().to_owned()));
                }
                Ok(range)
            }
        }
    }
}

impl fmt::Display for LatencyRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms..{}ms", self.min.as_millis(), self.max.as_millis())
    }
}

/// `KIND=RANGE`, the form of the repeatable `--latency` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindLatency {
    pub kind: Kind,
    pub range: LatencyRange,
}

impl FromStr for KindLatency {
    type Err = SettingsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, value) = split_kind(s)?;
        Ok(Self {
            kind,
            range: value.parse()?,
        })
    }
}

/// `KIND=DURATION`, the form of the repeatable `--lifetime` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindLifetime {
    pub kind: Kind,
    pub lifetime: Duration,
}

impl FromStr for KindLifetime {
    type Err = SettingsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, value) = split_kind(s)?;
        Ok(Self {
            kind,
            lifetime: parse_duration(value)?,
        })
    }
}

fn split_kind(s: &str) -> Result<(Kind, &str), SettingsError> {
    let (kind, value) = s
        .split_once('=')
        .ok_or_else(|| SettingsError::MissingKind(s.to_owned()))?;
    let kind = kind.trim().parse().map_err(SettingsError::UnknownKind)?;
    Ok((kind, value))
}

/// Longest accepted duration: a day is far beyond any solve time or lifetime, and the bound keeps
/// millisecond arithmetic on [`Millis`](crate::model::Millis) far from overflow.
const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// Parses `250ms`, `2s`, `1.5s`, `2m` or a bare `0`.
pub fn parse_duration(s: &str) -> Result<Duration, SettingsError> {
    let input = s.trim();
    let err = |reason| SettingsError::Duration {
        input: input.to_owned(),
        reason,
    };
    if input.is_empty() {
        return Err(err("it is empty"));
    }
    let split = input
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(input.len());
    let (number, unit) = input.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| err("it does not start with a number"))?;
    let millis_per_unit = match unit.trim() {
        "ms" => 1.0,
        "s" => 1_000.0,
        "m" | "min" => 60_000.0,
        "" if value == 0.0 => 0.0,
        "" => return Err(err("it has no unit (ms, s or m)")),
        _ => return Err(err("the unit is not ms, s or m")),
    };
    let millis = value * millis_per_unit;
    if !millis.is_finite() || millis > MAX_DURATION.as_millis() as f64 {
        return Err(err("it is longer than a day"));
    }
    Ok(Duration::from_micros((millis * 1_000.0).round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(s in ".{0,24}", n in "[0-9.]{0,8}(ms|s|m|min|h|)") {
            let _ = s.parse::<LatencyRange>();
            let _ = s.parse::<KindLatency>();
            let _ = s.parse::<KindLifetime>();
            if let Ok(d) = parse_duration(&n) {
                prop_assert!(d <= MAX_DURATION);
            }
        }
    }

    #[test]
    fn ranges_and_fixed_durations_parse() {
        let ms = Duration::from_millis;
        assert_eq!(
            "200ms..800ms".parse::<LatencyRange>(),
            Ok(LatencyRange {
                min: ms(200),
                max: ms(800)
            })
        );
        assert_eq!(
            "2s..5s".parse::<LatencyRange>(),
            Ok(LatencyRange {
                min: ms(2_000),
                max: ms(5_000)
            })
        );
        assert_eq!(
            "1.5s".parse::<LatencyRange>(),
            Ok(LatencyRange::fixed(ms(1_500)))
        );
        assert_eq!(
            "0..0".parse::<LatencyRange>(),
            Ok(LatencyRange::fixed(ms(0)))
        );
        assert_eq!(parse_duration("2m"), Ok(ms(120_000)));
    }

    #[test]
    fn bad_input_gets_a_clear_error() {
        for bad in ["", "5", "fast", "2h", "-1s", "1e400s", "2s..", "NaNs"] {
            let err = bad.parse::<LatencyRange>().unwrap_err();
            assert!(err.to_string().contains("invalid duration"), "{bad}: {err}");
        }
        assert_eq!(
            "5s..2s".parse::<LatencyRange>(),
            Err(SettingsError::Reversed("5s..2s".into()))
        );
    }

    #[test]
    fn per_kind_pairs() {
        let l: KindLatency = "recaptcha_v2=2s..5s".parse().unwrap();
        assert_eq!(l.kind, Kind::RecaptchaV2);
        assert_eq!(l.range.max, Duration::from_secs(5));
        let t: KindLifetime = "turnstile=300s".parse().unwrap();
        assert_eq!(
            (t.kind, t.lifetime),
            (Kind::Turnstile, Duration::from_secs(300))
        );
        assert!(matches!(
            "2s..5s".parse::<KindLatency>(),
            Err(SettingsError::MissingKind(_))
        ));
        let err = "keycaptcha=1s".parse::<KindLifetime>().unwrap_err();
        assert!(
            err.to_string().contains("unknown kind `keycaptcha`"),
            "{err}"
        );
    }

    #[test]
    fn defaults_validate_and_bad_rates_do_not() {
        let s = SimSettings::default();
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(
            s.latency_for(Kind::Image),
            LatencyRange::default_for(Kind::Image)
        );
        assert_eq!(s.lifetime_for(Kind::Turnstile), Duration::from_secs(300));
        let bad = SimSettings {
            unsolvable_rate: 1.5,
            ..SimSettings::default()
        };
        assert!(matches!(bad.validate(), Err(SettingsError::Rate { .. })));
        let sum = SimSettings {
            faults: Faults {
                html_error_rate: 0.6,
                server_error_rate: 0.6,
                ..Faults::default()
            },
            ..SimSettings::default()
        };
        assert!(matches!(sum.validate(), Err(SettingsError::Rate { .. })));
    }
}
