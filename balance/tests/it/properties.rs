//! Random sequences of picks, finishes, drops, membership changes and passing time: the counts
//! stay exact, every pick obeys its strategy and the ejections, and nothing leaks at the end.

use std::collections::HashMap;
use std::time::{Duration, Instant};

// proptest's prelude has a `Strategy` of its own (the generators).
use captcha_gateway_balance::Strategy as Selection;
use captcha_gateway_balance::{Balancer, EjectionPolicy, Outcome, Ticket};
use proptest::prelude::*;

/// Few addresses, so adds, removes and re-adds of the same one happen often.
const ADDRESSES: [&str; 5] = ["a", "b", "c", "d", "e"];

#[derive(Clone, Debug)]
enum Op {
    Pick,
    /// A retry's pick, steering clear of one address.
    PickAvoiding(usize),
    /// A probe's outcome, recorded by address.
    Record(usize, Outcome),
    Finish(usize, Outcome),
    Drop(usize),
    Add(usize),
    Remove(usize),
    /// Milliseconds; ejections last 10 s and more, so some end within a sequence.
    Wait(u64),
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::Success),
        Just(Outcome::ConnectFailed),
        Just(Outcome::ServerError),
        Just(Outcome::Shed),
        Just(Outcome::FleetLimited),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Pick),
        2 => (0..ADDRESSES.len()).prop_map(Op::PickAvoiding),
        2 => (0..ADDRESSES.len(), outcome()).prop_map(|(i, o)| Op::Record(i, o)),
        4 => (any::<usize>(), outcome()).prop_map(|(i, o)| Op::Finish(i, o)),
        1 => any::<usize>().prop_map(Op::Drop),
        1 => (0..ADDRESSES.len()).prop_map(Op::Add),
        1 => (0..ADDRESSES.len()).prop_map(Op::Remove),
        1 => (0u64..15_000).prop_map(Op::Wait),
    ]
}

fn strategy() -> impl Strategy<Value = Selection> {
    prop_oneof![
        Just(Selection::LeastOutstanding),
        Just(Selection::PowerOfTwoChoices),
    ]
}

/// The test's own record: which tickets are out, and which incarnation of an address each
/// belongs to (an address removed and added again is a new instance).
struct Model {
    held: Vec<(Ticket, u64)>,
    incarnation: HashMap<&'static str, u64>,
    next_incarnation: u64,
}

impl Model {
    fn add(&mut self, address: &'static str) {
        self.next_incarnation += 1;
        self.incarnation.insert(address, self.next_incarnation);
    }

    /// Calls out to the current incarnation of `address`.
    fn out_to(&self, address: &str) -> usize {
        let Some(&current) = self.incarnation.get(address) else {
            return 0;
        };
        self.held
            .iter()
            .filter(|(t, i)| t.address() == address && *i == current)
            .count()
    }
}

/// Checks one pick against the state just before it; `avoid` is the address a retry's pick
/// steers clear of (chosen only when no other instance is available).
fn check_pick(balancer: &Balancer, ticket: &Ticket, now: Instant, avoid: Option<&str>) {
    let before: Vec<_> = balancer.endpoints(now).collect();
    let picked = before
        .iter()
        .find(|e| e.address == ticket.address())
        .expect("picked a known instance");
    // The counts in `before` already include this pick.
    let load = picked.outstanding - 1;
    let available: Vec<_> = before
        .iter()
        .filter(|e| e.ejected_until.is_none())
        .collect();
    if available.is_empty() {
        let soonest = before.iter().filter_map(|e| e.ejected_until).min();
        assert_eq!(
            picked.ejected_until, soonest,
            "fallback is the one back soonest"
        );
        return;
    }
    assert!(picked.ejected_until.is_none(), "picked an ejected instance");
    let not_avoided: Vec<_> = available
        .iter()
        .copied()
        .filter(|e| Some(e.address) != avoid)
        .collect();
    let available = if not_avoided.is_empty() {
        available
    } else {
        assert_ne!(Some(picked.address), avoid, "picked the avoided instance");
        not_avoided
    };
    let others: Vec<usize> = available
        .iter()
        .filter(|e| e.address != picked.address)
        .map(|e| e.outstanding)
        .collect();
    match balancer.strategy() {
        Selection::LeastOutstanding => {
            assert!(others.iter().all(|&o| o >= load), "{load} vs {others:?}");
        }
        Selection::PowerOfTwoChoices => {
            if !others.is_empty() {
                assert!(others.iter().any(|&o| o >= load), "{load} vs {others:?}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn counts_stay_exact_and_picks_obey_strategy_and_ejections(
        strategy in strategy(),
        seed in any::<u64>(),
        initial in 0..=ADDRESSES.len(),
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let mut now = Instant::now();
        let mut balancer = Balancer::new(strategy, EjectionPolicy::default(), seed);
        let mut model = Model { held: Vec::new(), incarnation: HashMap::new(), next_incarnation: 0 };
        for &address in &ADDRESSES[..initial] {
            prop_assert!(balancer.add(address));
            model.add(address);
        }
        for op in ops {
            match op {
                Op::Pick | Op::PickAvoiding(_) => {
                    let avoid = match op {
                        Op::PickAvoiding(i) => Some(ADDRESSES[i]),
                        _ => None,
                    };
                    let ticket = match avoid {
                        Some(a) => balancer.pick_avoiding(now, |x| x == a),
                        None => balancer.pick(now),
                    };
                    match ticket {
                    Some(ticket) => {
                        check_pick(&balancer, &ticket, now, avoid);
                        let address = ticket.address().to_owned();
                        let incarnation = model.incarnation[address.as_str()];
                        model.held.push((ticket, incarnation));
                    }
                    None => prop_assert!(balancer.is_empty()),
                    }
                }
                Op::Record(i, outcome) => {
                    let known = model.incarnation.contains_key(ADDRESSES[i]);
                    let ejected = balancer.record(ADDRESSES[i], outcome, now, now);
                    prop_assert!(known || !ejected, "an unknown address was ejected");
                    if ejected {
                        let status = balancer.status(ADDRESSES[i], now).unwrap();
                        prop_assert!(status.ejected_until.is_some());
                    }
                }
                Op::Finish(i, outcome) if !model.held.is_empty() => {
                    let (ticket, _) = model.held.swap_remove(i % model.held.len());
                    balancer.finish(ticket, outcome, now);
                }
                Op::Drop(i) if !model.held.is_empty() => {
                    drop(model.held.swap_remove(i % model.held.len()));
                }
                Op::Finish(..) | Op::Drop(_) => {}
                Op::Add(i) => {
                    let known = model.incarnation.contains_key(ADDRESSES[i]);
                    prop_assert_eq!(balancer.add(ADDRESSES[i]), !known);
                    if !known {
                        model.add(ADDRESSES[i]);
                    }
                }
                Op::Remove(i) => {
                    let known = model.incarnation.remove(ADDRESSES[i]).is_some();
                    prop_assert_eq!(balancer.remove(ADDRESSES[i]), known);
                }
                Op::Wait(ms) => now += Duration::from_millis(ms),
            }
            prop_assert_eq!(balancer.len(), model.incarnation.len());
            for endpoint in balancer.endpoints(now) {
                prop_assert_eq!(endpoint.outstanding, model.out_to(endpoint.address));
            }
        }
        // Every ticket ends, half finished, half dropped: nothing stays counted.
        for (n, (ticket, _)) in model.held.drain(..).enumerate() {
            if n % 2 == 0 {
                balancer.finish(ticket, Outcome::Success, now);
            } else {
                drop(ticket);
            }
        }
        for endpoint in balancer.endpoints(now) {
            prop_assert_eq!(endpoint.outstanding, 0, "{}", endpoint.address);
        }
    }
}
