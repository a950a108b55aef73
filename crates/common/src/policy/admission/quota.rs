//! The quota gate of one provider, from its latest quota reading.

use crate::row::QuotaReading;
use crate::utc::EpochMs;

/// A provider's quota state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum QuotaGate {
    Go,
    /// At or above `quota_wait`: its arms wait until the reading's reset.
    Wait {
        until_ms: EpochMs,
    },
    /// At or above `quota_stop`: the campaign stops.
    Stop,
}

/// The quota gate of one provider, from its latest reading.
pub fn quota_gate(
    reading: Option<&QuotaReading>,
    quota_wait: f64,
    quota_stop: Option<f64>,
    now_ms: EpochMs,
) -> QuotaGate {
    let Some(r) = reading else {
        return QuotaGate::Go;
    };
    let reset_ms = r.reset_epoch.map(|s| s.saturating_mul(1000));
    // A reading whose window has reset says nothing about now.
    if reset_ms.is_some_and(|t| t <= now_ms) {
        return QuotaGate::Go;
    }
    if quota_stop.is_some_and(|s| r.utilisation >= s) {
        return QuotaGate::Stop;
    }
    if r.utilisation >= quota_wait {
        // Without a reset time, wait a minute and read again.
        return QuotaGate::Wait {
            until_ms: reset_ms.unwrap_or(now_ms + 60_000),
        };
    }
    QuotaGate::Go
}
