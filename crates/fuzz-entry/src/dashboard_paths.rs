//! `dashboard_paths`: what the dashboard makes of a request's path, query, form and headers,
//! through `lanes_coordinator::fuzzing` (which forwards to the dashboard's own functions).
//!
//! The input is read as text, in lines. The whole text and its first lines feed: the login
//! redirect (`safe_next`), the login code's shape, HTML escaping and URL encoding, the public
//! URL's host, the artifact path check (the four parts from lines 1-4, and from line 1 split
//! on `/`), `GET /login?<line 1>` and `POST /login` with the text as its form. Lines of the
//! form `Name: value` are the headers of a request that the gatekeeper (sessions, bearer
//! tokens, the Host check, CSRF) judges.
//!
//! What must hold, besides never panicking: a redirect stays on this dashboard; escaped text
//! holds no markup and unescapes to itself; an encoded URL part holds only safe characters
//! and decodes to itself; an artifact path stays under the artifacts directory, four plain
//! parts deep, and is never served as markup; a login page echoes nothing unescaped; and the
//! gatekeeper lets in no one it did not issue a session to.

use std::path::{Component, Path};
use std::sync::LazyLock;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use lanes_coordinator::fuzzing::{self as dash, Gate, Seen};

/// The artifacts directory artifact paths are checked against.
const ROOT: &str = "/srv/lanes/artifacts";
/// The client token of the gate with one.
const TOKEN: &str = "fuzz-client-token-0123456789";
const NOW_MS: i64 = 1_800_000_000_000;

pub fn fuzz_one(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.split('\n').collect();
    let line = |i: usize| lines.get(i).copied().unwrap_or_default();

    for next in [&*text, line(0)] {
        redirect(next);
    }
    if dash::code_shape_ok(line(0)) {
        assert!(line(0).len() == 32 && line(0).bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(!line(0).bytes().any(|b| b.is_ascii_uppercase()));
    }
    escaping(&text);
    url_encoding(&text);

    let host = dash::public_host(line(0));
    assert!(!host.contains('/'), "{host:?}");
    assert!(line(0).contains(&host), "{host:?} is not in {:?}", line(0));

    artifact([line(0), line(1), line(2), line(3)]);
    let mut parts = line(0).splitn(4, '/');
    let mut part = || parts.next().unwrap_or_default();
    artifact([part(), part(), part(), part()]);

    login(line(0), data);
    gate(&lines);
}

fn redirect(next: &str) {
    let to = dash::safe_next(Some(next));
    assert!(
        to == "/" || to == next,
        "a redirect was rewritten: {next:?} -> {to:?}"
    );
    assert!(to.starts_with('/') && !to.starts_with("//"), "{to:?}");
    assert!(!to.contains('\\') && to.len() <= 512, "{to:?}");
    assert!(to.bytes().all(|b| b.is_ascii_graphic()), "{to:?}");
    assert_eq!(dash::safe_next(Some(&to)), to);
}

fn escaping(text: &str) {
    let escaped = dash::esc(text);
    assert!(!escaped.contains(['<', '>', '"', '\'']), "{escaped:?}");
    let back = escaped
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    assert_eq!(back, text, "escaping lost text");
}

fn url_encoding(text: &str) {
    let encoded = dash::url_part(text);
    let mut bytes = Vec::new();
    let mut rest = encoded.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(&tail[..2]).expect("two hex digits");
            assert!(
                hex.bytes()
                    .all(|h| h.is_ascii_digit() || h.is_ascii_uppercase())
            );
            bytes.push(u8::from_str_radix(hex, 16).expect("two hex digits"));
            rest = &tail[2..];
        } else {
            assert!(
                b.is_ascii_alphanumeric() || b"-_.~".contains(&b),
                "{encoded:?}"
            );
            bytes.push(b);
            rest = tail;
        }
    }
    assert_eq!(bytes, text.as_bytes(), "URL encoding lost text");
}

fn artifact([campaign, trial, attempt, file]: [&str; 4]) {
    let root = Path::new(ROOT);
    let Ok(path) = dash::artifact_path(root, campaign, trial, attempt, file) else {
        return;
    };
    let under = path
        .strip_prefix(root)
        .unwrap_or_else(|_| panic!("{path:?} is not under the root"));
    let parts: Vec<Component<'_>> = under.components().collect();
    assert_eq!(parts.len(), 4, "{path:?}");
    assert!(
        parts.iter().all(|c| matches!(c, Component::Normal(_))),
        "{path:?}"
    );
    let (ty, _) = dash::artifact_kind(file);
    assert!(
        !ty.contains("html") && !ty.contains("svg") && !ty.contains("xml"),
        "{file:?} served as {ty}"
    );
}

/// The login pages with nothing of the request in them: text in them is the template's.
static TEMPLATES: LazyLock<String> = LazyLock::new(|| {
    ["", "code=x", "code=0123456789abcdef0123456789abcdef"]
        .into_iter()
        .filter_map(dash::login_page)
        .map(|p| p.html)
        .collect()
});

fn login(query: &str, form: &[u8]) {
    if let Some(page) = dash::login_page(query) {
        assert!(matches!(page.status, 200 | 400), "{}", page.status);
        if let Some(next) = page.next.as_deref() {
            let to = dash::safe_next(Some(next));
            let field = format!("name=\"next\" value=\"{}\"", dash::esc(&to));
            assert!(page.html.contains(&field), "{field} is not in the page");
        }
        for echoed in [page.code.as_deref(), page.next.as_deref()]
            .into_iter()
            .flatten()
        {
            if echoed.contains(['<', '>', '"', '\'']) {
                assert!(
                    !page.html.contains(echoed) || TEMPLATES.contains(echoed),
                    "the login page echoes {echoed:?} unescaped"
                );
            }
        }
    }
    if let Some((_token, code, next)) = dash::login_form(form) {
        let _ = dash::code_shape_ok(&code);
        redirect(next.as_deref().unwrap_or_default());
    }
}

fn gate(lines: &[&str]) {
    let mut headers = HeaderMap::new();
    for l in lines {
        let Some((name, value)) = l.split_once(':') else {
            continue;
        };
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.trim().as_bytes()),
            HeaderValue::from_str(value.trim()),
        ) {
            headers.append(n, v);
        }
    }
    let _ = dash::same_origin(&headers);
    let public_url = lines.first().copied();

    let open = Gate::new(None, public_url).expect("an open gate");
    assert!(matches!(
        open.viewer(&headers, NOW_MS),
        None | Some(Seen::Open)
    ));

    let closed = Gate::new(Some(TOKEN), public_url).expect("a gate");
    let mark = closed.mark().expect("the token's mark");
    match closed.viewer(&headers, NOW_MS) {
        None => {}
        Some(Seen::Open) => panic!("a gate with a token let in an open viewer"),
        Some(Seen::Bearer { mark: m }) => assert_eq!(m, mark),
        Some(Seen::Session { mark: m, .. }) => assert_eq!(m, mark),
    }
    let _ = closed.csrf_ok(&headers, NOW_MS, lines.last().copied().unwrap_or_default());
}
