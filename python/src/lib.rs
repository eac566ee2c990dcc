//! eddyline._core
