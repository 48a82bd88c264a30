//! Text form of a masked flow key, as `dump-megaflows` shows it.
//!
//! Owns: [`format_match`]. Threads: control thread (display only).
use crate::flow::{Field, FlowKey};
use std::fmt::Write;
use std::net::{Ipv4Addr, Ipv6Addr};

fn name(f: Field, arp: bool) -> &'static str {
    match f {
        Field::InPort => "in_port",
        Field::EthType => "eth_type",
        Field::VlanTci => "vlan_tci",
        Field::EthDst => "eth_dst",
        Field::IpProto => "ip_proto",
        Field::IpTos => "ip_tos",
        Field::EthSrc => "eth_src",
        Field::IpTtl => "ip_ttl",
        Field::IpFrag => "ip_frag",
        Field::TpSrc => "tp_src",
        Field::TpDst => "tp_dst",
        Field::TcpFlags => "tcp_flags",
        Field::ArpOp => "arp_op",
        Field::Ipv4Src if arp => "arp_spa",
        Field::Ipv4Src => "ipv4_src",
        Field::Ipv4Dst if arp => "arp_tpa",
        Field::Ipv4Dst => "ipv4_dst",
        Field::ArpSha => "arp_sha",
        Field::ArpTha => "arp_tha",
        Field::Ipv6SrcHi | Field::Ipv6SrcLo => "ipv6_src",
        Field::Ipv6DstHi | Field::Ipv6DstLo => "ipv6_dst",
        Field::RecircId => "recirc_id",
        Field::CtState => "ct_state",
        Field::CtNwProto => "ct_nw_proto",
        Field::CtZone => "ct_zone",
        Field::CtMark => "ct_mark",
        Field::CtTpSrc => "ct_tp_src",
        Field::CtTpDst => "ct_tp_dst",
        Field::CtLabelHi | Field::CtLabelLo => "ct_label",
        Field::CtNwSrc => "ct_nw_src",
        Field::CtNwDst => "ct_nw_dst",
        Field::CtIpv6SrcHi | Field::CtIpv6SrcLo => "ct_ipv6_src",
        Field::CtIpv6DstHi | Field::CtIpv6DstLo => "ct_ipv6_dst",
        Field::TunId => "tun_id",
        Field::TunSrc => "tun_src",
        Field::TunDst => "tun_dst",
        Field::TunIpv6SrcHi | Field::TunIpv6SrcLo => "tun_ipv6_src",
        Field::TunIpv6DstHi | Field::TunIpv6DstLo => "tun_ipv6_dst",
    }
}

fn mac(v: u64) -> String {
    let m = FlowKey::u64_to_mac(v);
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

fn v6(key: &FlowKey, mask: &FlowKey, hi: Field, lo: Field) -> String {
    let join = |k: &FlowKey| Ipv6Addr::from(u128::from(k.get(hi)) << 64 | u128::from(k.get(lo)));
    let (v, m) = (join(&key.masked(mask)), u128::from(join(mask)));
    if m == u128::MAX {
        v.to_string()
    } else if m.leading_ones() + m.trailing_zeros() == 128 {
        format!("{v}/{}", m.leading_ones())
    } else {
        format!("{v}/{}", Ipv6Addr::from(m))
    }
}

/// `name=value[/mask]` for every field `mask` touches, comma-separated; `*` if none.
pub(crate) fn format_match(key: &FlowKey, mask: &FlowKey) -> String {
    let arp = mask.get(Field::EthType) == 0xffff && key.get(Field::EthType) == 0x0806;
    let ip6 = mask.get(Field::EthType) == 0xffff && key.get(Field::EthType) == 0x86dd;
    let mut out = String::new();
    for f in Field::ALL {
        let m = mask.get(f);
        let skip = match f {
            Field::ArpSha | Field::ArpTha => !arp,
            Field::Ipv6SrcHi | Field::Ipv6DstHi => arp,
            Field::Ipv6SrcLo => arp || mask.get(Field::Ipv6SrcHi) != 0,
            Field::Ipv6DstLo => arp || mask.get(Field::Ipv6DstHi) != 0,
            // Every megaflow matches recirc_id exactly; shown only when not 0.
            Field::RecircId => key.get(Field::RecircId) & m == 0,
            Field::CtNwSrc | Field::CtNwDst => ip6,
            Field::CtIpv6SrcHi => !ip6,
            Field::CtIpv6SrcLo => !ip6 || mask.get(Field::CtIpv6SrcHi) != 0,
            Field::CtIpv6DstLo => mask.get(Field::CtIpv6DstHi) != 0,
            Field::CtLabelLo => mask.get(Field::CtLabelHi) != 0,
            Field::TunIpv6SrcLo => mask.get(Field::TunIpv6SrcHi) != 0,
            Field::TunIpv6DstLo => mask.get(Field::TunIpv6DstHi) != 0,
            _ => false,
        };
        if m == 0 || skip {
            continue;
        }
        let v = key.get(f) & m;
        let exact = m == f.full();
        if !out.is_empty() {
            out.push(',');
        }
        let _ = write!(out, "{}=", name(f, arp));
        let _ = match f {
            Field::EthDst | Field::EthSrc | Field::ArpSha | Field::ArpTha if exact => {
                write!(out, "{}", mac(v))
            }
            Field::EthDst | Field::EthSrc | Field::ArpSha | Field::ArpTha => {
                write!(out, "{}/{}", mac(v), mac(m))
            }
            Field::Ipv4Src
            | Field::Ipv4Dst
            | Field::CtNwSrc
            | Field::CtNwDst
            | Field::TunSrc
            | Field::TunDst
                if exact =>
            {
                write!(out, "{}", Ipv4Addr::from(v as u32))
            }
            Field::Ipv4Src
            | Field::Ipv4Dst
            | Field::CtNwSrc
            | Field::CtNwDst
            | Field::TunSrc
            | Field::TunDst => {
                write!(
                    out,
                    "{}/{}",
                    Ipv4Addr::from(v as u32),
                    Ipv4Addr::from(m as u32)
                )
            }
            Field::Ipv6SrcHi | Field::Ipv6SrcLo => {
                out.push_str(&v6(key, mask, Field::Ipv6SrcHi, Field::Ipv6SrcLo));
                Ok(())
            }
            Field::Ipv6DstHi | Field::Ipv6DstLo => {
                out.push_str(&v6(key, mask, Field::Ipv6DstHi, Field::Ipv6DstLo));
                Ok(())
            }
            Field::CtIpv6SrcHi | Field::CtIpv6SrcLo => {
                out.push_str(&v6(key, mask, Field::CtIpv6SrcHi, Field::CtIpv6SrcLo));
                Ok(())
            }
            Field::CtIpv6DstHi | Field::CtIpv6DstLo => {
                out.push_str(&v6(key, mask, Field::CtIpv6DstHi, Field::CtIpv6DstLo));
                Ok(())
            }
            Field::TunIpv6SrcHi | Field::TunIpv6SrcLo => {
                out.push_str(&v6(key, mask, Field::TunIpv6SrcHi, Field::TunIpv6SrcLo));
                Ok(())
            }
            Field::TunIpv6DstHi | Field::TunIpv6DstLo => {
                out.push_str(&v6(key, mask, Field::TunIpv6DstHi, Field::TunIpv6DstLo));
                Ok(())
            }
            Field::CtLabelHi | Field::CtLabelLo => {
                let join = |k: &FlowKey| {
                    u128::from(k.get(Field::CtLabelHi)) << 64 | u128::from(k.get(Field::CtLabelLo))
                };
                let (v, m) = (join(&key.masked(mask)), join(mask));
                if m == u128::MAX {
                    write!(out, "0x{v:x}")
                } else {
                    write!(out, "0x{v:x}/0x{m:x}")
                }
            }
            Field::CtState => {
                out.push_str(&ct_state_string(v as u32, m as u32));
                Ok(())
            }
            Field::EthType if exact => write!(out, "0x{v:04x}"),
            Field::VlanTci | Field::TcpFlags | Field::CtMark | Field::TunId if exact => {
                write!(out, "0x{v:x}")
            }
            Field::VlanTci | Field::TcpFlags | Field::EthType | Field::CtMark | Field::TunId => {
                write!(out, "0x{v:x}/0x{m:x}")
            }
            _ if exact => write!(out, "{v}"),
            _ => write!(out, "{v}/0x{m:x}"),
        };
    }
    if out.is_empty() {
        out.push('*');
    }
    out
}

/// `ct_state` bits by name, in OVS's order of bits.
pub const CT_STATE_NAMES: [(&str, u32); 8] = [
    ("new", 0x01),
    ("est", 0x02),
    ("rel", 0x04),
    ("rpl", 0x08),
    ("inv", 0x10),
    ("trk", 0x20),
    ("snat", 0x40),
    ("dnat", 0x80),
];

/// `ct_state` as ovs-ofctl writes it: `+flag` for each matched bit that is set, `-flag` for
/// each matched bit that is clear (e.g. `+trk+est-new`); bits without a name in hex.
pub fn ct_state_string(value: u32, mask: u32) -> String {
    let mut out = String::new();
    let mut rest = mask;
    for (n, bit) in CT_STATE_NAMES {
        if mask & bit != 0 {
            out.push(if value & bit != 0 { '+' } else { '-' });
            out.push_str(n);
            rest &= !bit;
        }
    }
    if rest != 0 {
        let _ = write!(out, "0x{:x}/0x{rest:x}", value & rest);
    }
    out
}
