//! Bridges and their ports: OpenFlow port number ↔ datapath port number ↔ name, and the VLAN
//! configuration NORMAL uses (access `tag`, `trunks`).
//!
//! Owns: [`PortConfig`], the immutable [`PortMap`] snapshot and [`BridgeState`] (a bridge as
//! published in the pipeline's topology). A port change builds a new `BridgeState` sharing the
//! same [`BridgeShared`] (flow tables + MAC table) and publishes it with an atomic swap.
//!
//! Threads: snapshots are read by PMD threads without locks. Lock order inside `BridgeShared`:
//! `tables` (RwLock) before `macs` (Mutex); neither is held across a topology swap.

use crate::mac::MacTable;
use crate::tables::FlowTables;
use crate::types::{OfPort, VLAN_PRESENT, VLAN_VID_MASK};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};

/// One port of a bridge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// Port name (unique in the pipeline).
    pub name: String,
    /// OpenFlow port number.
    pub ofport: OfPort,
    /// Datapath port number (unique in the pipeline).
    pub dp_port: u32,
    /// Access VLAN: untagged traffic in this port belongs to this VLAN, output leaves untagged.
    pub tag: Option<u16>,
    /// Trunk VLANs accepted (empty = all). Ignored when `tag` is set.
    pub trunks: Vec<u16>,
}

impl PortConfig {
    fn trunk_allows(&self, vlan: u16) -> bool {
        self.trunks.is_empty() || self.trunks.contains(&vlan)
    }

    /// The VLAN a packet with this TCI belongs to when it enters here; `None` = drop.
    /// Access ports take untagged and priority-tagged (VID 0) frames; trunks take the VLANs they
    /// list (untagged = VLAN 0).
    pub fn input_vlan(&self, tci: u16) -> Option<u16> {
        let tagged = tci & VLAN_PRESENT != 0;
        let vid = tci & VLAN_VID_MASK;
        match self.tag {
            Some(t) => (!tagged || vid == 0).then_some(t),
            None => {
                let v = if tagged { vid } else { 0 };
                self.trunk_allows(v).then_some(v)
            }
        }
    }

    /// True if frames of `vlan` may leave through this port.
    pub fn carries(&self, vlan: u16) -> bool {
        match self.tag {
            Some(t) => t == vlan,
            None => self.trunk_allows(vlan),
        }
    }

    /// The TCI a frame of `vlan` (priority bits `pcp`, already shifted) has when it leaves here
    /// (0 = untagged).
    pub fn output_tci(&self, vlan: u16, pcp: u16) -> u16 {
        if self.tag.is_some() || vlan == 0 {
            0
        } else {
            pcp | VLAN_PRESENT | vlan
        }
    }
}

/// The ports of a bridge (immutable snapshot).
#[derive(Clone, Debug, Default)]
pub struct PortMap {
    by_of: BTreeMap<OfPort, PortConfig>,
    by_name: HashMap<String, OfPort>,
}

impl PortMap {
    /// Port by OpenFlow number.
    pub fn get(&self, of: OfPort) -> Option<&PortConfig> {
        self.by_of.get(&of)
    }

    /// Port by name.
    pub fn by_name(&self, name: &str) -> Option<&PortConfig> {
        self.by_of.get(self.by_name.get(name)?)
    }

    /// Ports in OpenFlow number order.
    pub fn iter(&self) -> impl Iterator<Item = &PortConfig> {
        self.by_of.values()
    }

    /// Lowest unused OpenFlow port number (from 1).
    pub fn free_ofport(&self) -> OfPort {
        let mut n = 1;
        for &p in self.by_of.keys() {
            if p == n {
                n += 1;
            } else if p > n {
                break;
            }
        }
        n
    }

    pub(crate) fn insert(&mut self, p: PortConfig) {
        self.by_name.insert(p.name.clone(), p.ofport);
        self.by_of.insert(p.ofport, p);
    }

    pub(crate) fn remove(&mut self, name: &str) -> Option<PortConfig> {
        let of = self.by_name.remove(name)?;
        self.by_of.remove(&of)
    }

    /// Resolves a port name (or a number) to an OpenFlow port number.
    pub fn resolve(&self, name: &str) -> Option<OfPort> {
        self.by_name.get(name).copied()
    }

    /// Name of an OpenFlow port.
    pub fn name_of(&self, of: OfPort) -> Option<&str> {
        self.by_of.get(&of).map(|p| p.name.as_str())
    }
}

/// Mutable per-bridge state shared by every snapshot of the bridge.
pub struct BridgeShared {
    /// Flow tables (write-locked briefly by flow-mods).
    pub(crate) tables: RwLock<FlowTables>,
    /// MAC learning table.
    pub(crate) macs: Mutex<MacTable>,
    /// OpenFlow ports whose link is down (fast-failover / select liveness).
    pub(crate) down: Mutex<HashSet<OfPort>>,
    /// Standalone fail mode with no controller: translate as NORMAL, ignoring the tables.
    pub(crate) fail_open: AtomicBool,
    /// A table miss of the top-level walk sends a packet-in (reason no_match) before the
    /// packet is dropped: OpenFlow 1.0's table-miss behaviour, on while a 1.0 controller is
    /// connected (as Open vSwitch does for controllers before 1.3).
    pub(crate) miss_to_controller: AtomicBool,
    /// The bridge's Geneve option map (`tun_metadataN`), set by `NXT_TLV_TABLE_MOD`; read
    /// by dump formatting and by native encapsulation.
    pub(crate) tlv: RwLock<wire::tunmd::TlvTable>,
}

/// A bridge as published in the topology.
pub struct BridgeState {
    /// Bridge name.
    pub name: String,
    /// Small number identifying the bridge in packet-in cookies.
    pub id: u16,
    /// Ports.
    pub ports: PortMap,
    /// OpenFlow `ofp_port_config` bits set by PORT_MOD (absent = 0), see [`port_config`].
    pub port_of_config: BTreeMap<OfPort, u32>,
    pub(crate) shared: Arc<BridgeShared>,
}

/// `ofp_port_config` bits a PORT_MOD may set; translation honours them.
pub mod port_config {
    /// Administratively down: nothing is received from or forwarded to the port.
    pub const PORT_DOWN: u32 = 1 << 0;
    /// Drop every packet received on the port.
    pub const NO_RECV: u32 = 1 << 2;
    /// Drop every packet forwarded to the port.
    pub const NO_FWD: u32 = 1 << 5;
    /// Send no packet-in for packets received on the port.
    pub const NO_PACKET_IN: u32 = 1 << 6;
    /// The bits above.
    pub const ALL: u32 = PORT_DOWN | NO_RECV | NO_FWD | NO_PACKET_IN;
}

impl BridgeState {
    pub(crate) fn with_ports(&self, ports: PortMap) -> BridgeState {
        let port_of_config = self
            .port_of_config
            .iter()
            .filter(|(p, _)| ports.get(**p).is_some())
            .map(|(p, c)| (*p, *c))
            .collect();
        BridgeState {
            name: self.name.clone(),
            id: self.id,
            ports,
            port_of_config,
            shared: Arc::clone(&self.shared),
        }
    }

    /// The port's PORT_MOD config bits (0 for an unknown port).
    pub fn of_config(&self, ofport: OfPort) -> u32 {
        self.port_of_config.get(&ofport).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(tag: Option<u16>, trunks: &[u16]) -> PortConfig {
        PortConfig {
            name: "p".into(),
            ofport: 1,
            dp_port: 1,
            tag,
            trunks: trunks.to_vec(),
        }
    }

    #[test]
    fn access_and_trunk_vlan_rules() {
        let access = port(Some(10), &[]);
        assert_eq!(access.input_vlan(0), Some(10));
        assert_eq!(
            access.input_vlan(VLAN_PRESENT | 0x2000),
            Some(10),
            "priority tag"
        );
        assert_eq!(access.input_vlan(VLAN_PRESENT | 20), None);
        assert!(access.carries(10) && !access.carries(20));
        assert_eq!(access.output_tci(10, 0), 0);
        let trunk = port(None, &[20, 30]);
        assert_eq!(trunk.input_vlan(VLAN_PRESENT | 20), Some(20));
        assert_eq!(trunk.input_vlan(VLAN_PRESENT | 10), None);
        assert_eq!(trunk.input_vlan(0), None, "untagged is VLAN 0, not listed");
        assert_eq!(trunk.output_tci(20, 0x4000), 0x4000 | VLAN_PRESENT | 20);
        let all = port(None, &[]);
        assert_eq!(all.input_vlan(0), Some(0));
        assert!(all.carries(4000));
    }

    #[test]
    fn free_ofport_fills_gaps() {
        let mut m = PortMap::default();
        for (n, of) in [("a", 1), ("b", 3)] {
            m.insert(PortConfig {
                name: n.into(),
                ofport: of,
                dp_port: of,
                tag: None,
                trunks: vec![],
            });
        }
        assert_eq!(m.free_ofport(), 2);
        assert_eq!(m.resolve("b"), Some(3));
        assert_eq!(m.remove("a").map(|p| p.ofport), Some(1));
        assert_eq!(m.free_ofport(), 1);
    }
}
