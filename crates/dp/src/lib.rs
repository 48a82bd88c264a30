//! The datapath: PMD threads that poll rx queues, classify packets through the per-PMD caches
//! (EMC, SMC, megaflow classifier), ask the pipeline on a miss, and execute actions.
//!
//! Threads: PMD threads own their caches and pools; the control thread publishes new port lists
//! and rxq assignments with atomic swaps and never blocks a PMD.
#![deny(unsafe_code)]

pub mod action;

pub use action::{Action, Upcall, UpcallResult};
