//! Ports: the [`Port`] trait every port kind implements, its counters, and the kinds.
//!
//! Threads: a port is created and destroyed by the daemon's control thread and shared (`Arc`)
//! with the PMD threads. Each rx queue is polled by exactly one PMD at a time; tx may come from
//! any PMD, so kinds that need it serialize tx per queue internally (an uncontended lock per
//! burst, never per packet). Control calls (`status`, `stats`) never block the hot path for
//! longer than a counter read.
#![deny(unsafe_code)]

pub mod af_packet;
pub mod af_xdp;
pub mod dummy;
pub mod kmeta;
// The kernel calls and the TPACKET ring (the crate holding their `unsafe`), as `crate::sys`
// and `crate::ring` for the port kinds.
use ksys::{ring, sys, udp};
mod stats;
pub mod tap;
pub mod tunnel;
pub mod vhost_user;

pub use stats::{set_thread_shard, DropReason, PortCounters, PortStats};

/// [`sys::set_if_up`] for a port's `set_admin_up`, with the interface named in the error.
pub(crate) fn set_admin(name: &str, up: bool) -> Result<(), PortError> {
    sys::set_if_up(name, up).map_err(|e| {
        let what = if up { "up" } else { "down" };
        PortError(format!("cannot take {name} {what}: {e}"))
    })
}

use packet::{Batch, Pool};

/// A port's link as the datapath sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Link {
    /// Packets can flow.
    Up,
    /// No peer or peer not ready; tx is dropped and counted.
    Down,
}

/// Everything a port kind must do.
pub trait Port: Send + Sync {
    /// Port type as in INTERFACE.md (`dummy`, `vhost-user`, ...).
    fn kind(&self) -> &'static str;

    /// Rx queues the datapath should poll now (may change when a vhost-user frontend
    /// negotiates multiqueue).
    fn n_rxq(&self) -> usize;

    /// NUMA node of the port's memory (for vhost-user, the guest memory), if known.
    fn numa_node(&self) -> Option<usize> {
        None
    }

    /// NUMA node whose PMDs should poll rx queue `q` (an `af-xdp` port with `xdp-steering`
    /// has queues meant for each node); by default the port's node.
    fn rxq_numa(&self, _q: usize) -> Option<usize> {
        self.numa_node()
    }

    /// Receives up to `out.room()` packets from rx queue `q` into `out`, taking buffers from
    /// `pool`. Returns how many were added. Never blocks.
    fn rx_burst(&self, q: usize, pool: &mut Pool, out: &mut Batch) -> usize;

    /// Sends the packets of `pkts` on tx queue `q` (taken modulo the port's tx queue count).
    /// The packets stay in `pkts` for the caller to recycle; the return value is how many were
    /// sent, and the port counts the rest as drops with their reason. Never blocks.
    fn tx_burst(&self, q: usize, pkts: &mut Batch) -> usize;

    /// Link state.
    fn link(&self) -> Link;

    /// Counters.
    fn stats(&self) -> PortStats;

    /// Adds the counts an upgrade's old vireod had for this port (control thread, once, as
    /// the port is taken over), so its counters go on rather than start at zero. Every kind
    /// Vireo has implements it; the default (test ports) ignores them.
    fn preload_stats(&self, _s: &PortStats) {}

    /// Slow-path upkeep, called about twice a second by the daemon's housekeeping thread,
    /// never by a PMD: kernel ports notice their interface vanishing or coming back here.
    fn maintain(&self) {}

    /// Takes the kernel interface behind the port administratively down (`up == false`) or
    /// back up: an OpenFlow PORT_MOD with PORT_DOWN, as OVS does. Kinds with no interface of
    /// their own (vhost-user, tunnels, dummy) have nothing to do: the pipeline already neither
    /// forwards to nor receives from a port configured down. Control thread only.
    fn set_admin_up(&self, up: bool) -> Result<(), PortError> {
        let _ = up;
        Ok(())
    }

    /// Offloads this port's transmit path takes as is: a packet whose
    /// [`packet::Meta::offload`] needs more is completed in software by the datapath
    /// (`dp::execute`) before it is queued here. Default: none. Called only for packets that
    /// carry an offload.
    fn tx_offloads(&self) -> packet::vnet::Offloads {
        packet::vnet::Offloads::default()
    }

    /// Whether this port's `tx_burst` takes packets whose frame tail is still in the sending
    /// guest's memory ([`packet::Packet::tail`]: one copy for large frames) and copies it out
    /// itself. Default: no, and the datapath copies the tail into the packet
    /// ([`packet::Packet::materialise`]) before queueing it here.
    fn takes_tails(&self) -> bool {
        false
    }

    /// Kind-specific state for `vireoctl show` (negotiated features, peer, ...).
    fn status(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// Error from creating a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortError(pub String);

impl std::fmt::Display for PortError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PortError {}
