//! Bearer tokens for the command line: the sets a coordinator accepts, the one a client or
//! worker presents, and the random ones `lanes run` makes for its loopback API. Token files
//! are preferred to env variables (an env variable is visible to every child process and in
//! `/proc/<pid>/environ`); a file holds one token per line.

use std::path::Path;

use anyhow::Context;

use lanes_coordinator::auth::{Role, Secret};

/// The tokens a coordinator accepts for `role`: the flag or env value, or every line of the
/// file. Empty when neither is given (the caller decides whether that may start).
pub(crate) fn accepted(
    value: Option<String>,
    file: Option<&Path>,
    role: Role,
) -> anyhow::Result<Vec<Secret>> {
    match (value, file) {
        (Some(v), _) => Ok(vec![
            Secret::new(&v).with_context(|| format!("the {role} token"))?,
        ]),
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("cannot read the {role} token file {}", f.display()))?;
            Secret::from_file_text(&text, role)
                .with_context(|| format!("the {role} token file {}", f.display()))
        }
        (None, None) => Ok(Vec::new()),
    }
}

/// The token a client or worker presents: the flag or env value, or the first token of the
/// file (later lines are for the coordinator's rotation).
pub(crate) fn presented(
    value: Option<String>,
    file: Option<&Path>,
    role: Role,
) -> anyhow::Result<Option<String>> {
    match (value, file) {
        (Some(v), _) => Ok(Some(v.trim().to_owned())),
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("cannot read the {role} token file {}", f.display()))?;
            let first = text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .with_context(|| format!("the {role} token file {} is empty", f.display()))?;
            Ok(Some(first.to_owned()))
        }
        (None, None) => Ok(None),
    }
}

/// A fresh random token: 32 bytes from the OS, as hex.
pub(crate) fn generate() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness for a token: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_give_every_token_to_the_coordinator_and_the_first_to_a_client() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("client.token");
        std::fs::write(
            &f,
            "# current first\nnew-token-0123456789\nold-token-0123456789\n",
        )
        .unwrap();
        assert_eq!(accepted(None, Some(&f), Role::Client).unwrap().len(), 2);
        assert_eq!(
            presented(None, Some(&f), Role::Client).unwrap().as_deref(),
            Some("new-token-0123456789")
        );
        assert_eq!(
            presented(Some("flag-wins-0123456789".into()), Some(&f), Role::Client)
                .unwrap()
                .as_deref(),
            Some("flag-wins-0123456789")
        );
        let short = accepted(Some("short".into()), None, Role::Lane).unwrap_err();
        assert!(
            format!("{short:#}").contains("shorter than 16 bytes"),
            "{short:#}"
        );
        assert!(accepted(None, None, Role::Lane).unwrap().is_empty());
    }

    #[test]
    fn generated_tokens_are_long_and_distinct() {
        let (a, b) = (generate().unwrap(), generate().unwrap());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
