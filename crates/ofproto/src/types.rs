//! OpenFlow 1.3 vocabulary, independent of the wire codec: port numbers, [`Match`],
//! [`OfAction`], [`Instruction`], [`FlowMod`] and flow-removed records (OpenFlow errors:
//! [`crate::of_error`], re-exported here).
//!
//! Owns: plain data only (no locks, no threads). The `openflow` codec maps decoded messages to
//! these types; the `ovs-ofctl` parser in [`crate::parse`] builds them from text.
//!
//! A [`Match`] is a value/mask pair over a [`FlowKey`]. The `in_port` field of a match holds the
//! *OpenFlow* port number (the pipeline swaps the datapath number for it before lookup).

use std::time::Duration;
use wire::{Field, FlowKey};

pub use crate::nx::{CtAction, CtZone, NatKind, NatSpec, NxField, PktField, Regs, SubField};
pub use crate::of_error::OfError;

/// An OpenFlow port number.
pub type OfPort = u32;

/// Reserved OpenFlow 1.3 port numbers.
pub mod ofpp {
    use super::OfPort;
    /// Largest number of a physical/logical port.
    pub const MAX: OfPort = 0xffff_ff00;
    /// The port the packet came in on.
    pub const IN_PORT: OfPort = 0xffff_fff8;
    /// Submit to the first table (packet-out only).
    pub const TABLE: OfPort = 0xffff_fff9;
    /// The traditional L2 switch (MAC learning, VLANs).
    pub const NORMAL: OfPort = 0xffff_fffa;
    /// Every port except the ingress port.
    pub const FLOOD: OfPort = 0xffff_fffb;
    /// Every port except the ingress port.
    pub const ALL: OfPort = 0xffff_fffc;
    /// The controller (packet-in).
    pub const CONTROLLER: OfPort = 0xffff_fffd;
    /// The bridge's local port.
    pub const LOCAL: OfPort = 0xffff_fffe;
    /// Wildcard (out_port filters).
    pub const ANY: OfPort = 0xffff_ffff;
}

/// `OFPTT_ALL`: every table (delete and dump requests).
pub const TABLE_ALL: u8 = 0xff;
/// Highest usable table id.
pub const TABLE_MAX: u8 = 254;
/// `OFP_DEFAULT_PRIORITY`.
pub const DEFAULT_PRIORITY: u16 = 0x8000;
/// `OFPCML_NO_BUFFER`: send the whole packet to the controller.
pub const CONTROLLER_MAX_LEN_NO_BUFFER: u16 = 0xffff;

/// Flow-mod flags (`ofp_flow_mod_flags`).
pub mod flags {
    /// Send FLOW_REMOVED when the rule expires or is deleted.
    pub const SEND_FLOW_REM: u16 = 1 << 0;
    /// Refuse an add that overlaps a rule of the same priority.
    pub const CHECK_OVERLAP: u16 = 1 << 1;
    /// Reset counters on replace/modify.
    pub const RESET_COUNTS: u16 = 1 << 2;
    /// Do not count packets.
    pub const NO_PKT_COUNTS: u16 = 1 << 3;
    /// Do not count bytes.
    pub const NO_BYT_COUNTS: u16 = 1 << 4;
}

/// VLAN TCI bit that marks "a tag is present" (in the key and in OF1.3 `vlan_vid`).
pub const VLAN_PRESENT: u16 = 0x1000;
/// VID bits of a TCI.
pub const VLAN_VID_MASK: u16 = 0x0fff;
/// Ethernet types used by prerequisites.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// 802.1Q.
    pub const VLAN: u16 = 0x8100;
}
/// IP protocol numbers used by prerequisites.
pub mod ipproto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// A masked match over the flow key. Bits outside `mask` are zero in `key`.
///
/// OF1.3 OXM fields map onto [`Field`]s: IN_PORT → `InPort` (OpenFlow number), ETH_DST/SRC →
/// `EthDst`/`EthSrc`, ETH_TYPE → `EthType`, VLAN_VID/PCP → `VlanTci` (use
/// [`Match::set_vlan_vid`] / [`Match::set_vlan_pcp`]), IP_DSCP/ECN → `IpTos`
/// ([`Match::set_ip_dscp`] / [`Match::set_ip_ecn`]), IP_PROTO → `IpProto`, IPV4_SRC/DST and
/// ARP_SPA/TPA → `Ipv4Src`/`Ipv4Dst`, TCP/UDP/SCTP_SRC/DST → `TpSrc`/`TpDst`, ICMPV4/6
/// TYPE/CODE → `TpSrc`/`TpDst` (8 bits), ARP_OP → `ArpOp`, ARP_SHA/THA → `ArpSha`/`ArpTha`,
/// IPV6_SRC/DST → [`Match::set_ipv6_src`] / [`Match::set_ipv6_dst`]. Other OXM fields
/// (METADATA, IN_PHY_PORT, IPV6_FLABEL, ND_*, MPLS_*, PBB_ISID, TUNNEL_ID, IPV6_EXTHDR) have no
/// place in the key: the codec answers them with OFPBMC_BAD_FIELD.
///
/// Registers (`reg0`..`reg15`, `xreg`, `metadata`) are pipeline state, not key bits: they are
/// matched through `regs`/`regs_mask`, and matching on them never widens a megaflow.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Debug)]
pub struct Match {
    /// Values (in_port holds the OpenFlow port number).
    pub key: FlowKey,
    /// Which bits are matched.
    pub mask: FlowKey,
    /// Register values (bits outside `regs_mask` are zero).
    pub regs: Regs,
    /// Which register bits are matched.
    pub regs_mask: Regs,
}

impl Match {
    /// Matches every packet.
    pub const ANY: Match = Match {
        key: FlowKey::ZERO,
        mask: FlowKey::ZERO,
        regs: Regs::ZERO,
        regs_mask: Regs::ZERO,
    };

    /// Matches register-file bits `mask` of `field` (a register, xreg, xxreg or metadata) to
    /// `value`; other bits of the field keep what they had.
    pub fn set_reg(&mut self, field: NxField, value: u128, mask: u128) -> &mut Self {
        field.set_reg(&mut self.regs_mask, u128::MAX, mask);
        field.set_reg(&mut self.regs, value & mask, mask);
        self
    }

    /// True if the match has no packet or register bits (a table-miss rule's match).
    pub fn is_catchall(&self) -> bool {
        self.mask == FlowKey::ZERO && self.regs_mask.is_zero()
    }

    /// True if the register file `r` satisfies the register part of the match.
    #[inline]
    pub fn regs_match(&self, r: &Regs) -> bool {
        r.masked(&self.regs_mask) == self.regs
    }

    /// Matches `field == value` exactly.
    pub fn set(&mut self, f: Field, value: u64) -> &mut Self {
        self.set_masked(f, value, f.full())
    }

    /// Matches `field & mask == value & mask`. A zero mask clears the field.
    pub fn set_masked(&mut self, f: Field, value: u64, mask: u64) -> &mut Self {
        self.mask.set(f, mask);
        self.key.set(f, value & mask);
        self
    }

    /// Matches the OpenFlow ingress port.
    pub fn set_in_port(&mut self, port: OfPort) -> &mut Self {
        self.set(Field::InPort, u64::from(port))
    }

    /// OF1.3 `OXM_OF_VLAN_VID` semantics: `value` is `OFPVID_PRESENT | vid` (or
    /// `OFPVID_NONE` = 0 for "no tag"), `mask` as in the OXM (0x1fff when unmasked).
    pub fn set_vlan_vid(&mut self, value: u16, mask: u16) -> &mut Self {
        self.merge(
            Field::VlanTci,
            u64::from(value & 0x1fff),
            u64::from(mask & 0x1fff),
        )
    }

    /// OF1.3 `OXM_OF_VLAN_PCP` (implies a tag is present).
    pub fn set_vlan_pcp(&mut self, pcp: u8) -> &mut Self {
        let v = u64::from(VLAN_PRESENT) | u64::from(pcp & 7) << 13;
        self.merge(Field::VlanTci, v, 0xf000)
    }

    /// OF1.3 `OXM_OF_IP_DSCP` (6 bits).
    pub fn set_ip_dscp(&mut self, dscp: u8) -> &mut Self {
        self.merge(Field::IpTos, u64::from(dscp & 0x3f) << 2, 0xfc)
    }

    /// OF1.3 `OXM_OF_IP_ECN` (2 bits).
    pub fn set_ip_ecn(&mut self, ecn: u8) -> &mut Self {
        self.merge(Field::IpTos, u64::from(ecn & 3), 3)
    }

    /// A MAC field (`EthSrc`, `EthDst`, `ArpSha`, `ArpTha`) with a mask.
    pub fn set_mac(&mut self, f: Field, mac: [u8; 6], mask: [u8; 6]) -> &mut Self {
        self.set_masked(f, FlowKey::mac_to_u64(mac), FlowKey::mac_to_u64(mask))
    }

    /// `OXM_OF_IPV6_SRC` with a mask.
    pub fn set_ipv6_src(&mut self, addr: u128, mask: u128) -> &mut Self {
        self.set_masked(Field::Ipv6SrcHi, (addr >> 64) as u64, (mask >> 64) as u64);
        self.set_masked(Field::Ipv6SrcLo, addr as u64, mask as u64)
    }

    /// `OXM_OF_IPV6_DST` with a mask.
    pub fn set_ipv6_dst(&mut self, addr: u128, mask: u128) -> &mut Self {
        self.set_masked(Field::Ipv6DstHi, (addr >> 64) as u64, (mask >> 64) as u64);
        self.set_masked(Field::Ipv6DstLo, addr as u64, mask as u64)
    }

    /// Adds `value/mask` bits to a field, keeping bits already matched (VLAN VID + PCP, DSCP +
    /// ECN share one field).
    pub fn merge(&mut self, f: Field, value: u64, mask: u64) -> &mut Self {
        let (old_v, old_m) = (self.key.get(f), self.mask.get(f));
        self.set_masked(f, (old_v & !mask) | (value & mask), old_m | mask)
    }

    /// `(value, mask)` of a field, `None` when the field is wildcarded.
    pub fn get(&self, f: Field) -> Option<(u64, u64)> {
        let m = self.mask.get(f);
        (m != 0).then(|| (self.key.get(f), m))
    }

    /// The exact value of a field, if every bit of it is matched.
    pub fn exact(&self, f: Field) -> Option<u64> {
        (self.mask.get(f) == f.full()).then(|| self.key.get(f))
    }

    /// True if every packet this match accepts is also accepted by `self` being a looser
    /// filter: `self.mask ⊆ rule.mask` and the rule agrees on `self`'s bits (OpenFlow
    /// non-strict semantics, `self` is the filter).
    pub fn covers(&self, rule: &Match) -> bool {
        (0..wire::KEY_WORDS).all(|i| {
            self.mask.w[i] & !rule.mask.w[i] == 0
                && (rule.key.w[i] & self.mask.w[i]) == self.key.w[i]
        }) && self.regs_mask.masked(&rule.regs_mask) == self.regs_mask
            && rule.regs.masked(&self.regs_mask) == self.regs
    }

    /// True if some packet matches both.
    pub fn overlaps(&self, other: &Match) -> bool {
        (0..wire::KEY_WORDS)
            .all(|i| (self.key.w[i] ^ other.key.w[i]) & self.mask.w[i] & other.mask.w[i] == 0)
            && {
                let both = self.regs_mask.masked(&other.regs_mask);
                self.regs.masked(&both) == other.regs.masked(&both)
            }
    }

    /// True if the match accepts `key` (whose in_port holds the OpenFlow port), ignoring
    /// registers.
    #[inline]
    pub fn matches(&self, key: &FlowKey) -> bool {
        self.key.matches(key, &self.mask)
    }

    fn requires(&self, f: Field, allowed: &[u64], what: &'static str) -> Result<(), OfError> {
        match self.exact(f) {
            Some(v) if allowed.contains(&v) => Ok(()),
            _ => Err(OfError::BadPrereq(what)),
        }
    }

    /// Checks OpenFlow 1.3 prerequisites (e.g. `tp_dst` needs `ip_proto` TCP/UDP, which needs
    /// an IP `eth_type`). The key layout overlaps ARP/IPv6 and ICMP/L4 fields, so a match that
    /// breaks a prerequisite would be ambiguous; it is refused.
    pub fn check_prerequisites(&self) -> Result<(), OfError> {
        use ethertype::*;
        let ip = [u64::from(IPV4), u64::from(IPV6)];
        let uses = |f: Field| self.mask.get(f) != 0;
        if uses(Field::IpProto) || uses(Field::IpTos) || uses(Field::IpTtl) || uses(Field::IpFrag) {
            self.requires(
                Field::EthType,
                &ip,
                "ip fields need dl_type=0x0800 or 0x86dd",
            )?;
        }
        if uses(Field::Ipv4Src) || uses(Field::Ipv4Dst) {
            let v4arp = [u64::from(IPV4), u64::from(ARP)];
            self.requires(Field::EthType, &v4arp, "nw_src/nw_dst need ip or arp")?;
        }
        if uses(Field::ArpOp) {
            self.requires(Field::EthType, &[u64::from(ARP)], "arp_op needs arp")?;
        }
        let w5 = uses(Field::Ipv6SrcHi) || uses(Field::Ipv6SrcLo);
        let w7 = uses(Field::Ipv6DstHi) || uses(Field::Ipv6DstLo);
        if w5 || w7 {
            let v6arp = [u64::from(IPV6), u64::from(ARP)];
            self.requires(
                Field::EthType,
                &v6arp,
                "ipv6/arp_sha/arp_tha fields need ipv6 or arp",
            )?;
            if w7 {
                self.requires(Field::EthType, &[u64::from(IPV6)], "ipv6_dst needs ipv6")?;
            }
        }
        // ct_nw_src / ct_nw_dst share their key word with the high half of ct_ipv6_src: the
        // match's eth_type says which it is (ip or ipv6); the rest of ct_ipv6_* is ipv6 only.
        let ct6 = [Field::CtIpv6SrcLo, Field::CtIpv6DstHi, Field::CtIpv6DstLo];
        if ct6.into_iter().any(uses) {
            let what = "ct_ipv6_src/ct_ipv6_dst need ipv6";
            self.requires(Field::EthType, &[u64::from(IPV6)], what)?;
        } else if uses(Field::CtIpv6SrcHi) {
            let what = "ct_nw_src/ct_nw_dst need ip (ct_ipv6_src ipv6)";
            self.requires(Field::EthType, &ip, what)?;
        }
        if uses(Field::TpSrc) || uses(Field::TpDst) || uses(Field::TcpFlags) {
            let l4 = [6, 17, 1, 58, 132];
            self.requires(
                Field::IpProto,
                &l4,
                "tp_src/tp_dst need tcp, udp, sctp or icmp",
            )?;
            if uses(Field::TcpFlags) {
                self.requires(Field::IpProto, &[6], "tcp_flags needs tcp")?;
            }
        }
        Ok(())
    }
}

/// A field an action can set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetField {
    /// Ethernet source.
    EthSrc([u8; 6]),
    /// Ethernet destination.
    EthDst([u8; 6]),
    /// VLAN id (12 bits). Pushes a tag if the packet has none (as OVS `mod_vlan_vid`).
    VlanVid(u16),
    /// VLAN priority (3 bits). Pushes a tag if the packet has none.
    VlanPcp(u8),
    /// IPv4 source.
    Ipv4Src(u32),
    /// IPv4 destination.
    Ipv4Dst(u32),
    /// DSCP (6 bits).
    IpDscp(u8),
    /// TCP source port.
    TcpSrc(u16),
    /// TCP destination port.
    TcpDst(u16),
    /// UDP source port.
    UdpSrc(u16),
    /// UDP destination port.
    UdpDst(u16),
    /// A register, `metadata`, `ct_mark` or `ct_label` (`set_field:V->reg0`), whole field.
    Nx(NxField, u128),
}

impl SetField {
    /// Identifies the field (the action set keeps one set-field per field).
    pub fn kind(&self) -> u8 {
        match self {
            SetField::EthSrc(_) => 0,
            SetField::EthDst(_) => 1,
            SetField::VlanVid(_) => 2,
            SetField::VlanPcp(_) => 3,
            SetField::Ipv4Src(_) => 4,
            SetField::Ipv4Dst(_) => 5,
            SetField::IpDscp(_) => 6,
            SetField::TcpSrc(_) => 7,
            SetField::TcpDst(_) => 8,
            SetField::UdpSrc(_) => 9,
            SetField::UdpDst(_) => 10,
            SetField::Nx(..) => 11,
        }
    }
}

/// An OpenFlow action (standard, or a Nicira extension).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OfAction {
    /// Output to a port (a number or one of [`ofpp`]); `max_len` matters for CONTROLLER.
    Output {
        /// Port.
        port: OfPort,
        /// Bytes to send to the controller.
        max_len: u16,
    },
    /// Push an 802.1Q tag with this TPID (only 0x8100 is executed).
    PushVlan(u16),
    /// Pop the outer VLAN tag.
    PopVlan,
    /// Set a field.
    SetField(SetField),
    /// Process the packet through a group.
    Group(u32),
    /// `ct(...)`: send the packet through connection tracking (executed by task N's
    /// datapath; until then refused at FLOW_MOD time).
    Ct(CtAction),
    /// `ct_clear`: forget the packet's connection-tracking state.
    CtClear,
    /// `resubmit(PORT,TABLE)`: look the packet up again in `table` (None: the current
    /// table) as if it came in on `port` (None: its ingress port), run that rule, come back.
    Resubmit {
        /// Ingress port for the lookup (None: unchanged).
        port: Option<OfPort>,
        /// Table (None: the current one).
        table: Option<u8>,
    },
    /// `load:VALUE->DST[OFS..OFS+NBITS-1]` (NXAST_REG_LOAD).
    RegLoad {
        /// Destination field.
        dst: NxField,
        /// First bit.
        ofs: u8,
        /// Number of bits.
        nbits: u8,
        /// Value (right-aligned, `nbits` wide).
        value: u128,
    },
    /// `move:SRC[..]->DST[..]` (NXAST_REG_MOVE).
    RegMove {
        /// Source field.
        src: NxField,
        /// First source bit.
        src_ofs: u8,
        /// Destination field.
        dst: NxField,
        /// First destination bit.
        dst_ofs: u8,
        /// Bits copied.
        nbits: u8,
    },
    /// `dec_ttl`: decrement the IPv4 TTL / IPv6 hop limit; at 0 or 1 the packet goes to the
    /// controller (reason invalid_ttl) and the rule's remaining actions are skipped.
    DecTtl,
    /// `note:HEX`: kept with the rule, no effect.
    Note(Vec<u8>),
}

impl OfAction {
    /// `output:port`.
    pub fn output(port: OfPort) -> OfAction {
        OfAction::Output {
            port,
            max_len: CONTROLLER_MAX_LEN_NO_BUFFER,
        }
    }
}

/// An OpenFlow 1.3 instruction.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Instruction {
    /// Run these actions now.
    ApplyActions(Vec<OfAction>),
    /// Empty the action set.
    ClearActions,
    /// Merge these actions into the action set.
    WriteActions(Vec<OfAction>),
    /// Continue in a later table.
    GotoTable(u8),
    /// Run the packet through meter N first (see [`crate::meter`]).
    Meter(u32),
}

impl Instruction {
    /// Execution order of OF1.3 (meter, apply, clear, write, goto).
    pub fn order(&self) -> u8 {
        match self {
            Instruction::Meter(_) => 0,
            Instruction::ApplyActions(_) => 1,
            Instruction::ClearActions => 2,
            Instruction::WriteActions(_) => 3,
            Instruction::GotoTable(_) => 4,
        }
    }

    /// The actions the instruction carries (none for clear/goto).
    pub fn actions(&self) -> &[OfAction] {
        match self {
            Instruction::ApplyActions(a) | Instruction::WriteActions(a) => a,
            _ => &[],
        }
    }
}

/// `ofp_flow_mod_command`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlowModCommand {
    /// OFPFC_ADD.
    Add,
    /// OFPFC_MODIFY (non-strict).
    Modify,
    /// OFPFC_MODIFY_STRICT.
    ModifyStrict,
    /// OFPFC_DELETE (non-strict).
    Delete,
    /// OFPFC_DELETE_STRICT.
    DeleteStrict,
}

/// A flow-table modification, as OpenFlow 1.3 expresses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowMod {
    /// What to do.
    pub command: FlowModCommand,
    /// Table (for delete, [`TABLE_ALL`] means every table).
    pub table_id: u8,
    /// Priority (add, strict commands).
    pub priority: u16,
    /// Cookie of a new rule; for modify/delete, a filter together with `cookie_mask`.
    pub cookie: u64,
    /// Bits of `cookie` that modify/delete filter on (0 = no filter).
    pub cookie_mask: u64,
    /// Seconds without traffic before removal (0 = never).
    pub idle_timeout: u16,
    /// Seconds after creation before removal (0 = never).
    pub hard_timeout: u16,
    /// [`flags`].
    pub flags: u16,
    /// Delete filter: only rules that output to this port ([`ofpp::ANY`] = no filter).
    pub out_port: OfPort,
    /// Delete/stats filter: only rules that use this group ([`ofpp::ANY`] = no filter).
    pub out_group: u32,
    /// The match.
    pub match_: Match,
    /// Instructions (add/modify).
    pub instructions: Vec<Instruction>,
}

impl FlowMod {
    /// An `ADD` with default fields (table 0, default priority, no timeouts).
    pub fn add(match_: Match, instructions: Vec<Instruction>) -> FlowMod {
        FlowMod {
            command: FlowModCommand::Add,
            table_id: 0,
            priority: DEFAULT_PRIORITY,
            cookie: 0,
            cookie_mask: 0,
            idle_timeout: 0,
            hard_timeout: 0,
            flags: 0,
            out_port: ofpp::ANY,
            out_group: ofpp::ANY,
            match_,
            instructions,
        }
    }

    /// A non-strict `DELETE` over every table.
    pub fn delete(match_: Match) -> FlowMod {
        FlowMod {
            command: FlowModCommand::Delete,
            table_id: TABLE_ALL,
            ..FlowMod::add(match_, Vec::new())
        }
    }
}

/// Why a rule left its table (`ofp_flow_removed_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RemovedReason {
    /// Idle timeout.
    IdleTimeout = 0,
    /// Hard timeout.
    HardTimeout = 1,
    /// Deleted by a flow-mod.
    Delete = 2,
}

/// A removed rule, for FLOW_REMOVED messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemovedFlow {
    /// Bridge the rule was on.
    pub bridge: String,
    /// Why it was removed.
    pub reason: RemovedReason,
    /// Table.
    pub table_id: u8,
    /// Priority.
    pub priority: u16,
    /// Cookie.
    pub cookie: u64,
    /// Match.
    pub match_: Match,
    /// Idle timeout (s).
    pub idle_timeout: u16,
    /// Hard timeout (s).
    pub hard_timeout: u16,
    /// Flags (check [`flags::SEND_FLOW_REM`] before sending FLOW_REMOVED).
    pub flags: u16,
    /// How long the rule lived.
    pub duration: Duration,
    /// Packets counted.
    pub packet_count: u64,
    /// Bytes counted.
    pub byte_count: u64,
}

/// Packet-in reason (`ofp_packet_in_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketInReason {
    /// A table-miss rule sent it.
    NoMatch = 0,
    /// An output:CONTROLLER action sent it.
    Action = 1,
    /// `dec_ttl` met a TTL of 0 or 1 (`OFPR_INVALID_TTL`).
    InvalidTtl = 2,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oxm_helpers_map_onto_the_key() {
        let mut m = Match::ANY;
        m.set_vlan_vid(VLAN_PRESENT | 10, 0x1fff).set_vlan_pcp(5);
        assert_eq!(m.get(Field::VlanTci), Some((0xa000 | 0x1000 | 10, 0xffff)));
        let mut none = Match::ANY;
        none.set_vlan_vid(0, 0x1fff);
        let mut untagged = FlowKey::ZERO;
        assert!(none.matches(&untagged));
        untagged.set(Field::VlanTci, 0x1000 | 3);
        assert!(!none.matches(&untagged));
        m.set_ip_dscp(46).set_ip_ecn(1);
        assert_eq!(m.get(Field::IpTos), Some((46 << 2 | 1, 0xff)));
        m.set_ipv6_src(0x2001_0db8 << 96, !0u128 << 96);
        assert_eq!(
            m.get(Field::Ipv6SrcHi),
            Some((0x2001_0db8 << 32, 0xffff_ffff << 32))
        );
        assert_eq!(m.get(Field::Ipv6SrcLo), None);
    }

    #[test]
    fn covers_and_overlaps() {
        let mut tcp = Match::ANY;
        tcp.set(Field::EthType, 0x0800).set(Field::IpProto, 6);
        let mut web = tcp;
        web.set(Field::TpDst, 80);
        assert!(tcp.covers(&web) && !web.covers(&tcp));
        assert!(Match::ANY.covers(&web));
        let mut udp = Match::ANY;
        udp.set(Field::EthType, 0x0800).set(Field::IpProto, 17);
        assert!(!udp.overlaps(&web) && tcp.overlaps(&web));
    }
}
