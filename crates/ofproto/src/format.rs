//! Formats rules in the `ovs-ofctl dump-flows` style:
//! `cookie=0x5, duration=1.234s, table=0, n_packets=3, n_bytes=180, idle_timeout=10,
//! priority=100,tcp,in_port=p1,nw_src=10.0.0.0/24,tp_dst=80 actions=output:2`.
//! The output parses back with [`crate::parse::parse_flow`].
//!
//! Owns: [`FlowStats`] (a rule's snapshot) and pure formatting functions. Threads: the control
//! thread; snapshots are taken under the table read lock and formatted after it is released.

use crate::classifier::Rule;
use crate::types::{
    ethertype, flags, ipproto, ofpp, CtAction, CtZone, Instruction, Match, NatKind, NatSpec,
    NxField, OfAction, OfPort, SetField, SubField, DEFAULT_PRIORITY, VLAN_PRESENT,
};
use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};
use wire::{Field, FlowKey};

/// A rule as `dump-flows` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowStats {
    /// Table.
    pub table_id: u8,
    /// Priority.
    pub priority: u16,
    /// Cookie.
    pub cookie: u64,
    /// Age.
    pub duration: Duration,
    /// Packets counted.
    pub packet_count: u64,
    /// Bytes counted.
    pub byte_count: u64,
    /// Idle timeout (s).
    pub idle_timeout: u16,
    /// Hard timeout (s).
    pub hard_timeout: u16,
    /// Flags.
    pub flags: u16,
    /// Match (in_port in OpenFlow numbering).
    pub match_: Match,
    /// Instructions.
    pub instructions: Vec<Instruction>,
}

impl FlowStats {
    /// Snapshot of a rule at `now`.
    pub fn of_rule(r: &Rule, now: Instant) -> FlowStats {
        FlowStats {
            table_id: r.table_id,
            priority: r.priority,
            cookie: r.cookie,
            duration: r.duration(now),
            packet_count: r.packet_count(),
            byte_count: r.byte_count(),
            idle_timeout: r.idle_timeout,
            hard_timeout: r.hard_timeout,
            flags: r.flags,
            match_: r.match_,
            instructions: r.instructions.clone(),
        }
    }

    /// The `dump-flows` line; `name_of` names ports in the match.
    pub fn to_ofctl(&self, name_of: &dyn Fn(OfPort) -> Option<String>) -> String {
        let mut s = format!(
            "cookie={:#x}, duration={:.3}s, table={}, n_packets={}, n_bytes={}, ",
            self.cookie,
            self.duration.as_secs_f64(),
            self.table_id,
            self.packet_count,
            self.byte_count
        );
        if self.idle_timeout != 0 {
            let _ = write!(s, "idle_timeout={}, ", self.idle_timeout);
        }
        if self.hard_timeout != 0 {
            let _ = write!(s, "hard_timeout={}, ", self.hard_timeout);
        }
        for (bit, name) in [
            (flags::SEND_FLOW_REM, "send_flow_rem"),
            (flags::CHECK_OVERLAP, "check_overlap"),
            (flags::RESET_COUNTS, "reset_counts"),
            (flags::NO_PKT_COUNTS, "no_packet_counts"),
            (flags::NO_BYT_COUNTS, "no_byte_counts"),
        ] {
            if self.flags & bit != 0 {
                let _ = write!(s, "{name} ");
            }
        }
        let m = format_match(&self.match_, self.priority, name_of);
        if !m.is_empty() {
            s.push_str(&m);
            s.push(' ');
        }
        s.push_str("actions=");
        s.push_str(&format_instructions(&self.instructions));
        s
    }
}

fn ipv4(v: u64) -> Ipv4Addr {
    Ipv4Addr::from(v as u32)
}

fn prefix_len(mask: u128, bits: u32) -> Option<u32> {
    let ones = mask.count_ones();
    let expect = if ones == 0 {
        0
    } else {
        (!0u128 << (128 - ones)) >> (128 - bits)
    };
    (mask == expect).then_some(ones)
}

/// `name=ADDR[/LEN|/MASK]` for an IPv6 field held in key words `hi` and `lo`, if matched.
fn push_ipv6(out: &mut Vec<String>, m: &Match, hi: Field, lo: Field, name: &str) {
    let v = u128::from(m.key.get(hi)) << 64 | u128::from(m.key.get(lo));
    let mask = u128::from(m.mask.get(hi)) << 64 | u128::from(m.mask.get(lo));
    if mask == 0 {
        return;
    }
    let a = Ipv6Addr::from(v);
    out.push(match prefix_len(mask, 128) {
        Some(128) => format!("{name}={a}"),
        Some(n) => format!("{name}={a}/{n}"),
        None => format!("{name}={a}/{}", Ipv6Addr::from(mask)),
    });
}

fn fmt_ipv4(v: u64, m: u64) -> String {
    match prefix_len(u128::from(m), 32) {
        Some(32) => ipv4(v).to_string(),
        Some(n) => format!("{}/{n}", ipv4(v)),
        None => format!("{}/{}", ipv4(v), ipv4(m)),
    }
}

fn fmt_mac(v: u64) -> String {
    let b = FlowKey::u64_to_mac(v);
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5]
    )
}

/// `MAC` or `MAC/MASK` (the mask only when it is not `f`'s full mask).
fn fmt_mac_masked(f: Field, v: u64, mask: u64) -> String {
    if mask == f.full() {
        fmt_mac(v)
    } else {
        format!("{}/{}", fmt_mac(v), fmt_mac(mask))
    }
}

fn fmt_num(v: u64, m: u64, full: u64) -> String {
    if m == full {
        v.to_string()
    } else {
        format!("{v:#x}/{m:#x}")
    }
}

/// `0` or `0x..` as ovs-ofctl prints register values.
fn fmt_hex(v: u128) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v:#x}")
    }
}

/// `VALUE` or `VALUE/MASK` (hex) as ovs-ofctl prints register matches.
fn fmt_hex_masked(v: u128, m: u128, full: u128) -> String {
    if m == full {
        fmt_hex(v)
    } else {
        format!("{}/{}", fmt_hex(v), fmt_hex(m))
    }
}

fn fmt_ip(a: std::net::IpAddr) -> String {
    match a {
        std::net::IpAddr::V4(a) => a.to_string(),
        std::net::IpAddr::V6(a) => format!("[{a}]"),
    }
}

/// `nat`, `nat(src)`, `nat(dst=A-B:P-Q,persistent,hash,random)`.
pub fn format_nat(n: &NatSpec) -> String {
    let Some(kind) = n.kind else {
        return "nat".into();
    };
    let mut s = String::from(match kind {
        NatKind::Src => "nat(src",
        NatKind::Dst => "nat(dst",
    });
    if let Some(a) = n.addr_min {
        let _ = write!(s, "={}", fmt_ip(a));
        if let Some(b) = n.addr_max {
            let _ = write!(s, "-{}", fmt_ip(b));
        }
    }
    if let Some(p) = n.port_min {
        if n.addr_min.is_none() {
            s.push('=');
        }
        let _ = write!(s, ":{p}");
        if let Some(q) = n.port_max {
            let _ = write!(s, "-{q}");
        }
    }
    for (on, name) in [
        (n.persistent, ",persistent"),
        (n.hash, ",hash"),
        (n.random, ",random"),
    ] {
        if on {
            s.push_str(name);
        }
    }
    s.push(')');
    s
}

/// `ct(commit,force,table=N,zone=Z,nat(..),exec(..),alg=..)` in ovs-ofctl's order.
pub fn format_ct(ct: &CtAction) -> String {
    let mut parts: Vec<String> = Vec::new();
    if ct.commit {
        parts.push("commit".into());
    }
    if ct.force {
        parts.push("force".into());
    }
    if let Some(t) = ct.table {
        parts.push(format!("table={t}"));
    }
    match ct.zone {
        CtZone::Imm(0) => {}
        CtZone::Imm(z) => parts.push(format!("zone={z}")),
        CtZone::Field { field, ofs, nbits } => {
            parts.push(format!("zone={}", SubField { field, ofs, nbits }.format()))
        }
    }
    if let Some(n) = &ct.nat {
        parts.push(format_nat(n));
    }
    if !ct.exec.is_empty() {
        parts.push(format!("exec({})", format_list(&ct.exec)));
    }
    match ct.alg {
        None => {}
        Some(21) => parts.push("alg=ftp".into()),
        Some(69) => parts.push("alg=tftp".into()),
        Some(a) => parts.push(format!("alg={a}")),
    }
    format!("ct({})", parts.join(","))
}

fn format_nx_set(f: NxField, v: u128) -> String {
    if matches!(f, NxField::TunSrc | NxField::TunDst) {
        let a = std::net::Ipv4Addr::from(v as u32);
        return format!("set_field:{a}->{}", f.short_name());
    }
    if matches!(f, NxField::TunIpv6Src | NxField::TunIpv6Dst) {
        return format!("set_field:{}->{}", Ipv6Addr::from(v), f.short_name());
    }
    format!("set_field:{}->{}", fmt_hex(v), f.short_name())
}

fn protocol_name(m: &Match) -> Option<&'static str> {
    let et = m.exact(Field::EthType)? as u16;
    let proto = m.exact(Field::IpProto).map(|p| p as u8);
    Some(match (et, proto) {
        (ethertype::IPV4, None) => "ip",
        (ethertype::IPV6, None) => "ipv6",
        (ethertype::ARP, None) => "arp",
        (ethertype::IPV4, Some(ipproto::TCP)) => "tcp",
        (ethertype::IPV4, Some(ipproto::UDP)) => "udp",
        (ethertype::IPV4, Some(ipproto::ICMP)) => "icmp",
        (ethertype::IPV4, Some(132)) => "sctp",
        (ethertype::IPV6, Some(ipproto::TCP)) => "tcp6",
        (ethertype::IPV6, Some(ipproto::UDP)) => "udp6",
        (ethertype::IPV6, Some(ipproto::ICMPV6)) => "icmp6",
        _ => return None,
    })
}

fn fmt_vlan(v: u64, mask: u64, out: &mut Vec<String>) {
    let present = u64::from(VLAN_PRESENT);
    let vid_ok = mask & 0x1fff == 0x1fff && v & present != 0;
    let pcp_ok = mask & 0xf000 == 0xf000 && v & present != 0;
    match mask {
        0xffff if v == 0 => out.push("vlan_tci=0x0000".into()),
        0x1fff if vid_ok => out.push(format!("dl_vlan={}", v & 0xfff)),
        0xf000 if pcp_ok => out.push(format!("dl_vlan_pcp={}", v >> 13)),
        0xffff if vid_ok => {
            out.push(format!("dl_vlan={}", v & 0xfff));
            out.push(format!("dl_vlan_pcp={}", v >> 13));
        }
        _ => out.push(format!("vlan_tci={v:#06x}/{mask:#06x}")),
    }
}

/// `priority=N,proto,field=value,...` (priority omitted when it is the default).
pub fn format_match(
    m: &Match,
    priority: u16,
    name_of: &dyn Fn(OfPort) -> Option<String>,
) -> String {
    let mut out: Vec<String> = Vec::new();
    if priority != DEFAULT_PRIORITY {
        out.push(format!("priority={priority}"));
    }
    // Conntrack fields come first, as ovs-ofctl writes them.
    let ct = crate::ctfields::format_ct_fields(m);
    out.extend(ct.split(',').filter(|s| !s.is_empty()).map(String::from));
    let proto = protocol_name(m);
    if let Some(p) = proto {
        out.push(p.into());
    }
    let is_arp = m.exact(Field::EthType) == Some(ethertype::ARP.into());
    let is_icmp = matches!(m.exact(Field::IpProto), Some(1) | Some(58));
    for i in 0..crate::nx::N_REGS {
        let mask = m.regs_mask.reg[i];
        if mask != 0 {
            let v = m.regs.reg[i];
            out.push(format!(
                "reg{i}={}",
                fmt_hex_masked(v.into(), mask.into(), u32::MAX.into())
            ));
        }
    }
    if m.regs_mask.metadata != 0 {
        out.push(format!(
            "metadata={}",
            fmt_hex_masked(
                m.regs.metadata.into(),
                m.regs_mask.metadata.into(),
                u64::MAX.into()
            )
        ));
    }
    if let Some((v, mask)) = m.get(Field::TunId) {
        out.push(format!(
            "tun_id={}",
            fmt_hex_masked(v.into(), mask.into(), u64::MAX.into())
        ));
    }
    for (f, name) in [(Field::TunSrc, "tun_src"), (Field::TunDst, "tun_dst")] {
        if let Some((v, mask)) = m.get(f) {
            let a = std::net::Ipv4Addr::from(v as u32);
            out.push(if mask == u64::from(u32::MAX) {
                format!("{name}={a}")
            } else {
                format!("{name}={a}/{}", std::net::Ipv4Addr::from(mask as u32))
            });
        }
    }
    for (hi, lo, name) in [
        (Field::TunIpv6SrcHi, Field::TunIpv6SrcLo, "tun_ipv6_src"),
        (Field::TunIpv6DstHi, Field::TunIpv6DstLo, "tun_ipv6_dst"),
    ] {
        push_ipv6(&mut out, m, hi, lo, name);
    }
    // Under the bridge's TLV map (`nx::with_tlv`), as ovs-ofctl writes them.
    for (i, v, mk) in crate::nx::tun_metadata_matches(m) {
        out.push(match mk {
            None => format!("tun_metadata{i}={v:#x}"),
            Some(mk) => format!("tun_metadata{i}={v:#x}/{mk:#x}"),
        });
    }
    if let Some((v, _)) = m.get(Field::InPort) {
        let p = v as OfPort;
        out.push(format!(
            "in_port={}",
            name_of(p).unwrap_or_else(|| p.to_string())
        ));
    }
    if let Some((v, mask)) = m.get(Field::VlanTci) {
        fmt_vlan(v, mask, &mut out);
    }
    for (f, name) in [(Field::EthSrc, "dl_src"), (Field::EthDst, "dl_dst")] {
        if let Some((v, mask)) = m.get(f) {
            out.push(format!("{name}={}", fmt_mac_masked(f, v, mask)));
        }
    }
    if let (None, Some((v, _))) = (proto, m.get(Field::EthType)) {
        out.push(format!("dl_type={v:#06x}"));
    }
    format_l3(m, is_arp, proto.is_some(), &mut out);
    format_l4(m, is_arp, is_icmp, &mut out);
    out.join(",")
}

fn format_l3(m: &Match, is_arp: bool, has_proto: bool, out: &mut Vec<String>) {
    let (src, dst) = if is_arp {
        ("arp_spa", "arp_tpa")
    } else {
        ("nw_src", "nw_dst")
    };
    for (f, name) in [(Field::Ipv4Src, src), (Field::Ipv4Dst, dst)] {
        if let Some((v, mask)) = m.get(f) {
            out.push(format!("{name}={}", fmt_ipv4(v, mask)));
        }
    }
    if !is_arp {
        for (hi, lo, name) in [
            (Field::Ipv6SrcHi, Field::Ipv6SrcLo, "ipv6_src"),
            (Field::Ipv6DstHi, Field::Ipv6DstLo, "ipv6_dst"),
        ] {
            push_ipv6(out, m, hi, lo, name);
        }
    }
    if let (false, Some((v, _))) = (has_proto, m.get(Field::IpProto)) {
        out.push(format!("nw_proto={v}"));
    }
    if let Some((v, mask)) = m.get(Field::IpTos) {
        if mask & 0xfc != 0 {
            out.push(format!("nw_tos={}", v & 0xfc));
        }
        if mask & 3 != 0 {
            out.push(format!("nw_ecn={}", v & 3));
        }
    }
    if let Some((v, _)) = m.get(Field::IpTtl) {
        out.push(format!("nw_ttl={v}"));
    }
}

fn format_l4(m: &Match, is_arp: bool, is_icmp: bool, out: &mut Vec<String>) {
    let (s, d) = if is_icmp {
        ("icmp_type", "icmp_code")
    } else {
        ("tp_src", "tp_dst")
    };
    for (f, name) in [
        (Field::TpSrc, s),
        (Field::TpDst, d),
        (Field::TcpFlags, "tcp_flags"),
    ] {
        if let Some((v, mask)) = m.get(f) {
            let full = if is_icmp && f != Field::TcpFlags {
                0xff
            } else {
                f.full()
            };
            out.push(format!("{name}={}", fmt_num(v, mask, full)));
        }
    }
    if let Some((v, mask)) = m.get(Field::ArpOp) {
        out.push(format!("arp_op={}", fmt_num(v, mask, 0xffff)));
    }
    if is_arp {
        for (f, name) in [(Field::ArpSha, "arp_sha"), (Field::ArpTha, "arp_tha")] {
            if let Some((v, mask)) = m.get(f) {
                out.push(format!("{name}={}", fmt_mac_masked(f, v, mask)));
            }
        }
    }
}

fn format_resubmit_port(p: OfPort) -> String {
    match p {
        ofpp::LOCAL => "LOCAL".into(),
        ofpp::CONTROLLER => "CONTROLLER".into(),
        p => p.to_string(),
    }
}

fn format_port(p: OfPort) -> String {
    match p {
        ofpp::IN_PORT => "IN_PORT".into(),
        ofpp::NORMAL => "NORMAL".into(),
        ofpp::FLOOD => "FLOOD".into(),
        ofpp::ALL => "ALL".into(),
        ofpp::LOCAL => "LOCAL".into(),
        ofpp::TABLE => "TABLE".into(),
        p => format!("output:{p}"),
    }
}

/// One action in `ovs-ofctl` syntax.
pub fn format_action(a: &OfAction) -> String {
    match *a {
        OfAction::Ct(ref ct) => format_ct(ct),
        OfAction::CtClear => "ct_clear".into(),
        OfAction::Resubmit { port, table } => match (port, table) {
            (Some(p), None) => format!("resubmit:{}", format_resubmit_port(p)),
            (p, t) => format!(
                "resubmit({},{})",
                p.map(format_resubmit_port).unwrap_or_default(),
                t.map(|t| t.to_string()).unwrap_or_default()
            ),
        },
        OfAction::RegLoad {
            dst,
            ofs,
            nbits,
            value,
        } => format!(
            "load:{}->{}",
            fmt_hex(value),
            SubField {
                field: dst,
                ofs,
                nbits
            }
            .format()
        ),
        OfAction::RegMove {
            src,
            src_ofs,
            dst,
            dst_ofs,
            nbits,
        } => format!(
            "move:{}->{}",
            SubField {
                field: src,
                ofs: src_ofs,
                nbits
            }
            .format(),
            SubField {
                field: dst,
                ofs: dst_ofs,
                nbits
            }
            .format()
        ),
        OfAction::DecTtl => "dec_ttl".into(),
        OfAction::Note(ref b) => format!(
            "note:{}",
            b.iter()
                .map(|x| format!("{x:02x}"))
                .collect::<Vec<_>>()
                .join(".")
        ),
        OfAction::Output {
            port: ofpp::CONTROLLER,
            max_len,
        } => format!("CONTROLLER:{max_len}"),
        OfAction::Output { port, .. } => format_port(port),
        OfAction::PushVlan(t) => format!("push_vlan:{t:#06x}"),
        OfAction::PopVlan => "pop_vlan".into(),
        OfAction::Group(g) => format!("group:{g}"),
        OfAction::SetField(sf) => match sf {
            SetField::EthSrc(m) => format!("mod_dl_src:{}", fmt_mac(FlowKey::mac_to_u64(m))),
            SetField::EthDst(m) => format!("mod_dl_dst:{}", fmt_mac(FlowKey::mac_to_u64(m))),
            SetField::VlanVid(v) => format!("mod_vlan_vid:{v}"),
            SetField::VlanPcp(p) => format!("mod_vlan_pcp:{p}"),
            SetField::Ipv4Src(ip) => format!("mod_nw_src:{}", Ipv4Addr::from(ip)),
            SetField::Ipv4Dst(ip) => format!("mod_nw_dst:{}", Ipv4Addr::from(ip)),
            SetField::IpDscp(d) => format!("mod_nw_tos:{}", u16::from(d) << 2),
            SetField::TcpSrc(p) => format!("set_field:{p}->tcp_src"),
            SetField::TcpDst(p) => format!("set_field:{p}->tcp_dst"),
            SetField::UdpSrc(p) => format!("set_field:{p}->udp_src"),
            SetField::UdpDst(p) => format!("set_field:{p}->udp_dst"),
            SetField::Nx(f, v) => format_nx_set(f, v),
        },
    }
}

fn format_list(acts: &[OfAction]) -> String {
    acts.iter().map(format_action).collect::<Vec<_>>().join(",")
}

/// The `actions=` text of a rule's instructions (`drop` if there is nothing to do).
pub fn format_instructions(insts: &[Instruction]) -> String {
    let parts: Vec<String> = insts
        .iter()
        .filter_map(|i| match i {
            Instruction::ApplyActions(a) if a.is_empty() => None,
            Instruction::ApplyActions(a) => Some(format_list(a)),
            Instruction::ClearActions => Some("clear_actions".into()),
            Instruction::WriteActions(a) => Some(format!("write_actions({})", format_list(a))),
            Instruction::GotoTable(t) => Some(format!("goto_table:{t}")),
            Instruction::Meter(m) => Some(format!("meter:{m}")),
        })
        .collect();
    if parts.is_empty() {
        "drop".into()
    } else {
        parts.join(",")
    }
}
