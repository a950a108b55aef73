//! The Redis store's hot path: what rounds, the replica cache and the conflict domains promise,
//! checked on a real `redis-server` with one or two replicas (`RedisStore`s) on it.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use lanes_common::ids::CampaignId;
use lanes_common::row::Status;
use lanes_common::state::CampaignState;
use lanes_coordinator::store::{ClaimOutcome, RedisOptions, RedisStats, RedisStore, Store};
use support::*;

async fn replica(h: &Harness) -> RedisStore {
    let url = h.redis.as_ref().expect("a redis harness").url();
    RedisStore::connect(&url, RedisOptions::default())
        .await
        .expect("connect a replica")
}

/// Each lane claims one trial and completes it with a score, `cycles` times (or until no
/// work is left); answers how many it completed.
async fn lane(
    store: Arc<dyn Store>,
    c: CampaignId,
    name: String,
    now: i64,
    cycles: usize,
) -> usize {
    let mut done = 0;
    for _ in 0..cycles {
        let a = match store
            .claim(&c, request(&name, "h", 1), now)
            .await
            .expect("claim")
        {
            ClaimOutcome::Assigned(a) => a,
            ClaimOutcome::NoWork { .. } => break,
        };
        let t = &a[0].trials[0].token;
        let ack = store
            .complete(&c, scored(t, &name, "h", Status::Completed, 1.0), now)
            .await
            .expect("complete");
        assert!(ack.counted, "{t}: {ack:?}");
        done += 1;
    }
    done
}

/// Checks that each of the campaign's `trials` has exactly one row, counted, at attempt 1.
async fn each_counted_once(h: &Harness, c: &CampaignId, trials: usize) {
    let mut per_trial: BTreeMap<String, Vec<(u32, bool)>> = BTreeMap::new();
    for r in h.rows(c).await {
        per_trial
            .entry(r.trial_id.to_string())
            .or_default()
            .push((r.attempt, r.counted));
    }
    assert_eq!(per_trial.len(), trials);
    for (trial, rows) in &per_trial {
        assert_eq!(rows, &vec![(1, true)], "{trial}");
    }
}

/// One replica's concurrent claims and completions share rounds: none of them ever conflicts
/// with another (before rounds, each bumped the campaign version and most of them conflicted
/// and queued on the campaign lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_replicas_concurrent_operations_never_conflict() {
    let h = Harness::redis().await;
    let c = cid("rounds");
    h.submit(campaign(
        "rounds",
        &[("a", "pa")],
        128,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let store = replica(&h).await;
    let before = store.stats();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let lanes: Vec<_> = (0..32)
        .map(|i| tokio::spawn(lane(shared.clone(), c.clone(), format!("l{i}"), h.now(), 4)))
        .collect();
    let mut done = 0;
    for l in lanes {
        done += l.await.expect("a lane");
    }
    assert_eq!(done, 128);
    let stats = store.stats().since(&before);
    assert_eq!(stats.conflicts, 0, "{stats:?}");
    assert_eq!(stats.lock_waits, 0, "{stats:?}");
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!((st.state, st.trials_counted), (CampaignState::Done, 128));
}

/// Two replicas on one Redis, each with its own cache of the campaign, claim and complete
/// concurrently: each commit of one invalidates the other's cache, so no trial is leased
/// twice, every trial gets exactly one counted row at attempt 1, and the campaign is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_lease_each_trial_once() {
    let h = Harness::redis().await;
    let c = cid("replicas");
    h.submit(campaign(
        "replicas",
        &[("a", "pa"), ("b", "pb")],
        48,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let a: Arc<dyn Store> = Arc::new(replica(&h).await);
    let b: Arc<dyn Store> = Arc::new(replica(&h).await);
    let mut lanes = Vec::new();
    for i in 0..16 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        lanes.push(tokio::spawn(lane(
            store,
            c.clone(),
            format!("l{i}"),
            h.now(),
            1000,
        )));
    }
    let mut done = 0;
    for l in lanes {
        done += l.await.expect("a lane");
    }
    assert_eq!(done, 96);
    each_counted_once(&h, &c, 96).await;
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!((st.state, st.trials_counted), (CampaignState::Done, 96));
}

/// A replica that is the only writer starts each round at the version its last commit left,
/// without reading it: a claim and an outcome cost a commit each and no `GET`. Before, every
/// round began with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sole_writers_rounds_read_no_version() {
    let h = Harness::redis().await;
    let c = cid("sole");
    h.submit(campaign(
        "sole",
        &[("a", "pa")],
        8,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let store = replica(&h).await;
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    // The first round reads the version: the replica has no cache of the campaign yet.
    assert_eq!(
        lane(shared.clone(), c.clone(), "l".into(), h.now(), 1).await,
        1
    );
    let server = h.redis.as_ref().expect("a redis harness");
    let before = store.stats();
    log_every_command(server);
    assert_eq!(lane(shared, c.clone(), "l".into(), h.now(), 5).await, 5);
    // The replica's ten commits are in the log; the commit script reads the version and the
    // lock itself (as client `?:0`), and the replica read neither.
    let sent: Vec<_> = slow_log(&server.url())
        .await
        .into_iter()
        .filter(|(_, client)| client != "?:0")
        .map(|(args, _)| args)
        .collect();
    let named = |name: &str| {
        sent.iter()
            .filter(|a| a[0].eq_ignore_ascii_case(name))
            .count()
    };
    assert_eq!(named("EVALSHA"), 10, "{sent:?}");
    assert_eq!(named("GET"), 0, "{sent:?}");
    let d = store.stats().since(&before);
    assert_eq!((d.ops, d.conflicts), (10, 0), "{d:?}");
    each_counted_once(&h, &c, 6).await;
}

/// Two replicas take turns on one campaign. Each one's first round after the other's commit
/// conflicts (it trusted its cache's version) and runs again; from then on it reads the
/// version before each round, so the turns cost no more conflicts: trusting its cache, each
/// would have conflicted at every turn. A replica trusts its versions again a second after
/// its last conflict, so a slow machine may see one more conflict per replica per second.
/// Every trial is counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_conflict_a_replica_reads_the_version_before_its_rounds() {
    let h = Harness::redis().await;
    let c = cid("turns");
    h.submit(campaign(
        "turns",
        &[("a", "pa")],
        24,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let (ra, rb) = (replica(&h).await, replica(&h).await);
    let (a, b): (Arc<dyn Store>, Arc<dyn Store>) = (Arc::new(ra.clone()), Arc::new(rb.clone()));
    let (before_a, before_b) = (ra.stats(), rb.stats());
    let started = std::time::Instant::now();
    for _ in 0..10 {
        assert_eq!(lane(a.clone(), c.clone(), "la".into(), h.now(), 1).await, 1);
        assert_eq!(lane(b.clone(), c.clone(), "lb".into(), h.now(), 1).await, 1);
    }
    let secs = started.elapsed().as_secs();
    let (da, db) = (ra.stats().since(&before_a), rb.stats().since(&before_b));
    assert!((1..=1 + secs).contains(&da.conflicts), "{secs} s: {da:?}");
    assert!((1..=1 + secs).contains(&db.conflicts), "{secs} s: {db:?}");
    each_counted_once(&h, &c, 20).await;
}

/// A replica that trusts its cache's version answers a read from that cache only once it
/// read the version: here another replica claimed in between, so the first one's round saw
/// another version, ran again from Redis, and its status holds both leases (its cache held
/// one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_from_a_cache_another_replica_made_stale_is_read_again() {
    let h = Harness::redis().await;
    let c = cid("stale");
    h.submit(campaign(
        "stale",
        &[("a", "pa")],
        8,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let (ra, rb) = (replica(&h).await, replica(&h).await);
    let claim = |r: &RedisStore, lane: &str| {
        let (r, c, req, now) = (r.clone(), c.clone(), request(lane, "h", 1), h.now());
        async move { r.claim(&c, req, now).await.expect("claim") }
    };
    assert!(matches!(claim(&ra, "la").await, ClaimOutcome::Assigned(_)));
    assert_eq!(ra.status(&c, h.now()).await.unwrap().in_flight.len(), 1);
    let before = ra.stats();
    assert!(matches!(claim(&rb, "lb").await, ClaimOutcome::Assigned(_)));
    assert_eq!(ra.status(&c, h.now()).await.unwrap().in_flight.len(), 2);
    assert_eq!(ra.stats().since(&before).conflicts, 1);
}

/// The commit script checks first scored wins itself, before it writes anything: a counted
/// row for a trial whose `scored` field exists already (here written behind the store's
/// back) fails the whole commit, and nothing of it is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_never_writes_a_second_first_score() {
    let h = Harness::redis().await;
    let c = cid("first");
    h.submit(campaign(
        "first",
        &[("a", "pa")],
        2,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    let server = h.redis.as_ref().expect("a redis harness");
    let key = "lanes:{c:first}:scored";
    assert_eq!(
        server.command(&["HSET", key, t.trial_id.as_str(), "7"]),
        ":1"
    );
    let version = server.command(&["GET", "lanes:{c:first}:ver"]);
    let err = h
        .store
        .complete(&c, scored(&t, "l", "h", Status::Completed, 1.0), h.now())
        .await
        .expect_err("a second first score");
    assert!(err.to_string().contains("scored already set"), "{err}");
    assert!(h.rows(&c).await.is_empty());
    assert_eq!(server.command(&["GET", "lanes:{c:first}:ver"]), version);
    assert_eq!(server.command(&["HGET", key, t.trial_id.as_str()]), "7");
}

/// A renewal that only extends a lease (same phase, its lane seen less than half a TTL ago)
/// writes nothing campaign-wide: neither the meta nor the lanes seen change, only the lease
/// and its deadline. Before, every renewal rewrote the meta with the lane's last-seen time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_only_extends_a_lease_writes_nothing_campaign_wide() {
    let h = Harness::redis().await;
    let c = cid("renew");
    h.submit(campaign(
        "renew",
        &[("a", "pa")],
        2,
        "pairing = \"none\"\nlease_ttl_s = 60",
        "",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.advance_s(5);
    assert_eq!(
        h.renew(&c, &t, lanes_common::row::Phase::Agent).await,
        lanes_coordinator::store::RenewState::Renewed
    );
    let server = h.redis.as_ref().expect("a redis harness");
    let meta = || server.command(&["GET", "lanes:{c:renew}:meta"]);
    let seen = || server.command(&["HGET", "lanes:{c:renew}:seen", "l"]);
    let (meta0, seen0) = (meta(), seen());
    assert_eq!(
        seen0,
        T0.to_string(),
        "seen at the claim, and not stale since"
    );
    for _ in 0..3 {
        h.advance_s(5);
        assert_eq!(
            h.renew(&c, &t, lanes_common::row::Phase::Agent).await,
            lanes_coordinator::store::RenewState::Renewed
        );
    }
    assert_eq!((meta(), seen()), (meta0, seen0));
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.in_flight[0].deadline_ms, T0 + 20_000 + 60_000);
}

/// The calls of one Redis command so far, from `INFO commandstats` (0 if never called).
fn calls(server: &lanes_tests::redis_server::RedisServer, command: &str) -> u64 {
    let info = server.command(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .map_or(0, |rest| {
            rest.split(',').next().unwrap().parse().expect("a count")
        })
}

/// A large submit stages its tasks and ready queue beside the campaign's keys; for a new
/// campaign the commit script renames them into place, in O(1) whatever their size, and the
/// renamed keys keep no staging expiry. Before, the script merged them (HGETALL + HSET,
/// ZDIFFSTORE + ZUNIONSTORE): for 1M trials that blocked Redis for 12 s, past the store's
/// response timeout, so the client was told the submit failed while it landed. An amendment
/// adds its tasks to the stored ones, with ZADD's meaning for the ready queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_submit_is_renamed_into_place_and_its_keys_never_expire() {
    let big = |tasks| campaign("big", &[("a", "pa")], tasks, "pairing = \"none\"", "");
    let h = Harness::redis().await;
    let c = cid("big");
    let server = h.redis.as_ref().expect("a redis harness");
    let submitted = h.submit(big(3000)).await;
    assert_eq!(submitted.trials, 3000);
    assert_eq!(
        calls(server, "zdiffstore"),
        0,
        "a new campaign's ready queue is not merged"
    );
    assert_eq!(calls(server, "zunionstore"), 0);
    assert!(
        calls(server, "rename") >= 3,
        "tasks, positions and ready queue renamed"
    );
    let keys = [
        "lanes:{c:big}:tasks",
        "lanes:{c:big}:task_pos",
        "lanes:{c:big}:ready:p:pa",
    ];
    for key in keys {
        assert_eq!(
            server.command(&["TTL", key]),
            ":-1",
            "{key} must not expire"
        );
    }
    assert_eq!(server.command(&["HLEN", keys[0]]), ":3000");
    assert_eq!(server.command(&["ZCARD", keys[2]]), ":3000");
    let staged = server.command(&["EVAL", "return #redis.call('KEYS', '*staging*')", "0"]);
    assert_eq!(staged, ":0", "no staging key is left behind");

    // Take one trial, then amend with 3,000 more tasks: merged, not renamed over.
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    let amended = h.submit(big(6000)).await;
    assert_eq!(amended.trials, 6000);
    assert_eq!(server.command(&["HLEN", keys[0]]), ":6000");
    assert_eq!(
        server.command(&["ZCARD", keys[2]]),
        ":5999",
        "the claimed one stays out"
    );
    for key in keys {
        assert_eq!(
            server.command(&["TTL", key]),
            ":-1",
            "{key} must not expire"
        );
    }
    let ack = h
        .store
        .complete(&c, scored(&t, "l", "h", Status::Completed, 1.0), h.now())
        .await
        .expect("complete");
    assert!(ack.counted);
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.trials_total, 6000);
    assert_eq!(st.trials_final, 1);
}

/// A round of renewals alone lingers for company: renewals that arrive apart share one round
/// and one commit script (before, each heartbeat paid a commit of its own), and any other
/// operation ends the wait at once. The linger here is long (10 s), so the test depends on no
/// timing but "well under 10 s".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_linger_for_company_and_other_work_ends_the_wait() {
    let h = Harness::redis().await;
    let c = cid("linger");
    h.submit(campaign(
        "linger",
        &[("a", "pa")],
        10,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let url = h.redis.as_ref().expect("a redis harness").url();
    let opts = RedisOptions {
        renew_linger: Some(std::time::Duration::from_secs(10)),
        ..RedisOptions::default()
    };
    let store = Arc::new(RedisStore::connect(&url, opts).await.expect("connect"));
    let mut tokens = Vec::new();
    for l in 0..2 {
        let a = match store
            .claim(&c, request(&format!("l{l}"), "h", 1), h.now())
            .await
        {
            Ok(ClaimOutcome::Assigned(a)) => a,
            other => panic!("{other:?}"),
        };
        tokens.push(a[0].trials[0].token.clone());
    }
    let before = store.stats();
    let started = std::time::Instant::now();
    let renew = |t: &lanes_common::ids::Token| {
        let (s, c, t, now) = (store.clone(), c.clone(), t.clone(), h.now());
        tokio::spawn(async move {
            s.renew(&c, vec![(t, lanes_common::row::Phase::Agent)], now)
                .await
        })
    };
    // The second renewal only once the first is queued, then a claim.
    let first = renew(&tokens[0]);
    while store.stats().ops == before.ops {
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let second = renew(&tokens[1]);
    while store.stats().ops < before.ops + 2 {
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let claimed = store
        .claim(&c, request("l9", "h", 1), h.now())
        .await
        .expect("claim");
    assert!(matches!(claimed, ClaimOutcome::Assigned(_)));
    for r in [first, second] {
        let answer = r.await.unwrap().expect("renew");
        assert_eq!(
            answer[0].1,
            lanes_coordinator::store::RenewState::Renewed,
            "{answer:?}"
        );
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the claim ended the linger: {:?}",
        started.elapsed()
    );
    let d = store.stats().since(&before);
    assert_eq!((d.ops, d.writes, d.conflicts), (3, 1, 0), "{d:?}");
}

/// Counts what a replica reports as committed.
#[derive(Default)]
struct Counted {
    started: std::sync::atomic::AtomicU64,
    finished: std::sync::atomic::AtomicU64,
}

impl lanes_coordinator::store::CommitObserver for Counted {
    fn committed(&self, _: &CampaignId, events: &[lanes_coordinator::store::Event]) {
        use lanes_coordinator::store::EventKind;
        use std::sync::atomic::Ordering::Relaxed;
        for e in events {
            match e.kind {
                EventKind::AttemptStarted { .. } => self.started.fetch_add(1, Relaxed),
                EventKind::AttemptFinished { .. } => self.finished.fetch_add(1, Relaxed),
                _ => 0,
            };
        }
    }
}

/// Two replicas' rounds conflict with each other and run again; what their observers heard
/// is exactly what the campaign's event log holds: a round that lost its commit reported
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rounds_that_lose_a_conflict_report_no_events() {
    use std::sync::atomic::Ordering::Relaxed;
    let h = Harness::redis().await;
    let (ra, rb) = (replica(&h).await, replica(&h).await);
    let (seen_a, seen_b) = (Arc::new(Counted::default()), Arc::new(Counted::default()));
    ra.set_observer(seen_a.clone());
    rb.set_observer(seen_b.clone());
    let (before_a, before_b) = (ra.stats(), rb.stats());
    let (a, b): (Arc<dyn Store>, Arc<dyn Store>) = (Arc::new(ra.clone()), Arc::new(rb.clone()));
    // Rounds of two replicas on one campaign conflict as soon as their commits interleave;
    // a few campaigns make sure some did.
    let mut conflicts = 0;
    let mut events = Vec::new();
    for round in 0..5 {
        let id = format!("observed-{round}");
        let c = cid(&id);
        h.submit(campaign(&id, &[("a", "pa")], 48, "pairing = \"none\"", ""))
            .await;
        let lanes: Vec<_> = (0..12)
            .map(|i| {
                let store = if i % 2 == 0 { a.clone() } else { b.clone() };
                tokio::spawn(lane(store, c.clone(), format!("l{i}"), h.now(), 1000))
            })
            .collect();
        for l in lanes {
            l.await.expect("a lane");
        }
        events.extend(h.store.events(&c, 0, 10_000).await.unwrap());
        conflicts = ra.stats().since(&before_a).conflicts + rb.stats().since(&before_b).conflicts;
        if conflicts > 0 {
            break;
        }
    }
    assert!(conflicts > 0, "the replicas never conflicted");
    use lanes_coordinator::store::EventKind;
    let logged = |f: fn(&EventKind) -> bool| events.iter().filter(|e| f(&e.kind)).count() as u64;
    let started = logged(|k| matches!(k, EventKind::AttemptStarted { .. }));
    let finished = logged(|k| matches!(k, EventKind::AttemptFinished { .. }));
    assert!(started > 0);
    assert_eq!(
        seen_a.started.load(Relaxed) + seen_b.started.load(Relaxed),
        started
    );
    assert_eq!(
        seen_a.finished.load(Relaxed) + seen_b.finished.load(Relaxed),
        finished
    );
}

/// The `ZRANGEBYSCORE`s of `key` in the server's slow log (which logs every command while
/// `slowlog-log-slower-than` is 0), oldest first, by their sizes: the scans of claims past
/// their window, which wait for the commits in flight (from the lowest score, with scores),
/// and the windows read ahead (past a score, without).
async fn scans_of(url: &str, key: &str) -> Scans {
    let mut scans = Scans::default();
    for (args, _) in slow_log(url).await {
        if !args[0].eq_ignore_ascii_case("ZRANGEBYSCORE") || args[1] != key {
            continue;
        }
        let size = args
            .last()
            .and_then(|n| n.parse().ok())
            .expect("a LIMIT count");
        match (args.len(), args[2].as_str()) {
            (8, "-inf") => scans.stopping.push(size),
            (7, after) if after.starts_with('(') => scans.ahead.push(size),
            _ => panic!("an unexpected scan: {args:?}"),
        }
    }
    scans
}

/// Has the server log every command from now on in its slow log ([`slow_log`]).
fn log_every_command(server: &lanes_tests::redis_server::RedisServer) {
    assert_eq!(
        server.commands(&[
            &["CONFIG", "SET", "slowlog-max-len", "100000"],
            &["CONFIG", "SET", "slowlog-log-slower-than", "0"],
            &["SLOWLOG", "RESET"],
        ]),
        ["+OK", "+OK", "+OK"]
    );
}

/// The commands in the server's slow log, oldest first: each one's arguments and its
/// client's address (`?:0` for a command a script ran).
async fn slow_log(url: &str) -> Vec<(Vec<String>, String)> {
    use ::redis::Value;
    let client = ::redis::Client::open(url).expect("a redis url");
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    // The log of a busy run is tens of megabytes (each entry keeps up to 32 arguments).
    conn.set_response_timeout(std::time::Duration::from_secs(120));
    let log: Vec<Value> = ::redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        _ => String::new(),
    };
    // Newest first; each entry: id, time, duration, arguments, client address, client name.
    log.iter()
        .rev()
        .filter_map(|entry| match entry {
            Value::Array(fields) => match (fields.get(3), fields.get(4)) {
                (Some(Value::Array(args)), Some(client)) => {
                    Some((args.iter().map(text).collect(), text(client)))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// A ready queue's scans, by kind ([`scans_of`]).
#[derive(Debug, Default)]
struct Scans {
    stopping: Vec<usize>,
    ahead: Vec<usize>,
}

/// A busy campaign's claims take their windows of the ready queue from reads ahead: once a
/// window is half claimed, the next is read behind the commit just sent, twice the last while
/// the replica's cache lives, and the claim that runs past the window takes it in without
/// waiting. 2,000 trials claimed and completed by 32 lanes on one replica: each trial is
/// leased and counted once, and only the first scan stops the pipeline (before windows were
/// read ahead, all four did: 256, 512, 1,024, 2,048).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_campaigns_windows_are_read_ahead_and_lease_each_trial_once() {
    let h = Harness::redis().await;
    let (scans, stats) = busy_campaign(&h, "window", 2000).await;
    assert_eq!(scans.stopping, [256], "{scans:?} {stats:?}");
    assert_eq!(scans.ahead, [512, 1024, 2048], "{scans:?}");
    assert_eq!(stats.windows_ahead, 3, "{stats:?}");
}

/// A cache grown past its limit (finished trials' fields pile up) is trimmed to its windows'
/// read-ahead, not dropped: 16,000 trials on one replica, and the ready queue's window never
/// starts small again (dropped, it went 256, 512, 1,024, 2,048, then 256 again, and the
/// tasks read ahead with the window of 2,048 were read and parsed twice). A trim drops the
/// window being read ahead, so the claim past the window scans, one per trim at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cache_past_its_limit_is_trimmed_and_keeps_its_windows() {
    let h = Harness::redis().await;
    let (scans, stats) = busy_campaign(&h, "trim", 16_000).await;
    assert!(stats.trims >= 1, "{stats:?}");
    let msg = format!("{scans:?} {stats:?}");
    assert_eq!(scans.stopping[0], 256, "{msg}");
    assert!(scans.stopping[1..].iter().all(|s| *s == 2048), "{msg}");
    assert!(scans.stopping.len() as u64 <= 1 + stats.trims, "{msg}");
    assert_eq!(scans.ahead[..3], [512, 1024, 2048], "{msg}");
    assert!(scans.ahead[3..].iter().all(|s| *s == 2048), "{msg}");
    assert!(stats.windows_ahead as usize <= scans.ahead.len(), "{msg}");
}

/// Submits a campaign `name` of `trials` trials (one arm), then 32 lanes of one replica claim
/// and complete them all, with every command in the server's slow log. Checks each trial is
/// leased and counted once; answers the ready queue's scans, in order, and the replica's
/// counters.
async fn busy_campaign(h: &Harness, name: &str, trials: usize) -> (Scans, RedisStats) {
    let c = cid(name);
    h.submit(campaign(
        name,
        &[("a", "pa")],
        trials,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let server = h.redis.as_ref().unwrap();
    log_every_command(server);
    let replica = replica(h).await;
    let before = replica.stats();
    let shared: Arc<dyn Store> = Arc::new(replica.clone());
    let lanes: Vec<_> = (0..32)
        .map(|i| {
            let (store, c) = (shared.clone(), c.clone());
            tokio::spawn(lane(store, c, format!("l{i}"), h.now(), 10_000))
        })
        .collect();
    let mut done = 0;
    for l in lanes {
        done += l.await.expect("a lane");
    }
    assert_eq!(done, trials);
    server.command(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"]);
    let ready = format!("lanes:{{c:{name}}}:ready:p:pa");
    let scans = scans_of(&server.url(), &ready).await;
    each_counted_once(h, &c, trials).await;
    // One replica's rounds never conflict: its commits reach Redis in the order they were
    // built (on a busy machine, a commit handed over after the next one conflicted).
    let stats = replica.stats().since(&before);
    assert_eq!(stats.conflicts, 0, "{stats:?}");
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(
        (st.state, st.trials_counted),
        (CampaignState::Done, trials as u64)
    );
    (scans, stats)
}
