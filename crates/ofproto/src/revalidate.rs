//! Per-flow revalidation on the pipeline's side: the changes recorded since the datapath was
//! last revalidated ([`Changes`]: tags of MAC table entries that changed, or `full` for rules,
//! groups, ports, liveness and fail mode), the re-check of one megaflow
//! ([`Pipeline::still_valid_flow`], also `dpif::Upcall::still_valid`), and
//! [`Pipeline::revalidate_datapath`], which hands them to the datapath (anything that
//! implements [`dpif::Revalidate`]: `dpif::Datapath` in the daemon).
//!
//! Threads: the control or housekeeping thread; re-checks take the bridge's table read lock
//! and MAC mutex like an upcall, and change nothing (no learning, no counters).

use crate::pipeline::{lock, Pipeline, Walk};
use dpif::{Action, Revalidate};
use std::time::Instant;
use wire::{Field, FlowKey};

/// Changes recorded since the last [`Pipeline::take_changes`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// The generation after the newest change recorded.
    pub version: u64,
    /// Tags of MAC table entries (and port limits) that changed; sorted, no duplicates.
    pub tags: Vec<u64>,
    /// Something else changed (rules, groups, ports, liveness, fail mode): every megaflow
    /// must be re-checked.
    pub full: bool,
}

impl Changes {
    /// True if nothing changed.
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty() && !self.full
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
        let tr = self.walk(key, 0, 0, Instant::now(), Walk::Check);
        let mut m = tr.mask;
        m.set_exact(Field::InPort);
        m.set_exact(Field::RecircId);
        tr.actions == actions && m == *mask && *tr.deps.tags == *tags
    }
}
