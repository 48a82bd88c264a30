//! Per-flow revalidation on the pipeline's side: the changes recorded since the datapath was
//! last revalidated ([`Changes`]: tags of MAC table entries that changed, the rules that
//! flow-mods and timeouts added, modified or removed, or `full` for groups, meters, ports,
//! liveness, fail mode and more rule changes than [`CHANGED_RULES_MAX`]), the re-check of one
//! megaflow ([`Pipeline::still_valid_flow`], also `dpif::Upcall::still_valid`), and
//! [`Pipeline::revalidate_datapath`], which hands them to the datapath (anything that
//! implements [`dpif::Revalidate`]: `dpif::Datapath` in the daemon).
//!
//! Rule changes are narrowed before anything is re-checked: a megaflow can be affected by a
//! changed rule only if its translation looked up that rule's table (`dpif::TablesSeen`,
//! recorded by the walk), and, where that lookup saw the packet as it arrived, only if the
//! rule's match overlaps the megaflow (some packet of the megaflow matches the rule). Only
//! those megaflows are re-translated; so a controller loading rules one BARRIER at a time next
//! to live traffic pays for the megaflows each rule can touch, not for all of them.
//!
//! Threads: the control or housekeeping thread; re-checks take the bridge's table read lock
//! and MAC mutex like an upcall, and change nothing (no learning, no counters).

use crate::pipeline::{lock, Pipeline, Topology, Walk};
use crate::types::Match;
use dpif::{Action, FlowRef, Revalidate};
use std::time::Instant;
use wire::{Field, FlowKey};

/// Changes recorded since the last [`Pipeline::take_changes`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// The generation after the newest change recorded.
    pub version: u64,
    /// Tags of MAC table entries (and port limits) that changed; sorted, no duplicates.
    pub tags: Vec<u64>,
    /// Rules added, modified or removed: (bridge id, table, match). Empty when `full`.
    pub rules: Vec<(u16, u8, Match)>,
    /// Something else changed (groups, meters, ports, liveness, fail mode, or too many rules
    /// to list): every megaflow must be re-checked.
    pub full: bool,
}

/// Changed rules [`Changes`] lists before it falls back to `full`.
pub const CHANGED_RULES_MAX: usize = 1024;

impl Changes {
    /// True if nothing changed.
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty() && self.rules.is_empty() && !self.full
    }

    /// Records changed rules of bridge `bridge` (or `full` past [`CHANGED_RULES_MAX`]).
    pub(crate) fn add_rules(&mut self, bridge: u16, rules: Vec<(u8, Match)>, overflow: bool) {
        if self.full {
            return;
        }
        if overflow || self.rules.len() + rules.len() > CHANGED_RULES_MAX {
            self.set_full();
            return;
        }
        self.rules
            .extend(rules.into_iter().map(|(t, m)| (bridge, t, m)));
    }

    pub(crate) fn set_full(&mut self) {
        self.full = true;
        self.rules = Vec::new();
    }
}

impl Pipeline {
    /// Takes the changes recorded since the last call (the daemon revalidates with them).
    pub fn take_changes(&self) -> Changes {
        let mut c = std::mem::take(&mut *lock(&self.changes));
        c.tags.sort_unstable();
        c.tags.dedup();
        if c.version == 0 {
            c.version = self.generation();
        }
        c
    }

    /// Revalidates `dp` with the changes recorded since the last call: tags only (MAC learning
    /// and aging) remove the megaflows carrying them; anything else, or `full`, re-checks every
    /// megaflow. Returns how many megaflows were found stale (0 if nothing changed).
    pub fn revalidate_datapath<D: Revalidate + ?Sized>(
        &self,
        dp: &D,
        full: bool,
    ) -> Result<usize, D::Error> {
        let ch = self.take_changes();
        if full || ch.full {
            dp.revalidate_all(ch.version)
        } else if !ch.rules.is_empty() {
            let topo = self.topology();
            dp.revalidate_where(ch.version, &|f| {
                f.deps.touches(&ch.tags)
                    || (may_be_affected(&topo, f, &ch.rules)
                        && !self.still_valid_flow(f.key, f.mask, f.actions, &f.deps.tags))
            })
        } else if !ch.tags.is_empty() {
            dp.revalidate_tags(ch.version, &ch.tags)
        } else {
            Ok(0)
        }
    }

    /// Re-translates a megaflow (`key & mask`, as installed) without changing any state, and
    /// says whether the answer is the same: actions, mask and tags. What the datapath's
    /// `revalidate_all` asks after a rule, group or port change.
    pub fn still_valid_flow(
        &self,
        key: &FlowKey,
        mask: &FlowKey,
        actions: &[Action],
        tags: &[u64],
    ) -> bool {
        self.rechecks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tr = self.walk(key, 0, 0, Instant::now(), Walk::Check);
        let mut m = tr.mask;
        m.set_exact(Field::InPort);
        m.set_exact(Field::RecircId);
        tr.actions == actions && m == *mask && *tr.deps.tags == *tags
    }
}

/// Whether changing any of `rules` (bridge id, table, match) may change the translation of
/// megaflow `f`: it looked up one of those tables of its bridge, after the packet changed, or
/// before, with the rule's match overlapping the megaflow. Conservative: `true` when unsure.
pub(crate) fn may_be_affected(
    topo: &Topology,
    f: &FlowRef<'_>,
    rules: &[(u16, u8, Match)],
) -> bool {
    let seen = &f.deps.tables;
    if seen.any {
        return true;
    }
    if !rules
        .iter()
        .any(|&(_, t, _)| seen.saw_changed(t) || seen.saw_pristine(t))
    {
        return false;
    }
    let Some((br, of)) = topo.by_dp.get(&(f.key.get(Field::InPort) as u32)) else {
        return true;
    };
    // The megaflow as the pristine lookups saw it: in_port in OpenFlow numbering, registers
    // zero (every register bit exact).
    let mut as_seen = Match {
        key: *f.key,
        mask: *f.mask,
        regs: crate::nx::Regs::ZERO,
        regs_mask: crate::nx::Regs::ALL,
    };
    as_seen.key.set(Field::InPort, u64::from(*of));
    as_seen.mask.set_exact(Field::InPort);
    rules.iter().any(|&(bridge, table, ref m)| {
        bridge == br.id
            && (seen.saw_changed(table) || (seen.saw_pristine(table) && m.overlaps(&as_seen)))
    })
}
