//! The datapath: PMD threads that poll rx queues, classify packets through the per-PMD caches
//! (EMC, SMC, megaflow classifier), ask the pipeline on a miss, and execute actions; meters
//! ([`meter`]) and per-port policing ([`police`]) limit rates on the fast path.
//!
//! The action and upcall contract with the pipeline, and meters, live in the leaf crate `dpif`
//! (re-exported here as [`action`] and [`meter`]).
//!
//! Modules, from the packet up: [`emc`], [`smc`], [`dpcls`] (caches) with [`simd`] (their key
//! compare kernels per instruction set), [`flow`] (megaflows),
//! [`execute`] (actions, tx batching), [`worker`] (one PMD's burst pipeline), `pmd` (the thread
//! loop), [`sched`] (rx queue assignment), [`topology`] (NUMA), [`stats`], and [`Datapath`]
//! (the control API the daemon uses).
//!
//! Threads: PMD threads own their caches and pools; the control thread publishes new port lists
//! and rxq assignments with atomic swaps and never blocks a PMD. The only `unsafe` is the TSC
//! read in `cycles` and the AVX-512 kernels in [`simd`].
#![deny(unsafe_code)]

pub mod config;
pub mod cycles;
mod datapath;
pub mod dpcls;
pub mod emc;
pub mod execute;
pub mod flow;
mod pmd;
pub mod police;
pub mod sched;
pub mod simd;
pub mod smc;
pub mod stats;
pub mod tnl;
pub mod topology;
pub mod worker;

pub use config::{AutoLb, DpConfig, DpError, DpTuning};
pub use datapath::{Datapath, MarkCandidate};
pub use dpif::meter::{BandConfig, BandKind, Meter, MeterConfig, MeterRef, MeterStats};
pub use dpif::{action, meter};
pub use dpif::{Action, Actions, CtSpec, Deps, FlowRef, Revalidate, Upcall, UpcallResult};
pub use sched::AssignMode;
pub use stats::{MegaflowInfo, PmdStats, RxqInfo};
pub use topology::Topology;
