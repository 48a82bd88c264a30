//! Native tunneling in translation (issue 12, stage 2): the hook through which the daemon's
//! underlay state (route table, neighbour cache, tunnel port options) decides what an output
//! to a tunnel port, or to an underlay bridge's internal port, becomes.
//!
//! An output to a native tunnel port becomes `TnlPush { header template, underlay actions }`:
//! the underlay actions are the translation of the outer packet (built from the template)
//! through the underlay bridge's own tables as if it came in on that bridge's internal port
//! (LOCAL), so NORMAL or the bridge's flows pick the physical port. A neighbour miss (or an
//! underlay the hook cannot use) drops the packet without installing a megaflow, so each
//! packet is counted and the next one after the neighbour is learned is encapsulated. An
//! output to an internal port that owns native endpoints is preceded by `TnlPop`.
//!
//! Geneve options: the template carries the options whose `tun_metadataN` value (as the
//! tunnel port's bridge maps them) is not zero, and the megaflow matches every mapped
//! option's value; `TnlPop` gets, per endpoint, the TLV map of the tunnel port's bridge (the
//! translation fills `TnlPop::tlvs`), so decapsulation reads the options that bridge maps.
//! A TLV map change re-checks every megaflow (`Pipeline::tlv_mod`).
//!
//! Megaflows that used the underlay state are invalidated by the daemon: any change of the
//! route table or neighbour cache generation calls [`crate::Pipeline::underlay_changed`] and a
//! full revalidation (the re-translation gives another template or none).
//!
//! Threads: the hook is called on the PMD doing an upcall (and on revalidation re-checks).
use dpif::action::{TnlPop, TnlPush};
use std::sync::Arc;
use wire::tunmd::TlvTable;
use wire::FlowKey;

/// What an output to a datapath port becomes.
#[derive(Clone, Debug)]
pub enum Encap {
    /// Encapsulate with this template (its `actions` empty: translation fills them) and
    /// translate the outer packet in the bridge of datapath port `local_dp` (an internal
    /// port) as if it came in there.
    Push {
        /// Template and MTU (boxed: the template is large).
        push: Box<TnlPush>,
        /// The underlay bridge's internal port (datapath number).
        local_dp: u32,
    },
    /// Drop (neighbour miss, no usable underlay): do not install.
    Drop,
}

/// The daemon's side of native tunneling.
pub trait NativeTunnels: Send + Sync {
    /// For an output to `dp_port` with the packet's key (`tun_*` fields for flow-based
    /// ports, `tun_metadataN` values for Geneve options as the bridge's TLV map `tlv` names
    /// them): `None` if the port is not a native tunnel port (a plain output).
    fn encap(&self, dp_port: u32, key: &FlowKey, tlv: &TlvTable) -> Option<Encap>;
    /// For an output to `dp_port`: the `TnlPop` to put before it, if it is an internal port
    /// with native endpoints.
    fn pop_before(&self, dp_port: u32) -> Option<Arc<TnlPop>>;
}
