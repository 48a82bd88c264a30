//! Recirculation state: what a translation froze when it met `ct(table=N)`, keyed by the
//! `recirc_id` the datapath puts in the packet's key when it classifies the packet again.
//!
//! Owns: [`RecircTable`], a two-way map between ids and [`Frozen`] states (bridge, table to
//! continue at, register file). The same state always gets the same id, so the megaflows of
//! every packet of a connection share one recirculated key, and re-translating a megaflow
//! (revalidation) names the same id. Ids are never reused; the table is bounded
//! ([`MAX_RECIRC_IDS`]): past it, a translation that needs a new id drops the packet
//! (counted by the pipeline as a translation-limit drop).
//!
//! Threads: PMD threads (upcalls) and the control thread (revalidation), under one mutex
//! taken only while translating a `ct(table=N)` or a recirculated packet, never per packet on
//! the fast path.

use crate::nx::Regs;
use std::collections::HashMap;
use std::sync::Mutex;

/// Most distinct frozen states (ids) a pipeline hands out.
pub const MAX_RECIRC_IDS: usize = 1 << 20;

/// The translation state a recirculated packet continues with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frozen {
    /// Bridge id (`BridgeState::id`).
    pub bridge: u16,
    /// OpenFlow table the walk continues at.
    pub table: u8,
    /// The register file when the packet met `ct`.
    pub regs: Regs,
}

#[derive(Default)]
struct Inner {
    by_state: HashMap<Frozen, u32>,
    by_id: Vec<Frozen>,
}

/// The recirculation ids of one pipeline (ids are datapath-wide: every bridge of the
/// pipeline shares the datapath).
#[derive(Default)]
pub struct RecircTable {
    inner: Mutex<Inner>,
}

impl RecircTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The id of `state`, allocated on first use (ids start at 1; 0 means "not
    /// recirculated"). `None` when the table is full.
    pub fn id_of(&self, state: Frozen) -> Option<u32> {
        let mut g = self.lock();
        if let Some(&id) = g.by_state.get(&state) {
            return Some(id);
        }
        if g.by_id.len() >= MAX_RECIRC_IDS {
            return None;
        }
        g.by_id.push(state);
        let id = g.by_id.len() as u32;
        g.by_state.insert(state, id);
        Some(id)
    }

    /// The state of `id`, if it was handed out.
    pub fn state(&self, id: u32) -> Option<Frozen> {
        let g = self.lock();
        (id as usize)
            .checked_sub(1)
            .and_then(|i| g.by_id.get(i).copied())
    }

    /// Ids handed out.
    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    /// True if no id was handed out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_id_per_state_and_back() {
        let t = RecircTable::default();
        let mut r = Regs::ZERO;
        let a = Frozen {
            bridge: 1,
            table: 1,
            regs: r,
        };
        r.reg[0] = 7;
        let b = Frozen { regs: r, ..a };
        let (ia, ib) = (t.id_of(a).unwrap(), t.id_of(b).unwrap());
        assert_ne!(ia, ib);
        assert_ne!(ia, 0);
        assert_eq!(t.id_of(a), Some(ia));
        assert_eq!(t.state(ib), Some(b));
        assert_eq!(t.state(0), None);
        assert_eq!(t.state(99), None);
        assert_eq!(t.len(), 2);
    }
}
