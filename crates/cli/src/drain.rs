//! `lanes worker drain`: asks the worker on this host, through its control socket, to take no
//! new work, and waits until it has nothing in flight and nothing unacknowledged.

use std::path::PathBuf;
use std::time::Duration;

use crate::exit::Code;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The worker's control socket [default: <artifacts>/.control.sock].
    #[arg(long, env = "LANES_CONTROL_SOCKET")]
    control_socket: Option<PathBuf>,
    /// The worker's artifacts directory, to find its control socket.
    #[arg(long, env = "LANES_ARTIFACTS", default_value = "artifacts")]
    artifacts: PathBuf,
    /// Give up after this many seconds (exit 1), with what was still in flight
    /// [default: wait until drained].
    #[arg(long)]
    timeout_s: Option<u64>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<Code> {
    let path = args
        .control_socket
        .unwrap_or_else(|| args.artifacts.join(lanes_worker::control::DEFAULT_NAME));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut last = None;
    let drained = lanes_worker::control::drain(&path, |in_flight, unacknowledged| {
        eprintln!(
            "lanes: draining: {in_flight} attempt(s) in flight, {unacknowledged} outcome(s) \
             not yet acknowledged"
        );
        last = Some((in_flight, unacknowledged));
    });
    let outcome = rt.block_on(async {
        match args.timeout_s {
            Some(s) => tokio::time::timeout(Duration::from_secs(s), drained)
                .await
                .ok(),
            None => Some(drained.await),
        }
    });
    match outcome {
        Some(Ok(())) => {
            eprintln!("lanes: drained: nothing in flight, every outcome acknowledged");
            Ok(Code::Ok)
        }
        Some(Err(e)) => {
            eprintln!("lanes: {e}");
            Ok(Code::Failure)
        }
        None => {
            let (in_flight, unacknowledged) = last.unwrap_or_default();
            eprintln!(
                "lanes: not drained after {} s: {in_flight} attempt(s) in flight, \
                 {unacknowledged} outcome(s) not yet acknowledged; the worker takes no new work",
                args.timeout_s.unwrap_or_default()
            );
            Ok(Code::Failure)
        }
    }
}
