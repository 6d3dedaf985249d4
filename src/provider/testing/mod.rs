//! Test doubles for this module: a scripted in-memory provider for virtual-time tests.

pub mod fake;
