//! Exact-match cache (EMC): the first and cheapest lookup, keyed by the whole flow key.
//!
//! Owns: [`Emc`], 8192 entries, two candidate slots per hash (from different hash bits). An
//! entry holds the key's head words (`wire::flow`, *Head and tail*), its hash, a flow id with
//! the flow's generation, and whether the key has a tail; the tail words of such keys live in
//! a side table that a packet without a tail never touches. A hit needs the hash, the head,
//! the tail (both zero, or equal) to agree and the generation to be current: a 96-byte entry
//! per packet compared, as with the 9-word key, instead of 160. Insertion is probabilistic
//! (see `DpConfig::emc_insert_inv_prob`), as OVS's `emc-insert-inv-prob`, so a flood of new
//! flows does not thrash it.
//! Entries and tails sit on 2 MiB pages where the kernel grants them (`ksys::huge`).
//!
//! [`EmcGate`] turns the lookups off while they do not pay: with many more flows than entries
//! (100K, 1M) nearly every probe misses, and its two ways are cache misses of their own. The
//! gate watches the hit rate over windows of [`GATE_WINDOW`] probed packets; under 1 in 8 it
//! stops probing (and prefetching) except in one burst of [`GATE_SAMPLE`], whose probes keep
//! measuring; at 1 in 4 or more it probes every burst again. Insertion goes on either way (at
//! its 1/N rate), so the cache refills when the traffic narrows.
//! Threads: one per PMD, never shared. No locks.
use crate::simd::{Kernels, Scalar};
use ksys::huge::HugeTable;
use wire::flow::{HEAD_WORDS, TAIL};
use wire::FlowKey;

/// Number of entries.
pub const EMC_ENTRIES: usize = 8192;

/// Probed packets per [`EmcGate`] decision.
pub const GATE_WINDOW: u32 = 4096;
/// While the gate is closed, one burst in this many still probes.
pub const GATE_SAMPLE: u32 = 16;

/// Whether the EMC is worth probing, from its recent hit rate (see the module comment).
#[derive(Clone, Copy, Debug)]
pub struct EmcGate {
    open: bool,
    /// This burst probes (the gate is open, or this is a sampling burst).
    probe: bool,
    bursts: u32,
    probed: u32,
    hits: u32,
}

impl Default for EmcGate {
    fn default() -> Self {
        EmcGate {
            open: true,
            probe: true,
            bursts: 0,
            probed: 0,
            hits: 0,
        }
    }
}

impl EmcGate {
    /// At the start of a burst: whether its packets probe the EMC.
    #[inline(always)]
    pub fn start_burst(&mut self) -> bool {
        self.bursts = self.bursts.wrapping_add(1);
        self.probe = self.open || self.bursts.is_multiple_of(GATE_SAMPLE);
        self.probe
    }

    /// Whether the current burst probes.
    #[inline(always)]
    pub fn probing(&self) -> bool {
        self.probe
    }

    /// After a burst's lookups: `probed` packets looked in the EMC, `hits` found their flow.
    #[inline(always)]
    pub fn account(&mut self, probed: u32, hits: u32) {
        self.probed += probed;
        self.hits += hits;
        if self.probed >= GATE_WINDOW {
            self.decide();
        }
    }

    #[cold]
    fn decide(&mut self) {
        if self.open && self.hits * 8 < self.probed {
            self.open = false;
        } else if !self.open && self.hits * 4 >= self.probed {
            self.open = true;
        }
        self.probed = 0;
        self.hits = 0;
    }

    /// Whether the gate is open (every burst probes).
    pub fn is_open(&self) -> bool {
        self.open
    }
}
const EMC_MASK: u32 = EMC_ENTRIES as u32 - 1;
const EMC_SHIFT: u32 = 13;
const EMPTY: u32 = u32::MAX;

#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Entry {
    head: [u64; HEAD_WORDS],
    hash: u32,
    flow: u32,
    gen: u32,
    /// 1 if the key has a tail (then in `tails` at the same index), else 0.
    tail: u32,
}

const EMPTY_ENTRY: Entry = Entry {
    head: [0; HEAD_WORDS],
    hash: 0,
    flow: EMPTY,
    gen: 0,
    tail: 0,
};

type Tail = [u64; wire::KEY_WORDS - HEAD_WORDS];

/// The exact-match cache.
pub struct Emc {
    entries: HugeTable<Entry>,
    /// Tail words of the entries whose key has one (same index).
    tails: HugeTable<Tail>,
}

#[inline(always)]
fn tail_of(key: &FlowKey) -> &Tail {
    let (_, t) = key
        .w
        .split_last_chunk::<{ wire::KEY_WORDS - HEAD_WORDS }>()
        .expect("tail");
    t
}

impl Default for Emc {
    fn default() -> Self {
        Emc::new()
    }
}

impl Emc {
    /// An empty cache.
    pub fn new() -> Emc {
        Emc {
            entries: HugeTable::new(EMPTY_ENTRY, EMC_ENTRIES).expect("out of memory for the EMC"),
            tails: HugeTable::new([0; TAIL.end - TAIL.start], EMC_ENTRIES)
                .expect("out of memory for the EMC"),
        }
    }

    #[inline(always)]
    fn ways(hash: u32) -> [usize; 2] {
        [
            (hash & EMC_MASK) as usize,
            ((hash >> EMC_SHIFT) & EMC_MASK) as usize,
        ]
    }

    /// True if slot `i` holds exactly `key` (`key_tail`: whether `key` has a tail).
    #[inline(always)]
    fn holds<K: Kernels>(&self, k: K, i: usize, key: &FlowKey, hash: u32, key_tail: bool) -> bool {
        let e = &self.entries[i];
        e.hash == hash
            && e.flow != EMPTY
            && k.eq_head(&e.head, key.head())
            && (e.tail != 0) == key_tail
            && (!key_tail || self.tails[i] == *tail_of(key))
    }

    /// Starts loading both candidate entries of `hash` (a batched lookup issues this for a
    /// whole burst before comparing any key).
    #[inline(always)]
    pub fn prefetch(&self, hash: u32) {
        for i in Self::ways(hash) {
            let i = i & (EMC_ENTRIES - 1);
            guestmem::prefetch_ref(&self.entries[i], true);
        }
    }

    /// The (flow id, generation) cached for `key`, whose hash is `hash`.
    #[inline]
    pub fn lookup(&self, key: &FlowKey, hash: u32) -> Option<(u32, u32)> {
        self.lookup_in(Scalar, key, hash)
    }

    /// [`Emc::lookup`] with kernels `k` (a PMD's burst function compiled for them).
    #[inline(always)]
    pub fn lookup_in<K: Kernels>(&self, k: K, key: &FlowKey, hash: u32) -> Option<(u32, u32)> {
        let key_tail = key.has_tail();
        for i in Self::ways(hash) {
            // `ways` masks to EMC_MASK, and the slices have EMC_ENTRIES entries.
            let i = i & (EMC_ENTRIES - 1);
            if self.holds(k, i, key, hash, key_tail) {
                let e = &self.entries[i];
                return Some((e.flow, e.gen));
            }
        }
        None
    }

    /// Caches `key -> (flow, gen)`: refreshes the entry of the same key, else fills an empty
    /// way, else replaces the way whose stored hash is smaller (a cheap pseudo-random choice).
    pub fn insert(&mut self, key: &FlowKey, hash: u32, flow: u32, gen: u32) {
        let [a, b] = Self::ways(hash);
        let key_tail = key.has_tail();
        let pick = {
            let (ea, eb) = (&self.entries[a], &self.entries[b]);
            if self.holds(Scalar, a, key, hash, key_tail) {
                a
            } else if self.holds(Scalar, b, key, hash, key_tail) {
                b
            } else if ea.flow == EMPTY {
                a
            } else if eb.flow == EMPTY {
                b
            } else if ea.hash < eb.hash {
                a
            } else {
                b
            }
        };
        self.entries[pick] = Entry {
            head: *key.head(),
            hash,
            flow,
            gen,
            tail: u32::from(key_tail),
        };
        if key_tail {
            self.tails[pick] = *tail_of(key);
        }
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.entries.fill(EMPTY_ENTRY);
    }

    /// Occupied entries (for tests and stats; walks the table).
    pub fn occupancy(&self) -> usize {
        self.entries.iter().filter(|e| e.flow != EMPTY).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::{self, BurstFn, Isa};

    struct Probe<'a>(&'a Emc, &'a FlowKey, u32);
    impl BurstFn for Probe<'_> {
        type Output = Option<(u32, u32)>;
        fn call<K: Kernels>(self, k: K) -> Self::Output {
            self.0.lookup_in(k, self.1, self.2)
        }
    }

    /// [`Emc::lookup`] with every kernel variant this CPU has, which must agree.
    fn lookup_all(e: &Emc, key: &FlowKey, hash: u32) -> Option<(u32, u32)> {
        let got: Vec<_> = Isa::available()
            .into_iter()
            .map(|isa| simd::dispatch(isa, Probe(e, key, hash)))
            .collect();
        assert!(
            got.windows(2).all(|w| w[0] == w[1]),
            "variants disagree: {got:?}"
        );
        got[0]
    }

    #[test]
    fn the_gate_closes_on_a_low_hit_rate_samples_and_reopens() {
        let mut g = EmcGate::default();
        assert!(g.start_burst() && g.is_open());
        // 1 hit in 10: closes after a window.
        for _ in 0..GATE_WINDOW / 32 {
            g.start_burst();
            g.account(32, 3);
        }
        assert!(!g.is_open());
        // Closed: one burst in GATE_SAMPLE probes.
        let probing = (0..GATE_SAMPLE * 4).filter(|_| g.start_burst()).count();
        assert_eq!(probing, 4);
        // Sampled probes that hit 1 in 5 do not reopen it; 1 in 3 does.
        for _ in 0..GATE_WINDOW / 32 {
            g.account(32, 6);
        }
        assert!(!g.is_open());
        for _ in 0..GATE_WINDOW / 32 {
            g.account(32, 11);
        }
        assert!(g.is_open());
        // Open, a rate between the two thresholds keeps it open.
        for _ in 0..GATE_WINDOW / 32 {
            g.account(32, 6);
        }
        assert!(g.is_open() && g.start_burst());
    }

    fn key(i: u64) -> FlowKey {
        let mut k = FlowKey::ZERO;
        k.w[4] = i;
        k
    }

    #[test]
    fn insert_lookup_refresh_and_clear() {
        let mut e = Emc::new();
        let k = key(1);
        assert_eq!(lookup_all(&e, &k, k.hash()), None);
        e.insert(&k, k.hash(), 7, 1);
        assert_eq!(lookup_all(&e, &k, k.hash()), Some((7, 1)));
        e.insert(&k, k.hash(), 8, 2);
        assert_eq!(lookup_all(&e, &k, k.hash()), Some((8, 2)));
        assert_eq!(e.occupancy(), 1);
        // Same hash, different key: no hit.
        assert_eq!(lookup_all(&e, &key(2), k.hash()), None);
        e.clear();
        assert_eq!(lookup_all(&e, &k, k.hash()), None);
    }

    /// Keys with the same head and different tails (none, or two different ones), and with the
    /// same head and tail but a different `recirc_id`/`ct_state` word, never hit each other's
    /// entries, even when handed the same hash (a collision): the tail flag and the side table
    /// are compared, not only the head.
    #[test]
    fn keys_differing_only_in_conntrack_words_never_hit_each_other() {
        use wire::Field;
        let plain = key(9);
        let mut t1 = plain;
        t1.set(Field::CtMark, 1);
        let mut t2 = plain;
        t2.set(Field::CtLabelLo, 1);
        let mut r = plain;
        r.set(Field::RecircId, 1);
        let mut rt = t1;
        rt.set(Field::RecircId, 1);
        let keys = [plain, t1, t2, r, rt];
        for (i, a) in keys.iter().enumerate() {
            for h in [a.hash(), 0x1234_5678] {
                let mut e = Emc::new();
                e.insert(a, h, i as u32, 0);
                for (j, b) in keys.iter().enumerate() {
                    let want = (i == j).then_some((i as u32, 0));
                    assert_eq!(
                        lookup_all(&e, b, h),
                        want,
                        "entry {i}, probe {j}, hash {h:#x}"
                    );
                }
                // Both ways of a hash share a slot with their keys: insert every other key
                // with the same hash and check each still finds only its own.
                for (j, b) in keys.iter().enumerate() {
                    e.insert(b, h, j as u32, 0);
                    assert_eq!(lookup_all(&e, b, h), Some((j as u32, 0)));
                }
            }
        }
        // A tail stored in a slot is forgotten when a key without a tail takes the slot.
        let mut e = Emc::new();
        let h = 0x0042_0042;
        e.insert(&t1, h, 1, 0);
        e.insert(&t2, h, 2, 0);
        e.insert(&plain, h, 3, 0);
        assert_eq!(lookup_all(&e, &plain, h), Some((3, 0)));
        assert!(lookup_all(&e, &t1, h).is_none() || lookup_all(&e, &t2, h).is_none());
    }

    #[test]
    fn many_keys_mostly_fit() {
        let mut e = Emc::new();
        for i in 0..4000 {
            let k = key(i);
            e.insert(&k, k.hash(), i as u32, 0);
        }
        let hits = (0..4000)
            .filter(|&i| lookup_all(&e, &key(i), key(i).hash()) == Some((i as u32, 0)))
            .count();
        assert!(hits > 3000, "only {hits} of 4000 kept");
    }
}
