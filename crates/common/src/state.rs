//! Campaign-level state: running, stopping, stopped or done, and why it stopped.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a campaign is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CampaignState {
    Running,
    /// A stop was asked for; in-flight attempts are finishing (drain) or being cancelled.
    Stopping,
    Stopped,
    /// Every trial is final (or `not_started`).
    Done,
}

impl CampaignState {
    pub fn as_str(self) -> &'static str {
        match self {
            CampaignState::Running => "running",
            CampaignState::Stopping => "stopping",
            CampaignState::Stopped => "stopped",
            CampaignState::Done => "done",
        }
    }
}

impl fmt::Display for CampaignState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a campaign stopped. Printed as `STOPPED_<REASON>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StopReason {
    #[serde(rename = "STOPPED_USER")]
    User,
    #[serde(rename = "STOPPED_TIME")]
    Time,
    #[serde(rename = "STOPPED_BUDGET")]
    Budget,
    #[serde(rename = "STOPPED_AUTH")]
    Auth,
    #[serde(rename = "STOPPED_QUOTA")]
    Quota,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::User => "STOPPED_USER",
            StopReason::Time => "STOPPED_TIME",
            StopReason::Budget => "STOPPED_BUDGET",
            StopReason::Auth => "STOPPED_AUTH",
            StopReason::Quota => "STOPPED_QUOTA",
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a user stop treats in-flight attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopMode {
    /// No new claims; in-flight attempts finish.
    Drain,
    /// In-flight attempts are cancelled through their lanes and recorded as `cancelled`.
    Cancel,
}

/// What a heartbeat's renewal says about one leased token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RenewState {
    Renewed,
    /// Reaped, superseded or revoked: stop work that has not been evaluated.
    Lost,
    /// A cancel stop asks the lane to cancel the attempt and release it.
    Cancel,
}
