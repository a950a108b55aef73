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

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;

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
    /// Whether its requests go on the connection of acknowledged writes.
    behind_writes: bool,
}

impl Conn {
    pub(crate) fn new(link: Arc<Link>) -> Self {
        Self {
            link,
            behind_writes: false,
        }
    }

    /// A handle whose requests go on the connection [`Self::acked`] writes go on (the one
    /// connection without `--redis-wait`), so a read sent after a write is served after it: a
    /// window read ahead behind the commit that asked for it (`ahead.rs`).
    pub(crate) fn behind_writes(&self) -> Self {
        Self {
            link: self.link.clone(),
            behind_writes: true,
        }
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

/// Polls a request's future once, so its first command reaches the connection's queue now,
/// in the order the caller builds requests (a commit before the next round's, and a window
/// read behind the commit that asked for it). Outside tokio's cooperative budget: a send
/// into the connection's queue on a task that spent its budget yields without sending, and
/// the request would then go whenever its spawned task runs, perhaps after a later one (a
/// busy machine's commits overtook each other, and the later one conflicted).
pub(crate) async fn hand_over<F: Future + Unpin>(request: &mut F) -> Poll<F::Output> {
    let mut request = std::pin::Pin::new(request);
    tokio::task::unconstrained(std::future::poll_fn(|cx| {
        Poll::Ready(request.as_mut().poll(cx))
    }))
    .await
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Counters::bump(&self.link.counters.round_trips);
        Counters::bump(&self.link.counters.commands);
        Box::pin(async move {
            let usable = self.link.usable(self.behind_writes)?;
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
            let usable = self.link.usable(self.behind_writes)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A task that spent its cooperative budget still hands a request over: a plain first
    /// poll of a send into a bounded queue (as the connection's is) yields without sending.
    #[tokio::test]
    async fn a_request_is_handed_over_on_a_task_that_spent_its_budget() {
        let (queue, mut sent) = tokio::sync::mpsc::channel::<u32>(1000);
        let plain = std::future::poll_fn(|cx| {
            // Spend the budget: each send that goes through uses a unit of it.
            let mut n = 0;
            while Box::pin(queue.send(n)).as_mut().poll(cx).is_ready() {
                n += 1;
            }
            Poll::Ready(n)
        })
        .await;
        assert!(plain < 1000, "the budget ran out after {plain} sends");
        let handed = std::future::poll_fn(|cx| {
            while Box::pin(queue.send(0)).as_mut().poll(cx).is_ready() {}
            // Spent: a plain poll would yield here.
            let mut send = Box::pin(queue.send(7));
            let mut handed = std::pin::pin!(hand_over(&mut send));
            Poll::Ready(matches!(
                handed.as_mut().poll(cx),
                Poll::Ready(Poll::Ready(Ok(())))
            ))
        })
        .await;
        assert!(handed, "sent despite the spent budget");
        let mut last = None;
        while let Ok(v) = sent.try_recv() {
            last = Some(v);
        }
        assert_eq!(last, Some(7));
    }
}
