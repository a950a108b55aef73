//! The flags that reach a Redis master through Sentinels, shared by `lanes coordinator`,
//! `lanes store migrate` and `lanes bench`.

use lanes_coordinator::store::SentinelOptions;

/// The `--redis` URL used with Sentinels when none is given: only its scheme counts.
pub(crate) const SENTINEL_URL: &str = "redis://sentinel-master/";

/// `--redis-sentinel` and its companions.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct SentinelArgs {
    /// Find the Redis master through these Sentinels (HOST:PORT, comma-separated) and follow
    /// its failovers. --redis then gives only the master's scheme, password and database.
    #[arg(
        long,
        env = "LANES_REDIS_SENTINEL",
        value_delimiter = ',',
        value_name = "HOST:PORT"
    )]
    pub(crate) redis_sentinel: Vec<String>,
    /// The master's name in the Sentinels' configuration (`sentinel monitor NAME …`).
    #[arg(long, env = "LANES_REDIS_MASTER", value_name = "NAME")]
    pub(crate) redis_master: Option<String>,
    /// The Sentinels speak TLS, checked against --redis-tls-ca (or the system roots).
    #[arg(long, env = "LANES_REDIS_SENTINEL_TLS")]
    pub(crate) redis_sentinel_tls: bool,
    /// The Sentinels' own password (`requirepass` in sentinel.conf); prefer the variable.
    #[arg(long, env = "LANES_REDIS_SENTINEL_PASSWORD", hide_env_values = true)]
    pub(crate) redis_sentinel_password: Option<String>,
}

impl SentinelArgs {
    /// The Sentinel options, `None` without `--redis-sentinel`; a half-given set is an error
    /// that names the missing flag.
    pub(crate) fn options(self) -> Result<Option<SentinelOptions>, String> {
        let addrs: Vec<String> = self
            .redis_sentinel
            .into_iter()
            .map(|a| a.trim().to_owned())
            .filter(|a| !a.is_empty())
            .collect();
        match (addrs.is_empty(), self.redis_master) {
            (true, None) if !self.redis_sentinel_tls && self.redis_sentinel_password.is_none() => {
                Ok(None)
            }
            (true, _) => Err(
                "--redis-master, --redis-sentinel-tls and --redis-sentinel-password need --redis-sentinel HOST:PORT[,HOST:PORT…]"
                    .into(),
            ),
            (false, None) => Err(
                "--redis-sentinel needs --redis-master NAME (the name in `sentinel monitor NAME …`)"
                    .into(),
            ),
            (false, Some(master)) if master.trim().is_empty() => {
                Err("--redis-master is empty".into())
            }
            (false, Some(master)) => {
                for a in &addrs {
                    let port = a
                        .rsplit_once(':')
                        .filter(|(h, _)| !h.is_empty())
                        .and_then(|(_, p)| p.parse::<u16>().ok())
                        .filter(|p| *p > 0);
                    if port.is_none() {
                        return Err(format!(
                            "--redis-sentinel: {a:?} is not HOST:PORT"
                        ));
                    }
                }
                Ok(Some(SentinelOptions {
                    addrs,
                    master,
                    tls: self.redis_sentinel_tls,
                    password: self.redis_sentinel_password,
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(sentinel: &[&str], master: Option<&str>) -> SentinelArgs {
        SentinelArgs {
            redis_sentinel: sentinel.iter().map(|s| s.to_string()).collect(),
            redis_master: master.map(str::to_owned),
            ..SentinelArgs::default()
        }
    }

    #[test]
    fn sentinels_need_a_master_name_and_host_port_addresses() {
        assert_eq!(args(&[], None).options(), Ok(None));
        let got = args(&["a:26379", " b:26380"], Some("lanes"))
            .options()
            .unwrap()
            .unwrap();
        assert_eq!(got.addrs, ["a:26379", "b:26380"]);
        assert_eq!(got.master, "lanes");
        assert!(
            args(&["a:26379"], None)
                .options()
                .unwrap_err()
                .contains("--redis-master")
        );
        assert!(
            args(&[], Some("lanes"))
                .options()
                .unwrap_err()
                .contains("--redis-sentinel")
        );
        for bad in ["a", "a:", ":1", "a:0", "a:x"] {
            let e = args(&[bad], Some("lanes")).options().unwrap_err();
            assert!(e.contains("not HOST:PORT"), "{bad}: {e}");
        }
        assert!(args(&["a:1"], Some(" ")).options().is_err());
    }
}
