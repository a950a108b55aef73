//! The image: `deploy/Containerfile`'s runtime stage, built with buildah around the binary
//! under test, runs `lanes --version` as the image's user through its ENTRYPOINT.
//!
//! This machine reaches no image registry, so the stage is rebuilt `FROM scratch`: its `RUN`
//! lines (apt and useradd, which need the Debian base) are left out, the binary built by the
//! first stage is replaced by the one under test, and the shared libraries it links are copied
//! in. Everything else (`COPY` from the repository, `ENV`, `LABEL`, `USER`, `WORKDIR`,
//! `ENTRYPOINT`, `CMD`) is the stage's own. Where buildah is not installed or cannot run here,
//! the test says so and passes without building: it does not pretend.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::tools::repo;

/// The PATH of the Debian base image, which `FROM scratch` does not have.
const BASE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// buildah with its storage inside `dir`, so the test leaves nothing behind.
fn buildah(dir: &Path) -> Command {
    let mut cmd = Command::new("buildah");
    cmd.arg("--root")
        .arg(dir.join("storage"))
        .arg("--runroot")
        .arg(dir.join("run"))
        .args(["--storage-driver", "vfs"]);
    cmd
}

fn ok(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The runtime stage's instructions, continuation lines joined, comments dropped.
fn runtime_stage(containerfile: &str) -> Vec<String> {
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in containerfile.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                instructions.push(std::mem::take(&mut current));
            }
        }
    }
    let start = instructions
        .iter()
        .rposition(|i| i.to_uppercase().starts_with("FROM "))
        .expect("a FROM line");
    assert!(
        instructions[start].ends_with(" AS runtime"),
        "the last stage is the runtime stage: {}",
        instructions[start]
    );
    instructions[start..].to_vec()
}

/// The shared libraries `binary` loads (and the loader), by absolute path.
fn libraries(binary: &Path) -> Vec<PathBuf> {
    let out = ok(Command::new("ldd").arg(binary)).expect("ldd");
    out.lines()
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with('/'))
                .map(PathBuf::from)
        })
        .collect()
}

/// Whether buildah failed because this machine does not let it (namespaces, mounts), not
/// because of the image.
fn refused_by_machine(error: &str) -> bool {
    let e = error.to_lowercase();
    ["unshare", "operation not permitted", "mount", "namespace"]
        .iter()
        .any(|w| e.contains(w))
}

#[test]
fn the_runtime_stage_runs_lanes_version_as_its_non_root_user() {
    let dir = tempfile::tempdir().unwrap();
    match ok(buildah(dir.path()).arg("--version")) {
        Ok(_) => {}
        Err(e) => {
            eprintln!(
                "!!! SKIPPED, image NOT built: buildah cannot run here ({e}). \
                 ./scripts/test.sh installs it when run as root."
            );
            return;
        }
    }
    let containerfile = std::fs::read_to_string(repo().join("deploy/Containerfile")).unwrap();
    let stage = runtime_stage(&containerfile);

    // The build context: the binary under test, its libraries, and what the stage copies
    // from the repository.
    let context = dir.path().join("context");
    std::fs::create_dir_all(&context).unwrap();
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_lanes"));
    std::fs::copy(&binary, context.join("lanes")).unwrap();
    let mut file = vec!["FROM scratch".to_owned(), format!("ENV PATH={BASE_PATH}")];
    for (i, lib) in libraries(&binary).iter().enumerate() {
        let name = format!("lib{i}");
        std::fs::copy(lib, context.join(&name)).unwrap();
        file.push(format!("COPY {name} {}", lib.display()));
    }
    let mut entrypoint_binary = false;
    for instruction in &stage[1..] {
        let word = instruction
            .split_whitespace()
            .next()
            .unwrap()
            .to_uppercase();
        match word.as_str() {
            "RUN" => continue,
            "COPY" if instruction.contains("--from=") => {
                let dest = instruction.split_whitespace().last().unwrap();
                assert!(
                    instruction.contains("/target/release/lanes"),
                    "the one file from another stage is the lanes binary: {instruction}"
                );
                file.push(format!("COPY lanes {dest}"));
                entrypoint_binary = true;
            }
            "COPY" | "ADD" => {
                let words: Vec<&str> = instruction.split_whitespace().collect();
                for src in &words[1..words.len() - 1] {
                    let to = context.join(src);
                    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                    std::fs::copy(repo().join(src), &to)
                        .unwrap_or_else(|e| panic!("{instruction}: {src}: {e}"));
                }
                file.push(instruction.clone());
            }
            _ => file.push(instruction.clone()),
        }
    }
    assert!(
        entrypoint_binary,
        "the runtime stage copies no lanes binary"
    );
    std::fs::write(context.join("Containerfile"), file.join("\n") + "\n").unwrap();

    let tag = format!("localhost/lanes-image-test:{}", std::process::id());
    let built = ok(buildah(dir.path())
        .args(["bud", "--isolation", "chroot", "-t", &tag, "-f"])
        .arg(context.join("Containerfile"))
        .arg(&context));
    if let Err(e) = &built
        && refused_by_machine(e)
    {
        eprintln!("!!! SKIPPED, image NOT built: buildah cannot build on this machine:\n{e}");
        return;
    }
    built.unwrap();

    let inspect: serde_json::Value = serde_json::from_str(
        &ok(buildah(dir.path()).args(["inspect", "--type", "image", &tag])).unwrap(),
    )
    .unwrap();
    let config = &inspect["OCIv1"]["config"];
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["lanes"]),
        "{config}"
    );
    let user = config["User"].as_str().unwrap_or_default().to_owned();
    let uid = user.split(':').next().unwrap();
    assert!(
        uid.parse::<u32>().is_ok_and(|u| u != 0),
        "the image's user must be numeric and not root: {user:?}"
    );
    for label in [
        "org.opencontainers.image.title",
        "org.opencontainers.image.source",
        "org.opencontainers.image.licenses",
        "org.opencontainers.image.version",
    ] {
        assert!(
            config["Labels"][label]
                .as_str()
                .is_some_and(|v| !v.is_empty()),
            "no {label}: {config}"
        );
    }

    // Run the ENTRYPOINT with `--version`, as the image's user.
    let container = ok(buildah(dir.path()).args(["from", &tag]))
        .unwrap()
        .trim()
        .to_owned();
    let mut argv: Vec<String> = config["Entrypoint"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    argv.push("--version".to_owned());
    let said = ok(buildah(dir.path())
        .args([
            "run",
            "--isolation",
            "chroot",
            "--user",
            &user,
            &container,
            "--",
        ])
        .args(&argv));
    let _ = ok(buildah(dir.path()).args(["rm", &container]));
    let _ = ok(buildah(dir.path()).args(["rmi", "-f", &tag]));
    if let Err(e) = &said
        && refused_by_machine(e)
    {
        eprintln!(
            "!!! SKIPPED, image built and inspected but NOT run: buildah cannot run a container \
             on this machine:\n{e}"
        );
        return;
    }
    let said = said.unwrap();
    assert_eq!(
        said.trim(),
        format!("lanes {}", env!("CARGO_PKG_VERSION")),
        "{said}"
    );
}
