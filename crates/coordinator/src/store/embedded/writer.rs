//! Group commit. One thread owns the file's write side: it takes every operation queued
//! (up to [`MAX_BATCH`]), runs them one after another in ONE write transaction, commits
//! once (durably), and only then answers each of them. An fsync costs the same for one
//! operation as for a hundred, so concurrent callers share it instead of queueing for one
//! each. An operation that fails leaves no trace: its writes were staged, and reach the
//! transaction only when it succeeds. A batch whose commit fails acknowledges nothing.
//!
//! Lease renewals **linger**: a batch of renewals only waits up to [`LINGER`] for more work
//! before it commits. Heartbeats arrive spread over each second, so without it every one paid
//! a commit and an fsync of its own; any other operation ends the wait at once.
//!
//! A submit runs **solo**: alone in its transaction, writing straight into it, and the
//! transaction is rolled back if it fails. Staging a million trials' writes in memory first
//! cost ~430 MB of a 1M-trial submit's peak.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redb::{Database, Durability};
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;

use super::backend;
use super::batch::{Batch, Metas};
use super::redb_tx::RedbTx;
use super::staged::Staged;
use crate::store::api::{Event, StoreError};
use crate::store::observe::ObserverSlot;
use crate::store::tx::R;

/// The most operations one transaction takes: bounds how long an answer waits behind the
/// operations ahead of it in its batch.
const MAX_BATCH: usize = 256;

/// The longest a batch of renewals alone waits for more operations before it commits.
pub(super) const LINGER: Duration = Duration::from_millis(100);

/// How an operation shares transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// With whatever else is queued.
    Batched,
    /// Batched, and a batch of nothing else waits up to the linger for more (renewals).
    Lingering,
    /// Alone in its transaction, writing straight into it (submits).
    Solo,
}

/// What the writer did since the store was opened: how well operations share commits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Operations handed to the writer.
    pub submitted: u64,
    /// Operations run (each answered once its batch's fate was known).
    pub ops: u64,
    /// Write transactions run, one per batch.
    pub batches: u64,
    /// Durable commits: batches that wrote something (a batch of reads only is not committed).
    pub commits: u64,
    /// Campaign metas decoded from the file: once per campaign while batches commit, since
    /// each batch starts from the metas the one before it committed.
    pub metas_decoded: u64,
}

#[derive(Default)]
struct Counters {
    submitted: AtomicU64,
    ops: AtomicU64,
    batches: AtomicU64,
    commits: AtomicU64,
    metas_decoded: AtomicU64,
}

/// An operation queued for the writer.
trait Op: Send {
    /// Runs on the batch; answers the operation's staged writes if it succeeded, `None` if
    /// it failed (nothing to apply).
    fn run(&mut self, batch: &mut Batch<'_>) -> Option<Staged>;
    fn mode(&self) -> Mode;
    /// The campaign whose keys it uses (empty for store-wide values).
    fn campaign(&self) -> &str;
    /// Answers the caller once the batch is durable (`Ok`), or with why it is not.
    fn answer(self: Box<Self>, batch: Result<(), &str>);
}

struct Pending<T, F> {
    campaign: String,
    mode: Mode,
    f: Option<F>,
    out: Option<R<T>>,
    reply: oneshot::Sender<R<T>>,
}

impl<T, F> Op for Pending<T, F>
where
    T: Send,
    F: FnOnce(&mut RedbTx<'_, '_>) -> R<T> + Send,
{
    fn run(&mut self, batch: &mut Batch<'_>) -> Option<Staged> {
        let f = self.f.take()?;
        let mut tx = RedbTx::new(batch, self.campaign.as_bytes(), self.mode == Mode::Solo);
        let out = f(&mut tx);
        let staged = out.is_ok().then(|| tx.into_staged());
        self.out = Some(out);
        staged
    }

    fn mode(&self) -> Mode {
        self.mode
    }

    fn campaign(&self) -> &str {
        &self.campaign
    }

    fn answer(self: Box<Self>, batch: Result<(), &str>) {
        let answer = match (batch, self.out) {
            (Err(why), _) => Err(backend(why)),
            (Ok(()), Some(out)) => out,
            // `run` never finished: the operation panicked.
            (Ok(()), None) => Err(backend("the store operation panicked")),
        };
        // The caller may have gone away; the operation stands either way.
        let _ = self.reply.send(answer);
    }
}

/// The handle to the writer thread; dropping it lets the thread finish its batch and closes
/// the file's write side (so the file can be opened again in this process).
pub(super) struct Writer {
    queue: Option<mpsc::Sender<Box<dyn Op>>>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
}

impl Writer {
    pub(super) fn start(db: Arc<Database>, linger: Duration, observer: ObserverSlot) -> R<Self> {
        let (queue, rx) = mpsc::channel::<Box<dyn Op>>();
        let counters = Arc::new(Counters::default());
        let c = counters.clone();
        let thread = std::thread::Builder::new()
            .name("lanes-redb-writer".into())
            .spawn(move || {
                // A solo operation met while filling a batch waits for the next one.
                let mut carried: Option<Box<dyn Op>> = None;
                // The metas as the last batch committed them (this thread is the file's only
                // writer, and redb locks the file to this process).
                let mut metas = Metas::new();
                while let Some(first) = carried.take().or_else(|| rx.recv().ok()) {
                    let mut lingering = first.mode() == Mode::Lingering;
                    let solo = first.mode() == Mode::Solo;
                    let mut batch = vec![first];
                    let mut until: Option<Instant> = None;
                    while batch.len() < MAX_BATCH && !solo {
                        let next = match rx.try_recv() {
                            Ok(op) => Some(op),
                            Err(mpsc::TryRecvError::Empty) if lingering => {
                                let until = *until.get_or_insert_with(|| Instant::now() + linger);
                                match until.checked_duration_since(Instant::now()) {
                                    Some(left) if !left.is_zero() => rx.recv_timeout(left).ok(),
                                    _ => None,
                                }
                            }
                            Err(_) => None,
                        };
                        match next {
                            None => break,
                            Some(op) if op.mode() == Mode::Solo => {
                                carried = Some(op);
                                break;
                            }
                            Some(op) => {
                                lingering &= op.mode() == Mode::Lingering;
                                batch.push(op);
                            }
                        }
                    }
                    // A panic outside the operations (in redb) drops the batch's answers, so
                    // its callers get an error; the transaction was rolled back as it
                    // unwound, and the writer goes on with the next batch.
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        run_batch(&db, batch, &c, &mut metas, &observer);
                    }));
                }
            })
            .map_err(|e| backend(format!("cannot start the store writer: {e}")))?;
        Ok(Self {
            queue: Some(queue),
            thread: Some(thread),
            counters,
        })
    }

    /// Runs `f` in the next batch, shared as `mode` says; answers once that batch committed.
    pub(super) async fn run<T, F>(&self, campaign: String, mode: Mode, f: F) -> R<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut RedbTx<'_, '_>) -> R<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let op = Box::new(Pending {
            campaign,
            mode,
            f: Some(f),
            out: None,
            reply,
        });
        self.queue
            .as_ref()
            .ok_or_else(|| backend("the store writer is closed"))?
            .send(op)
            .map_err(|_| backend("the store writer stopped"))?;
        self.counters.submitted.fetch_add(1, Ordering::Relaxed);
        let dropped = |_| backend("the store writer dropped the operation");
        // A current-thread runtime with a paused clock (tests) moves its clock on whenever
        // no task can run, unless a blocking task is in flight: waiting as one keeps virtual
        // time still while the writer works, as the store's blocking calls always did.
        if Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::CurrentThread) {
            return tokio::task::spawn_blocking(move || answer.blocking_recv())
                .await
                .map_err(|e| backend(format!("store task failed: {e}")))?
                .map_err(dropped)?;
        }
        answer.await.map_err(dropped)?
    }

    pub(super) fn stats(&self) -> WriteStats {
        WriteStats {
            submitted: self.counters.submitted.load(Ordering::Relaxed),
            ops: self.counters.ops.load(Ordering::Relaxed),
            batches: self.counters.batches.load(Ordering::Relaxed),
            commits: self.counters.commits.load(Ordering::Relaxed),
            metas_decoded: self.counters.metas_decoded.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the queue ends the thread's loop once what is queued has run.
        self.queue.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs one batch in one transaction and answers every operation of it. `metas` holds the
/// decoded metas as committed: the batch starts from them and leaves its own once it has
/// committed, and nothing if it did not (a panic unwinding through here leaves nothing too).
fn run_batch(
    db: &Database,
    mut batch: Vec<Box<dyn Op>>,
    counters: &Counters,
    metas: &mut Metas,
    observer: &ObserverSlot,
) {
    counters.batches.fetch_add(1, Ordering::Relaxed);
    counters
        .ops
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    let fate = match run_in_txn(db, &mut batch, metas, counters) {
        Ok((wrote, events)) => {
            if wrote {
                counters.commits.fetch_add(1, Ordering::Relaxed);
            }
            // Before the answers: a caller that saw its operation done also sees it counted.
            report(observer, events);
            Ok(())
        }
        Err(e) => Err(e.to_string()),
    };
    for op in batch {
        op.answer(fate.as_ref().copied().map_err(String::as_str));
    }
}

/// The events of a committed batch, by campaign, to the observer.
fn report(observer: &ObserverSlot, events: Vec<(String, Vec<Event>)>) {
    for (campaign, events) in events {
        // Only operations on a campaign's keys emit events, so the id is one.
        if let Ok(id) = lanes_common::ids::CampaignId::new(campaign) {
            observer.committed(&id, &events);
        }
    }
}

/// The events of each operation applied to a batch, by its campaign.
type BatchEvents = Vec<(String, Vec<Event>)>;

/// Runs the batch's operations in order, each seeing the writes of those before it, and
/// commits; answers whether anything was written, and the events of the operations that
/// succeeded (only to be reported once the commit is done, which it is when this is `Ok`).
fn run_in_txn(
    db: &Database,
    batch: &mut [Box<dyn Op>],
    metas: &mut Metas,
    counters: &Counters,
) -> Result<(bool, BatchEvents), StoreError> {
    let mut events = BatchEvents::new();
    let known = std::mem::take(metas);
    let mut txn = db.begin_write().map_err(backend)?;
    // redb's default, spelled out: commit returns only once the batch is on disk.
    txn.set_durability(Durability::Immediate).map_err(backend)?;
    let mut open = Batch::open(&txn, known)?;
    for op in batch.iter_mut() {
        // A panicking operation answers an error; its writes were only staged, so the
        // transaction holds none of them.
        let staged =
            std::panic::catch_unwind(AssertUnwindSafe(|| op.run(&mut open))).unwrap_or(None);
        match staged {
            Some(mut staged) => {
                let emitted = std::mem::take(&mut staged.events);
                open.apply(staged)?;
                if !emitted.is_empty() {
                    events.push((op.campaign().to_owned(), emitted));
                }
            }
            // A solo operation wrote into the transaction as it went: it failed, so none of
            // that stands. It is alone in its batch and answers its own error.
            None if op.mode() == Mode::Solo => {
                drop(open);
                txn.abort().map_err(backend)?;
                return Ok((false, BatchEvents::new()));
            }
            None => {}
        }
    }
    counters
        .metas_decoded
        .fetch_add(open.metas_decoded(), Ordering::Relaxed);
    let (wrote, left) = open.finish()?;
    if wrote {
        txn.commit().map_err(backend)?;
    } else {
        // Nothing to make durable: every answer was read from committed data.
        txn.abort().map_err(backend)?;
    }
    *metas = left;
    Ok((wrote, events))
}
