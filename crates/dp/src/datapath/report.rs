//! What the datapath reports to the control thread: `pmd-stats-show` and its reset,
//! `pmd-rxq-show`, `dump-megaflows`, the per-megaflow counters the daemon credits to rules,
//! and the megaflows vireod may give XDP flow marks ([`Datapath::mark_candidates`]).
//!
//! Threads: control threads, under the datapath's control mutex; each PMD's registry lock is
//! held only to copy its flows.
use super::{AssignedAt, Datapath};
use crate::flow::{mark_of, mark_tag, Megaflow, Tuple5};
use crate::stats::{actions_to_string, MegaflowInfo, PmdStats, RxqInfo};
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

/// A megaflow that an XDP flow mark could name (see [`Datapath::mark_candidates`]).
#[derive(Clone, Debug)]
pub struct MarkCandidate {
    /// The datapath port its packets arrive on.
    pub in_port: u32,
    /// The 5-tuple of the packet that created it: what the XDP mark map is keyed by.
    pub tuple: Tuple5,
    /// The mark that names it (its PMD's tag and its id).
    pub mark: u32,
    /// Packets that hit it so far.
    pub packets: u64,
    /// The flow (its `mark` field is where the installer records what it installed).
    pub flow: Arc<Megaflow>,
}

impl Datapath {
    /// `pmd-stats-show`.
    pub fn pmd_stats(&self) -> Vec<PmdStats> {
        let ctl = self.inner.lock();
        ctl.pmds
            .iter()
            .map(|h| {
                let s = h.shared.counters.snapshot().since(&h.base);
                let flows = h
                    .shared
                    .registry
                    .lock()
                    .map_or(0, |r| r.iter().flatten().count());
                let cfg = h.shared.cfg.load();
                PmdStats {
                    txq: cfg.txq,
                    lookup: self.inner.tuning.lookup_isa.name(),
                    ..PmdStats::new(h.shared.core, h.shared.numa, &s, flows, cfg.rxqs.len())
                }
            })
            .collect()
    }

    /// `pmd-stats-clear`.
    pub fn clear_pmd_stats(&self) {
        let mut ctl = self.inner.lock();
        for h in &mut ctl.pmds {
            h.base = h.shared.counters.snapshot();
        }
    }

    /// `pmd-rxq-show`.
    pub fn rxq_show(&self) -> Vec<RxqInfo> {
        let ctl = self.inner.lock();
        let mut out = Vec::new();
        for h in &ctl.pmds {
            let busy = h.shared.counters.snapshot().busy_cycles;
            for r in h.shared.cfg.load().rxqs.iter() {
                let Some(e) = ctl.ports.get(&r.port_no) else {
                    continue;
                };
                let at = ctl.assigned_at.get(&(r.port_no, r.qid)).copied();
                let at = at.unwrap_or(AssignedAt {
                    rxq_cycles: 0,
                    pmd_busy: 0,
                });
                let spent = r.stats.cycles.load(Relaxed).saturating_sub(at.rxq_cycles);
                let total = busy.saturating_sub(at.pmd_busy);
                let pct = if total == 0 {
                    0.0
                } else {
                    (spent as f64 * 100.0 / total as f64).min(100.0)
                };
                out.push(RxqInfo {
                    core: h.shared.core,
                    numa: h.shared.numa,
                    port: e.name.clone(),
                    port_no: r.port_no,
                    rxq: r.qid,
                    port_numa: e.port.rxq_numa(r.qid),
                    pinned: e
                        .affinity
                        .iter()
                        .any(|&(q, c)| q == r.qid && c == h.shared.core),
                    busy_pct: pct,
                });
            }
        }
        out
    }

    /// `dump-megaflows`: every PMD's megaflows with their counters.
    pub fn megaflows(&self) -> Vec<MegaflowInfo> {
        let ctl = self.inner.lock();
        let mut out = Vec::new();
        for h in &ctl.pmds {
            for f in h.registered_flows() {
                out.push(MegaflowInfo {
                    core: h.shared.core,
                    match_: f.key.match_string(&f.mask),
                    tun_md: wire::flow::TUN_MD_WORDS
                        .clone()
                        .any(|w| f.mask.w[w] != 0)
                        .then(|| (f.key.get(wire::Field::InPort) as u32, f.key, f.mask)),
                    actions: actions_to_string(&f.actions),
                    packets: f.packets(),
                    bytes: f.bytes(),
                    mark: match f.mark.load(Relaxed) {
                        0 => None,
                        m => Some(format!("0x{m:08x}")),
                    },
                });
            }
        }
        out
    }

    /// Every installed megaflow that an XDP mark can name: created by an untagged IPv4 packet
    /// straight from a port, with an id that fits in a mark. The marks only name flows; the PMD
    /// checks each marked packet against the flow (see `flow.rs`), so a list that is stale by
    /// the time it is installed costs lookups, never correctness.
    pub fn mark_candidates(&self) -> Vec<MarkCandidate> {
        let ctl = self.inner.lock();
        let mut out = Vec::new();
        for h in &ctl.pmds {
            let tag = mark_tag(h.shared.core);
            let r = h.shared.registry.lock();
            let r = r.unwrap_or_else(|e| e.into_inner());
            for (id, f) in r.iter().enumerate() {
                let Some(f) = f else { continue };
                let (Some(&tuple), Some(mark)) = (f.tuple.get(), mark_of(tag, id as u32)) else {
                    continue;
                };
                out.push(MarkCandidate {
                    in_port: f.key.get(wire::Field::InPort) as u32,
                    tuple,
                    mark,
                    packets: f.packets(),
                    flow: f.clone(),
                });
            }
        }
        out
    }

    /// Every megaflow that was hit since the previous call, with the packets and bytes of those
    /// hits: `(masked key, mask, packets, bytes)`. The pipeline credits them to its rules
    /// (OpenFlow counters, idle timeouts); hits of a megaflow removed between two calls are
    /// not reported.
    pub fn take_flow_stats(&self) -> Vec<(wire::FlowKey, wire::FlowKey, u64, u64)> {
        let ctl = self.inner.lock();
        let mut out = Vec::new();
        for h in &ctl.pmds {
            for f in h.registered_flows() {
                let (p, b) = f.take_delta();
                if p > 0 {
                    out.push((f.key, f.mask, p, b));
                }
            }
        }
        out
    }
}
