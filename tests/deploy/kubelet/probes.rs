//! Probes: gRPC health, `httpGet`, `tcpSocket` and `exec`, against the mapped ports.

use std::io::{Read, Write};

use super::*;

impl Cluster {
    /// Whether the container's probe (`readinessProbe`, `livenessProbe`, `startupProbe`)
    /// passes now. Panics if the container declares no such probe.
    pub fn probe(&self, pod: &Pod, sandbox: &Sandbox, container: &str, which: &str) -> bool {
        let c = pod.container(container);
        let p = &c[which];
        assert!(
            p.is_object(),
            "{}/{container} declares no {which}",
            pod.name
        );
        let local = |port: &Value| self.port(&pod.name, named_port(&pod.spec, port));
        if let Some(g) = p.get("grpc") {
            let port = local(&g["port"]);
            let service = g["service"].as_str().unwrap_or_default().to_owned();
            return grpc_serving(port, &service);
        }
        if let Some(h) = p.get("httpGet") {
            let port = local(&h["port"]);
            let path = h["path"].as_str().unwrap_or("/");
            return http_ok(port, path);
        }
        if let Some(t) = p.get("tcpSocket") {
            return std::net::TcpStream::connect(("127.0.0.1", local(&t["port"]))).is_ok();
        }
        if let Some(e) = p.get("exec") {
            let argv: Vec<String> = items(&e["command"])
                .iter()
                .map(|s| str_of(s, "a probe argument").to_owned())
                .collect();
            let argv = self.argv(pod, sandbox, &argv);
            return self
                .run(sandbox, &argv, Duration::from_secs(30))
                .0
                .success();
        }
        panic!(
            "{which} of {}/{container}: kind not emulated: {p}",
            pod.name
        )
    }

    /// Waits until the probe passes.
    pub fn wait_probe(
        &self,
        pod: &Pod,
        sandbox: &Sandbox,
        running: &mut Running,
        container: &str,
        which: &str,
    ) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.probe(pod, sandbox, container, which) {
            if let Some(exit) = running.child.try_wait().unwrap() {
                panic!(
                    "{}/{container} exited ({exit}) before its {which} passed:\n{}",
                    pod.name,
                    running.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{}/{container}: {which} did not pass within a minute:\n{}",
                pod.name,
                running.output()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A gRPC health check on a plaintext port: SERVING or not.
fn grpc_serving(port: u16, service: &str) -> bool {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let Ok(channel) =
            tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
                .unwrap()
                .connect_timeout(Duration::from_secs(1))
                .connect()
                .await
        else {
            return false;
        };
        let answer = tokio::time::timeout(
            Duration::from_secs(2),
            HealthClient::new(channel).check(HealthCheckRequest {
                service: service.to_owned(),
            }),
        )
        .await;
        matches!(answer, Ok(Ok(r)) if r.get_ref().status() == ServingStatus::Serving)
    })
}

/// An HTTP GET answered 2xx or 3xx (what the kubelet counts as success).
fn http_ok(port: u16, path: &str) -> bool {
    let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if conn.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    if conn.read_exact(&mut head).is_err() {
        return false;
    }
    matches!(&head[9..10], b"2" | b"3")
}
