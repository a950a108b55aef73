//! Text quoted from a remote party (a task API's error body, say) on its way into a row:
//! the attempt's secret values masked, then cut to a bound.

use crate::secrets::Secrets;

/// `text` scrubbed of `secrets`, then cut to at most `max` bytes (on a char boundary, with
/// `…` marking the cut). Scrubbing comes first: a cut through a secret would leave a prefix
/// of it that no longer matches.
pub(crate) fn quote(text: &str, secrets: &Secrets, max: usize) -> String {
    let mut text = secrets.scrubbed(text);
    if text.len() > max {
        let mark = if max >= 2 * '…'.len_utf8() {
            "…"
        } else {
            ""
        };
        let mut end = max - mark.len();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(mark);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_scrubbed_before_they_are_cut() {
        let secrets = Secrets::new(["hunter22".to_owned()]);
        // The cut falls inside the secret: scrubbing first leaves no prefix of it.
        let q = quote("xxxxhunter22yyyy", &secrets, 10);
        assert!(!q.contains("hunt"), "{q}");
        assert!(q.len() <= 10, "{q}");
        assert_eq!(quote("short", &secrets, 10), "short");
    }

    #[test]
    fn cuts_respect_char_boundaries() {
        let q = quote(&"é".repeat(100), &Secrets::default(), 11);
        assert!(q.len() <= 11 && q.ends_with('…'), "{q}");
        assert_eq!(quote("abc", &Secrets::default(), 0), "");
    }
}
