//! Harnesses for the end-to-end and fault-injection suites: real servers and processes, given
//! back as handles that clean up on drop.

#![allow(unreachable_pub)]

pub mod campaign_watch;
pub mod certs;
pub mod coordinator;
pub mod counting_store;
pub mod fleet;
pub mod history;
pub mod lane_client;
pub mod podman;
pub mod python_driver;
pub mod redis_dump;
pub mod redis_sentinel;
pub mod redis_server;
pub mod s3_server;
pub mod synthetic_ledger;
pub mod worker_campaigns;
