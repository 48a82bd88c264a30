//! `ovs-ofctl` flow syntax (a subset): `add-flow` strings (match, rule settings, `actions=`) and
//! the match-only form `del-flows` / `dump-flows` take.
//!
//! Owns: pure parsing functions, no state. Threads: the control thread. Port names resolve
//! through a caller-supplied function, so parsing happens before any pipeline lock is taken.
//! Every error names the offending token.

use crate::nx::ones;
use crate::types::{
    ethertype, flags, ipproto, ofpp, FlowMod, FlowModCommand, Instruction, Match, NxField,
    OfAction, OfPort, SetField, TABLE_ALL, VLAN_PRESENT,
};
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use wire::{Field, FlowKey};

/// A syntax error: the token and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The offending token.
    pub token: String,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.token, self.msg)
    }
}

impl std::error::Error for ParseError {}

pub(crate) fn err<T>(token: &str, msg: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        token: token.to_string(),
        msg: msg.into(),
    })
}

/// Resolves port names (`p1`) to OpenFlow numbers.
pub type PortResolver<'a> = &'a dyn Fn(&str) -> Option<OfPort>;

/// Parses a number: decimal or `0x` hex.
pub fn parse_u64(tok: &str, s: &str) -> Result<u64, ParseError> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse::<u64>(),
    };
    r.or_else(|_| err(tok, format!("`{s}` is not a number")))
}

/// Parses a number up to 128 bits: decimal or `0x` hex.
pub fn parse_u128(tok: &str, s: &str) -> Result<u128, ParseError> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u128::from_str_radix(h, 16),
        None => s.parse::<u128>(),
    };
    r.or_else(|_| err(tok, format!("`{s}` is not a number")))
}

fn parse_num<T: TryFrom<u64>>(tok: &str, s: &str) -> Result<T, ParseError> {
    let v = parse_u64(tok, s)?;
    T::try_from(v).or_else(|_| err(tok, format!("{v} is out of range")))
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(tok: &str, s: &str) -> Result<[u8; 6], ParseError> {
    let parts: Vec<&str> = s.split(':').collect();
    let mut mac = [0u8; 6];
    if parts.len() != 6 {
        return err(tok, format!("`{s}` is not a MAC address"));
    }
    for (b, p) in mac.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).or_else(|_| err(tok, format!("`{s}` is not a MAC")))?;
    }
    Ok(mac)
}

fn prefix_mask(tok: &str, len: &str, bits: u32) -> Result<u128, ParseError> {
    let n: u32 = parse_num(tok, len)?;
    if n > bits {
        return err(tok, format!("prefix length {n} exceeds {bits}"));
    }
    Ok(if n == 0 {
        0
    } else {
        (!0u128 << (128 - n)) >> (128 - bits)
    })
}

/// Parses `a.b.c.d[/len|/mask]` into (value, mask).
pub fn parse_ipv4_masked(tok: &str, s: &str) -> Result<(u32, u32), ParseError> {
    let ip = |x: &str| {
        x.parse::<Ipv4Addr>()
            .map(u32::from)
            .or_else(|_| err(tok, format!("`{x}` is not an IPv4 address")))
    };
    match s.split_once('/') {
        None => Ok((ip(s)?, u32::MAX)),
        Some((a, m)) if m.contains('.') => Ok((ip(a)?, ip(m)?)),
        Some((a, m)) => Ok((ip(a)?, prefix_mask(tok, m, 32)? as u32)),
    }
}

fn parse_ipv6_masked(tok: &str, s: &str) -> Result<(u128, u128), ParseError> {
    let ip = |x: &str| {
        x.parse::<Ipv6Addr>()
            .map(u128::from)
            .or_else(|_| err(tok, format!("`{x}` is not an IPv6 address")))
    };
    match s.split_once('/') {
        None => Ok((ip(s)?, u128::MAX)),
        Some((a, m)) if m.contains(':') => Ok((ip(a)?, ip(m)?)),
        Some((a, m)) => Ok((ip(a)?, prefix_mask(tok, m, 128)?)),
    }
}

fn parse_num_masked(tok: &str, s: &str, full: u64) -> Result<(u64, u64), ParseError> {
    let (v, m) = match s.split_once('/') {
        Some((v, m)) => (parse_u64(tok, v)?, parse_u64(tok, m)?),
        None => (parse_u64(tok, s)?, full),
    };
    if v > full || m > full {
        return err(
            tok,
            format!("value or mask wider than the field ({full:#x})"),
        );
    }
    Ok((v, m))
}

fn parse_mac_masked(tok: &str, s: &str) -> Result<(u64, u64), ParseError> {
    match s.split_once('/') {
        Some((v, m)) => Ok((
            FlowKey::mac_to_u64(parse_mac(tok, v)?),
            FlowKey::mac_to_u64(parse_mac(tok, m)?),
        )),
        None => Ok((
            FlowKey::mac_to_u64(parse_mac(tok, s)?),
            Field::EthSrc.full(),
        )),
    }
}

/// Parses a port: a reserved name, a number, or a name known to `ports`.
pub fn parse_port(tok: &str, s: &str, ports: PortResolver<'_>) -> Result<OfPort, ParseError> {
    let reserved = match s.to_ascii_lowercase().as_str() {
        "in_port" => Some(ofpp::IN_PORT),
        "normal" => Some(ofpp::NORMAL),
        "flood" => Some(ofpp::FLOOD),
        "all" => Some(ofpp::ALL),
        "controller" => Some(ofpp::CONTROLLER),
        "local" => Some(ofpp::LOCAL),
        "any" | "none" => Some(ofpp::ANY),
        _ => None,
    };
    if let Some(p) = reserved {
        return Ok(p);
    }
    if let Some(p) = ports(s) {
        return Ok(p);
    }
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        return parse_num(tok, s);
    }
    err(tok, format!("unknown port `{s}`"))
}

fn merge(m: &mut Match, f: Field, value: u64, mask: u64) {
    m.merge(f, value, mask);
}

/// The text of a flow: the settings/match tokens and the actions text (if any).
fn split_flow(s: &str) -> (Vec<&str>, Option<&str>) {
    let bytes = s.as_bytes();
    let mut cut = None;
    let mut i = 0;
    while let Some(pos) = s[i..].find("actions=") {
        let at = i + pos;
        if at == 0 || matches!(bytes[at - 1], b',' | b' ' | b'\t') {
            cut = Some(at);
            break;
        }
        i = at + 1;
    }
    let (head, acts) = match cut {
        Some(at) => (&s[..at], Some(s[at + "actions=".len()..].trim())),
        None => (s, None),
    };
    let toks = head
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .collect();
    (toks, acts)
}

/// Parser state for one flow.
struct FlowParser<'a> {
    fm: FlowMod,
    ports: PortResolver<'a>,
    /// nw_proto token (resolved at the end: ARP opcode or IP protocol).
    nw_proto: Option<(String, u64)>,
    /// (token, fields it set): to name the token whose prerequisites fail.
    used: Vec<(String, Vec<Field>)>,
}

impl FlowParser<'_> {
    fn shorthand(&mut self, name: &str) -> bool {
        let (et, proto) = match name {
            "ip" => (ethertype::IPV4, None),
            "ipv6" => (ethertype::IPV6, None),
            "arp" => (ethertype::ARP, None),
            "tcp" => (ethertype::IPV4, Some(ipproto::TCP)),
            "udp" => (ethertype::IPV4, Some(ipproto::UDP)),
            "icmp" => (ethertype::IPV4, Some(ipproto::ICMP)),
            "sctp" => (ethertype::IPV4, Some(132)),
            "tcp6" => (ethertype::IPV6, Some(ipproto::TCP)),
            "udp6" => (ethertype::IPV6, Some(ipproto::UDP)),
            "icmp6" => (ethertype::IPV6, Some(ipproto::ICMPV6)),
            _ => return false,
        };
        self.fm.match_.set(Field::EthType, u64::from(et));
        if let Some(p) = proto {
            self.fm.match_.set(Field::IpProto, u64::from(p));
        }
        true
    }

    fn flag(&mut self, name: &str) -> bool {
        let f = match name {
            "send_flow_rem" => flags::SEND_FLOW_REM,
            "check_overlap" => flags::CHECK_OVERLAP,
            "reset_counts" => flags::RESET_COUNTS,
            "no_packet_counts" => flags::NO_PKT_COUNTS,
            "no_byte_counts" => flags::NO_BYT_COUNTS,
            _ => return false,
        };
        self.fm.flags |= f;
        true
    }

    /// Rule settings (not match fields). `Ok(false)` if `name` is not one.
    fn setting(&mut self, tok: &str, name: &str, v: &str) -> Result<bool, ParseError> {
        let fm = &mut self.fm;
        match name {
            "table" => fm.table_id = parse_num(tok, v)?,
            "priority" => fm.priority = parse_num(tok, v)?,
            "idle_timeout" => fm.idle_timeout = parse_num(tok, v)?,
            "hard_timeout" => fm.hard_timeout = parse_num(tok, v)?,
            "out_port" => fm.out_port = parse_port(tok, v, self.ports)?,
            "cookie" => {
                // add: sets the cookie. del/mod/dump: a filter; without a mask, an exact one
                // (never "every cookie", which would make `del-flows cookie=5` delete all).
                let (c, m) = parse_num_masked(tok, v, u64::MAX)?;
                fm.cookie = c;
                fm.cookie_mask = m;
                if fm.command == FlowModCommand::Add {
                    if v.contains('/') {
                        return err(tok, "a cookie mask is only allowed in del/mod/dump matches");
                    }
                    fm.cookie_mask = 0;
                }
            }
            // Fields of dump-flows output, accepted so a dump line parses back.
            "duration" | "n_packets" | "n_bytes" | "idle_age" | "hard_age" | "importance" => {}
            _ => return Ok(false),
        }
        Ok(true)
    }

    fn field(&mut self, tok: &str, name: &str, v: &str) -> Result<(), ParseError> {
        let m = &mut self.fm.match_;
        let fields: Vec<Field> = match name {
            "in_port" => {
                m.set_in_port(parse_port(tok, v, self.ports)?);
                vec![Field::InPort]
            }
            "dl_src" | "eth_src" | "dl_dst" | "eth_dst" | "arp_sha" | "arp_tha" => {
                let f = match name {
                    "dl_src" | "eth_src" => Field::EthSrc,
                    "dl_dst" | "eth_dst" => Field::EthDst,
                    "arp_sha" => Field::ArpSha,
                    _ => Field::ArpTha,
                };
                let (val, mask) = parse_mac_masked(tok, v)?;
                m.set_masked(f, val, mask);
                vec![f]
            }
            "dl_type" | "eth_type" => {
                m.set(Field::EthType, parse_num::<u16>(tok, v)?.into());
                vec![Field::EthType]
            }
            "dl_vlan" | "dl_vlan_pcp" | "vlan_pcp" | "vlan_tci" | "vlan_vid" => {
                self.vlan(tok, name, v)?;
                vec![Field::VlanTci]
            }
            "nw_src" | "ip_src" | "ipv4_src" | "arp_spa" | "nw_dst" | "ip_dst" | "ipv4_dst"
            | "arp_tpa" => {
                let f = if matches!(name, "nw_src" | "ip_src" | "ipv4_src" | "arp_spa") {
                    Field::Ipv4Src
                } else {
                    Field::Ipv4Dst
                };
                let (val, mask) = parse_ipv4_masked(tok, v)?;
                m.set_masked(f, val.into(), mask.into());
                vec![f]
            }
            "ipv6_src" | "ipv6_dst" | "tun_ipv6_src" | "tun_ipv6_dst" => {
                let (hi, lo) = match name {
                    "ipv6_src" => (Field::Ipv6SrcHi, Field::Ipv6SrcLo),
                    "ipv6_dst" => (Field::Ipv6DstHi, Field::Ipv6DstLo),
                    "tun_ipv6_src" => (Field::TunIpv6SrcHi, Field::TunIpv6SrcLo),
                    _ => (Field::TunIpv6DstHi, Field::TunIpv6DstLo),
                };
                let (val, mask) = parse_ipv6_masked(tok, v)?;
                m.set_masked(hi, (val >> 64) as u64, (mask >> 64) as u64);
                m.set_masked(lo, val as u64, mask as u64);
                vec![hi, lo]
            }
            "nw_proto" | "ip_proto" => {
                self.nw_proto = Some((tok.to_string(), parse_num::<u8>(tok, v)?.into()));
                return Ok(());
            }
            "tun_id" | "tunnel_id" => {
                let full = u128::from(u64::MAX);
                let (val, mask) = match v.split_once('/') {
                    Some((a, b)) => (parse_u128(tok, a)?, parse_u128(tok, b)?),
                    None => (parse_u128(tok, v)?, full),
                };
                if val > full || mask > full {
                    return err(tok, "tun_id is 64 bits");
                }
                m.set_masked(Field::TunId, val as u64, mask as u64);
                vec![Field::TunId]
            }
            "tun_src" | "tun_dst" => {
                let f = if name == "tun_src" {
                    Field::TunSrc
                } else {
                    Field::TunDst
                };
                let (val, mask) = parse_ipv4_masked(tok, v)?;
                m.set_masked(f, val.into(), mask.into());
                vec![f]
            }
            _ if name.starts_with("tun_metadata") => {
                let Some(NxField::TunMetadata { off, len, .. }) = NxField::from_name(name) else {
                    return err(tok, "tun_metadataN not mapped by the bridge's TLV map");
                };
                let full = ones(u32::from(len) * 8);
                let (val, mask) = match v.split_once('/') {
                    Some((a, b)) => (parse_u128(tok, a)?, parse_u128(tok, b)?),
                    None => (parse_u128(tok, v)?, full),
                };
                if val > full || mask > full {
                    return err(tok, "value longer than the option");
                }
                let (o, l) = (usize::from(off), usize::from(len));
                wire::tunmd::set(&mut m.key, o, l, val & mask);
                wire::tunmd::set(&mut m.mask, o, l, mask);
                return Ok(());
            }
            _ => {
                if let Some(f) = NxField::from_name(name).filter(|f| f.is_register()) {
                    let full = ones(f.width());
                    let (val, mask) = match v.split_once('/') {
                        Some((a, b)) => (parse_u128(tok, a)?, parse_u128(tok, b)?),
                        None => (parse_u128(tok, v)?, full),
                    };
                    if val & !full != 0 || mask & !full != 0 {
                        return err(tok, "value or mask wider than the register");
                    }
                    m.set_reg(f, val, mask);
                    return Ok(());
                }
                match crate::ctfields::parse_ct_field(m, tok, name, v) {
                    Some(r) => r?,
                    None => return self.field_l3l4(tok, name, v),
                }
            }
        };
        self.used.push((tok.to_string(), fields));
        Ok(())
    }

    fn field_l3l4(&mut self, tok: &str, name: &str, v: &str) -> Result<(), ParseError> {
        let m = &mut self.fm.match_;
        let (f, val, mask) = match name {
            "nw_tos" => (Field::IpTos, parse_num::<u8>(tok, v)? & 0xfc, 0xfc),
            "ip_dscp" => (Field::IpTos, parse_num::<u8>(tok, v)? << 2, 0xfc),
            "nw_ecn" | "ip_ecn" => (Field::IpTos, parse_num::<u8>(tok, v)? & 3, 3),
            "nw_ttl" => (Field::IpTtl, parse_num::<u8>(tok, v)?, 0xff),
            "icmp_type" | "icmpv6_type" => (Field::TpSrc, parse_num::<u8>(tok, v)?, 0xff),
            "icmp_code" | "icmpv6_code" => (Field::TpDst, parse_num::<u8>(tok, v)?, 0xff),
            _ => {
                let f = match name {
                    "tp_src" | "tcp_src" | "udp_src" | "sctp_src" => Field::TpSrc,
                    "tp_dst" | "tcp_dst" | "udp_dst" | "sctp_dst" => Field::TpDst,
                    "tcp_flags" => Field::TcpFlags,
                    "arp_op" => Field::ArpOp,
                    _ => return err(tok, format!("unknown field `{name}`")),
                };
                let (val, mask) = parse_num_masked(tok, v, f.full())?;
                m.set_masked(f, val, mask);
                self.used.push((tok.to_string(), vec![f]));
                return Ok(());
            }
        };
        if v.contains('/') {
            return err(tok, "this field takes no mask");
        }
        merge(m, f, val.into(), mask);
        self.used.push((tok.to_string(), vec![f]));
        Ok(())
    }

    fn vlan(&mut self, tok: &str, name: &str, v: &str) -> Result<(), ParseError> {
        let m = &mut self.fm.match_;
        let present = u64::from(VLAN_PRESENT);
        match name {
            "dl_vlan" => {
                let vid: u16 = parse_num(tok, v)?;
                if vid == 0xffff {
                    m.set(Field::VlanTci, 0);
                } else if vid > 4095 {
                    return err(tok, "VLAN id must be 0..4095 (0xffff = no VLAN)");
                } else {
                    merge(m, Field::VlanTci, present | u64::from(vid), 0x1fff);
                }
            }
            "dl_vlan_pcp" | "vlan_pcp" => {
                let pcp: u8 = parse_num(tok, v)?;
                if pcp > 7 {
                    return err(tok, "VLAN priority must be 0..7");
                }
                merge(m, Field::VlanTci, present | u64::from(pcp) << 13, 0xf000);
            }
            "vlan_vid" => {
                let (val, mask) = parse_num_masked(tok, v, 0x1fff)?;
                merge(m, Field::VlanTci, val, mask);
            }
            _ => {
                let (val, mask) = parse_num_masked(tok, v, 0xffff)?;
                m.set_masked(Field::VlanTci, val, mask);
            }
        }
        Ok(())
    }

    /// Resolves nw_proto and checks prerequisites, naming the first offending token.
    fn finish_match(&mut self) -> Result<(), ParseError> {
        if let Some((tok, p)) = self.nw_proto.take() {
            let f = if self.fm.match_.exact(Field::EthType) == Some(ethertype::ARP.into()) {
                Field::ArpOp
            } else {
                Field::IpProto
            };
            self.fm.match_.set(f, p);
            self.used.push((tok, vec![f]));
        }
        let full = self.fm.match_;
        for (tok, fields) in &self.used {
            let mut one = Match::ANY;
            for f in [Field::EthType, Field::IpProto].iter().chain(fields) {
                if let Some((v, m)) = full.get(*f) {
                    one.set_masked(*f, v, m);
                }
            }
            if let Err(e) = one.check_prerequisites() {
                return err(tok, e.to_string());
            }
        }
        Ok(())
    }
}

/// Parses an `add-flow` (or `mod-flows`) line into a flow-mod of the given command.
pub fn parse_flow(
    s: &str,
    command: FlowModCommand,
    ports: PortResolver<'_>,
) -> Result<FlowMod, ParseError> {
    let (toks, actions) = split_flow(s);
    let mut fm = FlowMod::add(Match::ANY, Vec::new());
    fm.command = command;
    if matches!(
        command,
        FlowModCommand::Delete | FlowModCommand::DeleteStrict
    ) {
        fm.table_id = TABLE_ALL;
    }
    let mut p = FlowParser {
        fm,
        ports,
        nw_proto: None,
        used: Vec::new(),
    };
    for tok in toks {
        match tok.split_once('=') {
            None if p.shorthand(tok) || p.flag(tok) => {}
            None => return err(tok, "unknown keyword"),
            Some((name, v)) => {
                if !p.setting(tok, name, v)? {
                    p.field(tok, name, v)?;
                }
            }
        }
    }
    p.finish_match()?;
    let is_mod = matches!(
        command,
        FlowModCommand::Add | FlowModCommand::Modify | FlowModCommand::ModifyStrict
    );
    match (actions, is_mod) {
        (Some(a), true) => p.fm.instructions = parse_actions(a, &p.fm.match_, ports)?,
        (None, true) => return err(s, "missing `actions=`"),
        (Some(_), false) => return err("actions=", "not allowed in a match-only flow"),
        (None, false) => {}
    }
    Ok(p.fm)
}

/// Splits at top-level commas (not inside parentheses).
pub(crate) fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(s[start..].trim());
    out.into_iter().filter(|t| !t.is_empty()).collect()
}

/// Parses an `actions=` list into instructions (apply, clear, write, goto).
pub fn parse_actions(
    s: &str,
    m: &Match,
    ports: PortResolver<'_>,
) -> Result<Vec<Instruction>, ParseError> {
    let mut apply = Vec::new();
    let mut insts = Vec::new();
    for tok in split_top(s) {
        let lower = tok.to_ascii_lowercase();
        const WA: &str = "write_actions(";
        if lower.starts_with(WA) && lower.ends_with(')') {
            let inner = &tok[WA.len()..tok.len() - 1];
            let acts = split_top(inner)
                .into_iter()
                .map(|t| parse_action(t, m, ports, false))
                .collect::<Result<Vec<_>, _>>()?;
            insts.push(Instruction::WriteActions(
                acts.into_iter().flatten().collect(),
            ));
        } else if lower == "clear_actions" {
            insts.push(Instruction::ClearActions);
        } else if let Some(t) = lower.strip_prefix("goto_table:") {
            insts.push(Instruction::GotoTable(parse_num(tok, t)?));
        } else if let Some(m) = lower.strip_prefix("meter:") {
            insts.push(Instruction::Meter(parse_num(tok, m)?));
        } else if lower == "drop" {
        } else {
            apply.extend(parse_action(tok, m, ports, false)?);
        }
    }
    if !apply.is_empty() {
        insts.push(Instruction::ApplyActions(apply));
    }
    insts.sort_by_key(Instruction::order);
    Ok(insts)
}

fn tp_field(tok: &str, m: &Match, src: bool, p: u16) -> Result<SetField, ParseError> {
    match m.exact(Field::IpProto).map(|v| v as u8) {
        Some(ipproto::TCP) if src => Ok(SetField::TcpSrc(p)),
        Some(ipproto::TCP) => Ok(SetField::TcpDst(p)),
        Some(ipproto::UDP) if src => Ok(SetField::UdpSrc(p)),
        Some(ipproto::UDP) => Ok(SetField::UdpDst(p)),
        _ => err(tok, "needs tcp or udp in the match"),
    }
}

/// One action token (several actions for a masked `set_field` on a register, none for
/// `drop`). `in_ct` allows `ct_mark`/`ct_label` destinations (inside `ct(exec(...))`).
fn parse_action(
    tok: &str,
    m: &Match,
    ports: PortResolver<'_>,
    in_ct: bool,
) -> Result<Vec<OfAction>, ParseError> {
    if let Some(acts) = crate::parse_nx::parse_nx_action(tok, m, ports, in_ct)? {
        return Ok(acts);
    }
    Ok(parse_std_action(tok, m, ports)?.into_iter().collect())
}

/// One OpenFlow (non-Nicira) action token.
fn parse_std_action(
    tok: &str,
    m: &Match,
    ports: PortResolver<'_>,
) -> Result<Option<OfAction>, ParseError> {
    let (name, arg) = match tok.split_once(':') {
        Some((n, a)) => (n.to_ascii_lowercase(), a),
        None => (tok.to_ascii_lowercase(), ""),
    };
    let sf = |s: SetField| Ok(Some(OfAction::SetField(s)));
    match name.as_str() {
        "drop" => Ok(None),
        "normal" | "flood" | "all" | "in_port" | "local" if arg.is_empty() => {
            Ok(Some(OfAction::output(parse_port(tok, &name, ports)?)))
        }
        "controller" => {
            let max_len = if arg.is_empty() {
                0xffff
            } else {
                parse_num(tok, arg)?
            };
            Ok(Some(OfAction::Output {
                port: ofpp::CONTROLLER,
                max_len,
            }))
        }
        n if n.starts_with("controller(") && n.ends_with(')') => {
            let mut max_len = 0xffff;
            for kv in tok["controller(".len()..tok.len() - 1].split(',') {
                match kv.trim().split_once('=') {
                    Some(("max_len", v)) => max_len = parse_num(tok, v)?,
                    Some(("reason" | "id" | "userdata" | "pause", _)) => {}
                    _ if kv.trim().is_empty() => {}
                    _ => return err(tok, format!("unknown controller option `{kv}`")),
                }
            }
            Ok(Some(OfAction::Output {
                port: ofpp::CONTROLLER,
                max_len,
            }))
        }
        "output" => Ok(Some(OfAction::output(parse_port(tok, arg, ports)?))),
        "strip_vlan" | "pop_vlan" => Ok(Some(OfAction::PopVlan)),
        "group" => Ok(Some(OfAction::Group(parse_num(tok, arg)?))),
        "push_vlan" => Ok(Some(OfAction::PushVlan(parse_num(tok, arg)?))),
        "mod_vlan_vid" => sf(SetField::VlanVid(parse_num::<u16>(tok, arg)? & 0xfff)),
        "mod_vlan_pcp" => sf(SetField::VlanPcp(parse_num(tok, arg)?)),
        "mod_dl_src" => sf(SetField::EthSrc(parse_mac(tok, arg)?)),
        "mod_dl_dst" => sf(SetField::EthDst(parse_mac(tok, arg)?)),
        "mod_nw_src" => sf(SetField::Ipv4Src(parse_ipv4_masked(tok, arg)?.0)),
        "mod_nw_dst" => sf(SetField::Ipv4Dst(parse_ipv4_masked(tok, arg)?.0)),
        "mod_nw_tos" => sf(SetField::IpDscp(parse_num::<u8>(tok, arg)? >> 2)),
        "mod_tp_src" => sf(tp_field(tok, m, true, parse_num(tok, arg)?)?),
        "mod_tp_dst" => sf(tp_field(tok, m, false, parse_num(tok, arg)?)?),
        "set_field" => sf(parse_set_field(tok, arg, m)?),
        _ if arg.is_empty() => {
            // A bare port number or name means output to it.
            match parse_port(tok, tok, ports) {
                Ok(p) if p <= ofpp::MAX => Ok(Some(OfAction::output(p))),
                _ => err(tok, "unknown action"),
            }
        }
        _ => err(tok, "unknown action"),
    }
}

fn parse_set_field(tok: &str, arg: &str, m: &Match) -> Result<SetField, ParseError> {
    let Some((v, field)) = arg.split_once("->") else {
        return err(tok, "expected set_field:VALUE->FIELD");
    };
    Ok(match field {
        "eth_src" | "dl_src" => SetField::EthSrc(parse_mac(tok, v)?),
        "eth_dst" | "dl_dst" => SetField::EthDst(parse_mac(tok, v)?),
        "vlan_vid" | "dl_vlan" => SetField::VlanVid(parse_num::<u16>(tok, v)? & 0xfff),
        "vlan_pcp" | "dl_vlan_pcp" => SetField::VlanPcp(parse_num(tok, v)?),
        "ip_src" | "nw_src" | "ipv4_src" => SetField::Ipv4Src(parse_ipv4_masked(tok, v)?.0),
        "ip_dst" | "nw_dst" | "ipv4_dst" => SetField::Ipv4Dst(parse_ipv4_masked(tok, v)?.0),
        "ip_dscp" => SetField::IpDscp(parse_num(tok, v)?),
        "tcp_src" => SetField::TcpSrc(parse_num(tok, v)?),
        "tcp_dst" => SetField::TcpDst(parse_num(tok, v)?),
        "udp_src" => SetField::UdpSrc(parse_num(tok, v)?),
        "udp_dst" => SetField::UdpDst(parse_num(tok, v)?),
        "tp_src" => tp_field(tok, m, true, parse_num(tok, v)?)?,
        "tp_dst" => tp_field(tok, m, false, parse_num(tok, v)?)?,
        _ => return err(tok, format!("cannot set field `{field}`")),
    })
}
