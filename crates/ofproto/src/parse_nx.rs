//! `ovs-ofctl` syntax of the Nicira extension actions: `resubmit`, `load:`, `move:`,
//! `set_field:` on registers / `metadata` / `ct_mark` / `ct_label`, `dec_ttl`, `note:`,
//! `ct(...)` (with `exec(...)` and `nat(...)`) and `ct_clear`.
//!
//! Owns: pure parsing functions. Threads: the control thread. Every error names its token.

use crate::nx::ones;
use crate::parse::{err, parse_port, parse_u128, split_top, ParseError, PortResolver};
use crate::types::{
    ofpp, CtAction, CtZone, Match, NatKind, NatSpec, NxField, OfAction, SetField, SubField,
};
use std::net::IpAddr;
use wire::Field;

/// Parses `NAME[]`, `NAME[N]`, `NAME[A..B]` or `NAME`.
pub fn parse_subfield(tok: &str, s: &str) -> Result<SubField, ParseError> {
    let (name, bits) = match s.split_once('[') {
        Some((n, rest)) => match rest.strip_suffix(']') {
            Some(b) => (n, Some(b)),
            None => return err(tok, format!("`{s}`: missing `]`")),
        },
        None => (s, None),
    };
    let Some(field) = NxField::from_name(name) else {
        return err(tok, format!("unknown field `{name}`"));
    };
    let width = field.width();
    let (ofs, nbits) = match bits {
        None | Some("") => (0, width),
        Some(b) => {
            let (a, z) = match b.split_once("..") {
                Some((a, z)) => (a, z),
                None => (b, b),
            };
            let a: u32 = a.parse().or_else(|_| err(tok, format!("bad bit `{a}`")))?;
            let z: u32 = z.parse().or_else(|_| err(tok, format!("bad bit `{z}`")))?;
            if z < a || z >= width {
                return err(
                    tok,
                    format!("bits {a}..{z} outside `{name}` ({width} bits)"),
                );
            }
            (a, z - a + 1)
        }
    };
    Ok(SubField {
        field,
        ofs: ofs as u8,
        nbits: nbits.min(128) as u8,
    })
}

/// Checks that a packet field an action names has its prerequisites in the match.
fn check_prereq(tok: &str, f: NxField, m: &Match) -> Result<(), ParseError> {
    let NxField::Packet(p) = f else {
        return Ok(());
    };
    let (types, proto) = p.prerequisite();
    let et = m.exact(Field::EthType).map(|v| v as u16);
    if !types.is_empty() && !et.is_some_and(|t| types.contains(&t)) {
        return err(
            tok,
            "actions are invalid with specified match (the field needs its protocol in the match)",
        );
    }
    if let Some(pr) = proto {
        if m.exact(Field::IpProto) != Some(u64::from(pr)) {
            return err(
                tok,
                "actions are invalid with specified match (the field needs its ip_proto)",
            );
        }
    }
    Ok(())
}

/// A destination the pipeline can write (ct fields only inside `ct(exec(...))`).
fn check_writable(tok: &str, f: NxField, in_ct: bool, m: &Match) -> Result<(), ParseError> {
    match f {
        NxField::CtMark | NxField::CtLabel if in_ct => Ok(()),
        NxField::CtMark | NxField::CtLabel => err(tok, "cannot set CT fields outside of ct action"),
        _ if in_ct => err(tok, "ct(exec(...)) may only set ct_mark and ct_label"),
        NxField::TunId | NxField::TunSrc | NxField::TunDst | NxField::TunMetadata { .. } => Ok(()),
        NxField::Packet(p) if crate::xlate::packet_set_field(p, 0).is_none() => err(
            tok,
            "load/move may write registers, metadata, eth_src/dst, ip_src/dst, tcp/udp ports",
        ),
        f => check_prereq(tok, f, m),
    }
}

/// Splits `value/mask` over a field into loads of contiguous bit runs (as ovs-ofctl encodes a
/// masked set_field on a register).
fn masked_loads(dst: NxField, value: u128, mask: u128) -> Vec<OfAction> {
    let mut out = Vec::new();
    let mut bit = 0u32;
    while bit < 128 {
        if mask >> bit & 1 == 0 {
            bit += 1;
            continue;
        }
        let start = bit;
        while bit < 128 && mask >> bit & 1 == 1 {
            bit += 1;
        }
        let nbits = bit - start;
        out.push(OfAction::RegLoad {
            dst,
            ofs: start as u8,
            nbits: nbits as u8,
            value: (value >> start) & ones(nbits),
        });
    }
    out
}

/// A Nicira action token, or `None` if `tok` is not one.
pub(crate) fn parse_nx_action(
    tok: &str,
    m: &Match,
    ports: PortResolver<'_>,
    in_ct: bool,
) -> Result<Option<Vec<OfAction>>, ParseError> {
    let lower = tok.to_ascii_lowercase();
    let one = |a: OfAction| Ok(Some(vec![a]));
    if let Some(arg) = tok.strip_prefix("load:") {
        let Some((v, dst)) = arg.split_once("->") else {
            return err(tok, "expected load:VALUE->DST[..]");
        };
        let sub = parse_subfield(tok, dst)?;
        check_writable(tok, sub.field, in_ct, m)?;
        let value = parse_u128(tok, v)?;
        if sub.nbits < 128 && value >> sub.nbits != 0 {
            return err(tok, format!("value {v} does not fit in {} bits", sub.nbits));
        }
        return one(OfAction::RegLoad {
            dst: sub.field,
            ofs: sub.ofs,
            nbits: sub.nbits,
            value,
        });
    }
    if let Some(arg) = tok.strip_prefix("move:") {
        let Some((src, dst)) = arg.split_once("->") else {
            return err(tok, "expected move:SRC[..]->DST[..]");
        };
        let s = parse_subfield(tok, src)?;
        let d = parse_subfield(tok, dst)?;
        if s.nbits != d.nbits {
            return err(
                tok,
                format!("source is {} bits, destination {} bits", s.nbits, d.nbits),
            );
        }
        if !(s.field.is_register() || matches!(s.field, NxField::Packet(_)) || s.field.is_tunnel())
        {
            return err(
                tok,
                "move can read registers, metadata, tunnel and packet fields",
            );
        }
        check_prereq(tok, s.field, m)?;
        check_writable(tok, d.field, in_ct, m)?;
        return one(OfAction::RegMove {
            src: s.field,
            src_ofs: s.ofs,
            dst: d.field,
            dst_ofs: d.ofs,
            nbits: s.nbits,
        });
    }
    if let Some(arg) = tok.strip_prefix("set_field:") {
        let Some((v, name)) = arg.split_once("->") else {
            return err(tok, "expected set_field:VALUE->FIELD");
        };
        let Some(f) = NxField::from_name(name).filter(|f| !matches!(f, NxField::Packet(_))) else {
            return Ok(None); // a packet field: the standard set_field
        };
        check_writable(tok, f, in_ct, m)?;
        let full = ones(f.width());
        // tun_src / tun_dst take a dotted IPv4 address too (as ovs-ofctl writes them).
        let num = |s: &str| match s.parse::<std::net::Ipv4Addr>() {
            Ok(a) if matches!(f, NxField::TunSrc | NxField::TunDst) => Ok(u32::from(a).into()),
            _ => parse_u128(tok, s),
        };
        let (value, mask) = match v.split_once('/') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(v)?, full),
        };
        if value & !full != 0 || mask & !full != 0 {
            return err(tok, format!("value or mask wider than `{name}`"));
        }
        if mask == full {
            return one(OfAction::SetField(SetField::Nx(f, value)));
        }
        return Ok(Some(masked_loads(f, value & mask, mask)));
    }
    if let Some(arg) = lower.strip_prefix("note:") {
        let hex: String = arg.chars().filter(|c| *c != '.').collect();
        if !hex.len().is_multiple_of(2) || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return err(tok, "note takes hex bytes (aa.bb.cc)");
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0))
            .collect();
        return one(OfAction::Note(bytes));
    }
    if lower == "dec_ttl" {
        return one(OfAction::DecTtl);
    }
    if lower.starts_with("dec_ttl(") {
        return err(tok, "dec_ttl with controller ids is not supported");
    }
    if lower == "ct_clear" {
        return one(OfAction::CtClear);
    }
    if let Some(arg) = lower.strip_prefix("resubmit:") {
        let port = parse_resubmit_port(tok, arg, ports)?;
        return one(OfAction::Resubmit { port, table: None });
    }
    if lower.starts_with("resubmit(") && lower.ends_with(')') {
        let inner = &tok["resubmit(".len()..tok.len() - 1];
        let (p, t) = match inner.split_once(',') {
            Some((p, t)) => (p.trim(), Some(t.trim())),
            None => (inner.trim(), None),
        };
        if t.is_some_and(|t| t.contains(',')) {
            return err(tok, "resubmit(PORT,TABLE,ct) is not supported");
        }
        let port = parse_resubmit_port(tok, p, ports)?;
        let table = match t {
            None | Some("") => None,
            Some(t) => Some(crate::parse::parse_u64(tok, t).and_then(|v| {
                u8::try_from(v)
                    .ok()
                    .filter(|v| *v != 255)
                    .map_or_else(|| err(tok, "table must be 0..254"), Ok)
            })?),
        };
        if port.is_none() && table.is_none() {
            return err(tok, "resubmit needs a port or a table");
        }
        return one(OfAction::Resubmit { port, table });
    }
    if lower == "ct" || (lower.starts_with("ct(") && lower.ends_with(')')) {
        let inner = if lower == "ct" {
            ""
        } else {
            &tok[3..tok.len() - 1]
        };
        return one(OfAction::Ct(parse_ct(tok, inner, m, ports)?));
    }
    if lower == "nat" || lower.starts_with("nat(") {
        return err(tok, "Cannot have NAT action outside of \"ct\" action");
    }
    Ok(None)
}

fn parse_resubmit_port(
    tok: &str,
    s: &str,
    ports: PortResolver<'_>,
) -> Result<Option<u32>, ParseError> {
    if s.is_empty() || s.eq_ignore_ascii_case("in_port") {
        return Ok(None);
    }
    match parse_port(tok, s, ports)? {
        ofpp::IN_PORT => Ok(None),
        p if p == 0 || (p > 0xfeff && p != ofpp::LOCAL) => {
            err(tok, format!("cannot resubmit as if from port `{s}`"))
        }
        p => Ok(Some(p)),
    }
}

/// The inside of `ct(...)`.
fn parse_ct(
    tok: &str,
    inner: &str,
    m: &Match,
    ports: PortResolver<'_>,
) -> Result<CtAction, ParseError> {
    let mut ct = CtAction::default();
    for part in split_top(inner) {
        let lower = part.to_ascii_lowercase();
        match lower.split_once('=') {
            _ if lower == "commit" => ct.commit = true,
            _ if lower == "force" => ct.force = true,
            _ if lower == "nat" || lower.starts_with("nat(") => {
                ct.nat = Some(parse_nat(tok, part)?);
            }
            _ if lower.starts_with("exec(") && lower.ends_with(')') => {
                for a in split_top(&part[5..part.len() - 1]) {
                    let acts = parse_nx_action(a, m, ports, true)?;
                    match acts {
                        Some(v) => ct.exec.extend(v),
                        None => return err(a, "ct(exec(...)) may only set ct_mark and ct_label"),
                    }
                }
            }
            Some(("table", v)) => {
                let t = crate::parse::parse_u64(tok, v)?;
                if t > 254 {
                    return err(tok, "ct table must be 0..254");
                }
                ct.table = Some(t as u8);
            }
            Some(("zone", _)) => {
                let v = &part[5..];
                ct.zone = if v.starts_with(|c: char| c.is_ascii_digit()) {
                    let z = crate::parse::parse_u64(tok, v)?;
                    CtZone::Imm(u16::try_from(z).or_else(|_| err(tok, "zone must be 0..65535"))?)
                } else {
                    let sub = parse_subfield(tok, v)?;
                    if sub.nbits > 16 || !sub.field.is_register() {
                        return err(tok, "zone=FIELD[..] takes at most 16 bits of a register");
                    }
                    CtZone::Field {
                        field: sub.field,
                        ofs: sub.ofs,
                        nbits: sub.nbits,
                    }
                };
            }
            Some(("alg", v)) => {
                ct.alg = Some(match v {
                    "ftp" => 21,
                    "tftp" => 69,
                    n => u16::try_from(crate::parse::parse_u64(tok, n)?)
                        .or_else(|_| err(tok, "alg must be ftp, tftp or a port"))?,
                });
            }
            _ => return err(tok, format!("unknown ct argument `{part}`")),
        }
    }
    if ct.force && !ct.commit {
        return err(tok, "ct: force needs commit");
    }
    if !ct.exec.is_empty() && !ct.commit {
        return err(tok, "ct: exec needs commit");
    }
    Ok(ct)
}

fn parse_ip(tok: &str, s: &str) -> Result<IpAddr, ParseError> {
    let s = s.trim_start_matches('[').trim_end_matches(']');
    s.parse()
        .or_else(|_| err(tok, format!("`{s}` is not an IP address")))
}

/// Splits `A[-B]` where IPv6 addresses are bracketed.
fn split_range(s: &str) -> (&str, Option<&str>) {
    if s.starts_with('[') {
        match s.find("]-") {
            Some(i) => (&s[..=i], Some(&s[i + 2..])),
            None => (s, None),
        }
    } else {
        match s.split_once('-') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        }
    }
}

/// `nat`, `nat(src)`, `nat(dst=A[-B][:P[-Q]],persistent,hash,random)`.
pub fn parse_nat(tok: &str, s: &str) -> Result<NatSpec, ParseError> {
    let mut n = NatSpec::default();
    let lower = s.to_ascii_lowercase();
    if lower == "nat" {
        return Ok(n);
    }
    let Some(inner) = s.get(4..s.len() - 1).filter(|_| s.ends_with(')')) else {
        return err(tok, "expected nat(...)");
    };
    for part in inner.split(',') {
        let part = part.trim();
        let (key, range) = match part.split_once('=') {
            Some((k, r)) => (k, Some(r)),
            None => (part, None),
        };
        match key {
            "src" | "dst" => {
                if n.kind.is_some() {
                    return err(tok, "nat: only one of src and dst");
                }
                n.kind = Some(if key == "src" {
                    NatKind::Src
                } else {
                    NatKind::Dst
                });
                if let Some(r) = range {
                    parse_nat_range(tok, r, &mut n)?;
                }
            }
            "persistent" => n.persistent = true,
            "hash" => n.hash = true,
            "random" => n.random = true,
            "" => {}
            _ => return err(tok, format!("unknown nat argument `{part}`")),
        }
    }
    if n.hash && n.random {
        return err(tok, "Both \"hash\" and \"random\" are not allowed.");
    }
    if n.kind.is_none() && (n.persistent || n.hash || n.random) {
        return err(tok, "nat flags need src or dst");
    }
    Ok(n)
}

fn parse_nat_range(tok: &str, r: &str, n: &mut NatSpec) -> Result<(), ParseError> {
    // Ports follow the last ':' outside brackets.
    let cut = match r.rfind(']') {
        Some(b) => r[b..].find(':').map(|i| b + i),
        None if r.matches(':').count() == 1 => r.find(':'),
        None => None,
    };
    let (addrs, port) = match cut {
        Some(i) => (&r[..i], Some(&r[i + 1..])),
        None => (r, None),
    };
    if !addrs.is_empty() {
        let (a, b) = split_range(addrs);
        let a = parse_ip(tok, a)?;
        n.addr_min = Some(a);
        if let Some(b) = b {
            let b = parse_ip(tok, b)?;
            if a.is_ipv4() != b.is_ipv4() || b < a {
                return err(tok, "nat: bad address range");
            }
            n.addr_max = Some(b);
        }
    }
    if let Some(p) = port {
        let (a, b) = match p.split_once('-') {
            Some((a, b)) => (a, Some(b)),
            None => (p, None),
        };
        let num = |x: &str| {
            x.parse::<u16>()
                .or_else(|_| err(tok, format!("`{x}` is not a port")))
        };
        let a = num(a)?;
        n.port_min = Some(a);
        if let Some(b) = b {
            let b = num(b)?;
            if b < a {
                return err(tok, "nat: bad port range");
            }
            n.port_max = Some(b);
        }
    }
    Ok(())
}
