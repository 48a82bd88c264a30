//! Conversions between the OpenFlow wire types (`openflow`) and the pipeline's vocabulary
//! (`ofproto::types`): matches (OXM ↔ masked flow key), actions, instructions, flow-mods,
//! group-mods, and pipeline errors → OpenFlow error type/code.
//!
//! Pure functions; run on whichever thread handles the message. Anything the flow key cannot
//! hold is refused with the error OpenFlow names (BAD_MATCH/BAD_FIELD, BAD_ACTION/BAD_TYPE,
//! BAD_ACTION/BAD_SET_TYPE, BAD_INSTRUCTION/UNSUP_INST), never silently dropped.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::convert_nx::{
    ct_to_wire, load_to_wire, move_to_wire, nx_to_pipeline, nxm_match_field, nxm_set_field,
    regs_to_wire, resubmit_to_wire, set_nx_to_wire,
};
use ofproto::nx::NxField;
use ofproto::types::{ethertype, ipproto};
use ofproto::{Instruction as PInst, Match as PMatch, OfAction, SetField};
use openflow::nx::NxAction;
use openflow::oxm::OxmField as X;
use openflow::{errors, Action as WAction, Instruction as WInst, OfError};
use wire::{Field, FlowKey};

/// Maps a pipeline error onto the OpenFlow error to send back.
pub fn of_error(e: &ofproto::Error) -> OfError {
    match e {
        ofproto::Error::Of(e) => {
            let (t, c) = e.type_code();
            OfError::new(t, c)
        }
        ofproto::Error::NoSuchPort(_) => errors::BAD_REQUEST_BAD_PORT,
        ofproto::Error::Parse(_) => errors::BAD_REQUEST_BAD_LEN,
        _ => errors::BAD_REQUEST_EPERM,
    }
}

fn mac_mask(m: Option<[u8; 6]>) -> [u8; 6] {
    m.unwrap_or([0xff; 6])
}

fn v4(a: Ipv4Addr, m: Option<Ipv4Addr>) -> (u64, u64) {
    (
        u64::from(u32::from(a)),
        u64::from(m.map_or(u32::MAX, u32::from)),
    )
}

/// OXM match → pipeline match. Fields the key cannot hold give BAD_MATCH/BAD_FIELD.
pub fn match_to_pipeline(m: &openflow::Match) -> Result<PMatch, OfError> {
    let mut out = PMatch::ANY;
    for f in &m.fields {
        match *f {
            X::Nx(ref nx) => match crate::convert_ct::ct_match_field(&mut out, nx) {
                Some(true) => {}
                Some(false) => return Err(errors::BAD_MATCH_BAD_VALUE),
                None => nxm_match_field(&mut out, nx)?,
            },
            X::Metadata(v, mk) => {
                out.set_reg(NxField::Metadata, v.into(), mk.unwrap_or(u64::MAX).into());
            }
            X::TunnelId(v, mk) => {
                out.set_masked(Field::TunId, v, mk.unwrap_or(u64::MAX));
            }
            _ if l2_field(&mut out, f) || l3_field(&mut out, f) => {}
            _ => return Err(errors::BAD_MATCH_BAD_FIELD),
        }
    }
    Ok(out)
}

/// Ingress port, Ethernet, VLAN and ARP fields; false if `f` is none of them.
fn l2_field(out: &mut PMatch, f: &X) -> bool {
    match *f {
        X::InPort(p) => out.set_in_port(p),
        X::EthDst(v, mk) => out.set_mac(Field::EthDst, v, mac_mask(mk)),
        X::EthSrc(v, mk) => out.set_mac(Field::EthSrc, v, mac_mask(mk)),
        X::EthType(t) => out.set(Field::EthType, t.into()),
        X::VlanVid(v, mk) => out.set_vlan_vid(v, mk.unwrap_or(0x1fff)),
        X::VlanPcp(p) => out.set_vlan_pcp(p),
        X::ArpOp(o) => out.set(Field::ArpOp, o.into()),
        X::ArpSha(v, mk) => out.set_mac(Field::ArpSha, v, mac_mask(mk)),
        X::ArpTha(v, mk) => out.set_mac(Field::ArpTha, v, mac_mask(mk)),
        _ => return false,
    };
    true
}

/// IP and transport fields; false if `f` is none of them.
fn l3_field(out: &mut PMatch, f: &X) -> bool {
    match *f {
        X::IpDscp(d) => out.set_ip_dscp(d),
        X::IpEcn(e) => out.set_ip_ecn(e),
        X::IpProto(p) => out.set(Field::IpProto, p.into()),
        X::Ipv4Src(a, mk) | X::ArpSpa(a, mk) => {
            let (v, m) = v4(a, mk);
            out.set_masked(Field::Ipv4Src, v, m)
        }
        X::Ipv4Dst(a, mk) | X::ArpTpa(a, mk) => {
            let (v, m) = v4(a, mk);
            out.set_masked(Field::Ipv4Dst, v, m)
        }
        X::TcpSrc(p) | X::UdpSrc(p) | X::SctpSrc(p) => out.set(Field::TpSrc, p.into()),
        X::TcpDst(p) | X::UdpDst(p) | X::SctpDst(p) => out.set(Field::TpDst, p.into()),
        X::Icmpv4Type(t) | X::Icmpv6Type(t) => out.set(Field::TpSrc, t.into()),
        X::Icmpv4Code(c) | X::Icmpv6Code(c) => out.set(Field::TpDst, c.into()),
        X::Ipv6Src(a, mk) => out.set_ipv6_src(u128::from(a), mk.map_or(u128::MAX, u128::from)),
        X::Ipv6Dst(a, mk) => out.set_ipv6_dst(u128::from(a), mk.map_or(u128::MAX, u128::from)),
        _ => return false,
    };
    true
}

fn u64_mac(v: u64) -> [u8; 6] {
    let b = v.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

fn opt_mask<T: PartialEq>(m: T, full: T) -> Option<T> {
    (m != full).then_some(m)
}

fn mac_field(m: &PMatch, f: Field) -> Option<([u8; 6], Option<[u8; 6]>)> {
    let (v, mk) = m.get(f)?;
    Some((u64_mac(v), opt_mask(u64_mac(mk), [0xff; 6])))
}

fn ipv4_field(m: &PMatch, f: Field) -> Option<(Ipv4Addr, Option<Ipv4Addr>)> {
    let (v, mk) = m.get(f)?;
    let mask = Ipv4Addr::from(mk as u32);
    Some((
        Ipv4Addr::from(v as u32),
        opt_mask(mask, Ipv4Addr::BROADCAST),
    ))
}

fn ipv6_field(m: &PMatch, hi: Field, lo: Field) -> Option<(Ipv6Addr, Option<Ipv6Addr>)> {
    let (vh, mh) = m.get(hi).unwrap_or((0, 0));
    let (vl, ml) = m.get(lo).unwrap_or((0, 0));
    if mh == 0 && ml == 0 {
        return None;
    }
    let v = u128::from(vh) << 64 | u128::from(vl);
    let mk = u128::from(mh) << 64 | u128::from(ml);
    Some((
        Ipv6Addr::from(v),
        opt_mask(Ipv6Addr::from(mk), Ipv6Addr::from(u128::MAX)),
    ))
}

/// Pipeline match → OXM match (prerequisites first). Key bits OpenFlow 1.3 has no OXM for
/// (TTL, fragment bits, TCP flags) are left out.
pub fn match_to_wire(m: &PMatch) -> openflow::Match {
    let mut f = Vec::new();
    push_l2(m, &mut f);
    let eth_type = m.exact(Field::EthType).map(|t| t as u16);
    let proto = m.exact(Field::IpProto).map(|p| p as u8);
    if let Some(p) = proto {
        f.push(X::IpProto(p));
    }
    let arp = eth_type == Some(ethertype::ARP);
    if let Some((a, mk)) = ipv4_field(m, Field::Ipv4Src) {
        f.push(if arp {
            X::ArpSpa(a, mk)
        } else {
            X::Ipv4Src(a, mk)
        });
    }
    if let Some((a, mk)) = ipv4_field(m, Field::Ipv4Dst) {
        f.push(if arp {
            X::ArpTpa(a, mk)
        } else {
            X::Ipv4Dst(a, mk)
        });
    }
    if !arp {
        if let Some((a, mk)) = ipv6_field(m, Field::Ipv6SrcHi, Field::Ipv6SrcLo) {
            f.push(X::Ipv6Src(a, mk));
        }
        if let Some((a, mk)) = ipv6_field(m, Field::Ipv6DstHi, Field::Ipv6DstLo) {
            f.push(X::Ipv6Dst(a, mk));
        }
    }
    push_l4(m, proto, &mut f);
    regs_to_wire(m, &mut f);
    crate::convert_nx::tun_to_wire(m, &mut f);
    crate::convert_ct::ct_to_wire(m, &mut f);
    if let Some(o) = m.exact(Field::ArpOp) {
        f.push(X::ArpOp(o as u16));
    }
    // ARP hardware addresses share key bits with the IPv6 source address.
    if arp {
        if let Some((v, mk)) = mac_field(m, Field::ArpSha) {
            f.push(X::ArpSha(v, mk));
        }
        if let Some((v, mk)) = mac_field(m, Field::ArpTha) {
            f.push(X::ArpTha(v, mk));
        }
    }
    openflow::Match::new(f)
}

/// in_port, MACs, eth_type, VLAN and IP TOS fields.
fn push_l2(m: &PMatch, f: &mut Vec<X>) {
    if let Some(p) = m.exact(Field::InPort) {
        f.push(X::InPort(p as u32));
    }
    if let Some((v, mk)) = mac_field(m, Field::EthDst) {
        f.push(X::EthDst(v, mk));
    }
    if let Some((v, mk)) = mac_field(m, Field::EthSrc) {
        f.push(X::EthSrc(v, mk));
    }
    if let Some(t) = m.exact(Field::EthType) {
        f.push(X::EthType(t as u16));
    }
    if let Some((v, mk)) = m.get(Field::VlanTci) {
        let (v, mk) = (v as u16, mk as u16);
        if mk & 0x1fff != 0 {
            f.push(X::VlanVid(v & 0x1fff, opt_mask(mk & 0x1fff, 0x1fff)));
        }
        if mk & 0xe000 != 0 {
            f.push(X::VlanPcp(((v >> 13) & 7) as u8));
        }
    }
    if let Some((v, mk)) = m.get(Field::IpTos) {
        if mk & 0xfc != 0 {
            f.push(X::IpDscp((v >> 2) as u8 & 0x3f));
        }
        if mk & 3 != 0 {
            f.push(X::IpEcn(v as u8 & 3));
        }
    }
}

/// Builds an OXM field from a 16-bit key value.
type OxmOf16 = fn(u16) -> X;

fn push_l4(m: &PMatch, proto: Option<u8>, f: &mut Vec<X>) {
    let src = m.exact(Field::TpSrc).map(|v| v as u16);
    let dst = m.exact(Field::TpDst).map(|v| v as u16);
    let (mk_src, mk_dst): (OxmOf16, OxmOf16) = match proto {
        Some(ipproto::TCP) => (X::TcpSrc, X::TcpDst),
        Some(ipproto::UDP) => (X::UdpSrc, X::UdpDst),
        Some(132) => (X::SctpSrc, X::SctpDst),
        Some(ipproto::ICMP) => (|v| X::Icmpv4Type(v as u8), |v| X::Icmpv4Code(v as u8)),
        Some(ipproto::ICMPV6) => (|v| X::Icmpv6Type(v as u8), |v| X::Icmpv6Code(v as u8)),
        _ => return,
    };
    f.extend(src.map(mk_src));
    f.extend(dst.map(mk_dst));
}

fn set_field_to_pipeline(f: &X) -> Result<SetField, OfError> {
    Ok(match *f {
        X::EthSrc(m, _) => SetField::EthSrc(m),
        X::EthDst(m, _) => SetField::EthDst(m),
        X::VlanVid(v, _) => SetField::VlanVid(v & 0x0fff),
        X::VlanPcp(p) => SetField::VlanPcp(p),
        X::Ipv4Src(a, _) => SetField::Ipv4Src(a.into()),
        X::Ipv4Dst(a, _) => SetField::Ipv4Dst(a.into()),
        X::IpDscp(d) => SetField::IpDscp(d),
        X::TcpSrc(p) => SetField::TcpSrc(p),
        X::TcpDst(p) => SetField::TcpDst(p),
        X::UdpSrc(p) => SetField::UdpSrc(p),
        X::UdpDst(p) => SetField::UdpDst(p),
        X::Metadata(v, _) => SetField::Nx(NxField::Metadata, v.into()),
        X::TunnelId(v, _) => SetField::Nx(NxField::TunId, v.into()),
        _ => return Err(errors::BAD_ACTION_BAD_SET_TYPE),
    })
}

/// Wire action → pipeline actions (one, or several for a masked register set-field).
/// Actions the datapath cannot execute give BAD_ACTION.
pub fn action_to_pipeline_multi(a: &WAction) -> Result<Vec<OfAction>, OfError> {
    match a {
        WAction::Nx(nx) => nx_to_pipeline(nx),
        // OpenFlow 1.5's copy-field is what NXAST_REG_MOVE is in 1.0-1.4.
        WAction::CopyField {
            n_bits,
            src_ofs,
            dst_ofs,
            src,
            dst,
        } => nx_to_pipeline(&NxAction::RegMove {
            n_bits: *n_bits,
            src_ofs: *src_ofs,
            dst_ofs: *dst_ofs,
            src: *src,
            dst: *dst,
        }),
        WAction::SetField(X::Nx(f)) => nxm_set_field(f),
        WAction::DecNwTtl => Ok(vec![OfAction::DecTtl]),
        a => Ok(vec![action_to_pipeline(a)?]),
    }
}

/// Wire action → pipeline action. Actions the datapath cannot execute give BAD_ACTION.
pub fn action_to_pipeline(a: &WAction) -> Result<OfAction, OfError> {
    Ok(match a {
        WAction::Nx(_)
        | WAction::SetField(X::Nx(_))
        | WAction::DecNwTtl
        | WAction::CopyField { .. } => {
            let mut v = action_to_pipeline_multi(a)?;
            if v.len() != 1 {
                return Err(errors::BAD_ACTION_BAD_SET_ARGUMENT);
            }
            v.remove(0)
        }
        WAction::Output { port, max_len } => OfAction::Output {
            port: *port,
            max_len: *max_len,
        },
        WAction::PushVlan(t) => OfAction::PushVlan(*t),
        WAction::PopVlan => OfAction::PopVlan,
        WAction::Group(g) => OfAction::Group(*g),
        WAction::SetField(f) => OfAction::SetField(set_field_to_pipeline(f)?),
        _ => return Err(errors::BAD_ACTION_BAD_TYPE),
    })
}

/// A wire action list → pipeline actions.
pub fn actions_to_pipeline(acts: &[WAction]) -> Result<Vec<OfAction>, OfError> {
    let mut out = Vec::with_capacity(acts.len());
    for a in acts {
        out.extend(action_to_pipeline_multi(a)?);
    }
    Ok(out)
}

/// Pipeline action → wire action.
pub fn action_to_wire(a: &OfAction) -> WAction {
    match *a {
        OfAction::Ct(ref ct) => ct_to_wire(ct),
        OfAction::CtClear => WAction::Nx(NxAction::CtClear),
        OfAction::Resubmit { port, table } => resubmit_to_wire(port, table),
        OfAction::RegLoad {
            dst,
            ofs,
            nbits,
            value,
        } => load_to_wire(dst, ofs, nbits, value),
        OfAction::RegMove {
            src,
            src_ofs,
            dst,
            dst_ofs,
            nbits,
        } => move_to_wire(src, src_ofs, dst, dst_ofs, nbits),
        OfAction::DecTtl => WAction::DecNwTtl,
        OfAction::Note(ref b) => WAction::Nx(NxAction::Note(b.clone())),

        OfAction::Output { port, max_len } => WAction::Output { port, max_len },
        OfAction::PushVlan(t) => WAction::PushVlan(t),
        OfAction::PopVlan => WAction::PopVlan,
        OfAction::Group(g) => WAction::Group(g),
        OfAction::SetField(sf) => WAction::SetField(match sf {
            SetField::EthSrc(m) => X::EthSrc(m, None),
            SetField::EthDst(m) => X::EthDst(m, None),
            SetField::VlanVid(v) => X::VlanVid(0x1000 | (v & 0x0fff), None),
            SetField::VlanPcp(p) => X::VlanPcp(p),
            SetField::Ipv4Src(a) => X::Ipv4Src(a.into(), None),
            SetField::Ipv4Dst(a) => X::Ipv4Dst(a.into(), None),
            SetField::IpDscp(d) => X::IpDscp(d),
            SetField::TcpSrc(p) => X::TcpSrc(p),
            SetField::TcpDst(p) => X::TcpDst(p),
            SetField::UdpSrc(p) => X::UdpSrc(p),
            SetField::UdpDst(p) => X::UdpDst(p),
            SetField::Nx(f, v) => return set_nx_to_wire(f, v),
        }),
    }
}

fn list_to_wire(acts: &[OfAction]) -> Vec<WAction> {
    acts.iter().map(action_to_wire).collect()
}

/// Wire instructions → pipeline instructions (metadata is not supported).
pub fn instructions_to_pipeline(insts: &[WInst]) -> Result<Vec<PInst>, OfError> {
    insts
        .iter()
        .map(|i| {
            Ok(match i {
                WInst::GotoTable(t) => PInst::GotoTable(*t),
                WInst::ApplyActions(a) => PInst::ApplyActions(actions_to_pipeline(a)?),
                WInst::WriteActions(a) => PInst::WriteActions(actions_to_pipeline(a)?),
                WInst::ClearActions => PInst::ClearActions,
                WInst::Meter(m) => PInst::Meter(*m),
                WInst::WriteMetadata { .. } => return Err(errors::BAD_INSTRUCTION_UNSUP_INST),
            })
        })
        .collect()
}

/// Pipeline instructions → wire instructions.
pub fn instructions_to_wire(insts: &[PInst]) -> Vec<WInst> {
    insts
        .iter()
        .map(|i| match i {
            PInst::ApplyActions(a) => WInst::ApplyActions(list_to_wire(a)),
            PInst::WriteActions(a) => WInst::WriteActions(list_to_wire(a)),
            PInst::ClearActions => WInst::ClearActions,
            PInst::GotoTable(t) => WInst::GotoTable(*t),
            PInst::Meter(m) => WInst::Meter(*m),
        })
        .collect()
}

/// A decoded FLOW_MOD → the pipeline's flow-mod.
pub fn flow_mod_to_pipeline(fm: &openflow::FlowMod) -> Result<ofproto::FlowMod, OfError> {
    use ofproto::FlowModCommand as P;
    use openflow::FlowModCommand as W;
    let command = match fm.command {
        W::Add => P::Add,
        W::Modify => P::Modify,
        W::ModifyStrict => P::ModifyStrict,
        W::Delete => P::Delete,
        W::DeleteStrict => P::DeleteStrict,
    };
    let instructions = if fm.command.is_delete() {
        Vec::new()
    } else {
        instructions_to_pipeline(&fm.instructions)?
    };
    Ok(ofproto::FlowMod {
        command,
        table_id: fm.table_id,
        priority: fm.priority,
        cookie: fm.cookie,
        cookie_mask: fm.cookie_mask,
        idle_timeout: fm.idle_timeout,
        hard_timeout: fm.hard_timeout,
        flags: fm.flags,
        out_port: fm.out_port,
        out_group: fm.out_group,
        match_: match_to_pipeline(&fm.matches)?,
        instructions,
    })
}

/// A flow-stats request → the filter [`ofproto::Pipeline::flow_stats`] takes.
pub fn stats_filter(r: &openflow::FlowStatsRequest) -> Result<ofproto::FlowMod, OfError> {
    let mut f = ofproto::FlowMod::delete(match_to_pipeline(&r.matches)?);
    f.table_id = r.table_id;
    f.out_port = r.out_port;
    f.out_group = r.out_group;
    f.cookie = r.cookie;
    f.cookie_mask = r.cookie_mask;
    Ok(f)
}

/// A decoded GROUP_MOD → the pipeline's group-mod (1.5 bucket ids and bucket commands
/// included).
pub fn group_mod_to_pipeline(gm: &openflow::GroupMod) -> Result<ofproto::GroupMod, OfError> {
    use ofproto::{GroupCommand as PC, GroupType as PT};
    use openflow::{GroupModCommand as WC, GroupType as WT};
    let buckets = gm
        .buckets
        .iter()
        .map(|b| {
            Ok(ofproto::Bucket {
                weight: b.weight,
                watch_port: b.watch_port,
                watch_group: b.watch_group,
                actions: actions_to_pipeline(&b.actions)?,
                bucket_id: b.bucket_id,
            })
        })
        .collect::<Result<Vec<_>, OfError>>()?;
    Ok(ofproto::GroupMod {
        command: match gm.command {
            WC::Add => PC::Add,
            WC::Modify => PC::Modify,
            WC::Delete => PC::Delete,
            WC::InsertBucket => PC::InsertBucket,
            WC::RemoveBucket => PC::RemoveBucket,
        },
        group_type: match gm.group_type {
            WT::All => PT::All,
            WT::Select => PT::Select,
            WT::Indirect => PT::Indirect,
            WT::FastFailover => PT::FastFailover,
        },
        group_id: gm.group_id,
        buckets,
        command_bucket_id: gm.command_bucket_id,
    })
}

/// A pipeline group description → the wire GROUP_DESC entry.
pub fn group_desc_to_wire(d: &ofproto::GroupDesc) -> openflow::GroupDesc {
    use ofproto::GroupType as PT;
    use openflow::GroupType as WT;
    openflow::GroupDesc {
        group_type: match d.group_type {
            PT::All => WT::All,
            PT::Select => WT::Select,
            PT::Indirect => WT::Indirect,
            PT::FastFailover => WT::FastFailover,
        },
        group_id: d.group_id,
        buckets: d
            .buckets
            .iter()
            .map(|b| openflow::Bucket {
                weight: b.weight,
                watch_port: b.watch_port,
                watch_group: b.watch_group,
                actions: list_to_wire(&b.actions),
                bucket_id: b.bucket_id,
            })
            .collect(),
    }
}

/// The in_port-only match of a PACKET_IN.
pub fn packet_in_match(in_port: u32) -> openflow::Match {
    openflow::Match::new(vec![X::InPort(in_port)])
}

/// A flow key's in_port (for tests and packet-ins).
pub fn key_in_port(k: &FlowKey) -> u32 {
    k.get(Field::InPort) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_round_trips_through_the_key() {
        let m = openflow::Match::new(vec![
            X::InPort(3),
            X::EthDst([0, 1, 2, 0, 0, 0], Some([0xff, 0xff, 0xff, 0, 0, 0])),
            X::EthType(0x0800),
            X::VlanVid(0x1000 | 10, None),
            X::VlanPcp(5),
            X::IpDscp(46),
            X::IpProto(6),
            X::Ipv4Src(
                Ipv4Addr::new(10, 0, 0, 0),
                Some(Ipv4Addr::new(255, 255, 255, 0)),
            ),
            X::TcpDst(80),
        ]);
        let p = match_to_pipeline(&m).unwrap();
        assert_eq!(p.exact(Field::TpDst), Some(80));
        assert_eq!(match_to_wire(&p), m);
        let arp = openflow::Match::new(vec![
            X::EthType(0x0806),
            X::ArpSpa(Ipv4Addr::new(1, 2, 3, 4), None),
            X::ArpOp(1),
        ]);
        assert_eq!(match_to_wire(&match_to_pipeline(&arp).unwrap()), arp);
        let v6 = openflow::Match::new(vec![
            X::EthType(0x86dd),
            X::IpProto(58),
            X::Ipv6Src("2001:db8::1".parse().unwrap(), None),
            X::Icmpv6Type(135),
        ]);
        assert_eq!(match_to_wire(&match_to_pipeline(&v6).unwrap()), v6);
    }

    #[test]
    fn unsupported_fields_and_actions_are_refused() {
        // Tunnel fields are key fields now: they round-trip.
        let tun = openflow::Match::new(vec![X::TunnelId(1, Some(0xff))]);
        assert_eq!(match_to_wire(&match_to_pipeline(&tun).unwrap()), tun);
        let mpls = openflow::Match::new(vec![X::EthType(0x8847), X::MplsLabel(5)]);
        assert_eq!(match_to_pipeline(&mpls), Err(errors::BAD_MATCH_BAD_FIELD));
        assert_eq!(
            action_to_pipeline(&WAction::DecMplsTtl),
            Err(errors::BAD_ACTION_BAD_TYPE)
        );
        assert_eq!(
            action_to_pipeline(&WAction::SetField(X::MplsLabel(1))),
            Err(errors::BAD_ACTION_BAD_SET_TYPE)
        );
        assert_eq!(
            instructions_to_pipeline(&[WInst::WriteMetadata {
                metadata: 1,
                mask: 1
            }]),
            Err(errors::BAD_INSTRUCTION_UNSUP_INST)
        );
        let meter = instructions_to_pipeline(&[WInst::Meter(1)]).unwrap();
        assert_eq!(meter, vec![PInst::Meter(1)]);
        assert_eq!(instructions_to_wire(&meter), vec![WInst::Meter(1)]);
    }

    #[test]
    fn actions_round_trip() {
        let acts = vec![
            WAction::PushVlan(0x8100),
            WAction::SetField(X::VlanVid(0x1000 | 20, None)),
            WAction::Output {
                port: 0xffff_fffd,
                max_len: 128,
            },
            WAction::Group(7),
            WAction::PopVlan,
        ];
        let p = actions_to_pipeline(&acts).unwrap();
        assert_eq!(p.iter().map(action_to_wire).collect::<Vec<_>>(), acts);
    }
}
