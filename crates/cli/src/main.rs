//! The `lanes` command: parses arguments and wires the libraries together.

mod archive;
mod artifact_store;
mod bench;
mod bundles;
mod client;
mod commands;
mod coordinator;
mod drain;
mod driver;
mod exit;
mod interrupt;
mod local_api;
mod metrics;
mod progress;
mod redis_args;
mod run;
mod schedule;
mod smoke;
mod store;
mod telemetry;
mod tls_args;
mod tokens;
mod ui;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "lanes",
    version,
    about = "A distributed lane scheduler for agent-benchmark campaigns"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a campaign on this machine: embedded store, local lanes, live progress, the report.
    Run(run::Args),
    /// Dry run: print the pre-registered schedule of a campaign file.
    Schedule {
        /// The campaign file (TOML).
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = schedule::Format::Jsonl)]
        format: schedule::Format,
    },
    #[command(flatten)]
    Client(commands::ClientCmd),
    /// Serve the gRPC API (CampaignService, LaneService) over a Redis or embedded store.
    Coordinator(coordinator::Args),
    /// Store maintenance: `lanes store migrate` upgrades a store's layout in place.
    Store {
        #[command(subcommand)]
        cmd: store::StoreCmd,
    },
    /// Run lanes on this host: claim, boot, reset, agent, evaluate, publish.
    Worker(worker::Cmd),
    /// Measure the scheduling path: a child coordinator, a bench campaign and simulated
    /// lanes over real lane sessions; prints throughput, latencies, the coordinator's CPU and
    /// memory, and the ratio to a ceiling measured on the same store.
    Bench(bench::Args),
    /// Run a built-in driver: what a lane starts as its child process.
    Driver {
        #[command(subcommand)]
        which: driver::DriverCmd,
    },
}

/// mimalloc instead of the system allocator: the coordinator's hot path allocates and frees
/// small values all the time (allocation was ~17 % of its samples under glibc's), and with it
/// `lanes bench` runs ~1.1× the attempts per second (`docs/PERFORMANCE.md`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    quiet_on_broken_pipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Client(cmd) => commands::run(cmd),
        Command::Schedule { file, format } => schedule::run(&file, format),
        Command::Coordinator(args) => coordinator::run(args),
        Command::Store { cmd } => store::run(cmd),
        Command::Worker(worker::Cmd {
            action: Some(worker::Action::Drain(args)),
            ..
        }) => drain::run(args),
        Command::Worker(cmd) => worker::run(cmd.args),
        Command::Bench(args) => bench::run(args),
        Command::Driver { which } => driver::run(which),
    };
    match result {
        Ok(code) => code.into(),
        Err(e) => {
            eprintln!("lanes: {e:#}");
            exit::Code::Failure.into()
        }
    }
}

/// `lanes results … | head`: once the reader has gone, the next write to stdout fails, and
/// `println!` panics on it. Rust ignores SIGPIPE, and restoring it needs `unsafe`, which the
/// workspace forbids; so that one panic ends the process quietly instead, with status 0: the
/// reader chose to stop reading, which is no failure of this command. Every other panic keeps
/// the default report.
fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}
