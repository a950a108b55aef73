//! `lanes driver …`: the built-in drivers, which a lane runs as its child process.

use clap::Subcommand;

use crate::exit::Code;

#[derive(Subcommand)]
pub(crate) enum DriverCmd {
    /// The built-in deterministic sim driver, on stdio.
    Sim,
    /// The built-in container driver, on stdio: runs Harbor task folders in podman or docker
    /// containers (a worker started with `--container-runtime` runs it for container
    /// campaigns).
    Container {
        /// The runtime's CLI, on the PATH.
        #[arg(long, value_parser = ["podman", "docker"])]
        runtime: String,
        /// Image builds at once on this host, across every lane.
        #[arg(long, default_value_t = 2)]
        max_builds: usize,
        /// Where the lanes' drivers coordinate builds and remember failed ones.
        #[arg(long)]
        state_dir: std::path::PathBuf,
    },
}

pub(crate) fn run(which: DriverCmd) -> anyhow::Result<Code> {
    match which {
        // No logging setup: stdout is the protocol, and stderr is saved with the attempt.
        DriverCmd::Sim => lanes_worker::sim::run_stdio()?,
        DriverCmd::Container {
            runtime,
            max_builds,
            state_dir,
        } => lanes_worker::container::run_stdio(lanes_worker::container::Options {
            runtime,
            max_builds,
            state_dir,
            agent_env: std::env::var(lanes_worker::container::AGENT_ENV)
                .unwrap_or_default()
                .split(',')
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect(),
        })?,
    }
    Ok(Code::Ok)
}
