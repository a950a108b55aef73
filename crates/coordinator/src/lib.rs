//! The Lanes coordinator: owns the queue and the "first scored attempt wins" state.
//!
//! - [`store`]: the `Store` trait, its backends (embedded redb, Redis) and the transitions they
//!   share;
//! - [`run`]: the gRPC server (CampaignService, LaneService, health) with the reaper and the
//!   store watch that sends lane sessions away while the store is unreachable.

pub mod auth;
mod grpc_status;
mod reaper;
pub mod report;
mod server;
mod service;
pub mod store;
mod store_health;
mod wire;

pub use server::{CoordinatorConfig, ServeError, run};
pub use store_health::StoreWatch;
