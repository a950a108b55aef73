//! The policy: pure functions that decide retries, gates and the phase-2 rule. Both store
//! backends call these, so a decision is made the same way everywhere and is tested once.

pub mod admission;
pub mod gates;
pub mod lease;
pub mod phase2;
pub mod retry;

pub use gates::{
    BudgetGate, GateInput, NoWorkReason, ProviderGate, QuotaGate, budget_admits, claim_gate,
};
pub use phase2::{Phase2Input, phase2_block};
pub use retry::{Decision, NewResult, Placement, TrialHistory, decide};
