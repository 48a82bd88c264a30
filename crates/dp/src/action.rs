//! Datapath actions and the upcall contract between the datapath and the pipeline (`ofproto`).
//!
//! A packet that misses every cache is handed to [`Upcall::upcall`] on the PMD thread that
//! received it. The pipeline answers with the actions for the packet and a mask naming every
//! key bit it consulted; the datapath installs `(key & mask, mask) -> actions` as a megaflow,
//! so later packets that agree on those bits never reach the pipeline. The answer also names
//! what it depended on ([`Deps`]), so a later change removes only the megaflows it affects;
//! [`Upcall::still_valid`] lets a control thread re-check a megaflow after a rule change.
use crate::flow::{Deps, Megaflow};
use packet::Packet;
use std::sync::Arc;
use wire::FlowKey;

/// One datapath action. A list of actions runs in order; an empty list drops the packet.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Send a copy of the packet, as modified so far, to a datapath port.
    Output(u32),
    /// Push an 802.1Q tag with this TCI (PCP, DEI/CFI and VID; TPID 0x8100).
    PushVlan(u16),
    /// Remove the outermost 802.1Q tag, if any.
    PopVlan,
    /// Set the Ethernet source address.
    SetEthSrc([u8; 6]),
    /// Set the Ethernet destination address.
    SetEthDst([u8; 6]),
    /// Set the IPv4 source address (checksums updated).
    SetIpv4Src(u32),
    /// Set the IPv4 destination address (checksums updated).
    SetIpv4Dst(u32),
    /// Set the IPv4 DSCP bits (upper six bits of TOS; checksum updated).
    SetIpDscp(u8),
    /// Set the TCP/UDP source port (checksum updated).
    SetTpSrc(u16),
    /// Set the TCP/UDP destination port (checksum updated).
    SetTpDst(u16),
    /// Set the IPv4 TTL (checksum updated) or IPv6 hop limit (`dec_ttl`).
    SetIpTtl(u8),
    /// Hand the packet to the pipeline's slow path (packet-in to a controller) with this
    /// opaque cookie, see [`Upcall::userspace`].
    Userspace(u64),
    /// Run the packet through an OpenFlow meter (see [`crate::meter`]): a drop band ends the
    /// action list (the packet is dropped and counted by the meter), a DSCP remark band
    /// rewrites the packet's DSCP and goes on.
    Meter(crate::meter::MeterRef),
}

/// Shared, immutable action list.
pub type Actions = Arc<[Action]>;

/// The pipeline's answer to a miss.
#[derive(Clone, Debug)]
pub struct UpcallResult {
    /// What to do with this packet (and every packet matching the megaflow).
    pub actions: Actions,
    /// Key bits the decision depended on. The datapath always adds `in_port`.
    pub mask: FlowKey,
    /// `false` if the decision must not be cached (e.g. the pipeline is mid-change).
    pub install: bool,
    /// What the decision depended on (pipeline version, tags), for per-flow revalidation.
    pub deps: Deps,
}

/// The pipeline as the datapath sees it. Implemented by `ofproto`.
pub trait Upcall: Send + Sync {
    /// Decides the fate of a packet that missed every cache. Runs on a PMD thread: it must not
    /// block for long (no I/O; short locks only).
    fn upcall(&self, key: &FlowKey, pkt: &Packet) -> UpcallResult;

    /// Receives a packet sent to the slow path by [`Action::Userspace`]. Must not block;
    /// an implementation queues the packet for its control thread and drops when the queue
    /// is full.
    fn userspace(&self, cookie: u64, key: &FlowKey, pkt: &Packet) {
        let _ = (cookie, key, pkt);
    }

    /// Re-checks an installed megaflow, off the PMD (a control thread revalidating after a
    /// change): true if translating it now gives the same actions, mask and tags. Must not
    /// change the pipeline's state (no learning, no counters). The default answers false, so
    /// a pipeline that cannot tell loses every megaflow on a revalidation (always correct).
    fn still_valid(&self, flow: &Megaflow) -> bool {
        let _ = flow;
        false
    }
}
