//! Every kustomization under `deploy/k8s` builds, and validates against the Kubernetes 1.37
//! schemas in strict mode (no unknown field anywhere), with no warning and nothing deprecated.

use std::process::Command;

use crate::tools::{kustomize, objects, repo, venv_bin, with_stdin};

const K8S: &str = "1.37.0";

/// What the cluster is given: the base and both overlays.
const BUILDS: [&str; 3] = ["base", "overlays/dev", "overlays/prod"];

#[test]
fn every_overlay_builds_and_validates_strictly_against_kubernetes_1_37() {
    for dir in BUILDS {
        let yaml = kustomize(dir);
        let docs = objects(&yaml);
        assert!(!docs.is_empty(), "{dir} builds nothing");

        // kubernetes-validate reads the stream as `kubectl kustomize | kubernetes-validate -`
        // would. It exits 0 on a warning (an API version it has no schema for, which is what a
        // removed API looks like), so only `passed` lines are accepted, one per object.
        let out = with_stdin(
            Command::new(venv_bin().join("kubernetes-validate")).args(["-k", K8S, "--strict", "-"]),
            yaml.as_bytes(),
        );
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{dir}:\n{said}");
        let lines: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
        let not_passed: Vec<&&str> = lines
            .iter()
            .filter(|l| !(l.starts_with("INFO") && l.contains(" passed for resource ")))
            .collect();
        assert!(not_passed.is_empty(), "{dir}: {not_passed:#?}");
        assert_eq!(
            lines.len(),
            docs.len(),
            "{dir}: one verdict per object:\n{said}"
        );

        let found = deprecated(&docs);
        assert!(
            found.is_empty(),
            "{dir} uses what 1.37 deprecates:\n{found}"
        );
    }
}

/// The optional metrics component builds onto the base (it stays out of the validated
/// overlays: the ServiceMonitor CRD has no bundled schema).
#[test]
fn the_servicemonitor_component_builds_onto_the_base() {
    // kustomize takes only relative paths: a copy of the tree, with an overlay beside it.
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&repo().join("deploy/k8s"), &dir.path().join("k8s"));
    let overlay = dir.path().join("k8s/overlays/with-monitor");
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         resources:\n  - ../dev\ncomponents:\n  - ../../components/servicemonitor\n",
    )
    .unwrap();
    let out = Command::new(venv_bin().join("kubectl"))
        .arg("kustomize")
        .arg(&overlay)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = objects(&String::from_utf8(out.stdout).unwrap());
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert!(kinds.contains(&"ServiceMonitor"), "{kinds:?}");
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Findings of `deprecated.py` (beta APIs, fields the schemas call deprecated), one per line.
fn deprecated(docs: &[serde_json::Value]) -> String {
    let out = with_stdin(
        Command::new(venv_bin().join("python"))
            .arg(repo().join("tests/deploy/deprecated.py"))
            .arg(K8S),
        serde_json::to_string(docs).unwrap().as_bytes(),
    );
    assert!(
        out.status.success(),
        "deprecated.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The deprecation check finds what it looks for, so a clean result means something.
#[test]
fn the_deprecation_check_finds_deprecated_fields_and_beta_apis() {
    let docs = serde_json::json!([
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
         "spec": {"serviceAccount": "a", "containers": [{"name": "c"}]}},
        {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget", "metadata": {"name": "b"}}
    ]);
    let found = deprecated(docs.as_array().unwrap());
    assert!(found.contains("Pod/p.spec.serviceAccount"), "{found}");
    assert!(
        found.contains("PodDisruptionBudget/b: API version policy/v1beta1"),
        "{found}"
    );
}
