//! The policy: pure functions that decide retries, admission (the claim gates), the phase-2
//! rule and whether a worker's offer covers a campaign's driver. Both store backends call
//! these, so a decision is made the same way everywhere and is tested once.

pub mod admission;
pub mod lease;
pub mod no_work;
pub mod offer;
pub mod phase2;
pub mod retry;

pub use admission::{
    AdmissionInput, AdmissionVerdict, BudgetGate, ClaimGate, ClaimGateInForce, ProviderGate,
    QuotaGate, admission_verdict, budget_admits, gates_in_force,
};
pub use no_work::NoWorkReason;
pub use offer::{Allowlist, DriverRefusal, WorkerOffer};
pub use phase2::{Phase2Input, phase2_block};
pub use retry::{Decision, NewResult, Placement, TrialHistory, decide};
