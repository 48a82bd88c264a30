//! The conntrack match fields of a rule, as `ovs-ofctl` writes them: `ct_state` (`+trk+est-new`,
//! or a number with a mask), `ct_zone`, `ct_mark`, `ct_label` (128 bits), `ct_nw_src/dst`,
//! `ct_ipv6_src/dst`, `ct_nw_proto`, `ct_tp_src/dst`: their [`Match`] setters, their parsing
//! ([`parse_ct_field`], called by `parse`) and their text form ([`format_ct_fields`]).
//!
//! The values come from the datapath's `ct` action: a packet's key carries them (see
//! `wire::flow`, words 9-16) after `ct(table=N)` recirculated it.
//!
//! Threads: the control thread (parsing, display).

use crate::parse::{parse_ipv4_masked, parse_u64, ParseError};
use crate::types::Match;
use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use wire::{Field, FlowKey, CT_STATE_NAMES};

impl Match {
    /// `ct_state` bits (value, mask), as OVS numbers them (`conntrack::state`).
    pub fn set_ct_state(&mut self, value: u32, mask: u32) -> &mut Self {
        self.set_masked(Field::CtState, u64::from(value), u64::from(mask))
    }

    /// `ct_label` (128 bits) with a mask.
    pub fn set_ct_label(&mut self, value: u128, mask: u128) -> &mut Self {
        self.set_masked(Field::CtLabelHi, (value >> 64) as u64, (mask >> 64) as u64);
        self.set_masked(Field::CtLabelLo, value as u64, mask as u64)
    }

    /// `ct_ipv6_src` with a mask.
    pub fn set_ct_ipv6_src(&mut self, addr: u128, mask: u128) -> &mut Self {
        self.set_masked(Field::CtIpv6SrcHi, (addr >> 64) as u64, (mask >> 64) as u64);
        self.set_masked(Field::CtIpv6SrcLo, addr as u64, mask as u64)
    }

    /// `ct_ipv6_dst` with a mask.
    pub fn set_ct_ipv6_dst(&mut self, addr: u128, mask: u128) -> &mut Self {
        self.set_masked(Field::CtIpv6DstHi, (addr >> 64) as u64, (mask >> 64) as u64);
        self.set_masked(Field::CtIpv6DstLo, addr as u64, mask as u64)
    }

    /// `(value, mask)` of `ct_label`, `None` when wildcarded.
    pub fn ct_label(&self) -> Option<(u128, u128)> {
        let join = |k: &FlowKey| {
            u128::from(k.get(Field::CtLabelHi)) << 64 | u128::from(k.get(Field::CtLabelLo))
        };
        let m = join(&self.mask);
        (m != 0).then(|| (join(&self.key), m))
    }
}

fn bad<T>(tok: &str, msg: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        token: tok.to_string(),
        msg: msg.into(),
    })
}

/// Parses `ct_state`: `+flag-flag...` (flags `new est rel rpl inv trk snat dnat`), or
/// `VALUE[/MASK]` as numbers.
pub fn parse_ct_state(tok: &str, s: &str) -> Result<(u32, u32), ParseError> {
    if !s.starts_with(['+', '-']) {
        let (v, m) = match s.split_once('/') {
            Some((v, m)) => (parse_u64(tok, v)?, parse_u64(tok, m)?),
            None => (parse_u64(tok, s)?, 0xff),
        };
        if v > 0xff || m > 0xff {
            return bad(tok, "ct_state has 8 bits");
        }
        return Ok((v as u32, m as u32));
    }
    let (mut v, mut m) = (0u32, 0u32);
    let mut rest = s;
    while !rest.is_empty() {
        let set = rest.starts_with('+');
        if !set && !rest.starts_with('-') {
            return bad(tok, format!("`{rest}`: ct_state flags start with + or -"));
        }
        let body = &rest[1..];
        let end = body.find(['+', '-']).unwrap_or(body.len());
        let name = &body[..end];
        let Some(&(_, bit)) = CT_STATE_NAMES.iter().find(|(n, _)| *n == name) else {
            return bad(tok, format!("unknown ct_state flag `{name}`"));
        };
        if m & bit != 0 {
            return bad(tok, format!("ct_state flag `{name}` given twice"));
        }
        m |= bit;
        if set {
            v |= bit;
        }
        rest = &body[end..];
    }
    Ok((v, m))
}

fn parse_u128_masked(tok: &str, s: &str) -> Result<(u128, u128), ParseError> {
    let one = |x: &str| {
        let r = match x.strip_prefix("0x").or_else(|| x.strip_prefix("0X")) {
            Some(h) => u128::from_str_radix(h, 16),
            None => x.parse::<u128>(),
        };
        r.or_else(|_| bad(tok, format!("`{x}` is not a number")))
    };
    match s.split_once('/') {
        Some((v, m)) => Ok((one(v)?, one(m)?)),
        None => Ok((one(s)?, u128::MAX)),
    }
}

fn parse_ipv6(tok: &str, s: &str) -> Result<(u128, u128), ParseError> {
    let ip = |x: &str| {
        x.parse::<Ipv6Addr>()
            .map(u128::from)
            .or_else(|_| bad(tok, format!("`{x}` is not an IPv6 address")))
    };
    match s.split_once('/') {
        None => Ok((ip(s)?, u128::MAX)),
        Some((a, m)) if m.contains(':') => Ok((ip(a)?, ip(m)?)),
        Some((a, m)) => {
            let n: u32 = m
                .parse()
                .ok()
                .filter(|n| *n <= 128)
                .map_or_else(|| bad(tok, format!("bad prefix `{m}`")), Ok)?;
            Ok((ip(a)?, if n == 0 { 0 } else { !0u128 << (128 - n) }))
        }
    }
}

fn num(tok: &str, s: &str, f: Field) -> Result<(u64, u64), ParseError> {
    let full = f.full();
    let (v, m) = match s.split_once('/') {
        Some((v, m)) => (parse_u64(tok, v)?, parse_u64(tok, m)?),
        None => (parse_u64(tok, s)?, full),
    };
    if v > full || m > full {
        return bad(
            tok,
            format!("value or mask wider than the field ({full:#x})"),
        );
    }
    Ok((v, m))
}

/// Parses one conntrack match field into `m`. `None` if `name` is not one; otherwise the
/// fields it set (for prerequisite messages).
pub fn parse_ct_field(
    m: &mut Match,
    tok: &str,
    name: &str,
    v: &str,
) -> Option<Result<Vec<Field>, ParseError>> {
    let r = (|| -> Result<Vec<Field>, ParseError> {
        Ok(match name {
            "ct_state" => {
                let (val, mask) = parse_ct_state(tok, v)?;
                m.set_ct_state(val, mask);
                vec![Field::CtState]
            }
            "ct_zone" | "ct_mark" | "ct_nw_proto" | "ct_tp_src" | "ct_tp_dst" => {
                let f = match name {
                    "ct_zone" => Field::CtZone,
                    "ct_mark" => Field::CtMark,
                    "ct_nw_proto" => Field::CtNwProto,
                    "ct_tp_src" => Field::CtTpSrc,
                    _ => Field::CtTpDst,
                };
                let (val, mask) = num(tok, v, f)?;
                if f == Field::CtZone && mask != f.full() {
                    return bad(tok, "ct_zone takes no mask");
                }
                m.set_masked(f, val, mask);
                vec![f]
            }
            "ct_label" => {
                let (val, mask) = parse_u128_masked(tok, v)?;
                m.set_ct_label(val, mask);
                vec![Field::CtLabelHi, Field::CtLabelLo]
            }
            "ct_nw_src" | "ct_nw_dst" => {
                let f = if name == "ct_nw_src" {
                    Field::CtNwSrc
                } else {
                    Field::CtNwDst
                };
                let (val, mask) = parse_ipv4_masked(tok, v)?;
                m.set_masked(f, val.into(), mask.into());
                vec![f]
            }
            "ct_ipv6_src" | "ct_ipv6_dst" => {
                let (val, mask) = parse_ipv6(tok, v)?;
                if name == "ct_ipv6_src" {
                    m.set_ct_ipv6_src(val, mask);
                    vec![Field::CtIpv6SrcHi, Field::CtIpv6SrcLo]
                } else {
                    m.set_ct_ipv6_dst(val, mask);
                    vec![Field::CtIpv6DstHi, Field::CtIpv6DstLo]
                }
            }
            _ => return bad(tok, ""),
        })
    })();
    match r {
        Err(e) if e.msg.is_empty() => None,
        r => Some(r),
    }
}

/// The conntrack fields of a match as `ovs-ofctl dump-flows` writes them
/// (`ct_state=+trk+est,ct_zone=5,...`), each preceded by a comma; empty if none.
pub fn format_ct_fields(m: &Match) -> String {
    let mut out = String::new();
    if let Some((v, mk)) = m.get(Field::CtState) {
        let _ = write!(
            out,
            ",ct_state={}",
            wire::ct_state_string(v as u32, mk as u32)
        );
    }
    let num = |out: &mut String, f: Field, n: &str| {
        if let Some((v, mk)) = m.get(f) {
            let hex = f == Field::CtMark;
            let _ = match (mk == f.full(), hex) {
                (true, false) => write!(out, ",{n}={v}"),
                (true, true) => write!(out, ",{n}={v:#x}"),
                (false, _) => write!(out, ",{n}={v:#x}/{mk:#x}"),
            };
        }
    };
    // ovs-ofctl's order: state, zone, mark, label, addresses, protocol, ports.
    num(&mut out, Field::CtZone, "ct_zone");
    num(&mut out, Field::CtMark, "ct_mark");
    if let Some((v, mk)) = m.ct_label() {
        let _ = if mk == u128::MAX {
            write!(out, ",ct_label={v:#x}")
        } else {
            write!(out, ",ct_label={v:#x}/{mk:#x}")
        };
    }
    let ip6 = m.exact(Field::EthType) == Some(0x86dd);
    if ip6 {
        for (hi, lo, n) in [
            (Field::CtIpv6SrcHi, Field::CtIpv6SrcLo, "ct_ipv6_src"),
            (Field::CtIpv6DstHi, Field::CtIpv6DstLo, "ct_ipv6_dst"),
        ] {
            let j = |k: &FlowKey| u128::from(k.get(hi)) << 64 | u128::from(k.get(lo));
            let mk = j(&m.mask);
            if mk == 0 {
                continue;
            }
            let v = Ipv6Addr::from(j(&m.key));
            let _ = if mk == u128::MAX {
                write!(out, ",{n}={v}")
            } else if mk.leading_ones() + mk.trailing_zeros() == 128 {
                write!(out, ",{n}={v}/{}", mk.leading_ones())
            } else {
                write!(out, ",{n}={v}/{}", Ipv6Addr::from(mk))
            };
        }
    } else {
        for (f, n) in [(Field::CtNwSrc, "ct_nw_src"), (Field::CtNwDst, "ct_nw_dst")] {
            if let Some((v, mk)) = m.get(f) {
                let a = Ipv4Addr::from(v as u32);
                let _ = if mk == f.full() {
                    write!(out, ",{n}={a}")
                } else if (mk as u32).leading_ones() + (mk as u32).trailing_zeros() == 32 {
                    write!(out, ",{n}={a}/{}", (mk as u32).leading_ones())
                } else {
                    write!(out, ",{n}={a}/{}", Ipv4Addr::from(mk as u32))
                };
            }
        }
    }
    num(&mut out, Field::CtNwProto, "ct_nw_proto");
    num(&mut out, Field::CtTpSrc, "ct_tp_src");
    num(&mut out, Field::CtTpDst, "ct_tp_dst");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ct_state_flags_parse_as_ovs_writes_them() {
        assert_eq!(parse_ct_state("t", "+trk+est-new").unwrap(), (0x22, 0x23));
        assert_eq!(parse_ct_state("t", "-trk").unwrap(), (0, 0x20));
        assert_eq!(parse_ct_state("t", "+trk+rel").unwrap(), (0x24, 0x24));
        assert_eq!(
            parse_ct_state("t", "+snat+dnat+rpl+inv").unwrap(),
            (0xd8, 0xd8)
        );
        assert_eq!(parse_ct_state("t", "0x21/0x21").unwrap(), (0x21, 0x21));
        assert_eq!(parse_ct_state("t", "0x20").unwrap(), (0x20, 0xff));
        assert!(parse_ct_state("t", "+trk+bogus").is_err());
        assert!(parse_ct_state("t", "+trk-trk").is_err());
        assert!(parse_ct_state("t", "0x100").is_err());
        assert_eq!(wire::ct_state_string(0x22, 0x23), "-new+est+trk");
    }

    #[test]
    fn every_ct_field_parses_into_the_key_and_formats_back() {
        let mut m = Match::ANY;
        m.set(Field::EthType, 0x0800);
        let toks = [
            ("ct_state", "+trk+est"),
            ("ct_zone", "5"),
            ("ct_mark", "0x1/0xff"),
            ("ct_label", "0x2"),
            ("ct_nw_src", "10.0.0.1"),
            ("ct_nw_dst", "10.0.0.0/24"),
            ("ct_nw_proto", "6"),
            ("ct_tp_src", "1"),
            ("ct_tp_dst", "80"),
        ];
        for (n, v) in toks {
            parse_ct_field(&mut m, n, n, v).unwrap().unwrap();
        }
        assert!(parse_ct_field(&mut m, "x", "nw_src", "1.2.3.4").is_none());
        assert!(parse_ct_field(&mut m, "x", "ct_zone", "5/0xff")
            .unwrap()
            .is_err());
        assert_eq!(m.get(Field::CtState), Some((0x22, 0x22)));
        assert_eq!(m.exact(Field::CtZone), Some(5));
        assert_eq!(m.get(Field::CtMark), Some((1, 0xff)));
        assert_eq!(m.ct_label(), Some((2, u128::MAX)));
        assert_eq!(m.exact(Field::CtNwSrc), Some(0x0a00_0001));
        assert_eq!(m.get(Field::CtNwDst), Some((0x0a00_0000, 0xffff_ff00)));
        assert_eq!(
            format_ct_fields(&m),
            ",ct_state=+est+trk,ct_zone=5,ct_mark=0x1/0xff,ct_label=0x2,ct_nw_src=10.0.0.1,\
             ct_nw_dst=10.0.0.0/24,ct_nw_proto=6,ct_tp_src=1,ct_tp_dst=80"
        );
        let mut m6 = Match::ANY;
        m6.set(Field::EthType, 0x86dd);
        parse_ct_field(&mut m6, "t", "ct_ipv6_src", "fd00::1")
            .unwrap()
            .unwrap();
        parse_ct_field(&mut m6, "t", "ct_ipv6_dst", "fd00::/64")
            .unwrap()
            .unwrap();
        assert_eq!(
            format_ct_fields(&m6),
            ",ct_ipv6_src=fd00::1,ct_ipv6_dst=fd00::/64"
        );
    }
}
