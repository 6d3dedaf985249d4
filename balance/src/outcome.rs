//! How a call to one gateway instance ended, as far as that instance's health is concerned.
//!
//! Owns the classification only: which answers are the instance's fault. Mapping an HTTP
//! response or a transport error onto an [`Outcome`] is the caller's job (the HTTP client that
//! will wrap this crate); what a failure leads to is [`crate::health`]'s.

/// How a call ended. Only the instance's own failures count towards ejecting it.
///
/// The gateway answers 503 + `Retry-After` when *this* instance is locally full, and 429 when a
/// *fleet-wide* cap is exhausted (docs/API.md, "Tenants: limits and usage"; balance/README.md,
/// "Ejection"). The first is a reason to send the next call elsewhere; the second is not, because
/// every instance shares that cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The instance answered the call: a 2xx, or a 4xx about the request itself (bad input,
    /// wrong key). Either way the instance works, so this clears its failure streak.
    Success,
    /// No connection could be made (refused, reset before an answer, DNS or TLS failure): the
    /// instance is down or unreachable from here.
    ConnectFailed,
    /// A 5xx other than 503: the instance failed while handling the call.
    ServerError,
    /// A 503 shed: the instance is locally full. Moving calls away from it for a while is
    /// exactly what shedding asks for, so it counts like any other failure.
    Shed,
    /// A 429: the fleet-wide cap is exhausted. Not this instance's fault (every instance would
    /// answer the same), so it neither counts as a failure nor clears a failure streak: it
    /// says nothing about this instance's health. Ejecting on it would empty the fleet one
    /// instance at a time during a fleet-wide limit.
    FleetLimited,
}

impl Outcome {
    /// Whether this outcome counts towards ejecting the instance.
    pub fn is_instance_failure(self) -> bool {
        matches!(self, Self::ConnectFailed | Self::ServerError | Self::Shed)
    }

    /// Whether this outcome is evidence the instance works (and so ends a failure streak).
    pub fn is_instance_success(self) -> bool {
        matches!(self, Self::Success)
    }
}

#[cfg(test)]
mod tests {
    use super::Outcome;

    #[test]
    fn only_the_instances_own_failures_count_and_429_is_neutral() {
        let failures = [Outcome::ConnectFailed, Outcome::ServerError, Outcome::Shed];
        for outcome in failures {
            assert!(outcome.is_instance_failure(), "{outcome:?}");
            assert!(!outcome.is_instance_success(), "{outcome:?}");
        }
        assert!(Outcome::Success.is_instance_success());
        assert!(!Outcome::Success.is_instance_failure());
        assert!(!Outcome::FleetLimited.is_instance_failure());
        assert!(!Outcome::FleetLimited.is_instance_success());
    }
}
