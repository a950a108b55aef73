//! Free text on its way into a row: the attempt's secret values replaced by `***`, and text
//! quoted from a remote party (a task API's error body, say) cut to a bound.

/// Replaces every occurrence of each secret in `text` with `***`.
pub(crate) fn scrub(text: &mut String, secrets: &[String]) {
    for s in secrets {
        if !s.is_empty() && text.contains(s.as_str()) {
            *text = text.replace(s.as_str(), "***");
        }
    }
}

/// `text` scrubbed of `secrets`, then cut to at most `max` bytes (on a char boundary, with
/// `…` marking the cut). Scrubbing comes first: a cut through a secret would leave a prefix
/// of it that no longer matches.
pub(crate) fn quote(text: &str, secrets: &[String], max: usize) -> String {
    let mut text = text.to_owned();
    scrub(&mut text, secrets);
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
        let secrets = ["hunter22".to_owned()];
        // The cut falls inside the secret: scrubbing first leaves no prefix of it.
        let q = quote("xxxxhunter22yyyy", &secrets, 10);
        assert!(!q.contains("hunt"), "{q}");
        assert!(q.len() <= 10, "{q}");
        assert_eq!(quote("short", &secrets, 10), "short");
    }

    #[test]
    fn cuts_respect_char_boundaries() {
        let q = quote(&"é".repeat(100), &[], 11);
        assert!(q.len() <= 11 && q.ends_with('…'), "{q}");
        assert_eq!(quote("abc", &[], 0), "");
    }
}
