//! The pipeline as PMD threads see it: the [`dpif::Upcall`] implementation (a miss's
//! translation, behind the bridge's `OFPM_SLOWPATH` meter; a megaflow's re-check; a
//! `userspace` action's packet-in), the packet-in queue the daemon drains, and the counters of
//! what the slow path dropped.
//!
//! Threads: `upcall`, `still_valid` (revalidation: the control thread) and `userspace` run on
//! the calling thread; the queue is drained by the daemon's housekeeping thread.

use crate::pipeline::{lock, read, PacketIn, Pipeline};
use crate::types::ofpp;
use crate::xlate::decode_cookie;
use dpif::{Deps, FlowRef, Upcall, UpcallResult};
use packet::Packet;
use std::sync::atomic::Ordering;
use std::time::Instant;
use wire::{Field, FlowKey};

impl Pipeline {
    /// Packet-ins queued by `userspace` since the last call (at most `max`).
    pub fn take_packet_ins(&self, max: usize) -> Vec<PacketIn> {
        let mut q = lock(&self.packet_ins);
        let n = q.len().min(max);
        q.drain(..n).collect()
    }

    /// Translations that exceeded a limit (resubmit depth 64, 4096 resubmits, 4096 datapath
    /// actions) and dropped their packet.
    pub fn xlate_limit_drops(&self) -> u64 {
        self.xlate_limit_drops.load(Ordering::Relaxed)
    }

    /// Megaflows revalidation has re-translated (after rule, group, port or other changes;
    /// rule changes re-check only the megaflows they may affect).
    pub fn revalidation_rechecks(&self) -> u64 {
        self.rechecks.load(Ordering::Relaxed)
    }

    /// Packet-ins dropped because the queue was full.
    pub fn packet_in_drops(&self) -> u64 {
        self.packet_in_drops.load(Ordering::Relaxed)
    }

    /// Whether the `OFPM_SLOWPATH` meter of the packet's bridge (if it has one) lets one more
    /// packet through the slow path. In Vireo the slow path is the upcall: a packet that missed
    /// every datapath cache and needs a translation. The meter caps translations per second per
    /// bridge, so a flood of new flows costs at most the meter's rate in translations; packets of
    /// installed megaflows never see it.
    pub fn slowpath_allows(&self, key: &FlowKey, len: usize) -> bool {
        let topo = self.topo.load();
        let Some((br, _)) = topo.by_dp.get(&(key.get(Field::InPort) as u32)) else {
            return true;
        };
        let tables = read(&br.shared.tables);
        match tables.meters().get(crate::meter::METER_SLOWPATH) {
            Some(m) => m.meter.apply(len, dpif::meter::now_ns()) != dpif::meter::Verdict::Drop,
            None => true,
        }
    }

    /// Builds the packet-in for a userspace cookie (None if the bridge is gone).
    pub fn packet_in_for(&self, cookie: u64, key: &FlowKey, frame: &[u8]) -> Option<PacketIn> {
        let (bid, reason, table_id, serial) = decode_cookie(cookie);
        let t = self.topo.load();
        let br = t.bridges.values().find(|b| b.id == bid)?;
        let (cookie, max_len) = {
            let tables = read(&br.shared.tables);
            // OFPM_CONTROLLER meters every packet-in of the bridge.
            if let Some(m) = tables.meters().get(crate::meter::METER_CONTROLLER) {
                if m.meter.apply(frame.len(), dpif::meter::now_ns()) == dpif::meter::Verdict::Drop {
                    return None;
                }
            }
            tables
                .controller_info(serial)
                .unwrap_or((u64::MAX, u16::MAX))
        };
        let in_dp = key.get(Field::InPort) as u32;
        let in_port = br
            .ports
            .iter()
            .find(|p| p.dp_port == in_dp)
            .map_or(ofpp::ANY, |p| p.ofport);
        let keep = frame.len().min(usize::from(max_len));
        Some(PacketIn {
            bridge: br.name.clone(),
            reason,
            table_id,
            cookie,
            max_len,
            in_port,
            data: frame[..keep].to_vec(),
            frame: frame.to_vec(),
        })
    }
}

impl Upcall for Pipeline {
    fn upcall(&self, key: &FlowKey, pkt: &Packet) -> UpcallResult {
        if !self.slowpath_allows(key, pkt.len()) {
            // Dropped by OFPM_SLOWPATH (counted by its band); not cached, so the flow's next
            // packet is metered again rather than dropped for good.
            let mut mask = FlowKey::ZERO;
            mask.set_exact(Field::InPort);
            return UpcallResult {
                actions: Vec::new().into(),
                mask,
                install: false,
                deps: Deps::new(self.generation(), Vec::new()),
            };
        }
        let tr = self.translate(key, pkt.len(), Instant::now());
        UpcallResult {
            actions: tr.actions.into(),
            mask: tr.mask,
            install: tr.install,
            deps: tr.deps,
        }
    }

    fn still_valid(&self, flow: &FlowRef<'_>) -> bool {
        self.still_valid_flow(flow.key, flow.mask, flow.actions, &flow.deps.tags)
    }

    fn userspace(&self, cookie: u64, key: &FlowKey, pkt: &Packet) {
        let mut q = lock(&self.packet_ins);
        if q.len() >= self.config.packet_in_queue {
            self.packet_in_drops.fetch_add(1, Ordering::Relaxed);
            return;
        }
        drop(q);
        // A controller reads the frame as it would be on a wire: a partial checksum or a GSO
        // frame's lengths are finished in a copy first (the datapath's packet stays as it is).
        let finished = dpif::modify::finished_copy(pkt);
        let frame = finished.as_deref().unwrap_or(pkt.data());
        // Built outside the queue lock (takes the table read lock for the rule's cookie).
        if let Some(pi) = self.packet_in_for(cookie, key, frame) {
            q = lock(&self.packet_ins);
            q.push_back(pi);
        }
    }
}
