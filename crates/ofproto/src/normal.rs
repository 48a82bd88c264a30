//! The NORMAL action: a learning L2 switch with VLANs (access ports with `tag`, trunks with
//! `trunks`).
//!
//! Consults in_port, vlan_tci, eth_src (learning) and eth_dst, and nothing else, so NORMAL
//! traffic between two MACs needs a handful of megaflows whatever its L3/L4 content. The
//! translation is tagged with what it looked at in the MAC table ([`mac_tag`] of the source
//! and of the destination, [`limit_tag`] of the ingress port when its limit kept the source
//! from being learned). Entries that appear, move or go are handed to the pipeline
//! (`Xlate::mac_changes`), which revalidates only the megaflows carrying their tags.
//!
//! Threads: runs inside an upcall on a PMD thread; takes the bridge's MAC table mutex once, for
//! the learn and the lookup (lock order: after the table read lock held by the caller).

use crate::bridge::PortConfig;
use crate::mac::MacChanges;
use crate::types::{OfPort, VLAN_PRESENT};
use crate::xlate::Xlate;
use wire::Field;

fn is_multicast(mac: u64) -> bool {
    mac & (1 << 40) != 0
}

/// IEEE 802.1D reserved group addresses 01:80:c2:00:00:00..0f (STP, LACP, LLDP, ...): a
/// bridge must not forward them.
fn is_reserved(mac: u64) -> bool {
    mac & !0xf == 0x0180_c200_0000
}

/// The revalidation tag of a MAC table entry: bridge id, VLAN and MAC (bit 63 clear). Tags
/// that collide only make revalidation remove more than it needs to.
pub fn mac_tag(bridge: u16, vlan: u16, mac: u64) -> u64 {
    (mac & 0xffff_ffff_ffff) | u64::from(vlan & 0xfff) << 48 | u64::from(bridge & 0x7) << 60
}

/// The revalidation tag of "port `port` of bridge `bridge` is at its MAC limit" (bit 63 set).
pub fn limit_tag(bridge: u16, port: OfPort) -> u64 {
    1 << 63 | u64::from(bridge) << 32 | u64::from(port)
}

/// The tags a batch of MAC table changes invalidates.
pub(crate) fn change_tags(bridge: u16, ch: &MacChanges) -> Vec<u64> {
    let keys = ch.keys.iter().map(|&(v, m)| mac_tag(bridge, v, m));
    let freed = ch.freed.iter().map(|&p| limit_tag(bridge, p));
    keys.chain(freed).collect()
}

/// Translates output:NORMAL for the packet in `x`.
pub(crate) fn xlate_normal(x: &mut Xlate<'_>) {
    x.wc.set_exact(Field::VlanTci);
    x.wc.set_exact(Field::EthSrc);
    x.wc.set_exact(Field::EthDst);
    let br = x.br;
    let Some(inp) = br.ports.get(x.in_of) else {
        return;
    };
    let tci = x.key.get(Field::VlanTci) as u16;
    let Some(vlan) = inp.input_vlan(tci) else {
        return; // VLAN not allowed on this port: drop
    };
    if is_reserved(x.key.get(Field::EthDst)) {
        return; // link-local control frames are not forwarded
    }
    let known = learn_and_lookup(x, vlan);
    let outs: Vec<&PortConfig> = match known {
        Some(p) if p == x.in_of => Vec::new(),
        Some(p) => br
            .ports
            .get(p)
            .filter(|c| c.carries(vlan))
            .into_iter()
            .collect(),
        None => br
            .ports
            .iter()
            .filter(|c| c.ofport != x.in_of && c.carries(vlan))
            .collect(),
    };
    output_in_vlan(x, &outs, vlan, tci);
}

/// Learns the source (refreshes it on an accounting walk, neither on a re-check), tags the
/// translation with the entries it looked at, and looks up the destination port.
fn learn_and_lookup(x: &mut Xlate<'_>, vlan: u16) -> Option<OfPort> {
    let src = x.key.get(Field::EthSrc);
    let dst = x.key.get(Field::EthDst);
    let id = x.br.id;
    let mut macs = match x.br.shared.macs.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    if !is_multicast(src) {
        if x.learn {
            macs.learn(vlan, src, x.in_of, x.now);
        } else if x.refresh {
            macs.refresh(vlan, src, x.in_of, x.now);
        }
        x.tags.push(mac_tag(id, vlan, src));
        if macs.entry_port(vlan, src) != Some(x.in_of) && macs.port_full(x.in_of) {
            x.tags.push(limit_tag(id, x.in_of));
        }
    }
    let ch = macs.take_changes();
    if !ch.keys.is_empty() || !ch.freed.is_empty() {
        x.mac_changes.keys.extend(ch.keys);
        x.mac_changes.freed.extend(ch.freed);
    }
    if is_multicast(dst) {
        None
    } else {
        x.tags.push(mac_tag(id, vlan, dst));
        macs.lookup(vlan, dst, x.now)
    }
}

/// Outputs to `outs`, each with the tagging its port wants for `vlan` (the PCP of an incoming
/// tag is kept). Ports needing the packet's current VLAN state go first, then the others: at
/// most one pop/push switch per NORMAL.
fn output_in_vlan(x: &mut Xlate<'_>, outs: &[&PortConfig], vlan: u16, tci: u16) {
    let pcp = if tci & VLAN_PRESENT != 0 {
        tci & 0xe000
    } else {
        0
    };
    let now_tci = x.committed_tci();
    let (same, other): (Vec<&&PortConfig>, Vec<_>) = outs
        .iter()
        .partition(|c| c.output_tci(vlan, pcp) == now_tci);
    for c in same.into_iter().chain(other) {
        x.key
            .set(Field::VlanTci, u64::from(c.output_tci(vlan, pcp)));
        x.emit_output(c.dp_port);
    }
    x.key.set(Field::VlanTci, u64::from(tci));
}
