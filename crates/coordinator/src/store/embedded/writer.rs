//! Group commit on the file. One thread owns its write side: it takes a batch from the
//! shared group-commit [`Queue`] (the cap, the renewal linger and solo operations are that
//! queue's policy), runs the operations one after another in ONE write transaction, commits
//! once (durably), and only then answers each of them. An operation that fails leaves no
//! trace: its writes were staged, and reach the transaction only when it succeeds. A batch
//! whose commit fails acknowledges nothing.
//!
//! A solo operation (a submit, a retry pass, a delete) writes straight into its transaction,
//! which is rolled back if it fails: staging a million trials' writes in memory first cost
//! ~430 MB of a 1M-trial submit's peak.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redb::{Database, Durability};
use tokio::runtime::{Handle, RuntimeFlavor};

use super::apply::apply;
use super::backend;
use super::batch::{Batch, Metas};
use super::redb_tx::RedbTx;
use super::staged::Staged;
use crate::store::api::{Event, StoreError};
use crate::store::group::{Grouped, MAX_BATCH, Mode, Pending, Queue, Take};
use crate::store::observe::ObserverSlot;
use crate::store::op::{Answer, Op};
use crate::store::tx::R;

pub(super) use crate::store::group::LINGER;

/// A function of the transaction, run as one operation (tests).
#[cfg(test)]
pub(super) type Probe = Box<dyn FnOnce(&mut RedbTx<'_, '_>) -> R<Answer> + Send>;

/// What the writer runs: a store operation, or (in tests) any function of the transaction.
pub(super) enum Write {
    Op(Op),
    /// A function of the transaction, shared as `mode` says: to run operations that fail
    /// after writing, which no store operation does on purpose.
    #[cfg(test)]
    Probe {
        campaign: String,
        mode: Mode,
        f: Option<Probe>,
    },
}

impl Grouped for Write {
    fn mode(&self) -> Mode {
        match self {
            Self::Op(op) => op.mode(),
            #[cfg(test)]
            Self::Probe { mode, .. } => *mode,
        }
    }
}

impl Write {
    /// The campaign whose keys it uses (empty for store-wide values).
    fn campaign(&self) -> &[u8] {
        match self {
            Self::Op(Op::Campaign(op)) => op.campaign().as_str().as_bytes(),
            Self::Op(Op::Delete { campaign }) => campaign.as_str().as_bytes(),
            Self::Op(_) => b"",
            #[cfg(test)]
            Self::Probe { campaign, .. } => campaign.as_bytes(),
        }
    }

    fn run(&mut self, tx: &mut RedbTx<'_, '_>) -> R<Answer> {
        match self {
            Self::Op(op) => apply(tx, op),
            #[cfg(test)]
            Self::Probe { f, .. } => match f.take() {
                Some(f) => f(tx),
                None => Err(backend("a probe ran twice")),
            },
        }
    }
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

/// The queue, as the callers and the writer thread share it.
#[derive(Default)]
struct Inbox {
    state: Mutex<InboxState>,
    /// Signalled when an operation is queued or the inbox closes.
    ready: Condvar,
}

#[derive(Default)]
struct InboxState {
    queue: Queue<Write, Instant>,
    closed: bool,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, InboxState> {
        // A panic while holding this lock leaves plain data behind: keep going with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next batch, waiting for one; `None` once closed and empty.
    fn next(&self, linger: Duration) -> Option<Vec<Pending<Write, Instant>>> {
        let mut state = self.lock();
        loop {
            // Closing ends every linger: what is queued runs at once.
            let linger = if state.closed { Duration::ZERO } else { linger };
            let now = Instant::now();
            state = match state.queue.take(now, linger, 1, MAX_BATCH) {
                Take::Batch(batch) => return Some(batch),
                Take::Linger(until) => {
                    let left = until.saturating_duration_since(now);
                    self.ready
                        .wait_timeout(state, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                Take::Wait if state.closed => return None,
                Take::Wait => self.ready.wait(state).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
}

/// The handle to the writer thread; dropping it lets the thread finish what is queued and
/// closes the file's write side (so the file can be opened again in this process).
pub(super) struct Writer {
    inbox: Arc<Inbox>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
}

impl Writer {
    pub(super) fn start(db: Arc<Database>, linger: Duration, observer: ObserverSlot) -> R<Self> {
        let inbox = Arc::new(Inbox::default());
        let counters = Arc::new(Counters::default());
        let (c, queue) = (counters.clone(), inbox.clone());
        let thread = std::thread::Builder::new()
            .name("lanes-redb-writer".into())
            .spawn(move || {
                // The metas as the last batch committed them (this thread is the file's only
                // writer, and redb locks the file to this process).
                let mut metas = Metas::new();
                while let Some(batch) = queue.next(linger) {
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
            inbox,
            thread: Some(thread),
            counters,
        })
    }

    /// Runs `write` in the next batch it may share; answers once that batch committed.
    pub(super) async fn run(&self, write: Write) -> R<Answer> {
        let answer = {
            let mut state = self.inbox.lock();
            if state.closed {
                return Err(backend("the store writer is closed"));
            }
            state.queue.push(write, Instant::now())
        };
        self.inbox.ready.notify_one();
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
        // Closing the inbox ends the thread's loop once what is queued has run.
        self.inbox.lock().closed = true;
        self.inbox.ready.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An operation of the batch being run, and its answer until the batch's fate is known.
struct Job {
    pending: Pending<Write, Instant>,
    out: Option<R<Answer>>,
}

impl Job {
    /// Runs the operation on the batch; answers its staged writes if it succeeded, `None` if
    /// it failed (nothing to apply).
    fn run(&mut self, batch: &mut Batch<'_>) -> Option<Staged> {
        let write = &mut self.pending.op;
        let solo = write.mode() == Mode::Solo;
        let campaign = write.campaign().to_vec();
        let mut tx = RedbTx::new(batch, &campaign, solo);
        let out = write.run(&mut tx);
        let staged = out.is_ok().then(|| tx.into_staged());
        self.out = Some(out);
        staged
    }

    /// Answers the caller once the batch is durable (`Ok`), or with why it is not.
    fn answer(self, batch: Result<(), &str>) {
        let answer = match (batch, self.out) {
            (Err(why), _) => Err(backend(why)),
            (Ok(()), Some(out)) => out,
            // `run` never finished: the operation panicked.
            (Ok(()), None) => Err(backend("the store operation panicked")),
        };
        self.pending.answer(answer);
    }
}

/// Runs one batch in one transaction and answers every operation of it. `metas` holds the
/// decoded metas as committed: the batch starts from them and leaves its own once it has
/// committed, and nothing if it did not (a panic unwinding through here leaves nothing too).
fn run_batch(
    db: &Database,
    batch: Vec<Pending<Write, Instant>>,
    counters: &Counters,
    metas: &mut Metas,
    observer: &ObserverSlot,
) {
    counters.batches.fetch_add(1, Ordering::Relaxed);
    counters
        .ops
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    let mut jobs: Vec<Job> = batch
        .into_iter()
        .map(|pending| Job { pending, out: None })
        .collect();
    let fate = match run_in_txn(db, &mut jobs, metas, counters) {
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
    for job in jobs {
        job.answer(fate.as_ref().copied().map_err(String::as_str));
    }
}

/// The events of a committed batch, by campaign, to the observer.
fn report(observer: &ObserverSlot, events: BatchEvents) {
    for (campaign, events) in events {
        // Only operations on a campaign's keys emit events, so the id is one.
        if let Some(id) = std::str::from_utf8(&campaign)
            .ok()
            .and_then(|c| lanes_common::ids::CampaignId::new(c).ok())
        {
            observer.committed(&id, &events);
        }
    }
}

/// The events of each operation applied to a batch, by its campaign.
type BatchEvents = Vec<(Vec<u8>, Vec<Event>)>;

/// Runs the batch's operations in order, each seeing the writes of those before it, and
/// commits; answers whether anything was written, and the events of the operations that
/// succeeded (only to be reported once the commit is done, which it is when this is `Ok`).
fn run_in_txn(
    db: &Database,
    batch: &mut [Job],
    metas: &mut Metas,
    counters: &Counters,
) -> Result<(bool, BatchEvents), StoreError> {
    let mut events = BatchEvents::new();
    let known = std::mem::take(metas);
    let mut txn = db.begin_write().map_err(backend)?;
    // redb's default, spelled out: commit returns only once the batch is on disk.
    txn.set_durability(Durability::Immediate).map_err(backend)?;
    let mut open = Batch::open(&txn, known)?;
    for job in batch.iter_mut() {
        // A panicking operation answers an error; its writes were only staged, so the
        // transaction holds none of them.
        let staged =
            std::panic::catch_unwind(AssertUnwindSafe(|| job.run(&mut open))).unwrap_or(None);
        match staged {
            Some(mut staged) => {
                let emitted = std::mem::take(&mut staged.events);
                open.apply(staged)?;
                if !emitted.is_empty() {
                    events.push((job.pending.op.campaign().to_vec(), emitted));
                }
            }
            // A solo operation wrote into the transaction as it went: it failed, so none of
            // that stands. It is alone in its batch and answers its own error.
            None if job.pending.op.mode() == Mode::Solo => {
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
