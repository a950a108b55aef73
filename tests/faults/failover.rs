//! Redis failovers under a running campaign: the coordinators find the master through three
//! Sentinels (`--redis-sentinel`) and acknowledge only what a replica has (`--redis-wait 1`),
//! while the master is killed (twice, once holding writes no replica has), stopped past
//! `down-after-milliseconds`, and a replica loses its disk. The history checker and the
//! workers' ack logs must show every trial once and every acknowledged outcome in the ledger
//! of the master that is left.

use std::time::{Duration, Instant};

use lanes_tests::redis_sentinel::FAILOVER_TIMEOUT_MS;
use tokio::task::block_in_place;

use crate::harness::{Cluster, Layout, campaign};

const END: Duration = Duration::from_secs(300);
/// How long the Sentinels may take to fail over, or the nodes to settle after a fault.
const FAILOVER: Duration = Duration::from_secs(30);
/// Sentinel starts no new failover of a master within twice its failover timeout.
const BETWEEN: Duration = Duration::from_millis(2 * FAILOVER_TIMEOUT_MS + 1_000);

/// One fault of the replicated Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisFault {
    /// kill -9 of the master; it comes back later on its disk, as a replica.
    KillMaster,
    /// SIGSTOP of the master until the Sentinels have promoted a replica, then SIGCONT: it
    /// wakes as a stale master and must be fenced.
    StopMaster,
    /// Both replicas stopped for two seconds, so the master applies writes no replica has
    /// (their `WAIT`s time out), then kill -9 of the master and the replicas resumed: the
    /// promoted one never had those writes, and none of them was acknowledged.
    KillMasterUnreplicated,
    /// kill -9 of a replica, which comes back on an empty disk and syncs from scratch.
    EmptyReplica,
}

/// Injects `fault` and waits until the Sentinels have settled on a master with every node
/// replicating from it again.
pub fn inject(cl: &mut Cluster, fault: RedisFault) {
    let g = cl.replicated_mut();
    let m = g.master();
    let old = g.nodes[m].port;
    block_in_place(|| match fault {
        RedisFault::KillMaster => {
            g.nodes[m].kill9();
            g.wait_failover_from(old, FAILOVER);
            g.nodes[m].restart();
        }
        RedisFault::KillMasterUnreplicated => {
            let replicas: Vec<usize> = (0..g.nodes.len()).filter(|i| *i != m).collect();
            for r in &replicas {
                g.nodes[*r].pause();
            }
            std::thread::sleep(Duration::from_secs(2));
            g.nodes[m].kill9();
            for r in &replicas {
                g.nodes[*r].resume();
            }
            g.wait_failover_from(old, FAILOVER);
            g.nodes[m].restart();
        }
        RedisFault::StopMaster => {
            g.nodes[m].pause();
            g.wait_failover_from(old, FAILOVER);
            g.nodes[m].resume();
        }
        RedisFault::EmptyReplica => {
            let r = (m + 1) % g.nodes.len();
            g.nodes[r].kill9();
            g.nodes[r].restart_empty();
        }
    });
    block_in_place(|| g.wait_settled(FAILOVER));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_failovers_under_sentinel() {
    let mut cl = Cluster::start(Layout {
        sentinel: true,
        ..Layout::default()
    })
    .await;
    cl.add_workers_on_both(4);
    let mut tasks = 150;
    let mut texts = vec![campaign("fo", tasks, [0.2, 0.4], "")];
    cl.submit(0, &texts[0]).await;
    let mut rows = 20;
    cl.wait_rows("fo", rows, END).await;
    let mut last_failover: Option<Instant> = None;
    for fault in [
        RedisFault::EmptyReplica,
        RedisFault::KillMaster,
        RedisFault::KillMasterUnreplicated,
        RedisFault::StopMaster,
    ] {
        let fails_over = fault != RedisFault::EmptyReplica;
        if let (true, Some(at)) = (fails_over, last_failover) {
            tokio::time::sleep(BETWEEN.saturating_sub(at.elapsed())).await;
        }
        // Every fault lands on a running campaign: one near its end gets more tasks.
        let st = cl.status("fo").await;
        if st.trials_total - st.trials_final < 80 {
            tasks += 60;
            texts.push(campaign("fo", tasks, [0.2, 0.4], ""));
            assert!(cl.submit(0, texts.last().unwrap()).await.amended);
        }
        inject(&mut cl, fault);
        if fails_over {
            last_failover = Some(Instant::now());
        }
        // The campaign goes on after each fault.
        rows += 10;
        cl.wait_rows("fo", rows, END).await;
    }
    let st = cl.wait_ended("fo", END).await;
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let rows = cl.check("fo", &texts).await;
    assert_eq!(st.trials_final, st.trials_total);
    // Each coordinator followed the master through the three failovers (one at a time, at
    // least five seconds apart, and it asks the Sentinels every second).
    for c in &cl.coords {
        let followed = c.proc.log_text().matches("redis failover").count();
        assert!(followed >= 3, "a coordinator followed {followed} failovers");
    }
    eprintln!(
        "failovers: {} trials ({} amendments), {} rows",
        st.trials_total,
        texts.len() - 1,
        rows.len()
    );
    assert!(rows.len() as u64 >= st.trials_total && !cl.acks().is_empty());
}
