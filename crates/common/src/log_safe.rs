//! Text from the network, made safe to log: control characters (newlines, escape sequences,
//! NUL, ...) are written escaped, so a worker id or host name cannot forge log lines or drive
//! a terminal.

use std::borrow::Cow;
use std::fmt;

/// `text` with every control character escaped (`\n`, `\u{1b}`, ...); borrowed when there is
/// none.
pub fn escape_for_log(text: &str) -> Cow<'_, str> {
    if text.chars().any(char::is_control) {
        Cow::Owned(LogSafe(text).to_string())
    } else {
        Cow::Borrowed(text)
    }
}

/// Displays a string with its control characters escaped: `tracing::info!(worker = %LogSafe(id))`.
#[derive(Debug, Clone, Copy)]
pub struct LogSafe<'a>(pub &'a str);

impl fmt::Display for LogSafe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write as _;
        for c in self.0.chars() {
            if c.is_control() {
                for e in c.escape_default() {
                    f.write_char(e)?;
                }
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        let forged = "w1\nINFO worker registered worker=admin\r\u{1b}[2J\0\u{7f}\u{85}";
        let shown = escape_for_log(forged);
        assert_eq!(
            shown,
            "w1\\nINFO worker registered worker=admin\\r\\u{1b}[2J\\u{0}\\u{7f}\\u{85}"
        );
        assert!(!shown.chars().any(char::is_control));
        assert_eq!(LogSafe(forged).to_string(), shown);
        // Ordinary text, including non-ASCII, is untouched and not copied.
        assert!(matches!(
            escape_for_log("hôte-1 \"x\""),
            Cow::Borrowed("hôte-1 \"x\"")
        ));
    }
}
