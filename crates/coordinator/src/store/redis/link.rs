//! The link to the Redis master, shared by every request of a store.
//!
//! The [`Link`] holds connections to the master: a fixed address (`--redis`), or the master
//! that Sentinels name (`--redis-sentinel`), followed across failovers. With Sentinels the
//! link asks them again once a second, and at once when a request fails in a way that says
//! the master may have moved (the connection dropped, timed out or was refused, or the node
//! answered `READONLY` or `MASTERDOWN`). A node is used only after a majority of the Sentinels
//! named it ([`Sentinels::master_addr`]), it answered `ROLE` as a master, and it passed the
//! same checks as at start ([`durability`]). A master that fails them, or that a majority of
//! the Sentinels no longer names, is not written to: every request fails as unavailable,
//! saying why, until a master that passes is found. Requests in flight on the old master when
//! the link moves fail at once, as a dropped connection would: a stopped master never answers,
//! and they would otherwise hold their rounds until the response timeout (10 s). Their writes
//! may or may not have landed, as with any lost reply, and every write is idempotent.
//!
//! Once a second the link also reads the master's durability settings again, for both
//! sources: a Redis restarted with another configuration at the same address, or changed with
//! `CONFIG SET`, would otherwise go on taking acknowledged writes it can lose. A master that
//! no longer passes is not written to (every request fails as unavailable, naming the
//! setting) until it passes again.
//!
//! With `--redis-wait` the master gets a second connection of its own for the writes an
//! acknowledgement depends on ([`Conn::acked`](super::conn::Conn::acked)): their `WAIT`
//! blocks the connection it is sent on, and reads, locks and pings must not queue behind it.
//!
//! [`durability`]: super::durability

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError, RedisResult, Value};
use tokio::sync::watch;

use super::durability::{self, Requirements};
use super::redis_err;
use super::sentinel::{self, Sentinels};
use super::stats::Counters;
use crate::store::api::StoreError;

/// How often the Sentinels are asked which node is the master, and the master's durability
/// read again.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How long that read may take: a stopped master must not hold up asking the Sentinels.
const RECHECK_WITHIN: Duration = Duration::from_millis(500);

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

/// The master in use (not `Clone`: the link holds the one sender of [`Master::left`]).
struct Master {
    /// `host:port`, for status and messages.
    addr: Arc<str>,
    conn: ConnectionManager,
    /// The connection of acknowledged writes, with a `WAIT` policy.
    acked: Option<ConnectionManager>,
    /// Why this master must not be written to, if it must not.
    refused: Option<Arc<str>>,
    /// Set to the new master's address when the link leaves this one.
    left: Arc<watch::Sender<Option<Arc<str>>>>,
}

/// A connection to the master in use, and word of the link leaving it.
pub(crate) struct Usable {
    pub(crate) conn: ConnectionManager,
    addr: Arc<str>,
    left: watch::Receiver<Option<Arc<str>>>,
}

impl Usable {
    /// Runs `request` on this connection, unless the link leaves its master first: the
    /// request then fails as a dropped connection, naming both masters.
    pub(crate) async fn run<T>(
        mut self,
        request: impl std::future::Future<Output = RedisResult<T>>,
    ) -> RedisResult<T> {
        tokio::pin!(request);
        let moved_to = tokio::select! {
            answer = &mut request => return answer,
            left = self.left.wait_for(Option::is_some) => left.ok().and_then(|to| to.clone()),
        };
        match moved_to {
            Some(to) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                format!(
                    "the redis master moved from {} to {to} while a request was in flight: its outcome is unknown",
                    self.addr
                ),
            ))),
            // The master was replaced by itself (reopened at the same address after a
            // refusal): the request goes on.
            None => request.await,
        }
    }
}

impl Master {
    async fn open(client: Client, addr: String, wait: Option<Wait>) -> Result<Self, StoreError> {
        let conn = manage(client.clone()).await?;
        let acked = match wait {
            Some(_) => Some(manage(client).await?),
            None => None,
        };
        Ok(Self {
            addr: addr.into(),
            conn,
            acked,
            refused: None,
            left: Arc::new(watch::Sender::new(None)),
        })
    }
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
    pub(crate) wait: Option<Wait>,
    pub(crate) counters: Arc<Counters>,
    /// A refresh is running (so a burst of failed requests starts one).
    refreshing: AtomicBool,
    failovers: AtomicU64,
    pub(crate) wait_timeouts: AtomicU64,
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
        let master = Master::open(client, addr, wait).await?;
        let link = Arc::new(Self::new(
            master,
            Source::Fixed,
            requirements,
            wait,
            counters,
        ));
        tokio::spawn(watch(Arc::downgrade(&link)));
        Ok(link)
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
        let master = open_master(&template, ca.as_deref(), &host, port, requirements, wait).await?;
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

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Master> {
        self.master.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The master in use (`host:port`).
    pub(crate) fn master_addr(&self) -> String {
        self.read().addr.to_string()
    }

    /// Times the master changed since the link was made.
    pub(crate) fn failovers(&self) -> u64 {
        self.failovers.load(Ordering::Relaxed)
    }

    /// Acknowledged writes whose `WAIT` saw too few replicas.
    pub(crate) fn wait_timeouts(&self) -> u64 {
        self.wait_timeouts.load(Ordering::Relaxed)
    }

    pub(crate) fn db(&self) -> i64 {
        self.read().conn.get_db()
    }

    /// The connection for the next request (`acked`: for an acknowledged write), or why the
    /// master must not be written to.
    pub(crate) fn usable(&self, acked: bool) -> RedisResult<Usable> {
        let m = self.read();
        if let Some(why) = &m.refused {
            return Err(redis::make_extension_error(
                "MASTERDOWN".into(),
                Some(format!("redis master {} is not used: {why}", m.addr)),
            ));
        }
        let conn = match (acked, &m.acked) {
            (true, Some(c)) => c.clone(),
            _ => m.conn.clone(),
        };
        Ok(Usable {
            conn,
            addr: m.addr.clone(),
            left: m.left.subscribe(),
        })
    }

    /// After a failed request: if it says the master may have moved, asks the Sentinels now.
    pub(crate) fn saw_error(self: &Arc<Self>, e: &RedisError) {
        if may_have_moved(e) {
            self.suspect();
        }
    }

    /// After a request's replies: if one says the node is no longer the master (`READONLY`,
    /// `MASTERDOWN`), asks the Sentinels now.
    pub(crate) fn saw_replies(self: &Arc<Self>, replies: &[Value]) {
        let demoted = replies.iter().any(
            |v| matches!(v, Value::ServerError(e) if matches!(e.code(), "READONLY" | "MASTERDOWN")),
        );
        if demoted {
            self.suspect();
        }
    }

    fn suspect(self: &Arc<Self>) {
        if matches!(self.source, Source::Sentinel { .. })
            && !self.refreshing.load(Ordering::Acquire)
        {
            let link = self.clone();
            tokio::spawn(async move { link.refresh().await });
        }
    }

    /// Asks the Sentinels which node is the master and moves to it if it is a new one (or the
    /// one in use was refused and may pass now); reads the durability of a master kept (of
    /// the fixed one, always) again. One refresh runs at a time.
    async fn refresh(&self) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let _done = Reset(&self.refreshing);
        let Source::Sentinel {
            sentinels,
            template,
            ca,
        } = &self.source
        else {
            return self.recheck().await;
        };
        let (host, port) = match sentinels.master_addr().await {
            Ok(found) => found,
            Err(e) => return self.refuse(&e.to_string()),
        };
        let (current, refused) = {
            let m = self.read();
            (m.addr.clone(), m.refused.clone())
        };
        let addr = format!("{host}:{port}");
        if *current == *addr && refused.is_none() {
            return self.recheck().await;
        }
        let opened = open_master(
            template,
            ca.as_deref(),
            &host,
            port,
            self.requirements,
            self.wait,
        )
        .await;
        let master = match opened {
            Ok(m) => m,
            Err(e) => {
                return tracing::warn!(master = %addr, error = %e, "the sentinels' master cannot be used yet");
            }
        };
        let same = *current == *addr;
        match &master.refused {
            // Said once, not at every refresh that finds it still failing.
            Some(why) if same && refused.as_deref() == Some(&**why) => {}
            Some(why) => {
                tracing::error!(master = %addr, why = %why, "the redis master fails the store's checks: nothing is written until it passes")
            }
            None if !same => tracing::warn!(
                from = %current,
                to = %addr,
                "redis failover: the store writes to the new master"
            ),
            None => tracing::info!(master = %addr, "the redis master is used again"),
        }
        if !same {
            self.failovers.fetch_add(1, Ordering::Relaxed);
        }
        let new = master.addr.clone();
        let old = std::mem::replace(
            &mut *self.master.write().unwrap_or_else(|e| e.into_inner()),
            master,
        );
        if old.addr != new {
            old.left.send_replace(Some(new));
        }
    }

    /// Reads the durability of the master in use again, and stops or resumes writing to it.
    /// Behind Sentinels only a master not refused is read (a refused one is opened and
    /// checked again whole); a fixed master is refused only for its durability. Runs only
    /// within [`Self::refresh`], so never beside another writer of `refused`.
    async fn recheck(&self) {
        let (mut conn, addr, was) = {
            let m = self.read();
            (m.conn.clone(), m.addr.clone(), m.refused.clone())
        };
        // Not answering (in time: a stopped master must not hold up the next refresh) is an
        // outage, which the requests see for themselves.
        let read = tokio::time::timeout(
            RECHECK_WITHIN,
            durability::durability(&mut conn, self.requirements),
        )
        .await;
        let Ok(Ok(read)) = read else { return };
        let why = match durability::judge(read, self.requirements) {
            Ok(_) => None,
            Err(e) => Some(Arc::<str>::from(e.to_string())),
        };
        match (&was, &why) {
            (None, Some(why)) => {
                tracing::error!(master = %addr, why = %why, "the redis master no longer keeps what it acknowledges: nothing is written until it does")
            }
            (Some(_), None) => {
                tracing::warn!(master = %addr, "the redis master passes the store's checks again")
            }
            _ => {}
        }
        let mut m = self.master.write().unwrap_or_else(|e| e.into_inner());
        if m.addr == addr {
            m.refused = why;
        }
    }

    /// Stops writing to the master in use: no majority of the Sentinels names it now.
    fn refuse(&self, why: &str) {
        let mut m = self.master.write().unwrap_or_else(|e| e.into_inner());
        if m.refused.is_none() {
            tracing::error!(master = %m.addr, why, "the redis master is not used until a majority of the sentinels names one");
            m.refused = Some(why.into());
        }
    }
}

/// Whether a failed request says the master may have moved.
fn may_have_moved(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_connection_refusal()
        || matches!(e.code(), Some("READONLY" | "MASTERDOWN"))
}

/// Clears a flag when dropped.
struct Reset<'a>(&'a AtomicBool);

impl Drop for Reset<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Refreshes the link once a second for as long as it lives: asks the Sentinels (if any) and
/// reads the master's durability again.
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
    wait: Option<Wait>,
) -> Result<Master, StoreError> {
    let url = sentinel::master_url(template, host, port)?;
    let addr = format!("{host}:{port}");
    let mut master = Master::open(client(&url, ca)?, addr.clone(), wait).await?;
    if !sentinel::is_master(&mut master.conn)
        .await
        .map_err(redis_err)?
    {
        return Err(StoreError::Unavailable(format!(
            "the sentinels name {addr} as the master, but it is not one (yet)"
        )));
    }
    master.refused = match durability::check(&mut master.conn, requirements).await {
        Ok(()) => None,
        Err(StoreError::NotDurable(why)) => Some(Arc::from(why)),
        Err(e) => return Err(e),
    };
    Ok(master)
}
