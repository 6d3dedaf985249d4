//! Label values a provider or a caller chooses (error codes, compatible outcomes) kept to a fixed
//! number of series: the first values seen keep their own series, later new ones share `other`.
//! Real providers send a few dozen codes; a broken or hostile one must not grow `/metrics` for a
//! week.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// Distinct values a label keeps before new ones are counted as `other`.
pub const MAX_VALUES: usize = 64;

#[derive(Debug, Default)]
pub struct BoundedValues {
    seen: Mutex<HashSet<String>>,
}

impl BoundedValues {
    /// `value` itself when it already has a series or there is room for one, else `other`.
    pub fn label(&self, value: &str) -> String {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(value) {
            return value.to_owned();
        }
        if seen.len() < MAX_VALUES {
            seen.insert(value.to_owned());
            return value.to_owned();
        }
        "other".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_new_values_share_other_and_known_ones_keep_theirs() {
        let b = BoundedValues::default();
        for i in 0..MAX_VALUES {
            assert_eq!(b.label(&format!("ERROR_{i}")), format!("ERROR_{i}"));
        }
        assert_eq!(b.label("ERROR_NEW"), "other");
        assert_eq!(b.label("ERROR_3"), "ERROR_3");
    }
}
