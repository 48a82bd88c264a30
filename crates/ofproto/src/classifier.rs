//! One OpenFlow table as a tuple-space classifier: rules are grouped into subtables by mask,
//! each subtable is a hash map from the masked key to the rules with that exact match (sorted by
//! priority, highest first). Lookup probes subtables in order of their highest priority and stops
//! as soon as no remaining subtable can beat the best match; the union of the probed masks is the
//! set of key bits the decision depended on (the megaflow mask).
//!
//! Owns: [`Rule`] (immutable once published, with shared atomic counters) and [`Table`].
//! Threads: mutated by the control thread under the bridge's table write lock; looked up by PMD
//! threads (upcalls) under the read lock. No locks inside.

use crate::types::{Instruction, Match, OfAction, OfPort, Regs};
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::{Field, FlowKey};

/// A fast hasher for flow keys (multiply-rotate over 64-bit words; keys are not attacker-chosen
/// in the control plane and the datapath key is masked, so HashDoS resistance is not needed).
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl KeyHasher {
    #[inline]
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(23) ^ v).wrapping_mul(K);
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            self.add(u64::from_le_bytes(b));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        let h = self.0;
        (h ^ (h >> 29)).wrapping_mul(K) ^ (h >> 32)
    }
}

/// Hash-map builder for flow keys.
pub type KeyHash = BuildHasherDefault<KeyHasher>;

/// Counters shared by a rule and its modified successors.
#[derive(Debug)]
pub struct RuleStats {
    pub(crate) created: Instant,
    pub(crate) packets: AtomicU64,
    pub(crate) bytes: AtomicU64,
    /// Nanoseconds after `created` of the last use (0 = never used: idle since creation).
    pub(crate) used_ns: AtomicU64,
}

impl RuleStats {
    pub(crate) fn new(created: Instant, packets: u64, bytes: u64) -> Arc<RuleStats> {
        Arc::new(RuleStats {
            created,
            packets: AtomicU64::new(packets),
            bytes: AtomicU64::new(bytes),
            used_ns: AtomicU64::new(0),
        })
    }

    /// Adds traffic seen at `now`.
    pub(crate) fn credit(&self, packets: u64, bytes: u64, now: Instant, flags: u16) {
        use crate::types::flags::{NO_BYT_COUNTS, NO_PKT_COUNTS};
        if flags & NO_PKT_COUNTS == 0 {
            self.packets.fetch_add(packets, Ordering::Relaxed);
        }
        if flags & NO_BYT_COUNTS == 0 {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        let ns = now.saturating_duration_since(self.created).as_nanos() as u64;
        self.used_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// When the rule was last used (its creation time if never).
    pub(crate) fn last_used(&self) -> Instant {
        self.created + Duration::from_nanos(self.used_ns.load(Ordering::Relaxed))
    }
}

/// One OpenFlow rule. Immutable once in a table; a modify installs a new `Rule` sharing the
/// counters.
#[derive(Debug)]
pub struct Rule {
    /// Table it lives in.
    pub table_id: u8,
    /// Priority.
    pub priority: u16,
    /// Match (in_port in OpenFlow numbering).
    pub match_: Match,
    /// Cookie.
    pub cookie: u64,
    /// Idle timeout in seconds (0 = none).
    pub idle_timeout: u16,
    /// Hard timeout in seconds (0 = none).
    pub hard_timeout: u16,
    /// Flow-mod flags.
    pub flags: u16,
    /// Instructions in execution order.
    pub instructions: Vec<Instruction>,
    /// Per-bridge unique number (packet-in cookies refer to rules by it).
    pub(crate) serial: u32,
    pub(crate) stats: Arc<RuleStats>,
}

impl Rule {
    /// Packets counted so far.
    pub fn packet_count(&self) -> u64 {
        self.stats.packets.load(Ordering::Relaxed)
    }

    /// Bytes counted so far.
    pub fn byte_count(&self) -> u64 {
        self.stats.bytes.load(Ordering::Relaxed)
    }

    /// Time since creation.
    pub fn duration(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.stats.created)
    }

    /// Time since the last packet (or creation).
    pub fn idle_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.stats.last_used())
    }

    /// Every action of every instruction.
    pub fn all_actions(&self) -> impl Iterator<Item = &OfAction> {
        self.instructions.iter().flat_map(|i| i.actions().iter())
    }

    /// True if an apply or write action outputs to `port` (OpenFlow `out_port` filter).
    pub fn outputs_to(&self, port: OfPort) -> bool {
        self.all_actions()
            .any(|a| matches!(a, OfAction::Output { port: p, .. } if *p == port))
    }

    /// True if an apply or write action sends to group `group` (OpenFlow `out_group` filter).
    pub fn uses_group(&self, group: u32) -> bool {
        self.all_actions()
            .any(|a| matches!(a, OfAction::Group(g) if *g == group))
    }

    /// The meter the rule's meter instruction names, if any.
    pub fn meter(&self) -> Option<u32> {
        self.instructions.iter().find_map(|i| match i {
            crate::types::Instruction::Meter(m) => Some(*m),
            _ => None,
        })
    }

    /// The first CONTROLLER output's max_len, if any.
    pub fn controller_max_len(&self) -> Option<u16> {
        self.all_actions().find_map(|a| match a {
            OfAction::Output { port, max_len } if *port == crate::types::ofpp::CONTROLLER => {
                Some(*max_len)
            }
            _ => None,
        })
    }
}

/// Rules sharing one match (same mask, same masked key), highest priority first.
type Bucket = Vec<Arc<Rule>>;

/// Cumulative stage masks for staged lookup: L2 (in_port, VLAN, MACs, eth_type), then + L3
/// (IP/ARP fields). The last stage is the whole subtable mask (+ L4).
fn stage_limits() -> [FlowKey; 2] {
    let mut l2 = FlowKey::ZERO;
    for f in [
        Field::InPort,
        Field::EthType,
        Field::VlanTci,
        Field::EthDst,
        Field::EthSrc,
    ] {
        l2.set_exact(f);
    }
    let mut l3 = FlowKey::ZERO;
    for w in 0..wire::KEY_WORDS {
        l3.w[w] = u64::MAX;
    }
    for f in [Field::TpSrc, Field::TpDst, Field::TcpFlags] {
        l3.set(f, 0);
    }
    [l2, l3]
}

/// A set of stage-masked keys with reference counts (one per rule).
type StageSet = HashMap<FlowKey, u32, KeyHash>;

/// A subtable's identity and a rule's exact-match key: packet bits and register bits.
type Masked = (FlowKey, Regs);

struct Subtable {
    mask: FlowKey,
    /// Register bits every rule here matches (not part of the megaflow: registers are
    /// pipeline state).
    regs_mask: Regs,
    /// Staged lookup (as OVS): if a packet's L2 (or L2+L3) bits match no rule here, only those
    /// bits enter the megaflow mask, not the subtable's L3/L4 bits. Stages that add no bits
    /// are left out.
    stages: Vec<(FlowKey, StageSet)>,
    rules: HashMap<Masked, Bucket, KeyHash>,
    /// priority -> number of rules with it (gives the max priority after removals).
    prios: BTreeMap<u16, u32>,
}

impl Subtable {
    fn new(mask: FlowKey, regs_mask: Regs) -> Subtable {
        let mut stages = Vec::new();
        let mut prev = FlowKey::ZERO;
        for limit in stage_limits() {
            let m = mask.masked(&limit);
            if m != prev && m != mask {
                stages.push((m, StageSet::default()));
                prev = m;
            }
        }
        Subtable {
            mask,
            regs_mask,
            stages,
            rules: HashMap::default(),
            prios: BTreeMap::new(),
        }
    }

    fn max_priority(&self) -> u16 {
        self.prios.keys().next_back().copied().unwrap_or(0)
    }

    fn stages_add(&mut self, key: &FlowKey) {
        for (m, set) in &mut self.stages {
            *set.entry(key.masked(m)).or_default() += 1;
        }
    }

    fn stages_remove(&mut self, key: &FlowKey) {
        for (m, set) in &mut self.stages {
            let k = key.masked(m);
            if let Some(c) = set.get_mut(&k) {
                *c -= 1;
                if *c == 0 {
                    set.remove(&k);
                }
            }
        }
    }

    /// The best rule here for `key`, ORing into `wc` the bits consulted.
    #[inline]
    fn lookup(&self, key: &FlowKey, regs: &Regs, wc: &mut FlowKey) -> Option<&Arc<Rule>> {
        for (m, set) in &self.stages {
            if !set.contains_key(&key.masked(m)) {
                *wc = wc.union(m);
                return None;
            }
        }
        *wc = wc.union(&self.mask);
        let r = if self.regs_mask.is_zero() {
            Regs::ZERO
        } else {
            regs.masked(&self.regs_mask)
        };
        self.rules.get(&(key.masked(&self.mask), r))?.first()
    }
}

/// One flow table (tuple space search).
#[derive(Default)]
pub struct Table {
    slots: Vec<Option<Subtable>>,
    free: Vec<usize>,
    by_mask: HashMap<Masked, usize, KeyHash>,
    /// (max priority, slot), highest first: the probe order.
    order: Vec<(u16, usize)>,
    n_rules: usize,
}

impl Table {
    /// Number of rules.
    pub fn len(&self) -> usize {
        self.n_rules
    }

    /// True if the table holds no rules.
    pub fn is_empty(&self) -> bool {
        self.n_rules == 0
    }

    /// Number of distinct masks.
    pub fn n_subtables(&self) -> usize {
        self.order.len()
    }

    /// The highest-priority rule matching `key` (and the all-zero register file); ORs every
    /// probed subtable's mask into `wc`.
    #[inline]
    pub fn lookup(&self, key: &FlowKey, wc: &mut FlowKey) -> Option<&Arc<Rule>> {
        self.lookup_regs(key, &Regs::ZERO, wc)
    }

    /// The highest-priority rule matching `key` and the register file `regs`; ORs every probed
    /// subtable's packet mask into `wc` (register bits never enter it).
    #[inline]
    pub fn lookup_regs(&self, key: &FlowKey, regs: &Regs, wc: &mut FlowKey) -> Option<&Arc<Rule>> {
        let mut best: Option<&Arc<Rule>> = None;
        for &(max_prio, slot) in &self.order {
            if matches!(best, Some(b) if b.priority >= max_prio) {
                break;
            }
            let Some(st) = self.slots[slot].as_ref() else {
                continue;
            };
            if let Some(r) = st.lookup(key, regs, wc) {
                if best.is_none_or(|b| r.priority > b.priority) {
                    best = Some(r);
                }
            }
        }
        best
    }

    /// Inserts a rule; returns the rule it replaced (same match and priority), if any.
    pub fn insert(&mut self, rule: Arc<Rule>) -> Option<Arc<Rule>> {
        let mask = (rule.match_.mask, rule.match_.regs_mask);
        let slot = match self.by_mask.get(&mask) {
            Some(&s) => s,
            None => self.new_subtable(mask),
        };
        let Some(st) = self.slots[slot].as_mut() else {
            unreachable!("by_mask names a live slot")
        };
        let old_max = st.max_priority();
        let key = rule.match_.key;
        let bucket = st.rules.entry((key, rule.match_.regs)).or_default();
        let prio = rule.priority;
        match bucket.binary_search_by(|r| prio.cmp(&r.priority)) {
            Ok(pos) => return Some(std::mem::replace(&mut bucket[pos], rule)),
            Err(pos) => bucket.insert(pos, rule),
        }
        st.stages_add(&key);
        *st.prios.entry(prio).or_default() += 1;
        self.n_rules += 1;
        let new_max = st.max_priority();
        if new_max != old_max || self.order.iter().all(|&(_, s)| s != slot) {
            self.reorder(slot, new_max);
        }
        None
    }

    fn new_subtable(&mut self, mask: Masked) -> usize {
        let st = Subtable::new(mask.0, mask.1);
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s] = Some(st);
                s
            }
            None => {
                self.slots.push(Some(st));
                self.slots.len() - 1
            }
        };
        self.by_mask.insert(mask, slot);
        slot
    }

    /// Moves `slot` to its place in the probe order for `max_prio`.
    fn reorder(&mut self, slot: usize, max_prio: u16) {
        if let Some(i) = self.order.iter().position(|&(_, s)| s == slot) {
            self.order.remove(i);
        }
        let pos = self.order.partition_point(|&(p, _)| p >= max_prio);
        self.order.insert(pos, (max_prio, slot));
    }

    /// The rule with exactly this match and priority.
    pub fn find_strict(&self, m: &Match, priority: u16) -> Option<&Arc<Rule>> {
        let st = self.slots[*self.by_mask.get(&(m.mask, m.regs_mask))?].as_ref()?;
        let bucket = st.rules.get(&(m.key, m.regs))?;
        bucket.iter().find(|r| r.priority == priority)
    }

    /// Removes the rule with exactly this match and priority.
    pub fn remove(&mut self, m: &Match, priority: u16) -> Option<Arc<Rule>> {
        let slot = *self.by_mask.get(&(m.mask, m.regs_mask))?;
        let st = self.slots[slot].as_mut()?;
        let old_max = st.max_priority();
        let bucket = st.rules.get_mut(&(m.key, m.regs))?;
        let pos = bucket.iter().position(|r| r.priority == priority)?;
        let rule = bucket.remove(pos);
        if bucket.is_empty() {
            st.rules.remove(&(m.key, m.regs));
        }
        st.stages_remove(&m.key);
        if let Some(c) = st.prios.get_mut(&priority) {
            *c -= 1;
            if *c == 0 {
                st.prios.remove(&priority);
            }
        }
        self.n_rules -= 1;
        if st.rules.is_empty() {
            self.by_mask.remove(&(m.mask, m.regs_mask));
            self.slots[slot] = None;
            self.free.push(slot);
            self.order.retain(|&(_, s)| s != slot);
        } else {
            let new_max = st.max_priority();
            if new_max != old_max {
                self.reorder(slot, new_max);
            }
        }
        Some(rule)
    }

    /// Every rule, subtable by subtable (no particular order).
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Rule>> {
        self.slots
            .iter()
            .flatten()
            .flat_map(|st| st.rules.values().flatten())
    }

    /// Rules whose match is covered by `filter` (non-strict); skips subtables whose mask cannot
    /// include the filter's.
    pub fn covered_by<'a>(&'a self, filter: &'a Match) -> impl Iterator<Item = &'a Arc<Rule>> {
        self.slots
            .iter()
            .flatten()
            .filter(move |st| (0..wire::KEY_WORDS).all(|i| filter.mask.w[i] & !st.mask.w[i] == 0))
            .flat_map(|st| st.rules.values().flatten())
            .filter(move |r| filter.covers(&r.match_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(prio: u16, m: Match) -> Arc<Rule> {
        Arc::new(Rule {
            table_id: 0,
            priority: prio,
            match_: m,
            cookie: 0,
            idle_timeout: 0,
            hard_timeout: 0,
            flags: 0,
            instructions: Vec::new(),
            serial: 0,
            stats: RuleStats::new(Instant::now(), 0, 0),
        })
    }

    #[test]
    fn lookup_prefers_priority_and_reports_probed_masks() {
        let mut t = Table::default();
        let mut m1 = Match::ANY;
        m1.set(Field::TpDst, 80);
        let mut m2 = Match::ANY;
        m2.set(Field::EthDst, 5);
        t.insert(rule(10, m1));
        t.insert(rule(20, m2));
        t.insert(rule(0, Match::ANY));
        assert_eq!(t.n_subtables(), 3);
        let mut k = FlowKey::ZERO;
        k.set(Field::TpDst, 80);
        let mut wc = FlowKey::ZERO;
        assert_eq!(t.lookup(&k, &mut wc).map(|r| r.priority), Some(10));
        // Probed eth_dst (prio 20, no match) and tp_dst (match); the ANY subtable was skipped.
        assert_eq!(wc.get(Field::EthDst), Field::EthDst.full());
        assert_eq!(wc.get(Field::TpDst), 0xffff);
        k.set(Field::EthDst, 5);
        let mut wc = FlowKey::ZERO;
        assert_eq!(t.lookup(&k, &mut wc).map(|r| r.priority), Some(20));
        assert_eq!(wc.get(Field::TpDst), 0, "stopped after the best subtable");
    }

    #[test]
    fn replace_and_remove_keep_order_consistent() {
        let mut t = Table::default();
        let mut m = Match::ANY;
        m.set(Field::IpProto, 6);
        assert!(t.insert(rule(5, m)).is_none());
        assert!(
            t.insert(rule(5, m)).is_some(),
            "same match+priority replaces"
        );
        assert!(t.insert(rule(7, m)).is_none());
        assert_eq!(t.len(), 2);
        assert!(t.remove(&m, 7).is_some());
        let mut k = FlowKey::ZERO;
        k.set(Field::IpProto, 6);
        let mut wc = FlowKey::ZERO;
        assert_eq!(t.lookup(&k, &mut wc).map(|r| r.priority), Some(5));
        assert!(t.remove(&m, 5).is_some());
        assert!(t.is_empty());
        assert_eq!(t.n_subtables(), 0);
        assert!(t.lookup(&k, &mut wc).is_none());
    }
}
