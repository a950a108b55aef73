//! The handle every request of the Redis store goes through, and acknowledged writes.
//!
//! A [`Conn`] is a cheap clone of the store's [`Link`]: it counts what it sends, sends it to
//! the master in use, and tells the link when a reply says the master may have moved.
//!
//! [`Conn::acked`] sends a write that an acknowledgement depends on. With `--redis-wait N` it
//! goes in one pipeline with an `INCR` of the fence key and `WAIT N <timeout>`, on the link's
//! connection of acknowledged writes. `WAIT` waits for the replicas to reach the last write of
//! *its connection*; the fence is that write even when the command itself wrote nothing (a
//! retried completion answered from its stored acknowledgement, a `SET NX` that found the
//! key), and replication is one ordered stream, so a confirmed fence means the replicas have
//! everything the answer rests on. Fewer replicas than N in time is an unavailable store
//! (`NOREPLICAS`), not an acknowledgement: the caller retries, and every write is idempotent.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use super::link::Link;
use super::stats::Counters;

/// The key every acknowledged write increments, so its `WAIT` covers everything before it.
const FENCE: &str = "lanes:fence";

/// A handle on the store's link that counts what it sends.
#[derive(Clone)]
pub(crate) struct Conn {
    link: Arc<Link>,
}

impl Conn {
    pub(crate) fn new(link: Arc<Link>) -> Self {
        Self { link }
    }

    pub(crate) fn link(&self) -> &Arc<Link> {
        &self.link
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.link.counters
    }

    /// Sends a write that an acknowledgement depends on; see the module docs.
    pub(crate) async fn acked<T: FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<T> {
        let Some(wait) = self.link.wait else {
            return cmd.query_async(self).await;
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .add_command(cmd.clone())
            .cmd("INCR")
            .arg(FENCE)
            .cmd("WAIT")
            .arg(wait.replicas)
            .arg(wait.timeout_ms);
        Counters::bump(&self.link.counters.round_trips);
        self.link.counters.commands.fetch_add(3, Ordering::Relaxed);
        let usable = self.link.usable(true)?;
        let mut conn = usable.conn.clone();
        let replies = match usable.run(pipe.query_async::<Vec<Value>>(&mut conn)).await {
            Ok(replies) => replies,
            Err(e) => {
                self.link.saw_error(&e);
                return Err(e);
            }
        };
        self.link.saw_replies(&replies);
        let [answer, fence, acked] = <[Value; 3]>::try_from(replies).map_err(|_| {
            RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "a write, its fence and its WAIT did not answer three times",
            ))
        })?;
        let answer = match answer {
            Value::ServerError(e) => return Err(e.into()),
            v => redis::from_redis_value::<T>(v)?,
        };
        for v in [fence, acked.clone()] {
            if let Value::ServerError(e) = v {
                return Err(e.into());
            }
        }
        let acked = redis::from_redis_value::<i64>(acked)?;
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

    /// Waits until everything the master applied so far is on the replicas `--redis-wait`
    /// asks for (at once without a `WAIT` policy): before an answer that rests on what was
    /// read, not written.
    pub(crate) async fn replicated(&mut self) -> RedisResult<()> {
        match self.link.wait {
            Some(_) => self.acked::<()>(&redis::cmd("PING")).await,
            None => Ok(()),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Counters::bump(&self.link.counters.round_trips);
        Counters::bump(&self.link.counters.commands);
        Box::pin(async move {
            let usable = self.link.usable(false)?;
            let mut conn = usable.conn.clone();
            let answer = usable.run(conn.req_packed_command(cmd)).await;
            match &answer {
                Ok(reply) => self.link.saw_replies(std::slice::from_ref(reply)),
                Err(e) => self.link.saw_error(e),
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
            let usable = self.link.usable(false)?;
            let mut conn = usable.conn.clone();
            let answer = usable
                .run(conn.req_packed_commands(pipeline, offset, count))
                .await;
            match &answer {
                Ok(replies) => self.link.saw_replies(replies),
                Err(e) => self.link.saw_error(e),
            }
            answer
        })
    }

    fn get_db(&self) -> i64 {
        self.link.db()
    }
}
