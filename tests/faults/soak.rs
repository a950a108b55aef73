//! `LANES_SOAK_S=N`: a randomized mix of every fault for N seconds, on a 10k-trial campaign
//! with 3 workers × 8 lanes and 2 coordinators (their clocks 2 s apart), then the history
//! checker over the whole ledger and a count of the faults injected, by kind. Without the
//! variable it does nothing. `LANES_SOAK_SEED` replays a run's fault sequence.
//!
//! The Redis under it is one server (its faults: restarts, and partitions between a
//! coordinator and Redis through proxies) or a master with two replicas behind three
//! Sentinels (its faults: the master killed or stopped, so failovers, and a replica's disk
//! lost). `LANES_SOAK_REDIS=single|sentinel` chooses; without it the seed does.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::failover::{RedisFault, inject};
use crate::harness::{Cluster, Layout, campaign};
use crate::proxy::Proxy;

/// xorshift64*: enough to pick faults; the seed is printed so a run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn secs(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo * 1000 + self.below((hi - lo) * 1000))
    }
}

/// Faults whatever the Redis.
const KINDS: &[&str] = &[
    "coordinator_kill9",
    "coordinator_sigstop",
    "worker_kill9",
    "worker_sigstop",
    "partition_worker_coordinator",
    "full_disk",
    "amendment",
];
/// Faults of one Redis server.
const SINGLE_KINDS: &[&str] = &["redis_restart", "partition_coordinator_redis"];
/// Faults of a replicated Redis behind Sentinels.
const SENTINEL_KINDS: &[&str] = &[
    "redis_failover_kill9",
    "redis_failover_sigstop",
    "redis_replica_empty_disk",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak() {
    let Some(secs) = std::env::var("LANES_SOAK_S")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        eprintln!("soak: skipped (set LANES_SOAK_S=<seconds> to run it)");
        return;
    };
    let seed = std::env::var("LANES_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                | 1
        });
    eprintln!("soak: {secs} s, seed {seed} (LANES_SOAK_SEED={seed} replays it)");
    let mut rng = Rng(seed);
    let sentinel = match std::env::var("LANES_SOAK_REDIS").as_deref() {
        Ok("sentinel") => true,
        Ok("single") => false,
        Ok(other) => panic!("LANES_SOAK_REDIS is single or sentinel, not {other:?}"),
        Err(_) => (seed >> 1) & 1 == 1,
    };
    let redis_kinds = if sentinel {
        SENTINEL_KINDS
    } else {
        SINGLE_KINDS
    };
    let kinds: Vec<&str> = KINDS.iter().chain(redis_kinds).copied().collect();
    eprintln!(
        "soak: redis {} (LANES_SOAK_REDIS chooses)",
        if sentinel { "sentinel" } else { "single" }
    );
    let mut cl = Cluster::start(Layout {
        coordinators: 2,
        clock_offsets_ms: vec![-1000, 1000],
        redis_proxies: !sentinel,
        sentinel,
    })
    .await;
    // Each worker reaches each replica through a proxy of its own, so one link can be cut.
    let mut links: Vec<Vec<Proxy>> = Vec::new();
    let mut disks = Vec::new();
    for w in 0..3 {
        let mut mine = Vec::new();
        for c in 0..2 {
            mine.push(Proxy::start(cl.coords[c].port).await);
        }
        let mut urls: Vec<String> = mine
            .iter()
            .map(|p| format!("http://127.0.0.1:{}", p.port))
            .collect();
        if w % 2 == 1 {
            urls.reverse();
        }
        let disk = cl.dir.path().join(format!("disk-full-{w}"));
        let fp = disk.display().to_string();
        cl.add_worker(8, &urls, &[("LANES_FAILPOINT_OUTBOX_FULL", &fp)]);
        links.push(mine);
        disks.push(disk);
    }
    let mut tasks = 5000;
    let mut texts = vec![campaign("soak", tasks, [0.05, 0.4], "")];
    cl.submit(0, &texts[0]).await;
    let mut counts: BTreeMap<&str, u32> = kinds.iter().map(|k| (*k, 0)).collect();
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        tokio::time::sleep(rng.secs(1, 4)).await;
        let kind = kinds[rng.below(kinds.len() as u64) as usize];
        let hold = rng.secs(2, 10);
        match kind {
            "coordinator_kill9" => {
                let i = rng.below(2) as usize;
                cl.coords[i].proc.kill9();
                tokio::time::sleep(hold.min(Duration::from_secs(3))).await;
                cl.coords[i].proc.restart();
                cl.coords[i].wait_ready();
            }
            "coordinator_sigstop" => {
                let i = rng.below(2) as usize;
                cl.coords[i].proc.pause();
                tokio::time::sleep(hold).await;
                cl.coords[i].proc.resume();
            }
            "worker_kill9" => {
                let j = rng.below(3) as usize;
                cl.workers[j].kill9();
                tokio::time::sleep(hold.min(Duration::from_secs(3))).await;
                cl.workers[j].restart();
            }
            "worker_sigstop" => {
                let j = rng.below(3) as usize;
                cl.workers[j].pause();
                tokio::time::sleep(hold).await;
                cl.workers[j].resume();
            }
            "redis_restart" => {
                let mut c = cl;
                c = tokio::task::spawn_blocking(move || {
                    c.redis_mut().kill9();
                    std::thread::sleep(Duration::from_millis(500));
                    c.redis_mut().restart();
                    c
                })
                .await
                .unwrap();
                cl = c;
            }
            "redis_failover_kill9" => inject(&mut cl, RedisFault::KillMaster),
            "redis_failover_sigstop" => inject(&mut cl, RedisFault::StopMaster),
            "redis_replica_empty_disk" => inject(&mut cl, RedisFault::EmptyReplica),
            "partition_worker_coordinator" => {
                let (j, c) = (rng.below(3) as usize, rng.below(2) as usize);
                links[j][c].blackhole(true);
                tokio::time::sleep(hold).await;
                links[j][c].blackhole(false);
            }
            "partition_coordinator_redis" => {
                let i = rng.below(2) as usize;
                cl.redis_proxies[i].blackhole(true);
                tokio::time::sleep(hold).await;
                cl.redis_proxies[i].blackhole(false);
            }
            "full_disk" => {
                let j = rng.below(3) as usize;
                std::fs::write(&disks[j], b"").unwrap();
                tokio::time::sleep(hold).await;
                let _ = std::fs::remove_file(&disks[j]);
            }
            "amendment" => {
                if texts.len() > 3 {
                    continue;
                }
                tasks += 100;
                let text = campaign("soak", tasks, [0.05, 0.4], "");
                // Through whichever replica answers (one may be paused or down).
                let mut done = false;
                for i in 0..2 {
                    let mut c = cl.client(i).await;
                    let req = lanes_tests::lane_client::submit_request(&text);
                    if let Ok(Ok(r)) =
                        tokio::time::timeout(Duration::from_secs(20), c.submit(req)).await
                    {
                        assert!(r.into_inner().amended, "the amendment was not recorded");
                        done = true;
                        break;
                    }
                }
                if !done {
                    continue;
                }
                texts.push(text);
            }
            _ => unreachable!(),
        }
        *counts.get_mut(kind).unwrap() += 1;
    }
    eprintln!("soak: faults injected, by kind:");
    for (k, n) in &counts {
        eprintln!("  {k:<30} {n}");
    }
    let st = cl.wait_ended("soak", Duration::from_secs(1800)).await;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let rows = cl.check("soak", &refs).await;
    eprintln!(
        "soak: {} trials, {} rows, state {:?}, counted {}; faults injected: {}",
        st.trials_total,
        rows.len(),
        st.state,
        st.trials_counted,
        counts.values().sum::<u32>()
    );
}
