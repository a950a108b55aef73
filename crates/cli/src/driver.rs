//! `lanes driver …`: the built-in drivers, which a lane runs as its child process.

use clap::Subcommand;

use crate::exit::Code;

#[derive(Subcommand)]
pub(crate) enum DriverCmd {
    /// The built-in deterministic sim driver, on stdio.
    Sim,
}

pub(crate) fn run(which: DriverCmd) -> anyhow::Result<Code> {
    match which {
        // No logging setup: stdout is the protocol, and stderr is saved with the attempt.
        DriverCmd::Sim => lanes_worker::sim::run_stdio()?,
    }
    Ok(Code::Ok)
}
