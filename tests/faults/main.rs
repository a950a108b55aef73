//! The fault suite: real `redis-server`, `lanes coordinator` and `lanes worker` processes,
//! faults injected by signal, proxy, failpoint or restart, and the whole ledger of every case
//! checked by one history checker (`lanes_tests::history`). What each case proves is in
//! docs/ARCHITECTURE.md ("The fault suite").
//!
//! `LANES_SOAK_S=N` also runs `soak`: a randomized mix of every fault for N seconds on a
//! 10k-trial campaign with 3 workers × 8 lanes and 2 coordinators.

#![allow(unreachable_pub)]

// libtest starts tests in name order, as many at once as there are cores: the replicated
// Redis's failover case, the longest, sorts before the cases on a single Redis (`single`), so
// it runs beside them rather than alone at the end.
mod failover;
mod harness;
mod proxy;
mod single;
mod soak;
