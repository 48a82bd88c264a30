//! Packet-modifying actions applied to one packet (VLAN push/pop, set-field with checksum
//! updates): the part of action execution that needs no datapath context, shared by the
//! datapath's `execute` and by tests that run a pipeline's answer on a frame. Rewrites keep a
//! partial checksum (`packet::Offload`) right, and VLAN push/pop move the offload's offsets.
//!
//! Threads: whichever calls it (PMD threads on the fast path).
use crate::action::Action;
use packet::{Offload, Packet};
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
        Action::SetIpv4Src(v) => keep_partial(pkt, true, |d| {
            rewrite::set_ipv4_src(d, *v);
        }),
        Action::SetIpv4Dst(v) => keep_partial(pkt, true, |d| {
            rewrite::set_ipv4_dst(d, *v);
        }),
        Action::SetIpDscp(v) => {
            rewrite::set_ip_dscp(pkt.data_mut(), *v);
        }
        Action::SetTpSrc(v) => keep_partial(pkt, false, |d| {
            rewrite::set_tp_src(d, *v);
        }),
        Action::SetTpDst(v) => keep_partial(pkt, false, |d| {
            rewrite::set_tp_dst(d, *v);
        }),
        Action::SetIpTtl(v) => {
            rewrite::set_ip_ttl(pkt.data_mut(), *v);
        }
        Action::SetTunnel { id, src, dst } => {
            pkt.meta.tun = packet::TunMeta {
                id: *id as u32,
                src: *src,
                dst: *dst,
            };
        }
        Action::Output(_)
        | Action::Userspace(_)
        | Action::Meter(_)
        | Action::Ct(_)
        | Action::CtClear
        | Action::TnlPush(_)
        | Action::TnlPop(_) => {}
    }
}

/// Where the transport checksum field of a packet with an offload is (partial checksum or a
/// TSO frame's TCP checksum).
pub fn partial_field(o: Offload) -> Option<usize> {
    match o {
        Offload::None => None,
        Offload::Csum { start, offset } => Some(usize::from(start) + usize::from(offset)),
        Offload::Tso { l4, .. } => Some(usize::from(l4) + 16),
    }
}

/// Runs a rewrite whose incremental checksum update (RFC 1624, in `wire::rewrite`) assumes a
/// complete transport checksum, keeping a partial one right: a partial field holds the
/// pseudo-header sum uncomplemented, so for a pseudo-header field (`pseudo`: an address) the
/// field is complemented around the update (the sum then moves by exactly the change); for a
/// field the final checksum will cover from the frame itself (a port), the field is restored.
#[inline(always)]
fn keep_partial(pkt: &mut Packet, pseudo: bool, f: impl FnOnce(&mut [u8])) {
    let at = match partial_field(pkt.meta.offload()) {
        Some(at) if at + 2 <= pkt.len() => at,
        _ => return f(pkt.data_mut()),
    };
    let d = pkt.data_mut();
    let old = [d[at], d[at + 1]];
    if pseudo {
        d[at] = !old[0];
        d[at + 1] = !old[1];
        f(d);
        d[at] = !d[at];
        d[at + 1] = !d[at + 1];
    } else {
        f(d);
        d[at..at + 2].copy_from_slice(&old);
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
        if pkt.meta.has_offload() {
            let o = pkt.meta.offload();
            pkt.meta.set_offload(o.shifted(12, 4).unwrap_or(o));
        }
    }
}

/// Removes the outermost VLAN tag, if the frame has one.
pub fn pop_vlan(pkt: &mut Packet) {
    let d = pkt.data();
    if d.len() >= 18 && ethertype::is_vlan(u16::from_be_bytes([d[12], d[13]])) {
        pkt.remove_at(12, 4);
        if pkt.meta.has_offload() {
            let o = pkt.meta.offload();
            pkt.meta.set_offload(o.shifted(16, -4).unwrap_or(o));
        }
    }
}

/// A copy of `pkt`'s frame with its offload finished (partial checksum completed; a GSO frame
/// given its whole-frame lengths and checksums, not cut), for a consumer that reads the bytes
/// as they would be on a wire, such as a controller's packet-in. `None` when there is nothing
/// to finish (use the frame as is). Offsets that do not fit the frame leave the copy as it was:
/// they were checked at input, so only an action that broke the headers gets there.
pub fn finished_copy(pkt: &Packet) -> Option<Vec<u8>> {
    let mut f = match pkt.meta.offload() {
        Offload::None => return None,
        _ => pkt.data().to_vec(),
    };
    let _ = match pkt.meta.offload() {
        Offload::Csum { start, offset } => {
            wire::offload::complete_partial(&mut f, usize::from(start), usize::from(offset))
        }
        Offload::Tso { .. } => wire::offload::finish_unsegmented(&mut f),
        Offload::None => Ok(()),
    };
    Some(f)
}
