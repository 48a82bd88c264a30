//! Vireo's benchmark harness: `vireo-bench` (runs the switches under test against the same
//! generator with the same pinning, interleaved over rounds; vhost-user and kernel ports) and `vireo-gen` (a vhost-user
//! frontend in Rust that plays the VM and measures loss, reordering and latency).
//!
//! Threads: every module runs on the caller's thread; `vireo-gen`'s poll loop is
//! single-threaded and pinned to the generator core.
pub mod contender;
pub mod frontend;
pub mod gen;
pub mod genproc;
pub mod kernel;
pub mod kgen;
pub mod kswitch;
pub mod kvu;
pub mod native;
pub mod parse;
pub mod proc;
pub mod report;
pub mod rfc2544;
pub mod scenario;
pub mod stats;
pub mod testpmd;
