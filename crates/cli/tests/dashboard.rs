//! The web dashboard end to end: a real `lanes coordinator --ui-listen` and `lanes worker` on
//! the sim driver, read over raw HTTP (every route refuses the unauthenticated; artifacts stay
//! inside their directory; login links work once) and in a real headless Chromium driven over
//! the DevTools protocol (log in, watch the final count rise without a reload, read the
//! per-arm chart against the report, follow a trial's artifact, press Stop, no console error).

mod browser;
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use browser::{Browser, http, http_head_only, https};
use support::{Killed, lanes, logged_addr, spawn};

const CLIENT_TOKEN: &str = "dashboard-client-token-for-tests";
const LANE_TOKEN: &str = "dashboard-lane-token-for-tests";
const TRACE_URL: &str = "http://traces.invalid/trace/{trace_id}";

/// A coordinator with its dashboard, and a worker with two sim lanes.
struct Fleet {
    api: String,
    ui: String,
    dir: PathBuf,
    _coordinator: Killed,
    _worker: Killed,
}

fn fleet(dir: &Path) -> Fleet {
    let artifacts = dir.join("artifacts");
    let mut coordinator = lanes();
    coordinator
        .args([
            "coordinator",
            "--listen",
            "127.0.0.1:0",
            "--ui-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--ui-artifacts")
        .arg(&artifacts)
        .args(["--ui-trace-url", TRACE_URL])
        .env("LANES_CLIENT_TOKEN", CLIENT_TOKEN)
        .env("LANES_LANE_TOKEN", LANE_TOKEN);
    let (coordinator, rx) = spawn(coordinator);
    let api = logged_addr(&rx, "coordinator listening");
    let ui = logged_addr(&rx, "dashboard listening");
    let mut worker = lanes();
    worker
        .args([
            "worker",
            "--coordinator",
            &format!("http://{api}"),
            "--lanes",
            "2",
            "--host",
            "ui-host",
        ])
        .arg("--artifacts")
        .arg(&artifacts)
        .env("LANES_LANE_TOKEN", LANE_TOKEN);
    let (worker, _) = spawn(worker);
    Fleet {
        api: format!("http://{api}"),
        ui,
        dir: dir.to_owned(),
        _coordinator: coordinator,
        _worker: worker,
    }
}

impl Fleet {
    fn cli(&self, args: &[&str]) -> std::process::Output {
        support::client(&self.api, CLIENT_TOKEN, args)
    }

    fn ok(&self, args: &[&str]) -> String {
        support::client_ok(&self.api, CLIENT_TOKEN, args)
    }

    /// Submits a sim campaign of `tasks` tasks whose agents take `agent_s`.
    fn submit(&self, id: &str, tasks: usize, agent_s: f64) {
        let file = support::campaign(&self.dir, id, tasks, agent_s);
        self.ok(&["submit", file.to_str().unwrap()]);
    }

    /// Follows the campaign until it ends (`lanes watch` returns then).
    fn wait_over(&self, id: &str) {
        self.ok(&["watch", id]);
    }

    fn report(&self, id: &str) -> Value {
        serde_json::from_str(&self.ok(&["report", id, "--json"])).unwrap()
    }

    /// A session cookie (`name=value`) from the login form.
    fn session(&self) -> String {
        let a = http(
            &self.ui,
            "POST",
            "/login",
            &[],
            &format!("token={CLIENT_TOKEN}&next=/"),
        );
        assert_eq!(a.status, 303, "{}", a.text());
        let set = a.header("set-cookie").unwrap().to_owned();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Lax"),
            "{set}"
        );
        set.split(';').next().unwrap().to_owned()
    }

    /// The first row of `trial` (its attempt) from `lanes results`.
    fn first_row(&self, id: &str, trial: &str) -> Value {
        self.ok(&["results", id])
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|r| r["trial_id"] == trial)
            .unwrap_or_else(|| panic!("no row of {trial}"))
    }
}

#[test]
fn every_route_refuses_the_unauthenticated_and_artifacts_stay_inside() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(dir.path());
    f.submit("quick", 4, 0.01);
    f.wait_over("quick");
    let trial = "T000.r0.a";
    let attempt = f.first_row("quick", trial)["attempt"].as_u64().unwrap();
    let artifact = format!("/campaigns/quick/trials/{trial}/artifacts/a{attempt}/attempt.json");
    let pages = [
        "/".to_owned(),
        "/campaigns/quick".into(),
        "/campaigns/quick/rows".into(),
        "/campaigns/quick/rows?status=completed".into(),
        format!("/campaigns/quick/trials/{trial}"),
        "/campaigns/quick/stop?mode=drain".into(),
        "/campaigns/nope".into(),
    ];
    let lane = format!("Bearer {LANE_TOKEN}");
    let port = f.ui.rsplit_once(':').unwrap().1;
    let forged = format!("lanes_session_{port}=v2.99999999999999.00.00.00");
    let forged = forged.as_str();
    for credentials in [
        vec![],
        vec![("Authorization", lane.as_str())],
        vec![("Cookie", forged)],
    ] {
        // Pages send the browser to the login form, with the page to come back to.
        for p in &pages {
            let a = http(&f.ui, "GET", p, &credentials, "");
            assert_eq!(a.status, 303, "{p} {credentials:?}");
            assert!(
                a.header("location").unwrap().starts_with("/login?next=%2F"),
                "{p}"
            );
            assert!(!a.text().contains("quick"), "{p} leaked: {}", a.text());
        }
        // Everything else is refused outright.
        for p in ["/campaigns/quick/live", artifact.as_str()] {
            let a = http_head_only(&f.ui, "GET", p, &credentials);
            assert_eq!(a.status, 401, "{p} {credentials:?}");
        }
        let a = http(
            &f.ui,
            "POST",
            "/campaigns/quick/stop",
            &credentials,
            "mode=cancel",
        );
        assert_eq!(a.status, 401, "stop {credentials:?}");
    }
    // The login page and the assets need nothing, and say nothing of campaigns.
    assert_eq!(http(&f.ui, "GET", "/login", &[], "").status, 200);
    assert_eq!(http(&f.ui, "GET", "/assets/live.js", &[], "").status, 200);

    // The client token as a bearer opens every page.
    let bearer = format!("Bearer {CLIENT_TOKEN}");
    for p in &pages[..6] {
        let a = http(&f.ui, "GET", p, &[("Authorization", &bearer)], "");
        assert_eq!(a.status, 200, "{p}: {}", a.text());
        assert!(
            a.header("content-security-policy")
                .unwrap()
                .contains("script-src 'self'")
        );
        assert_eq!(a.header("x-frame-options"), Some("DENY"));
    }
    assert_eq!(
        http(
            &f.ui,
            "GET",
            "/campaigns/nope",
            &[("Authorization", &bearer)],
            ""
        )
        .status,
        404
    );

    // A wrong token at the form is refused; the right one gets a session cookie.
    let wrong = http(&f.ui, "POST", "/login", &[], &format!("token={LANE_TOKEN}"));
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    let cookie = f.session();
    let with_cookie = [("Cookie", cookie.as_str())];

    // A cookie alone cannot post a stop: the form's CSRF token is required.
    let a = http(
        &f.ui,
        "POST",
        "/campaigns/quick/stop",
        &with_cookie,
        "mode=cancel",
    );
    assert_eq!(a.status, 403, "{}", a.text());

    // A one-time link works once, then never again. Opening it shows a button that posts
    // the code, so a link previewer that only fetches it uses nothing up.
    let link = f.ok(&["ui-link", "quick"]);
    let link = link.trim();
    assert!(
        link.starts_with(&format!("http://{}/login?code=", f.ui)),
        "{link}"
    );
    assert!(!link.contains(CLIENT_TOKEN));
    let path = &link[link.find("/login").unwrap()..];
    let code = path
        .split("code=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    for _ in 0..2 {
        let opened = http(&f.ui, "GET", path, &[], "");
        assert_eq!(opened.status, 200);
        assert!(opened.text().contains("id=\"use-code\""));
    }
    let form = format!("code={code}&next=/campaigns/quick");
    let first = http(&f.ui, "POST", "/login", &[], &form);
    assert_eq!(first.status, 303, "{}", first.text());
    assert_eq!(first.header("location"), Some("/campaigns/quick"));
    let fresh = first
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(
        http(&f.ui, "GET", "/campaigns/quick", &[("Cookie", &fresh)], "").status,
        200
    );
    let again = http(&f.ui, "POST", "/login", &[], &form);
    assert_eq!(again.status, 401);
    assert!(again.header("set-cookie").is_none());
    let garbage = http(&f.ui, "GET", "/login?code=../../etc", &[], "");
    assert_eq!(garbage.status, 400);
    let unknown = f.cli(&["ui-link", "nope"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("nope"));

    // The attempt record is served as text; paths out of the directory are refused.
    let a = http(&f.ui, "GET", &artifact, &with_cookie, "");
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.header("content-type"), Some("text/plain; charset=utf-8"));
    assert!(a.text().contains(trial));
    std::fs::write(dir.path().join("outside.txt"), "SECRET-CONTENT-4711").unwrap();
    let attempt_dir = dir
        .path()
        .join(format!("artifacts/quick/{trial}/a{attempt}"));
    std::os::unix::fs::symlink(dir.path().join("outside.txt"), attempt_dir.join("leak.txt"))
        .unwrap();
    for (p, status) in [
        (
            format!(
                "/campaigns/quick/trials/{trial}/artifacts/a{attempt}/..%2F..%2F..%2F..%2Foutside.txt"
            ),
            400,
        ),
        (
            format!("/campaigns/quick/trials/{trial}/artifacts/a{attempt}/%2e%2e"),
            400,
        ),
        (
            format!("/campaigns/quick/trials/..%2F..%2F..%2Foutside.txt/artifacts/a{attempt}/x"),
            400,
        ),
        (
            format!("/campaigns/%2e%2e/trials/{trial}/artifacts/a{attempt}/attempt.json"),
            400,
        ),
        (
            format!("/campaigns/quick/trials/{trial}/artifacts/..%2F..%2F/outside.txt"),
            400,
        ),
        (
            format!("/campaigns/quick/trials/{trial}/artifacts/a{attempt}/leak.txt"),
            404,
        ),
        (
            format!("/campaigns/quick/trials/{trial}/artifacts/a{attempt}/missing.json"),
            404,
        ),
    ] {
        let a = http(&f.ui, "GET", &p, &with_cookie, "");
        assert_eq!(a.status, status, "{p}: {}", a.text());
        assert!(!a.text().contains("SECRET-CONTENT"), "{p}");
    }

    // A light page: at the largest per-trial grid (600 trials), the campaign page with its
    // stylesheet and script is under 200 KB.
    f.submit("wide", 300, 0.01);
    f.wait_over("wide");
    let page = http(&f.ui, "GET", "/campaigns/wide", &with_cookie, "");
    assert_eq!(page.status, 200);
    // 600 cells and the legend's 7.
    assert_eq!(page.text().matches("<rect class=\"c-").count(), 607);
    let weight: usize = page.body.len()
        + ["/assets/dashboard.css", "/assets/live.js"]
            .iter()
            .map(|p| http(&f.ui, "GET", p, &with_cookie, "").body.len())
            .sum::<usize>();
    assert!(weight < 200_000, "{weight} bytes");
}

/// The Chromium to drive, or `None` (loudly) outside scripts/test.sh; in CI its absence fails.
/// Guessing through the `Authorization` header counts against the address as guessing at the
/// login form does: after 20 wrong tokens every request from it gets 429 with a `Retry-After`,
/// a right token included, until its wait ends. Before, header guesses were never counted and
/// a locked-out address still got in with the header.
#[test]
fn wrong_bearer_tokens_lock_the_address_out() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(dir.path());
    let right = format!("Bearer {CLIENT_TOKEN}");
    let right = [("Authorization", right.as_str())];
    assert_eq!(http(&f.ui, "GET", "/", &right, "").status, 200);
    for i in 0..20 {
        let wrong = format!("Bearer guess-{i:020}");
        let a = http(&f.ui, "GET", "/", &[("Authorization", &wrong)], "");
        assert_eq!(a.status, 303, "guess {i} is sent to the login form");
    }
    let form = format!("token={CLIENT_TOKEN}");
    for (what, method, path, headers, body) in [
        ("the right token", "GET", "/", &right[..], ""),
        ("no credentials", "GET", "/login", &[][..], ""),
        ("an asset", "GET", "/assets/live.js", &[][..], ""),
        ("the login form", "POST", "/login", &[][..], form.as_str()),
    ] {
        let a = http(&f.ui, method, path, headers, body);
        assert_eq!(a.status, 429, "{what}: {}", a.text());
        let wait: u64 = a.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=61).contains(&wait), "{what}: {wait}");
    }
}

fn chromium() -> Option<String> {
    let found = browser::chromium();
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "no chromium: scripts/test.sh installs Debian's chromium package"
        );
        eprintln!("!!! no chromium: the browser test was NOT run. Run ./scripts/test.sh.");
    }
    found
}

#[test]
fn a_browser_watches_a_campaign_live_reads_its_results_and_stops_it() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let f = fleet(dir.path());
    f.submit("finished", 12, 0.01);
    f.wait_over("finished");
    // Long enough (240 trials of half a second on 2 lanes) to be running when Stop is pressed.
    f.submit("live", 120, 0.5);

    let mut b = Browser::start(&chromium, &dir.path().join("profile"));
    let ui = format!("http://{}", f.ui);
    // Not logged in: the page sends the browser to the form, which brings it back.
    b.open(&format!("{ui}/campaigns/live"), "/login");
    b.eval(&format!(
        "document.getElementById('token').value = {}; document.querySelector('form.login').submit(); true",
        serde_json::to_string(CLIENT_TOKEN).unwrap()
    ));
    b.wait_loaded("/campaigns/live");

    // The final count rises while the page stays the same document.
    b.eval("window.__sameDocument = true");
    b.wait_for(
        "document.getElementById('live-status').textContent.startsWith('live')",
        Duration::from_secs(30),
    );
    let first = b
        .eval("Number(document.getElementById('final-count').dataset.final)")
        .as_u64()
        .unwrap();
    let risen = format!(
        "window.__sameDocument === true && Number(document.getElementById('final-count').dataset.final) > {}",
        first.max(30) + 10
    );
    b.wait_for(&risen, Duration::from_secs(60));
    let filled =
        b.eval("document.querySelectorAll('#grid a rect.c-passed, #grid a rect.c-failed').length");
    assert!(
        filled.as_u64().unwrap() > first,
        "the grid filled in too: {filled}"
    );
    let shot = b.screenshot();
    assert!(shot.starts_with(b"\x89PNG\r\n\x1a\n"));
    std::fs::write(dir.path().join("campaign.png"), &shot).unwrap();
    if std::env::var_os("LANES_WRITE_SCREENSHOT").is_some() {
        let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/dashboard.png");
        std::fs::write(docs, &shot).unwrap();
    }

    // At a phone's width nothing spills out sideways.
    b.viewport(390, 844, true);
    let spill = b.eval("document.documentElement.scrollWidth - window.innerWidth");
    assert!(
        spill.as_i64().unwrap() <= 0,
        "the page is {spill}px wider than a phone"
    );
    b.viewport(1280, 800, false);

    // A final trial's page, then its attempt record through the artifact link.
    let trial_href = b.eval(
        "new URL(document.querySelector('#grid a rect.c-passed, #grid a rect.c-failed').closest('a')\
         .getAttribute('href'), document.baseURI).href",
    );
    let trial_url = trial_href.as_str().unwrap().to_owned();
    let trial_href = trial_url.strip_prefix(&ui).unwrap().to_owned();
    assert!(
        trial_href.starts_with("/campaigns/live/trials/"),
        "{trial_href}"
    );
    b.open(&trial_url, &trial_href);
    let trace = b.eval("document.querySelector('a.trace').getAttribute('href')");
    assert!(
        trace
            .as_str()
            .unwrap()
            .starts_with("http://traces.invalid/trace/"),
        "{trace}"
    );
    let artifact = b.eval(
        "[...document.querySelectorAll('a.artifact')].find(a => a.textContent === 'attempt.json').getAttribute('href')",
    );
    let artifact = artifact.as_str().unwrap().to_owned();
    b.eval(&format!(
        "document.querySelector('a.artifact[href={}]').click(); true",
        serde_json::to_string(&artifact).unwrap()
    ));
    b.wait_loaded(&artifact);
    let record = b.eval("document.body.innerText");
    let trial_id = trial_href.rsplit('/').next().unwrap();
    assert!(record.as_str().unwrap().contains(trial_id), "{record}");

    // Stop (drain), confirmed: the page shows the campaign stopping, then the live stream
    // says it stopped and takes the buttons away. A drain can end before the page it
    // redirects to is rendered: that page is then the final one, with no buttons and no
    // stream, and says so.
    b.open(&format!("{ui}/campaigns/live"), "/campaigns/live");
    let stop = "document.querySelector('.actions a.button[href$=\"mode=drain\"]')";
    assert_eq!(
        b.eval(&format!("{stop} !== null")),
        Value::Bool(true),
        "still running"
    );
    b.eval(&format!("{stop}.click(); true"));
    b.wait_loaded("/campaigns/live/stop");
    b.eval("document.getElementById('confirm-stop').click(); true");
    b.wait_loaded("/campaigns/live");
    b.wait_for(
        "['stopping', 'stopped'].includes(document.querySelector('#summary [data-state]').dataset.state)",
        Duration::from_secs(30),
    );
    b.wait_for(
        "['campaign stopped', 'final'].includes(document.getElementById('live-status').textContent) \
         && document.querySelectorAll('.actions .button').length === 0",
        Duration::from_secs(30),
    );
    let status: Value = serde_json::from_str(&f.ok(&["status", "live", "--json"])).unwrap();
    assert_eq!(
        status["state"].as_str().unwrap().to_ascii_lowercase(),
        "stopped",
        "{status}"
    );

    // Log out, then back in with a one-time link: its page's Continue button posts the code.
    b.eval("document.querySelector('form.logout button').click(); true");
    b.wait_loaded("/login");
    let link = f.ok(&["ui-link", "finished"]);
    let link = link.trim();
    let login_path = &link[link.find("/login").unwrap()..];
    b.open(link, "/login");
    assert!(login_path.contains("code="));
    b.eval("document.getElementById('use-code').click(); true");
    b.wait_loaded("/campaigns/finished");

    // The finished campaign's chart: one interval per arm, with the report's numbers.
    let shown = b.eval(
        "[...document.querySelectorAll('#arm-chart g.interval')].map(g => ({arm: g.dataset.arm, \
         rate: Number(g.dataset.rate), lo: Number(g.dataset.lo), hi: Number(g.dataset.hi), \
         counted: Number(g.dataset.counted), passed: Number(g.dataset.passed)}))",
    );
    let shown = shown.as_array().unwrap();
    let report = f.report("finished");
    let arms = report["arms"].as_array().unwrap();
    assert_eq!(shown.len(), arms.len(), "{shown:?}");
    for (s, a) in shown.iter().zip(arms) {
        assert_eq!(s["arm"], a["arm"]);
        assert_eq!(s["counted"], a["counted"]);
        assert_eq!(s["passed"], a["passed"]);
        for (k, v) in [
            ("rate", &a["pass_rate_counted"]),
            ("lo", &a["pass_rate_counted_ci95"]["lo"]),
            ("hi", &a["pass_rate_counted_ci95"]["hi"]),
        ] {
            let (x, y) = (s[k].as_f64().unwrap(), v.as_f64().unwrap());
            assert!((x - y).abs() < 1e-12, "{k}: page {x}, report {y}");
        }
    }

    let problems = b.problems();
    assert!(
        problems.is_empty(),
        "the pages logged errors: {problems:#?}"
    );
}

#[test]
fn the_dashboard_is_served_over_tls_when_the_api_is() {
    let dir = tempfile::tempdir().unwrap();
    let ca = lanes_tests::certs::TestCa::new("dashboard-ca");
    let (cert, key) = ca.server().write(dir.path(), "server");
    let mut coordinator = lanes();
    coordinator
        .args([
            "coordinator",
            "--listen",
            "127.0.0.1:0",
            "--ui-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--tls-cert")
        .arg(cert)
        .arg("--tls-key")
        .arg(key)
        .env("LANES_CLIENT_TOKEN", CLIENT_TOKEN)
        .env("LANES_LANE_TOKEN", LANE_TOKEN);
    let (_coordinator, rx) = spawn(coordinator);
    let api = logged_addr(&rx, "coordinator listening");
    let ui = logged_addr(&rx, "dashboard listening");
    // Plaintext gets no page.
    let plain = std::panic::catch_unwind(|| http(&ui, "GET", "/login", &[], ""));
    assert!(plain.map_or(true, |a| a.status != 200));
    let login = https(&ui, &ca.pem, "GET", "/login", &[], "");
    assert_eq!(login.status, 200);
    let form = format!("token={CLIENT_TOKEN}&next=/");
    let a = https(&ui, &ca.pem, "POST", "/login", &[], &form);
    assert_eq!(a.status, 303);
    let set = a.header("set-cookie").unwrap();
    assert!(set.contains("; Secure"), "{set}");
    let cookie = set.split(';').next().unwrap();
    let list = https(&ui, &ca.pem, "GET", "/", &[("Cookie", cookie)], "");
    assert_eq!(list.status, 200);
    assert!(list.text().contains("No campaign yet"));
    // Login links name the https address.
    let ca_file = ca.write(dir.path());
    let port = api.rsplit_once(':').unwrap().1;
    let out = lanes()
        .args([
            "ui-link",
            "--coordinator",
            &format!("https://localhost:{port}"),
            "--tls-ca",
        ])
        .arg(ca_file)
        .env("LANES_CLIENT_TOKEN", CLIENT_TOKEN)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let link = String::from_utf8(out.stdout).unwrap();
    assert!(
        link.starts_with(&format!("https://{ui}/login?code=")),
        "{link}"
    );
}
