//! The policy: pure functions that decide retries, admission (the claim gates) and the phase-2
//! rule. Both store backends call these, so a decision is made the same way everywhere and is
//! tested once.

pub mod admission;
pub mod lease;
pub mod no_work;
pub mod phase2;
pub mod retry;

pub use admission::{
    AdmissionInput, AdmissionVerdict, BudgetGate, ClaimGate, ClaimGateInForce, ProviderGate,
    QuotaGate, admission_verdict, budget_admits, gates_in_force,
};
pub use no_work::NoWorkReason;
pub use phase2::{Phase2Input, phase2_block};
pub use retry::{Decision, NewResult, Placement, TrialHistory, decide};
