//! The built-in container driver (`lanes driver container`): runs Harbor task folders in
//! podman or docker containers, through the CLI both share.
//!
//! - [`server`]: the protocol loop and what each call does;
//! - [`runtime`]: the runtime's CLI;
//! - [`image`]: a task's image, built once per host and cached by digest;
//! - [`agent`]: the agents an arm may name (`oracle`, `nop`, `command`);
//! - [`verifier`]: the reward files read into a score.

pub mod agent;
pub mod image;
pub mod runtime;
pub mod server;
pub mod verifier;

pub use server::{AGENT_ENV, DRIVER_NAME, Options};

/// Serves the container driver on this process's stdin and stdout.
pub fn run_stdio(opts: Options) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(server::serve(tokio::io::stdin(), tokio::io::stdout(), opts))
}
