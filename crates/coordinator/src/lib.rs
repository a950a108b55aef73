//! The Lanes coordinator: owns the queue and the "first scored attempt wins" state.
//!
//! [`store`] holds the `Store` trait, its backends and the transitions they share.

pub mod store;
