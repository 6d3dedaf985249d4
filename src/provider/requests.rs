//! Requests an account sent to its provider, by endpoint and by how each ended (the result class
//! of docs/API.md "Metrics": `ok`, or the error class). Counted where the reply is read, so a
//! retried submit counts once per attempt.

use std::sync::atomic::{AtomicU64, Ordering};

use super::ErrorClass;

/// The provider endpoints an account calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Submit,
    Poll,
    Report,
    Balance,
}

impl Endpoint {
    pub const ALL: [Endpoint; 4] = [
        Endpoint::Submit,
        Endpoint::Poll,
        Endpoint::Report,
        Endpoint::Balance,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Submit => "submit",
            Endpoint::Poll => "poll",
            Endpoint::Report => "report",
            Endpoint::Balance => "balance",
        }
    }
}

/// The result labels, in the order of a row of [`RequestTable`].
pub const RESULTS: [&str; 5] = ["ok", "capacity", "transient", "permanent", "account"];

/// Requests by endpoint (rows, [`Endpoint::ALL`] order) and result (columns, [`RESULTS`] order).
pub type RequestTable = [[u64; 5]; 4];

fn column(result: Result<(), ErrorClass>) -> usize {
    match result {
        Ok(()) => 0,
        Err(ErrorClass::Capacity) => 1,
        Err(ErrorClass::Transient) => 2,
        Err(ErrorClass::Permanent) => 3,
        Err(ErrorClass::Account) => 4,
    }
}

/// The live counts behind a [`RequestTable`].
#[derive(Debug, Default)]
pub(crate) struct RequestCounts {
    cells: [[AtomicU64; 5]; 4],
}

impl RequestCounts {
    pub(crate) fn count(&self, endpoint: Endpoint, result: Result<(), ErrorClass>) {
        let row = Endpoint::ALL
            .iter()
            .position(|e| *e == endpoint)
            .unwrap_or(0);
        self.cells[row][column(result)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn table(&self) -> RequestTable {
        self.cells
            .each_ref()
            .map(|row| row.each_ref().map(|c| c.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reply_lands_in_its_endpoint_row_and_result_column() {
        let counts = RequestCounts::default();
        counts.count(Endpoint::Submit, Ok(()));
        counts.count(Endpoint::Submit, Err(ErrorClass::Capacity));
        counts.count(Endpoint::Submit, Err(ErrorClass::Capacity));
        counts.count(Endpoint::Poll, Err(ErrorClass::Transient));
        counts.count(Endpoint::Report, Err(ErrorClass::Permanent));
        counts.count(Endpoint::Balance, Err(ErrorClass::Account));
        let table = counts.table();
        assert_eq!(table[0], [1, 2, 0, 0, 0], "submit");
        assert_eq!(table[1], [0, 0, 1, 0, 0], "poll");
        assert_eq!(table[2], [0, 0, 0, 1, 0], "report");
        assert_eq!(table[3], [0, 0, 0, 0, 1], "balance");
        assert_eq!(RESULTS[1], "capacity");
        assert_eq!(Endpoint::ALL[3].as_str(), "balance");
    }
}
