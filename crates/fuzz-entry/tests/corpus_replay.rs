//! Replays every file of every fuzz corpus (`fuzz/corpus/<target>/`) through its target's
//! body, on the stable toolchain, so `cargo test --workspace` keeps every input the fuzzers
//! kept (crashes found and fixed among them) passing. The fuzzing itself is `cargo +nightly
//! fuzz run <target>` (docs/SECURITY.md).

use std::path::PathBuf;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

#[test]
fn every_corpus_file_replays_without_a_panic() {
    for (name, body) in lanes_fuzz_entry::TARGETS {
        let dir = fuzz_dir().join("corpus").join(name);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{}: no seed inputs", dir.display());
        for file in files {
            let data = std::fs::read(&file).expect("a corpus file");
            let replayed = std::panic::catch_unwind(|| body(&data));
            assert!(replayed.is_ok(), "{name}: {} panics", file.display());
        }
    }
}

#[test]
fn every_fuzz_target_is_replayed() {
    let dir = fuzz_dir().join("fuzz_targets");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let name = e
                .expect("a directory entry")
                .file_name()
                .into_string()
                .ok()?;
            Some(name.strip_suffix(".rs")?.to_owned())
        })
        .collect();
    on_disk.sort();
    let replayed: Vec<&str> = lanes_fuzz_entry::TARGETS.iter().map(|(n, _)| *n).collect();
    assert_eq!(on_disk, replayed, "fuzz/fuzz_targets and TARGETS differ");
}
