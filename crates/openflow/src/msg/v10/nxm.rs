//! Nicira Extended Match (NXM), the match format of OpenFlow 1.0 sessions that asked for it
//! with `NXT_SET_FLOW_FORMAT` (what plain `ovs-ofctl` does for a flow that the fixed 1.0
//! match cannot hold, e.g. `reg0=5`), translated to and from the OXM [`Match`] of the model.
//!
//! An NXM is a list of TLVs with the OXM header layout. The `NXM_OF_*` class (`0x0000`)
//! carries OpenFlow 1.0's fields; `NXM_NX_*` (`0x0001`) Nicira's (IPv6, ARP hardware
//! addresses, ECN, registers, tunnel and conntrack fields); OXM classes may appear too
//! (`ovs-ofctl` writes `metadata` as `OXM_OF_METADATA`). Each standard field is rewritten to
//! its OXM basic TLV and decoded by [`OxmField::decode`] (so lengths, masks and values get
//! the same checks as in 1.3); the three whose shape differs are converted: `NXM_OF_IN_PORT`
//! (16-bit port), `NXM_OF_VLAN_TCI` (one 16-bit TCI for `vlan_vid` and `vlan_pcp`) and
//! `NXM_OF_IP_TOS` (the TOS byte, DSCP in its high six bits). `NXM_NX_COOKIE` is not a match
//! field: it is returned apart (cookie and mask of a FLOW_MOD or flow statistics request).
//! Pure codec; runs on the decoding thread.

use crate::buf::{Reader, Writer};
use crate::error::{errors, OfError};
use crate::nx::{class, split_header};
use crate::oxm::{field, Match, OxmField, VID_PRESENT};

use super::fields::{port_from10, port_to10};

/// `NXM_NX_COOKIE`: the flow cookie (and mask) in a FLOW_MOD's or statistics request's NXM.
const NX_COOKIE: u8 = 30;
/// `NXM_OF_IN_PORT`, `NXM_OF_VLAN_TCI`, `NXM_OF_IP_TOS`.
const OF_IN_PORT: u8 = 0;
const OF_VLAN_TCI: u8 = 4;
const OF_IP_TOS: u8 = 5;

/// (NXM class, NXM field, OXM basic field) of the fields whose payload is the same in both.
const SAME_PAYLOAD: [(u16, u8, u8); 26] = [
    (class::NXM0, 1, field::EthDst),
    (class::NXM0, 2, field::EthSrc),
    (class::NXM0, 3, field::EthType),
    (class::NXM0, 6, field::IpProto),
    (class::NXM0, 7, field::Ipv4Src),
    (class::NXM0, 8, field::Ipv4Dst),
    (class::NXM0, 9, field::TcpSrc),
    (class::NXM0, 10, field::TcpDst),
    (class::NXM0, 11, field::UdpSrc),
    (class::NXM0, 12, field::UdpDst),
    (class::NXM0, 13, field::Icmpv4Type),
    (class::NXM0, 14, field::Icmpv4Code),
    (class::NXM0, 15, field::ArpOp),
    (class::NXM0, 16, field::ArpSpa),
    (class::NXM0, 17, field::ArpTpa),
    (class::NXM1, 17, field::ArpSha),
    (class::NXM1, 18, field::ArpTha),
    (class::NXM1, 19, field::Ipv6Src),
    (class::NXM1, 20, field::Ipv6Dst),
    (class::NXM1, 21, field::Icmpv6Type),
    (class::NXM1, 22, field::Icmpv6Code),
    (class::NXM1, 23, field::Ipv6NdTarget),
    (class::NXM1, 24, field::Ipv6NdSll),
    (class::NXM1, 25, field::Ipv6NdTll),
    (class::NXM1, 27, field::Ipv6Flabel),
    (class::NXM1, 28, field::IpEcn),
];

/// A decoded NXM: the match and the cookie (value, mask) it carried, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NxMatch {
    pub matches: Match,
    pub cookie: Option<(u64, u64)>,
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

/// Decodes `len` bytes of NXM TLVs (not the padding after them). Errors use BAD_MATCH
/// codes, as in 1.3; prerequisites are checked ([`Match::check_prereqs`]).
pub fn decode(r: &mut Reader<'_>, len: usize) -> Result<NxMatch, OfError> {
    let mut r = r.sub(len, errors::BAD_MATCH_BAD_LEN)?;
    let mut oxm: Vec<u8> = Vec::with_capacity(len + 16);
    let mut cookie = None;
    let mut seen: Vec<(u16, u8)> = Vec::new();
    while !r.is_empty() {
        let hdr = r.u32().map_err(|_| errors::BAD_MATCH_BAD_LEN)?;
        let (cls, num, has_mask, plen) = split_header(hdr);
        let payload = r
            .bytes(usize::from(plen))
            .map_err(|_| errors::BAD_MATCH_BAD_LEN)?;
        if seen.contains(&(cls, num)) {
            return Err(errors::BAD_MATCH_DUP_FIELD);
        }
        seen.push((cls, num));
        let (width, maskable) = match (cls, num) {
            (class::NXM0, OF_IN_PORT | OF_VLAN_TCI) => (2, num == OF_VLAN_TCI),
            (class::NXM0, OF_IP_TOS) => (1, false),
            (class::NXM1, NX_COOKIE) => (8, true),
            _ => {
                rewrite(cls, num, has_mask, payload, &mut oxm)?;
                continue;
            }
        };
        if usize::from(plen) != width * if has_mask { 2 } else { 1 } {
            return Err(errors::BAD_MATCH_BAD_LEN);
        }
        if has_mask && !maskable {
            return Err(errors::BAD_MATCH_BAD_MASK);
        }
        let v = be(&payload[..width]);
        let m = has_mask.then(|| be(&payload[width..]));
        if m.is_some_and(|m| v & !m != 0) {
            return Err(errors::BAD_MATCH_BAD_WILDCARDS);
        }
        match num {
            NX_COOKIE => cookie = Some((v, m.unwrap_or(u64::MAX))),
            OF_IN_PORT => OxmField::InPort(port_from10(v as u16)).encode(&mut oxm),
            OF_IP_TOS if v & 3 != 0 => return Err(errors::BAD_MATCH_BAD_VALUE),
            OF_IP_TOS => OxmField::IpDscp((v >> 2) as u8).encode(&mut oxm),
            _ => tci(v as u16, m.map_or(0xffff, |m| m as u16), &mut oxm)?,
        }
    }
    let mut fields: Vec<OxmField> = Vec::new();
    let mut or = Reader::new(&oxm, errors::BAD_MATCH_BAD_LEN);
    // One field may come in two forms (NXM_OF_IP_SRC and OXM_OF_IPV4_SRC): once only.
    let key = |f: &OxmField| match f {
        OxmField::Nx(n) => (n.class, n.field),
        f => (class::OXM_BASIC, f.field_num()),
    };
    while !or.is_empty() {
        let f = OxmField::decode(&mut or)?;
        if fields.iter().any(|g| key(g) == key(&f)) {
            return Err(errors::BAD_MATCH_DUP_FIELD);
        }
        fields.push(f);
    }
    let matches = Match::new(fields);
    matches.check_prereqs()?;
    Ok(NxMatch { matches, cookie })
}

/// An NXM TLV as the OXM TLV the model decodes: standard fields under their OXM basic
/// number (an all-ones mask dropped, since 1.3 does not let every field carry one), the
/// rest (registers, tunnel, conntrack, OXM classes) unchanged.
fn rewrite(
    cls: u16,
    num: u8,
    has_mask: bool,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), OfError> {
    let Some(&(_, _, basic)) = SAME_PAYLOAD.iter().find(|(c, n, _)| *c == cls && *n == num) else {
        if !matches!(cls, class::NXM1 | class::OXM_BASIC | class::PKT_REG) {
            return Err(errors::BAD_MATCH_BAD_FIELD);
        }
        out.put_u32(crate::nx::header(cls, num, payload.len() as u8) | u32::from(has_mask) << 8);
        out.extend_from_slice(payload);
        return Ok(());
    };
    let (v, m) = if has_mask {
        if !payload.len().is_multiple_of(2) {
            return Err(errors::BAD_MATCH_BAD_LEN);
        }
        payload.split_at(payload.len() / 2)
    } else {
        (payload, &[][..])
    };
    let full = has_mask && m.iter().all(|&b| b == 0xff);
    let mask = has_mask && !full;
    let len = if mask { payload.len() } else { v.len() };
    out.put_u32(crate::nx::header(class::OXM_BASIC, basic, len as u8) | u32::from(mask) << 8);
    out.extend_from_slice(v);
    if mask {
        out.extend_from_slice(m);
    }
    Ok(())
}

/// `NXM_OF_VLAN_TCI` (value, mask) as OXM `vlan_vid` (and `vlan_pcp`). The CFI bit is
/// OXM's `OFPVID_PRESENT`; a TCI of 0 with the CFI bit in the mask is "no tag".
fn tci(v: u16, m: u16, out: &mut Vec<u8>) -> Result<(), OfError> {
    const CFI: u16 = VID_PRESENT;
    if m & CFI == 0 {
        // Without the CFI bit a VID or PCP match means nothing OpenFlow can say.
        return if m == 0 {
            Ok(())
        } else {
            Err(errors::BAD_MATCH_BAD_MASK)
        };
    }
    if v & CFI == 0 {
        if v != 0 {
            return Err(errors::BAD_MATCH_BAD_VALUE);
        }
        OxmField::VlanVid(0, None).encode(out);
        return Ok(());
    }
    let vid_mask = m & 0x0fff;
    let vid = match vid_mask {
        0x0fff => OxmField::VlanVid(v & 0x1fff, None),
        _ => OxmField::VlanVid(v & (CFI | vid_mask), Some(CFI | vid_mask)),
    };
    vid.encode(out);
    match m & 0xe000 {
        0 => {}
        0xe000 => OxmField::VlanPcp((v >> 13) as u8).encode(out),
        _ => return Err(errors::BAD_MATCH_BAD_MASK),
    }
    Ok(())
}

/// Writes `m` (and a cookie match, if given) as NXM TLVs, as Open vSwitch would write the
/// same flow: standard fields in their `NXM_OF_*` / `NXM_NX_*` form, fields NXM lacks
/// (`metadata`, SCTP, MPLS, ...) in OXM form. Returns the NXM's length (no padding written).
pub fn encode(m: &Match, cookie: Option<(u64, u64)>, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    let mut tci_v = 0u16;
    let mut tci_m = 0u16;
    let mut tci_at = None;
    for f in &m.fields {
        if matches!(f, OxmField::VlanVid(..) | OxmField::VlanPcp(_)) {
            tci_at.get_or_insert(out.len());
        }
        match *f {
            OxmField::InPort(p) => {
                out.put_u32(crate::nx::header(class::NXM0, OF_IN_PORT, 2));
                out.put_u16(port_to10(p));
            }
            OxmField::VlanVid(v, mask) => {
                tci_v |= v & 0x1fff;
                tci_m |= mask.unwrap_or(0x1fff) & 0x1fff;
            }
            OxmField::VlanPcp(p) => {
                tci_v |= u16::from(p & 7) << 13;
                tci_m |= 0xe000;
            }
            OxmField::IpDscp(d) => {
                out.put_u32(crate::nx::header(class::NXM0, OF_IP_TOS, 1));
                out.put_u8(d << 2);
            }
            _ => {
                let at = out.len();
                f.encode(out);
                let (cls, num, has_mask, len) = split_header(u32::from_be_bytes([
                    out[at],
                    out[at + 1],
                    out[at + 2],
                    out[at + 3],
                ]));
                if let Some(&(c, n, _)) = SAME_PAYLOAD
                    .iter()
                    .find(|(_, _, b)| cls == class::OXM_BASIC && *b == num)
                {
                    // An all-ones mask is no mask (as the decoder reads it).
                    let w = usize::from(len) / 2;
                    let full = has_mask && out[at + 4 + w..].iter().all(|&b| b == 0xff);
                    if full {
                        out.truncate(at + 4 + w);
                    }
                    let (len, masked) = if full {
                        (w as u8, false)
                    } else {
                        (len, has_mask)
                    };
                    let h = crate::nx::header(c, n, len) | u32::from(masked) << 8;
                    out[at..at + 4].copy_from_slice(&h.to_be_bytes());
                }
            }
        }
    }
    if let Some(at) = tci_at.filter(|_| tci_m != 0) {
        // The TCI stands where the first VLAN field stood (order within an NXM is free;
        // keeping it makes a decoded NXM re-encode to its own bytes).
        let mut t = Vec::with_capacity(8);
        if tci_v & VID_PRESENT == 0 {
            // "No tag": the whole TCI is zero.
            t.put_u32(crate::nx::header(class::NXM0, OF_VLAN_TCI, 2));
            t.put_u16(0);
        } else if tci_m == 0xffff {
            t.put_u32(crate::nx::header(class::NXM0, OF_VLAN_TCI, 2));
            t.put_u16(tci_v);
        } else {
            t.put_u32(crate::nx::header(class::NXM0, OF_VLAN_TCI, 4) | 0x100);
            t.put_u16(tci_v);
            t.put_u16(tci_m);
        }
        out.splice(at..at, t);
    }
    if let Some((v, mk)) = cookie.filter(|c| c.1 != 0) {
        if mk == u64::MAX {
            out.put_u32(crate::nx::header(class::NXM1, NX_COOKIE, 8));
            out.put_u64(v);
        } else {
            out.put_u32(crate::nx::header(class::NXM1, NX_COOKIE, 16) | 0x100);
            out.put_u64(v);
            out.put_u64(mk);
        }
    }
    out.len() - start
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn dec(hex: &str) -> Result<NxMatch, OfError> {
        let b = unhex(hex);
        decode(&mut Reader::new(&b, errors::BAD_REQUEST_BAD_LEN), b.len())
    }

    fn enc(m: &NxMatch) -> String {
        let mut out = Vec::new();
        encode(&m.matches, m.cookie, &mut out);
        out.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// NXMs as ovs-ofctl 3.1 writes them (from `tests/data/nxm_flow_mods.tsv`).
    #[test]
    fn ovs_ofctl_matches_decode_and_reencode() {
        // in_port=3,dl_vlan=10,dl_vlan_pcp=3,reg1=0x10/0xf0
        let hex = "00000002000300000802700a0001030800000010000000f0";
        let m = dec(hex).unwrap();
        assert_eq!(
            m.matches.fields[..3],
            [
                OxmField::InPort(3),
                OxmField::VlanVid(0x100a, None),
                OxmField::VlanPcp(3)
            ]
        );
        assert_eq!(enc(&m), hex);
        // dl_vlan=10 alone: the VID and CFI bits.
        let m = NxMatch {
            matches: Match::new(vec![OxmField::VlanVid(0x100a, None)]),
            cookie: None,
        };
        assert_eq!(enc(&m), "00000904100a1fff");
        assert_eq!(dec("00000904100a1fff").unwrap(), m);
        // dl_vlan=0xffff (no tag).
        let m = dec("000008020000").unwrap();
        assert_eq!(m.matches.fields, [OxmField::VlanVid(0, None)]);
        assert_eq!(enc(&m), "000008020000");
        // vlan_tci=0x1000/0x1000 (any tag).
        let m = dec("0000090410001000").unwrap();
        assert_eq!(m.matches.fields, [OxmField::VlanVid(0x1000, Some(0x1000))]);
        assert_eq!(enc(&m), "0000090410001000");
        // tcp,nw_src=10.0.0.0/8,tp_dst=80
        let hex = "00000602080000000c010600000f080a000000ff000000000014020050";
        let m = dec(hex).unwrap();
        assert_eq!(
            m.matches.fields,
            [
                OxmField::EthType(0x0800),
                OxmField::IpProto(6),
                OxmField::Ipv4Src(
                    Ipv4Addr::new(10, 0, 0, 0),
                    Some(Ipv4Addr::new(255, 0, 0, 0))
                ),
                OxmField::TcpDst(80),
            ]
        );
        assert_eq!(enc(&m), hex);
        // nw_tos=8 is DSCP 2; metadata stays OXM.
        let m = dec("0000060286dd00000a0108").unwrap();
        assert_eq!(m.matches.fields[1], OxmField::IpDscp(2));
        assert_eq!(enc(&m), "0000060286dd00000a0108");
        let m = dec("800004080000000000000005").unwrap();
        assert_eq!(m.matches.fields, [OxmField::Metadata(5, None)]);
        assert_eq!(enc(&m), "800004080000000000000005");
    }

    #[test]
    fn an_all_ones_mask_is_written_as_none() {
        let m = Match::new(vec![
            OxmField::EthType(0x0800),
            OxmField::Ipv4Src(
                std::net::Ipv4Addr::new(10, 0, 0, 1),
                Some(std::net::Ipv4Addr::BROADCAST),
            ),
        ]);
        let mut out = Vec::new();
        encode(&m, None, &mut out);
        let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "00000602080000000e040a000001");
    }

    #[test]
    fn cookie_is_apart_from_the_match() {
        let m = dec("00013d10000000000000000500000000000000ff").unwrap();
        assert_eq!(m.cookie, Some((5, 0xff)));
        assert!(m.matches.fields.is_empty());
        assert_eq!(enc(&m), "00013d10000000000000000500000000000000ff");
    }

    #[test]
    fn malformed_nxms_get_match_errors() {
        // Prerequisite missing: nw_src without ip.
        assert_eq!(dec("00000e040a000001"), Err(errors::BAD_MATCH_BAD_PREREQ));
        // Unknown NXM_OF field 40; NXM_NX_IP_FRAG (not in the pipeline's vocabulary).
        assert_eq!(dec("0000500100"), Err(errors::BAD_MATCH_BAD_FIELD));
        assert_eq!(dec("0001340100"), Err(errors::BAD_MATCH_BAD_FIELD));
        // Class 0x0002.
        assert_eq!(dec("0002000400000001"), Err(errors::BAD_MATCH_BAD_FIELD));
        // in_port of 3 bytes; TLV longer than the NXM.
        assert_eq!(dec("00000003000300"), Err(errors::BAD_MATCH_BAD_LEN));
        assert_eq!(dec("0000000400"), Err(errors::BAD_MATCH_BAD_LEN));
        // in_port in its NXM and its OXM form.
        assert_eq!(
            dec("0000000200038000000400000003"),
            Err(errors::BAD_MATCH_DUP_FIELD)
        );
        // Masked in_port; value outside its mask; a field twice.
        assert_eq!(dec("000001040003ffff"), Err(errors::BAD_MATCH_BAD_MASK));
        assert_eq!(
            dec("0000090410051000"),
            Err(errors::BAD_MATCH_BAD_WILDCARDS)
        );
        assert_eq!(
            dec("000000020003000000020004"),
            Err(errors::BAD_MATCH_DUP_FIELD)
        );
        // TOS with ECN bits; a PCP-only mask without CFI.
        assert_eq!(
            dec("00000602080000000a0109"),
            Err(errors::BAD_MATCH_BAD_VALUE)
        );
        assert_eq!(dec("000009046000e000"), Err(errors::BAD_MATCH_BAD_MASK));
    }
}
