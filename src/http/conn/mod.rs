//! The connection layer under the router: how long a client may take over each part of an
//! exchange, and how many connections one process serves (docs/CONFIGURATION.md "Connections").
//!
//! Owns: each connection's phase and deadline (`activity.rs`), the wrappers that move the phase
//! on (`tracked.rs`), the one timer per connection that enforces it (`watch.rs`), the settings
//! (`settings.rs`), the connection cap and the answer past it (`shed.rs`), and their figures on
//! `/metrics`. Does not own accepting or TLS (`listen.rs`, `tls.rs`).
//!
//! A slow client is cut in the phase it is slow in: a head not complete within `header_timeout`,
//! a kept-alive connection idle past `idle_timeout`, a body that pauses past `body_timeout` or
//! falls below `min_body_rate`. A connection whose response is being produced has no deadline,
//! whatever the wait: a caller legitimately waits up to 600 s on `POST /v1/solve` or a long poll.
//! hyper's own `header_read_timeout` is not used: it starts when a connection goes idle, so it
//! would also be the keep-alive timeout.

mod activity;
mod settings;
mod shed;
mod tracked;
mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use activity::{Activity, Phase};
pub use settings::{ConnSettings, ConnectionsFile};
pub use shed::{serve_shed, shed_limits};
pub use tracked::{Tracked, Watched};
pub use watch::{Ended, watch};

use crate::telemetry::collect::{counters, gauge};

/// Connections past the cap that are read and answered `503` at once (see `shed.rs`); past
/// these as well, a connection is closed as soon as it is accepted. 256 heads of at most 8 KB
/// each bound the overflow's memory to about 4 MB.
pub const SHED_SLOTS: usize = 256;

/// The listener's connection limits, its cap and its figures; clones share them (one pointer,
/// carried by every connection's task).
#[derive(Clone)]
pub struct Connections(Arc<Shared>);

struct Shared {
    settings: ConnSettings,
    open: Arc<Semaphore>,
    shed: Arc<Semaphore>,
    figures: Figures,
}

#[derive(Debug, Default)]
struct Figures {
    /// Closed for a slow client, by phase: header, idle, body.
    timed_out: [AtomicU64; 3],
    /// Past the cap: answered 503, or closed at once.
    answered_503: AtomicU64,
    closed: AtomicU64,
}

/// What the listener may do with a newly accepted connection.
pub enum Admit {
    /// Serve it; the permit is its place under the cap.
    Serve(OwnedSemaphorePermit),
    /// Over the cap: answer its first request `503` (`serve_shed`).
    Shed(OwnedSemaphorePermit),
    /// Over the cap and the shed slots: close it now.
    Close,
}

impl Connections {
    pub fn new(settings: ConnSettings) -> Self {
        Self(Arc::new(Shared {
            settings,
            open: Arc::new(Semaphore::new(settings.max_connections)),
            shed: Arc::new(Semaphore::new(SHED_SLOTS)),
            figures: Figures::default(),
        }))
    }

    pub fn settings(&self) -> &ConnSettings {
        &self.0.settings
    }

    /// Takes a place for a newly accepted connection.
    pub fn admit(&self) -> Admit {
        let shared = &self.0;
        if let Ok(permit) = shared.open.clone().try_acquire_owned() {
            return Admit::Serve(permit);
        }
        match shared.shed.clone().try_acquire_owned() {
            Ok(permit) => {
                shared.figures.answered_503.fetch_add(1, Relaxed);
                Admit::Shed(permit)
            }
            Err(_) => {
                shared.figures.closed.fetch_add(1, Relaxed);
                Admit::Close
            }
        }
    }

    /// Counts a connection that ended as `ended` says.
    pub fn ended(&self, ended: Ended) {
        let index = match ended {
            Ended::TimedOut(Phase::Head) => 0,
            Ended::TimedOut(Phase::Idle) => 1,
            Ended::TimedOut(Phase::Body) => 2,
            Ended::TimedOut(Phase::Busy) | Ended::Finished | Ended::Stopped => return,
        };
        self.0.figures.timed_out[index].fetch_add(1, Relaxed);
    }

    /// Connections served now (not counting those being answered `503`).
    pub fn open(&self) -> usize {
        self.0
            .settings
            .max_connections
            .saturating_sub(self.0.open.available_permits())
    }

    /// Registers the connection figures on `/metrics` (docs/API.md "Metrics").
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(ConnFigures(self.clone())));
    }
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("settings", self.settings())
            .field("open", &self.open())
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct ConnFigures(Connections);

impl Collector for ConnFigures {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = &self.0;
        let f = &c.0.figures;
        gauge(
            &mut e,
            "connections",
            "Client connections this process serves now",
            c.open() as u64,
        )?;
        gauge(
            &mut e,
            "max_connections",
            "Connections served at once before new ones are answered 503 or closed",
            c.settings().max_connections as u64,
        )?;
        counters(
            &mut e,
            "connections_timed_out",
            "Connections closed because the client was too slow: a head (header), the next request (idle) or a body (body)",
            ["header", "idle", "body"]
                .iter()
                .zip(&f.timed_out)
                .map(|(phase, n)| ([("phase", (*phase).to_owned())], n.load(Relaxed))),
        )?;
        counters(
            &mut e,
            "connections_refused",
            "Connections past max_connections: answered 503 with Retry-After, or closed at once when the overflow is full too",
            [("503", &f.answered_503), ("closed", &f.closed)]
                .map(|(answer, n)| ([("answer", answer.to_owned())], n.load(Relaxed))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_cap_connections_are_shed_then_closed_and_a_freed_place_serves_again() {
        let connections = Connections::new(ConnSettings {
            max_connections: 1,
            ..ConnSettings::default()
        });
        let Admit::Serve(first) = connections.admit() else {
            panic!("the first connection is served");
        };
        assert_eq!(connections.open(), 1);
        let shed: Vec<_> = (0..SHED_SLOTS)
            .map(|_| match connections.admit() {
                Admit::Shed(permit) => permit,
                _ => panic!("past the cap, connections are answered 503"),
            })
            .collect();
        assert!(matches!(connections.admit(), Admit::Close));
        drop(shed);
        assert!(matches!(connections.admit(), Admit::Shed(_)));
        drop(first);
        assert!(matches!(connections.admit(), Admit::Serve(_)));
        let f = &connections.0.figures;
        assert_eq!(f.answered_503.load(Relaxed), SHED_SLOTS as u64 + 1);
        assert_eq!(f.closed.load(Relaxed), 1);
    }
}
