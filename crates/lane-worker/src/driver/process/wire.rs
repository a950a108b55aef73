//! The child's stdin and stdout: request and notification lines go out in order; lines come
//! in bounded in size, are decoded by the codec, and each response goes to the call awaiting
//! its id. Anything a driver may not send kills it.

use std::io;
use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::mpsc;

use super::state::{Shared, lock};
use crate::driver::codec::{self, Incoming};
use crate::driver::protocol::{LogParams, MAX_LINE_BYTES, ProgressParams, method};

/// A notification from the driver that the lane cares about.
#[derive(Debug, Clone, PartialEq)]
pub enum Notification {
    Progress(ProgressParams),
    Log(LogParams),
}

/// The writer task: sends each line, in order, until every sender is gone.
pub(super) async fn write_stdin(mut stdin: ChildStdin, mut lines: mpsc::UnboundedReceiver<String>) {
    while let Some(line) = lines.recv().await {
        let written = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await
        };
        if let Err(e) = written.await {
            tracing::debug!("cannot write to the driver's stdin: {e}");
            return;
        }
    }
    // Every sender is gone: dropping stdin closes it, which tells the child to finish.
}

/// One line read by [`read_line`].
enum Line {
    /// The line is in the buffer, without its newline.
    Complete,
    /// The line grew past the limit (the buffer holds what was read of it).
    TooLong,
    Eof,
}

/// Reads one line into `buf` without ever holding more than `limit` bytes (plus one read).
/// A last line without a newline counts as a line.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> io::Result<Line> {
    buf.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if buf.is_empty() {
                Line::Eof
            } else {
                Line::Complete
            });
        }
        let (used, done) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => {
                buf.extend_from_slice(&available[..at]);
                (at + 1, true)
            }
            None => {
                buf.extend_from_slice(available);
                (available.len(), false)
            }
        };
        reader.consume(used);
        if buf.strip_suffix(b"\r").unwrap_or(buf).len() > limit {
            return Ok(Line::TooLong);
        }
        if done {
            return Ok(Line::Complete);
        }
    }
}

/// The reader task: decodes each line of the child's stdout and routes it; returns at EOF
/// or after a protocol error (which marks the process dead and has the child killed).
pub(super) async fn read_stdout(
    shared: Arc<Shared>,
    stdout: ChildStdout,
    notes: mpsc::UnboundedSender<Notification>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line = Vec::new();
    loop {
        match read_line(&mut reader, &mut line, MAX_LINE_BYTES).await {
            Ok(Line::Complete) => {}
            Ok(Line::TooLong) => {
                return shared.protocol_error(format!(
                    "bad line: line too long: more than {MAX_LINE_BYTES} bytes"
                ));
            }
            Ok(Line::Eof) => return,
            Err(e) => {
                tracing::debug!(driver = %shared.program, "cannot read the driver's stdout: {e}");
                return;
            }
        }
        // Blank lines carry nothing; tolerate them.
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let message = match codec::decode(&line) {
            Ok(message) => message,
            Err(e) => return shared.protocol_error(format!("bad line: {e}")),
        };
        match message {
            Incoming::Response { id, result } => {
                let tx = lock(&shared.state).pending.remove(&id);
                match tx {
                    // The caller may have given up (dropped its future); that is fine.
                    Some(tx) => {
                        let _ = tx.send(Ok(result));
                    }
                    None if shared.dead().is_some() => return,
                    None => {
                        return shared.protocol_error(format!("answer to unknown id {id}"));
                    }
                }
            }
            Incoming::Notification { method, params } => {
                notification(&shared, &notes, &method, params)
            }
            Incoming::Request { id, method } => {
                return shared.protocol_error(format!(
                    "request from the driver (`{method}`, id {id}); drivers may only answer and notify"
                ));
            }
        }
    }
}

fn notification(
    shared: &Shared,
    notes: &mpsc::UnboundedSender<Notification>,
    method: &str,
    params: Value,
) {
    // Everything the driver says is scrubbed before anyone logs or keeps it.
    let note = match method {
        method::PROGRESS => serde_json::from_value(params).map(|mut p: ProgressParams| {
            p.tag = shared.scrubbed(&p.tag);
            p.message = p.message.map(|m| shared.scrubbed(&m));
            Notification::Progress(p)
        }),
        method::LOG => serde_json::from_value(params).map(|mut log: LogParams| {
            log.level = shared.scrubbed(&log.level);
            log.message = shared.scrubbed(&log.message);
            tracing::debug!(driver = %shared.program, level = %log.level, "driver log: {}", log.message);
            Notification::Log(log)
        }),
        _ => {
            tracing::debug!(driver = %shared.program, "ignoring unknown driver notification");
            return;
        }
    };
    match note {
        // Nobody listening is fine.
        Ok(note) => {
            let _ = notes.send(note);
        }
        Err(e) => {
            tracing::debug!(driver = %shared.program, method, "ignoring malformed driver notification: {}", shared.scrubbed(&e.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn read_line_bounds_memory() {
        let input: &[u8] = b"short\n\nlast";
        let mut reader = BufReader::new(input);
        let mut buf = Vec::new();
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Line::Complete
        ));
        assert_eq!(buf, b"short");
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Line::Complete
        ));
        assert_eq!(buf, b"");
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Line::Complete
        ));
        assert_eq!(buf, b"last");
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Line::Eof
        ));

        let input: &[u8] = b"0123456789\r\n0123456789a\n";
        let mut reader = BufReader::with_capacity(4, input);
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Line::Complete
        ));
        assert_eq!(buf, b"0123456789\r");
        let got = read_line(&mut reader, &mut buf, 10).await.unwrap();
        assert!(matches!(got, Line::TooLong));
        assert!(buf.len() <= 12, "stops early");
    }
}
