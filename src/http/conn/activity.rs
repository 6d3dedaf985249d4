//! What one connection is doing, and by when it must have done it.
//!
//! Owns: the connection's phase (reading a head, idle between requests, reading a body, or busy
//! producing a response), moved on by the three wrappers that see it happen (`tracked.rs`: the
//! socket, the service and the request body), and the deadline each phase sets
//! ([`deadline`], pure arithmetic on milliseconds since accept, tested below). Does not own the
//! timer that enforces it (`watch.rs`).
//!
//! Every wrapper runs inside the connection's own task (hyper polls the socket, the service
//! future and the body from it), so the fields are atomics only because the types must be
//! `Send`; relaxed ordering is enough.

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering::Relaxed};

use tokio::time::Instant;

use super::ConnSettings;

/// What a connection is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// A request head: from accept, or from the first byte after an idle spell.
    Head = 0,
    /// The next request, after a response (keep-alive).
    Idle = 1,
    /// The body of the request being served.
    Body = 2,
    /// The response: a caller waiting for its solve. No deadline.
    Busy = 3,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::Head,
            1 => Phase::Idle,
            2 => Phase::Body,
            _ => Phase::Busy,
        }
    }

    /// The label a connection closed in this phase is counted under.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Head => "header",
            Phase::Idle => "idle",
            Phase::Body => "body",
            Phase::Busy => "busy",
        }
    }
}

/// A copy of the fields [`deadline`] reads; times in milliseconds since accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub phase: Phase,
    /// When the phase began.
    pub since: u64,
    /// Body bytes received so far (phase `Body`).
    pub body_bytes: u64,
    /// When body bytes last arrived (phase `Body`; the phase's start until the first).
    pub body_last: u64,
}

/// When a connection in `s` must be closed, in milliseconds since accept; `None` while a
/// response is being produced, however long that takes (a solve may take 600 s).
///
/// A head must be complete `header_timeout` after it began; after a response, the next head
/// must be complete `idle_timeout` after the response or `header_timeout` after its first byte,
/// whichever is later (the watcher checks an idle connection at its idle deadline and only then
/// sees that a head began). A body may pause at most `body_timeout`, and must average
/// `min_body_rate` bytes/s from the head on once `body_timeout` has passed (mod_reqtimeout's
/// `MinRate`: the allowance grows by a second for every `min_body_rate` bytes received).
pub fn deadline(s: Snapshot, limits: &ConnSettings) -> Option<u64> {
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    match s.phase {
        Phase::Head => Some(s.since.saturating_add(ms(limits.header_timeout))),
        Phase::Idle => Some(s.since.saturating_add(ms(limits.idle_timeout))),
        Phase::Body => {
            let grace = ms(limits.body_timeout);
            let silence = s.body_last.saturating_add(grace);
            if limits.min_body_rate == 0 {
                return Some(silence);
            }
            let earned = s.body_bytes.saturating_mul(1000) / limits.min_body_rate;
            let rate = s.since.saturating_add(grace).saturating_add(earned);
            Some(silence.min(rate))
        }
        Phase::Busy => None,
    }
}

/// One connection's phase, shared by its wrappers and its watcher.
#[derive(Debug)]
pub struct Activity {
    accepted: Instant,
    phase: AtomicU8,
    since: AtomicU64,
    /// Requests begun on this connection; a request's wrappers only move the phase while theirs
    /// is the latest, so a late drop from a finished request cannot touch the next one.
    requests: AtomicU32,
    body_bytes: AtomicU64,
    body_last: AtomicU64,
}

impl Activity {
    /// A connection accepted at `accepted`, waiting for its first head.
    pub fn new(accepted: Instant) -> Activity {
        Activity {
            accepted,
            phase: AtomicU8::new(Phase::Head as u8),
            since: AtomicU64::new(0),
            requests: AtomicU32::new(0),
            body_bytes: AtomicU64::new(0),
            body_last: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        let elapsed = Instant::now().saturating_duration_since(self.accepted);
        u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
    }

    fn enter(&self, phase: Phase, at: u64) {
        self.since.store(at, Relaxed);
        self.phase.store(phase as u8, Relaxed);
    }

    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Relaxed))
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            phase: self.phase(),
            since: self.since.load(Relaxed),
            body_bytes: self.body_bytes.load(Relaxed),
            body_last: self.body_last.load(Relaxed),
        }
    }

    /// The connection's deadline as an instant (see [`deadline`]).
    pub fn deadline(&self, limits: &ConnSettings) -> Option<Instant> {
        deadline(self.snapshot(), limits)
            .map(|ms| self.accepted + std::time::Duration::from_millis(ms))
    }

    /// Bytes arrived on the socket: after a response, they begin the next head.
    pub fn bytes_read(&self) {
        if self.phase() == Phase::Idle {
            self.enter(Phase::Head, self.now());
        }
    }

    /// A complete head was handed to the service; returns the request's number.
    pub fn request_began(&self, has_body: bool) -> u32 {
        let n = self.requests.fetch_add(1, Relaxed).wrapping_add(1);
        let now = self.now();
        self.body_bytes.store(0, Relaxed);
        self.body_last.store(now, Relaxed);
        self.enter(if has_body { Phase::Body } else { Phase::Busy }, now);
        n
    }

    fn is_current(&self, request: u32) -> bool {
        self.requests.load(Relaxed) == request
    }

    /// `n` bytes of request `request`'s body arrived.
    pub fn body_read(&self, request: u32, n: usize) {
        if self.is_current(request) {
            self.body_bytes
                .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Relaxed);
            self.body_last.store(self.now(), Relaxed);
        }
    }

    /// Request `request`'s body is read to its end, or was let go unread.
    pub fn body_done(&self, request: u32) {
        if self.is_current(request) && self.phase() == Phase::Body {
            self.enter(Phase::Busy, self.now());
        }
    }

    /// Request `request`'s response is written (or its handler was dropped).
    pub fn request_ended(&self, request: u32) {
        if self.is_current(request) {
            self.enter(Phase::Idle, self.now());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The shipped timeouts, with room for ten connections.
    fn limits() -> ConnSettings {
        ConnSettings {
            max_connections: 10,
            ..ConnSettings::default()
        }
    }

    fn at(phase: Phase, since: u64) -> Snapshot {
        Snapshot {
            phase,
            since,
            body_bytes: 0,
            body_last: since,
        }
    }

    #[test]
    fn heads_and_idle_spells_have_their_own_timeouts_and_a_response_has_none() {
        let l = limits();
        assert_eq!(deadline(at(Phase::Head, 0), &l), Some(20_000));
        assert_eq!(deadline(at(Phase::Head, 5_000), &l), Some(25_000));
        assert_eq!(deadline(at(Phase::Idle, 1_000), &l), Some(76_000));
        assert_eq!(deadline(at(Phase::Busy, 0), &l), None);
    }

    #[test]
    fn a_body_may_pause_for_the_timeout_and_must_keep_the_rate_after_the_grace() {
        let l = limits();
        // Nothing yet: the grace.
        assert_eq!(deadline(at(Phase::Body, 1_000), &l), Some(21_000));
        // 5,000 bytes earn 10 s at 500 bytes/s, but a pause still ends 20 s after the last read.
        let s = Snapshot {
            phase: Phase::Body,
            since: 1_000,
            body_bytes: 5_000,
            body_last: 2_000,
        };
        assert_eq!(deadline(s, &l), Some(22_000));
        // A steady trickle below the rate: 1 byte every 10 s never pauses 20 s, yet is cut once
        // the average falls short (the grace plus 2 ms per byte).
        let s = Snapshot {
            phase: Phase::Body,
            since: 0,
            body_bytes: 3,
            body_last: 30_000,
        };
        assert_eq!(deadline(s, &l), Some(20_006));
        // Without a rate only the pause counts.
        let no_rate = ConnSettings {
            min_body_rate: 0,
            ..l
        };
        assert_eq!(deadline(s, &no_rate), Some(50_000));
    }

    #[test]
    fn huge_values_saturate_instead_of_overflowing() {
        let l = ConnSettings {
            min_body_rate: 1,
            ..limits()
        };
        let s = Snapshot {
            phase: Phase::Body,
            since: u64::MAX - 1,
            body_bytes: u64::MAX,
            body_last: u64::MAX,
        };
        assert_eq!(deadline(s, &l), Some(u64::MAX));
    }

    #[tokio::test(start_paused = true)]
    async fn phases_follow_the_exchange_and_a_late_drop_does_not_touch_the_next_request() {
        let a = Activity::new(Instant::now());
        assert_eq!(a.phase(), Phase::Head);
        let first = a.request_began(true);
        assert_eq!(a.phase(), Phase::Body);
        a.body_read(first, 10);
        assert_eq!(a.snapshot().body_bytes, 10);
        a.body_done(first);
        assert_eq!(a.phase(), Phase::Busy);
        a.request_ended(first);
        assert_eq!(a.phase(), Phase::Idle);
        tokio::time::advance(Duration::from_secs(3)).await;
        a.bytes_read();
        assert_eq!(a.snapshot().phase, Phase::Head);
        assert_eq!(a.snapshot().since, 3_000);
        // Bytes of a body or of a head already under way move nothing.
        a.bytes_read();
        assert_eq!(a.snapshot().since, 3_000);
        let second = a.request_began(false);
        assert_eq!(a.phase(), Phase::Busy);
        a.body_done(first);
        a.request_ended(first);
        a.body_read(first, 5);
        assert_eq!(a.phase(), Phase::Busy, "the first request's late drops");
        assert_eq!(a.snapshot().body_bytes, 0);
        a.request_ended(second);
        assert_eq!(a.phase(), Phase::Idle);
    }
}
