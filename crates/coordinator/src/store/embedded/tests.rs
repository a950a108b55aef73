//! Group commit: operations queued together share one transaction and one commit, each gets
//! its own answer, a failing one leaves the others alone, and what was acknowledged is on
//! disk when the file is opened again.

use redb::{ReadableDatabase, TableHandle};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use lanes_common::ids::{CampaignId, LaneName, Token};
use lanes_common::row::{Outcome, Status};
use lanes_common::spec::Campaign;
use lanes_common::state::{CampaignState, StopMode};
use lanes_common::utc::EpochMs;

use super::apply::ready;
use super::redb_tx::RedbTx;
use super::*;
use crate::store::engine;
use crate::store::group::Mode;
use crate::store::op::CampaignOp;
use crate::store::tx::Tx;

/// Runs `f` in the writer's next batch, shared as `mode` says, like an operation that may
/// fail after writing (which no store operation does on purpose); its value comes back once
/// the batch committed.
async fn probe<T, F>(store: &EmbeddedStore, campaign: &str, mode: Mode, f: F) -> R<T>
where
    T: Send + 'static,
    F: FnOnce(&mut RedbTx<'_, '_>) -> R<T> + Send + 'static,
{
    let (send, got) = std::sync::mpsc::channel();
    let f = Box::new(move |tx: &mut RedbTx<'_, '_>| {
        let _ = send.send(f(tx)?);
        Ok(Answer::Done)
    });
    let campaign = campaign.to_owned();
    let probe = Write::Probe {
        campaign,
        mode,
        f: Some(f),
    };
    store.shared.writer.run(probe).await?;
    Ok(got.recv().expect("the probe's value"))
}

const NOW: EpochMs = 1_700_000_000_000;

fn campaign(id: &str, tasks: usize) -> Campaign {
    let mut text = format!(
        "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 1\npairing = \"none\"\nlease_ttl_s = 600\n[[arms]]\nid = \"a\"\n[driver]\nsim = {{}}\n[tasks]\nitems = [\n"
    );
    for i in 0..tasks {
        text.push_str(&format!("{{ id = \"t{i}\" }},\n"));
    }
    text.push_str("]\n");
    lanes_common::spec::load_str(&text, Path::new("c.toml"), Path::new(".")).expect("a campaign")
}

fn request(lane: usize) -> ClaimRequest {
    ClaimRequest {
        lane: LaneName::new(format!("lane-{lane}")).expect("a lane name"),
        host: "h".parse().unwrap(),
        worker: "w".into(),
        arms: None,
        offer: Default::default(),
        max_units: 1,
    }
}

fn scored(token: &Token) -> Outcome {
    let mut o = Outcome::new(
        token.clone(),
        "lane".parse().unwrap(),
        "h".parse().unwrap(),
        Status::Completed,
    );
    o.result.score = Some(1.0);
    o
}

/// The token of a claim that got exactly one trial.
fn token_of(out: ClaimOutcome) -> Token {
    match out {
        ClaimOutcome::Assigned(a) => {
            assert_eq!((a.len(), a[0].trials.len()), (1, 1), "{a:?}");
            a[0].trials[0].token.clone()
        }
        ClaimOutcome::NoWork { reason, .. } => panic!("no work: {reason:?}"),
    }
}

/// A claim by lane `lane`, as a task (to queue behind a [`Blocked`] writer).
fn spawn_claim(
    store: &EmbeddedStore,
    c: &CampaignId,
    lane: usize,
) -> tokio::task::JoinHandle<Result<ClaimOutcome, StoreError>> {
    let (s, c) = (store.clone(), c.clone());
    tokio::spawn(async move { s.claim(&c, request(lane), NOW).await })
}

/// Holds the file's write side, so the writer stops at its next transaction and everything
/// handed to it meanwhile queues up for one batch.
struct Blocked<'a> {
    store: &'a EmbeddedStore,
    txn: redb::WriteTransaction,
    /// Operations handed to the writer so far, counting those [`Self::queued`] waited for.
    expected: u64,
}

impl<'a> Blocked<'a> {
    fn new(store: &'a EmbeddedStore) -> Self {
        let txn = store.shared.db.begin_write().expect("a write transaction");
        let expected = store.write_stats().submitted;
        Self {
            store,
            txn,
            expected,
        }
    }

    /// Waits until the task's one operation was handed to the writer, so the next one
    /// queues behind it.
    async fn queued<T>(&mut self, task: tokio::task::JoinHandle<T>) -> tokio::task::JoinHandle<T> {
        self.expected += 1;
        self.until_submitted(self.expected).await;
        task
    }

    /// Waits (bounded) until `n` operations in all were handed to the writer.
    async fn until_submitted(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.store.write_stats().submitted < n {
            assert!(Instant::now() < deadline, "{:?}", self.store.write_stats());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn release(self) {
        self.txn.abort().expect("abort");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_operations_share_one_commit_and_each_gets_its_own_answer() {
    const N: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let c = CampaignId::new("grouped").unwrap();
    store.submit(campaign("grouped", N), NOW).await.unwrap();

    // N claims queued together: each must see the trials the ones before it took.
    let before = store.write_stats();
    let blocked = Blocked::new(&store);
    let claims: Vec<_> = (0..N).map(|l| spawn_claim(&store, &c, l)).collect();
    blocked.until_submitted(before.submitted + N as u64).await;
    blocked.release();
    let mut tokens = Vec::new();
    for h in claims {
        tokens.push(token_of(h.await.unwrap().unwrap()));
    }
    let trials: BTreeSet<_> = tokens.iter().map(|t| t.trial_id.clone()).collect();
    assert_eq!(trials.len(), N, "every claim got its own trial: {tokens:?}");
    let after = store.write_stats();
    assert_eq!(after.ops - before.ops, N as u64);
    // The writer may have taken the first claim before the others arrived: two at most.
    assert!(after.commits - before.commits <= 2, "{before:?} {after:?}");

    // And N completions queued together.
    let before = after;
    let blocked = Blocked::new(&store);
    let completes: Vec<_> = tokens
        .iter()
        .map(|t| {
            let (s, c, o) = (store.clone(), c.clone(), scored(t));
            tokio::spawn(async move { s.complete(&c, o, NOW).await })
        })
        .collect();
    blocked.until_submitted(before.submitted + N as u64).await;
    blocked.release();
    let mut seqs = BTreeSet::new();
    for (h, t) in completes.into_iter().zip(&tokens) {
        let ack = h.await.unwrap().unwrap();
        assert_eq!(&ack.token, t);
        assert!(ack.counted && !ack.duplicate && !ack.late, "{ack:?}");
        seqs.insert(ack.seq);
    }
    assert_eq!(seqs.len(), N, "every row its own seq");
    let after = store.write_stats();
    assert!(after.commits - before.commits <= 2, "{before:?} {after:?}");

    let st = store.status(&c, NOW).await.unwrap();
    assert_eq!(
        (st.trials_final, st.trials_counted, st.rows_total),
        (N as u64, N as u64, N as u64)
    );
    assert_eq!(st.state, CampaignState::Done);
    let rows = store.rows(&c, 0, usize::MAX).await.unwrap();
    let scored: BTreeSet<_> = rows.iter().map(|r| r.trial_id.clone()).collect();
    assert_eq!((rows.len(), scored), (N, trials));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_lanes_looping_score_every_trial_once() {
    const N: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let c = CampaignId::new("lanes").unwrap();
    store.submit(campaign("lanes", N), NOW).await.unwrap();
    let lanes: Vec<_> = (0..24)
        .map(|l| {
            let (s, c) = (store.clone(), c.clone());
            tokio::spawn(async move {
                let mut acks = Vec::new();
                loop {
                    let out = s.claim(&c, request(l), NOW).await.unwrap();
                    if matches!(out, ClaimOutcome::NoWork { .. }) {
                        return acks;
                    }
                    let token = token_of(out);
                    acks.push(s.complete(&c, scored(&token), NOW).await.unwrap());
                }
            })
        })
        .collect();
    let mut trials = BTreeSet::new();
    for h in lanes {
        for ack in h.await.unwrap() {
            assert!(ack.counted && !ack.duplicate, "{ack:?}");
            assert!(trials.insert(ack.token.trial_id), "a trial scored twice");
        }
    }
    assert_eq!(trials.len(), N);
    let st = store.status(&c, NOW).await.unwrap();
    assert_eq!((st.trials_counted, st.rows_total), (N as u64, N as u64));
    assert_eq!(st.state, CampaignState::Done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_operation_leaves_the_rest_of_its_batch_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let c = CampaignId::new("mixed").unwrap();
    store.submit(campaign("mixed", 10), NOW).await.unwrap();
    let held = token_of(store.claim(&c, request(0), NOW).await.unwrap());

    let before = store.write_stats();
    let mut blocked = Blocked::new(&store);
    // In queue order: a claim; an operation that writes (a cancel stop) and then fails; a
    // claim that the stop would refuse; completions of an unknown token and of an unknown
    // campaign; the completion of the held lease.
    let first = blocked.queued(spawn_claim(&store, &c, 1)).await;
    let (s, cc) = (store.clone(), c.clone());
    let failing = blocked
        .queued(tokio::spawn(async move {
            probe(&s, "mixed", Mode::Batched, move |tx| {
                let stop = CampaignOp::Stop {
                    campaign: cc,
                    mode: StopMode::Cancel,
                    now: NOW,
                };
                ready(engine::run(tx, &stop))?;
                Err::<(), _>(StoreError::Backend("failed after writing".into()))
            })
            .await
        }))
        .await;
    let second = blocked.queued(spawn_claim(&store, &c, 2)).await;
    let unknown = Token {
        attempt: 7,
        ..held.clone()
    };
    let (s, cc) = (store.clone(), c.clone());
    let bad_token = blocked
        .queued(tokio::spawn(async move {
            s.complete(&cc, scored(&unknown), NOW).await
        }))
        .await;
    let (s, o) = (store.clone(), scored(&held));
    let bad_campaign = blocked
        .queued(tokio::spawn(async move {
            s.complete(&CampaignId::new("no-such").unwrap(), o, NOW)
                .await
        }))
        .await;
    let (s, cc, o) = (store.clone(), c.clone(), scored(&held));
    let good = blocked
        .queued(tokio::spawn(async move { s.complete(&cc, o, NOW).await }))
        .await;
    blocked.release();

    let first = token_of(first.await.unwrap().unwrap());
    let err = failing.await.unwrap().unwrap_err();
    assert!(matches!(err, StoreError::Backend(ref m) if m == "failed after writing"));
    let second = token_of(second.await.unwrap().unwrap());
    assert_ne!(first.trial_id, second.trial_id);
    let err = bad_token.await.unwrap().unwrap_err();
    assert!(matches!(err, StoreError::UnknownToken(_)), "{err}");
    let err = bad_campaign.await.unwrap().unwrap_err();
    assert!(matches!(err, StoreError::UnknownCampaign(_)), "{err}");
    let ack = good.await.unwrap().unwrap();
    assert!(ack.counted && !ack.duplicate, "{ack:?}");

    let after = store.write_stats();
    assert_eq!(after.ops - before.ops, 6);
    assert!(after.commits - before.commits <= 2, "{before:?} {after:?}");
    // The failed stop left nothing behind; everything else stands.
    let st = store.status(&c, NOW).await.unwrap();
    assert_eq!(st.state, CampaignState::Running);
    assert_eq!(st.stop_mode, None);
    assert_eq!((st.rows_total, st.in_flight.len()), (1, 2), "{st:?}");
}

/// A solo operation (a submit) runs in a transaction of its own, writing straight into it: a
/// batch ends before it, the operations queued after it share the next one, and if it fails
/// after writing, its transaction is rolled back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_solo_operation_runs_alone_and_a_failing_one_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let c = CampaignId::new("around").unwrap();
    store.submit(campaign("around", 10), NOW).await.unwrap();

    let before = store.write_stats();
    let mut blocked = Blocked::new(&store);
    let first = blocked.queued(spawn_claim(&store, &c, 1)).await;
    let s = store.clone();
    let failing = blocked
        .queued(tokio::spawn(async move {
            probe(&s, "ghost", Mode::Solo, move |tx| {
                let submit = CampaignOp::Submit {
                    campaign: Box::new(campaign("ghost", 50)),
                    now: NOW,
                };
                ready(engine::run(tx, &submit))?;
                Err::<(), _>(StoreError::Backend("failed after writing".into()))
            })
            .await
        }))
        .await;
    let s = store.clone();
    let solo = blocked
        .queued(tokio::spawn(async move {
            s.submit(campaign("solo", 5), NOW).await
        }))
        .await;
    let second = blocked.queued(spawn_claim(&store, &c, 2)).await;
    let third = blocked.queued(spawn_claim(&store, &c, 3)).await;
    blocked.release();

    let err = failing.await.unwrap().unwrap_err();
    assert!(matches!(err, StoreError::Backend(ref m) if m == "failed after writing"));
    assert_eq!(solo.await.unwrap().unwrap().trials, 5);
    let tokens = [first, second, third].map(|h| async { token_of(h.await.unwrap().unwrap()) });
    let mut trials = BTreeSet::new();
    for t in tokens {
        trials.insert(t.await.trial_id);
    }
    assert_eq!(trials.len(), 3);
    let after = store.write_stats();
    assert_eq!(after.ops - before.ops, 5);
    // [claim] [failing submit] [submit] [claim, claim]: the solo ones each alone.
    assert_eq!(after.batches - before.batches, 4, "{before:?} {after:?}");
    let ghost = CampaignId::new("ghost").unwrap();
    let err = store.status(&ghost, NOW).await.unwrap_err();
    assert!(matches!(err, StoreError::UnknownCampaign(_)), "{err}");
    let txn = store.shared.db.begin_read().unwrap();
    for t in [TASKS, READY, TASK_POS] {
        let table = txn.open_table(t).unwrap();
        let p = super::redb_tx::prefix(b"ghost");
        let end = super::redb_tx::prefix_end(&p);
        let left = table.range(p.as_slice()..end.as_slice()).unwrap().count();
        assert_eq!(left, 0, "{} holds the failed submit's writes", t.name());
    }
    let st = store
        .status(&CampaignId::new("solo").unwrap(), NOW)
        .await
        .unwrap();
    assert_eq!(st.trials_total, 5);
}

/// Renewals linger: a batch of renewals alone waits for more work before it commits, so
/// heartbeats that arrive apart share one commit (before, each paid a commit and an fsync);
/// any other operation ends the wait at once. The linger here is long (10 s), so the test
/// depends on no timing but "well under 10 s".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_linger_for_company_and_other_work_ends_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open_with_linger(dir.path(), Duration::from_secs(10)).unwrap();
    let c = CampaignId::new("linger").unwrap();
    store.submit(campaign("linger", 10), NOW).await.unwrap();
    let tokens: Vec<Token> = {
        let mut t = Vec::new();
        for l in 0..3 {
            t.push(token_of(store.claim(&c, request(l), NOW).await.unwrap()));
        }
        t
    };
    let before = store.write_stats();
    let started = Instant::now();
    let renew = |t: &Token| {
        let (s, c, t) = (store.clone(), c.clone(), t.clone());
        tokio::spawn(async move {
            s.renew(&c, vec![(t, lanes_common::row::Phase::Agent)], NOW + 1)
                .await
        })
    };
    // Two renewals, the second sent only once the first is with the writer (so they are
    // apart), then a claim: all three share one batch and one commit.
    let first = renew(&tokens[0]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.write_stats().submitted == before.submitted {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let second = renew(&tokens[1]);
    while store.write_stats().submitted < before.submitted + 2 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let claim = store.claim(&c, request(9), NOW + 1).await.unwrap();
    token_of(claim);
    for h in [first, second] {
        let answer = h.await.unwrap().unwrap();
        assert_eq!(answer[0].1, RenewState::Renewed, "{answer:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the claim ended the linger: {:?}",
        started.elapsed()
    );
    let after = store.write_stats();
    assert_eq!(
        (after.ops - before.ops, after.batches - before.batches),
        (3, 1),
        "{before:?} {after:?}"
    );
    assert_eq!(after.commits - before.commits, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_completion_is_in_the_reopened_file() {
    let dir = tempfile::tempdir().unwrap();
    let c = CampaignId::new("durable").unwrap();
    let token = {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.submit(campaign("durable", 3), NOW).await.unwrap();
        let token = token_of(store.claim(&c, request(0), NOW).await.unwrap());
        store.complete(&c, scored(&token), NOW).await.unwrap();
        token
        // Dropped here: the writer thread ends and the file closes.
    };
    let store = EmbeddedStore::open(dir.path()).expect("the file opens again");
    let rows = store.rows(&c, 0, usize::MAX).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].trial_id, token.trial_id);
    let st = store.status(&c, NOW).await.unwrap();
    assert_eq!((st.trials_counted, st.in_flight.len()), (1, 0));
}

#[tokio::test]
async fn an_operation_reads_its_own_staged_writes_merged_with_the_stored_ones() {
    use crate::store::model::Queue;
    use crate::store::tx::Tx;
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let c = CampaignId::new("scan").unwrap();
    let q = Queue::provider("p");
    let stored: Vec<u64> = (0..20).map(|k| k * 10).collect();
    let (q2, keys) = (q.clone(), stored.clone());
    probe(&store, c.as_str(), Mode::Batched, move |tx| {
        for k in keys {
            ready(tx.add_ready(&q2, k))?;
        }
        Ok(())
    })
    .await
    .unwrap();
    // One operation removes stored keys, adds keys between and around them, re-adds one it
    // removed, and reads the queue back at several limits.
    let seen = probe(&store, c.as_str(), Mode::Batched, move |tx| {
        ready(async {
            for k in [0, 30, 40, 190] {
                assert!(tx.del_ready(&q, k).await?);
            }
            assert!(!tx.del_ready(&q, 35).await?, "never stored");
            for k in [5, 35, 40, 195, 1000] {
                tx.add_ready(&q, k).await?;
            }
            let mut seen = Vec::new();
            for limit in [1, 3, 7, usize::MAX] {
                seen.push(tx.ready_first(&q, limit).await?);
            }
            seen.push(vec![tx.queues().await?.len() as u64]);
            Ok(seen)
        })
    })
    .await
    .unwrap();
    let mut model: BTreeSet<u64> = stored.into_iter().collect();
    for k in [0, 30, 40, 190] {
        model.remove(&k);
    }
    model.extend([5, 35, 40, 195, 1000]);
    let all: Vec<u64> = model.into_iter().collect();
    for (got, limit) in seen.iter().zip([1, 3, 7, usize::MAX]) {
        assert_eq!(got, &all[..limit.min(all.len())]);
    }
    assert_eq!(seen[4], vec![1], "one queue");
}

/// Tests with a paused clock rely on virtual time standing still while the store works.
#[tokio::test(start_paused = true)]
async fn a_paused_clock_does_not_move_while_the_writer_works() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let c = CampaignId::new("paused").unwrap();
    let start = tokio::time::Instant::now();
    for _ in 0..20 {
        tokio::select! {
            biased;
            out = store.submit(campaign("paused", 3), NOW) => { out.unwrap(); }
            () = tokio::time::sleep(Duration::from_secs(60)) => panic!("virtual time moved on"),
        }
    }
    token_of(store.claim(&c, request(0), NOW).await.unwrap());
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// The meta as the writer's next batch sees it (its `next_event`, which every operation
/// that emits an event moves on).
async fn next_event_seen(store: &EmbeddedStore, c: &str) -> u64 {
    probe(store, c, Mode::Batched, |tx| {
        let meta = ready(tx.meta())?.expect("a meta");
        Ok(meta.next_event)
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_meta_is_decoded_once_while_batches_commit_and_again_after_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let c = CampaignId::new("kept").unwrap();
    {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        store.submit(campaign("kept", 10), NOW).await.unwrap();
    }
    // A fresh writer knows no meta yet.
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let mut tokens = Vec::new();
    for lane in 0..4 {
        tokens.push(token_of(store.claim(&c, request(lane), NOW).await.unwrap()));
    }
    for t in &tokens {
        store.complete(&c, scored(t), NOW).await.unwrap();
    }
    let stats = store.write_stats();
    assert_eq!(stats.batches, 8, "{stats:?}");
    assert_eq!(stats.metas_decoded, 1, "{stats:?}");
    // What the carried meta says is what the file says.
    let st = store.status(&c, NOW).await.unwrap();
    assert_eq!((st.trials_final, st.in_flight.len()), (4, 0));
    let seen = next_event_seen(&store, "kept").await;
    let stored: crate::store::model::Meta = {
        let txn = store.shared.db.begin_read().unwrap();
        let t = txn.open_table(META).unwrap();
        serde_json::from_slice(t.get(b"kept".as_slice()).unwrap().unwrap().value()).unwrap()
    };
    assert_eq!(seen, stored.next_event);

    // An operation that changed the meta and then failed leaves the carried meta alone.
    let failed = probe(&store, "kept", Mode::Batched, |tx| {
        let mut meta = ready(tx.meta())?.expect("a meta");
        meta.next_event += 1_000;
        ready(tx.put_meta(meta))?;
        Err::<(), _>(StoreError::Backend("failed after changing the meta".into()))
    })
    .await;
    assert!(failed.is_err());
    assert_eq!(next_event_seen(&store, "kept").await, stored.next_event);
    assert_eq!(store.write_stats().metas_decoded, 1);

    // A solo operation that fails rolls its transaction back: the next batch decodes again.
    let failed = probe(&store, "ghost", Mode::Solo, |_tx| {
        Err::<(), _>(StoreError::Backend("failed alone".into()))
    })
    .await;
    assert!(failed.is_err());
    assert_eq!(next_event_seen(&store, "kept").await, stored.next_event);
    assert_eq!(store.write_stats().metas_decoded, 2);
}

/// Records what the store reports as committed.
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<EventKind>>);

impl crate::store::CommitObserver for Recorder {
    fn committed(&self, _campaign: &CampaignId, events: &[Event]) {
        self.0
            .lock()
            .unwrap()
            .extend(events.iter().map(|e| e.kind.clone()));
    }
}

impl Recorder {
    fn take(&self) -> Vec<EventKind> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// The observer hears the events of operations that committed, and nothing of one that
/// failed after writing events, batched (staged writes) or solo (straight into its
/// transaction, rolled back).
#[tokio::test]
async fn only_committed_operations_report_their_events() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let seen = Arc::new(Recorder::default());
    store.set_observer(seen.clone());
    let c = CampaignId::new("observed").unwrap();
    store.submit(campaign("observed", 1), NOW).await.unwrap();
    assert!(seen.take().is_empty(), "a fresh submit emits no event");
    let t = token_of(store.claim(&c, request(0), NOW).await.unwrap());
    assert!(matches!(
        seen.take().as_slice(),
        [EventKind::AttemptStarted { .. }]
    ));
    // An operation that wrote an event and then failed: batched, then solo.
    for mode in [Mode::Batched, Mode::Solo] {
        let out: R<()> = probe(&store, c.as_str(), mode, |tx| {
            ready(tx.put_event(&Event {
                seq: 999,
                at_ms: NOW,
                kind: EventKind::CampaignDone,
            }))?;
            Err(StoreError::Backend("failed after writing".into()))
        })
        .await;
        assert!(out.is_err());
        assert!(
            seen.take().is_empty(),
            "{mode:?}: a failed op reported events"
        );
    }
    // A completion with a token never issued fails: nothing.
    let foreign = Token {
        attempt: 9,
        ..t.clone()
    };
    assert!(store.complete(&c, scored(&foreign), NOW).await.is_err());
    assert!(seen.take().is_empty());
    store.complete(&c, scored(&t), NOW).await.unwrap();
    let kinds = seen.take();
    assert!(
        matches!(
            kinds.as_slice(),
            [
                EventKind::TrialFinal { counted: true, .. },
                EventKind::AttemptFinished {
                    status: Status::Completed,
                    ..
                },
                EventKind::CampaignDone,
            ]
        ),
        "{kinds:?}"
    );
    // Exactly what the event log holds.
    let logged: Vec<EventKind> = store
        .events(&c, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(logged.len(), 4, "{logged:?}");
}
