//! Faults the simulator injects ([`Faults`]), and the switch that changes them while it runs
//! ([`FaultSwitch`]), so a test or a rehearsal can turn a failure on, watch the client cope, and
//! turn it off again.
//!
//! Two families, each decided by one random draw so their rates add up exactly:
//!
//! - **submit faults** (`in.php` only): `ERROR_SERVER_ERROR`, an HTML 502 page, the capacity
//!   code although threads are free, `ERROR_ZERO_BALANCE`, a plain-text error although JSON was
//!   asked for;
//! - **wire faults** (`in.php` and `res.php`): the connection dropped with no answer, or a reply
//!   cut off mid-JSON; independently, a reply held back for `slow_ms`;
//! - **a revoked key** (`reject_keys`, not a rate): every request (`in.php`/`res.php` and the
//!   JSON task calls) answered
//!   `ERROR_KEY_DOES_NOT_EXIST`, as a provider does once an account's key is deleted.
//!
//! Owns the rates, their validation, the draws and the shape of a broken reply. Does not own
//! which endpoint applies them (the handlers) or counting them (the stats).

use std::sync::Mutex;
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::error::SettingsError;

/// Longest accepted `slow_ms`: a minute is beyond every client's request timeout (the gateway's
/// is 30 s), so a longer hold tests nothing more and only keeps connections open.
pub const MAX_SLOW_MS: u64 = 60_000;

/// Which failures the simulator injects and how often. All off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Share of submits answered `ERROR_SERVER_ERROR` (0.0-1.0).
    pub server_error_rate: f64,
    /// Share of submits answered with an HTTP 502 HTML page (0.0-1.0).
    pub html_error_rate: f64,
    /// Share of submits answered with the capacity code although threads are free (0.0-1.0).
    pub capacity_error_rate: f64,
    /// Share of submits answered `ERROR_ZERO_BALANCE` (0.0-1.0).
    pub zero_balance_rate: f64,
    /// Share of submits answered `ERROR_SERVER_ERROR` as plain text, even when the request asked
    /// for JSON (`json=1`, or the JSON task protocol), as an overloaded front end does (0.0-1.0).
    pub plain_error_rate: f64,
    /// Share of `in.php`/`res.php` requests whose connection is closed without an answer, after
    /// the request took effect (a submit made a task whose id never arrives).
    pub drop_rate: f64,
    /// Share of `in.php`/`res.php` requests answered HTTP 200 with a reply cut off mid-JSON.
    pub malformed_rate: f64,
    /// Share of `in.php`/`res.php` requests whose answer is held back `slow_ms`.
    pub slow_rate: f64,
    /// How long a slow answer is held back, in milliseconds (at most [`MAX_SLOW_MS`]).
    pub slow_ms: u64,
    /// Every `in.php`/`res.php` request is refused with `ERROR_KEY_DOES_NOT_EXIST`.
    pub reject_keys: bool,
}

/// A partial update of [`Faults`], the body of `POST /faults`: fields left out keep their value.
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultsPatch {
    pub server_error_rate: Option<f64>,
    pub html_error_rate: Option<f64>,
    pub capacity_error_rate: Option<f64>,
    pub zero_balance_rate: Option<f64>,
    pub plain_error_rate: Option<f64>,
    pub drop_rate: Option<f64>,
    pub malformed_rate: Option<f64>,
    pub slow_rate: Option<f64>,
    pub slow_ms: Option<u64>,
    pub reject_keys: Option<bool>,
}

impl FaultsPatch {
    /// Reads a JSON object of [`Faults`] fields; the error names the field at fault.
    pub fn from_json(body: &[u8]) -> Result<FaultsPatch, String> {
        let object: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body)
            .map_err(|e| format!("expected a JSON object of fault settings: {e}"))?;
        let mut patch = FaultsPatch::default();
        for (name, value) in &object {
            let rate = || {
                value
                    .as_f64()
                    .ok_or_else(|| format!("{name} must be a number between 0 and 1"))
            };
            match name.as_str() {
                "server_error_rate" => patch.server_error_rate = Some(rate()?),
                "html_error_rate" => patch.html_error_rate = Some(rate()?),
                "capacity_error_rate" => patch.capacity_error_rate = Some(rate()?),
                "zero_balance_rate" => patch.zero_balance_rate = Some(rate()?),
                "plain_error_rate" => patch.plain_error_rate = Some(rate()?),
                "drop_rate" => patch.drop_rate = Some(rate()?),
                "malformed_rate" => patch.malformed_rate = Some(rate()?),
                "slow_rate" => patch.slow_rate = Some(rate()?),
                "slow_ms" => {
                    let ms = value.as_u64().ok_or_else(|| {
                        format!("slow_ms must be whole milliseconds from 0 to {MAX_SLOW_MS}")
                    })?;
                    patch.slow_ms = Some(ms);
                }
                "reject_keys" => {
                    let on = value
                        .as_bool()
                        .ok_or_else(|| "reject_keys must be true or false".to_owned())?;
                    patch.reject_keys = Some(on);
                }
                _ => return Err(format!("unknown fault setting `{name}`")),
            }
        }
        Ok(patch)
    }

    /// `current` with this patch's fields replaced, validated as a whole.
    pub fn apply(self, current: Faults) -> Result<Faults, SettingsError> {
        let faults = Faults {
            server_error_rate: self.server_error_rate.unwrap_or(current.server_error_rate),
            html_error_rate: self.html_error_rate.unwrap_or(current.html_error_rate),
            capacity_error_rate: self
                .capacity_error_rate
                .unwrap_or(current.capacity_error_rate),
            zero_balance_rate: self.zero_balance_rate.unwrap_or(current.zero_balance_rate),
            plain_error_rate: self.plain_error_rate.unwrap_or(current.plain_error_rate),
            drop_rate: self.drop_rate.unwrap_or(current.drop_rate),
            malformed_rate: self.malformed_rate.unwrap_or(current.malformed_rate),
            slow_rate: self.slow_rate.unwrap_or(current.slow_rate),
            slow_ms: self.slow_ms.unwrap_or(current.slow_ms),
            reject_keys: self.reject_keys.unwrap_or(current.reject_keys),
        };
        faults.validate()?;
        Ok(faults)
    }
}

/// What a submit does instead of its normal course.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubmitFault {
    ServerError,
    HtmlError,
    Capacity,
    ZeroBalance,
    PlainError,
}

/// What happens to a reply on its way out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireFault {
    Drop,
    Malformed,
}

impl Faults {
    /// Every rate a probability, each family's rates together at most 1, `slow_ms` bounded.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let rates = [
            ("server_error_rate", self.server_error_rate),
            ("html_error_rate", self.html_error_rate),
            ("capacity_error_rate", self.capacity_error_rate),
            ("zero_balance_rate", self.zero_balance_rate),
            ("plain_error_rate", self.plain_error_rate),
            ("drop_rate", self.drop_rate),
            ("malformed_rate", self.malformed_rate),
            ("slow_rate", self.slow_rate),
        ];
        for (name, value) in rates {
            // `contains` is false for NaN, so NaN is refused here too.
            if !(0.0..=1.0).contains(&value) {
                return Err(SettingsError::Rate { name, value });
            }
        }
        let submit = self.submit_rates().iter().sum::<f64>();
        if submit > 1.0 {
            return Err(SettingsError::Rate {
                name: "server_error_rate + html_error_rate + capacity_error_rate + zero_balance_rate + plain_error_rate",
                value: submit,
            });
        }
        let wire = self.drop_rate + self.malformed_rate;
        if wire > 1.0 {
            return Err(SettingsError::Rate {
                name: "drop_rate + malformed_rate",
                value: wire,
            });
        }
        if self.slow_ms > MAX_SLOW_MS {
            return Err(SettingsError::SlowTooLong {
                got: self.slow_ms,
                max: MAX_SLOW_MS,
            });
        }
        Ok(())
    }

    /// The same faults with every rate forced into 0..=1 (NaN counts as 0) and `slow_ms` capped,
    /// for callers that construct settings without validating them.
    pub fn clamped(mut self) -> Faults {
        for rate in [
            &mut self.server_error_rate,
            &mut self.html_error_rate,
            &mut self.capacity_error_rate,
            &mut self.zero_balance_rate,
            &mut self.plain_error_rate,
            &mut self.drop_rate,
            &mut self.malformed_rate,
            &mut self.slow_rate,
        ] {
            *rate = if rate.is_nan() {
                0.0
            } else {
                rate.clamp(0.0, 1.0)
            };
        }
        self.slow_ms = self.slow_ms.min(MAX_SLOW_MS);
        self
    }

    fn submit_rates(&self) -> [f64; 5] {
        [
            self.server_error_rate,
            self.html_error_rate,
            self.capacity_error_rate,
            self.zero_balance_rate,
            self.plain_error_rate,
        ]
    }

    /// The submit fault a uniform `draw` in 0..1 lands on, if any.
    pub(crate) fn submit_fault(&self, draw: f64) -> Option<SubmitFault> {
        let faults = [
            SubmitFault::ServerError,
            SubmitFault::HtmlError,
            SubmitFault::Capacity,
            SubmitFault::ZeroBalance,
            SubmitFault::PlainError,
        ];
        let mut edge = 0.0;
        for (rate, fault) in self.submit_rates().into_iter().zip(faults) {
            edge += rate;
            if draw < edge {
                return Some(fault);
            }
        }
        None
    }

    /// The wire fault a uniform `draw` in 0..1 lands on, if any.
    pub(crate) fn wire_fault(&self, draw: f64) -> Option<WireFault> {
        if draw < self.drop_rate {
            Some(WireFault::Drop)
        } else if draw < self.drop_rate + self.malformed_rate {
            Some(WireFault::Malformed)
        } else {
            None
        }
    }

    /// How long to hold a reply back for a uniform `draw` in 0..1.
    pub(crate) fn delay(&self, draw: f64) -> Option<Duration> {
        (draw < self.slow_rate && self.slow_ms > 0).then(|| Duration::from_millis(self.slow_ms))
    }
}

/// The faults in effect, changed while the simulator serves.
#[derive(Debug, Default)]
pub(crate) struct FaultSwitch {
    current: Mutex<Faults>,
}

impl FaultSwitch {
    pub fn new(faults: Faults) -> FaultSwitch {
        FaultSwitch {
            current: Mutex::new(faults.clamped()),
        }
    }

    pub fn get(&self) -> Faults {
        *super::lock(&self.current)
    }

    /// Replaces the faults in effect after checking them; on error nothing changes.
    pub fn set(&self, faults: Faults) -> Result<(), SettingsError> {
        faults.validate()?;
        *super::lock(&self.current) = faults;
        Ok(())
    }
}

/// An answer whose connection closes before a complete reply: the head announces a body that
/// never comes, and the failing body makes the server abort the connection.
pub(crate) fn dropped_connection() -> Response {
    let body = futures::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "injected fault: connection dropped",
        ))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_LENGTH, "64")
        .body(Body::from_stream(body))
        .unwrap_or_default()
}

/// A reply cut off mid-JSON, as an overloaded front end sometimes sends: HTTP 200, JSON type,
/// half a body.
pub(crate) fn malformed_reply() -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{\"status\":1,\"request\":\"73"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_land_on_each_fault_by_its_share() {
        let f = Faults {
            server_error_rate: 0.1,
            html_error_rate: 0.2,
            capacity_error_rate: 0.3,
            zero_balance_rate: 0.1,
            plain_error_rate: 0.1,
            drop_rate: 0.25,
            malformed_rate: 0.25,
            slow_rate: 0.5,
            slow_ms: 40,
            reject_keys: false,
        };
        assert_eq!(f.validate(), Ok(()));
        assert_eq!(f.submit_fault(0.05), Some(SubmitFault::ServerError));
        assert_eq!(f.submit_fault(0.25), Some(SubmitFault::HtmlError));
        assert_eq!(f.submit_fault(0.55), Some(SubmitFault::Capacity));
        assert_eq!(f.submit_fault(0.65), Some(SubmitFault::ZeroBalance));
        assert_eq!(f.submit_fault(0.75), Some(SubmitFault::PlainError));
        assert_eq!(f.submit_fault(0.85), None);
        assert_eq!(f.wire_fault(0.1), Some(WireFault::Drop));
        assert_eq!(f.wire_fault(0.3), Some(WireFault::Malformed));
        assert_eq!(f.wire_fault(0.6), None);
        assert_eq!(f.delay(0.4), Some(Duration::from_millis(40)));
        assert_eq!(f.delay(0.6), None);
        assert_eq!(Faults::default().submit_fault(0.0), None);
        assert_eq!(Faults::default().wire_fault(0.0), None);
    }

    #[test]
    fn bad_rates_and_sums_are_refused_by_name() {
        let bad = |f: Faults| f.validate().unwrap_err().to_string();
        let base = Faults::default();
        let nan = Faults {
            drop_rate: f64::NAN,
            ..base
        };
        assert!(bad(nan).contains("drop_rate"), "{}", bad(nan));
        let sum = Faults {
            capacity_error_rate: 0.6,
            zero_balance_rate: 0.6,
            ..base
        };
        assert!(bad(sum).contains("zero_balance_rate"), "{}", bad(sum));
        let wire = Faults {
            drop_rate: 0.7,
            malformed_rate: 0.7,
            ..base
        };
        assert!(bad(wire).contains("drop_rate + malformed_rate"));
        let slow = Faults {
            slow_ms: MAX_SLOW_MS + 1,
            ..base
        };
        assert!(bad(slow).contains("slow_ms"), "{}", bad(slow));
        assert_eq!(nan.clamped().drop_rate, 0.0);
    }

    #[test]
    fn a_patch_changes_only_its_fields_and_a_bad_one_changes_nothing() {
        let switch = FaultSwitch::new(Faults {
            malformed_rate: 0.5,
            ..Faults::default()
        });
        let patch = FaultsPatch::from_json(br#"{"drop_rate": 0.25}"#).unwrap();
        switch.set(patch.apply(switch.get()).unwrap()).unwrap();
        assert_eq!(
            (switch.get().drop_rate, switch.get().malformed_rate),
            (0.25, 0.5)
        );
        let patch = FaultsPatch::from_json(br#"{"drop_rate": 0.75}"#).unwrap();
        assert!(patch.apply(switch.get()).is_err());
        assert_eq!(switch.get().drop_rate, 0.25);
        let unknown = FaultsPatch::from_json(br#"{"dorp_rate": 1}"#).unwrap_err();
        assert!(unknown.contains("dorp_rate"), "{unknown}");
        let patch = FaultsPatch::from_json(br#"{"reject_keys": true}"#).unwrap();
        switch.set(patch.apply(switch.get()).unwrap()).unwrap();
        assert!(switch.get().reject_keys && switch.get().drop_rate == 0.25);
        let not_bool = FaultsPatch::from_json(br#"{"reject_keys": 1}"#).unwrap_err();
        assert!(not_bool.contains("reject_keys"), "{not_bool}");
    }
}
