//! HTML by hand: escaping, the page frame, and the small formatters every page shares. Every
//! value from the store goes through [`esc`] before it reaches markup.

use std::fmt::Write as _;

/// Text made safe for HTML text and double-quoted attributes.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A path segment or query value, percent-encoded (ids are plain, but a query may not be).
pub(crate) fn url_part(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// What a page needs besides its body.
pub(crate) struct Frame<'a> {
    pub(crate) title: &'a str,
    /// Breadcrumbs after "Campaigns": (label, link).
    pub(crate) crumbs: &'a [(&'a str, Option<String>)],
    /// Load the live-update script (the page has an SSE source in `data-live`).
    pub(crate) live: bool,
    /// The CSRF token for the logout form; `None` hides it (bearer and open viewers).
    pub(crate) csrf: Option<&'a str>,
    /// The base of the page's relative links (the campaign page's grid cells link to
    /// `trials/<id>` under it, which keeps a big grid light).
    pub(crate) base: Option<&'a str>,
}

/// The whole page: head, header with breadcrumbs, then `body`.
pub(crate) fn page(frame: &Frame<'_>, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 2048);
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · Lanes</title><link rel=\"stylesheet\" href=\"/assets/dashboard.css\">\
         <link rel=\"icon\" href=\"/assets/icon.svg\">{}{}</head><body><header><nav aria-label=\"breadcrumbs\">\
         <a href=\"/\">Campaigns</a>",
        esc(frame.title),
        frame
            .base
            .map_or(String::new(), |b| format!("<base href=\"{}\">", esc(b))),
        if frame.live {
            "<script src=\"/assets/live.js\" defer></script>"
        } else {
            ""
        }
    );
    for (label, link) in frame.crumbs {
        match link {
            Some(href) => {
                let _ = write!(out, " / <a href=\"{}\">{}</a>", esc(href), esc(label));
            }
            None => {
                let _ = write!(out, " / <span>{}</span>", esc(label));
            }
        }
    }
    out.push_str("</nav>");
    if let Some(csrf) = frame.csrf {
        let _ = write!(
            out,
            "<form method=\"post\" action=\"/logout\" class=\"logout\"><input type=\"hidden\" \
             name=\"csrf\" value=\"{}\"><button>Log out</button></form>",
            esc(csrf)
        );
    }
    out.push_str("</header><main>");
    out.push_str(body);
    out.push_str("</main></body></html>");
    out
}

/// A fraction as a percentage with one decimal.
pub(crate) fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// US dollars: cents, or four decimals below a cent.
pub(crate) fn usd(x: f64) -> String {
    if x != 0.0 && x.abs() < 0.01 {
        format!("${x:.4}")
    } else {
        format!("${x:.2}")
    }
}

/// Seconds as `1h02m`, `3m05s` or `4.2s`.
pub(crate) fn duration_s(s: f64) -> String {
    if !s.is_finite() {
        return "—".into();
    }
    let neg = if s < 0.0 { "-" } else { "" };
    let s = s.abs();
    if s < 60.0 {
        format!("{neg}{s:.1}s")
    } else if s < 3600.0 {
        format!("{neg}{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{neg}{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

/// A table from a header and rows of cells that are already HTML.
pub(crate) fn table(class: &str, head: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("<div class=\"scroll\"><table class=\"{class}\"><thead><tr>");
    for h in head {
        let _ = write!(out, "<th scope=\"col\">{h}</th>");
    }
    out.push_str("</tr></thead><tbody>");
    for r in rows {
        out.push_str("<tr>");
        for c in r {
            let _ = write!(out, "<td>{c}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_is_escaped_and_urls_encoded() {
        assert_eq!(
            esc("<script>\"x\" & 'y'</script>"),
            "&lt;script&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/script&gt;"
        );
        assert_eq!(url_part("a b/c?d=é"), "a%20b%2Fc%3Fd%3D%C3%A9");
        assert_eq!(duration_s(3725.0), "1h02m");
        assert_eq!(duration_s(65.0), "1m05s");
        assert_eq!(usd(0.0012), "$0.0012");
        assert_eq!(usd(1.5), "$1.50");
    }
}
