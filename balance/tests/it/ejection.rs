//! Ejecting failing instances, letting them back, and the all-ejected fallback.

use std::time::Instant;

use captcha_gateway_balance::{Outcome, Strategy};

use super::{SEC, balancer, calls, eject, ejected_until, outstanding};

#[test]
fn three_failures_in_a_row_eject_for_ten_seconds_then_it_is_let_back() {
    let t0 = Instant::now();
    for strategy in [Strategy::LeastOutstanding, Strategy::PowerOfTwoChoices] {
        let mut b = balancer(strategy, &["a", "b"]);
        let mut failures = 0;
        while failures < 3 {
            let ticket = b.pick(t0).unwrap();
            if ticket.address() == "a" {
                assert_eq!(
                    ejected_until(&b, "a", t0),
                    None,
                    "ejected before the third failure"
                );
                failures += 1;
                b.finish(ticket, Outcome::ConnectFailed, t0);
            } else {
                b.finish(ticket, Outcome::Success, t0);
            }
        }
        assert_eq!(ejected_until(&b, "a", t0), Some(t0 + 10 * SEC));
        let almost = t0 + 10 * SEC - SEC / 1000;
        assert!(
            calls(&mut b, 50, Outcome::Success, almost)
                .iter()
                .all(|a| a == "b")
        );
        let back = t0 + 10 * SEC;
        assert_eq!(ejected_until(&b, "a", back), None);
        assert!(
            calls(&mut b, 50, Outcome::Success, back)
                .iter()
                .any(|a| a == "a")
        );
    }
}

#[test]
fn every_failure_class_ejects_but_fleet_limited_never_does() {
    let t0 = Instant::now();
    for failure in [Outcome::ConnectFailed, Outcome::ServerError, Outcome::Shed] {
        let mut b = balancer(Strategy::LeastOutstanding, &["a"]);
        calls(&mut b, 3, failure, t0);
        assert!(ejected_until(&b, "a", t0).is_some(), "{failure:?}");
    }
    let mut b = balancer(Strategy::LeastOutstanding, &["a", "b"]);
    calls(&mut b, 100, Outcome::FleetLimited, t0);
    for e in b.endpoints(t0) {
        assert_eq!(e.ejected_until, None, "{}", e.address);
        assert_eq!(e.consecutive_failures, 0, "{}", e.address);
    }
}

#[test]
fn a_returning_instance_that_fails_again_is_ejected_at_once_for_twice_as_long() {
    let t0 = Instant::now();
    let mut b = balancer(Strategy::LeastOutstanding, &["a"]);
    calls(&mut b, 3, Outcome::ServerError, t0);
    let mut now = t0;
    for expected in [20, 40, 80, 160, 300, 300] {
        now = ejected_until(&b, "a", now).unwrap();
        calls(&mut b, 1, Outcome::ServerError, now);
        assert_eq!(ejected_until(&b, "a", now), Some(now + expected * SEC));
    }
}

#[test]
fn a_success_after_return_resets_the_back_off() {
    let t0 = Instant::now();
    let mut b = balancer(Strategy::LeastOutstanding, &["a"]);
    calls(&mut b, 3, Outcome::ServerError, t0);
    let back = ejected_until(&b, "a", t0).unwrap();
    calls(&mut b, 1, Outcome::ServerError, back);
    let back = ejected_until(&b, "a", back).unwrap();
    assert_eq!(back, t0 + 30 * SEC);
    calls(&mut b, 1, Outcome::Success, back);
    // A first ejection again: two failures are tolerated, the third ejects for ten seconds.
    calls(&mut b, 2, Outcome::ServerError, back);
    assert_eq!(ejected_until(&b, "a", back), None);
    calls(&mut b, 1, Outcome::ServerError, back);
    assert_eq!(ejected_until(&b, "a", back), Some(back + 10 * SEC));
}

#[test]
fn calls_in_flight_when_it_was_ejected_do_not_stretch_the_ejection() {
    let t0 = Instant::now();
    let mut b = balancer(Strategy::LeastOutstanding, &["a"]);
    let tickets: Vec<_> = (0..6).map(|_| b.pick(t0).unwrap()).collect();
    let mut tickets = tickets.into_iter();
    for ticket in tickets.by_ref().take(3) {
        b.finish(ticket, Outcome::ServerError, t0 + SEC);
    }
    let end = t0 + 11 * SEC;
    assert_eq!(ejected_until(&b, "a", t0 + SEC), Some(end));
    // The other three fail too, one during the ejection and two after it: all old news.
    let late = [t0 + 2 * SEC, end, end + SEC];
    for (ticket, at) in tickets.zip(late) {
        b.finish(ticket, Outcome::ServerError, at);
    }
    assert_eq!(ejected_until(&b, "a", end + SEC), None);
    assert_eq!(outstanding(&b, "a", end + SEC), 0);
}

#[test]
fn when_every_instance_is_ejected_the_one_back_soonest_still_gets_the_calls() {
    let t0 = Instant::now();
    for strategy in [Strategy::LeastOutstanding, Strategy::PowerOfTwoChoices] {
        let mut b = balancer(strategy, &["a", "b", "c"]);
        eject(&mut b, "a", t0);
        eject(&mut b, "c", t0 + SEC);
        eject(&mut b, "b", t0 + 2 * SEC);
        let now = t0 + 3 * SEC;
        assert!(b.endpoints(now).all(|e| e.ejected_until.is_some()));
        // "a" is back at t0 + 10 s, "c" at + 11 s, "b" at + 12 s.
        assert!(
            calls(&mut b, 10, Outcome::ServerError, now)
                .iter()
                .all(|a| a == "a")
        );
        // Failures of those fallback calls neither stretched nor doubled a's ejection.
        assert_eq!(ejected_until(&b, "a", now), Some(t0 + 10 * SEC));
        let ticket = b.pick(now).unwrap();
        assert_eq!(ticket.address(), "a");
        drop(ticket);
    }
}

#[test]
fn a_single_ejected_instance_is_still_picked() {
    let t0 = Instant::now();
    let mut b = balancer(Strategy::PowerOfTwoChoices, &["only"]);
    calls(&mut b, 3, Outcome::ConnectFailed, t0);
    assert!(ejected_until(&b, "only", t0).is_some());
    let ticket = b.pick(t0 + SEC).expect("the last instance, ejected or not");
    assert_eq!(ticket.address(), "only");
}

#[test]
fn probe_outcomes_recorded_by_address_eject_and_are_ignored_during_the_ejection() {
    let t0 = Instant::now();
    let mut b = balancer(Strategy::LeastOutstanding, &["a", "b"]);
    assert!(!b.record("a", Outcome::ConnectFailed, t0, t0));
    assert!(!b.record("a", Outcome::ConnectFailed, t0, t0));
    assert!(b.record("a", Outcome::ConnectFailed, t0, t0));
    assert_eq!(ejected_until(&b, "a", t0), Some(t0 + 10 * SEC));
    // A probe sent during the ejection tells nothing: the cool-down is not stretched.
    assert!(!b.record("a", Outcome::ConnectFailed, t0 + SEC, t0 + SEC));
    assert_eq!(ejected_until(&b, "a", t0 + SEC), Some(t0 + 10 * SEC));
    // Let back half-open: a failed probe after the cool-down ejects again at once, twice as long.
    let back = t0 + 10 * SEC;
    assert!(b.record("a", Outcome::ConnectFailed, back, back));
    assert_eq!(ejected_until(&b, "a", back), Some(back + 20 * SEC));
    assert!(!b.record("unknown", Outcome::ConnectFailed, t0, t0));
}
