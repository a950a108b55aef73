//! The coordinator's clock. Store operations take `now_ms` from it, so tests move time by hand
//! and never sleep.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use lanes_common::utc::EpochMs;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> EpochMs;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> EpochMs {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as EpochMs)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(start_ms: EpochMs) -> Self {
        Self(Arc::new(AtomicI64::new(start_ms)))
    }

    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    pub fn set_ms(&self, ms: EpochMs) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> EpochMs {
        self.0.load(Ordering::SeqCst)
    }
}

/// The system clock shifted by a fixed offset: a replica whose clock is wrong by that much.
/// Test-only (the fault suite runs two replicas whose clocks differ by seconds).
#[derive(Debug, Clone, Copy)]
pub struct OffsetClock {
    pub offset_ms: i64,
}

impl Clock for OffsetClock {
    fn now_ms(&self) -> EpochMs {
        SystemClock.now_ms() + self.offset_ms
    }
}
