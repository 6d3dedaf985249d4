//! Instances coming and going while calls are out.

use std::time::Instant;

use captcha_gateway_balance::{Outcome, Strategy, Ticket};

use super::{balancer, calls, eject, ejected_until, outstanding};

#[test]
fn an_address_is_added_once_and_removed_once() {
    let mut b = balancer(Strategy::LeastOutstanding, &["a"]);
    assert!(!b.add("a"));
    assert_eq!(b.len(), 1);
    assert!(b.remove("a"));
    assert!(!b.remove("a"));
    assert!(b.is_empty());
}

#[test]
fn added_instances_get_calls_and_removed_ones_none() {
    let now = Instant::now();
    for strategy in [Strategy::LeastOutstanding, Strategy::PowerOfTwoChoices] {
        let mut b = balancer(strategy, &["a", "b"]);
        assert!(b.add("c"));
        assert!(
            calls(&mut b, 60, Outcome::Success, now)
                .iter()
                .any(|a| a == "c")
        );
        assert!(b.remove("a"));
        assert!(
            calls(&mut b, 60, Outcome::Success, now)
                .iter()
                .all(|a| a != "a")
        );
    }
}

#[test]
fn calls_out_to_a_removed_instance_finish_without_effect() {
    let now = Instant::now();
    let mut b = balancer(Strategy::LeastOutstanding, &["a", "b"]);
    let tickets: Vec<Ticket> = (0..6).map(|_| b.pick(now).unwrap()).collect();
    assert!(b.remove("a"));
    let mut dropped = false;
    for ticket in tickets {
        if ticket.address() == "a" && !dropped {
            dropped = true;
            drop(ticket);
        } else if ticket.address() == "a" {
            b.finish(ticket, Outcome::ServerError, now);
        } else {
            b.finish(ticket, Outcome::Success, now);
        }
    }
    assert_eq!(outstanding(&b, "b", now), 0);
    assert_eq!(b.status("b", now).unwrap().consecutive_failures, 0);
}

#[test]
fn an_instance_added_again_starts_idle_and_healthy() {
    let now = Instant::now();
    let mut b = balancer(Strategy::LeastOutstanding, &["a", "b"]);
    eject(&mut b, "a", now);
    assert!(b.remove("a"));
    assert!(b.add("a"));
    assert_eq!(ejected_until(&b, "a", now), None);

    // Three calls out to "a" (a, b, a, b, a, b), then it leaves and comes back.
    let old: Vec<Ticket> = (0..6).map(|_| b.pick(now).unwrap()).collect();
    assert_eq!(outstanding(&b, "a", now), 3);
    assert!(b.remove("a"));
    assert!(b.add("a"));
    assert_eq!(outstanding(&b, "a", now), 0);
    let fresh = b.pick(now).unwrap();
    assert_eq!(
        fresh.address(),
        "a",
        "the idle newcomer is the least loaded"
    );
    // The old calls end as failures: the new "a" neither counts them nor blames them.
    for ticket in old {
        b.finish(ticket, Outcome::ServerError, now);
    }
    assert_eq!(outstanding(&b, "a", now), 1);
    assert_eq!(b.status("a", now).unwrap().consecutive_failures, 0);
    assert_eq!(ejected_until(&b, "a", now), None);
    b.finish(fresh, Outcome::Success, now);
    assert!(b.endpoints(now).all(|e| e.outstanding == 0));
}
