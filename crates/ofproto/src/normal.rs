//! The NORMAL action: a learning L2 switch with VLANs (access ports with `tag`, trunks with
//! `trunks`).
//!
//! Consults in_port, vlan_tci, eth_src (learning) and eth_dst, and nothing else, so NORMAL
//! traffic between two MACs needs a handful of megaflows whatever its L3/L4 content. Learning a
//! new MAC or a move sets `Xlate::mac_changed`; the pipeline then bumps its generation so the
//! datapath revalidates megaflows that flooded or pointed at the old port.
//!
//! Threads: runs inside an upcall on a PMD thread; takes the bridge's MAC table mutex once, for
//! the learn and the lookup (lock order: after the table read lock held by the caller).

use crate::bridge::PortConfig;
use crate::mac::Learned;
use crate::types::VLAN_PRESENT;
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

/// Learns the source (unless this is an accounting walk) and looks up the destination port.
fn learn_and_lookup(x: &mut Xlate<'_>, vlan: u16) -> Option<crate::types::OfPort> {
    let src = x.key.get(Field::EthSrc);
    let dst = x.key.get(Field::EthDst);
    let mut macs = match x.br.shared.macs.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    if x.learn && !is_multicast(src) && macs.learn(vlan, src, x.in_of, x.now) != Learned::Refreshed
    {
        x.mac_changed = true;
    }
    if is_multicast(dst) {
        None
    } else {
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
