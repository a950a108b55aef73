//! Artifact upload: `cargo bench -p lanes-tests --bench artifact_upload`.
//!
//! What uploading an attempt's folder adds before its outcome is sent, for 1 MB and 100 MB
//! of artifacts (one large file and a few small ones, as a trajectory and logs), measured in
//! the same run against the baseline of copying the same folder to a local mount
//! (`file://`, the same code path: read, hash, write, manifest). The S3 figure is against a
//! real S3-compatible server on loopback (moto, which `./scripts/test.sh` installs): a Python
//! server, so it is a lower bound of what a cloud store on a fast network does. Prints the
//! median of `LANES_BENCH_ROUNDS` (default 5) uploads per size and store, the throughput, and
//! the S3 time as a ratio of the local copy's.

use std::path::Path;
use std::time::{Duration, Instant};

use lanes_artifacts::{ArtifactStore, StoreOptions};
use lanes_common::ids::{AttemptTag, CampaignId, Token, TrialId};
use lanes_tests::s3_server::S3Server;

fn folder(dir: &Path, bytes: usize) {
    std::fs::create_dir_all(dir.join("trajectory")).unwrap();
    for i in 0..8 {
        std::fs::write(
            dir.join(format!("trajectory/step-{i}.json")),
            vec![b'{'; 2048],
        )
        .unwrap();
    }
    std::fs::write(dir.join("driver.stderr"), vec![b'x'; 4096]).unwrap();
    // Not compressible, as screenshots and recordings are not.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let big: Vec<u8> = (0..bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(dir.join("recording.bin"), big).unwrap();
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn time(store: &ArtifactStore, dir: &Path, rounds: u32) -> Duration {
    let mut took = Vec::new();
    for i in 0..rounds {
        let tag = AttemptTag::new(
            CampaignId::new("bench").unwrap(),
            Token {
                trial_id: TrialId::new("t.r0.a").unwrap(),
                attempt: i + 1,
            },
        );
        let t = Instant::now();
        store.upload_attempt(dir, &tag).await.unwrap();
        took.push(t.elapsed());
    }
    median(took)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rounds: u32 = std::env::var("LANES_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let s3 = S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let s3_store = ArtifactStore::open(
        &s3.url("bench"),
        StoreOptions {
            settings: s3.env(),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let local = ArtifactStore::open(
        &format!("file://{}/mount", tmp.path().display()),
        StoreOptions::default(),
    )
    .unwrap();
    println!(
        "artifact upload, median of {rounds} per figure (an attempt folder: one large file, 8 trajectory steps, a stderr)"
    );
    println!(" size      local copy (file://)   S3 (moto, loopback)   S3/local");
    for (label, bytes) in [("1 MB", 1_000_000usize), ("100 MB", 100_000_000)] {
        let dir = tmp.path().join(label.replace(' ', ""));
        folder(&dir, bytes);
        let l = time(&local, &dir, rounds).await;
        let s = time(&s3_store, &dir, rounds).await;
        let mbps = |d: Duration| bytes as f64 / 1e6 / d.as_secs_f64();
        println!(
            " {label:<8} {:>9.1} ms {:>7.0} MB/s  {:>9.1} ms {:>6.0} MB/s  {:>6.1}x",
            l.as_secs_f64() * 1e3,
            mbps(l),
            s.as_secs_f64() * 1e3,
            mbps(s),
            s.as_secs_f64() / l.as_secs_f64()
        );
    }
}
