//! What upstream keeps about pass-through tasks (kind `other`): how they are named in messages,
//! and how many went to a provider per protocol and type, under a label set the caller cannot
//! grow (the documented names, then `unlisted`).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::{PassProtocol, Passthrough, UNLISTED, passthrough_documented};

/// A pass-through task as a message names it: its protocol and the type as sent (bounded by
/// validation to a short plain name).
pub(super) fn described(pass: &Passthrough) -> String {
    match pass.protocol() {
        // An image task passes through only for a flag that makes it another task.
        PassProtocol::InPhp
            if ["post", "base64"]
                .iter()
                .any(|m| m.eq_ignore_ascii_case(pass.name())) =>
        {
            format!(
                "in.php method `{}` with a coordinates, grid, canvas or instruction-image flag",
                pass.name()
            )
        }
        PassProtocol::InPhp => format!("in.php method `{}`", pass.name()),
        PassProtocol::TaskApi => format!("createTask type `{}`", pass.name()),
    }
}

/// Tasks per protocol and label: each protocol's documented names in order, then `unlisted`.
#[derive(Debug, Default)]
pub struct PassedThrough {
    inphp: Counts,
    taskapi: Counts,
}

/// One protocol's counts: more slots than any protocol has documented names, the last for
/// `unlisted`.
#[derive(Debug)]
struct Counts([AtomicU64; SLOTS]);

const SLOTS: usize = 48;

impl Default for Counts {
    fn default() -> Self {
        Counts(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl PassedThrough {
    fn counts(&self, protocol: PassProtocol) -> &Counts {
        match protocol {
            PassProtocol::InPhp => &self.inphp,
            PassProtocol::TaskApi => &self.taskapi,
        }
    }

    /// Counts one task sent on to a provider.
    pub fn count(&self, pass: &Passthrough) {
        let protocol = pass.protocol();
        let documented = passthrough_documented(protocol);
        let slot = documented
            .iter()
            .position(|name| name.eq_ignore_ascii_case(pass.name()))
            .unwrap_or(SLOTS - 1);
        self.counts(protocol).0[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// `(protocol, label, tasks)` for every label with a task.
    pub fn rows(&self) -> Vec<(&'static str, &'static str, u64)> {
        let mut rows = Vec::new();
        for protocol in PassProtocol::ALL {
            let counts = &self.counts(protocol).0;
            let labels = passthrough_documented(protocol)
                .iter()
                .copied()
                .zip(counts.iter())
                .chain([(UNLISTED, &counts[SLOTS - 1])]);
            for (label, count) in labels {
                let n = count.load(Ordering::Relaxed);
                if n > 0 {
                    rows.push((protocol.as_str(), label, n));
                }
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_name_has_its_own_slot_and_the_rest_share_one() {
        for protocol in PassProtocol::ALL {
            assert!(passthrough_documented(protocol).len() < SLOTS);
        }
        let passed = PassedThrough::default();
        let inphp = |method: &str| Passthrough::InPhp {
            fields: vec![("method".into(), method.into())],
            files: Vec::new(),
        };
        passed.count(&inphp("KeyCaptcha"));
        passed.count(&inphp("keycaptcha"));
        for i in 0..100 {
            passed.count(&inphp(&format!("made_up_{i}")));
        }
        assert_eq!(
            passed.rows(),
            vec![("in.php", "keycaptcha", 2), ("in.php", UNLISTED, 100)]
        );
    }
}
