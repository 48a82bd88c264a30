//! The structured control API an OpenFlow endpoint needs beyond flow-mods: groups, port
//! liveness, the standalone fail-open switch, flow/table statistics with OpenFlow filters, and
//! PACKET_OUT translation.
//!
//! Threads: the control thread (an OpenFlow connection's reader thread). Lock order as in
//! [`crate::pipeline`]: bridge `tables` (RwLock) → bridge `macs` / `down` (Mutexes, never held
//! together). Every change that can alter a translation bumps the pipeline generation while
//! the change is visible, so the caller's revalidation sees it.

use crate::format::FlowStats;
use crate::group::{GroupDesc, GroupMod, GroupStats};
use crate::meter::{MeterBand, MeterMod, MeterStatsEntry};
use crate::pipeline::{read, write, Pipeline};
use crate::tables::check_action;
use crate::types::{ofpp, FlowMod, OfAction, OfError, OfPort, RemovedFlow, TABLE_ALL};
use crate::xlate::{Xlate, NO_DP_PORT};
use crate::Error;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// What a PACKET_OUT turns into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketOutPlan {
    /// Datapath port the packet is deemed to have arrived on (None for CONTROLLER/LOCAL or an
    /// unknown port).
    pub in_dp: Option<u32>,
    /// Datapath actions to execute on the frame (may contain `Userspace` for CONTROLLER).
    pub actions: Vec<dpif::Action>,
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pipeline {
    /// Applies a GROUP_MOD; returns the rules removed with a deleted group.
    pub fn group_mod(&self, bridge: &str, gm: GroupMod) -> Result<Vec<RemovedFlow>, Error> {
        let br = self.bridge(bridge)?;
        let mut tables = write(&br.shared.tables);
        let r = tables.group_mod(gm, Instant::now(), bridge);
        // A full change: the rules it removed need not be listed.
        let _ = tables.take_touched();
        self.bump_generation();
        drop(tables);
        Ok(r?)
    }

    /// Applies a METER_MOD; returns the rules removed with a deleted meter. Changes the
    /// translation of the rules that use the meter (a modified meter is a new datapath
    /// bucket), so the caller revalidates as after a flow-mod.
    pub fn meter_mod(&self, bridge: &str, mm: MeterMod) -> Result<Vec<RemovedFlow>, Error> {
        let br = self.bridge(bridge)?;
        let mut tables = write(&br.shared.tables);
        let r = tables.meter_mod(mm, Instant::now(), bridge);
        let _ = tables.take_touched();
        self.bump_generation();
        drop(tables);
        Ok(r?)
    }

    /// METER statistics of meter `id`, or of every meter with [`crate::meter::METER_ALL`].
    pub fn meter_stats(&self, bridge: &str, id: u32) -> Result<Vec<MeterStatsEntry>, Error> {
        let br = self.bridge(bridge)?;
        let tables = read(&br.shared.tables);
        let refs = |m: u32| tables.meter_refs(m);
        Ok(tables.meters().stats(id, &refs, Instant::now()))
    }

    /// METER_CONFIG: (id, flags, bands) of meter `id` or of every meter.
    pub fn meter_configs(
        &self,
        bridge: &str,
        id: u32,
    ) -> Result<Vec<(u32, u16, Vec<MeterBand>)>, Error> {
        let br = self.bridge(bridge)?;
        let tables = read(&br.shared.tables);
        Ok(tables
            .meters()
            .iter()
            .filter(|(k, _)| id == crate::meter::METER_ALL || *k == id)
            .map(|(k, e)| (k, e.flags, e.bands.clone()))
            .collect())
    }

    /// `dump-meters`: one line per meter in `ovs-ofctl` syntax with its counters.
    pub fn dump_meters_text(&self, bridge: &str) -> Result<Vec<String>, Error> {
        let br = self.bridge(bridge)?;
        let tables = read(&br.shared.tables);
        Ok(tables
            .meters()
            .iter()
            .map(|(id, e)| crate::meter::format_meter(id, e, tables.meter_refs(id)))
            .collect())
    }

    /// Learned MACs of a bridge with their port's name: (vlan, mac, port name, age), what an
    /// upgrade hands to the new vireod (OpenFlow port numbers are its own to assign).
    pub fn mac_entries_named(&self, bridge: &str) -> Result<Vec<crate::mac::NamedMacEntry>, Error> {
        let br = self.bridge(bridge)?;
        let entries = lock(&br.shared.macs).entries(Instant::now());
        Ok(entries
            .into_iter()
            .filter_map(|(vlan, mac, of, age)| {
                let p = br.ports.get(of)?;
                Some((vlan, mac, p.name.clone(), age))
            })
            .collect())
    }

    /// Learns each (vlan, mac, port name, age) as if seen `age` ago (the inverse of
    /// [`Pipeline::mac_entries_named`]); entries naming a port the bridge lacks are skipped.
    /// Per-port limits apply as to any learning. Returns how many were learned.
    pub fn restore_macs(
        &self,
        bridge: &str,
        entries: &[crate::mac::NamedMacEntry],
    ) -> Result<usize, Error> {
        let br = self.bridge(bridge)?;
        let now = Instant::now();
        let mut n = 0;
        let ch = {
            let mut macs = lock(&br.shared.macs);
            for (vlan, mac, port, age) in entries {
                let Some(p) = br.ports.iter().find(|p| &p.name == port) else {
                    continue;
                };
                let seen = now.checked_sub(*age).unwrap_or(now);
                let l = macs.learn(*vlan, wire::FlowKey::mac_to_u64(*mac), p.ofport, seen);
                if l != crate::mac::Learned::Refused {
                    n += 1;
                }
            }
            macs.take_changes()
        };
        self.note_mac_changes(br.id, &ch);
        Ok(n)
    }

    /// Every group of a bridge (GROUP_DESC).
    pub fn group_descs(&self, bridge: &str) -> Result<Vec<GroupDesc>, Error> {
        let br = self.bridge(bridge)?;
        let tables = read(&br.shared.tables);
        Ok(tables.groups().descs())
    }

    /// Counters of group `id` or of every group with [`crate::group::GROUP_ALL`].
    pub fn group_stats(&self, bridge: &str, id: u32) -> Result<Vec<GroupStats>, Error> {
        let br = self.bridge(bridge)?;
        let tables = read(&br.shared.tables);
        let refs = |g: u32| tables.group_refs(g);
        Ok(tables.groups().stats(id, &refs, Instant::now()))
    }

    /// Records a port's link state (fast-failover and select groups skip dead ports).
    pub fn set_port_live(&self, bridge: &str, ofport: OfPort, live: bool) -> Result<(), Error> {
        let br = self.bridge(bridge)?;
        let changed = {
            let mut down = lock(&br.shared.down);
            if live {
                down.remove(&ofport)
            } else {
                down.insert(ofport)
            }
        };
        if changed {
            self.bump_generation();
        }
        Ok(())
    }

    /// True unless the port was marked down with [`Pipeline::set_port_live`].
    pub fn port_live(&self, bridge: &str, ofport: OfPort) -> bool {
        self.bridge(bridge)
            .is_ok_and(|br| !lock(&br.shared.down).contains(&ofport))
    }

    /// Standalone fail-open: while on, every packet of the bridge is switched by NORMAL and
    /// the flow tables are ignored (they are kept untouched for when a controller returns).
    /// Returns true if the state changed.
    pub fn set_fail_open(&self, bridge: &str, on: bool) -> Result<bool, Error> {
        let br = self.bridge(bridge)?;
        let was = br.shared.fail_open.swap(on, Ordering::AcqRel);
        if was != on {
            self.bump_generation();
        }
        Ok(was != on)
    }

    /// Turns OpenFlow 1.0's table-miss behaviour on or off (a miss sends a no_match packet-in,
    /// then drops; see `BridgeShared::miss_to_controller`). Returns whether it changed (the
    /// caller then revalidates the datapath).
    pub fn set_miss_to_controller(&self, bridge: &str, on: bool) -> Result<bool, Error> {
        let br = self.bridge(bridge)?;
        let was = br.shared.miss_to_controller.swap(on, Ordering::AcqRel);
        if was != on {
            self.bump_generation();
        }
        Ok(was != on)
    }

    /// The bridge's Geneve option map (`tun_metadataN`).
    pub fn tlv(&self, bridge: &str) -> Result<wire::tunmd::TlvTable, Error> {
        let br = self.bridge(bridge)?;
        let t = br.shared.tlv.read().unwrap_or_else(|e| e.into_inner());
        Ok(t.clone())
    }

    /// Changes the bridge's Geneve option map with `f` (under its lock: two changes never
    /// interleave); the map stays as it was when `f` fails. A changed map re-checks the
    /// megaflows (native encapsulation reads it).
    pub fn tlv_mod<E>(
        &self,
        bridge: &str,
        f: impl FnOnce(&mut wire::tunmd::TlvTable) -> Result<(), E>,
    ) -> Result<Result<(), E>, Error> {
        let br = self.bridge(bridge)?;
        let mut t = br.shared.tlv.write().unwrap_or_else(|e| e.into_inner());
        let mut next = t.clone();
        let r = f(&mut next);
        if r.is_ok() && next != *t {
            *t = next;
            drop(t);
            self.underlay_changed();
        }
        Ok(r)
    }

    /// Whether the bridge is failed open.
    pub fn fail_open(&self, bridge: &str) -> bool {
        self.bridge(bridge)
            .is_ok_and(|br| br.shared.fail_open.load(Ordering::Acquire))
    }

    /// Rules selected by an OpenFlow flow-stats filter (`table_id` or [`TABLE_ALL`],
    /// `out_port`, `out_group`, `cookie`/`cookie_mask`, non-strict `match_`), ordered by table
    /// then priority (highest first).
    pub fn flow_stats(&self, bridge: &str, filter: &FlowMod) -> Result<Vec<FlowStats>, Error> {
        let br = self.bridge(bridge)?;
        let now = Instant::now();
        let f = filter;
        let mut out: Vec<FlowStats> = {
            let tables = read(&br.shared.tables);
            tables
                .iter()
                .filter(|r| f.table_id == TABLE_ALL || r.table_id == f.table_id)
                .filter(|r| (r.cookie ^ f.cookie) & f.cookie_mask == 0)
                .filter(|r| f.out_port == ofpp::ANY || r.outputs_to(f.out_port))
                .filter(|r| f.out_group == ofpp::ANY || r.uses_group(f.out_group))
                .filter(|r| f.match_.covers(&r.match_))
                .map(|r| FlowStats::of_rule(r, now))
                .collect()
        };
        out.sort_by(|a, b| {
            (a.table_id, std::cmp::Reverse(a.priority))
                .cmp(&(b.table_id, std::cmp::Reverse(b.priority)))
                .then_with(|| {
                    (a.match_.mask.w, a.match_.key.w).cmp(&(b.match_.mask.w, b.match_.key.w))
                })
        });
        Ok(out)
    }

    /// Active rules per table, for tables 0..=254 (TABLE stats).
    pub fn table_counts(&self, bridge: &str) -> Result<Vec<usize>, Error> {
        let br = self.bridge(bridge)?;
        let tables = read(&br.shared.tables);
        Ok((0..=crate::types::TABLE_MAX)
            .map(|t| tables.table(t).len())
            .collect())
    }

    /// Translates a PACKET_OUT: `frame` deemed received on OpenFlow port `in_port` (a port,
    /// CONTROLLER or LOCAL), with `actions` (output may name TABLE to run the flow tables,
    /// NORMAL, FLOOD, ALL, IN_PORT, CONTROLLER, a port, or a group). Rules and groups the
    /// packet hits are counted.
    pub fn packet_out(
        &self,
        bridge: &str,
        in_port: OfPort,
        actions: &[OfAction],
        frame: &[u8],
    ) -> Result<PacketOutPlan, Error> {
        let br = self.bridge(bridge)?;
        let in_dp = br.ports.get(in_port).map(|p| p.dp_port);
        for a in actions {
            match *a {
                OfAction::Output {
                    port: ofpp::TABLE, ..
                } => {}
                _ => check_action(a)?,
            }
        }
        let key = wire::extract(frame, in_dp.unwrap_or(NO_DP_PORT));
        let now = Instant::now();
        let tables = read(&br.shared.tables);
        for a in actions {
            if let OfAction::Group(g) = *a {
                if tables.groups().get(g).is_none() {
                    return Err(Error::Of(OfError::BadOutGroup(g)));
                }
            }
        }
        let mut x = Xlate::new(&br, &tables, &key, in_port, now);
        x.learn = in_dp.is_some();
        for a in actions {
            match *a {
                OfAction::Output {
                    port: ofpp::TABLE, ..
                } => x.run(),
                _ => x.exec(a),
            }
        }
        let len = frame.len() as u64;
        for r in &x.hits {
            r.stats.credit(1, len, now, r.flags);
        }
        for (g, bucket) in &x.group_hits {
            g.counters.credit(*bucket, 1, len);
        }
        let mac_changes = std::mem::take(&mut x.mac_changes);
        let plan = PacketOutPlan {
            in_dp,
            actions: std::mem::take(&mut x.out),
        };
        drop(x);
        drop(tables);
        self.note_mac_changes(br.id, &mac_changes);
        Ok(plan)
    }
}
