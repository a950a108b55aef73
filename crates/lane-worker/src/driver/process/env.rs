//! The driver's environment. A driver starts from an empty environment: it gets only
//! [`PASSED_THROUGH`] from the worker's, plus the explicit variables of its command. The
//! worker's own credentials (`LANES_*TOKEN*`) never reach it, by name or by value, even when
//! the explicit variables ask for them, and neither do the artifact store's secrets (by value).

use std::ffi::OsString;

/// The worker's variables a driver gets (when the worker has them).
pub const PASSED_THROUGH: [&str; 4] = ["PATH", "HOME", "LANG", "TMPDIR"];

/// The artifact store's secrets (read from the worker's environment by the cloud clients):
/// an explicit variable that carries one of their values is dropped, as a worker credential
/// is. By value only: a campaign may give its agent credentials of its own under these names.
pub const STORE_SECRETS: [&str; 9] = [
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_TOKEN",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
];

/// A worker credential by its name: `LANES_` and `TOKEN` in it (`LANES_LANE_TOKEN`,
/// `LANES_CLIENT_TOKEN`, `LANES_LANE_TOKEN_FILE`, ...).
pub fn is_worker_credential(name: &str) -> bool {
    name.to_ascii_uppercase()
        .strip_prefix("LANES_")
        .is_some_and(|rest| rest.contains("TOKEN"))
}

/// The complete environment of a driver started with `explicit`, read against the worker's
/// environment `worker`. Explicit variables that are worker credentials by name, or carry the
/// value of one, are dropped (and their names returned, for a warning).
pub(super) fn driver_env(
    explicit: &[(String, String)],
    worker: impl IntoIterator<Item = (OsString, OsString)>,
) -> (Vec<(OsString, OsString)>, Vec<String>) {
    let mut env = Vec::new();
    let mut credentials: Vec<OsString> = Vec::new();
    for (name, value) in worker {
        let name_text = name.to_string_lossy();
        let credential = is_worker_credential(&name_text);
        if (credential || STORE_SECRETS.contains(&name_text.as_ref())) && !value.is_empty() {
            credentials.push(value.clone());
        }
        if !credential && PASSED_THROUGH.contains(&name_text.as_ref()) {
            env.push((name, value));
        }
    }
    let mut dropped = Vec::new();
    for (name, value) in explicit {
        if is_worker_credential(name) || credentials.iter().any(|c| *c == **value) {
            dropped.push(name.clone());
            continue;
        }
        // An explicit variable replaces a passed-through one of the same name.
        env.retain(|(n, _)| n != name.as_str());
        env.push((name.into(), value.into()));
    }
    (env, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn only_the_pass_through_and_explicit_variables_and_never_a_credential() {
        let worker = os(&[
            ("PATH", "/bin"),
            ("HOME", "/root"),
            ("AWS_SECRET", "s3cr3t"),
            ("LANES_LANE_TOKEN", "lane-tok-123"),
            ("LANES_HOST", "h"),
            ("LANG", "C.UTF-8"),
        ]);
        let explicit: Vec<(String, String)> = [
            ("API_KEY", "k-1"),
            ("HOME", "/srv/drv"),
            ("LANES_CLIENT_TOKEN", "x"),
            ("lanes_lane_token", "y"),
            ("SNEAKY", "lane-tok-123"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let (env, dropped) = driver_env(&explicit, worker);
        assert_eq!(
            env,
            os(&[
                ("PATH", "/bin"),
                ("LANG", "C.UTF-8"),
                ("API_KEY", "k-1"),
                ("HOME", "/srv/drv")
            ])
        );
        assert_eq!(
            dropped,
            ["LANES_CLIENT_TOKEN", "lanes_lane_token", "SNEAKY"]
        );
        assert!(is_worker_credential("LANES_LANE_TOKEN_FILE"));

        // The artifact store's secret never reaches a driver under another name; a campaign's
        // own key under the same name does.
        let worker = os(&[("AWS_SECRET_ACCESS_KEY", "store-key-1")]);
        let explicit = vec![
            ("LEAK".to_owned(), "store-key-1".to_owned()),
            (
                "AWS_SECRET_ACCESS_KEY".to_owned(),
                "campaign-key".to_owned(),
            ),
        ];
        let (env, dropped) = driver_env(&explicit, worker);
        assert_eq!(env, os(&[("AWS_SECRET_ACCESS_KEY", "campaign-key")]));
        assert_eq!(dropped, ["LEAK"]);
        assert!(!is_worker_credential("MY_LANES_TOKEN"));
        assert!(!is_worker_credential("LANES_HOST"));
    }
}
