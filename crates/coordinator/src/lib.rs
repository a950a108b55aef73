//! The Lanes coordinator: owns the queue and the "first scored attempt wins" state.
//!
//! - [`store`]: the `Store` trait, its backends (embedded redb, Redis) and the transitions they
//!   share;
//! - [`run`]: the gRPC server (CampaignService, LaneService, health) with the reaper and the
//!   store watch that sends lane sessions away while the store is unreachable;
//! - [`InProcessCoordinator`]: one replica's lane sessions served over channels, for tests that
//!   run a worker in the same process.

pub mod auth;
mod grpc_status;
mod in_process;
mod reaper;
pub mod report;
mod server;
mod service;
pub mod store;
mod store_health;
mod wire;

pub use in_process::InProcessCoordinator;
pub use server::{CoordinatorConfig, ServeError, run};
pub use store_health::StoreWatch;
