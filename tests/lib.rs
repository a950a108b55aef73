//! Harnesses for the end-to-end and fault-injection suites: real servers and processes, given
//! back as handles that clean up on drop.

#![allow(unreachable_pub)]

#[path = "../crates/coordinator/tests/support/redis_server.rs"]
pub mod redis_server;

pub mod coordinator;
pub mod counting_store;
pub mod history;
pub mod lane_client;
pub mod synthetic_ledger;
