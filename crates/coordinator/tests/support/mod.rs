//! Shared harness for the store suites: a backend under test, a manual clock, and helpers that
//! build campaigns and outcomes. Each backend gets a fresh, isolated store per test.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::sync::Arc;

use lanes_common::ids::{CampaignId, Token};
use lanes_common::row::{FailureKind, Outcome, Phase, Status};
use lanes_common::spec::{self, Campaign};
use lanes_coordinator::store::{
    Answer, Assignment, ClaimOutcome, ClaimRequest, EmbeddedStore, ManualClock, Op, RedisOptions,
    RedisStore, Store, StoreError,
};
use lanes_tests::redis_server::RedisServer;

/// 2026-12-01T00:00:00Z.
pub const T0: i64 = 1_796_083_200_000;

/// How long a batch of renewals alone waits for more operations. The suites run operations
/// one after another, so the production 100 ms would be spent in full by every lone renewal;
/// a short linger still takes the same path (wait, then commit).
pub const LINGER: std::time::Duration = std::time::Duration::from_millis(2);

/// The Redis store's options in these suites.
pub fn redis_options() -> RedisOptions {
    RedisOptions {
        renew_linger: Some(LINGER),
        ..RedisOptions::default()
    }
}

/// The embedded store in `dir`, with the suites' linger.
pub fn open_embedded(dir: &Path) -> EmbeddedStore {
    EmbeddedStore::open_with_linger(dir, LINGER).expect("open embedded store")
}

/// A store under test, with what keeps it alive.
pub struct Harness {
    pub store: Arc<dyn Store>,
    pub clock: ManualClock,
    pub dir: tempfile::TempDir,
    pub backend: &'static str,
    /// The Redis backend's own server.
    pub redis: Option<RedisServer>,
}

impl Harness {
    pub fn embedded() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = open_embedded(dir.path());
        Self {
            store: Arc::new(store),
            clock: ManualClock::new(T0),
            dir,
            backend: "embedded",
            redis: None,
        }
    }

    /// A Redis store on its own, freshly started, durable `redis-server`.
    pub async fn redis() -> Self {
        let server = RedisServer::start();
        let store = RedisStore::connect(&server.url(), redis_options())
            .await
            .expect("connect to the test redis-server");
        Self {
            store: Arc::new(store),
            clock: ManualClock::new(T0),
            dir: tempfile::tempdir().expect("temp dir"),
            backend: "redis",
            redis: Some(server),
        }
    }

    /// Two Redis replicas (stores) on one fresh server, taking the calls in turn: each call
    /// goes to the other replica than the last, so every replica's cache and rounds meet the
    /// other's commits. `reconnect` makes a single store again.
    pub async fn redis_replicas() -> Self {
        let mut h = Self::redis().await;
        let url = h.redis.as_ref().expect("a redis harness").url();
        let other = RedisStore::connect(&url, redis_options())
            .await
            .expect("connect a second replica");
        h.store = Arc::new(Alternating {
            stores: [h.store.clone(), Arc::new(other)],
            next: std::sync::atomic::AtomicUsize::new(0),
        });
        h.backend = "redis-replicas";
        h
    }

    /// A new connection to this harness's Redis server.
    pub async fn reconnect(&mut self) {
        let url = self.redis.as_ref().expect("a redis harness").url();
        self.store = Arc::new(
            RedisStore::connect(&url, redis_options())
                .await
                .expect("reconnect to redis"),
        );
    }

    /// Closes and reopens the store on the same data (embedded: the same file). redb locks
    /// its file while open, so the old handle is swapped for a scratch store and dropped first.
    pub fn reopen(&mut self) {
        let scratch = tempfile::tempdir().expect("temp dir");
        let old = std::mem::replace(
            &mut self.store,
            Arc::new(EmbeddedStore::open(scratch.path()).expect("scratch store")),
        );
        assert_eq!(
            Arc::strong_count(&old),
            1,
            "no other handle may keep the store open"
        );
        drop(old);
        self.store = Arc::new(open_embedded(self.dir.path()));
    }

    pub fn now(&self) -> i64 {
        use lanes_coordinator::store::Clock;
        self.clock.now_ms()
    }

    pub fn advance_s(&self, s: i64) {
        self.clock.advance_ms(s * 1000);
    }

    pub async fn submit(&self, campaign: Campaign) -> lanes_coordinator::store::Submitted {
        self.store
            .submit(campaign, self.now())
            .await
            .expect("submit")
    }

    pub async fn claim(&self, c: &CampaignId, lane: &str, host: &str, n: u32) -> ClaimOutcome {
        self.store
            .claim(c, request(lane, host, n), self.now())
            .await
            .expect("claim")
    }

    /// Claims and expects work.
    pub async fn claim_some(
        &self,
        c: &CampaignId,
        lane: &str,
        host: &str,
        n: u32,
    ) -> Vec<Assignment> {
        match self.claim(c, lane, host, n).await {
            ClaimOutcome::Assigned(a) => a,
            other => panic!("expected work for {lane}@{host}, got {other:?}"),
        }
    }

    /// Claims one unit and returns its tokens.
    pub async fn claim_tokens(&self, c: &CampaignId, lane: &str, host: &str) -> Vec<Token> {
        self.claim_some(c, lane, host, 1).await[0]
            .trials
            .iter()
            .map(|t| t.token.clone())
            .collect()
    }

    pub async fn renew(
        &self,
        c: &CampaignId,
        token: &Token,
        phase: Phase,
    ) -> lanes_coordinator::store::RenewState {
        self.store
            .renew(c, vec![(token.clone(), phase)], self.now())
            .await
            .expect("renew")[0]
            .1
    }

    pub async fn rows(&self, c: &CampaignId) -> Vec<lanes_common::row::Row> {
        self.store.rows(c, 0, usize::MAX).await.expect("rows")
    }
}

pub fn request(lane: &str, host: &str, n: u32) -> ClaimRequest {
    ClaimRequest {
        lane: lanes_common::ids::LaneName::new(lane).expect("a valid lane name"),
        host: host.parse().expect("a valid host name"),
        worker: format!("worker-{host}"),
        arms: None,
        offer: Default::default(),
        max_units: n,
    }
}

/// A campaign from TOML text with inline tasks `T0..T{n_tasks}`, a sim driver, and `extra`
/// appended (more keys or tables).
pub fn campaign(
    id: &str,
    arms: &[(&str, &str)],
    n_tasks: usize,
    head: &str,
    extra: &str,
) -> Campaign {
    let mut text = format!("id = \"{id}\"\nschedule_seed = 7\n");
    if !head.contains("phase1_runs") {
        text.push_str("phase1_runs = 1\n");
    }
    text.push_str(head);
    text.push('\n');
    text.push_str("[tasks]\nitems = [\n");
    for i in 0..n_tasks {
        text.push_str(&format!(
            "  {{ id = \"T{i}\", payload = {{ n = {i} }} }},\n"
        ));
    }
    text.push_str("]\n[driver]\nsim = {}\n");
    for (arm, provider) in arms {
        text.push_str(&format!(
            "[[arms]]\nid = \"{arm}\"\nprovider = \"{provider}\"\n"
        ));
    }
    text.push_str(extra);
    spec::load_str(&text, Path::new("test.toml"), Path::new("."))
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The reason of a claim that must answer no work.
pub fn no_work(outcome: ClaimOutcome) -> lanes_common::policy::NoWorkReason {
    match outcome {
        ClaimOutcome::NoWork { reason, .. } => reason,
        ClaimOutcome::Assigned(a) => panic!("expected no work, got {a:?}"),
    }
}

pub fn cid(s: &str) -> CampaignId {
    CampaignId::new(s).unwrap()
}

/// A scored outcome.
pub fn scored(token: &Token, lane: &str, host: &str, status: Status, score: f64) -> Outcome {
    let mut o = Outcome::new(
        token.clone(),
        lane.parse().unwrap(),
        host.parse().unwrap(),
        status,
    );
    o.result.score = Some(score);
    o.result.passed = Some(score >= 1.0);
    o
}

/// An infra failure.
pub fn infra(token: &Token, lane: &str, host: &str, kind: FailureKind) -> Outcome {
    let mut o = Outcome::new(
        token.clone(),
        lane.parse().unwrap(),
        host.parse().unwrap(),
        Status::InfraError,
    );
    o.failure_kind = Some(kind);
    o
}

/// Instantiates each listed case once per backend, in a module named after the backend, so
/// every test name contains the backend's name (`embedded::first_scored_wins`, ...).
#[macro_export]
macro_rules! per_backend {
    ($backend:ident => $make:expr; $($case:ident),+ $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    #[allow(unused_mut)]
                    let mut h = { use super::*; $make };
                    super::$case(&mut h).await;
                }
            )+
        }
    };
}

/// Stores that take calls in turn (see [`Harness::redis_replicas`]).
struct Alternating {
    stores: [Arc<dyn Store>; 2],
    next: std::sync::atomic::AtomicUsize,
}

impl Alternating {
    fn pick(&self) -> &Arc<dyn Store> {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        &self.stores[i % 2]
    }
}

#[async_trait::async_trait]
impl Store for Alternating {
    async fn execute(&self, op: Op) -> Result<Answer, StoreError> {
        self.pick().execute(op).await
    }
}
