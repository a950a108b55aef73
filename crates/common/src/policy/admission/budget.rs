//! The budget gate: spend and open reservations against the campaign's cap.

/// The budget gate's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BudgetGate {
    Go,
    /// Spend plus open reservations reached the cap, but the reservations may settle below it.
    Wait,
    /// Spend alone reached the cap.
    Stop,
}

/// Money below this is float residue, not spend.
const CENT_FRACTION: f64 = 1e-9;

/// Whether a unit that reserves `need` may start. A unit whose every trial carries a
/// `max_cost_usd` guard reserves the guards, and starts only if `spend + reserved + need`
/// stays within the cap: while drivers honour their guard, spend never passes the cap. If it
/// does not fit and nothing else is reserved, nothing will ever fit, and the campaign stops.
/// A unit without guards reserves an estimate and is admitted while `spend + reserved` is
/// below the cap ([`budget_gate`]): spend may then pass the cap by at most one attempt's
/// overrun per lane in flight.
pub fn budget_admits(
    cap: Option<f64>,
    spend: f64,
    reserved: f64,
    need: f64,
    guarded: bool,
) -> BudgetGate {
    let gate = budget_gate(cap, spend, reserved);
    match cap {
        Some(cap) if guarded && gate == BudgetGate::Go => {
            if spend + reserved + need <= cap + CENT_FRACTION {
                BudgetGate::Go
            } else if reserved > CENT_FRACTION {
                BudgetGate::Wait
            } else {
                BudgetGate::Stop
            }
        }
        _ => gate,
    }
}

/// The budget gate: a claim is admitted only while `spend + reserved` is below the cap. Once
/// that sum reaches the cap, claims wait for the open reservations to settle; once the spend
/// alone reaches it, the campaign stops (`STOPPED_BUDGET`). So N concurrent lanes overshoot the
/// cap by at most the last admitted trials' actual overrun, never by N trials.
pub fn budget_gate(cap: Option<f64>, spend: f64, reserved: f64) -> BudgetGate {
    match cap {
        None => BudgetGate::Go,
        Some(cap) if spend >= cap => BudgetGate::Stop,
        Some(cap) if spend + reserved >= cap => BudgetGate::Wait,
        Some(_) => BudgetGate::Go,
    }
}
