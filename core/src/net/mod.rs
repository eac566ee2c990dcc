//! Networking between the processes of one job: framing, authentication
//! with the per-job secret, the credit-based data plane and the
//! driver/worker control messages (DESIGN.md "Runtime", worker processes).

pub mod auth;
pub(crate) mod control;
pub mod data;
pub mod wire;
