//! Integration tests: one binary (CONVENTIONS.md), modules by capability. Every test starts
//! its own gateway and simulator on free loopback ports; nothing is shared between tests.

mod support;

mod bench;
mod burst;
mod cli;
mod clients;
mod compat_api;
mod contract;
mod fleet;
mod native_api;
mod pools;
mod redis_store;
mod upstream;
