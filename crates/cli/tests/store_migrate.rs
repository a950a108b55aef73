//! `lanes store migrate` and the layout refusals as a user meets them, through the real
//! binary: `lanes coordinator` refuses a layout 1 Redis store naming both layouts and the
//! command to run; the migration (dry run first) turns it into exactly what layout 2 writes,
//! recorded as the current layout (the steps from 2 on rewrite nothing); a second run changes
//! nothing.
//! `lanes run` and `lanes coordinator` refuse an embedded store of a newer layout. Bad input
//! gets exit 2, an unreachable Redis exit 1, each with a message.

use std::path::Path;
use std::process::{Command, Output};

use lanes_coordinator::store::layout::{EMBEDDED_LAYOUT, REDIS_LAYOUT};
use lanes_tests::redis_dump::{
    dump, fixture_keys, layout_fixture, load, migrated_v2_fixture, with_layout,
};
use lanes_tests::redis_server::RedisServer;

fn lanes() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lanes"));
    // No store settings from the environment this test runs in.
    for var in ["LANES_REDIS", "LANES_DATA_DIR", "LANES_REDIS_TLS_CA"] {
        cmd.env_remove(var);
    }
    cmd
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn migrate(args: &[&str]) -> Output {
    lanes()
        .args(["store", "migrate"])
        .args(args)
        .output()
        .expect("run lanes")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().expect("a runtime")
}

#[test]
fn a_layout_1_redis_store_is_refused_then_migrated_by_the_command() {
    let server = RedisServer::start();
    let url = server.url();
    let v1 = fixture_keys(&layout_fixture(1));
    rt().block_on(load(&url, &v1));

    let out = lanes()
        .args(["coordinator", "--listen", "127.0.0.1:0", "--redis", &url])
        .env("LANES_CLIENT_TOKEN", "very-secret-client")
        .env("LANES_LANE_TOKEN", "very-secret-lane")
        .output()
        .expect("run lanes coordinator");
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(3), "refused: {err}");
    assert!(
        err.contains(&format!(
            "has layout 1, this coordinator uses layout {REDIS_LAYOUT}"
        )) && err.contains(&format!("lanes store migrate --redis {url}")),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    let out = migrate(&["--redis", &url, "--dry-run"]);
    let (stdout, err) = text(&out);
    assert!(out.status.success(), "{stdout}{err}");
    assert!(
        stdout.contains(&format!(
            "layout 1 -> {REDIS_LAYOUT}: would migrate 2 campaign(s)"
        )),
        "{stdout}"
    );
    assert_eq!(rt().block_on(dump(&url)), v1, "a dry run writes nothing");

    let out = migrate(&["--redis", &url]);
    let (stdout, err) = text(&out);
    assert!(out.status.success(), "{stdout}{err}");
    assert!(
        stdout.contains(&format!(
            "layout 1 -> {REDIS_LAYOUT}: migrated 2 campaign(s)"
        )),
        "{stdout}"
    );
    assert!(
        rt().block_on(dump(&url)) == with_layout(migrated_v2_fixture(), REDIS_LAYOUT),
        "the migrated store differs from the layout 2 fixture (versions bumped, layout current)"
    );

    let out = migrate(&["--redis", &url]);
    let (stdout, err) = text(&out);
    assert!(out.status.success(), "{stdout}{err}");
    assert!(
        stdout.contains(&format!("already at layout {REDIS_LAYOUT}: nothing to do")),
        "{stdout}"
    );
}

/// An embedded store file stamped with layout `layout`.
fn embedded_with_layout(dir: &Path, layout: u32) {
    const LAYOUT: redb::TableDefinition<'static, &'static str, u32> =
        redb::TableDefinition::new("layout");
    std::fs::create_dir_all(dir).unwrap();
    let db = redb::Database::create(dir.join("lanes.redb")).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(LAYOUT)
        .unwrap()
        .insert("version", layout)
        .unwrap();
    txn.commit().unwrap();
}

#[test]
fn a_newer_embedded_store_is_refused_by_run_coordinator_and_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    embedded_with_layout(&data, 9);
    let quickstart =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart/campaign.toml");
    let want = format!(
        "has layout 9, which is newer than this coordinator's layout {EMBEDDED_LAYOUT}: upgrade \
         the coordinator"
    );

    let out = lanes()
        .arg("run")
        .arg(&quickstart)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains(&want), "{err}");

    let out = lanes()
        .args(["coordinator", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env("LANES_CLIENT_TOKEN", "very-secret-client")
        .env("LANES_LANE_TOKEN", "very-secret-lane")
        .output()
        .unwrap();
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains(&want), "{err}");

    let out = lanes()
        .args(["store", "migrate", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("has layout 9, which is newer"), "{err}");
}

#[test]
fn bad_input_and_an_unreachable_redis_get_clear_errors() {
    let out = migrate(&["--redis", "http://127.0.0.1:1/"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not a Redis URL"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let out = lanes()
        .args(["store", "migrate", "--data-dir"])
        .arg(&missing)
        .output()
        .unwrap();
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no directory"), "{err}");

    let out = lanes()
        .args(["store", "migrate", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no embedded store in"), "{err}");

    // A free port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = migrate(&["--redis", &format!("redis://127.0.0.1:{port}/")]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the migration failed") && err.contains("unavailable"),
        "{err}"
    );

    let out = migrate(&[]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap: one of --redis or --data-dir"
    );
}
