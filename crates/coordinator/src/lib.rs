//! The Lanes coordinator: owns the queue and the "first scored attempt wins" state.
//!
//! - [`store`]: the `Store` trait, its backends (embedded redb, Redis) and the transitions they
//!   share;
//! - [`run`]: the gRPC server (CampaignService, LaneService, health) with the reaper.

pub mod auth;
mod grpc_status;
mod reaper;
pub mod report;
mod server;
mod service;
pub mod store;
mod wire;

pub use server::{CoordinatorConfig, ServeError, run};
