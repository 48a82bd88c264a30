//! The OpenFlow 1.3 pipeline of Vireo's bridges.
//!
//! Owns: bridges and ports ([`bridge`]), flow tables with tuple-space lookup ([`classifier`],
//! [`tables`]), groups ([`group`]), meters ([`meter`]), MAC learning ([`mac`]), translation of a datapath miss into a megaflow
//! ([`xlate`], [`normal`]), the [`Pipeline`] that implements [`dpif::Upcall`], per-flow
//! revalidation (what changed, and the re-check of one megaflow: [`revalidate`]), and the
//! `ovs-ofctl` flow syntax ([`parse`], [`format`]), and the structured API an OpenFlow
//! endpoint uses (group-mods, port liveness, fail-open, flow stats filters, PACKET_OUT). Independent of the OpenFlow wire codec: the
//! `openflow` crate maps decoded FLOW_MODs onto [`FlowMod`].
//!
//! Threads: PMD threads call [`Pipeline`]'s `Upcall` methods; the control thread calls the rest.
//! Lock order (see [`pipeline`]): control mutex → bridge tables (RwLock, groups included) →
//! bridge MAC table or port-liveness set (Mutexes, never both) → packet-in queue.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bridge;
pub mod classifier;
pub mod ctfields;
pub mod format;
pub mod group;
pub mod mac;
pub mod meter;
pub mod native;
pub mod normal;
pub mod nx;
pub mod of_error;
mod ofapi;
mod ofctl;
pub mod parse;
pub mod parse_nx;
pub mod pipeline;
pub mod recirc;
pub mod revalidate;
pub mod tables;
pub mod types;
mod upcall;
pub mod xlate;

pub use bridge::PortConfig;
pub use format::FlowStats;
pub use group::{Bucket, GroupCommand, GroupDesc, GroupMod, GroupStats, GroupType};
pub use mac::PortMacStats;
pub use meter::{MeterBand, MeterCommand, MeterMod, MeterStatsEntry};
pub use ofapi::PacketOutPlan;
pub use parse::ParseError;
pub use pipeline::{PacketIn, Pipeline, PipelineConfig, PortSpec, Translation};
pub use revalidate::Changes;
pub use types::{
    flags, ofpp, CtAction, CtZone, FlowMod, FlowModCommand, Instruction, Match, NatKind, NatSpec,
    NxField, OfAction, OfError, OfPort, PacketInReason, PktField, Regs, RemovedFlow, RemovedReason,
    SetField, SubField,
};

use std::fmt;

/// Errors of the pipeline's control API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// No bridge of that name.
    NoSuchBridge(String),
    /// A bridge of that name exists.
    BridgeExists(String),
    /// No port of that name.
    NoSuchPort(String),
    /// A port of that name exists.
    PortExists(String),
    /// Invalid port or bridge configuration.
    BadConfig(String),
    /// `ovs-ofctl` syntax error.
    Parse(ParseError),
    /// OpenFlow-level refusal (maps to an OpenFlow error message).
    Of(OfError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoSuchBridge(b) => write!(f, "no bridge named {b}"),
            Error::BridgeExists(b) => write!(f, "bridge {b} already exists"),
            Error::NoSuchPort(p) => write!(f, "no port named {p}"),
            Error::PortExists(p) => write!(f, "port {p} already exists"),
            Error::BadConfig(s) => write!(f, "{s}"),
            Error::Parse(e) => write!(f, "{e}"),
            Error::Of(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<OfError> for Error {
    fn from(e: OfError) -> Self {
        Error::Of(e)
    }
}

impl From<ParseError> for Error {
    fn from(e: ParseError) -> Self {
        Error::Parse(e)
    }
}
