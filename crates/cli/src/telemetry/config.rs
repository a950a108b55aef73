//! What the standard `OTEL_*` variables ask for. Read through a lookup function, so tests give
//! their own environment. Only traces are exported; the exporter itself reads the endpoint,
//! headers, timeout and compression variables, and the SDK the sampler and resource ones.

/// How spans reach the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// Export asked for by the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Export {
    pub(crate) protocol: Protocol,
    /// The endpoint, for the log line that says where spans go (never its headers).
    pub(crate) endpoint: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ConfigError {
    #[error(
        "{var}={value:?} is not supported: use `grpc` or `http/protobuf` (Lanes exports traces only, as protobuf)"
    )]
    Protocol { var: &'static str, value: String },
    #[error("{var}={value:?}: use `otlp` or `none` (Lanes exports traces over OTLP only)")]
    Exporter { var: &'static str, value: String },
}

const SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
const TRACES_EXPORTER: &str = "OTEL_TRACES_EXPORTER";
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";

/// Export is on only when an endpoint is set, and `OTEL_SDK_DISABLED` is not `true` and
/// `OTEL_TRACES_EXPORTER` is not `none`. The protocol defaults to `http/protobuf`, as the
/// OpenTelemetry specification says.
pub(crate) fn export(get: impl Fn(&str) -> Option<String>) -> Result<Option<Export>, ConfigError> {
    let set = |name: &str| {
        get(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    if set(SDK_DISABLED).is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    match set(TRACES_EXPORTER) {
        None => {}
        Some(v) if v.eq_ignore_ascii_case("none") => return Ok(None),
        Some(v) if v.eq_ignore_ascii_case("otlp") => {}
        Some(value) => {
            return Err(ConfigError::Exporter {
                var: TRACES_EXPORTER,
                value,
            });
        }
    }
    let Some(endpoint) = set(TRACES_ENDPOINT).or_else(|| set(ENDPOINT)) else {
        return Ok(None);
    };
    let (var, value) = match set(TRACES_PROTOCOL) {
        Some(v) => (TRACES_PROTOCOL, v),
        None => (
            PROTOCOL,
            set(PROTOCOL).unwrap_or_else(|| "http/protobuf".into()),
        ),
    };
    let protocol = match value.as_str() {
        "grpc" => Protocol::Grpc,
        "http/protobuf" => Protocol::HttpProtobuf,
        _ => return Err(ConfigError::Protocol { var, value }),
    };
    Ok(Some(Export { protocol, endpoint }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn export_is_off_without_an_endpoint_or_when_disabled() {
        assert_eq!(export(env(&[])), Ok(None));
        assert_eq!(export(env(&[(PROTOCOL, "grpc")])), Ok(None));
        assert_eq!(export(env(&[(ENDPOINT, "  ")])), Ok(None));
        let on = [(ENDPOINT, "http://c:4317"), (SDK_DISABLED, "TRUE")];
        assert_eq!(export(env(&on)), Ok(None));
        let none = [(ENDPOINT, "http://c:4317"), (TRACES_EXPORTER, "none")];
        assert_eq!(export(env(&none)), Ok(None));
    }

    #[test]
    fn the_protocol_defaults_to_http_protobuf_and_the_traces_variables_win() {
        let got = export(env(&[(ENDPOINT, "http://c:4318")]))
            .unwrap()
            .unwrap();
        assert_eq!(got.protocol, Protocol::HttpProtobuf);
        assert_eq!(got.endpoint, "http://c:4318");
        let got = export(env(&[
            (ENDPOINT, "http://c:4318"),
            (TRACES_ENDPOINT, "http://t:4317"),
            (PROTOCOL, "http/protobuf"),
            (TRACES_PROTOCOL, "grpc"),
            (SDK_DISABLED, "false"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(got.protocol, Protocol::Grpc);
        assert_eq!(got.endpoint, "http://t:4317");
    }

    #[test]
    fn an_unsupported_protocol_or_exporter_is_a_clear_error() {
        let e = export(env(&[(ENDPOINT, "http://c"), (PROTOCOL, "http/json")])).unwrap_err();
        assert!(
            e.to_string()
                .contains("OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\""),
            "{e}"
        );
        let e = export(env(&[(ENDPOINT, "http://c"), (TRACES_EXPORTER, "zipkin")])).unwrap_err();
        assert!(e.to_string().contains("zipkin"), "{e}");
    }
}
