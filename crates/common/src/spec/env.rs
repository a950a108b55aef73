//! Which environment variables a campaign may name for its driver, decided in one place: the
//! campaign-file loader, [`CampaignSpec::validate`](super::CampaignSpec::validate) (a spec
//! submitted over gRPC) and the worker (again, before a driver starts) all call it.
//!
//! A campaign's `[driver] env` maps a variable name to a value, or to `$NAME`, which the worker
//! reads from its own environment. Both the name set and every `$NAME` read must be a valid
//! variable name, and neither may be one of the *reserved* variables below: those change which
//! programs run, how they load code, which certificates are trusted, or are Lanes' own
//! configuration (its tokens among them). No worker setting can allow them.

use std::collections::BTreeMap;

/// A variable name a campaign may not use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvRefused {
    #[error("{0:?} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")]
    NotAName(String),
    #[error("{name} can never be set or read by a campaign: {why}")]
    Reserved { name: String, why: &'static str },
}

impl EnvRefused {
    /// The variable it is about.
    pub fn name(&self) -> &str {
        match self {
            EnvRefused::NotAName(n) | EnvRefused::Reserved { name: n, .. } => n,
        }
    }
}

const LOADER: &str = "it changes how programs are loaded";
const SHELL: &str = "it changes what a shell runs";
const INTERPRETER: &str = "it makes an interpreter load code";
const TLS: &str = "it changes which certificates are trusted";

/// Reserved by exact name (compared in upper case).
const RESERVED: &[(&str, &str)] = &[
    ("PATH", "it decides which programs run"),
    ("HOME", "it decides where programs read their configuration"),
    ("TMPDIR", "it decides where programs write temporary files"),
    ("USER", "it names the account the driver runs as"),
    ("LOGNAME", "it names the account the driver runs as"),
    ("SHELL", SHELL),
    ("ENV", SHELL),
    ("BASH_ENV", SHELL),
    ("IFS", SHELL),
    ("CDPATH", SHELL),
    ("GLOBIGNORE", SHELL),
    ("SHELLOPTS", SHELL),
    ("BASHOPTS", SHELL),
    ("PS4", SHELL),
    ("PROMPT_COMMAND", SHELL),
    ("NODE_OPTIONS", INTERPRETER),
    ("NODE_PATH", INTERPRETER),
    ("PERL5LIB", INTERPRETER),
    ("PERL5OPT", INTERPRETER),
    ("PERLLIB", INTERPRETER),
    ("RUBYOPT", INTERPRETER),
    ("RUBYLIB", INTERPRETER),
    ("JAVA_TOOL_OPTIONS", INTERPRETER),
    ("_JAVA_OPTIONS", INTERPRETER),
    ("JDK_JAVA_OPTIONS", INTERPRETER),
    ("CLASSPATH", INTERPRETER),
    ("GCONV_PATH", LOADER),
    ("LOCPATH", LOADER),
    ("NLSPATH", LOADER),
    ("SSL_CERT_FILE", TLS),
    ("SSL_CERT_DIR", TLS),
    ("REQUESTS_CA_BUNDLE", TLS),
    ("CURL_CA_BUNDLE", TLS),
    ("NODE_EXTRA_CA_CERTS", TLS),
    ("SSH_AUTH_SOCK", "it hands out the worker's SSH keys"),
    ("SSH_ASKPASS", SHELL),
    ("CONTAINER_HOST", RUNTIME),
    ("DOCKER_HOST", RUNTIME),
    ("DOCKER_CONFIG", RUNTIME),
    ("XDG_RUNTIME_DIR", RUNTIME),
];

/// Why a container runtime's settings are the operator's.
const RUNTIME: &str = "it configures the worker's container runtime, which is the operator's";

/// Reserved by prefix (compared in upper case).
const RESERVED_PREFIXES: &[(&str, &str)] = &[
    ("LD_", LOADER),
    ("DYLD_", LOADER),
    ("PYTHON", INTERPRETER),
    ("GIT_", "it changes what git runs"),
    ("CONTAINERS_", RUNTIME),
    (
        "LANES_",
        "it is Lanes' own configuration, its tokens among them",
    ),
];

/// `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_env_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// Why `name` can never come from a campaign, if it cannot.
pub fn reserved(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    RESERVED
        .iter()
        .find(|(n, _)| *n == upper)
        .or_else(|| RESERVED_PREFIXES.iter().find(|(p, _)| upper.starts_with(p)))
        .map(|(_, why)| *why)
}

/// A name a campaign may use, or why not.
pub fn check_name(name: &str) -> Result<(), EnvRefused> {
    if !is_env_name(name) {
        return Err(EnvRefused::NotAName(name.to_owned()));
    }
    match reserved(name) {
        Some(why) => Err(EnvRefused::Reserved {
            name: name.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

/// The worker variable a value reads: `$NAME` reads `NAME`; anything else is a literal.
pub fn source_of(value: &str) -> Option<&str> {
    value.strip_prefix('$')
}

/// Every variable name a campaign's env uses: the names it sets, then the `$NAME`s it reads.
pub fn names_used(env: &BTreeMap<String, String>) -> impl Iterator<Item = &str> {
    env.keys()
        .map(String::as_str)
        .chain(env.values().filter_map(|v| source_of(v)))
}

/// Checks a campaign's `[driver] env`: each name it sets and each `$NAME` it reads. The error
/// names the entry (`driver.env.<NAME>`) and the refused variable.
pub fn check_env(env: &BTreeMap<String, String>) -> Result<(), (String, EnvRefused)> {
    for (name, value) in env {
        let field = || format!("driver.env.{name}");
        check_name(name).map_err(|e| (field(), e))?;
        if let Some(source) = source_of(value) {
            check_name(source).map_err(|e| (field(), e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn names_and_reserved_names() {
        for ok in ["OPENAI_API_KEY", "_X", "a1", "HTTP_PROXY", "NODE_ENV"] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "1A", "A-B", "A B", "A=B"] {
            assert_eq!(check_name(bad), Err(EnvRefused::NotAName(bad.into())));
        }
        for r in [
            "PATH",
            "path",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "DYLD_INSERT_LIBRARIES",
            "PYTHONPATH",
            "PYTHONSTARTUP",
            "PYTHONHOME",
            "NODE_OPTIONS",
            "PERL5LIB",
            "RUBYOPT",
            "BASH_ENV",
            "ENV",
            "IFS",
            "HOME",
            "LANES_LANE_TOKEN",
            "GIT_SSH_COMMAND",
        ] {
            assert!(
                matches!(check_name(r), Err(EnvRefused::Reserved { ref name, .. }) if name == r),
                "{r}"
            );
        }
    }

    #[test]
    fn an_env_is_checked_by_the_names_it_sets_and_reads() {
        assert_eq!(
            check_env(&env(&[("KEY", "$KEY"), ("LEVEL", "info")])),
            Ok(())
        );
        let (field, e) = check_env(&env(&[("LD_PRELOAD", "/tmp/x.so")])).unwrap_err();
        assert_eq!(
            (field.as_str(), e.name()),
            ("driver.env.LD_PRELOAD", "LD_PRELOAD")
        );
        assert!(e.to_string().contains("LD_PRELOAD"), "{e}");
        let (field, e) = check_env(&env(&[("TOKEN", "$LANES_LANE_TOKEN")])).unwrap_err();
        assert_eq!(
            (field.as_str(), e.name()),
            ("driver.env.TOKEN", "LANES_LANE_TOKEN")
        );
        let (_, e) = check_env(&env(&[("X", "$")])).unwrap_err();
        assert_eq!(e, EnvRefused::NotAName(String::new()));
        let e = env(&[("A", "$B"), ("C", "lit")]);
        let used: Vec<&str> = names_used(&e).collect();
        assert_eq!(used, vec!["A", "C", "B"]);
    }
}
