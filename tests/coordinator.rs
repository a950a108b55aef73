//! A real coordinator (tonic server) on 127.0.0.1:0, stopped on drop.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lanes_coordinator::auth::AuthConfig;
use lanes_coordinator::store::{Clock, RedisOptions, RedisStore, Store};
use lanes_coordinator::{CoordinatorConfig, run};

pub const CLIENT_TOKEN: &str = "client-token-for-tests";
pub const LANE_TOKEN: &str = "lane-token-for-tests";

/// A running coordinator replica.
pub struct CoordinatorHandle {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// The config tests use: tokens on, fast polling, a reaper that runs often and starts at once
/// (tests move the injected clock instead).
pub fn test_config() -> CoordinatorConfig {
    CoordinatorConfig {
        auth: AuthConfig::tokens(CLIENT_TOKEN, LANE_TOKEN).expect("valid test tokens"),
        poll: Duration::from_millis(20),
        reap_every: Duration::from_millis(50),
        reaper_start_delay: Duration::ZERO,
        max_client_message_bytes: 8 * 1024 * 1024,
        ..CoordinatorConfig::default()
    }
}

impl CoordinatorHandle {
    pub async fn start(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Self::start_with(test_config(), store, clock).await
    }

    pub async fn start_with(
        config: CoordinatorConfig,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self::start_on("127.0.0.1:0".parse().expect("addr"), config, store, clock).await
    }

    /// Starts on a given address (a restart on the same port).
    pub async fn start_on(
        addr: SocketAddr,
        config: CoordinatorConfig,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            run(config, store, clock, listener, async {
                let _ = rx.await;
            })
            .await
            .expect("coordinator serves");
        });
        Self {
            addr,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// `n` replicas on one Redis (each with its own connection), sharing `clock`.
    pub async fn redis_replicas(redis_url: &str, clock: Arc<dyn Clock>, n: usize) -> Vec<Self> {
        let mut replicas = Vec::with_capacity(n);
        for _ in 0..n {
            let store: Arc<dyn Store> = Arc::new(
                RedisStore::connect(redis_url, RedisOptions::default())
                    .await
                    .expect("connect to the test redis"),
            );
            replicas.push(Self::start(store, clock.clone()).await);
        }
        replicas
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops it and waits until it has.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }
}

impl Drop for CoordinatorHandle {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}
