//! Client-side balancing over captcha-gateway instances (docs/ARCHITECTURE.md, "Modules").
//!
//! A caller that talks to a fleet of gateways directly (no proxy in between) keeps one
//! [`Balancer`] over the instances' addresses, asks it where to send each call
//! ([`Balancer::pick`]), and tells it how the call went ([`Balancer::finish`]). The balancer
//! spreads calls by outstanding count ([`Strategy`]), ejects an instance that keeps failing for
//! a cool-down that doubles while it keeps failing, and lets it back after ([`EjectionPolicy`]).
//! Only the instance's own failures count ([`Outcome`]): a 429 for a fleet-wide cap does not.
//!
//! This crate is the sans-I/O core: no sockets, no clock, no async runtime. Time is an argument
//! (`now: Instant`), randomness a seeded generator, so every decision can be replayed in a
//! test. The HTTP client that wraps it is the `captcha-gateway-client` crate (`client/`),
//! and is why this is its own crate: it must not pull in Redis or axum (docs/ARCHITECTURE.md,
//! "Modules").
//!
//! # Layout
//!
//! - [`balancer`](Balancer): membership, outstanding counts ([`Ticket`]), the all-ejected
//!   fallback; puts the two below together.
//! - `select`: the strategies, pure functions over candidates and their loads.
//! - `health`: one instance's failure streak, ejection, back-off and return.
//! - `outcome`: which outcomes of a call are the instance's fault.
//!
//! ```
//! use std::time::Instant;
//! use captcha_gateway_balance::{Balancer, EjectionPolicy, Outcome, Strategy};
//!
//! let mut balancer = Balancer::new(Strategy::PowerOfTwoChoices, EjectionPolicy::default(), 7);
//! balancer.add("10.0.0.11:8080");
//! balancer.add("10.0.0.12:8080");
//! let ticket = balancer.pick(Instant::now()).expect("the balancer has instances");
//! // ... send the call to ticket.address() ...
//! balancer.finish(ticket, Outcome::Success, Instant::now());
//! ```

mod balancer;
mod health;
mod outcome;
mod select;

pub use balancer::{Balancer, EndpointStatus, Ticket};
pub use health::EjectionPolicy;
pub use outcome::Outcome;
pub use select::Strategy;
