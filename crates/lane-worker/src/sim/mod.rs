//! The built-in sim driver (`lanes driver sim`): a JSON-RPC 2.0 server on stdin/stdout, one
//! object per line, that plays boot, reset, agent and evaluator with configurable durations,
//! pass rates and faults, so a campaign can be rehearsed end to end without a real harness.
//!
//! # Determinism
//! Every random draw of an attempt comes from one splitmix64 stream seeded from the call's
//! `(seed, arm, attempt)` and nothing else, so the same attempt gives the same outcome in any
//! process, and a retry (`attempt + 1`) draws afresh instead of repeating its fault. The seed is
//! (`attempt_seed`):
//!
//! ```text
//! s = mix(seed ^ 0x6c61_6e65_732d_7369)      // "lanes-si"
//! s = mix(s ^ fnv1a64(arm as UTF-8 bytes))
//! s = mix(s ^ attempt as u64)
//! ```
//!
//! where `mix` is the splitmix64 finalizer and `fnv1a64` is 64-bit FNV-1a. The stream is then
//! drawn in a fixed order (`Plan::draw`): fault, agent duration, turns, cost, pass. Which
//! calls the lane makes never changes what an attempt draws.
//!
//! # Faults
//! One uniform draw per attempt picks at most one fault, walking `faults` in its key order and
//! accumulating probabilities. The fault shows up in the call it belongs to: `boot_failed` in
//! `boot`, `reset_unverified` in `reset`, `evaluator_error` in `evaluate`, and everything else
//! during `run_agent`. Kinds the spec loader rejects (`preflight`, `identity_mismatch`,
//! `lease_expired`, non-scored statuses) are ignored here.

mod agent;
mod plan;
mod server;
#[cfg(test)]
mod tests;

use std::io::{self, BufRead, Write};
use std::sync::Arc;

use server::serve_with;

/// The name the sim driver reports in `initialize`.
pub const DRIVER_NAME: &str = "lanes-sim";
/// The exit code of an injected `driver_crash` or `exit`.
pub const CRASH_EXIT_CODE: i32 = 3;
/// The line an injected `garbage` fault prints to stdout.
pub const GARBAGE_LINE: &str = "lanes-sim: injected garbage {not json-rpc";

/// Serve the sim driver on this process's stdin/stdout until EOF or `shutdown`. An injected
/// `driver_crash` or `exit` ends the process with [`CRASH_EXIT_CODE`].
pub fn run_stdio() -> io::Result<()> {
    serve(io::stdin().lock(), io::stdout())
}

/// Serve the sim driver on `input`/`output` until EOF or `shutdown`. An injected
/// `driver_crash` or `exit` ends the process with [`CRASH_EXIT_CODE`].
pub fn serve(input: impl BufRead, output: impl Write + Send + 'static) -> io::Result<()> {
    serve_with(
        input,
        output,
        Arc::new(|code| {
            let _ = io::stdout().flush();
            std::process::exit(code)
        }),
    )
}
