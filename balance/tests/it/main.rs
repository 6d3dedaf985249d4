//! The balancer through its public API: one test binary, one module per concern.

mod ejection;
mod membership;
mod picking;
mod properties;

use std::time::{Duration, Instant};

use captcha_gateway_balance::{Balancer, EjectionPolicy, Outcome, Strategy};

const SEC: Duration = Duration::from_secs(1);

/// A seeded balancer with the default policy over `addresses`.
fn balancer(strategy: Strategy, addresses: &[&str]) -> Balancer {
    let mut balancer = Balancer::new(strategy, EjectionPolicy::default(), 0x5eed);
    for address in addresses {
        assert!(balancer.add(address));
    }
    balancer
}

/// Outstanding calls of the instance at `address`.
fn outstanding(balancer: &Balancer, address: &str, now: Instant) -> usize {
    balancer
        .status(address, now)
        .expect("known address")
        .outstanding
}

/// When the instance at `address` is let back, if it is ejected at `now`.
fn ejected_until(balancer: &Balancer, address: &str, now: Instant) -> Option<Instant> {
    balancer
        .status(address, now)
        .expect("known address")
        .ejected_until
}

/// Sends `times` calls at `now` that all end with `outcome` and returns where they went.
fn calls(balancer: &mut Balancer, times: usize, outcome: Outcome, now: Instant) -> Vec<String> {
    (0..times)
        .map(|_| {
            let ticket = balancer.pick(now).expect("an instance");
            let address = ticket.address().to_owned();
            balancer.finish(ticket, outcome, now);
            address
        })
        .collect()
}

/// Fails calls until the instance at `address` is ejected; calls that go elsewhere succeed.
fn eject(balancer: &mut Balancer, address: &str, now: Instant) {
    for _ in 0..1000 {
        if ejected_until(balancer, address, now).is_some() {
            return;
        }
        let ticket = balancer.pick(now).expect("an instance");
        let outcome = if ticket.address() == address {
            Outcome::ServerError
        } else {
            Outcome::Success
        };
        balancer.finish(ticket, outcome, now);
    }
    panic!("{address} was not ejected");
}
