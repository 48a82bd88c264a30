//! Datapath actions and the upcall contract between the datapath and the pipeline (`ofproto`).
//!
//! A packet that misses every cache is handed to [`Upcall::upcall`] on the PMD thread that
//! received it. The pipeline answers with the actions for the packet and a mask naming every
//! key bit it consulted; the datapath installs `(key & mask, mask) -> actions` as a megaflow,
//! so later packets that agree on those bits never reach the pipeline. The answer also names
//! what it depended on ([`Deps`]), so a later change removes only the megaflows it affects;
//! [`Upcall::still_valid`] lets a control thread re-check a megaflow after a rule change, and
//! [`Revalidate`] is the datapath side of that, as the pipeline calls it.
//!
//! Threads: `upcall` and `userspace` run on PMD threads; `still_valid` and [`Revalidate`] on
//! control threads.
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
    /// Run the packet through connection tracking (see [`CtSpec`]): sets the packet's
    /// conntrack fields (`ct_state`, `ct_zone`, `ct_mark`, `ct_label`, the original tuple);
    /// NAT rewrites the frame. With `recirc`, the packet is then classified again with those
    /// fields and `recirc_id` set, and this action ends the list.
    Ct(Box<CtSpec>),
    /// Clear the packet's conntrack fields (`ct_clear`).
    CtClear,
    /// Set the packet's tunnel metadata (`tun_id`, `tun_src`, `tun_dst`; IPv4 addresses as
    /// big-endian numbers): what a later output to a flow-based `vxlan`/`geneve` port
    /// (`key=flow`, `remote_ip=flow`) encapsulates with. The pipeline emits it before an
    /// output when a `set_field`/`load` changed a tunnel field.
    SetTunnel {
        /// Tunnel id (VNI in the low 24 bits).
        id: u64,
        /// Outer source address (0: the port's own).
        src: u32,
        /// Outer destination address (0: none; a `remote_ip=flow` port drops the packet).
        dst: u32,
    },
    /// Native tunneling's encapsulation (`tnl_push`, a clone as OVS's): put the header
    /// template in front of (a copy of) the frame, filling per packet only lengths, checksums
    /// and the UDP source port (from the packet's hash), and run [`TnlPush::actions`] (the
    /// underlay bridge's translation: where the outer packet goes) on it; the list then goes
    /// on with the inner packet unchanged. As the last action it works in place, without a
    /// copy. A frame that no longer fits the underlay MTU is dropped and counted.
    TnlPush(Arc<TnlPush>),
    /// Native tunneling's decapsulation (`tnl_pop`), put before the output to an underlay
    /// bridge's internal port: a frame for one of its endpoints is checked, stripped of its
    /// outer and tunnel headers and classified again with `in_port` = the tunnel port and its
    /// tunnel metadata (the action list ends); a bad one is dropped and counted by reason;
    /// anything else goes on through the list unchanged.
    TnlPop(Arc<TnlPop>),
}

/// The parameters of [`Action::TnlPush`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TnlPush {
    /// The outer header.
    pub template: tnl::header::Template,
    /// The underlay's IP MTU (the internal port's).
    pub mtu: u16,
    /// What the outer packet meets (outputs, VLAN tags of the underlay bridge); never
    /// another `TnlPush` or `TnlPop`.
    pub actions: Vec<Action>,
}

/// One native tunnel endpoint of [`Action::TnlPop`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PopPort {
    /// Address it receives on (IPv4 or IPv6).
    pub ip: std::net::IpAddr,
    /// UDP port.
    pub udp_port: u16,
    /// `true` for Geneve, `false` for VXLAN.
    pub geneve: bool,
    /// The VNI it accepts (`None`: any, `key=flow`).
    pub vni: Option<u32>,
    /// The remote it accepts datagrams from (`None`: any, `remote_ip=flow`).
    pub remote: Option<std::net::IpAddr>,
    /// Its datapath port number (the inner packet's `in_port`).
    pub port: u32,
}

/// The parameters of [`Action::TnlPop`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TnlPop {
    /// The internal port's MAC (outer frames must be sent to it).
    pub local_mac: [u8; 6],
    /// The endpoints, most specific first.
    pub ports: Vec<PopPort>,
    /// Per endpoint (same order as `ports`; missing or empty: none), the TLV map of the
    /// tunnel port's bridge: the Geneve options it names are understood (a critical one no
    /// longer refuses the packet) and their values go to the inner key's `tun_metadataN`.
    pub tlvs: Vec<Arc<wire::tunmd::TlvTable>>,
}

/// The parameters of [`Action::Ct`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CtSpec {
    /// Zone, commit, force, NAT, mark and label to set (as the conntrack core takes them).
    pub ct: conntrack::CtAction,
    /// Recirculate with this `recirc_id` (non-zero), as `ct(table=N)` asks; the pipeline
    /// maps the id back to where translation continues.
    pub recirc: Option<u32>,
    /// With `recirc`: actions follow this one in the list, so the datapath forks (as OVS
    /// does): a copy of the packet goes through conntrack and on to recirculation, and the
    /// packet itself goes on through the rest of the list untracked (ct fields cleared).
    pub fork: bool,
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
    fn still_valid(&self, flow: &FlowRef<'_>) -> bool {
        let _ = flow;
        false
    }
}

/// An installed megaflow as [`Upcall::still_valid`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct FlowRef<'a> {
    /// The masked key.
    pub key: &'a FlowKey,
    /// The mask (with `in_port` exact, as the datapath installs it).
    pub mask: &'a FlowKey,
    /// The cached actions.
    pub actions: &'a [Action],
    /// What the translation depended on.
    pub deps: &'a Deps,
}

/// Which OpenFlow tables (of the bridge its packets enter) a translation looked packets up in,
/// so that a rule change in a table it never looked in need not re-check it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TablesSeen {
    /// Tables looked up before any action changed the packet or the registers: the lookup saw
    /// the packet as it arrived (in_port in OpenFlow numbering), registers zero.
    pub pristine: [u64; 4],
    /// Tables looked up after such an action.
    pub changed: [u64; 4],
    /// The walk also looked up another bridge's tables (a native tunnel's underlay), or
    /// recorded nothing: any rule change may matter.
    pub any: bool,
}

impl TablesSeen {
    /// No table looked up yet.
    pub const NONE: TablesSeen = TablesSeen {
        pristine: [0; 4],
        changed: [0; 4],
        any: false,
    };

    /// Records a lookup in `table`; `pristine`: before any change to the packet or registers.
    pub fn note(&mut self, table: u8, pristine: bool) {
        let (w, b) = (usize::from(table / 64), table % 64);
        if pristine {
            self.pristine[w] |= 1 << b;
        } else {
            self.changed[w] |= 1 << b;
        }
    }

    /// Whether `table` was looked up with the packet as it arrived.
    pub fn saw_pristine(&self, table: u8) -> bool {
        self.pristine[usize::from(table / 64)] >> (table % 64) & 1 != 0
    }

    /// Whether `table` was looked up after the packet or registers changed.
    pub fn saw_changed(&self, table: u8) -> bool {
        self.changed[usize::from(table / 64)] >> (table % 64) & 1 != 0
    }
}

impl Default for TablesSeen {
    /// What a translation that recorded nothing must be taken as: it may have seen anything.
    fn default() -> Self {
        TablesSeen {
            any: true,
            ..TablesSeen::NONE
        }
    }
}

/// What a translation depended on, as the pipeline names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deps {
    /// The pipeline's version when the translation started: a flow translated before a change
    /// and installed after a revalidation scan is found by this (see `Worker::revalidate`).
    pub version: u64,
    /// Opaque tags (e.g. a hash of bridge, VLAN and learned MAC): a change to anything a tag
    /// names invalidates the megaflows carrying it. Sorted, no duplicates.
    pub tags: Box<[u64]>,
    /// The tables the translation looked up (default: any).
    pub tables: TablesSeen,
}

impl Deps {
    /// Dependencies with `tags` sorted and deduplicated.
    pub fn new(version: u64, mut tags: Vec<u64>) -> Deps {
        tags.sort_unstable();
        tags.dedup();
        Deps {
            version,
            tags: tags.into_boxed_slice(),
            tables: TablesSeen::default(),
        }
    }

    /// These dependencies, with the tables the translation looked up.
    pub fn with_tables(mut self, tables: TablesSeen) -> Deps {
        self.tables = tables;
        self
    }

    /// True if any tag is in `changed` (sorted).
    pub fn touches(&self, changed: &[u64]) -> bool {
        self.tags.iter().any(|t| changed.binary_search(t).is_ok())
    }
}

/// The datapath's revalidation entry points as the pipeline calls them
/// (`ofproto::Pipeline::revalidate_datapath`); implemented by `dp::Datapath`. Both return once
/// every PMD has removed the megaflows found stale, with how many they were.
pub trait Revalidate {
    /// Why a revalidation could not finish.
    type Error;
    /// Removes the megaflows whose [`Deps::tags`] include one of `changed`, and those installed
    /// during the scan that were translated before pipeline version `version`.
    fn revalidate_tags(&self, version: u64, changed: &[u64]) -> Result<usize, Self::Error>;
    /// Re-checks every megaflow with [`Upcall::still_valid`] and removes those whose
    /// translation changed (and, as above, those translated before `version`).
    fn revalidate_all(&self, version: u64) -> Result<usize, Self::Error>;
    /// Removes the megaflows `stale` names (called on this thread, once per megaflow), and,
    /// as above, those translated before `version`.
    fn revalidate_where(
        &self,
        version: u64,
        stale: &dyn Fn(&FlowRef<'_>) -> bool,
    ) -> Result<usize, Self::Error>;
}

#[cfg(test)]
mod tests {
    use super::TablesSeen;

    #[test]
    fn tables_seen_records_each_table_in_its_kind() {
        let mut t = TablesSeen::NONE;
        for (table, pristine) in [(0, true), (63, false), (64, true), (254, false)] {
            t.note(table, pristine);
        }
        for table in 0..=254u8 {
            let want = match table {
                0 | 64 => (true, false),
                63 | 254 => (false, true),
                _ => (false, false),
            };
            assert_eq!(
                (t.saw_pristine(table), t.saw_changed(table)),
                want,
                "{table}"
            );
        }
        assert!(!t.any);
        assert!(
            TablesSeen::default().any,
            "recorded nothing: may have seen anything"
        );
    }
}
