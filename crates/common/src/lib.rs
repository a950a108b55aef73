//! Lanes' domain model, with no I/O: ids, the campaign and its file format, the schedule,
//! rows and outcomes, the spec hash, the policy (retries, claim gates, phase 2), resume, the
//! size limits of every message, and the generated wire contract with its conversions. The
//! report (`lanes-report`), dialing a coordinator (`lanes-dial`) and attempts' traces in
//! OpenTelemetry (`lanes-telemetry`) live in crates of their own.

pub mod archive;
pub mod canonical;
pub mod convert;
pub mod ids;
pub mod lease;
pub mod limits;
pub mod log_safe;
pub mod policy;
pub mod proto;
pub mod protocol;
pub mod request_codec;
pub mod resume;
pub mod row;
pub mod schedule;
pub mod smoke;
pub mod spec;
pub mod spec_hash;
pub mod state;
pub mod stats;
pub mod strict_json;
pub mod submit;
pub mod trace;
pub mod utc;

pub use ids::{ArmId, CampaignId, IdError, TaskId, Token, TrialId};
