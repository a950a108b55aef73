//! Attempt artifacts, read-only: `<artifacts>/<campaign>/<trial>/a<n>/<file>`. Every part of
//! the path is validated before it is joined (ids as ids, `a<n>`, a plain file name), and the
//! file actually opened must be a regular file under the artifacts directory (checked on the
//! open handle, so a symlink or a swapped directory cannot lead out). Nothing is rendered as
//! a page: text is served as plain text, a few image types as images, the rest as downloads.
//! Files in the artifact store are served by [`super::stored`], the same way.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use lanes_common::ids::{CampaignId, TrialId};
use lanes_common::row::Row;

use super::html::{esc, url_part};
use super::{Dashboard, DashboardConfig};

/// The largest file served.
const MAX_BYTES: u64 = 16 << 20;
/// Files listed per attempt at most.
const MAX_LISTED: usize = 200;

/// Why an artifact is not served.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The path names something outside the rules (bad id, attempt, or file name).
    BadPath(String),
    /// Nothing (readable, regular) there, or it resolves outside the artifacts directory.
    NotFound,
    TooLarge(u64),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::BadPath(why) => (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response(),
            Refusal::NotFound => (StatusCode::NOT_FOUND, "no such artifact\n").into_response(),
            Refusal::TooLarge(n) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the artifact has {n} bytes; the dashboard serves at most {MAX_BYTES}\n"),
            )
                .into_response(),
        }
    }
}

/// A plain file name: letters, digits, `.`, `_`, `-`; not starting with a dot; at most 128.
fn file_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// `a<n>` with n a number.
fn attempt_ok(attempt: &str) -> bool {
    attempt
        .strip_prefix('a')
        .is_some_and(|n| !n.is_empty() && n.len() <= 9 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The attempt directory, from validated parts.
fn attempt_dir(root: &FsPath, campaign: &CampaignId, trial: &TrialId, attempt: u32) -> PathBuf {
    root.join(campaign.as_str())
        .join(trial.as_str())
        .join(format!("a{attempt}"))
}

/// Reads an artifact: the checks of the module doc, then the bytes.
pub(crate) fn read(
    root: &FsPath,
    campaign: &str,
    trial: &str,
    attempt: &str,
    file: &str,
) -> Result<Vec<u8>, Refusal> {
    let path = checked_path(root, campaign, trial, attempt, file)?;
    let root = root.canonicalize().map_err(|_| Refusal::NotFound)?;
    // No symlink as the file itself, and no waiting on a FIFO a driver left there.
    let mut f = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|_| Refusal::NotFound)?
    };
    // What was opened, wherever the path led: it must be a regular file under the root.
    let opened = opened_path(&f).ok_or(Refusal::NotFound)?;
    let meta = f.metadata().map_err(|_| Refusal::NotFound)?;
    if !opened.starts_with(&root) || !meta.is_file() {
        return Err(Refusal::NotFound);
    }
    if meta.len() > MAX_BYTES {
        return Err(Refusal::TooLarge(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.by_ref()
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| Refusal::NotFound)?;
    Ok(bytes)
}

/// The path of an artifact under `root`, from the parts of its URL once each is checked
/// (the checks that need no file system; [`read`] does the rest on the open handle).
pub(super) fn checked_path(
    root: &FsPath,
    campaign: &str,
    trial: &str,
    attempt: &str,
    file: &str,
) -> Result<PathBuf, Refusal> {
    let campaign =
        CampaignId::new(campaign).map_err(|e| Refusal::BadPath(format!("campaign id: {e}")))?;
    let trial = TrialId::new(trial).map_err(|e| Refusal::BadPath(format!("trial id: {e}")))?;
    if !attempt_ok(attempt) {
        return Err(Refusal::BadPath("the attempt is a<number>".into()));
    }
    if !file_name_ok(file) {
        return Err(Refusal::BadPath(
            "a file name is letters, digits, '.', '_' and '-', not starting with '.'".into(),
        ));
    }
    let n: u32 = attempt[1..]
        .parse()
        .map_err(|_| Refusal::BadPath("the attempt is a<number>".into()))?;
    Ok(attempt_dir(root, &campaign, &trial, n).join(file))
}

/// The real path of an open file (Linux: `/proc/self/fd/<n>`).
fn opened_path(f: &std::fs::File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).ok()
}

/// How a file is served: its type, and whether the browser must download it.
pub(super) fn kind(file: &str) -> (&'static str, bool) {
    let ext = file
        .rsplit_once('.')
        .map_or("", |(_, e)| e)
        .to_ascii_lowercase();
    match ext.as_str() {
        "png" => ("image/png", false),
        "jpg" | "jpeg" => ("image/jpeg", false),
        "gif" => ("image/gif", false),
        "webp" => ("image/webp", false),
        // Markup of any kind is shown as text, never rendered.
        "json" | "jsonl" | "txt" | "log" | "stderr" | "stdout" | "md" | "csv" | "html" | "svg"
        | "xml" | "yaml" | "yml" | "toml" => ("text/plain; charset=utf-8", false),
        _ => ("application/octet-stream", true),
    }
}

pub(crate) async fn serve(
    State(d): State<Arc<Dashboard>>,
    Path((campaign, trial, attempt, file)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Err(r) = d.viewer(&headers, &uri, false).await {
        return r;
    }
    let Some(root) = d.config.artifacts.clone() else {
        return (
            StatusCode::NOT_FOUND,
            "this dashboard serves no artifacts (start it with an artifacts directory)\n",
        )
            .into_response();
    };
    let name = file.clone();
    let Ok(_reading) = d.artifact_reads.acquire().await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    };
    let read =
        tokio::task::spawn_blocking(move || read(&root, &campaign, &trial, &attempt, &file)).await;
    match read {
        Ok(Ok(bytes)) => file_response(&name, bytes),
        Ok(Err(refusal)) => refusal.into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// A file's bytes as the dashboard serves every artifact: text as plain text, a few image
/// types as images, the rest as a download named by its last path part; never as a page.
pub(super) fn file_response(path: &str, bytes: Vec<u8>) -> Response {
    let name = path.rsplit('/').next().unwrap_or(path);
    let (ty, download) = kind(name);
    let mut r = (
        [
            (header::CONTENT_TYPE, ty.to_owned()),
            (
                header::CONTENT_SECURITY_POLICY,
                "sandbox; default-src 'none'".to_owned(),
            ),
        ],
        bytes,
    )
        .into_response();
    if download {
        // The name is checked (a manifest path part, or a plain file name), and quotes are
        // kept out all the same.
        let safe: String = name
            .chars()
            .filter(|c| c.is_ascii_graphic() && *c != '"' && *c != '\\')
            .collect();
        r.headers_mut().insert(
            header::CONTENT_DISPOSITION,
            header::HeaderValue::from_str(&format!("attachment; filename=\"{safe}\""))
                .unwrap_or(header::HeaderValue::from_static("attachment")),
        );
    }
    r
}

/// Whether the attempt's directory is here (the dashboard's artifacts directory has it).
pub(crate) fn has_local(
    config: &DashboardConfig,
    campaign: &CampaignId,
    trial: &TrialId,
    attempt: u32,
) -> bool {
    config
        .artifacts
        .as_ref()
        .is_some_and(|root| attempt_dir(root, campaign, trial, attempt).is_dir())
}

/// The artifacts of one attempt, for the trial page: the files in its directory (linked);
/// when there are none here, the attempt's files in the artifact store (`stored`, already
/// rendered); and the paths or URIs its row names (as text).
pub(crate) fn section(
    config: &DashboardConfig,
    campaign: &CampaignId,
    trial: &TrialId,
    row: &Row,
    base: &str,
    stored: Option<String>,
) -> String {
    let mut out = String::from("<h3>Artifacts</h3>");
    let mut listed = false;
    if let Some(root) = &config.artifacts {
        let dir = attempt_dir(root, campaign, trial, row.attempt);
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| file_name_ok(n))
            .take(MAX_LISTED)
            .collect();
        names.sort();
        if !names.is_empty() {
            listed = true;
            out.push_str("<ul class=\"artifacts\">");
            for n in &names {
                let _ = write!(
                    out,
                    "<li><a class=\"artifact\" href=\"{base}/trials/{}/artifacts/a{}/{}\">{}</a></li>",
                    url_part(trial.as_str()),
                    row.attempt,
                    url_part(n),
                    esc(n)
                );
            }
            out.push_str("</ul>");
        }
    }
    if let Some(stored) = stored.filter(|_| !listed) {
        listed = true;
        out.push_str(&stored);
    }
    if !row.record.artifacts.is_empty() {
        listed = true;
        out.push_str("<p class=\"quiet\">Named by the row:</p><ul class=\"paths\">");
        for p in &row.record.artifacts {
            let _ = write!(out, "<li><code>{}</code></li>", esc(p));
        }
        out.push_str("</ul>");
    }
    if !listed {
        out.push_str("<p class=\"quiet\">None.</p>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("artifacts");
        let attempt = root.join("c1").join("t1.r0.a").join("a1");
        std::fs::create_dir_all(&attempt).unwrap();
        std::fs::write(attempt.join("attempt.json"), b"{}").unwrap();
        std::fs::write(dir.path().join("secret.txt"), b"secret").unwrap();
        (dir, root)
    }

    #[test]
    fn an_artifact_under_the_root_is_read() {
        let (_dir, root) = setup();
        assert_eq!(
            read(&root, "c1", "t1.r0.a", "a1", "attempt.json").unwrap(),
            b"{}"
        );
    }

    #[test]
    fn paths_out_of_the_root_are_refused() {
        let (dir, root) = setup();
        for (c, t, a, f) in [
            ("..", "t1.r0.a", "a1", "attempt.json"),
            ("c1", "..", "a1", "attempt.json"),
            ("c1", "t1.r0.a", "..", "attempt.json"),
            ("c1", "t1.r0.a", "a1", ".."),
            ("c1", "t1.r0.a", "a1", "../../../secret.txt"),
            ("c1", "t1.r0.a", "a1", "%2e%2e"),
            ("c1", "t1.r0.a", "b1", "attempt.json"),
        ] {
            assert!(
                matches!(read(&root, c, t, a, f), Err(Refusal::BadPath(_))),
                "{c}/{t}/{a}/{f}"
            );
        }
        // A symlink in the attempt directory (a driver could make one) leads nowhere.
        let attempt = root.join("c1").join("t1.r0.a").join("a1");
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), attempt.join("leak.txt"))
            .unwrap();
        assert_eq!(
            read(&root, "c1", "t1.r0.a", "a1", "leak.txt"),
            Err(Refusal::NotFound)
        );
        // Nor does a trial directory swapped for a symlink to somewhere else.
        let elsewhere = dir.path().join("elsewhere").join("a1");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("x.txt"), b"outside").unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("elsewhere"),
            root.join("c1").join("t2.r0.a"),
        )
        .unwrap();
        assert_eq!(
            read(&root, "c1", "t2.r0.a", "a1", "x.txt"),
            Err(Refusal::NotFound)
        );
        // A directory is not a file.
        std::fs::create_dir_all(attempt.join("sub")).unwrap();
        assert_eq!(
            read(&root, "c1", "t1.r0.a", "a1", "sub"),
            Err(Refusal::NotFound)
        );
    }

    #[test]
    fn markup_is_never_served_as_markup() {
        assert_eq!(kind("x.html").0, "text/plain; charset=utf-8");
        assert_eq!(kind("x.svg").0, "text/plain; charset=utf-8");
        assert_eq!(kind("shot.png"), ("image/png", false));
        assert_eq!(kind("blob.bin"), ("application/octet-stream", true));
    }
}
