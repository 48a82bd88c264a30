//! Nicira extension vocabulary of the pipeline, independent of the wire codec: the fields
//! `move`/`load`/`set_field` name ([`NxField`], [`PktField`]), the register file
//! ([`Regs`], pipeline state that is not part of the datapath key), and the `ct()` / `nat()`
//! action arguments ([`CtAction`], [`CtZone`], [`NatSpec`]).
//!
//! Owns: plain data and pure helpers (widths, names, bit access). Threads: the control thread
//! builds these (parser, codec); PMD threads read them during translation.

use std::net::IpAddr;
use wire::{Field, FlowKey};

/// Number of 32-bit registers (`reg0`..`reg15`).
pub const N_REGS: usize = 16;

/// The register file of one translation: `reg0`..`reg15` (32 bits each; `xregN` is `reg2N`
/// (high half) and `reg2N+1`, `xxregN` is `reg4N`..`reg4N+3`, most significant first, as in
/// OVS) and `metadata`. Every packet starts with all zeros. A plain value: copying it is how
/// the state would be frozen for recirculation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Regs {
    /// `reg0`..`reg15`.
    pub reg: [u32; N_REGS],
    /// OpenFlow `metadata`.
    pub metadata: u64,
}

/// Cheap for the common all-zero file (a rule or subtable without register matches): one
/// word instead of seventeen. Consistent with `Eq`: equal values hash equally.
impl std::hash::Hash for Regs {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        if self.is_zero() {
            state.write_u64(0);
        } else {
            for r in self.reg {
                state.write_u32(r);
            }
            state.write_u64(self.metadata);
        }
    }
}

impl Regs {
    /// All zeros.
    pub const ZERO: Regs = Regs {
        reg: [0; N_REGS],
        metadata: 0,
    };

    /// All ones (as a mask: every register bit).
    pub const ALL: Regs = Regs {
        reg: [u32::MAX; N_REGS],
        metadata: u64::MAX,
    };

    /// `self & mask`, field by field.
    #[inline]
    pub fn masked(&self, mask: &Regs) -> Regs {
        let mut r = *self;
        for (v, m) in r.reg.iter_mut().zip(mask.reg) {
            *v &= m;
        }
        r.metadata &= mask.metadata;
        r
    }

    /// True if every register and the metadata are zero.
    pub fn is_zero(&self) -> bool {
        *self == Regs::ZERO
    }

    /// Bitwise OR.
    pub fn union(&self, o: &Regs) -> Regs {
        let mut r = *self;
        for (v, m) in r.reg.iter_mut().zip(o.reg) {
            *v |= m;
        }
        r.metadata |= o.metadata;
        r
    }
}

/// A header field that `move`/`load` can read or write, named as OVS names it. Several map
/// onto one flow-key field (TCP and UDP ports are both `TpSrc`/`TpDst`); keeping the name
/// lets `dump-flows` print back what was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum PktField {
    InPort,
    EthSrc,
    EthDst,
    EthType,
    VlanTci,
    IpTos,
    IpProto,
    IpTtl,
    Ipv4Src,
    Ipv4Dst,
    TcpSrc,
    TcpDst,
    UdpSrc,
    UdpDst,
    IcmpType,
    IcmpCode,
    ArpOp,
    ArpSpa,
    ArpTpa,
    ArpSha,
    ArpTha,
    Ipv6Src,
    Ipv6Dst,
}

impl PktField {
    /// Every packet field.
    pub const ALL: [PktField; 23] = [
        PktField::InPort,
        PktField::EthSrc,
        PktField::EthDst,
        PktField::EthType,
        PktField::VlanTci,
        PktField::IpTos,
        PktField::IpProto,
        PktField::IpTtl,
        PktField::Ipv4Src,
        PktField::Ipv4Dst,
        PktField::TcpSrc,
        PktField::TcpDst,
        PktField::UdpSrc,
        PktField::UdpDst,
        PktField::IcmpType,
        PktField::IcmpCode,
        PktField::ArpOp,
        PktField::ArpSpa,
        PktField::ArpTpa,
        PktField::ArpSha,
        PktField::ArpTha,
        PktField::Ipv6Src,
        PktField::Ipv6Dst,
    ];

    /// (NXM class, field number, width in bits, NXM name, OXM/modern name).
    pub const fn info(self) -> (u16, u8, u32, &'static str, &'static str) {
        use PktField::*;
        match self {
            InPort => (0, 0, 16, "NXM_OF_IN_PORT", "in_port"),
            EthDst => (0, 1, 48, "NXM_OF_ETH_DST", "eth_dst"),
            EthSrc => (0, 2, 48, "NXM_OF_ETH_SRC", "eth_src"),
            EthType => (0, 3, 16, "NXM_OF_ETH_TYPE", "eth_type"),
            VlanTci => (0, 4, 16, "NXM_OF_VLAN_TCI", "vlan_tci"),
            IpTos => (0, 5, 8, "NXM_OF_IP_TOS", "nw_tos"),
            IpProto => (0, 6, 8, "NXM_OF_IP_PROTO", "ip_proto"),
            Ipv4Src => (0, 7, 32, "NXM_OF_IP_SRC", "ip_src"),
            Ipv4Dst => (0, 8, 32, "NXM_OF_IP_DST", "ip_dst"),
            TcpSrc => (0, 9, 16, "NXM_OF_TCP_SRC", "tcp_src"),
            TcpDst => (0, 10, 16, "NXM_OF_TCP_DST", "tcp_dst"),
            UdpSrc => (0, 11, 16, "NXM_OF_UDP_SRC", "udp_src"),
            UdpDst => (0, 12, 16, "NXM_OF_UDP_DST", "udp_dst"),
            IcmpType => (0, 13, 8, "NXM_OF_ICMP_TYPE", "icmp_type"),
            IcmpCode => (0, 14, 8, "NXM_OF_ICMP_CODE", "icmp_code"),
            ArpOp => (0, 15, 16, "NXM_OF_ARP_OP", "arp_op"),
            ArpSpa => (0, 16, 32, "NXM_OF_ARP_SPA", "arp_spa"),
            ArpTpa => (0, 17, 32, "NXM_OF_ARP_TPA", "arp_tpa"),
            ArpSha => (1, 17, 48, "NXM_NX_ARP_SHA", "arp_sha"),
            ArpTha => (1, 18, 48, "NXM_NX_ARP_THA", "arp_tha"),
            Ipv6Src => (1, 19, 128, "NXM_NX_IPV6_SRC", "ipv6_src"),
            Ipv6Dst => (1, 20, 128, "NXM_NX_IPV6_DST", "ipv6_dst"),
            IpTtl => (1, 29, 8, "NXM_NX_IP_TTL", "nw_ttl"),
        }
    }

    /// The flow-key fields holding the value, most significant first.
    pub fn key_fields(self) -> &'static [Field] {
        use PktField::*;
        match self {
            InPort => &[Field::InPort],
            EthSrc => &[Field::EthSrc],
            EthDst => &[Field::EthDst],
            EthType => &[Field::EthType],
            VlanTci => &[Field::VlanTci],
            IpTos => &[Field::IpTos],
            IpProto => &[Field::IpProto],
            IpTtl => &[Field::IpTtl],
            Ipv4Src | ArpSpa => &[Field::Ipv4Src],
            Ipv4Dst | ArpTpa => &[Field::Ipv4Dst],
            TcpSrc | UdpSrc | IcmpType => &[Field::TpSrc],
            TcpDst | UdpDst | IcmpCode => &[Field::TpDst],
            ArpOp => &[Field::ArpOp],
            ArpSha => &[Field::ArpSha],
            ArpTha => &[Field::ArpTha],
            Ipv6Src => &[Field::Ipv6SrcHi, Field::Ipv6SrcLo],
            Ipv6Dst => &[Field::Ipv6DstHi, Field::Ipv6DstLo],
        }
    }

    /// Reads the field from a key (as a right-aligned value).
    pub fn get(self, key: &FlowKey) -> u128 {
        let width = self.info().2;
        let v = self.key_fields().iter().fold(0u128, |acc, f| {
            acc << f.layout().2 | u128::from(key.get(*f))
        });
        v & ones(width)
    }

    /// Marks the bits `mask` (right-aligned) of the field as consulted in `wc`.
    pub fn unwildcard(self, wc: &mut FlowKey, mask: u128) {
        let mut rest = mask;
        for f in self.key_fields().iter().rev() {
            let w = f.layout().2;
            let part = (rest & ones(w)) as u64;
            wc.set(*f, wc.get(*f) | part);
            rest = rest.checked_shr(w).unwrap_or(0);
        }
    }

    /// `(eth_types, ip_proto)` the field needs in the match (none: any packet).
    pub fn prerequisite(self) -> (&'static [u16], Option<u8>) {
        use PktField::*;
        const IP: &[u16] = &[0x0800, 0x86dd];
        match self {
            IpTos | IpProto | IpTtl => (IP, None),
            Ipv4Src | Ipv4Dst => (&[0x0800], None),
            TcpSrc | TcpDst => (IP, Some(6)),
            UdpSrc | UdpDst => (IP, Some(17)),
            IcmpType | IcmpCode => (&[0x0800], Some(1)),
            ArpOp | ArpSpa | ArpTpa | ArpSha | ArpTha => (&[0x0806], None),
            Ipv6Src | Ipv6Dst => (&[0x86dd], None),
            InPort | EthSrc | EthDst | EthType | VlanTci => (&[], None),
        }
    }
}

/// All-ones of `bits` bits (0..=128).
pub const fn ones(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

thread_local! {
    /// The TLV map of the bridge whose flows this thread is parsing, converting or
    /// formatting (see [`with_tlv`]).
    static TLV: std::cell::RefCell<wire::tunmd::TlvTable> =
        std::cell::RefCell::new(wire::tunmd::TlvTable::new());
}

/// Runs `f` with `t` as the TLV map that `tun_metadataN` names resolve against (field
/// parsing, OpenFlow conversion, formatting): whoever handles one bridge's flows wraps that
/// work in it (the work is synchronous on one thread, so the map is the bridge's for exactly
/// that work). Outside it, no `tun_metadataN` is mapped.
pub fn with_tlv<R>(t: &wire::tunmd::TlvTable, f: impl FnOnce() -> R) -> R {
    let old = TLV.with(|c| c.replace(t.clone()));
    let r = f();
    TLV.with(|c| *c.borrow_mut() = old);
    r
}

/// `tun_metadata<idx>` where the current map (see [`with_tlv`]) places it; None if unmapped.
pub fn tun_metadata_field(idx: u8) -> Option<NxField> {
    TLV.with(|c| c.borrow().get(usize::from(idx)))
        .map(|e| NxField::TunMetadata {
            idx,
            off: e.offset,
            len: e.len,
        })
}

/// The `tun_metadataN` fields `m` matches under the current map: (N, value, mask if not
/// all ones), by N.
pub fn tun_metadata_matches(m: &crate::Match) -> Vec<(u8, u128, Option<u128>)> {
    TLV.with(|c| {
        c.borrow()
            .iter()
            .filter_map(|(i, e)| {
                let (o, l) = (usize::from(e.offset), usize::from(e.len));
                let mk = wire::tunmd::get(&m.mask, o, l);
                (mk != 0).then(|| {
                    let v = wire::tunmd::get(&m.key, o, l) & mk;
                    (i as u8, v, (mk != ones(8 * l as u32)).then_some(mk))
                })
            })
            .collect()
    })
}

/// A field a Nicira `move`, `load` or `set_field` can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NxField {
    /// `reg0`..`reg15` (32 bits).
    Reg(u8),
    /// `xreg0`..`xreg7` (64 bits: `reg2N` high, `reg2N+1` low).
    XReg(u8),
    /// `xxreg0`..`xxreg3` (128 bits: `reg4N`..`reg4N+3`).
    XXReg(u8),
    /// OpenFlow `metadata` (64 bits).
    Metadata,
    /// `ct_mark` (32 bits): only inside `ct(exec(...))`.
    CtMark,
    /// `ct_label` (128 bits): only inside `ct(exec(...))`.
    CtLabel,
    /// `tun_id` (64 bits): the tunnel id (VNI) of a decapsulated packet, or the one a
    /// flow-based tunnel port encapsulates with.
    TunId,
    /// `tun_src` (32 bits, IPv4): the outer source address.
    TunSrc,
    /// `tun_dst` (32 bits, IPv4): the outer destination (where a `remote_ip=flow` port sends).
    TunDst,
    /// `tun_ipv6_src` (128 bits): the outer IPv6 source (native tunneling).
    TunIpv6Src,
    /// `tun_ipv6_dst` (128 bits): the outer IPv6 destination (where a `remote_ip=flow` port
    /// sends over an IPv6 underlay, native tunneling only).
    TunIpv6Dst,
    /// `tun_metadata<idx>`: a Geneve option's value, `len` bytes at `off` of the key's
    /// option space (`wire::tunmd`), as the bridge's TLV map placed it when the flow was
    /// added (a mapping in use cannot be deleted, so the place stays valid).
    TunMetadata {
        /// N of `tun_metadataN`.
        idx: u8,
        /// Offset in the option space.
        off: u8,
        /// Length in bytes.
        len: u8,
    },
    /// A packet header field.
    Packet(PktField),
}

impl NxField {
    /// Width in bits.
    pub fn width(self) -> u32 {
        match self {
            NxField::Reg(_) | NxField::CtMark | NxField::TunSrc | NxField::TunDst => 32,
            NxField::XReg(_) | NxField::Metadata | NxField::TunId => 64,
            NxField::XXReg(_) | NxField::CtLabel | NxField::TunIpv6Src | NxField::TunIpv6Dst => 128,
            NxField::TunMetadata { len, .. } => u32::from(len) * 8,
            NxField::Packet(p) => p.info().2,
        }
    }

    /// True for fields the register file holds (pipeline state, never in the datapath key).
    pub fn is_register(self) -> bool {
        matches!(
            self,
            NxField::Reg(_) | NxField::XReg(_) | NxField::XXReg(_) | NxField::Metadata
        )
    }

    /// The key fields of a tunnel field (`tun_id`, `tun_src`, `tun_dst`: one;
    /// `tun_ipv6_src`, `tun_ipv6_dst`: high and low words), empty for any other field.
    pub fn tunnel_key_fields(self) -> &'static [wire::Field] {
        use wire::Field as F;
        match self {
            NxField::TunId => &[F::TunId],
            NxField::TunSrc => &[F::TunSrc],
            NxField::TunDst => &[F::TunDst],
            NxField::TunIpv6Src => &[F::TunIpv6SrcHi, F::TunIpv6SrcLo],
            NxField::TunIpv6Dst => &[F::TunIpv6DstHi, F::TunIpv6DstLo],
            _ => &[],
        }
    }

    /// Tunnel metadata: `tun_id`, `tun_src`, `tun_dst`, `tun_ipv6_src`, `tun_ipv6_dst`,
    /// `tun_metadataN` (key fields that rules may read and write).
    pub fn is_tunnel(self) -> bool {
        !self.tunnel_key_fields().is_empty() || matches!(self, NxField::TunMetadata { .. })
    }

    /// Reads a tunnel field from a key (0 for other fields).
    pub fn get_tunnel(self, key: &FlowKey) -> u128 {
        self.tunnel_key_fields().iter().fold(0u128, |acc, f| {
            acc << f.layout().2 | u128::from(key.get(*f))
        })
    }

    /// Writes a tunnel field's bits `mask` (right-aligned) of `value` into `key`. Other
    /// fields: nothing.
    pub fn set_tunnel(self, key: &mut FlowKey, value: u128, mask: u128) {
        let mut shift = 0;
        for f in self.tunnel_key_fields().iter().rev() {
            let w = f.layout().2;
            let (v, m) = ((value >> shift) as u64, (mask >> shift) as u64);
            let old = key.get(*f);
            key.set(*f, (old & !m) | (v & m));
            shift += w;
        }
    }

    /// True if the index is in range (`reg` < 16, `xreg` < 8, `xxreg` < 4).
    pub fn is_valid(self) -> bool {
        match self {
            NxField::Reg(i) => usize::from(i) < N_REGS,
            NxField::XReg(i) => usize::from(i) < N_REGS / 2,
            NxField::XXReg(i) => usize::from(i) < N_REGS / 4,
            _ => true,
        }
    }

    /// The name `dump-flows` uses inside `load:`/`move:` (`NXM_NX_REG0`, `OXM_OF_PKT_REG1`).
    pub fn nxm_name(self) -> String {
        match self {
            NxField::Reg(i) => format!("NXM_NX_REG{i}"),
            NxField::XReg(i) => format!("OXM_OF_PKT_REG{i}"),
            NxField::XXReg(i) => format!("NXM_NX_XXREG{i}"),
            NxField::Metadata => "OXM_OF_METADATA".into(),
            NxField::CtMark => "NXM_NX_CT_MARK".into(),
            NxField::CtLabel => "NXM_NX_CT_LABEL".into(),
            NxField::TunId => "NXM_NX_TUN_ID".into(),
            NxField::TunSrc => "NXM_NX_TUN_IPV4_SRC".into(),
            NxField::TunDst => "NXM_NX_TUN_IPV4_DST".into(),
            NxField::TunIpv6Src => "NXM_NX_TUN_IPV6_SRC".into(),
            NxField::TunIpv6Dst => "NXM_NX_TUN_IPV6_DST".into(),
            NxField::TunMetadata { idx, .. } => format!("NXM_NX_TUN_METADATA{idx}"),
            NxField::Packet(p) => p.info().3.into(),
        }
    }

    /// The name `set_field` uses (`reg0`, `xreg1`, `ct_mark`, `eth_src`).
    pub fn short_name(self) -> String {
        match self {
            NxField::Reg(i) => format!("reg{i}"),
            NxField::XReg(i) => format!("xreg{i}"),
            NxField::XXReg(i) => format!("xxreg{i}"),
            NxField::Metadata => "metadata".into(),
            NxField::CtMark => "ct_mark".into(),
            NxField::CtLabel => "ct_label".into(),
            NxField::TunId => "tun_id".into(),
            NxField::TunSrc => "tun_src".into(),
            NxField::TunDst => "tun_dst".into(),
            NxField::TunIpv6Src => "tun_ipv6_src".into(),
            NxField::TunIpv6Dst => "tun_ipv6_dst".into(),
            NxField::TunMetadata { idx, .. } => format!("tun_metadata{idx}"),
            NxField::Packet(p) => p.info().4.into(),
        }
    }

    /// Parses either name form (case-sensitive for NXM names, as ovs-ofctl).
    pub fn from_name(s: &str) -> Option<NxField> {
        let idx = |p: &str| s.strip_prefix(p).and_then(|n| n.parse::<u8>().ok());
        let f = if let Some(i) = idx("NXM_NX_REG").or_else(|| idx("reg")) {
            NxField::Reg(i)
        } else if let Some(i) = idx("OXM_OF_PKT_REG")
            .or_else(|| idx("NXM_NX_XREG"))
            .or_else(|| idx("xreg"))
        {
            NxField::XReg(i)
        } else if let Some(i) = idx("NXM_NX_XXREG").or_else(|| idx("xxreg")) {
            NxField::XXReg(i)
        } else {
            match s {
                "metadata" | "OXM_OF_METADATA" => NxField::Metadata,
                "ct_mark" | "NXM_NX_CT_MARK" => NxField::CtMark,
                "ct_label" | "NXM_NX_CT_LABEL" => NxField::CtLabel,
                "tun_id" | "tunnel_id" | "NXM_NX_TUN_ID" => NxField::TunId,
                "tun_src" | "NXM_NX_TUN_IPV4_SRC" => NxField::TunSrc,
                "tun_dst" | "NXM_NX_TUN_IPV4_DST" => NxField::TunDst,
                "tun_ipv6_src" | "NXM_NX_TUN_IPV6_SRC" => NxField::TunIpv6Src,
                "tun_ipv6_dst" | "NXM_NX_TUN_IPV6_DST" => NxField::TunIpv6Dst,
                _ if idx("tun_metadata")
                    .or_else(|| idx("NXM_NX_TUN_METADATA"))
                    .is_some() =>
                {
                    let i = idx("tun_metadata").or_else(|| idx("NXM_NX_TUN_METADATA"))?;
                    tun_metadata_field(i)?
                }
                _ => {
                    let alias = match s {
                        "dl_src" => "eth_src",
                        "dl_dst" => "eth_dst",
                        "dl_type" => "eth_type",
                        "nw_src" | "ipv4_src" => "ip_src",
                        "nw_dst" | "ipv4_dst" => "ip_dst",
                        "nw_proto" => "ip_proto",
                        "icmpv4_type" => "icmp_type",
                        "icmpv4_code" => "icmp_code",
                        o => o,
                    };
                    let p = PktField::ALL
                        .into_iter()
                        .find(|p| p.info().3 == s || p.info().4 == alias)?;
                    NxField::Packet(p)
                }
            }
        };
        f.is_valid().then_some(f)
    }

    /// Reads the field from the register file (registers only; 0 for other fields).
    pub fn get_reg(self, r: &Regs) -> u128 {
        match self {
            NxField::Reg(i) => u128::from(r.reg[usize::from(i)]),
            NxField::XReg(i) => {
                let b = usize::from(i) * 2;
                u128::from(r.reg[b]) << 32 | u128::from(r.reg[b + 1])
            }
            NxField::XXReg(i) => {
                let b = usize::from(i) * 4;
                r.reg[b..b + 4]
                    .iter()
                    .fold(0u128, |acc, v| acc << 32 | u128::from(*v))
            }
            NxField::Metadata => u128::from(r.metadata),
            _ => 0,
        }
    }

    /// Writes bits `mask` (right-aligned, within the width) of `value` into the register file.
    pub fn set_reg(self, r: &mut Regs, value: u128, mask: u128) {
        let new = (self.get_reg(r) & !mask) | (value & mask);
        match self {
            NxField::Reg(i) => r.reg[usize::from(i)] = new as u32,
            NxField::XReg(i) => {
                let b = usize::from(i) * 2;
                r.reg[b] = (new >> 32) as u32;
                r.reg[b + 1] = new as u32;
            }
            NxField::XXReg(i) => {
                let b = usize::from(i) * 4;
                for k in 0..4 {
                    r.reg[b + k] = (new >> (96 - 32 * k)) as u32;
                }
            }
            NxField::Metadata => r.metadata = new as u64,
            _ => {}
        }
    }
}

/// A sub-field `FIELD[ofs..ofs+nbits-1]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SubField {
    /// The field.
    pub field: NxField,
    /// First bit.
    pub ofs: u8,
    /// Number of bits (1..=128).
    pub nbits: u8,
}

impl SubField {
    /// The whole field.
    pub fn whole(field: NxField) -> SubField {
        SubField {
            field,
            ofs: 0,
            nbits: field.width() as u8,
        }
    }

    /// True if the bits lie within the field and at least one is named.
    pub fn is_valid(&self) -> bool {
        self.nbits > 0
            && u32::from(self.ofs) + u32::from(self.nbits) <= self.field.width()
            && self.field.is_valid()
    }

    /// The sub-field's bits as a mask over the field.
    pub fn mask(&self) -> u128 {
        ones(u32::from(self.nbits)) << self.ofs
    }

    /// `NAME[]`, `NAME[N]` or `NAME[A..B]` as ovs-ofctl prints it.
    pub fn format(&self) -> String {
        let name = self.field.nxm_name();
        if u32::from(self.nbits) == self.field.width() {
            format!("{name}[]")
        } else if self.nbits == 1 {
            format!("{name}[{}]", self.ofs)
        } else {
            format!(
                "{name}[{}..{}]",
                self.ofs,
                u32::from(self.ofs) + u32::from(self.nbits) - 1
            )
        }
    }
}

/// Where `ct()` takes its zone from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtZone {
    /// A fixed zone (0 when `zone=` is not given).
    Imm(u16),
    /// Bits of a field (`zone=NXM_NX_REG0[0..15]`), at most 16.
    Field {
        /// The field.
        field: NxField,
        /// First bit.
        ofs: u8,
        /// Number of bits.
        nbits: u8,
    },
}

/// Source or destination NAT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NatKind {
    /// `nat(src=...)`.
    Src,
    /// `nat(dst=...)`.
    Dst,
}

/// `nat(...)` arguments. `kind: None` is plain `nat`: un-NAT of a connection already NATed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NatSpec {
    /// `src` or `dst`.
    pub kind: Option<NatKind>,
    /// First address of the range.
    pub addr_min: Option<IpAddr>,
    /// Last address (None: a single address).
    pub addr_max: Option<IpAddr>,
    /// First port.
    pub port_min: Option<u16>,
    /// Last port (None: a single port).
    pub port_max: Option<u16>,
    /// `persistent`.
    pub persistent: bool,
    /// `hash` (exclusive with `random`).
    pub hash: bool,
    /// `random`.
    pub random: bool,
}

/// `ct(...)` arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CtAction {
    /// `commit`.
    pub commit: bool,
    /// `force` (implies commit).
    pub force: bool,
    /// `zone=`.
    pub zone: CtZone,
    /// `table=`: recirculate into this table after tracking (None: continue unchanged).
    pub table: Option<u8>,
    /// `alg=` (ftp = 21, tftp = 69).
    pub alg: Option<u16>,
    /// `exec(...)`: only `RegLoad` and `SetField::Nx` to `ct_mark` / `ct_label`.
    pub exec: Vec<crate::types::OfAction>,
    /// `nat(...)`.
    pub nat: Option<NatSpec>,
}

impl Default for CtZone {
    fn default() -> Self {
        CtZone::Imm(0)
    }
}
