//! Store throughput: `cargo bench -p lanes-coordinator --bench store`.
//!
//! Prints claim+complete cycles per second for each backend with 1, 8 and 64 concurrent simulated
//! lanes. For the embedded backend, the ceiling measured in the same run is a raw redb loop (one
//! small insert per durable write transaction, on a file of its own), and the mean operations per
//! durable commit (its group commit). For Redis, as ceilings measured in the same run on the same
//! Redis, a raw `SET NX PX` loop and an `EVALSHA` of a script doing `HSETNX` + `ZADD` (the least a
//! claim+complete can cost: one atomic script that writes), with the Redis figure's ratio to the
//! script ceiling (measured right after the cycles, on the same keyspace; the SET NX loop's keys go
//! to a database of their own, emptied after it, and the server never rewrites its AOF by itself,
//! so no figure runs beside the SET NX keys or a rewrite). Below the table, per Redis figure: round
//! trips, commit conflicts and lock waits per cycle, and the CPU time the bench process (client)
//! and the Redis server used per cycle, beside the same per script call of the ceiling (CPU per
//! cycle is steadier than throughput on a shared machine); then the cycles per commit, a commit's
//! mean time from send to reply, and the share of the run the rounds waited on commits in flight
//! (the pipeline waiting on Redis: `RedisStats::round_wait_us`). Then heartbeats: 1,000 leases held
//! by 125 workers of 8 lanes, each worker renewing its 8 tokens in one call: back to back (renewals
//! per second, CPU per renewal, conflicts), then once a second as workers do, beside 64
//! claim+complete lanes on the same campaign (compare their cycles per second with the 64-lane
//! figure). It starts its own redis-server (appendonly yes, appendfsync always, no automatic AOF
//! rewrite) on a free loopback port. `LANES_BENCH_LANES=64` (a comma-separated list) runs only
//! those lane counts, and `LANES_BENCH_EMBEDDED=0` skips the embedded store, e.g. under a profiler.
//! `LANES_BENCH_COUNT=n` runs only `n` cycles of 64 lanes on Redis, then prints Redis's CPU
//! and each command's time per cycle (see [`counted`]); with `LANES_BENCH_TIMELINE=1` also the
//! cycles that ended in each 25 ms of that run (where it stalls). `LANES_BENCH_PAYLOAD_BYTES=n`
//! gives every task a payload of about `n` bytes (none by default).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lanes_common::ids::{CampaignId, Token};
use lanes_common::row::{Outcome, Phase, Status};
use lanes_coordinator::store::{
    ClaimOutcome, ClaimRequest, Clock, EmbeddedStore, RedisOptions, RedisStore, RenewState, Store,
    SystemClock,
};
use lanes_tests::redis_server::RedisServer;

/// The allocator of the `lanes` binary, whose coordinator this bench measures.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RUN: Duration = Duration::from_secs(3);

fn campaign(id: &str, tasks: usize) -> lanes_common::spec::Campaign {
    let mut text = format!(
        "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 1\npairing = \"none\"\nlease_ttl_s = 600\n[[arms]]\nid = \"a\"\n[driver]\nsim = {{}}\n[tasks]\nitems = [\n"
    );
    // A payload of about this many bytes per task (`LANES_BENCH_PAYLOAD_BYTES`; none by
    // default): an instruction and a few fields, as a benchmark's task carries.
    let bytes: usize = std::env::var("LANES_BENCH_PAYLOAD_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let words =
        "Fix the failing test in the repository and explain the change. ".repeat(bytes / 64);
    for i in 0..tasks {
        match bytes {
            0 => text.push_str(&format!("{{ id = \"t{i}\" }},\n")),
            _ => text.push_str(&format!(
                "{{ id = \"t{i}\", payload = {{ instruction = \"{words}\", n = {i}, repo = {{ url = \"https://example.org/r{i}.git\", commit = \"{i:040}\" }}, tags = [\"hard\", \"python\"] }} }},\n"
            )),
        }
    }
    text.push_str("]\n");
    lanes_common::spec::load_str(&text, Path::new("bench.toml"), Path::new(".")).unwrap()
}

/// CPU time (user + system) a process used so far, from `/proc/<pid>/stat` (Linux; clock
/// ticks of 10 ms).
fn cpu(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at state, field 3.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// CPU used by this process and by the Redis server while `f` runs.
struct Cpu {
    client: Duration,
    server: Duration,
}

async fn measured<T>(server_pid: u32, f: impl std::future::Future<Output = T>) -> (T, Cpu) {
    let server = server_pid.to_string();
    let (c0, s0) = (cpu("self"), cpu(&server));
    let out = f.await;
    let cpu = Cpu {
        client: cpu("self") - c0,
        server: cpu(&server) - s0,
    };
    (out, cpu)
}

/// Submits the bench campaign `id` (20k tasks) to `store`.
async fn prepare(store: &Arc<dyn Store>, id: &str) {
    store
        .submit(campaign(id, 20_000), SystemClock.now_ms())
        .await
        .unwrap();
}

/// Runs `lanes` concurrent claim+complete loops for `RUN` on the campaign `id` (prepared);
/// returns cycles per second and the number of cycles.
async fn cycles(store: Arc<dyn Store>, id: &str, lanes: usize) -> (f64, u64) {
    cycles_until(store, id, lanes, RUN, u64::MAX).await
}

/// [`cycles`] for `run`, or until `count` cycles started.
async fn cycles_until(
    store: Arc<dyn Store>,
    id: &str,
    lanes: usize,
    run: Duration,
    count: u64,
) -> (f64, u64) {
    let c = CampaignId::new(id).unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let started = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for l in 0..lanes {
        let (store, c, done, started) = (store.clone(), c.clone(), done.clone(), started.clone());
        tasks.push(tokio::spawn(async move {
            let lane = lanes_common::ids::LaneName::new(format!("lane-{l}")).expect("a lane name");
            let host: lanes_common::ids::HostName = "bench".parse().expect("a host");
            while start.elapsed() < run && started.fetch_add(1, Ordering::Relaxed) < count {
                let req = ClaimRequest {
                    lane: lane.clone(),
                    host: host.clone(),
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
                let mut o = Outcome::new(
                    t.token.clone(),
                    lane.clone(),
                    host.clone(),
                    Status::Completed,
                );
                o.result.score = Some(1.0);
                store.complete(&c, o, SystemClock.now_ms()).await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
                timeline_mark(start);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n = done.load(Ordering::Relaxed);
    (n as f64 / start.elapsed().as_secs_f64(), n)
}

/// Cycles that ended in each [`BUCKET`] of a run (`LANES_BENCH_TIMELINE=1` in the counted
/// mode prints them): where a run stalls.
static TIMELINE: [AtomicU64; 400] = [const { AtomicU64::new(0) }; 400];
const BUCKET: Duration = Duration::from_millis(25);

fn timeline_mark(start: Instant) {
    let i = (start.elapsed().as_millis() / BUCKET.as_millis()) as usize;
    if let Some(b) = TIMELINE.get(i) {
        b.fetch_add(1, Ordering::Relaxed);
    }
}

/// `used_memory` of the server, from `INFO memory`.
fn used_memory(server: &lanes_tests::redis_server::RedisServer) -> i64 {
    let info = server.command(&["INFO", "memory"]);
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO memory")
}

/// Memory per pending trial: a campaign of `tasks` x `runs` x `arms` submitted (nothing
/// claimed yet); answers the growth of `used_memory` per trial and `MEMORY USAGE` of each of
/// its keys.
async fn memory(
    store: &Arc<dyn Store>,
    server: &lanes_tests::redis_server::RedisServer,
    id: &str,
    shape: (usize, u32, usize, &str),
) -> (f64, Vec<(String, i64)>) {
    let (tasks, runs, arms, pairing) = shape;
    let mut text = format!(
        "id = \"{id}\"\nphase1_runs = {runs}\nschedule_seed = 1\npairing = \"{pairing}\"\n[driver]\nsim = {{}}\n"
    );
    for a in 0..arms {
        text.push_str(&format!("[[arms]]\nid = \"arm{a}\"\nprovider = \"p{a}\"\n"));
    }
    text.push_str("[tasks]\nitems = [\n");
    for i in 0..tasks {
        text.push_str(&format!(
            "{{ id = \"task-{i:06}\", payload = {{ n = {i} }} }},\n"
        ));
    }
    text.push_str("]\n");
    let campaign =
        lanes_common::spec::load_str(&text, Path::new("mem.toml"), Path::new(".")).unwrap();
    let before = used_memory(server);
    let trials = store
        .submit(campaign, SystemClock.now_ms())
        .await
        .unwrap()
        .trials;
    let per_trial = (used_memory(server) - before) as f64 / trials as f64;
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("lanes:{{c:{id}}}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    let mut usage = Vec::new();
    for k in keys {
        let bytes: i64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&k)
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut conn)
            .await
            .unwrap();
        usage.push((k, bytes));
    }
    (per_trial, usage)
}

/// Heartbeats: leases held by `workers` x `per_worker` lanes of the prepared campaign `id`.
/// Returns each worker's tokens.
async fn hold_leases(
    store: &Arc<dyn Store>,
    id: &str,
    workers: usize,
    per_worker: usize,
) -> Vec<Vec<Token>> {
    let c = CampaignId::new(id).unwrap();
    let mut held = Vec::new();
    for w in 0..workers {
        let mut tokens = Vec::new();
        for l in 0..per_worker {
            let req = ClaimRequest {
                lane: lanes_common::ids::LaneName::new(format!("hb-{w}-{l}")).expect("a lane"),
                host: format!("hb-{w}").parse().expect("a host"),
                worker: format!("hb-{w}"),
                arms: None,
                offer: Default::default(),
                max_units: 1,
            };
            let ClaimOutcome::Assigned(a) =
                store.claim(&c, req, SystemClock.now_ms()).await.unwrap()
            else {
                panic!("no work for the heartbeat lanes");
            };
            tokens.push(a[0].trials[0].token.clone());
        }
        held.push(tokens);
    }
    held
}

/// Each worker renews all its tokens in one call, in a loop, for `RUN`: back to back, or once
/// every `period` (the workers spread over it), as workers heartbeat. Returns renewals
/// (tokens renewed) per second and their number.
async fn renewals(
    store: Arc<dyn Store>,
    id: &str,
    held: &[Vec<Token>],
    period: Option<Duration>,
) -> (f64, u64) {
    let c = CampaignId::new(id).unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    let n = held.len() as u32;
    for (w, tokens) in held.iter().enumerate() {
        let (store, c, done) = (store.clone(), c.clone(), done.clone());
        let batch: Vec<(Token, Phase)> = tokens.iter().map(|t| (t.clone(), Phase::Agent)).collect();
        tasks.push(tokio::spawn(async move {
            let mut next = period.map(|p| tokio::time::Instant::now() + p * w as u32 / n);
            while start.elapsed() < RUN {
                if let (Some(at), Some(p)) = (next.as_mut(), period) {
                    tokio::time::sleep_until(*at).await;
                    *at += p;
                }
                let states = store
                    .renew(&c, batch.clone(), SystemClock.now_ms())
                    .await
                    .unwrap();
                assert!(
                    states.iter().all(|(_, s)| *s == RenewState::Renewed),
                    "{states:?}"
                );
                done.fetch_add(states.len() as u64, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n = done.load(Ordering::Relaxed);
    (n as f64 / start.elapsed().as_secs_f64(), n)
}

/// Which raw operation a ceiling loop runs.
#[derive(Clone, Copy)]
enum Ceiling {
    /// `SET key x NX PX 60000`.
    SetNx,
    /// `EVALSHA` of a script doing `HSETNX` + `ZADD` on one hash-tagged pair of keys.
    Script,
}

const CEILING_SCRIPT: &str = "redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) \
     redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1]) return 1";

/// A ceiling: `op` in `lanes` concurrent loops on one ConnectionManager; returns operations
/// per second and their number.
async fn ceiling(url: &str, lanes: usize, op: Ceiling) -> (f64, u64) {
    let client = redis::Client::open(url).unwrap();
    let conn = redis::aio::ConnectionManager::new(client).await.unwrap();
    let script = redis::Script::new(CEILING_SCRIPT);
    script.load_async(&mut conn.clone()).await.unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for l in 0..lanes {
        let (mut conn, done, script) = (conn.clone(), done.clone(), script.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while start.elapsed() < RUN {
                match op {
                    Ceiling::SetNx => {
                        let _: Option<String> = redis::cmd("SET")
                            .arg(format!("bench:{l}:{i}"))
                            .arg("x")
                            .arg("NX")
                            .arg("PX")
                            .arg(60_000)
                            .query_async(&mut conn)
                            .await
                            .unwrap();
                    }
                    Ceiling::Script => {
                        let _: i64 = script
                            // Keys of this level's own: a level that wrote nothing new
                            // (fields already set by a lower one) would skip the AOF.
                            .key(format!("bench:{{{lanes}-{l}}}:h"))
                            .key(format!("bench:{{{lanes}-{l}}}:z"))
                            .arg(i)
                            .arg("x")
                            .arg(i)
                            .invoke_async(&mut conn)
                            .await
                            .unwrap();
                    }
                }
                i += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n = done.load(Ordering::Relaxed);
    (n as f64 / start.elapsed().as_secs_f64(), n)
}

/// Empties the SET NX ceiling's database (its own, so nothing else is lost).
async fn flush_set_nx(url: &str) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    // SYNC: a server that frees lazily would do it during the next figure.
    let _: () = redis::cmd("FLUSHDB")
        .arg("SYNC")
        .query_async(&mut conn)
        .await
        .unwrap();
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

/// `LANES_BENCH_COUNT=n`: exactly `n` claim+complete cycles (at most 20,000, the campaign's
/// trials) of 64 lanes on Redis, and nothing else, for a count of instructions that the
/// machine's noise does not move
/// (`valgrind --tool=cachegrind --cache-sim=no <bench binary> --bench`, then the total
/// `I refs` of two builds, each run with a count and with `LANES_BENCH_COUNT=0`: the
/// difference over `n` is the client's instructions per cycle). Then, from Redis's own
/// accounting of those cycles alone (`INFO cpu`, and `INFO commandstats` reset before them):
/// its CPU per cycle, and each command's time and calls per cycle (a script's commands are
/// counted in the script's time as well as on their own).
async fn counted(store: &RedisStore, server: &RedisServer, count: u64) {
    let redis: &Arc<dyn Store> = &(Arc::new(store.clone()) as Arc<dyn Store>);
    prepare(redis, "bench-count").await;
    assert!(count <= 20_000, "the campaign has 20,000 trials");
    server.command(&["CONFIG", "RESETSTAT"]);
    let cpu_before = redis_cpu_s(server);
    let bytes_before = [
        info_field(server, "stats", "total_net_input_bytes"),
        info_field(server, "persistence", "aof_current_size"),
    ];
    let stats_before = store.stats();
    let (rate, n) = cycles_until(redis.clone(), "bench-count", 64, Duration::MAX, count).await;
    assert_eq!(n, count, "every counted cycle ran");
    let stats = store.stats().since(&stats_before);
    let cpu = redis_cpu_s(server) - cpu_before;
    println!("{n} claim+complete cycles, {rate:.0} per second");
    let per = |x: f64| x / n.max(1) as f64;
    println!("redis CPU per cycle: {:.1} us", per(cpu * 1e6));
    println!(
        "bytes per cycle: {:.0} sent to Redis, {:.0} appended to its AOF",
        per(info_field(server, "stats", "total_net_input_bytes") - bytes_before[0]),
        per(info_field(server, "persistence", "aof_current_size") - bytes_before[1]),
    );
    println!(
        "cache trims: {} ({:.0} cycles per trim); windows read ahead: {}",
        stats.trims,
        n as f64 / stats.trims.max(1) as f64,
        stats.windows_ahead
    );
    if std::env::var_os("LANES_BENCH_TIMELINE").is_some() {
        let counts: Vec<u64> = TIMELINE.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let end = counts.iter().rposition(|&c| c > 0).map_or(0, |i| i + 1);
        println!("cycles per {} ms: {:?}", BUCKET.as_millis(), &counts[..end]);
    }
    let mut stats = command_stats(server);
    stats.sort_by_key(|s| std::cmp::Reverse(s.2));
    for (name, calls, usec) in stats {
        println!(
            "  {name:<16} {:>7.2} us per cycle {:>7.3} calls per cycle",
            per(usec as f64),
            per(calls as f64)
        );
    }
}

/// Redis's CPU time so far (user and system), in seconds.
fn redis_cpu_s(server: &RedisServer) -> f64 {
    server
        .command(&["INFO", "cpu"])
        .lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            (k == "used_cpu_sys" || k == "used_cpu_user").then(|| v.parse::<f64>().ok())?
        })
        .sum()
}

/// One numeric field of an `INFO` section.
fn info_field(server: &RedisServer, section: &str, field: &str) -> f64 {
    server
        .command(&["INFO", section])
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(field)?
                .strip_prefix(':')?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{field} in INFO {section}"))
}

/// `INFO commandstats`: each command's name, calls and microseconds.
fn command_stats(server: &RedisServer) -> Vec<(String, u64, u64)> {
    server
        .command(&["INFO", "commandstats"])
        .lines()
        .filter_map(|l| {
            let (name, fields) = l.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |k: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(k)?.strip_prefix('=')?.parse::<u64>().ok())
            };
            Some((name.to_owned(), field("calls")?, field("usec")?))
        })
        .collect()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // No automatic AOF rewrite: one would fork and rewrite the file in the middle of
        // whichever figure happens to grow the AOF past 64 MB (the SET NX ceiling's half
        // million keys made it land inside the script ceiling's window).
        let server = lanes_tests::redis_server::RedisServer::start_args(
            "always",
            &["--auto-aof-rewrite-percentage".into(), "0".into()],
        );
        let redis_store = RedisStore::connect(&server.url(), RedisOptions::default())
            .await
            .unwrap();
        let redis: Arc<dyn Store> = Arc::new(redis_store.clone());
        if let Ok(count) = std::env::var("LANES_BENCH_COUNT") {
            return counted(&redis_store, &server, count.parse().expect("a cycle count")).await;
        }
        let dir = tempfile::tempdir().unwrap();
        let embedded_store = EmbeddedStore::open(dir.path()).unwrap();
        let embedded: Arc<dyn Store> = Arc::new(embedded_store.clone());
        println!(
            "claim+complete cycles per second ({}s per figure)",
            RUN.as_secs()
        );
        println!(
            "{:>6} {:>10} {:>10} {:>10} {:>9} {:>10} {:>12} {:>12} {:>13}",
            "lanes",
            "embedded",
            "ops/commit",
            "redb ceil",
            "emb/ceil",
            "redis",
            "SET NX ceil",
            "script ceil",
            "redis/script"
        );
        let mut costs = Vec::new();
        let levels: Vec<usize> = std::env::var("LANES_BENCH_LANES")
            .map(|v| {
                v.split(',')
                    .map(|n| n.trim().parse().expect("a lane count"))
                    .collect()
            })
            .unwrap_or_else(|_| vec![1, 8, 64]);
        let set_nx_url = format!("{}1", server.url());
        for lanes in levels {
            let (e, per_commit, e_ceil) =
                if std::env::var("LANES_BENCH_EMBEDDED").is_ok_and(|v| v == "0") {
                    (0.0, 0.0, 0.0)
                } else {
                    let id = format!("bench-e{lanes}");
                    prepare(&embedded, &id).await;
                    let before = embedded_store.write_stats();
                    let e = cycles(embedded.clone(), &id, lanes).await.0;
                    let after = embedded_store.write_stats();
                    let per_commit = (after.ops - before.ops) as f64
                        / (after.commits - before.commits).max(1) as f64;
                    (e, per_commit, redb_txn_ceiling(dir.path(), lanes).await)
                };
            let id = format!("bench-r{lanes}");
            prepare(&redis, &id).await;
            let before = redis_store.stats();
            let ((r, n), used) =
                measured(server.pid(), cycles(redis.clone(), &id, lanes)).await;
            let stats = redis_store.stats().since(&before);
            // The script ceiling right after the cycles, on the same keyspace; then the SET NX
            // ceiling, whose keys go to a database of their own, emptied after it, so no figure
            // runs beside them.
            let ((script, ns), script_used) =
                measured(server.pid(), ceiling(&server.url(), lanes, Ceiling::Script)).await;
            let (set_nx, _) = ceiling(&set_nx_url, lanes, Ceiling::SetNx).await;
            flush_set_nx(&set_nx_url).await;
            costs.push((lanes, stats, n, r, used, ns, script_used));
            println!(
                "{lanes:>6} {e:>10.0} {per_commit:>10.1} {e_ceil:>10.0} {:>8.3}x {r:>10.0} {set_nx:>12.0} {script:>12.0} {:>12.4}x",
                e / e_ceil.max(1.0),
                r / script
            );
        }
        // Memory per pending trial, for a few campaign shapes.
        println!("memory per pending trial (used_memory growth at submit / trials)");
        for (i, shape) in [
            (20_000, 1, 1, "none"),
            (2_000, 5, 2, "none"),
            (2_000, 5, 2, "group"),
        ]
        .into_iter()
        .enumerate()
        {
            let (per_trial, keys) = memory(&redis, &server, &format!("bench-mem{i}"), shape).await;
            let (tasks, runs, arms, pairing) = shape;
            let top: Vec<String> = keys
                .iter()
                .filter(|(_, b)| *b > 4096)
                .map(|(k, b)| format!("{}={}", k.rsplit(':').next().unwrap_or(k), b))
                .collect();
            println!(
                "  {tasks} tasks x {runs} runs x {arms} arms, pairing {pairing}: {per_trial:.0} B/trial ({})",
                top.join(", ")
            );
        }

        // Heartbeats: 1,000 leases renewed by 125 workers, 8 tokens a call, alone and then
        // beside 64 claim+complete lanes on the same campaign.
        let id = "bench-hb";
        prepare(&redis, id).await;
        let held = hold_leases(&redis, id, 125, 8).await;
        let before = redis_store.stats();
        let ((alone, n), used) =
            measured(server.pid(), renewals(redis.clone(), id, &held, None)).await;
        let alone_stats = redis_store.stats().since(&before);
        let before = redis_store.stats();
        let ((beside, _), (cycles_beside, _)) = tokio::join!(
            renewals(redis.clone(), id, &held, Some(Duration::from_secs(1))),
            cycles(redis.clone(), id, 64)
        );
        let mixed = redis_store.stats().since(&before);
        let us = |d: Duration, n: u64| d.as_secs_f64() * 1e6 / n.max(1) as f64;
        println!("heartbeats: 1000 leases held by 125 workers, each renewing its 8 in one call");
        println!(
            "  back to back: {alone:.0} renewals/s, CPU per renewal: client {:.1} us, redis {:.1} us, {} conflicts",
            us(used.client, n),
            us(used.server, n),
            alone_stats.conflicts
        );
        println!(
            "  every second (as workers do) beside 64 claim+complete lanes: {beside:.0} renewals/s, {cycles_beside:.0} cycles/s, {} conflicts",
            mixed.conflicts
        );
        println!(
            "redis cost per claim+complete cycle; CPU in us per cycle (script ceiling: per script)"
        );
        println!(
            "{:>6} {:>7} {:>8} {:>8} {:>9} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}",
            "lanes",
            "rtrips",
            "commands",
            "attempts",
            "conflicts",
            "locks",
            "client cpu",
            "redis cpu",
            "ceil cli",
            "ceil redis",
            "cyc/commit",
            "commit ms",
            "waited"
        );
        for (lanes, s, n, rate, used, ns, script_used) in costs {
            let per = |x: u64| x as f64 / n.max(1) as f64;
            // The rounds' waits on commits in flight, as a share of the run's wall time.
            let wall_us = n as f64 / rate.max(f64::MIN_POSITIVE) * 1e6;
            println!(
                "{lanes:>6} {:>7.2} {:>8.2} {:>8.2} {:>9.3} {:>6.3} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.2} {:>6.0}%",
                per(s.round_trips),
                per(s.commands),
                per(s.attempts),
                per(s.conflicts),
                per(s.lock_waits),
                us(used.client, n),
                us(used.server, n),
                us(script_used.client, ns),
                us(script_used.server, ns),
                n as f64 / s.commits.max(1) as f64,
                s.commit_us as f64 / s.commits.max(1) as f64 / 1e3,
                s.round_wait_us as f64 / wall_us * 100.0,
            );
        }
    });
}
