//! The Lanes coordinator: owns the queue and the "first scored attempt wins" state.
//!
//! - [`store`]: the `Store` trait, its backends (embedded redb, Redis) and the transitions they
//!   share;
//! - [`scheduler`]: a lane's work request answered with one unit from the first campaign that
//!   has one, or the most telling reason why none has;
//! - [`run`]: the gRPC server (CampaignService, LaneService, health) with the reaper and the
//!   store watch that sends lane sessions away while the store is unreachable;
//! - the web dashboard (`--ui-listen`, [`DashboardConfig`]): pages, SVG charts and live
//!   updates over SSE, read through the same CampaignService calls;
//! - [`metrics`]: the Prometheus metrics a replica counts (the caller serves them);
//! - [`tls`]: the server's TLS, and mutual TLS binding a worker id to its certificate;
//! - [`InProcessCoordinator`]: one replica's lane sessions served over channels, for tests that
//!   run a worker in the same process.

pub mod auth;
pub mod campaign_list;
mod dashboard;
mod grpc_status;
pub mod health;
mod in_process;
mod login;
pub mod metrics;
mod reaper;
pub mod report;
pub mod scheduler;
mod server;
mod service;
pub mod store;
mod store_health;
pub mod tls;
mod wire;

pub use dashboard::DashboardConfig;
/// Entry points for the fuzz targets (`fuzz/`): the dashboard's path, query, form and header
/// handling, forwarded as it is. Not an API.
#[doc(hidden)]
pub use dashboard::fuzzing;
pub use in_process::InProcessCoordinator;
pub use server::{CoordinatorConfig, Listeners, ServeError, run, run_with_health, serve};
pub use store_health::StoreWatch;
