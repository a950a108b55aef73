//! Network: pods scheduled with their DNS names and ports, addresses mapped to loopback
//! ports, and the NetworkPolicies that must admit every connection a pod makes.

use super::*;

impl Cluster {
    /// Schedules pod `name` of workload `kind`/`workload` on `node` (labelled `node_labels`,
    /// which must satisfy the pod's nodeSelector), and registers its DNS names and ports.
    pub fn pod(
        &mut self,
        kind: &str,
        workload: &str,
        name: &str,
        node: &str,
        node_labels: &[(&str, &str)],
    ) -> Pod {
        let w = self.object(kind, workload).clone();
        let template = &w["spec"]["template"];
        let spec = template["spec"].clone();
        if let Some(selector) = spec["nodeSelector"].as_object() {
            for (k, v) in selector {
                assert!(
                    node_labels.iter().any(|(nk, nv)| nk == k && v == nv),
                    "{kind}/{workload} selects nodes by {k}={v}; node {node} has {node_labels:?}"
                );
            }
        }
        for c in items(&spec["containers"])
            .iter()
            .chain(items(&spec["initContainers"]))
        {
            for p in items(&c["ports"]) {
                let port = p["containerPort"].as_u64().expect("containerPort") as u16;
                self.ports.insert((name.to_owned(), port), free_port());
            }
        }
        let own: BTreeMap<u16, u16> = self
            .ports
            .keys()
            .filter(|(p, _)| p == name)
            .map(|(_, port)| (*port, *port))
            .collect();
        self.names
            .insert(name.to_owned(), (name.to_owned(), own.clone()));
        if let Some(service) = w["spec"]["serviceName"].as_str() {
            for host in qualified(&format!("{name}.{service}")) {
                self.names.insert(host, (name.to_owned(), own.clone()));
            }
        }
        let labels = template["metadata"]["labels"].clone();
        self.labels.insert(name.to_owned(), labels.clone());
        let services: Vec<Value> = self.all("Service").into_iter().cloned().collect();
        for svc in &services {
            let selector = &svc["spec"]["selector"];
            let Some(sel) = selector.as_object() else {
                continue;
            };
            if !sel.iter().all(|(k, v)| labels[k] == *v) {
                continue;
            }
            let mut translate = BTreeMap::new();
            for p in items(&svc["spec"]["ports"]) {
                let port = p["port"].as_u64().expect("a service port") as u16;
                let target = match &p["targetPort"] {
                    Value::Null => port,
                    t => named_port(&spec, t),
                };
                translate.insert(port, target);
            }
            let svc_name = str_of(&svc["metadata"]["name"], "service name");
            for host in qualified(svc_name) {
                // A Service stands for its first ready pod: the one scheduled first.
                self.names
                    .entry(host)
                    .or_insert_with(|| (name.to_owned(), translate.clone()));
            }
        }
        let root = self.root.join("pods").join(name);
        std::fs::create_dir_all(&root).unwrap();
        Pod {
            name: name.to_owned(),
            node: node.to_owned(),
            spec,
            root,
        }
    }

    /// The loopback port of `pod`'s container port `port`.
    pub fn port(&self, pod: &str, port: u16) -> u16 {
        *self
            .ports
            .get(&(pod.to_owned(), port))
            .unwrap_or_else(|| panic!("pod {pod} declares no container port {port}"))
    }

    /// `value` with its addresses mapped to loopback ports.
    pub(super) fn map_addresses(&self, pod: &str, value: &str) -> String {
        let mut out = value.to_owned();
        // Listening on every interface, or dialling the pod's own loopback: its own port.
        for own in ["0.0.0.0:", "localhost:"] {
            while let Some(i) = out.find(own) {
                let digits: String = out[i + own.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                let port: u16 = digits
                    .parse()
                    .unwrap_or_else(|_| panic!("a port after {own}"));
                let local = self.port(pod, port);
                out.replace_range(
                    i..i + own.len() + digits.len(),
                    &format!("127.0.0.1:{local}"),
                );
            }
        }
        // Longest names first, so `a.b` is not taken for `a`.
        let mut names: Vec<&String> = self.names.keys().collect();
        names.sort_by_key(|n| std::cmp::Reverse(n.len()));
        for host in names {
            let (target, translate) = &self.names[host];
            let mut from = 0;
            while let Some(at) = out[from..].find(&format!("{host}:")) {
                let i = from + at;
                let before = out[..i].chars().last();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-') {
                    from = i + host.len();
                    continue;
                }
                let rest = &out[i + host.len() + 1..];
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                let port: u16 = digits.parse().expect("a port after a service name");
                let container_port = *translate
                    .get(&port)
                    .unwrap_or_else(|| panic!("{host} has no port {port}"));
                assert!(
                    self.admits(pod, target, container_port),
                    "the NetworkPolicies do not let pod {pod} reach {host}:{port} (pod {target}, \
                     port {container_port})"
                );
                let local = self.port(target, container_port);
                let replacement = format!("127.0.0.1:{local}");
                out.replace_range(i..i + host.len() + 1 + digits.len(), &replacement);
                from = i + replacement.len();
            }
        }
        out
    }

    /// Whether the NetworkPolicies let pod `from` open a connection to `port` of pod `to`: no
    /// policy selects `to`, or one of those that do has an ingress rule admitting `from`'s
    /// labels (same namespace) on that port.
    fn admits(&self, from: &str, to: &str, port: u16) -> bool {
        let (Some(source), Some(target)) = (self.labels.get(from), self.labels.get(to)) else {
            panic!("unknown pod {from} or {to}");
        };
        let policies: Vec<&Value> = self
            .all("NetworkPolicy")
            .into_iter()
            .filter(|p| selects(&p["spec"]["podSelector"], target))
            .filter(|p| {
                let types = items(&p["spec"]["policyTypes"]);
                types.is_empty() || types.iter().any(|t| t == "Ingress")
            })
            .collect();
        if policies.is_empty() {
            return true;
        }
        policies.iter().any(|p| {
            items(&p["spec"]["ingress"]).iter().any(|rule| {
                let ports = items(&rule["ports"]);
                let port_ok = ports.is_empty()
                    || ports.iter().any(|pp| {
                        pp["protocol"].as_str().unwrap_or("TCP") == "TCP"
                            && match &pp["port"] {
                                Value::Null => true,
                                n => named_port(&self.pod_spec_of(to), n) == port,
                            }
                    });
                let peers = items(&rule["from"]);
                let peer_ok = rule.get("from").is_none()
                    || peers.iter().any(|peer| {
                        assert!(
                            peer.get("ipBlock").is_none() || peer.get("podSelector").is_none(),
                            "peer not emulated: {peer}"
                        );
                        match (peer.get("podSelector"), peer.get("namespaceSelector")) {
                            (Some(ps), None) => selects(ps, source),
                            (ps, Some(ns)) => {
                                let ours = serde_json::json!({
                                    "kubernetes.io/metadata.name": NAMESPACE
                                });
                                selects(ns, &ours) && ps.is_none_or(|ps| selects(ps, source))
                            }
                            (None, None) => false,
                        }
                    });
                port_ok && peer_ok
            })
        })
    }

    fn pod_spec_of(&self, pod: &str) -> Value {
        // Only ports matter here: any workload whose template has this pod's labels.
        let labels = &self.labels[pod];
        self.objects
            .iter()
            .find(|o| o["spec"]["template"]["metadata"]["labels"] == *labels)
            .map(|o| o["spec"]["template"]["spec"].clone())
            .unwrap_or_default()
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether a label selector (`matchLabels` only; `{}` selects everything) selects `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    assert!(
        selector.get("matchExpressions").is_none(),
        "matchExpressions are not emulated: {selector}"
    );
    selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| labels[k] == *v))
}

/// The names a Service (or a pod's DNS name) answers to in the namespace.
fn qualified(name: &str) -> Vec<String> {
    vec![
        name.to_owned(),
        format!("{name}.{NAMESPACE}"),
        format!("{name}.{NAMESPACE}.svc"),
        format!("{name}.{NAMESPACE}.svc.cluster.local"),
    ]
}
