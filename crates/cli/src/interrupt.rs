//! SIGINT (Ctrl-C) and SIGTERM, caught once and kept: a signal that arrives while the command
//! is busy elsewhere (reading a status, say) is still there at its next wait.
//!
//! `tokio::signal::ctrl_c()` made anew at each wait misses such a signal: the handler the first
//! one installed keeps the default action from ending the process, and a listener only hears
//! signals sent after it was made, so the Ctrl-C was lost and `lanes run` went on to the end.

use anyhow::Context;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// The two signals, listened for from [`Interrupt::install`] on.
pub(crate) struct Interrupt {
    int: Signal,
    term: Signal,
}

impl Interrupt {
    pub(crate) fn install() -> anyhow::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt()).context("cannot catch SIGINT")?,
            term: signal(SignalKind::terminate()).context("cannot catch SIGTERM")?,
        })
    }

    /// Waits for either signal, or returns at once if one came since the last call.
    pub(crate) async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Ctrl-C sent while nobody waits for it, and dispatched by the runtime meanwhile (the
    /// command was reading a status), is heard at the next wait. A `tokio::signal::ctrl_c()`
    /// made at that point, as `lanes run` made one at each wait, times out instead.
    #[tokio::test]
    async fn a_signal_sent_between_waits_is_heard_at_the_next_one() {
        let mut interrupt = Interrupt::install().unwrap();
        let sent = std::process::Command::new("kill")
            .args(["-INT", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        // Busy elsewhere: the runtime runs, and its signal driver hands the signal out.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        tokio::time::timeout(std::time::Duration::from_secs(30), interrupt.recv())
            .await
            .expect("the signal sent before the wait");
    }
}
