//! `lanes worker` end to end: real worker processes running the sim driver (`lanes driver
//! sim`), Python test drivers and the HTTP agent adapter against a real coordinator on a real
//! redis-server. Built by the `lanes` package so that it can run the `lanes` binary.

#![allow(unreachable_pub)]

mod adversary;
mod artifact_store;
mod containers;
mod crashes;
mod drain;
mod drivers;
mod http_agent;
mod policy;
mod retries;
mod scheduling;
mod shared_ids;
mod traces;
mod worker;
