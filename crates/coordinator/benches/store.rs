//! Store throughput: `cargo bench -p lanes-coordinator --bench store`.
//!
//! Prints claim+complete cycles per second for each backend with 1, 8 and 64 concurrent
//! simulated lanes, and, as the ceilings measured in the same run, a raw `SET NX PX` loop over
//! the same Redis connection setup and a raw redb loop (one small insert per durable write
//! transaction, on a file of its own), each with the backend's ratio to it; for the embedded
//! backend also the mean operations per durable commit (its group commit). It starts its own
//! redis-server (appendonly yes, appendfsync always) on a free loopback port. Figures are
//! kept in docs/PERFORMANCE.md.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lanes_common::ids::CampaignId;
use lanes_common::row::{Outcome, Status};
use lanes_coordinator::store::{
    ClaimOutcome, ClaimRequest, Clock, EmbeddedStore, RedisOptions, RedisStore, Store, SystemClock,
};

const RUN: Duration = Duration::from_secs(3);

fn campaign(id: &str, tasks: usize) -> lanes_common::spec::Campaign {
    let mut text = format!(
        "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 1\npairing = \"none\"\nlease_ttl_s = 600\n[[arms]]\nid = \"a\"\n[driver]\nsim = {{}}\n[tasks]\nitems = [\n"
    );
    for i in 0..tasks {
        text.push_str(&format!("{{ id = \"t{i}\" }},\n"));
    }
    text.push_str("]\n");
    lanes_common::spec::load_str(&text, Path::new("bench.toml"), Path::new(".")).unwrap()
}

/// Runs `lanes` concurrent claim+complete loops for `RUN`; returns cycles per second.
async fn cycles(store: Arc<dyn Store>, id: &str, lanes: usize) -> f64 {
    let c = CampaignId::new(id).unwrap();
    store
        .submit(campaign(id, 20_000), SystemClock.now_ms())
        .await
        .unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for l in 0..lanes {
        let (store, c, done) = (store.clone(), c.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let lane = lanes_common::ids::LaneName::new(format!("lane-{l}")).expect("a lane name");
            while start.elapsed() < RUN {
                let req = ClaimRequest {
                    lane: lane.clone(),
                    host: "bench".into(),
                    worker: "bench".into(),
                    arms: None,
                    offer: Default::default(),
                    max_units: 1,
                };
                let ClaimOutcome::Assigned(a) =
                    store.claim(&c, req, SystemClock.now_ms()).await.unwrap()
                else {
                    break;
                };
                let t = &a[0].trials[0];
                let mut o =
                    Outcome::new(t.token.clone(), lane.as_str(), "bench", Status::Completed);
                o.score = Some(1.0);
                store.complete(&c, o, SystemClock.now_ms()).await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// The ceiling: `SET key NX PX` in `lanes` concurrent loops on one ConnectionManager.
async fn set_nx_ceiling(url: &str, lanes: usize) -> f64 {
    let client = redis::Client::open(url).unwrap();
    let conn = redis::aio::ConnectionManager::new(client).await.unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for l in 0..lanes {
        let (mut conn, done) = (conn.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while start.elapsed() < RUN {
                let _: Option<String> = redis::cmd("SET")
                    .arg(format!("bench:{l}:{i}"))
                    .arg("x")
                    .arg("NX")
                    .arg("PX")
                    .arg(60_000)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                i += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// The embedded ceiling: one small insert per durable (`Durability::Immediate`, redb's
/// default) write transaction, in `lanes` concurrent loops on their own redb file.
async fn redb_txn_ceiling(dir: &Path, lanes: usize) -> f64 {
    const T: redb::TableDefinition<'static, u64, &'static [u8]> =
        redb::TableDefinition::new("bench");
    let db = Arc::new(redb::Database::create(dir.join(format!("ceiling-{lanes}.redb"))).unwrap());
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for l in 0..lanes {
        let (db, done) = (db.clone(), done.clone());
        tasks.push(tokio::task::spawn_blocking(move || {
            let mut i = 0u64;
            while start.elapsed() < RUN {
                let txn = db.begin_write().unwrap();
                txn.open_table(T)
                    .unwrap()
                    .insert((l as u64) << 32 | i, b"x".as_slice())
                    .unwrap();
                txn.commit().unwrap();
                i += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = lanes_tests::redis_server::RedisServer::start();
        let redis: Arc<dyn Store> = Arc::new(
            RedisStore::connect(&server.url(), RedisOptions::default())
                .await
                .unwrap(),
        );
        let dir = tempfile::tempdir().unwrap();
        let embedded_store = EmbeddedStore::open(dir.path()).unwrap();
        let embedded: Arc<dyn Store> = Arc::new(embedded_store.clone());
        println!(
            "claim+complete cycles per second ({}s per figure)",
            RUN.as_secs()
        );
        println!(
            "{:>6} {:>10} {:>11} {:>14} {:>12} {:>10} {:>16} {:>14}",
            "lanes",
            "embedded",
            "ops/commit",
            "redb txn ceil",
            "emb/ceiling",
            "redis",
            "SET NX PX ceil",
            "redis/ceiling"
        );
        for lanes in [1, 8, 64] {
            let before = embedded_store.write_stats();
            let e = cycles(embedded.clone(), &format!("bench-e{lanes}"), lanes).await;
            let after = embedded_store.write_stats();
            // The submit is one of them; it hardly moves the average.
            let per_commit =
                (after.ops - before.ops) as f64 / (after.commits - before.commits).max(1) as f64;
            let e_ceil = redb_txn_ceiling(dir.path(), lanes).await;
            let r = cycles(redis.clone(), &format!("bench-r{lanes}"), lanes).await;
            let ceil = set_nx_ceiling(&server.url(), lanes).await;
            println!(
                "{lanes:>6} {e:>10.0} {per_commit:>11.1} {e_ceil:>14.0} {:>11.4}x {r:>10.0} {ceil:>16.0} {:>13.4}x",
                e / e_ceil,
                r / ceil
            );
        }
    });
}
