//! The Lanes lane worker: runs claim → boot → reset → agent → evaluate → publish on a host.
//!
//! - [`driver`]: the driver protocol, its line codec and the driver child process;
//! - [`drivers`]: what this worker runs (its drivers file and what campaigns may bring);
//! - [`lifecycle`]: the attempt lifecycle, a pure state machine;
//! - [`outbox`]: outcomes on disk until the coordinator acknowledges them;
//! - [`http`]: the HTTP client of the task API adapter ([`http_agent`]) and the guest
//!   [`watchdog`];
//! - [`secrets`]: an attempt's secret values, masked in everything the lane writes;
//! - [`control`]: the control socket `lanes worker drain` talks to;
//! - [`worker`]: the supervisor and lane actors, and [`run`];
//! - [`sim`]: the built-in deterministic sim driver (`lanes driver sim`);
//! - [`container`]: the built-in container driver (`lanes driver container`).

pub mod driver {
    //! Drivers: long-lived child processes that speak JSON-RPC 2.0 over stdio.
    pub mod codec;
    pub mod process;
    pub mod protocol;
}
pub mod ack_log;
pub mod artifacts;
pub mod container;
pub mod control;
pub mod drivers;
pub mod http;
pub mod http_agent;
pub mod lease_journal;
pub mod lifecycle;
pub mod metrics;
pub mod outbox;
pub mod private_fs;
pub(crate) mod redact;
pub mod scrub_files;
pub mod secrets;
pub mod sim;
mod slots;
pub mod task_folders;
pub mod watchdog;
pub mod worker;

pub use drivers::{Drivers, DriversError, LocalDriver, load_drivers_file};
pub use worker::link::{CoordinatorLink, GrpcLink, LinkSession};
pub use worker::{WorkerConfig, WorkerError, run, run_with_link};
