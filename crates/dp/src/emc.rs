//! Exact-match cache (EMC): the first and cheapest lookup, keyed by the whole flow key.
//!
//! Owns: [`Emc`], 8192 entries, two candidate slots per hash (from different hash bits). An
//! entry holds the full key, its hash, and a flow id with the flow's generation; a hit needs the
//! hash and the whole key to agree and the generation to be current. Insertion is probabilistic
//! (see `DpConfig::emc_insert_inv_prob`), as OVS's `emc-insert-inv-prob`, so a flood of new
//! flows does not thrash it.
//! Threads: one per PMD, never shared. No locks.
use wire::FlowKey;

/// Number of entries.
pub const EMC_ENTRIES: usize = 8192;
const EMC_MASK: u32 = EMC_ENTRIES as u32 - 1;
const EMC_SHIFT: u32 = 13;
const EMPTY: u32 = u32::MAX;

#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Entry {
    key: FlowKey,
    hash: u32,
    flow: u32,
    gen: u32,
}

const EMPTY_ENTRY: Entry = Entry {
    key: FlowKey::ZERO,
    hash: 0,
    flow: EMPTY,
    gen: 0,
};

/// The exact-match cache.
pub struct Emc {
    entries: Box<[Entry]>,
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
            entries: vec![EMPTY_ENTRY; EMC_ENTRIES].into_boxed_slice(),
        }
    }

    #[inline(always)]
    fn ways(hash: u32) -> [usize; 2] {
        [
            (hash & EMC_MASK) as usize,
            ((hash >> EMC_SHIFT) & EMC_MASK) as usize,
        ]
    }

    /// The (flow id, generation) cached for `key`, whose hash is `hash`.
    #[inline]
    pub fn lookup(&self, key: &FlowKey, hash: u32) -> Option<(u32, u32)> {
        for i in Self::ways(hash) {
            // `ways` masks to EMC_MASK, and the slice has EMC_ENTRIES entries.
            let e = &self.entries[i & (EMC_ENTRIES - 1)];
            if e.hash == hash && e.flow != EMPTY && e.key == *key {
                return Some((e.flow, e.gen));
            }
        }
        None
    }

    /// Caches `key -> (flow, gen)`: refreshes the entry of the same key, else fills an empty
    /// way, else replaces the way whose stored hash is smaller (a cheap pseudo-random choice).
    pub fn insert(&mut self, key: &FlowKey, hash: u32, flow: u32, gen: u32) {
        let [a, b] = Self::ways(hash);
        let pick = {
            let (ea, eb) = (&self.entries[a], &self.entries[b]);
            if ea.flow != EMPTY && ea.hash == hash && ea.key == *key {
                a
            } else if eb.flow != EMPTY && eb.hash == hash && eb.key == *key {
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
            key: *key,
            hash,
            flow,
            gen,
        };
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

    fn key(i: u64) -> FlowKey {
        let mut k = FlowKey::ZERO;
        k.w[4] = i;
        k
    }

    #[test]
    fn insert_lookup_refresh_and_clear() {
        let mut e = Emc::new();
        let k = key(1);
        assert_eq!(e.lookup(&k, k.hash()), None);
        e.insert(&k, k.hash(), 7, 1);
        assert_eq!(e.lookup(&k, k.hash()), Some((7, 1)));
        e.insert(&k, k.hash(), 8, 2);
        assert_eq!(e.lookup(&k, k.hash()), Some((8, 2)));
        assert_eq!(e.occupancy(), 1);
        // Same hash, different key: no hit.
        assert_eq!(e.lookup(&key(2), k.hash()), None);
        e.clear();
        assert_eq!(e.lookup(&k, k.hash()), None);
    }

    #[test]
    fn many_keys_mostly_fit() {
        let mut e = Emc::new();
        for i in 0..4000 {
            let k = key(i);
            e.insert(&k, k.hash(), i as u32, 0);
        }
        let hits = (0..4000)
            .filter(|&i| e.lookup(&key(i), key(i).hash()) == Some((i as u32, 0)))
            .count();
        assert!(hits > 3000, "only {hits} of 4000 kept");
    }
}
