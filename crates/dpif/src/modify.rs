//! Packet-modifying actions applied to one packet (VLAN push/pop, set-field with checksum
//! updates): the part of action execution that needs no datapath context, shared by the
//! datapath's `execute` and by tests that run a pipeline's answer on a frame.
//!
//! Threads: whichever calls it (PMD threads on the fast path).
use crate::action::Action;
use packet::Packet;
use wire::ethernet::ethertype;
use wire::rewrite;

/// Applies one packet-modifying action (not `Output` or `Userspace`, which need a context).
#[inline(always)]
pub fn modify(pkt: &mut Packet, a: &Action) {
    match a {
        Action::PushVlan(tci) => push_vlan(pkt, *tci),
        Action::PopVlan => pop_vlan(pkt),
        Action::SetEthSrc(m) => {
            rewrite::set_eth_src(pkt.data_mut(), *m);
        }
        Action::SetEthDst(m) => {
            rewrite::set_eth_dst(pkt.data_mut(), *m);
        }
        Action::SetIpv4Src(v) => {
            rewrite::set_ipv4_src(pkt.data_mut(), *v);
        }
        Action::SetIpv4Dst(v) => {
            rewrite::set_ipv4_dst(pkt.data_mut(), *v);
        }
        Action::SetIpDscp(v) => {
            rewrite::set_ip_dscp(pkt.data_mut(), *v);
        }
        Action::SetTpSrc(v) => {
            rewrite::set_tp_src(pkt.data_mut(), *v);
        }
        Action::SetTpDst(v) => {
            rewrite::set_tp_dst(pkt.data_mut(), *v);
        }
        Action::SetIpTtl(v) => {
            rewrite::set_ip_ttl(pkt.data_mut(), *v);
        }
        Action::Output(_)
        | Action::Userspace(_)
        | Action::Meter(_)
        | Action::Ct(_)
        | Action::CtClear => {}
    }
}

/// Inserts an 802.1Q tag (TPID 0x8100) after the MAC addresses. As in OVS, bit 0x1000 of
/// `tci` is the flow key's "tag present" marker (the pipeline passes key-style TCIs) and is not
/// written to the frame; PCP and VID are written as given.
pub fn push_vlan(pkt: &mut Packet, tci: u16) {
    if pkt.len() < 12 {
        return;
    }
    if let Some(gap) = pkt.insert_at(12, 4) {
        let t = (tci & !wire::extract::VLAN_PRESENT).to_be_bytes();
        gap.copy_from_slice(&[0x81, 0x00, t[0], t[1]]);
    }
}

/// Removes the outermost VLAN tag, if the frame has one.
pub fn pop_vlan(pkt: &mut Packet) {
    let d = pkt.data();
    if d.len() >= 18 && ethertype::is_vlan(u16::from_be_bytes([d[12], d[13]])) {
        pkt.remove_at(12, 4);
    }
}
