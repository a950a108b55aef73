//! The lane protocol's version. Worker and coordinator releases move at different times in a
//! fleet, so a worker says which version it speaks when it registers, and a coordinator that
//! cannot serve it refuses the session with a message naming the side to upgrade, instead of
//! misreading its messages.

/// The lane protocol this build speaks. Bump it when a lane message changes meaning in a way an
/// older peer would get wrong (a field it must fill, a field it must honour).
///
/// - 1: lease secrets in every token (`Token.lease`), drivers offered in `Register`.
pub const LANE_PROTOCOL: u32 = 1;

/// The oldest worker protocol this coordinator serves.
pub const OLDEST_WORKER_PROTOCOL: u32 = 1;

/// A worker this coordinator cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolMismatch {
    #[error(
        "the worker speaks lane protocol {worker}{}, but this coordinator serves {oldest} to {current}: upgrade the worker",
        if *worker == 0 { " (a release from before protocol versions)" } else { "" }
    )]
    WorkerTooOld {
        worker: u32,
        oldest: u32,
        current: u32,
    },
    #[error(
        "the worker speaks lane protocol {worker}, newer than this coordinator's {current}: upgrade the coordinator"
    )]
    WorkerTooNew { worker: u32, current: u32 },
}

/// Whether a coordinator of this build serves a worker speaking `worker`.
pub fn check_worker(worker: u32) -> Result<(), ProtocolMismatch> {
    if worker < OLDEST_WORKER_PROTOCOL {
        Err(ProtocolMismatch::WorkerTooOld {
            worker,
            oldest: OLDEST_WORKER_PROTOCOL,
            current: LANE_PROTOCOL,
        })
    } else if worker > LANE_PROTOCOL {
        Err(ProtocolMismatch::WorkerTooNew {
            worker,
            current: LANE_PROTOCOL,
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_build_serves_itself_and_names_the_side_to_upgrade_otherwise() {
        assert_eq!(check_worker(LANE_PROTOCOL), Ok(()));
        let old = check_worker(0).unwrap_err().to_string();
        assert!(old.contains("upgrade the worker"), "{old}");
        assert!(old.contains("before protocol versions"), "{old}");
        let new = check_worker(LANE_PROTOCOL + 1).unwrap_err().to_string();
        assert!(new.contains("upgrade the coordinator"), "{new}");
    }
}
