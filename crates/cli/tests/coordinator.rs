//! `lanes coordinator` end to end: the real binary serves, refuses to start open, and refuses
//! a lossy Redis.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn lanes() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lanes"))
}

/// Kills the child when the test ends, even by a panic.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The child's stderr, line by line, read on a thread of its own so that the child never
/// blocks on a full pipe.
fn stderr_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Reads the child's stderr until a line satisfies `wanted` (within 30 s): that line, and the
/// lines before it.
fn until_line(
    rx: &std::sync::mpsc::Receiver<String>,
    child: &mut std::process::Child,
    what: &str,
    wanted: impl Fn(&str) -> bool,
) -> (String, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    loop {
        let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
            panic!(
                "no {what} line (exit: {:?}); stderr: {seen:#?}",
                child.try_wait()
            );
        };
        if wanted(&line) {
            return (line, seen);
        }
        seen.push(line);
    }
}

/// The address a log line gives as `addr=…`.
fn addr_of(line: &str) -> String {
    let i = line.find("addr=").expect("an addr= field");
    line[i + 5..].split_whitespace().next().unwrap().to_owned()
}

#[test]
fn serves_on_the_embedded_store_and_logs_its_address_without_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Killed(
        lanes()
            .args(["coordinator", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("LANES_CLIENT_TOKEN", "very-secret-client")
            .env("LANES_LANE_TOKEN", "very-secret-lane")
            .env("RUST_LOG", "debug")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let rx = stderr_lines(&mut child.0);
    let (line, seen) = until_line(&rx, &mut child.0, "listening", |l| l.contains("addr="));
    let addr = addr_of(&line);
    // It answers TCP, and it wrote its store file.
    assert!(std::net::TcpStream::connect(&addr).is_ok(), "{addr}");
    assert!(dir.path().join("lanes.redb").exists());
    drop(child);
    let logs: String = seen.join("\n") + &rx.try_iter().collect::<Vec<_>>().join("\n");
    assert!(!logs.contains("very-secret"), "a token reached the logs");
}

/// The `threads=` field of the coordinator's listening line when started with `args`.
fn threads_of(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Killed(
        lanes()
            .args(["coordinator", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(args)
            .env("LANES_CLIENT_TOKEN", "client-token-0123456789")
            .env("LANES_LANE_TOKEN", "lane-token-0123456789")
            .env_remove("LANES_THREADS")
            .env_remove("TOKIO_WORKER_THREADS")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let rx = stderr_lines(&mut child.0);
    let (line, _) = until_line(&rx, &mut child.0, "listening", |l| l.contains("addr="));
    let i = line.find("threads=").expect("a threads= field");
    line[i + 8..].split_whitespace().next().unwrap().to_owned()
}

#[test]
fn its_runtime_runs_on_the_threads_a_flag_or_the_config_file_gives() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("coordinator.toml");
    std::fs::write(&file, "threads = 1\n").unwrap();
    let file = file.to_str().unwrap();
    assert_eq!(threads_of(&["--config", file]), "1");
    // The flag wins over the file.
    assert_eq!(threads_of(&["--config", file, "--threads", "3"]), "3");
    // Zero threads is bad input, refused before anything runs.
    let out = lanes()
        .args(["coordinator", "--threads", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--threads"), "{err}");
    std::fs::write(dir.path().join("zero.toml"), "threads = 0\n").unwrap();
    let out = lanes()
        .args(["coordinator", "--config"])
        .arg(dir.path().join("zero.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("threads must be at least 1"), "{err}");
}

#[test]
fn refuses_a_redis_without_fsync_always_unless_allowed() {
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("redis-server is not installed: run ./scripts/test.sh, which installs it");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let redis = Killed(
        Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "yes", "--appendfsync", "everysec"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("redis://127.0.0.1:{port}/");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = lanes()
        .args(["coordinator", "--listen", "127.0.0.1:0", "--redis", &url])
        .env("LANES_CLIENT_TOKEN", "very-secret-client")
        .env("LANES_LANE_TOKEN", "very-secret-lane")
        .output()
        .unwrap();
    drop(redis);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("appendfsync"), "{err}");
    assert!(err.contains("--allow-lossy-store"), "{err}");
}

/// Runs `lanes coordinator` with these token settings and no others; it must refuse to start.
fn refused(args: &[&str], envs: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = lanes();
    cmd.args(["coordinator", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(args)
        .env_remove("LANES_CLIENT_TOKEN")
        .env_remove("LANES_LANE_TOKEN")
        .env_remove("LANES_CLIENT_TOKEN_FILE")
        .env_remove("LANES_LANE_TOKEN_FILE")
        .env_remove("LANES_INSECURE_NO_AUTH");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2), "exit 2 for bad input");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn refuses_to_start_open_short_or_with_one_token_for_both_roles() {
    let err = refused(&[], &[]);
    assert!(err.contains("no client token"), "{err}");
    assert!(err.contains("--insecure-no-auth"), "{err}");
    let err = refused(&[], &[("LANES_CLIENT_TOKEN", "client-token-0123456789")]);
    assert!(err.contains("no lane token"), "{err}");
    let err = refused(
        &[],
        &[
            ("LANES_CLIENT_TOKEN", "same-token-0123456789"),
            ("LANES_LANE_TOKEN", "same-token-0123456789"),
        ],
    );
    assert!(err.contains("share a token"), "{err}");
    let err = refused(
        &[],
        &[
            ("LANES_CLIENT_TOKEN", "short"),
            ("LANES_LANE_TOKEN", "lane-token-0123456789"),
        ],
    );
    assert!(err.contains("shorter than 16 bytes"), "{err}");
    assert!(!err.contains("short\n"), "the token is not echoed");
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("lane.tokens");
    std::fs::write(&empty, "# nothing yet\n").unwrap();
    let err = refused(
        &["--lane-token-file", empty.to_str().unwrap()],
        &[("LANES_CLIENT_TOKEN", "client-token-0123456789")],
    );
    assert!(err.contains("has no token"), "{err}");
}

#[test]
fn sentinel_flags_that_do_not_fit_together_are_refused_before_anything_runs() {
    let tokens = [
        ("LANES_CLIENT_TOKEN", "client-token-0123456789"),
        ("LANES_LANE_TOKEN", "lane-token-0123456789"),
    ];
    let err = refused(&["--redis-sentinel", "127.0.0.1:26379"], &tokens);
    assert!(err.contains("needs --redis-master"), "{err}");
    let err = refused(&["--redis-master", "lanes"], &tokens);
    assert!(err.contains("need --redis-sentinel"), "{err}");
    let err = refused(
        &["--redis-sentinel", "sentinel-a", "--redis-master", "lanes"],
        &tokens,
    );
    assert!(err.contains("\"sentinel-a\" is not HOST:PORT"), "{err}");
    // `refused` also passes --data-dir: two stores.
    let err = refused(
        &[
            "--redis-sentinel",
            "127.0.0.1:26379",
            "--redis-master",
            "lanes",
        ],
        &tokens,
    );
    assert!(err.contains("name two stores"), "{err}");
}

#[test]
fn insecure_no_auth_starts_an_open_coordinator_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Killed(
        lanes()
            .args([
                "coordinator",
                "--listen",
                "127.0.0.1:0",
                "--insecure-no-auth",
                "--data-dir",
            ])
            .arg(dir.path())
            .env_remove("LANES_CLIENT_TOKEN")
            .env_remove("LANES_LANE_TOKEN")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let rx = stderr_lines(&mut child.0);
    // An open coordinator warns at start.
    until_line(&rx, &mut child.0, "--insecure-no-auth warning", |l| {
        l.contains("--insecure-no-auth")
    });
}

/// OTLP/gRPC to an `https://` collector needs the exporter's TLS support: without it the
/// coordinator refused to start (bad input). Nothing listens there, so spans are dropped, but
/// the coordinator serves.
#[test]
fn starts_when_traces_go_to_an_https_grpc_collector() {
    let dir = tempfile::tempdir().unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut child = Killed(
        lanes()
            .args(["coordinator", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("LANES_CLIENT_TOKEN", "very-secret-client")
            .env("LANES_LANE_TOKEN", "very-secret-lane")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("https://{dead}"))
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let rx = stderr_lines(&mut child.0);
    let (_, seen) = until_line(&rx, &mut child.0, "listening", |l| {
        l.contains("coordinator listening")
    });
    assert!(
        seen.iter()
            .any(|l| l.contains("exporting attempt traces over OTLP") && l.contains("https://")),
        "{seen:#?}"
    );
}

/// Kubelet's gRPC probes speak neither TLS nor bearer auth. With TLS and tokens on the API
/// port, `--health-listen` answers them in plaintext: readiness (`""`) follows the store and
/// liveness does not, so a Redis outage takes replicas out of their Service without restarting
/// them, and they come back when it answers again.
#[test]
fn the_health_port_answers_plaintext_probes_and_readiness_follows_the_store() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let dir = tempfile::tempdir().unwrap();
    let ca = lanes_tests::certs::TestCa::new("lanes-test-ca");
    let (cert, key) = ca.server().write(dir.path(), "server");
    let mut redis = lanes_tests::redis_server::RedisServer::start();
    let mut child = Killed(
        lanes()
            .args([
                "coordinator",
                "--listen",
                "127.0.0.1:0",
                "--health-listen",
                "127.0.0.1:0",
                "--reaper-delay-s",
                "1",
            ])
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .env("LANES_REDIS", redis.url())
            .env("LANES_CLIENT_TOKEN", "very-secret-client")
            .env("LANES_LANE_TOKEN", "very-secret-lane")
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let rx = stderr_lines(&mut child.0);
    let (line, _) = until_line(&rx, &mut child.0, "health", |l| {
        l.contains("health service listening") && l.contains("addr=")
    });
    let health = addr_of(&line);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{health}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        // The port serves health and nothing else: the API is only on the TLS port.
        let refused = lanes_common::proto::campaign_service_client::CampaignServiceClient::new(
            channel.clone(),
        )
        .list(lanes_common::proto::ListRequest {})
        .await
        .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unimplemented, "{refused:?}");
        let mut client = HealthClient::new(channel);
        let mut check = async |service: &str| {
            client
                .check(HealthCheckRequest {
                    service: service.into(),
                })
                .await
                .map(|r| r.into_inner().status())
        };
        for service in [
            "",
            "liveness",
            "lanes.v1.LaneService",
            "lanes.v1.CampaignService",
        ] {
            assert_eq!(
                check(service).await.unwrap(),
                ServingStatus::Serving,
                "{service:?}"
            );
        }
        let unknown = check("no.such.Service").await.unwrap_err();
        assert_eq!(unknown.code(), tonic::Code::NotFound);

        // Redis dies: readiness goes NOT_SERVING, liveness stays SERVING.
        redis.kill9();
        let deadline = Instant::now() + Duration::from_secs(30);
        while check("").await.unwrap() != ServingStatus::NotServing {
            assert!(Instant::now() < deadline, "readiness ignored a dead store");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(check("liveness").await.unwrap(), ServingStatus::Serving);
        assert_eq!(
            check("lanes.v1.LaneService").await.unwrap(),
            ServingStatus::NotServing
        );

        // And back.
        redis.restart();
        let deadline = Instant::now() + Duration::from_secs(30);
        while check("").await.unwrap() != ServingStatus::Serving {
            assert!(
                Instant::now() < deadline,
                "readiness stayed down with the store back"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}
