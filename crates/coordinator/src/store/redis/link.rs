//! The link to the Redis master, shared by every request of a store.
//!
//! A [`Conn`] is a cheap handle on the store's [`Link`], which holds a connection to the
//! master: a fixed address (`--redis`), or the master that Sentinels name (`--redis-sentinel`),
//! followed across failovers. With Sentinels the link asks them again once a second, and at once
//! when a request fails in a way that says the master may have moved (the connection dropped,
//! timed out or was refused, or the node answered `READONLY`); a new master is used only after
//! it answered `ROLE` as a master and passed the same checks as at start ([`durability`]).
//! A master that fails them is not written to: every request fails as unavailable, naming
//! why, until a master that passes is found. Requests in flight when the master changed
//! finish, or fail, on the old connection; a write that reached an old master is never
//! acknowledged with `--redis-wait` (its `WAIT` finds no replica), so the caller retries.
//!
//! [`Conn::acked`] sends a write that an acknowledgement depends on: with `--redis-wait N`,
//! pipelined with `WAIT N <timeout>` on the same connection, so the `WAIT` covers that very
//! write. Fewer replicas than `N` in time is an unavailable store, not an acknowledgement.
//!
//! [`durability`]: super::durability

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Cmd, FromRedisValue, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use super::durability::{self, Requirements};
use super::redis_err;
use super::sentinel::{self, Sentinels};
use super::stats::Counters;
use crate::store::api::StoreError;

/// How often the Sentinels are asked which node is the master.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// A client for `url`, with `ca` as the only root of a `rediss://` server's certificate.
pub(crate) fn client(url: &str, ca: Option<&[u8]>) -> Result<Client, StoreError> {
    if ca.is_some() && !url.starts_with("rediss://") {
        return Err(StoreError::Backend(
            "a Redis TLS CA is given but the url is not rediss://".into(),
        ));
    }
    match ca {
        Some(ca) => Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca.to_vec()),
            },
        ),
        None => Client::open(url),
    }
    .map_err(|e| StoreError::Backend(format!("bad redis url: {e}")))
}

/// Connects a connection manager (which reconnects to that address by itself from then on).
async fn manage(client: Client) -> Result<ConnectionManager, StoreError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(10)))
        .set_number_of_retries(3)
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_with_config(client, config)
        .await
        .map_err(redis_err)
}

/// `WAIT n <timeout>` after each acknowledged write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wait {
    pub(crate) replicas: u32,
    pub(crate) timeout_ms: u64,
}

/// The master in use.
#[derive(Clone)]
struct Master {
    /// `host:port`, for status and messages.
    addr: String,
    conn: ConnectionManager,
    /// Why this master must not be written to (it failed the checks), if it must not.
    refused: Option<Arc<str>>,
}

/// Where the master is found.
enum Source {
    Fixed,
    Sentinel {
        sentinels: Sentinels,
        /// The `--redis` URL whose host and port the Sentinels' answer replaces.
        template: String,
        ca: Option<Vec<u8>>,
    },
}

/// The store's link to its master; see the module docs.
pub(crate) struct Link {
    master: RwLock<Master>,
    source: Source,
    requirements: Requirements,
    wait: Option<Wait>,
    counters: Arc<Counters>,
    /// A refresh is running (so a burst of failed requests starts one).
    refreshing: AtomicBool,
    failovers: AtomicU64,
    wait_timeouts: AtomicU64,
}

impl Link {
    /// A link to the fixed address of `client`.
    pub(crate) async fn fixed(
        client: Client,
        requirements: Requirements,
        wait: Option<Wait>,
        counters: Arc<Counters>,
    ) -> Result<Arc<Self>, StoreError> {
        let addr = client.get_connection_info().addr().to_string();
        let conn = manage(client).await?;
        Ok(Arc::new(Self::new(
            Master {
                addr,
                conn,
                refused: None,
            },
            Source::Fixed,
            requirements,
            wait,
            counters,
        )))
    }

    /// A link to the master the Sentinels name, checked, then followed by a task of its own
    /// for as long as the link lives.
    pub(crate) async fn sentinel(
        sentinels: Sentinels,
        template: String,
        ca: Option<Vec<u8>>,
        requirements: Requirements,
        wait: Option<Wait>,
        counters: Arc<Counters>,
    ) -> Result<Arc<Self>, StoreError> {
        let (host, port) = sentinels.master_addr().await?;
        let master = open_master(&template, ca.as_deref(), &host, port, requirements).await?;
        if let Some(why) = &master.refused {
            return Err(StoreError::NotDurable(why.to_string()));
        }
        tracing::info!(master = %master.addr, "redis master found through the sentinels");
        let link = Arc::new(Self::new(
            master,
            Source::Sentinel {
                sentinels,
                template,
                ca,
            },
            requirements,
            wait,
            counters,
        ));
        tokio::spawn(watch(Arc::downgrade(&link)));
        Ok(link)
    }

    fn new(
        master: Master,
        source: Source,
        requirements: Requirements,
        wait: Option<Wait>,
        counters: Arc<Counters>,
    ) -> Self {
        Self {
            master: RwLock::new(master),
            source,
            requirements,
            wait,
            counters,
            refreshing: AtomicBool::new(false),
            failovers: AtomicU64::new(0),
            wait_timeouts: AtomicU64::new(0),
        }
    }

    fn current(&self) -> Master {
        self.master
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The master in use (`host:port`).
    pub(crate) fn master_addr(&self) -> String {
        self.current().addr
    }

    /// Times the master changed since the link was made.
    pub(crate) fn failovers(&self) -> u64 {
        self.failovers.load(Ordering::Relaxed)
    }

    /// Acknowledged writes whose `WAIT` saw too few replicas.
    pub(crate) fn wait_timeouts(&self) -> u64 {
        self.wait_timeouts.load(Ordering::Relaxed)
    }

    /// The connection for the next request, or why the master must not be written to.
    fn usable(&self) -> RedisResult<ConnectionManager> {
        let m = self.current();
        match m.refused {
            Some(why) => Err(redis::make_extension_error(
                "MASTERDOWN".into(),
                Some(format!("redis master {} is not used: {why}", m.addr)),
            )),
            None => Ok(m.conn),
        }
    }

    /// After a failed request: if it says the master may have moved, asks the Sentinels now.
    fn failed(self: &Arc<Self>, e: &RedisError) {
        let moved = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_timeout()
            || e.is_connection_refusal()
            || matches!(e.code(), Some("READONLY" | "MASTERDOWN"));
        if moved && matches!(self.source, Source::Sentinel { .. }) {
            let link = self.clone();
            tokio::spawn(async move { link.refresh().await });
        }
    }

    /// Asks the Sentinels which node is the master and moves to it if it is a new one (or the
    /// one in use was refused and may pass now). One refresh runs at a time.
    async fn refresh(&self) {
        let Source::Sentinel {
            sentinels,
            template,
            ca,
        } = &self.source
        else {
            return;
        };
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let _done = Reset(&self.refreshing);
        let (host, port) = match sentinels.master_addr().await {
            Ok(found) => found,
            Err(e) => return tracing::warn!(error = %e, "could not ask the redis sentinels"),
        };
        let current = self.current();
        let addr = format!("{host}:{port}");
        if current.addr == addr && current.refused.is_none() {
            return;
        }
        let master = match open_master(template, ca.as_deref(), &host, port, self.requirements)
            .await
        {
            Ok(m) => m,
            Err(e) => {
                return tracing::warn!(master = %addr, error = %e, "the sentinels' master cannot be used yet");
            }
        };
        match &master.refused {
            Some(why) => {
                tracing::error!(master = %addr, why = %why, "the redis master fails the store's checks: nothing is written until it passes")
            }
            None if current.addr != addr => tracing::warn!(
                from = %current.addr,
                to = %addr,
                "redis failover: the store writes to the new master"
            ),
            None => {
                tracing::info!(master = %addr, "the redis master passes the store's checks now")
            }
        }
        if current.addr != addr {
            self.failovers.fetch_add(1, Ordering::Relaxed);
        }
        *self.master.write().unwrap_or_else(|e| e.into_inner()) = master;
    }
}

/// Clears a flag when dropped.
struct Reset<'a>(&'a AtomicBool);

impl Drop for Reset<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Asks the Sentinels once a second for as long as the link lives.
async fn watch(link: Weak<Link>) {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Some(link) = link.upgrade() else { return };
        link.refresh().await;
    }
}

/// Connects to the node at `host:port`, which must say it is a master; a master that fails
/// the store's checks comes back with `refused` set.
async fn open_master(
    template: &str,
    ca: Option<&[u8]>,
    host: &str,
    port: u16,
    requirements: Requirements,
) -> Result<Master, StoreError> {
    let url = sentinel::master_url(template, host, port)?;
    let mut conn = manage(client(&url, ca)?).await?;
    let addr = format!("{host}:{port}");
    if !sentinel::is_master(&mut conn).await.map_err(redis_err)? {
        return Err(StoreError::Unavailable(format!(
            "the sentinels name {addr} as the master, but it is not one (yet)"
        )));
    }
    let refused = match durability::check(&mut conn, requirements).await {
        Ok(()) => None,
        Err(StoreError::NotDurable(why)) => Some(Arc::from(why)),
        Err(e) => return Err(e),
    };
    Ok(Master {
        addr,
        conn,
        refused,
    })
}

/// A handle on the store's link that counts what it sends.
#[derive(Clone)]
pub(crate) struct Conn {
    link: Arc<Link>,
}

impl Conn {
    pub(crate) fn new(link: Arc<Link>) -> Self {
        Self { link }
    }

    /// Sends a write that an acknowledgement depends on; with a `WAIT` policy, pipelined with
    /// `WAIT` on the same connection, and fewer replicas than asked is a `NOREPLICAS` error
    /// (unavailable: the caller retries).
    pub(crate) async fn acked<T: FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<T> {
        let Some(wait) = self.link.wait else {
            return cmd.query_async(self).await;
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .add_command(cmd.clone())
            .cmd("WAIT")
            .arg(wait.replicas)
            .arg(wait.timeout_ms);
        let mut replies: Vec<Value> = pipe.query_async(self).await?;
        let (Some(acked), Some(answer), true) = (replies.pop(), replies.pop(), replies.is_empty())
        else {
            return Err(RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "a write and its WAIT did not answer twice",
            )));
        };
        let answer = match answer {
            Value::ServerError(e) => return Err(e.into()),
            v => redis::from_redis_value::<T>(v)?,
        };
        let acked = match acked {
            Value::ServerError(e) => return Err(e.into()),
            v => redis::from_redis_value::<i64>(v)?,
        };
        if acked < i64::from(wait.replicas) {
            self.link.wait_timeouts.fetch_add(1, Ordering::Relaxed);
            return Err(redis::make_extension_error(
                "NOREPLICAS".into(),
                Some(format!(
                    "only {acked} of {} redis replicas confirmed the write within {} ms: it is not acknowledged",
                    wait.replicas, wait.timeout_ms
                )),
            ));
        }
        Ok(answer)
    }

    pub(crate) fn link(&self) -> &Arc<Link> {
        &self.link
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Counters::bump(&self.link.counters.round_trips);
        Counters::bump(&self.link.counters.commands);
        Box::pin(async move {
            let mut conn = self.link.usable()?;
            let answer = conn.req_packed_command(cmd).await;
            if let Err(e) = &answer {
                self.link.failed(e);
            }
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Counters::bump(&self.link.counters.round_trips);
        self.link
            .counters
            .commands
            .fetch_add(pipeline.len() as u64, Ordering::Relaxed);
        Box::pin(async move {
            let mut conn = self.link.usable()?;
            let answer = conn.req_packed_commands(pipeline, offset, count).await;
            if let Err(e) = &answer {
                self.link.failed(e);
            }
            answer
        })
    }

    fn get_db(&self) -> i64 {
        self.link.current().conn.get_db()
    }
}
