//! XDP flow-mark upkeep for `af-xdp` ports with `xdp-mark=on`: which IPv4 5-tuples the XDP
//! program marks, and with which mark. The wanted set of a port is, among the megaflows whose
//! packets arrive on it ([`dp::Datapath::mark_candidates`]), the hottest (most packets) one per
//! 5-tuple of the packet that created it, at most [`MAX_MARKS`] of them (the map's size, as
//! OVS bounds its offloaded marks); each maps its tuple to the mark that names it (its PMD and
//! id). The port's BPF map is brought to the wanted set by a diff against what was installed
//! (one `bpf()` call per change); a megaflow that is gone (removed, expired, revalidated away)
//! loses its entry at the next sync, and a port whose interface was opened again (empty map)
//! is filled again. A port adopted at an upgrade starts the diff from what its map holds (the
//! old vireod's marks, read back from the map). Each installed megaflow records its mark for
//! `dump-megaflows`.
//!
//! Correctness does not rest on this module: the PMD checks every marked packet against the
//! megaflow the mark names and ignores a mark that does not fit (`dp::flow`), so an entry that
//! is stale for up to one sync costs lookups, never a wrong decision.
//!
//! Threads: [`Marks::sync`] runs on the housekeeping thread (every 500 ms), after a
//! revalidation that removed megaflows (the thread that revalidated), and on the control
//! thread when a port comes or goes; a mutex serializes them. Never on a PMD. Lock order:
//! this mutex, then the daemon's port table, then the datapath's.
use super::runtime::Shared;
use dp::flow::Megaflow;
use ports::af_xdp::{AfXdpPort, FiveTuple};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};

/// Most marks installed per port (the XDP mark map's size).
pub const MAX_MARKS: usize = ports::af_xdp::MARK_MAP_ENTRIES as usize;

/// Mark state shared by the control and housekeeping threads.
#[derive(Default)]
pub struct Marks {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    ports: BTreeMap<String, MarkPort>,
}

struct MarkPort {
    port: Arc<AfXdpPort>,
    /// `AfXdpPort::opens` when `installed` was last true.
    opens: u64,
    /// What the port's mark map holds: tuple → (mark, the megaflow it names; `None` for an
    /// entry the old vireod left in an adopted port's map, whose megaflow is not here).
    installed: HashMap<FiveTuple, (u32, Option<Arc<Megaflow>>)>,
    /// Entries the map refused (the first of each sync is logged).
    refused: u64,
}

fn five(t: &dp::flow::Tuple5) -> FiveTuple {
    FiveTuple {
        src: t.src.to_be_bytes(),
        dst: t.dst.to_be_bytes(),
        sport: t.sport,
        dport: t.dport,
        proto: t.proto,
    }
}

/// Clears a megaflow's recorded mark if it is still `mark`.
fn unrecord(f: &Option<Arc<Megaflow>>, mark: u32) {
    if let Some(f) = f {
        let _ = f.mark.compare_exchange(mark, 0, Relaxed, Relaxed);
    }
}

impl Marks {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new marking port: the diff starts from what its map holds (empty for a port opened
    /// here; the old vireod's marks for one adopted at an upgrade: they stay until the first
    /// sync here replaces or removes them, and the PMDs ignore any that names no megaflow of
    /// this process).
    pub fn add_port(&self, name: &str, port: Arc<AfXdpPort>) {
        let opens = port.opens();
        let installed: HashMap<FiveTuple, (u32, Option<Arc<Megaflow>>)> = match port.mark_entries()
        {
            Ok(v) => v.into_iter().map(|(t, m)| (t, (m, None))).collect(),
            Err(e) => {
                tracing::warn!(port = %name, error = %e.0, "cannot read the mark map");
                HashMap::new()
            }
        };
        port.set_marks_installed(installed.len(), 0);
        self.lock().ports.insert(
            name.to_string(),
            MarkPort {
                port,
                opens,
                installed,
                refused: 0,
            },
        );
    }

    /// A port gone (its map went with it).
    pub fn remove_port(&self, name: &str) {
        if let Some(mp) = self.lock().ports.remove(name) {
            for (_, (m, f)) in mp.installed {
                unrecord(&f, m);
            }
        }
    }

    /// Brings every marking port's map to its wanted set.
    pub fn sync(&self, shared: &Shared) {
        let mut g = self.lock();
        if g.ports.is_empty() {
            return;
        }
        let numbers: BTreeMap<String, u32> = {
            let p = shared.ports.lock().unwrap_or_else(|e| e.into_inner());
            g.ports
                .keys()
                .filter_map(|n| p.get(n).map(|dp| (n.clone(), dp.no)))
                .collect()
        };
        let cands = shared.dp.mark_candidates();
        for (name, mp) in g.ports.iter_mut() {
            if mp.port.opens() != mp.opens {
                // Opened again: a new program and an empty map.
                for (_, (m, f)) in mp.installed.drain() {
                    unrecord(&f, m);
                }
                mp.opens = mp.port.opens();
            }
            let Some(&no) = numbers.get(name) else {
                continue;
            };
            // The hottest megaflow per tuple, then the hottest tuples.
            let mut best: HashMap<FiveTuple, &dp::MarkCandidate> = HashMap::new();
            for c in cands.iter().filter(|c| c.in_port == no) {
                let e = best.entry(five(&c.tuple)).or_insert(c);
                if c.packets > e.packets {
                    *e = c;
                }
            }
            let mut wanted: Vec<(FiveTuple, &dp::MarkCandidate)> = best.into_iter().collect();
            wanted.sort_unstable_by_key(|w| std::cmp::Reverse(w.1.packets));
            wanted.truncate(MAX_MARKS);
            let wanted: HashMap<FiveTuple, &dp::MarkCandidate> = wanted.into_iter().collect();
            let stale: Vec<FiveTuple> = mp
                .installed
                .iter()
                .filter(|(t, (m, _))| wanted.get(*t).is_none_or(|c| c.mark != *m))
                .map(|(t, _)| *t)
                .collect();
            for t in stale {
                if let Some((m, f)) = mp.installed.remove(&t) {
                    unrecord(&f, m);
                }
                if !wanted.contains_key(&t) {
                    if let Err(e) = mp.port.mark_del(&t) {
                        tracing::warn!(port = %name, error = %e.0, "cannot remove an XDP mark");
                    }
                }
            }
            let mut failed = 0u64;
            for (t, c) in wanted {
                if let Some((m, f)) = mp.installed.get_mut(&t) {
                    // An adopted entry that already names this megaflow: record it.
                    if f.is_none() {
                        c.flow.mark.store(*m, Relaxed);
                        *f = Some(c.flow.clone());
                    }
                    continue;
                }
                match mp.port.mark_set(&t, c.mark) {
                    Ok(()) => {
                        c.flow.mark.store(c.mark, Relaxed);
                        mp.installed.insert(t, (c.mark, Some(c.flow.clone())));
                    }
                    Err(e) => {
                        if failed == 0 {
                            tracing::warn!(port = %name, error = %e.0, "cannot add an XDP mark");
                        }
                        failed += 1;
                    }
                }
            }
            mp.refused += failed;
            mp.port.set_marks_installed(mp.installed.len(), mp.refused);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuples_keep_wire_order_addresses() {
        let t = dp::flow::Tuple5 {
            src: 0x0a00_0001,
            dst: 0xc0a8_0102,
            sport: 1234,
            dport: 53,
            proto: 17,
        };
        let f = five(&t);
        assert_eq!((f.src, f.dst), ([10, 0, 0, 1], [192, 168, 1, 2]));
        assert_eq!((f.sport, f.dport, f.proto), (1234, 53, 17));
    }
}
