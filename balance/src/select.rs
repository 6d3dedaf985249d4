//! Selection: which of the available instances gets the next call.
//!
//! Owns the two strategies as pure functions over a list of candidates and their outstanding
//! calls. Which instances are candidates (not ejected) and the counting itself are
//! [`crate::Balancer`]'s.

use rand::Rng;

/// How the next call's instance is chosen among the instances that are not ejected.
///
/// Both use the number of calls outstanding (sent, not yet finished) as the load: a call to
/// the gateway can wait seconds on a solve, so calls in flight are what an instance is busy
/// with, and latency averages would lag behind (balance/README.md, "Strategies").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// The instance with the fewest outstanding calls; ties go round-robin, so an idle fleet
    /// is used evenly rather than always its first instance. Looks at every instance (cost
    /// grows with the fleet) and, with many clients, they all pile onto the same momentarily
    /// idle instance. The best choice for one client over a small fleet: it is what NGINX's
    /// `least_conn` does.
    LeastOutstanding,
    /// Two distinct instances at random; the one with fewer outstanding calls wins (ties go to
    /// the first drawn, itself random). Constant cost, and many clients do not herd, since each
    /// sees a different pair; never sends to the busiest instance when there is only one.
    /// tower's `p2c` balancer, with outstanding calls as the load.
    PowerOfTwoChoices,
}

/// The position in `candidates` of a candidate with the fewest outstanding calls, scanning
/// from position `start` (wrapping), so that among equals the first one at or after `start`
/// wins. `None` when there are no candidates.
pub(crate) fn least_outstanding(
    candidates: &[usize],
    outstanding: impl Fn(usize) -> usize,
    start: usize,
) -> Option<usize> {
    let len = candidates.len();
    if len == 0 {
        return None;
    }
    let start = start % len;
    let mut best = (start, outstanding(candidates[start]));
    for step in 1..len {
        if best.1 == 0 {
            break; // nothing beats an idle instance
        }
        let position = (start + step) % len;
        let load = outstanding(candidates[position]);
        if load < best.1 {
            best = (position, load);
        }
    }
    Some(best.0)
}

/// The position in `candidates` of the less loaded of two distinct candidates drawn at random
/// (the only one when there is one; `None` when there are none).
pub(crate) fn power_of_two_choices(
    candidates: &[usize],
    outstanding: impl Fn(usize) -> usize,
    rng: &mut impl Rng,
) -> Option<usize> {
    match candidates.len() {
        0 => None,
        1 => Some(0),
        len => {
            let first = rng.random_range(0..len);
            // Draw from the other len - 1 positions: distinct without a retry loop.
            let mut second = rng.random_range(0..len - 1);
            if second >= first {
                second += 1;
            }
            let (a, b) = (
                outstanding(candidates[first]),
                outstanding(candidates[second]),
            );
            Some(if b < a { second } else { first })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn least_outstanding_picks_the_minimum_wherever_it_is() {
        let loads = [4, 2, 7, 1, 3];
        let candidates: Vec<usize> = (0..loads.len()).collect();
        for start in 0..10 {
            let picked = least_outstanding(&candidates, |i| loads[i], start);
            assert_eq!(picked, Some(3), "start {start}");
        }
    }

    #[test]
    fn least_outstanding_goes_round_robin_among_equals() {
        let loads = [1, 0, 5, 0, 0];
        let candidates: Vec<usize> = (0..loads.len()).collect();
        let picks: Vec<_> = (0..6)
            .map(|start| least_outstanding(&candidates, |i| loads[i], start).unwrap())
            .collect();
        // From start 0: first idle is 1; 1 -> 1; 2 -> 3; 3 -> 3; 4 -> 4; 5 (= 0) -> 1.
        assert_eq!(picks, [1, 1, 3, 3, 4, 1]);
    }

    #[test]
    fn least_outstanding_only_considers_candidates() {
        let loads = [0, 9, 0, 2];
        // Endpoints 0 and 2 are idle but not candidates (ejected).
        assert_eq!(least_outstanding(&[1, 3], |i| loads[i], 0), Some(1));
        assert_eq!(least_outstanding(&[], |i| loads[i], 0), None);
    }

    #[test]
    fn power_of_two_choices_with_two_always_takes_the_lighter() {
        let loads = [3, 1];
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..100 {
            assert_eq!(
                power_of_two_choices(&[0, 1], |i| loads[i], &mut rng),
                Some(1)
            );
        }
        assert_eq!(power_of_two_choices(&[1], |i| loads[i], &mut rng), Some(0));
        assert_eq!(power_of_two_choices(&[], |i| loads[i], &mut rng), None);
    }

    #[test]
    fn power_of_two_choices_never_takes_a_unique_busiest_and_spreads_over_the_rest() {
        let loads = [2, 2, 9, 2, 2];
        let candidates: Vec<usize> = (0..loads.len()).collect();
        let mut rng = SmallRng::seed_from_u64(42);
        let mut hits = [0u32; 5];
        for _ in 0..1000 {
            let position = power_of_two_choices(&candidates, |i| loads[i], &mut rng).unwrap();
            hits[candidates[position]] += 1;
        }
        assert_eq!(hits[2], 0);
        // 250 expected each; a seeded run far below that would mean a biased draw.
        for (i, &h) in hits.iter().enumerate() {
            assert!(i == 2 || h > 150, "{hits:?}");
        }
    }
}
