//! The pipeline of every bridge: topology (bridges, ports, datapath port → bridge), the control
//! API the daemon calls, and the translation walk; the [`dpif::Upcall`] implementation PMD
//! threads call on a miss is in `crate::upcall`.
//!
//! Publication: the topology is an immutable [`Topology`] behind an `ArcSwap`; control changes
//! build a new one and swap it (serialized by `ctl`). Flow tables and MAC tables live in each
//! bridge's `BridgeShared`: a flow-mod takes the table write lock for the insert/remove only
//! (parsing and validation happen before), so an upcall waits at most that long.
//!
//! Threads: `upcall`/`userspace` on PMD threads; everything else on the control thread.
//! Lock order: `ctl` → bridge `tables` (RwLock) → bridge `macs` or `down` (Mutexes, never
//! both) → `packet_ins`; `changes` (the record for revalidation) is innermost.
//! Every change that could alter a translation bumps [`Pipeline::generation`] (after the change
//! is visible) and is recorded for [`Pipeline::take_changes`]: a MAC table change as the tags
//! of the entries it touched (the daemon calls `dp.revalidate_tags`, which removes only the
//! megaflows carrying them), a flow-mod or timeout as the rules it changed (re-translating
//! only the megaflows those may affect, see [`crate::revalidate`]), anything else (groups,
//! meters, ports, liveness, fail mode) as `full` (the daemon calls `dp.revalidate_all`, which
//! re-translates each megaflow with [`Pipeline::still_valid_flow`] and removes those whose
//! translation changed).

use crate::bridge::{BridgeShared, BridgeState, PortConfig, PortMap};
use crate::mac::{
    MacChanges, MacEntry, MacTable, PortMacStats, DEFAULT_AGING, DEFAULT_MAX_ENTRIES,
    DEFAULT_PORT_LIMIT,
};
use crate::revalidate::Changes;
use crate::tables::FlowTables;
use crate::types::{
    ofpp, FlowMod, Instruction, Match, OfAction, OfPort, PacketInReason, RemovedFlow,
};
use crate::xlate::Xlate;
use crate::Error;
use arc_swap::ArcSwap;
use dpif::{Action, Deps};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};
use wire::{Field, FlowKey};

/// Flow-mods applied per table write-lock hold in [`Pipeline::flow_mods`].
pub const FLOW_MOD_CHUNK: usize = 1024;

/// Tunables.
#[derive(Clone, Debug)]
pub struct PipelineConfig {
    /// MAC learning aging time.
    pub mac_aging: Duration,
    /// MAC table size limit per bridge.
    pub mac_max_entries: usize,
    /// Learned MACs per port unless the port sets its own `mac-limit` (0 = no limit).
    pub mac_port_limit: usize,
    /// Packet-ins queued for the control thread before new ones are dropped.
    pub packet_in_queue: usize,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            mac_aging: DEFAULT_AGING,
            mac_max_entries: DEFAULT_MAX_ENTRIES,
            mac_port_limit: DEFAULT_PORT_LIMIT,
            packet_in_queue: 1024,
        }
    }
}

/// What to add: the OpenFlow number is chosen (lowest free) when `ofport` is `None`.
#[derive(Clone, Debug, Default)]
pub struct PortSpec {
    /// Name, unique in the pipeline.
    pub name: String,
    /// Datapath port number, unique in the pipeline.
    pub dp_port: u32,
    /// Requested OpenFlow port number.
    pub ofport: Option<OfPort>,
    /// Access VLAN.
    pub tag: Option<u16>,
    /// Trunk VLANs (empty = all).
    pub trunks: Vec<u16>,
    /// Learned-MAC limit of the port (`None`: the pipeline's default; 0: none).
    pub mac_limit: Option<usize>,
}

/// How a walk treats the pipeline's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    /// An upcall: counts the packet on its rules, learns MACs.
    Upcall,
    /// Traffic a megaflow carried: counts it, refreshes the source MAC, learns nothing.
    Credit,
    /// A revalidation re-check: changes nothing.
    Check,
}

/// A packet sent to the controller, queued for the control thread.
#[derive(Clone, Debug)]
pub struct PacketIn {
    /// Bridge name.
    pub bridge: String,
    /// Reason.
    pub reason: PacketInReason,
    /// Table of the rule that sent it.
    pub table_id: u8,
    /// That rule's cookie (all ones if the rule is gone).
    pub cookie: u64,
    /// Bytes the controller asked for (`max_len` of the action; 0xffff = all).
    pub max_len: u16,
    /// OpenFlow ingress port.
    pub in_port: OfPort,
    /// The frame as modified by the actions before the CONTROLLER output, cut to `max_len`.
    pub data: Vec<u8>,
    /// The whole frame (for packet-in buffers when `data` is cut).
    pub frame: Vec<u8>,
}

/// The result of translating a packet (the [`dpif::UpcallResult`] plus what the caller may want).
#[derive(Clone, Debug)]
pub struct Translation {
    /// Datapath actions.
    pub actions: Vec<Action>,
    /// Megaflow mask.
    pub mask: FlowKey,
    /// False if the pipeline changed during translation.
    pub install: bool,
    /// (table, priority, cookie) of each rule matched, in order.
    pub rules: Vec<(u8, u16, u64)>,
    /// What the translation depended on (for per-flow revalidation).
    pub deps: Deps,
}

/// Bridges and OpenFlow port numbers by datapath port number. vireod assigns those numbers, so
/// the fast [`crate::classifier::KeyHash`] serves; every upcall, and every megaflow a
/// revalidation scan tests, looks its in_port up here.
pub(crate) type ByDp = HashMap<u32, (Arc<BridgeState>, OfPort), crate::classifier::KeyHash>;

/// Immutable snapshot of all bridges and ports.
#[derive(Clone, Default)]
pub struct Topology {
    pub(crate) bridges: BTreeMap<String, Arc<BridgeState>>,
    pub(crate) by_dp: ByDp,
}

impl Topology {
    fn reindex(&mut self) {
        self.by_dp.clear();
        for b in self.bridges.values() {
            for p in b.ports.iter() {
                self.by_dp.insert(p.dp_port, (Arc::clone(b), p.ofport));
            }
        }
    }
}

/// Every bridge's OpenFlow pipeline.
pub struct Pipeline {
    pub(crate) topo: ArcSwap<Topology>,
    /// Recirculation ids handed out by `ct(table=N)` (datapath-wide).
    pub(crate) recirc: crate::recirc::RecircTable,
    ctl: Mutex<()>,
    pub(crate) generation: AtomicU64,
    /// Bumped by changes other than MAC learning: a translation that overlaps one is not
    /// installed.
    coarse: AtomicU64,
    pub(crate) changes: Mutex<Changes>,
    pub(crate) config: PipelineConfig,
    pub(crate) packet_ins: Mutex<VecDeque<PacketIn>>,
    pub(crate) packet_in_drops: AtomicU64,
    /// Packets dropped because their translation exceeded a resubmit or work limit.
    pub(crate) xlate_limit_drops: AtomicU64,
    /// Megaflows re-translated by revalidation ([`Pipeline::still_valid_flow`]).
    pub(crate) rechecks: AtomicU64,
    /// Native tunneling's hook (see [`crate::native`]); `None`: tunnel ports are plain ports.
    native: RwLock<Option<Arc<dyn crate::native::NativeTunnels>>>,
}

impl Default for Pipeline {
    fn default() -> Self {
        Pipeline::new(PipelineConfig::default())
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// The table-0 priority-0 `actions=NORMAL` rule a new bridge starts with.
pub fn default_normal_rule() -> FlowMod {
    let mut fm = FlowMod::add(
        Match::ANY,
        vec![Instruction::ApplyActions(vec![OfAction::output(
            ofpp::NORMAL,
        )])],
    );
    fm.priority = 0;
    fm
}

impl Pipeline {
    /// An empty pipeline (no bridges).
    pub fn new(config: PipelineConfig) -> Pipeline {
        Pipeline {
            recirc: Default::default(),
            topo: ArcSwap::from_pointee(Topology::default()),
            ctl: Mutex::new(()),
            generation: AtomicU64::new(1),
            coarse: AtomicU64::new(1),
            changes: Mutex::new(Changes::default()),
            config,
            packet_ins: Mutex::new(VecDeque::new()),
            packet_in_drops: AtomicU64::new(0),
            xlate_limit_drops: AtomicU64::new(0),
            rechecks: AtomicU64::new(0),
            native: RwLock::new(None),
        }
    }

    /// Installs (or removes) native tunneling's hook; every megaflow is re-checked.
    pub fn set_native(&self, hook: Option<Arc<dyn crate::native::NativeTunnels>>) {
        *write(&self.native) = hook;
        self.bump();
    }

    /// The underlay's routes or neighbours changed: translations in flight are not installed
    /// and every megaflow must be re-checked (the caller revalidates).
    pub fn underlay_changed(&self) {
        self.bump();
    }

    /// Changes whenever a translation could change (the version stamped on translations).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A change other than MAC learning: every megaflow must be re-checked.
    fn bump(&self) {
        self.coarse.fetch_add(1, Ordering::AcqRel);
        let v = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let mut c = lock(&self.changes);
        c.set_full();
        c.version = c.version.max(v);
    }

    /// Rules of bridge `bridge_id` changed (flow-mods, timeouts): recorded as such, so that
    /// revalidation re-checks only the megaflows they may affect (`crate::revalidate`).
    fn bump_rules(&self, bridge_id: u16, t: crate::tables::Touched) {
        self.coarse.fetch_add(1, Ordering::AcqRel);
        let v = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let mut c = lock(&self.changes);
        c.add_rules(bridge_id, t.rules, t.overflow);
        c.version = c.version.max(v);
    }

    /// MAC table entries of bridge `bridge_id` changed: megaflows tagged with them must go.
    pub(crate) fn note_mac_changes(&self, bridge_id: u16, ch: &MacChanges) {
        let tags = crate::normal::change_tags(bridge_id, ch);
        if tags.is_empty() {
            return;
        }
        let v = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let mut c = lock(&self.changes);
        c.tags.extend(tags);
        c.version = c.version.max(v);
    }

    pub(crate) fn bump_generation(&self) {
        self.bump();
    }

    /// The current topology snapshot.
    pub(crate) fn topology(&self) -> Arc<Topology> {
        self.topo.load_full()
    }

    pub(crate) fn bridge(&self, name: &str) -> Result<Arc<BridgeState>, Error> {
        self.topo
            .load()
            .bridges
            .get(name)
            .cloned()
            .ok_or_else(|| Error::NoSuchBridge(name.to_string()))
    }

    /// Names of all bridges.
    pub fn bridges(&self) -> Vec<String> {
        self.topo.load().bridges.keys().cloned().collect()
    }

    fn publish(&self, mut t: Topology) {
        t.reindex();
        self.topo.store(Arc::new(t));
        self.bump();
    }

    /// Creates a bridge with the default `priority=0 actions=NORMAL` rule in table 0.
    pub fn add_bridge(&self, name: &str) -> Result<(), Error> {
        let _g = lock(&self.ctl);
        let mut t = (*self.topology()).clone();
        if t.bridges.contains_key(name) {
            return Err(Error::BridgeExists(name.to_string()));
        }
        let used: Vec<u16> = t.bridges.values().map(|b| b.id).collect();
        let id = (0..=u16::MAX)
            .find(|i| !used.contains(i))
            .ok_or(Error::BadConfig("too many bridges".into()))?;
        let mut tables = FlowTables::default();
        tables.apply(default_normal_rule(), Instant::now(), name)?;
        let shared = Arc::new(BridgeShared {
            tables: RwLock::new(tables),
            macs: Mutex::new(MacTable::with_port_limit(
                self.config.mac_aging,
                self.config.mac_max_entries,
                self.config.mac_port_limit,
            )),
            down: Mutex::new(Default::default()),
            fail_open: Default::default(),
            tlv: RwLock::new(wire::tunmd::TlvTable::new()),
            miss_to_controller: Default::default(),
        });
        let br = BridgeState {
            name: name.to_string(),
            id,
            ports: PortMap::default(),
            port_of_config: Default::default(),
            shared,
        };
        t.bridges.insert(name.to_string(), Arc::new(br));
        self.publish(t);
        Ok(())
    }

    /// Deletes a bridge and its ports.
    pub fn del_bridge(&self, name: &str) -> Result<(), Error> {
        let _g = lock(&self.ctl);
        let mut t = (*self.topology()).clone();
        t.bridges
            .remove(name)
            .ok_or_else(|| Error::NoSuchBridge(name.to_string()))?;
        self.publish(t);
        Ok(())
    }

    /// Adds a port; returns its OpenFlow number.
    pub fn add_port(&self, bridge: &str, spec: PortSpec) -> Result<OfPort, Error> {
        let _g = lock(&self.ctl);
        let mut t = (*self.topology()).clone();
        let br = self.bridge(bridge)?;
        if t.bridges
            .values()
            .any(|b| b.ports.by_name(&spec.name).is_some())
        {
            return Err(Error::PortExists(spec.name));
        }
        if t.by_dp.contains_key(&spec.dp_port) {
            return Err(Error::BadConfig(format!(
                "datapath port {} already in use",
                spec.dp_port
            )));
        }
        check_vlans(spec.tag, &spec.trunks)?;
        let ofport = match spec.ofport {
            Some(p) if br.ports.get(p).is_some() => {
                return Err(Error::BadConfig(format!(
                    "OpenFlow port {p} already in use"
                )))
            }
            Some(p) if p == 0 || (p > ofpp::MAX && p != ofpp::LOCAL) => {
                return Err(Error::BadConfig(format!("bad OpenFlow port number {p}")))
            }
            Some(p) => p,
            None => br.ports.free_ofport(),
        };
        let mut ports = br.ports.clone();
        lock(&br.shared.macs).set_port_limit(ofport, spec.mac_limit);
        ports.insert(PortConfig {
            name: spec.name,
            ofport,
            dp_port: spec.dp_port,
            tag: spec.tag,
            trunks: spec.trunks,
        });
        t.bridges
            .insert(bridge.to_string(), Arc::new(br.with_ports(ports)));
        self.publish(t);
        Ok(ofport)
    }

    /// Removes a port (its rules stay, as in OpenFlow; its MAC entries go).
    pub fn del_port(&self, bridge: &str, name: &str) -> Result<(), Error> {
        let _g = lock(&self.ctl);
        let mut t = (*self.topology()).clone();
        let br = self.bridge(bridge)?;
        let mut ports = br.ports.clone();
        let gone = ports
            .remove(name)
            .ok_or_else(|| Error::NoSuchPort(name.to_string()))?;
        let ch = {
            let mut macs = lock(&br.shared.macs);
            macs.flush_port(gone.ofport);
            macs.forget_port(gone.ofport);
            macs.take_changes()
        };
        self.note_mac_changes(br.id, &ch);
        t.bridges
            .insert(bridge.to_string(), Arc::new(br.with_ports(ports)));
        self.publish(t);
        Ok(())
    }

    /// Changes a port's VLAN configuration (`tag=`, `trunks=`).
    pub fn set_port_vlans(
        &self,
        bridge: &str,
        name: &str,
        tag: Option<u16>,
        trunks: Vec<u16>,
    ) -> Result<(), Error> {
        let _g = lock(&self.ctl);
        check_vlans(tag, &trunks)?;
        let mut t = (*self.topology()).clone();
        let br = self.bridge(bridge)?;
        let mut ports = br.ports.clone();
        let mut p = ports
            .remove(name)
            .ok_or_else(|| Error::NoSuchPort(name.to_string()))?;
        p.tag = tag;
        p.trunks = trunks;
        let ch = {
            let mut macs = lock(&br.shared.macs);
            macs.flush_port(p.ofport);
            macs.take_changes()
        };
        self.note_mac_changes(br.id, &ch);
        ports.insert(p);
        t.bridges
            .insert(bridge.to_string(), Arc::new(br.with_ports(ports)));
        self.publish(t);
        Ok(())
    }

    /// Sets a port's learned-MAC limit (`None`: the default; 0: none). Takes effect for the
    /// next MAC learned; entries above a lowered limit stay until they age or move.
    pub fn set_port_mac_limit(
        &self,
        bridge: &str,
        name: &str,
        limit: Option<usize>,
    ) -> Result<(), Error> {
        let _g = lock(&self.ctl);
        let br = self.bridge(bridge)?;
        let p = br
            .ports
            .by_name(name)
            .ok_or_else(|| Error::NoSuchPort(name.to_string()))?;
        let ch = {
            let mut macs = lock(&br.shared.macs);
            macs.set_port_limit(p.ofport, limit);
            macs.take_changes()
        };
        self.note_mac_changes(br.id, &ch);
        Ok(())
    }

    /// Each port's share of the bridge's MAC table: (port name, entries, limit, refused).
    pub fn mac_port_stats(&self, bridge: &str) -> Result<Vec<(String, PortMacStats)>, Error> {
        let br = self.bridge(bridge)?;
        let macs = lock(&br.shared.macs);
        Ok(br
            .ports
            .iter()
            .map(|p| (p.name.clone(), macs.port_stats(p.ofport)))
            .collect())
    }

    /// PORT_MOD: sets the port's OpenFlow config bits selected by `mask` to `config`
    /// (only [`crate::bridge::port_config::ALL`] bits are kept). Translation honours them from
    /// the next packet: the topology is republished and the generation bumped, so cached
    /// megaflows are revalidated. Returns the port's new bits.
    pub fn set_port_of_config(
        &self,
        bridge: &str,
        ofport: OfPort,
        config: u32,
        mask: u32,
    ) -> Result<u32, Error> {
        use crate::bridge::port_config::ALL;
        let _g = lock(&self.ctl);
        let mut t = (*self.topology()).clone();
        let br = self.bridge(bridge)?;
        if br.ports.get(ofport).is_none() {
            return Err(Error::NoSuchPort(ofport.to_string()));
        }
        let old = br.of_config(ofport);
        let new = (old & !(mask & ALL)) | (config & mask & ALL);
        let mut nb = br.with_ports(br.ports.clone());
        nb.port_of_config.insert(ofport, new);
        t.bridges.insert(bridge.to_string(), Arc::new(nb));
        self.publish(t);
        Ok(new)
    }

    /// A port's OpenFlow config bits (PORT_MOD), 0 if never set or no such port.
    pub fn port_of_config(&self, bridge: &str, ofport: OfPort) -> u32 {
        self.bridge(bridge).map_or(0, |b| b.of_config(ofport))
    }

    /// Ports of a bridge, in OpenFlow number order.
    pub fn ports(&self, bridge: &str) -> Result<Vec<PortConfig>, Error> {
        Ok(self.bridge(bridge)?.ports.iter().cloned().collect())
    }

    /// (bridge, OpenFlow port) of a datapath port.
    pub fn port_by_dp(&self, dp_port: u32) -> Option<(String, OfPort)> {
        let t = self.topo.load();
        let (b, of) = t.by_dp.get(&dp_port)?;
        Some((b.name.clone(), *of))
    }

    /// Applies one flow-mod; returns removed rules (check `flags & SEND_FLOW_REM`).
    pub fn flow_mod(&self, bridge: &str, fm: FlowMod) -> Result<Vec<RemovedFlow>, Error> {
        self.flow_mods(bridge, vec![fm])
    }

    /// Applies flow-mods in order (one generation bump per chunk). The table write lock is
    /// released every [`FLOW_MOD_CHUNK`] flow-mods so upcalls never wait behind a large batch.
    /// Stops at the first failure; earlier ones stay applied.
    pub fn flow_mods(&self, bridge: &str, fms: Vec<FlowMod>) -> Result<Vec<RemovedFlow>, Error> {
        let br = self.bridge(bridge)?;
        let now = Instant::now();
        let mut removed = Vec::new();
        let mut fms = fms.into_iter().peekable();
        while fms.peek().is_some() {
            let mut tables = write(&br.shared.tables);
            let mut result = Ok(());
            for fm in fms.by_ref().take(FLOW_MOD_CHUNK) {
                match tables.apply(fm, now, bridge) {
                    Ok(r) => removed.extend(r),
                    Err(e) => {
                        result = Err(Error::Of(e));
                        break;
                    }
                }
            }
            // Bump while the write lock is held, so an upcall that read the old tables sees a
            // new generation once it is done and does not install its result.
            self.bump_rules(br.id, tables.take_touched());
            drop(tables);
            result?;
        }
        Ok(removed)
    }

    /// Removes expired rules (idle/hard timeouts) and aged MAC entries of every bridge. Call
    /// about once a second; send FLOW_REMOVED for returned rules with SEND_FLOW_REM.
    pub fn expire(&self, now: Instant) -> Vec<RemovedFlow> {
        let t = self.topology();
        let mut out = Vec::new();
        for b in t.bridges.values() {
            let ch = {
                let mut macs = lock(&b.shared.macs);
                macs.expire(now);
                macs.take_changes()
            };
            self.note_mac_changes(b.id, &ch);
            // Checked under the read lock first: no writer stalls upcalls when nothing times out.
            if read(&b.shared.tables).has_timeouts() {
                let mut tables = write(&b.shared.tables);
                let removed = tables.expire(now, &b.name);
                if !removed.is_empty() {
                    self.bump_rules(b.id, tables.take_touched());
                }
                out.extend(removed);
            }
        }
        out
    }

    /// Learned MACs of a bridge: (vlan, mac, OpenFlow port, age).
    pub fn mac_entries(&self, bridge: &str) -> Result<Vec<MacEntry>, Error> {
        let br = self.bridge(bridge)?;
        let now = Instant::now();
        let entries = lock(&br.shared.macs).entries(now);
        Ok(entries)
    }

    /// Translates a packet (datapath key, frame length) at time `now`. Counts the packet on
    /// every rule it matched and learns MACs (NORMAL).
    pub fn translate(&self, key: &FlowKey, len: usize, now: Instant) -> Translation {
        self.walk(key, 1, len as u64, now, Walk::Upcall)
    }

    /// Credits traffic that a datapath megaflow carried (`packets`/`bytes` since the last call)
    /// to the rules it was translated from: keeps rule counters and idle timeouts true for
    /// traffic that never reaches an upcall. `key` is the megaflow's `key & mask` (or any key it
    /// matched). No MAC learning and no generation bump; returns the rules credited.
    pub fn credit(&self, key: &FlowKey, packets: u64, bytes: u64, now: Instant) -> usize {
        self.walk(key, packets, bytes, now, Walk::Credit)
            .rules
            .len()
    }

    pub(crate) fn walk(
        &self,
        key: &FlowKey,
        packets: u64,
        bytes: u64,
        now: Instant,
        mode: Walk,
    ) -> Translation {
        let coarse0 = self.coarse.load(Ordering::Acquire);
        let gen0 = self.generation();
        let topo = self.topo.load();
        let in_dp = key.get(Field::InPort) as u32;
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::InPort);
        let Some((br, in_of)) = topo.by_dp.get(&in_dp) else {
            return Translation {
                actions: Vec::new(),
                mask,
                install: true,
                rules: Vec::new(),
                deps: Deps::new(gen0, Vec::new()),
            };
        };
        let tables = read(&br.shared.tables);
        let native = read(&self.native).clone();
        let mut x = Xlate::new(br, &tables, key, *in_of, now);
        x.recirc = Some(&self.recirc);
        x.native = native.as_deref();
        x.by_dp = Some(&topo.by_dp);
        x.learn = mode == Walk::Upcall;
        x.refresh = mode == Walk::Credit;
        x.run();
        if x.limit_hit && mode == Walk::Upcall {
            self.xlate_limit_drops.fetch_add(1, Ordering::Relaxed);
        }
        if mode != Walk::Check {
            for r in &x.hits {
                r.stats.credit(packets, bytes, now, r.flags);
            }
            for (g, bucket) in &x.group_hits {
                g.counters.credit(*bucket, packets, bytes);
            }
        }
        let rules = x
            .hits
            .iter()
            .map(|r| (r.table_id, r.priority, r.cookie))
            .collect();
        // MAC learning does not stop an install: the megaflow's tags and version let a
        // concurrent revalidation find it.
        let install = self.coarse.load(Ordering::Acquire) == coarse0 && !x.no_install;
        let mac_changes = std::mem::take(&mut x.mac_changes);
        let tr = Translation {
            actions: x.out,
            mask: x.wc,
            install,
            rules,
            deps: Deps::new(gen0, x.tags).with_tables(x.seen),
        };
        drop(tables);
        self.note_mac_changes(br.id, &mac_changes);
        tr
    }
}

fn check_vlans(tag: Option<u16>, trunks: &[u16]) -> Result<(), Error> {
    if let Some(v) = tag
        .into_iter()
        .chain(trunks.iter().copied())
        .find(|&v| v > 4095)
    {
        return Err(Error::BadConfig(format!("VLAN {v} out of range 0..4095")));
    }
    Ok(())
}
