//! Where calls go while every instance is healthy.

use std::collections::HashMap;
use std::time::Instant;

use captcha_gateway_balance::{Outcome, Strategy, Ticket};

use super::{balancer, calls};

#[test]
fn an_empty_balancer_picks_nothing() {
    for strategy in [Strategy::LeastOutstanding, Strategy::PowerOfTwoChoices] {
        let mut b = balancer(strategy, &[]);
        assert!(b.pick(Instant::now()).is_none());
        assert!(b.is_empty());
    }
}

#[test]
fn least_outstanding_always_picks_an_instance_with_the_fewest_calls_out() {
    let now = Instant::now();
    let mut b = balancer(Strategy::LeastOutstanding, &["a", "b", "c", "d"]);
    let mut held: Vec<Ticket> = Vec::new();
    for step in 0..200usize {
        let fewest = b.endpoints(now).map(|e| e.outstanding).min().unwrap();
        let ticket = b.pick(now).unwrap();
        let before = b.status(ticket.address(), now).unwrap().outstanding - 1;
        assert_eq!(before, fewest, "step {step}");
        held.push(ticket);
        // Finish an irregular selection of the calls out, so the loads become uneven.
        if step % 3 == 0 {
            let index = (step * 7) % held.len();
            b.finish(held.swap_remove(index), Outcome::Success, now);
        }
    }
}

#[test]
fn least_outstanding_uses_an_idle_fleet_in_turn() {
    let now = Instant::now();
    let mut b = balancer(Strategy::LeastOutstanding, &["a", "b", "c"]);
    // Every call finishes before the next: all idle every time, so only the tie-break decides.
    let sent = calls(&mut b, 9, Outcome::Success, now);
    assert_eq!(sent, ["a", "b", "c", "a", "b", "c", "a", "b", "c"]);
}

#[test]
fn power_of_two_choices_never_picks_the_busiest_when_it_is_the_only_busiest() {
    let now = Instant::now();
    let mut b = balancer(Strategy::PowerOfTwoChoices, &["a", "b", "c"]);
    let mut held = Vec::new();
    for step in 0..300 {
        let loads: Vec<usize> = b.endpoints(now).map(|e| e.outstanding).collect();
        let ticket = b.pick(now).unwrap();
        let before = b.status(ticket.address(), now).unwrap().outstanding - 1;
        let others_at_least_as_busy = loads.iter().filter(|&&l| l >= before).count();
        // `loads` counts the pick itself once; another instance must be at least as busy.
        assert!(
            others_at_least_as_busy >= 2,
            "step {step}: {before} of {loads:?}"
        );
        held.push(ticket);
    }
}

#[test]
fn power_of_two_choices_sends_calls_to_every_instance() {
    for size in [2usize, 3, 16, 128] {
        let now = Instant::now();
        let names: Vec<String> = (0..size).map(|i| format!("10.0.0.{i}:8080")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut b = balancer(Strategy::PowerOfTwoChoices, &refs);
        let mut hits: HashMap<String, usize> = HashMap::new();
        for address in calls(&mut b, size * 50, Outcome::Success, now) {
            *hits.entry(address).or_default() += 1;
        }
        // All idle: each pair's first draw wins, uniform over the fleet (50 expected each).
        assert_eq!(hits.len(), size, "size {size}: {hits:?}");
        assert!(hits.values().all(|&h| h >= 15), "size {size}: {hits:?}");
    }
}

#[test]
fn a_dropped_ticket_returns_its_call_like_a_finished_one() {
    let now = Instant::now();
    for strategy in [Strategy::LeastOutstanding, Strategy::PowerOfTwoChoices] {
        let mut b = balancer(strategy, &["a", "b"]);
        let tickets: Vec<Ticket> = (0..10).map(|_| b.pick(now).unwrap()).collect();
        assert_eq!(b.endpoints(now).map(|e| e.outstanding).sum::<usize>(), 10);
        drop(tickets);
        assert!(b.endpoints(now).all(|e| e.outstanding == 0));
        // Dropping reports nothing: no failure streak.
        assert!(b.endpoints(now).all(|e| e.consecutive_failures == 0));
    }
}

#[test]
fn pick_avoiding_skips_the_avoided_unless_nothing_else_is_available() {
    let now = Instant::now();
    for strategy in [Strategy::LeastOutstanding, Strategy::PowerOfTwoChoices] {
        let mut b = balancer(strategy, &["a", "b", "c"]);
        // "a" is idle and the others are busy: a plain pick would take it.
        let busy: Vec<Ticket> = (0..4)
            .map(|_| b.pick_avoiding(now, |a| a == "a").unwrap())
            .collect();
        assert!(busy.iter().all(|t| t.address() != "a"));
        for _ in 0..20 {
            let ticket = b.pick_avoiding(now, |a| a == "a").unwrap();
            assert_ne!(ticket.address(), "a", "{strategy:?}");
            b.finish(ticket, Outcome::Success, now);
        }
        // Everything avoided: a plain pick, which takes the idle one.
        let ticket = b.pick_avoiding(now, |_| true).unwrap();
        assert_eq!(ticket.address(), "a", "{strategy:?}");
    }
}
