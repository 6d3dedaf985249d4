//! Integration tests: one binary (see CONVENTIONS.md).
