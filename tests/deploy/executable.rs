//! The manifests are executable: the dev and prod builds run, through the miniature kubelet,
//! as Redis, the coordinator replicas, a worker on a labelled VM host and the submit Job, with
//! the secrets `deploy/README.md` tells an operator to create. The campaign the Job submits
//! must end done; every probe must pass; the worker's preStop must drain it and SIGTERM stop
//! it; and no secret may reach a log.
//!
//! Under prod, Redis is three nodes with a Sentinel beside each: after the campaign, the
//! master's node is lost with its disk (its pod, made again, must wait for the failover and
//! join as a replica), then every pod at once (the last master must be master again). The
//! coordinators must follow, and the campaign's state survive both.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lanes_tests::certs::TestCa;
use lanes_tests::s3_server::S3Server;

use crate::kubelet::{Cluster, Pod, Running, Sandbox, SecretData};
use crate::redis::Redis;
use crate::tools::{kustomize, objects};

/// The VM host the worker DaemonSet runs on, labelled as `deploy/README.md` says.
const VM_HOST: &str = "vm-host-1";
const VM_HOST_LABELS: [(&str, &str); 1] = [("lanes.dev/vm-host", "true")];

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn secret(pairs: &[(&str, &[u8])]) -> SecretData {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect()
}

/// The secrets of `deploy/README.md`, with fresh values.
struct Secrets {
    all: BTreeMap<String, SecretData>,
    /// Values that must never reach a log.
    values: Vec<String>,
    /// The Redis password (Secret lanes-redis-auth).
    redis_password: String,
    ca: Option<TestCa>,
}

/// The Secrets an overlay needs, made fresh; with `s3`, the artifact store's (prod's).
fn secrets(tls: bool, s3: Option<&S3Server>) -> Secrets {
    let client = random_hex(24);
    let lane = random_hex(24);
    let password = random_hex(24);
    let mut all = BTreeMap::new();
    all.insert(
        "lanes-tokens".to_owned(),
        secret(&[
            ("client-token", client.as_bytes()),
            ("lane-token", lane.as_bytes()),
        ]),
    );
    all.insert(
        "lanes-redis-auth".to_owned(),
        secret(&[
            ("auth.conf", format!("requirepass {password}\n").as_bytes()),
            (
                "url",
                format!("redis://:{password}@lanes-redis-0.lanes-redis:6379/").as_bytes(),
            ),
            ("password", password.as_bytes()),
        ]),
    );
    let ca = tls.then(|| {
        let ca = TestCa::new("lanes-test-ca");
        let server = ca.server();
        all.insert(
            "lanes-coordinator-tls".to_owned(),
            secret(&[
                ("tls.crt", server.cert.as_bytes()),
                ("tls.key", server.key.as_bytes()),
                ("ca.crt", ca.pem.as_bytes()),
            ]),
        );
        all.insert(
            "lanes-ca".to_owned(),
            secret(&[("ca.crt", ca.pem.as_bytes())]),
        );
        ca
    });
    let mut values = vec![client, lane, password.clone()];
    if let Some(s3) = s3 {
        let mut env = s3.env();
        env.push(("LANES_ARTIFACT_STORE".into(), s3.url("prod")));
        let pairs: Vec<(&str, &[u8])> = env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_bytes()))
            .collect();
        all.insert("lanes-artifact-store".to_owned(), secret(&pairs));
        values.push(S3Server::SECRET_KEY.to_owned());
    }
    Secrets {
        all,
        values,
        redis_password: password,
        ca,
    }
}

fn replicas(cluster: &Cluster, kind: &str, name: &str) -> u64 {
    cluster.object(kind, name)["spec"]["replicas"]
        .as_u64()
        .unwrap_or(1)
}

fn run_overlay(overlay: &str, tls: bool) {
    let dir = tempfile::tempdir().unwrap();
    // Prod keeps attempts' files in an artifact store: a real S3-compatible server here.
    let s3 = (overlay == "overlays/prod").then(S3Server::start);
    let secrets = secrets(tls, s3.as_ref());
    let mut cluster = Cluster::new(
        objects(&kustomize(overlay)),
        secrets.all.clone(),
        dir.path(),
    );
    // With mutual TLS each VM host holds its own client certificate, CN = its node name, at
    // the hostPath the DaemonSet mounts.
    if let Some(ca) = &secrets.ca {
        let host_tls = cluster.node_path(VM_HOST, "/etc/lanes/worker-tls");
        std::fs::create_dir_all(&host_tls).unwrap();
        let pair = ca.client(VM_HOST);
        std::fs::write(host_tls.join("tls.crt"), &pair.cert).unwrap();
        std::fs::write(host_tls.join("tls.key"), &pair.key).unwrap();
    }

    // Redis: under dev one StatefulSet pod; under prod three, with their init containers,
    // each a Redis and a Sentinel, settled on lanes-redis-0 as the master.
    let mut redis = Redis::start(&mut cluster, &secrets.redis_password);
    assert_eq!(redis.len(), if tls { 3 } else { 1 });
    assert_eq!(redis.replicated(), tls);
    if redis.replicated() {
        assert_eq!(redis.master(), 0, "{}", redis.describe());
    }

    // The coordinator replicas, each ready (store reachable) and live by its probes.
    let n = replicas(&cluster, "Deployment", "lanes-coordinator");
    assert!(n >= 1);
    let mut coordinators: Vec<(Pod, Sandbox, Running)> = Vec::new();
    for i in 0..n {
        let pod = cluster.pod(
            "Deployment",
            "lanes-coordinator",
            &format!("lanes-coordinator-{i}"),
            &format!("node-{i}"),
            &[],
        );
        let sandbox = cluster.sandbox(&pod, "coordinator");
        let mut running = cluster.start(&pod, &sandbox, "coordinator");
        if pod.container("coordinator").get("startupProbe").is_some() {
            cluster.wait_probe(&pod, &sandbox, &mut running, "coordinator", "startupProbe");
        }
        cluster.wait_probe(
            &pod,
            &sandbox,
            &mut running,
            "coordinator",
            "readinessProbe",
        );
        assert!(cluster.probe(&pod, &sandbox, "coordinator", "livenessProbe"));
        coordinators.push((pod, sandbox, running));
    }

    // The worker on the VM host: its init containers, then the worker, ready by its probe.
    let worker_pod = cluster.pod(
        "DaemonSet",
        "lanes-worker",
        "lanes-worker-vm-host-1",
        VM_HOST,
        &VM_HOST_LABELS,
    );
    let tolerations = worker_pod.spec()["tolerations"].to_string();
    assert!(
        tolerations.contains("lanes.dev/vm-host"),
        "the worker must tolerate the VM hosts' taint: {tolerations}"
    );
    for init in worker_pod.init_containers() {
        let sandbox = cluster.sandbox(&worker_pod, &init);
        let argv = cluster.container_argv(&worker_pod, &sandbox, &init);
        if is_root() {
            let (status, out) = cluster.run(&sandbox, &argv, Duration::from_secs(30));
            assert!(status.success(), "init container {init}: {argv:?}\n{out}");
        } else {
            eprintln!("!!! not root: init container {init} ({argv:?}) was NOT run");
        }
    }
    let worker_box = cluster.sandbox(&worker_pod, "worker");
    let mut worker = cluster.start(&worker_pod, &worker_box, "worker");
    cluster.wait_probe(
        &worker_pod,
        &worker_box,
        &mut worker,
        "worker",
        "readinessProbe",
    );

    // The submit Job's pod runs to its end and the campaign it submitted ends done.
    let job_pod = cluster.pod(
        "Job",
        "lanes-submit-smoke",
        "lanes-submit-smoke-x1",
        "node-a",
        &[],
    );
    let job_box = cluster.sandbox(&job_pod, "submit");
    let job_argv = cluster.container_argv(&job_pod, &job_box, "submit");
    let (status, out) = cluster.run(&job_box, &job_argv, Duration::from_secs(60));
    assert!(
        status.success(),
        "the submit Job failed: {job_argv:?}\n{out}"
    );
    let campaign: toml::Table = toml::from_str(
        cluster.object("ConfigMap", "lanes-campaign-smoke")["data"]["campaign.toml"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let id = campaign["id"].as_str().unwrap().to_owned();
    assert!(out.contains(&format!("{id} submitted")), "{out}");

    // The dashboard answers on its port: its login page in plaintext under dev; under prod
    // it speaks TLS only, so a plaintext request gets no page.
    let ui = cluster.port("lanes-coordinator-0", 7780);
    let page = std::net::TcpStream::connect(("127.0.0.1", ui)).and_then(|mut s| {
        use std::io::{Read, Write};
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(b"GET /login HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        Ok(String::from_utf8_lossy(&answer).into_owned())
    });
    let page = page.expect("the dashboard port is open");
    if tls {
        assert!(
            !page.starts_with("HTTP/1.1 200"),
            "plaintext under TLS: {page}"
        );
    } else {
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
        assert!(page.contains("Client token"), "{page}");
    }

    // Its status, asked the way the Job connects (the same coordinator, token and CA).
    let job_args: Vec<String> = job_pod.container("submit")["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(job_args[0], "submit");
    let mut status_args = vec![
        "lanes".to_owned(),
        "status".to_owned(),
        id.clone(),
        "--json".to_owned(),
    ];
    status_args.extend(job_args[2..].iter().cloned());
    let status_argv = cluster.argv(&job_pod, &job_box, &status_args);
    let status = || {
        let (ok, out) = cluster.run(&job_box, &status_argv, Duration::from_secs(30));
        assert!(ok.success(), "{out}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let last = loop {
        let st = status();
        if st["state"] == "done" {
            break st;
        }
        assert!(
            st["state"] == "running" && Instant::now() < deadline,
            "the campaign did not end done: {st}\nworker:\n{}",
            worker.output()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(last["trials_final"], last["trials_total"], "{last}");
    assert!(last["trials_total"].as_u64().unwrap() > 0, "{last}");

    // The artifacts are on the VM host's hostPath, where the next pod finds them.
    let artifacts = cluster
        .node_path(VM_HOST, "/var/lib/lanes/artifacts")
        .join(&id);
    assert!(
        artifacts.is_dir(),
        "no artifacts at {}",
        artifacts.display()
    );
    assert!(cluster.node_path(VM_HOST, "/var/lib/lanes/outbox").is_dir());
    // Under prod each attempt's folder is in the artifact store too, with its manifest.
    if let Some(s3) = &s3 {
        let keys = s3.keys(&format!("prod/{id}/"));
        assert!(
            keys.iter().any(|k| k.ends_with("/manifest.json")),
            "no attempt in the artifact store: {keys:?}"
        );
    }

    // Prod: the Redis master's node is lost, then every Redis pod at once.
    if redis.replicated() {
        // A write each time: a one-time dashboard login code, acknowledged once a replica
        // has it (--redis-wait 1).
        let mut link_args = vec!["lanes".to_owned(), "ui-link".to_owned(), id.clone()];
        link_args.extend(job_args[2..].iter().cloned());
        let link_argv = cluster.argv(&job_pod, &job_box, &link_args);
        let write = || {
            let (ok, out) = cluster.run(&job_box, &link_argv, Duration::from_secs(60));
            assert!(
                ok.success(),
                "a write through the coordinators failed:\n{out}"
            );
            assert!(out.contains("/login?code="), "{out}");
        };
        survive_redis_failures(&cluster, &mut redis, &mut coordinators, &status, &write);
    }

    // The preStop drains the worker, then SIGTERM stops it within its grace period.
    let hook: Vec<String> =
        worker_pod.container("worker")["lifecycle"]["preStop"]["exec"]["command"]
            .as_array()
            .expect("the worker has an exec preStop")
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect();
    let hook_argv = cluster.argv(&worker_pod, &worker_box, &hook);
    let (ok, said) = cluster.run(&worker_box, &hook_argv, Duration::from_secs(60));
    assert!(ok.success(), "the preStop failed: {hook_argv:?}\n{said}");
    assert!(said.contains("drained"), "{said}");
    let grace = worker_pod.spec()["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap_or(30);
    let worker_log = worker.log.clone();
    let exit = worker.terminate(Duration::from_secs(grace));
    assert!(exit.success(), "{exit}:\n{}", read(&worker_log));
    for (_, _, c) in coordinators {
        let log = c.log.clone();
        let exit = c.terminate(Duration::from_secs(60));
        assert!(exit.success(), "{exit}:\n{}", read(&log));
    }
    redis.terminate();

    // No secret reached a log or an artifact.
    let mut leaked = Vec::new();
    for file in walk(dir.path()) {
        let is_log = file.extension().is_some_and(|e| e == "log");
        let is_artifact = file.starts_with(cluster.node_path(VM_HOST, "/var/lib/lanes"));
        if !(is_log || is_artifact) {
            continue;
        }
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        for v in &secrets.values {
            if text.contains(v.as_str()) {
                leaked.push(file.display().to_string());
            }
        }
    }
    assert!(leaked.is_empty(), "a secret reached {leaked:?}");
}

/// Under prod: the master's node is lost with its disk, then every Redis pod at once. After
/// each, the coordinators write to the master the Sentinels name, and the campaign is still
/// done.
fn survive_redis_failures(
    cluster: &Cluster,
    redis: &mut Redis,
    coordinators: &mut [(Pod, Sandbox, Running)],
    status: &dyn Fn() -> serde_json::Value,
    write: &dyn Fn(),
) {
    // The coordinator's master, and the failovers it followed.
    let link = |st: &serde_json::Value| {
        (
            st["redis_link"]["master"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            st["redis_link"]["failovers"].as_u64().unwrap_or(0),
        )
    };
    let st = status();
    assert_eq!(link(&st), (redis.addr(0), 0), "{st}");
    write();

    // The master's node is lost with its disk. Made again, the pod must not start as an empty
    // master while the Sentinels name it: its init container fails until they have failed
    // over to a replica, then it starts as that replica's replica.
    let old = redis.master();
    redis.lose(cluster, old, true);
    let (refused, said) = redis.restart(cluster, old, Duration::from_secs(120));
    assert!(
        refused.first().is_some_and(|r| r.contains("(a lost disk)")),
        "the init container did not refuse an empty master: {refused:#?}\n{said}"
    );
    let new = redis.master();
    assert_ne!(new, old, "{}", redis.describe());
    let want = format!(
        "starts as a replica of {} (named by the Sentinels)",
        redis.addr(new)
    );
    assert!(said.contains(&want), "{said}");
    redis.wait_settled(Duration::from_secs(60));
    assert!(
        (0..redis.len()).any(|i| redis.log(i, "sentinel").contains("+switch-master")),
        "no Sentinel logged the failover"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = status();
        if link(&st).0 == redis.addr(new) && link(&st).1 >= 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the coordinator did not follow the failover to {}: {st}",
            redis.addr(new)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    still_serving(cluster, coordinators, status, write);

    // Every pod at once, disks kept (a power cut). Each init container finds no Sentinel
    // running and takes the master its own Sentinel named last: the same one for all.
    for i in 0..redis.len() {
        redis.lose(cluster, i, false);
    }
    for i in 0..redis.len() {
        let (ok, said) = redis.init(cluster, i);
        assert!(ok, "lanes-redis-{i}: {said}");
        let role = match i == new {
            true => "the master".to_owned(),
            false => format!("a replica of {}", redis.addr(new)),
        };
        let want = format!("starts as {role} (named by this pod's Sentinel when it last ran)");
        assert!(said.contains(&want), "lanes-redis-{i}: {said}");
    }
    redis.start_containers(cluster, 0..redis.len());
    redis.wait_settled(Duration::from_secs(60));
    assert_eq!(redis.master(), new, "{}", redis.describe());
    still_serving(cluster, coordinators, status, write);
    assert_eq!(link(&status()).0, redis.addr(new));
}

/// Every coordinator is ready again, takes a write, and the campaign is still done.
fn still_serving(
    cluster: &Cluster,
    coordinators: &mut [(Pod, Sandbox, Running)],
    status: &dyn Fn() -> serde_json::Value,
    write: &dyn Fn(),
) {
    for (pod, sandbox, running) in coordinators.iter_mut() {
        cluster.wait_probe(pod, sandbox, running, "coordinator", "readinessProbe");
    }
    write();
    let st = status();
    assert_eq!(st["state"], "done", "{st}");
    assert_eq!(st["trials_final"], st["trials_total"], "{st}");
}

fn read(p: &std::path::Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.is_file() {
                out.push(p);
            }
        }
    }
    out
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

#[test]
fn the_dev_overlay_runs_a_campaign_to_done_as_its_manifests_declare() {
    run_overlay("overlays/dev", false);
}

#[test]
fn the_prod_overlay_runs_a_campaign_to_done_over_mutual_tls_as_its_manifests_declare() {
    run_overlay("overlays/prod", true);
}
