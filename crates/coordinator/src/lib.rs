//! The Lanes coordinator: owns the queue and the "first scored attempt wins" state.
