//! `examples/clients/python` end to end: stubs generated from `proto/lanes/v1` with
//! grpcio-tools, then the example run against a real `lanes coordinator` and `lanes worker` on
//! the sim driver, once in plaintext and once over TLS, with tokens both times. What it
//! printed must agree with the ledger as `lanes results` and `lanes report` read it. A Python
//! reflection client lists the services with no proto files. The Python packages come from
//! the venv `scripts/test.sh` makes and names in `LANES_TEST_PYTHON`.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{Killed, lanes, logged_addr, spawn};

const CLIENT_TOKEN: &str = "python-client-test-token";
const LANE_TOKEN: &str = "python-client-lane-token";
const TASKS: u64 = 12;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The venv's python, or `None` (with a loud note) outside `scripts/test.sh`.
fn python() -> Option<String> {
    let found = std::env::var("LANES_TEST_PYTHON").ok();
    if found.is_none() {
        eprintln!(
            "!!! LANES_TEST_PYTHON is not set: the Python client was NOT run. Run \
             ./scripts/test.sh, which installs grpcio-tools into its venv."
        );
    }
    found
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Generates the stubs into `dir` as a user would, from the proto files alone.
fn stubs(python: &str, dir: &Path) -> PathBuf {
    let out = dir.join("stubs");
    std::fs::create_dir_all(&out).unwrap();
    let proto = repo().join("proto");
    let mut cmd = Command::new(python);
    cmd.args(["-m", "grpc_tools.protoc", "-I"])
        .arg(&proto)
        .arg(format!("--python_out={}", out.display()))
        .arg(format!("--grpc_python_out={}", out.display()));
    for f in ["types", "campaign", "lane"] {
        cmd.arg(proto.join(format!("lanes/v1/{f}.proto")));
    }
    ok(cmd.output().unwrap(), "grpc_tools.protoc");
    out
}

/// A coordinator on the embedded store and a worker with two sim lanes.
struct Fleet {
    addr: String,
    url: String,
    ca: Option<PathBuf>,
    token_file: PathBuf,
    _coordinator: Killed,
    _worker: Killed,
}

fn fleet(dir: &Path, tls: bool) -> Fleet {
    let token_file = dir.join("client.token");
    std::fs::write(&token_file, format!("{CLIENT_TOKEN}\n")).unwrap();
    let ca = tls.then(|| lanes_tests::certs::TestCa::new("python-client-ca"));
    let mut coordinator = lanes();
    coordinator
        .args(["coordinator", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("data"))
        .env("LANES_CLIENT_TOKEN", CLIENT_TOKEN)
        .env("LANES_LANE_TOKEN", LANE_TOKEN);
    if let Some(ca) = &ca {
        let (cert, key) = ca.server().write(dir, "server");
        coordinator
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key);
    }
    let (coordinator, rx) = spawn(coordinator);
    let addr = logged_addr(&rx, "coordinator listening");
    let port = addr.rsplit_once(':').unwrap().1;
    let ca = ca.map(|ca| ca.write(dir));
    let url = match &ca {
        Some(_) => format!("https://localhost:{port}"),
        None => format!("http://{addr}"),
    };
    let mut worker = lanes();
    worker
        .args([
            "worker",
            "--coordinator",
            &url,
            "--lanes",
            "2",
            "--host",
            "py",
        ])
        .arg("--artifacts")
        .arg(dir.join("artifacts"))
        .env("LANES_LANE_TOKEN", LANE_TOKEN);
    if let Some(ca) = &ca {
        worker.arg("--tls-ca").arg(ca);
    }
    let (worker, _) = spawn(worker);
    Fleet {
        addr: format!("localhost:{port}"),
        url,
        ca,
        token_file,
        _coordinator: coordinator,
        _worker: worker,
    }
}

impl Fleet {
    /// `python FILE ARGS` with the stubs and the client on its path, and the TLS CA if any.
    fn python(&self, python: &str, stubs: &Path, file: &Path, args: &[&str]) -> Output {
        let client_dir = repo().join("examples/clients/python");
        let mut cmd = Command::new(python);
        cmd.arg(file)
            .args(["--target", &self.addr, "--token-file"])
            .arg(&self.token_file)
            .args(args)
            .env(
                "PYTHONPATH",
                format!("{}:{}", stubs.display(), client_dir.display()),
            );
        if let Some(ca) = &self.ca {
            cmd.arg("--ca-file").arg(ca);
        }
        cmd.output().unwrap()
    }

    fn cli(&self, args: &[&str]) -> String {
        let mut cmd = lanes();
        cmd.args(args)
            .args(["--coordinator", &self.url])
            .env("LANES_CLIENT_TOKEN", CLIENT_TOKEN);
        if let Some(ca) = &self.ca {
            cmd.arg("--tls-ca").arg(ca);
        }
        ok(cmd.output().unwrap(), &format!("lanes {args:?}"))
    }
}

fn run_example(tls: bool) {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let stubs = stubs(&python, dir.path());
    let fleet = fleet(dir.path(), tls);
    let campaign = if tls { "python-tls" } else { "python-plain" };
    let example = repo().join("examples/clients/python/example.py");
    let tasks = TASKS.to_string();
    let out = ok(
        fleet.python(
            &python,
            &stubs,
            &example,
            &["--campaign", campaign, "--tasks", &tasks],
        ),
        "example.py",
    );
    let result = out
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line in:\n{out}"));
    let result: serde_json::Value = serde_json::from_str(result).unwrap();
    assert!(out.contains("trials final"), "no progress printed:\n{out}");
    assert!(out.contains("campaign ended: CAMPAIGN_STATE_DONE"), "{out}");
    assert!(
        out.contains("baseline: ") && out.contains("candidate: "),
        "{out}"
    );

    // Two arms, two runs each: every trial scored once, as the CLI reads the same ledger.
    assert_eq!(result["trials"], TASKS * 2 * 2);
    assert_eq!(result["ended"], true);
    let rows: Vec<serde_json::Value> = fleet
        .cli(&["results", campaign])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(result["rows"], rows.len() as u64);
    let mut counted: BTreeMap<String, u64> = BTreeMap::new();
    let mut passed: BTreeMap<String, u64> = BTreeMap::new();
    for r in rows.iter().filter(|r| r["counted"] == true) {
        let arm = r["arm"].as_str().unwrap().to_owned();
        *counted.entry(arm.clone()).or_default() += 1;
        *passed.entry(arm).or_default() += u64::from(r["passed"] == true);
    }
    assert_eq!(counted.values().sum::<u64>(), TASKS * 2 * 2, "{counted:?}");
    assert_eq!(result["counted"], serde_json::to_value(&counted).unwrap());
    assert_eq!(result["passed"], serde_json::to_value(&passed).unwrap());
    let report: serde_json::Value =
        serde_json::from_str(&fleet.cli(&["report", campaign, "--json"])).unwrap();
    for arm in report["arms"].as_array().unwrap() {
        let name = arm["arm"].as_str().unwrap();
        assert_eq!(
            result["report"][name],
            serde_json::json!([arm["passed"], arm["counted"]]),
            "{name}"
        );
    }

    // Reflection: the services, with no proto files, to the client token only.
    let list = repo().join("examples/clients/python/list_services.py");
    let services = ok(
        fleet.python(&python, &stubs, &list, &[]),
        "list_services.py",
    );
    for want in ["lanes.v1.CampaignService", "grpc.health.v1.Health"] {
        assert!(
            services.lines().any(|l| l == want),
            "{want} not in {services}"
        );
    }
}

#[test]
fn the_python_example_runs_a_campaign_over_plaintext_with_tokens() {
    run_example(false);
}

#[test]
fn the_python_example_runs_a_campaign_over_tls_with_tokens() {
    run_example(true);
}
