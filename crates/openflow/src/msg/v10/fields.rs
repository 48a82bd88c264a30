//! OpenFlow 1.0's fixed `ofp_match` (40 bytes, wildcard bits) and its actions, translated to
//! and from the OXM [`Match`] and 1.3 [`Action`]s of the model. Decoding normalises as OVS
//! does: a field whose prerequisite (dl_type, nw_proto) is wildcarded is ignored. Encoding
//! writes what 1.0 can express and leaves the rest wildcarded (masked Ethernet addresses,
//! IPv6, MPLS, metadata, tunnel id; non-prefix IPv4 masks) or out (actions 1.0 lacks), so a
//! 1.0 dump of a rule a 1.3 controller installed can show less than the rule holds.
//! Pure codec; runs on the decoding thread.

use std::net::Ipv4Addr;

use crate::action::Action;
use crate::buf::{Reader, Writer};
use crate::error::{errors, OfError};
use crate::oxm::{field, Match, OxmField};

/// Size of `ofp_match` (1.0).
pub const MATCH_LEN: usize = 40;

/// `ofp_flow_wildcards` (1.0).
pub mod wildcards {
    pub const IN_PORT: u32 = 1 << 0;
    pub const DL_VLAN: u32 = 1 << 1;
    pub const DL_SRC: u32 = 1 << 2;
    pub const DL_DST: u32 = 1 << 3;
    pub const DL_TYPE: u32 = 1 << 4;
    pub const NW_PROTO: u32 = 1 << 5;
    pub const TP_SRC: u32 = 1 << 6;
    pub const TP_DST: u32 = 1 << 7;
    pub const NW_SRC_SHIFT: u32 = 8;
    pub const NW_DST_SHIFT: u32 = 14;
    pub const DL_VLAN_PCP: u32 = 1 << 20;
    pub const NW_TOS: u32 = 1 << 21;
    pub const ALL: u32 = (1 << 22) - 1;
}

/// `OFP_VLAN_NONE`: dl_vlan of an untagged packet.
const VLAN_NONE: u16 = 0xffff;

/// A 1.0 port number (16 bits, reserved ports from 0xff00) as the model's 32-bit one.
pub fn port_from10(p: u16) -> u32 {
    if p >= 0xff00 {
        0xffff_0000 | u32::from(p)
    } else {
        u32::from(p)
    }
}

/// A model port number in 1.0 (ports 0xff00..0xffffff00 cannot be written: `OFPP_NONE`).
pub fn port_to10(p: u32) -> u16 {
    if !(0xff00..0xffff_ff00).contains(&p) {
        p as u16
    } else {
        0xffff
    }
}

fn ip_mask(wc: u32, shift: u32) -> Option<Option<Ipv4Addr>> {
    let n = (wc >> shift) & 0x3f;
    match n {
        0 => Some(None),
        1..=31 => Some(Some(Ipv4Addr::from(u32::MAX << n))),
        _ => None,
    }
}

fn masked(a: Ipv4Addr, m: Option<Ipv4Addr>) -> Ipv4Addr {
    m.map_or(a, |m| Ipv4Addr::from(u32::from(a) & u32::from(m)))
}

/// Decodes a 1.0 `ofp_match` into OXM fields (prerequisite-complete by construction).
pub fn decode_match(r: &mut Reader<'_>) -> Result<Match, OfError> {
    use wildcards as w;
    let mut r = r.sub(MATCH_LEN, errors::BAD_REQUEST_BAD_LEN)?;
    let wc = r.u32()?;
    let in_port = r.u16()?;
    let dl_src = r.array()?;
    let dl_dst = r.array()?;
    let dl_vlan = r.u16()?;
    let pcp = r.u8()?;
    r.skip(1)?;
    let dl_type = r.u16()?;
    let tos = r.u8()?;
    let proto = r.u8()?;
    r.skip(2)?;
    let nw_src = Ipv4Addr::from(r.u32()?);
    let nw_dst = Ipv4Addr::from(r.u32()?);
    let tp_src = r.u16()?;
    let tp_dst = r.u16()?;
    let on = |bit: u32| wc & bit == 0;
    let mut f = Vec::new();
    if on(w::IN_PORT) {
        f.push(OxmField::InPort(port_from10(in_port)));
    }
    if on(w::DL_SRC) {
        f.push(OxmField::EthSrc(dl_src, None));
    }
    if on(w::DL_DST) {
        f.push(OxmField::EthDst(dl_dst, None));
    }
    if on(w::DL_VLAN) && dl_vlan == VLAN_NONE {
        f.push(OxmField::VlanVid(0, None));
    } else {
        if on(w::DL_VLAN) {
            f.push(OxmField::VlanVid(0x1000 | (dl_vlan & 0x0fff), None));
        } else if on(w::DL_VLAN_PCP) {
            f.push(OxmField::VlanVid(0x1000, Some(0x1000)));
        }
        if on(w::DL_VLAN_PCP) {
            f.push(OxmField::VlanPcp(pcp & 7));
        }
    }
    if on(w::DL_TYPE) {
        f.push(OxmField::EthType(dl_type));
        let (src, dst) = (ip_mask(wc, w::NW_SRC_SHIFT), ip_mask(wc, w::NW_DST_SHIFT));
        if dl_type == 0x0800 {
            if on(w::NW_TOS) {
                f.push(OxmField::IpDscp(tos >> 2));
            }
            if let Some(m) = src {
                f.push(OxmField::Ipv4Src(masked(nw_src, m), m));
            }
            if let Some(m) = dst {
                f.push(OxmField::Ipv4Dst(masked(nw_dst, m), m));
            }
            if on(w::NW_PROTO) {
                f.push(OxmField::IpProto(proto));
                let (s, d) = (on(w::TP_SRC), on(w::TP_DST));
                let ports = match proto {
                    6 => Some((OxmField::TcpSrc(tp_src), OxmField::TcpDst(tp_dst))),
                    17 => Some((OxmField::UdpSrc(tp_src), OxmField::UdpDst(tp_dst))),
                    132 => Some((OxmField::SctpSrc(tp_src), OxmField::SctpDst(tp_dst))),
                    1 => Some((
                        OxmField::Icmpv4Type(tp_src as u8),
                        OxmField::Icmpv4Code(tp_dst as u8),
                    )),
                    _ => None,
                };
                if let Some((ps, pd)) = ports {
                    if s {
                        f.push(ps);
                    }
                    if d {
                        f.push(pd);
                    }
                }
            }
        } else if dl_type == 0x0806 {
            if on(w::NW_PROTO) {
                f.push(OxmField::ArpOp(u16::from(proto)));
            }
            if let Some(m) = src {
                f.push(OxmField::ArpSpa(masked(nw_src, m), m));
            }
            if let Some(m) = dst {
                f.push(OxmField::ArpTpa(masked(nw_dst, m), m));
            }
        }
    }
    Ok(Match::new(f))
}

/// Wildcard bits for an IPv4 mask (None if not a prefix).
fn prefix_bits(m: Option<Ipv4Addr>) -> Option<u32> {
    let m = m.map_or(u32::MAX, u32::from);
    let n = m.trailing_zeros();
    (m.checked_shr(n).unwrap_or(0) == u32::MAX.checked_shr(n).unwrap_or(0)).then_some(n)
}

/// Encodes the part of `m` that 1.0 can express as an `ofp_match`.
pub fn encode_match(m: &Match, out: &mut Vec<u8>) {
    use wildcards as w;
    use OxmField as X;
    let mut wc = w::ALL;
    let (mut in_port, mut dl_vlan, mut pcp, mut dl_type, mut tos, mut proto) = (0, 0, 0, 0, 0, 0);
    let (mut dl_src, mut dl_dst) = ([0u8; 6], [0u8; 6]);
    let (mut nw_src, mut nw_dst, mut tp_src, mut tp_dst) = (0u32, 0u32, 0u16, 0u16);
    let ip = |a: Ipv4Addr, mk: Option<Ipv4Addr>, shift: u32, wc: &mut u32, v: &mut u32| {
        if let Some(n) = prefix_bits(mk) {
            *wc = (*wc & !(0x3f << shift)) | (n << shift);
            *v = u32::from(a);
        }
    };
    for f in &m.fields {
        match *f {
            X::InPort(p) => {
                wc &= !w::IN_PORT;
                in_port = port_to10(p);
            }
            X::EthSrc(a, None) => {
                wc &= !w::DL_SRC;
                dl_src = a;
            }
            X::EthDst(a, None) => {
                wc &= !w::DL_DST;
                dl_dst = a;
            }
            X::VlanVid(v, None) => {
                wc &= !w::DL_VLAN;
                dl_vlan = if v & 0x1000 == 0 {
                    VLAN_NONE
                } else {
                    v & 0x0fff
                };
            }
            X::VlanPcp(p) => {
                wc &= !w::DL_VLAN_PCP;
                pcp = p;
            }
            X::EthType(t) => {
                wc &= !w::DL_TYPE;
                dl_type = t;
            }
            X::IpDscp(d) => {
                wc &= !w::NW_TOS;
                tos = d << 2;
            }
            X::IpProto(p) => {
                wc &= !w::NW_PROTO;
                proto = p;
            }
            X::ArpOp(op) if op <= 0xff => {
                wc &= !w::NW_PROTO;
                proto = op as u8;
            }
            X::Ipv4Src(a, mk) | X::ArpSpa(a, mk) => {
                ip(a, mk, w::NW_SRC_SHIFT, &mut wc, &mut nw_src)
            }
            X::Ipv4Dst(a, mk) | X::ArpTpa(a, mk) => {
                ip(a, mk, w::NW_DST_SHIFT, &mut wc, &mut nw_dst)
            }
            X::TcpSrc(p) | X::UdpSrc(p) | X::SctpSrc(p) => {
                wc &= !w::TP_SRC;
                tp_src = p;
            }
            X::TcpDst(p) | X::UdpDst(p) | X::SctpDst(p) => {
                wc &= !w::TP_DST;
                tp_dst = p;
            }
            X::Icmpv4Type(t) => {
                wc &= !w::TP_SRC;
                tp_src = u16::from(t);
            }
            X::Icmpv4Code(c) => {
                wc &= !w::TP_DST;
                tp_dst = u16::from(c);
            }
            _ => {}
        }
    }
    // Only what the decoder reads back (a field whose prerequisite 1.0 cannot state, e.g.
    // `nw_tos` of an IPv6 rule, is left wildcarded), so a decoded match re-encodes stably.
    let typed = |t: u16| wc & w::DL_TYPE == 0 && dl_type == t;
    let (ipv4, arp) = (typed(0x0800), typed(0x0806));
    if !ipv4 {
        wc |= w::NW_TOS;
        tos = 0;
    }
    if !(ipv4 || arp) {
        wc |= w::NW_PROTO | 0x3f << w::NW_SRC_SHIFT | 0x3f << w::NW_DST_SHIFT;
        (proto, nw_src, nw_dst) = (0, 0, 0);
    }
    if !(ipv4 && wc & w::NW_PROTO == 0 && matches!(proto, 1 | 6 | 17 | 132)) {
        wc |= w::TP_SRC | w::TP_DST;
        (tp_src, tp_dst) = (0, 0);
    }
    out.put_u32(wc);
    out.put_u16(in_port);
    out.extend_from_slice(&dl_src);
    out.extend_from_slice(&dl_dst);
    out.put_u16(dl_vlan);
    out.put_u8(pcp);
    out.pad(1);
    out.put_u16(dl_type);
    out.put_u8(tos);
    out.put_u8(proto);
    out.pad(2);
    out.put_u32(nw_src);
    out.put_u32(nw_dst);
    out.put_u16(tp_src);
    out.put_u16(tp_dst);
}

/// `ofp_action_type` (1.0).
pub mod action_type {
    pub const OUTPUT: u16 = 0;
    pub const SET_VLAN_VID: u16 = 1;
    pub const SET_VLAN_PCP: u16 = 2;
    pub const STRIP_VLAN: u16 = 3;
    pub const SET_DL_SRC: u16 = 4;
    pub const SET_DL_DST: u16 = 5;
    pub const SET_NW_SRC: u16 = 6;
    pub const SET_NW_DST: u16 = 7;
    pub const SET_NW_TOS: u16 = 8;
    pub const SET_TP_SRC: u16 = 9;
    pub const SET_TP_DST: u16 = 10;
    pub const ENQUEUE: u16 = 11;
    pub const VENDOR: u16 = 0xffff;
}

/// Bitmap of the 1.0 action types Vireo executes (FEATURES_REPLY `actions`): OUTPUT through
/// SET_TP_DST. ENQUEUE decodes (as SET_QUEUE + OUTPUT) but the pipeline has no queues and
/// refuses it, so it is not advertised.
pub const SUPPORTED_ACTIONS: u32 = (1 << 11) - 1;

/// Decodes a 1.0 action list. `m` is the rule's match (None for PACKET_OUT): it decides
/// whether SET_VLAN_VID/PCP rewrite a tag the match requires or push one (1.0's "set or
/// add"), and which protocol SET_TP_SRC/DST rewrite.
pub fn decode_actions(r: &mut Reader<'_>, m: Option<&Match>) -> Result<Vec<Action>, OfError> {
    use action_type as t;
    let tagged = m.is_some_and(
        |m| matches!(m.get(field::VlanVid), Some(OxmField::VlanVid(v, _)) if v & 0x1000 != 0),
    );
    let proto = m.and_then(|m| match m.get(field::IpProto) {
        Some(OxmField::IpProto(p)) => Some(*p),
        _ => None,
    });
    let mut v = Vec::new();
    while !r.is_empty() {
        let head = r.peek(4).map_err(|_| errors::BAD_ACTION_BAD_LEN)?;
        let atype = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        if len < 8 || len % 8 != 0 {
            return Err(errors::BAD_ACTION_BAD_LEN);
        }
        let mut a = r.sub(len, errors::BAD_ACTION_BAD_LEN)?;
        a.skip(4)?;
        let want = match atype {
            t::SET_DL_SRC | t::SET_DL_DST | t::ENQUEUE => 16,
            t::VENDOR => len,
            _ => 8,
        };
        if len != want {
            return Err(errors::BAD_ACTION_BAD_LEN);
        }
        let set = |f: OxmField| Action::SetField(f);
        match atype {
            t::OUTPUT => {
                let port = port_from10(a.u16()?);
                v.push(Action::Output {
                    port,
                    max_len: a.u16()?,
                });
            }
            t::SET_VLAN_VID => {
                let vid = a.u16()?;
                if vid > 0x0fff {
                    return Err(errors::BAD_ACTION_BAD_ARGUMENT);
                }
                if !tagged {
                    v.push(Action::PushVlan(0x8100));
                }
                v.push(set(OxmField::VlanVid(0x1000 | vid, None)));
            }
            t::SET_VLAN_PCP => {
                let pcp = a.u8()?;
                if pcp > 7 {
                    return Err(errors::BAD_ACTION_BAD_ARGUMENT);
                }
                if !tagged {
                    v.push(Action::PushVlan(0x8100));
                    v.push(set(OxmField::VlanVid(0x1000, None)));
                }
                v.push(set(OxmField::VlanPcp(pcp)));
            }
            t::STRIP_VLAN => v.push(Action::PopVlan),
            t::SET_DL_SRC => v.push(set(OxmField::EthSrc(a.array()?, None))),
            t::SET_DL_DST => v.push(set(OxmField::EthDst(a.array()?, None))),
            t::SET_NW_SRC => v.push(set(OxmField::Ipv4Src(Ipv4Addr::from(a.u32()?), None))),
            t::SET_NW_DST => v.push(set(OxmField::Ipv4Dst(Ipv4Addr::from(a.u32()?), None))),
            t::SET_NW_TOS => {
                let tos = a.u8()?;
                if tos & 3 != 0 {
                    return Err(errors::BAD_ACTION_BAD_ARGUMENT);
                }
                v.push(set(OxmField::IpDscp(tos >> 2)));
            }
            t::SET_TP_SRC | t::SET_TP_DST => {
                let p = a.u16()?;
                let src = atype == t::SET_TP_SRC;
                let f = match (proto, src) {
                    (Some(6), true) => OxmField::TcpSrc(p),
                    (Some(6), false) => OxmField::TcpDst(p),
                    (Some(17), true) => OxmField::UdpSrc(p),
                    (Some(17), false) => OxmField::UdpDst(p),
                    (Some(132), true) => OxmField::SctpSrc(p),
                    (Some(132), false) => OxmField::SctpDst(p),
                    // The 1.0 action names no protocol; without one in the match it cannot
                    // be translated.
                    _ => return Err(errors::BAD_ACTION_MATCH_INCONSISTENT),
                };
                v.push(set(f));
            }
            t::ENQUEUE => {
                let port = port_from10(a.u16()?);
                a.skip(6)?;
                v.push(Action::SetQueue(a.u32()?));
                v.push(Action::Output { port, max_len: 0 });
            }
            // Nicira vendor actions have the same layout in 1.0 (ovs-ofctl writes resubmit,
            // load, move, note... this way without `-O`).
            t::VENDOR => v.push(Action::Nx(crate::nx::NxAction::decode(&mut a, len)?)),
            _ => return Err(errors::BAD_ACTION_BAD_TYPE),
        }
    }
    Ok(v)
}

fn put8(out: &mut Vec<u8>, atype: u16, arg: &[u8]) {
    out.put_u16(atype);
    out.put_u16(8);
    out.extend_from_slice(arg);
    out.pad(4 - arg.len());
}

/// Encodes the actions 1.0 can express (a PUSH_VLAN that a VLAN set-field follows becomes
/// part of SET_VLAN_VID/PCP; SET_QUEUE + OUTPUT becomes ENQUEUE); the rest are left out.
pub fn encode_actions(actions: &[Action], out: &mut Vec<u8>) {
    use action_type as t;
    use OxmField as X;
    let mut i = 0;
    while i < actions.len() {
        let next = actions.get(i + 1);
        match actions[i] {
            Action::Output { port, max_len } => {
                let mut arg = port_to10(port).to_be_bytes().to_vec();
                arg.extend_from_slice(&max_len.to_be_bytes());
                put8(out, t::OUTPUT, &arg);
            }
            Action::SetQueue(q) => {
                if let Some(Action::Output { port, .. }) = next {
                    out.put_u16(t::ENQUEUE);
                    out.put_u16(16);
                    out.put_u16(port_to10(*port));
                    out.pad(6);
                    out.put_u32(q);
                    i += 1;
                }
            }
            Action::PopVlan => put8(out, t::STRIP_VLAN, &[]),
            Action::SetField(f) => match f {
                X::VlanVid(v, _) => {
                    // A push's VID 0 placeholder before SET_VLAN_PCP is not shown.
                    let pcp_next = matches!(next, Some(Action::SetField(X::VlanPcp(_))));
                    if !(pcp_next && v & 0x0fff == 0) {
                        put8(out, t::SET_VLAN_VID, &(v & 0x0fff).to_be_bytes());
                    }
                }
                X::VlanPcp(p) => put8(out, t::SET_VLAN_PCP, &[p]),
                X::EthSrc(a, _) | X::EthDst(a, _) => {
                    let at = if matches!(f, X::EthSrc(..)) {
                        t::SET_DL_SRC
                    } else {
                        t::SET_DL_DST
                    };
                    out.put_u16(at);
                    out.put_u16(16);
                    out.extend_from_slice(&a);
                    out.pad(6);
                }
                X::Ipv4Src(a, _) => put8(out, t::SET_NW_SRC, &a.octets()),
                X::Ipv4Dst(a, _) => put8(out, t::SET_NW_DST, &a.octets()),
                X::IpDscp(d) => put8(out, t::SET_NW_TOS, &[d << 2]),
                X::TcpSrc(p) | X::UdpSrc(p) | X::SctpSrc(p) => {
                    put8(out, t::SET_TP_SRC, &p.to_be_bytes())
                }
                X::TcpDst(p) | X::UdpDst(p) | X::SctpDst(p) => {
                    put8(out, t::SET_TP_DST, &p.to_be_bytes())
                }
                // A set-field on a Nicira field (`tun_metadataN`, registers): 1.0 has only
                // Nicira's masked load for it, as OVS writes it.
                X::Nx(n) => crate::nx::NxAction::RegLoad2(n).encode(out),
                _ => {}
            },
            Action::Nx(ref nx) => nx.encode(out),
            // 1.0 has no DEC_NW_TTL: ovs-ofctl writes Nicira's.
            Action::DecNwTtl => crate::nx::NxAction::DecTtl.encode(out),
            _ => {}
        }
        i += 1;
    }
}
