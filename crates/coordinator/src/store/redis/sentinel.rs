//! Asking Redis Sentinels which node is the master.
//!
//! Every Sentinel is asked at once, each with a short timeout:
//! `SENTINEL GET-MASTER-ADDR-BY-NAME <name>`. A node is the master only when a majority of
//! the configured Sentinels names it: a Sentinel cut off with an old master in a minority
//! partition keeps naming it, and following it would write where a failover throws writes
//! away. The caller then asks that node `ROLE` before writing to it ([`is_master`]): a
//! Sentinel's view can lag a failover, and the store never writes to a node that is not the
//! master.
//!
//! The master is reached with the `--redis` URL's scheme, credentials and database, its host
//! and port replaced by the Sentinels' answer ([`master_url`]).

use std::collections::BTreeMap;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{AsyncConnectionConfig, Client, Value};

use super::link::client;
use crate::store::api::StoreError;
use crate::store::layout::mask_password;

/// How long one Sentinel gets to connect and answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);

/// Where the Sentinels are and which master they watch.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelOptions {
    /// `HOST:PORT` of each Sentinel.
    pub addrs: Vec<String>,
    /// The master's name in the Sentinels' configuration (`sentinel monitor <name> …`).
    pub master: String,
    /// The Sentinels speak TLS (with the store's CA, if one is given).
    pub tls: bool,
    /// The Sentinels' own password (`requirepass` in sentinel.conf), if they have one.
    pub password: Option<String>,
}

impl std::fmt::Debug for SentinelOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelOptions")
            .field("addrs", &self.addrs)
            .field("master", &self.master)
            .field("tls", &self.tls)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// The Sentinels of one master.
pub(crate) struct Sentinels {
    master: String,
    /// One client per Sentinel, with its address for messages.
    clients: Vec<(String, Client)>,
}

impl Sentinels {
    /// Builds a client per Sentinel; an address that is not `HOST:PORT` is an error. `ca` is
    /// used only if the Sentinels speak TLS (the master may, while they do not).
    pub(crate) fn new(opts: &SentinelOptions, ca: Option<&[u8]>) -> Result<Self, StoreError> {
        let ca = ca.filter(|_| opts.tls);
        if opts.addrs.is_empty() {
            return Err(StoreError::Backend(
                "no redis sentinel address given".into(),
            ));
        }
        if opts.master.is_empty() {
            return Err(StoreError::Backend(
                "the redis master name (--redis-master) is empty".into(),
            ));
        }
        let clients = opts
            .addrs
            .iter()
            .map(|addr| {
                let (host, port) = split_addr(addr)?;
                let scheme = if opts.tls { "rediss" } else { "redis" };
                let auth = match &opts.password {
                    Some(p) => format!(":{}@", percent_encode(p)),
                    None => String::new(),
                };
                let url = format!("{scheme}://{auth}{}:{port}", bracket(host));
                Ok((addr.clone(), client(&url, ca)?))
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(Self {
            master: opts.master.clone(),
            clients,
        })
    }

    /// The master's `(host, port)` that a majority of the Sentinels names.
    pub(crate) async fn master_addr(&self) -> Result<(String, u16), StoreError> {
        let mut asks = tokio::task::JoinSet::new();
        for (addr, client) in &self.clients {
            let (addr, client, master) = (addr.clone(), client.clone(), self.master.clone());
            asks.spawn(async move { (addr, ask(&client, &master).await) });
        }
        let mut votes: BTreeMap<(String, u16), usize> = BTreeMap::new();
        let mut said = Vec::new();
        while let Some(joined) = asks.join_next().await {
            let Ok((addr, answer)) = joined else { continue };
            match answer {
                Ok(Some(found)) => {
                    said.push(format!("{addr}: {}:{}", found.0, found.1));
                    *votes.entry(found).or_default() += 1;
                }
                Ok(None) => said.push(format!("{addr}: does not know {:?}", self.master)),
                Err(e) => said.push(format!("{addr}: {e}")),
            }
        }
        let need = self.clients.len() / 2 + 1;
        match votes.into_iter().max_by_key(|(_, n)| *n) {
            Some((found, n)) if n >= need => Ok(found),
            _ => {
                said.sort();
                Err(StoreError::Unavailable(format!(
                    "no majority of the redis sentinels ({need} of {}) names a master for {:?} ({})",
                    self.clients.len(),
                    self.master,
                    said.join("; ")
                )))
            }
        }
    }
}

/// One Sentinel's answer: the master's address, `None` if it does not know the name.
async fn ask(client: &Client, master: &str) -> redis::RedisResult<Option<(String, u16)>> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(ASK_TIMEOUT))
        .set_response_timeout(Some(ASK_TIMEOUT));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let answer: Option<(String, String)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(master)
        .query_async(&mut conn)
        .await?;
    Ok(answer.and_then(|(host, port)| Some((host, port.parse().ok()?))))
}

/// Whether the node behind `conn` says it is a master (`ROLE`).
pub(crate) async fn is_master(conn: &mut impl ConnectionLike) -> redis::RedisResult<bool> {
    let role: Value = redis::cmd("ROLE").query_async(conn).await?;
    Ok(match role {
        Value::Array(items) => {
            matches!(
                items.first(),
                Some(Value::BulkString(b)) if b.as_slice() == b"master"
            ) || matches!(
                items.first(),
                Some(Value::SimpleString(s)) if s == "master"
            )
        }
        _ => false,
    })
}

/// The `--redis` URL `template` with its host and port replaced: the scheme, credentials,
/// database and query stay.
pub(crate) fn master_url(template: &str, host: &str, port: u16) -> Result<String, StoreError> {
    let bad = || {
        StoreError::Backend(format!(
            "the redis url for the sentinels' master must be redis:// or rediss://, got {:?}",
            mask_password(template)
        ))
    };
    let (scheme, rest) = template.split_once("://").ok_or_else(bad)?;
    if scheme != "redis" && scheme != "rediss" {
        return Err(bad());
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let userinfo = authority.rfind('@').map_or("", |i| &authority[..=i]);
    Ok(format!(
        "{scheme}://{userinfo}{}:{port}{tail}",
        bracket(host)
    ))
}

/// `HOST:PORT` (IPv6 hosts in brackets) split in two.
fn split_addr(addr: &str) -> Result<(&str, u16), StoreError> {
    let bad = || {
        StoreError::Backend(format!(
            "a redis sentinel address must be HOST:PORT, got {addr:?}"
        ))
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse::<u16>().map_err(|_| bad())?;
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok((host, port))
}

/// An IPv6 literal in brackets, as a URL needs it.
fn bracket(host: &str) -> String {
    match host.contains(':') {
        true => format!("[{host}]"),
        false => host.to_owned(),
    }
}

/// A password as a URL's userinfo may carry it.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_master_url_keeps_scheme_credentials_and_database() {
        let cases = [
            ("redis://h:1", "10.0.0.5", 6380, "redis://10.0.0.5:6380"),
            (
                "rediss://user:p%40ss@sentinel-master:6379/2",
                "10.0.0.5",
                6380,
                "rediss://user:p%40ss@10.0.0.5:6380/2",
            ),
            (
                "redis://:pw@x/0?protocol=resp3",
                "::1",
                7000,
                "redis://:pw@[::1]:7000/0?protocol=resp3",
            ),
            ("redis://master", "m.local", 6379, "redis://m.local:6379"),
        ];
        for (template, host, port, want) in cases {
            assert_eq!(
                master_url(template, host, port).unwrap(),
                want,
                "{template}"
            );
        }
        for bad in ["unix:///tmp/redis.sock", "h:6379", "http://h:1"] {
            assert!(master_url(bad, "h", 1).is_err(), "{bad}");
        }
    }

    #[test]
    fn sentinel_addresses_are_host_and_port() {
        assert_eq!(split_addr("10.0.0.1:26379").unwrap(), ("10.0.0.1", 26379));
        assert_eq!(split_addr("[::1]:26379").unwrap(), ("::1", 26379));
        assert_eq!(
            split_addr("redis-0.redis:26379").unwrap(),
            ("redis-0.redis", 26379)
        );
        for bad in ["nohost", ":26379", "h:0", "h:port", "h:70000"] {
            assert!(split_addr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_sentinel_password_is_never_printed() {
        let opts = SentinelOptions {
            addrs: vec!["s:26379".into()],
            master: "lanes".into(),
            tls: false,
            password: Some("hunter2-sentinel".into()),
        };
        let shown = format!("{opts:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("***"),
            "{shown}"
        );
    }

    #[test]
    fn a_sentinel_password_is_percent_encoded_in_its_url() {
        assert_eq!(percent_encode("a b@c"), "a%20b%40c");
        assert!(
            master_url("ftp://:secret@h/", "h", 1)
                .unwrap_err()
                .to_string()
                .contains("***")
        );
    }
}
