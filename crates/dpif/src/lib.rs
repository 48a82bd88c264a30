//! The datapath's contract with the pipeline, in a leaf crate: the actions a megaflow carries
//! ([`Action`]), the upcall a PMD makes on a miss ([`Upcall`], [`UpcallResult`]), what a
//! translation depended on ([`Deps`]) and the revalidation entry points ([`Revalidate`]),
//! meters ([`meter`], which actions name) and the packet-modifying actions ([`modify`]).
//!
//! `dp` implements the datapath side and re-exports all of this; `ofproto` and `ofswitch`
//! depend on this crate (and `wire`, `packet`) only, so the OpenFlow side does not pull in the
//! port stack (`ports`, `vhost`, `virtq`, `guestmem`).
//!
//! Threads: the types are shared; which thread calls what is said on each trait.
#![deny(unsafe_code)]

pub mod action;
pub mod meter;
pub mod modify;

pub use action::{
    Action, Actions, CtSpec, Deps, FlowRef, Revalidate, TablesSeen, Upcall, UpcallResult,
};
pub use conntrack;
pub use meter::{BandConfig, BandKind, Meter, MeterConfig, MeterRef, MeterStats};
