//! Harnesses for the end-to-end and fault-injection suites: real processes, cleaned up on drop.
