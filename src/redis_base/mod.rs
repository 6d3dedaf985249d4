//! What every part that keeps state on Redis shares, below all of them (docs/ARCHITECTURE.md
//! "Layers"): the connection to one server or a Cluster ([`Conn`], [`RedisTarget`]), the
//! strict reader of a script's reply ([`Reply`]) and wake-ups by id over Pub/Sub ([`Wakeups`]). The store, the thread budget, the queue and
//! the fleet's status each build their own keys and calls on these.
//!
//! The scripts themselves are loaded in [`crate::lua`].

mod conn;
mod reply;
mod wakeups;

pub use conn::{Conn, RedisTarget};
pub use reply::{Reply, ReplyError};
pub use wakeups::{Registration, Wakeups};
