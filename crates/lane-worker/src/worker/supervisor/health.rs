//! The worker's health: what it tells the coordinator about its outbox, the disk floor
//! (measured off the actor), and leaving a coordinator that stopped acknowledging heartbeats.

use std::time::Duration;

use ractor::ActorRef;

use lanes_common::proto as pb;
use lanes_common::proto::worker_message::Msg as In;

use super::{ACK_DEADLINE_MAX, ACK_DEADLINE_MIN};
use super::{SupMsg, SupState, Supervisor};

impl Supervisor {
    /// Tells the coordinator about the worker's health when it changed (or `force`).
    pub(super) async fn tell_status(state: &mut SupState, force: bool) {
        let now = (state.outbox_broken, state.unpersisted.len());
        if !force && state.told == Some(now) {
            return;
        }
        if !state.registered && !force {
            return;
        }
        let detail = if now.0 {
            format!(
                "outbox not writable; {} outcome(s) held in memory; taking no work",
                now.1
            )
        } else {
            String::new()
        };
        let sent = Self::send(
            state,
            In::Status(pb::WorkerStatus {
                outbox_broken: now.0,
                unpersisted: now.1 as u32,
                detail,
            }),
        )
        .await;
        if sent {
            state.told = Some(now);
        }
    }

    /// Whether free space is below the floor, and says so when that changes.
    pub(super) fn note_disk(&self, state: &mut SupState, free: Option<f64>) {
        let Some(floor) = self.config.disk_floor_gb else {
            return;
        };
        let low = free.is_some_and(|f| f < floor);
        if low && !state.disk_low {
            tracing::warn!(
                free_gb = free,
                floor_gb = floor,
                "below the disk floor: no work credits sent"
            );
        } else if !low && state.disk_low {
            tracing::info!(
                free_gb = free,
                floor_gb = floor,
                "above the disk floor again"
            );
        }
        state.disk_low = low;
    }

    /// Measures free disk space in a blocking task; the answer comes back as `Disk`.
    pub(super) fn measure_disk(&self, myself: &ActorRef<SupMsg>) {
        if self.config.disk_floor_gb.is_none() {
            return;
        }
        let (me, path) = (myself.clone(), self.config.artifacts.clone());
        tokio::spawn(async move {
            let free = tokio::task::spawn_blocking(move || free_gb(&path))
                .await
                .ok()
                .flatten();
            let _ = me.cast(SupMsg::Disk(free));
        });
    }

    /// A third of the shortest lease TTL in flight (within bounds): acknowledgements slower
    /// than that mean a paused, partitioned or sick replica, and the leases would expire
    /// before it recovers.
    pub(super) fn ack_deadline(state: &SupState) -> Duration {
        state
            .in_flight
            .values()
            .map(|f| f.ttl / 3)
            .min()
            .unwrap_or(ACK_DEADLINE_MAX)
            .clamp(ACK_DEADLINE_MIN, ACK_DEADLINE_MAX)
    }

    /// Gives up a session whose coordinator stopped acknowledging heartbeats.
    pub(super) fn check_acks(state: &mut SupState) {
        let Some(since) = state.unacked_since else {
            return;
        };
        let deadline = Self::ack_deadline(state);
        if since.elapsed() <= deadline {
            return;
        }
        let why = format!(
            "no heartbeat acknowledgement for {:.1} s (deadline {:.1} s): leaving this coordinator",
            since.elapsed().as_secs_f64(),
            deadline.as_secs_f64()
        );
        tracing::warn!("{why}");
        if let Some(end) = state.end_session.take() {
            let _ = end.try_send(why);
        }
        state.tx = None;
        state.outstanding.clear();
        state.registered = false;
        state.unacked_since = None;
    }
}

/// Free space under `path`, in GB, from `df` (no libc binding needed). A directory that does
/// not exist yet (a fresh worker's artifacts) is measured where it will be created: at its
/// nearest existing ancestor.
fn free_gb(path: &std::path::Path) -> Option<f64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let out = std::process::Command::new("df")
        .arg("-Pk")
        .arg(existing)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let line = text.lines().nth(1)?;
    let avail_kb: f64 = line.split_whitespace().nth(3)?.parse().ok()?;
    Some(avail_kb / 1024.0 / 1024.0)
}
