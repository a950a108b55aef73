//! The dashboard's settings as `lanes coordinator` and `lanes run` take them, checked before
//! anything starts.

use std::path::PathBuf;

use lanes_coordinator::DashboardConfig;

/// A `--ui-trace-url` template: an http(s) URL with `{trace_id}` in it.
pub(crate) fn trace_template(t: &str) -> Result<String, String> {
    if !(t.starts_with("http://") || t.starts_with("https://")) || !t.contains("{trace_id}") {
        return Err(format!(
            "{t:?} is not a trace URL template: give an http(s) URL with {{trace_id}} in it, \
             e.g. http://jaeger:16686/trace/{{trace_id}}"
        ));
    }
    Ok(t.to_owned())
}

/// A `--ui-public-url`: where browsers reach the dashboard, `http(s)://HOST[:PORT]`. The
/// dashboard's links are absolute paths, so it must be served at the root of its host.
pub(crate) fn public_url(u: &str) -> Result<String, String> {
    let rest = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"))
        .unwrap_or("");
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains(['/', '?', '#', '@', ' ']) {
        return Err(format!(
            "{u:?} is not a dashboard URL: give http(s)://HOST[:PORT] (the dashboard is served \
             at the root of its host, not under a path)"
        ));
    }
    Ok(u.trim_end_matches('/').to_owned())
}

/// The dashboard's configuration from its flags.
pub(crate) fn config(
    public_url: Option<String>,
    artifacts: Option<PathBuf>,
    trace_url: Option<String>,
) -> DashboardConfig {
    DashboardConfig {
        artifacts,
        trace_url,
        public_url,
        ..DashboardConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_and_urls_are_checked() {
        assert!(trace_template("http://jaeger:16686/trace/{trace_id}").is_ok());
        assert!(trace_template("http://jaeger:16686/trace/").is_err());
        assert!(trace_template("javascript:alert({trace_id})").is_err());
        assert_eq!(
            public_url("https://lanes.example:8443/").unwrap(),
            "https://lanes.example:8443"
        );
        assert!(public_url("https://lanes.example/ui").is_err());
        assert!(public_url("lanes.example").is_err());
        assert!(public_url("https://x/?a=1").is_err());
    }
}
