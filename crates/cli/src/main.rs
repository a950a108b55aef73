//! The `lanes` command: parses arguments and wires the libraries together.

mod coordinator;
mod exit;
mod logging;
mod schedule;

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
    /// Dry run: print the pre-registered schedule of a campaign file.
    Schedule {
        /// The campaign file (TOML).
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = schedule::Format::Jsonl)]
        format: schedule::Format,
    },
    /// Serve the gRPC API (CampaignService, LaneService) over a Redis or embedded store.
    Coordinator(coordinator::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Schedule { file, format } => schedule::run(&file, format),
        Command::Coordinator(args) => coordinator::run(args),
    };
    match result {
        Ok(code) => code.into(),
        Err(e) => {
            eprintln!("lanes: {e:#}");
            exit::Code::Failure.into()
        }
    }
}
