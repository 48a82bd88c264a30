//! Megaflow classifier (dpcls): tuple-space search.
//!
//! Owns: [`Dpcls`], one [`Subtable`] per distinct mask, each a hash table from masked key to
//! flow id (open addressing, linear probing, backward-shift deletion). A lookup tries subtables
//! in rank order; [`Dpcls::rerank`] sorts them by hits since the last ranking, so the subtables
//! that match most traffic are tried first. Megaflows are expected not to overlap (the pipeline
//! guarantees it); if they do, the first subtable in rank order wins.
//!
//! A subtable whose mask has a zero tail (`wire::flow`, *Head and tail*: every mask that
//! matches no conntrack mark, label or original-tuple field) masks, hashes and compares only
//! the head words, ten of the key's twenty-seven: its masked keys have a zero tail, and the
//! head hash is the full hash of such a key, so both kinds of lookup find the same entries.
//! Probes compare an entry with the key under the mask using the kernels of [`crate::simd`]
//! ([`Dpcls::lookup_batch_in`] is inlined into a PMD's burst function compiled for one).
//! Threads: one per PMD, never shared. No locks. Inserting may allocate (miss path only).
use crate::simd::{self, BurstFn, Isa, Kernels, Scalar};
use wire::flow::HEAD_WORDS;
use wire::FlowKey;

/// A flow id that means "no flow".
pub const NO_FLOW: u32 = u32::MAX;

/// Hash and id first: a head-only lookup reads the first 88 bytes of an entry. Aligned to 32
/// bytes (the size, 224, is a multiple): every entry then starts at 0 or 32 within a cache
/// line, so those 88 bytes always lie in the two lines `FlowMap::prefetch` requests (at 8-byte
/// alignment half the entries spread them over three).
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Entry {
    hash: u32,
    id: u32,
    key: FlowKey,
}

const EMPTY: Entry = Entry {
    hash: 0,
    id: NO_FLOW,
    key: FlowKey::ZERO,
};

/// Masked key -> flow id, open addressing.
struct FlowMap {
    entries: Vec<Entry>,
    len: usize,
}

impl FlowMap {
    fn new() -> FlowMap {
        FlowMap {
            entries: vec![EMPTY; 8],
            len: 0,
        }
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.entries.len() - 1
    }

    /// The entry holding `key` (control path: any key, compared whole).
    #[inline]
    fn find(&self, key: &FlowKey, hash: u32) -> Option<usize> {
        self.probe(hash, |e| e.key == *key)
    }

    /// The entry whose key is `key & mask`, compared in the head words only (exact only for a
    /// head-only subtable: every entry's tail is zero). Entries are stored masked, so this is
    /// `entry & mask == key & mask`, with no masked copy of `key` built.
    #[inline(always)]
    fn find_head<K: Kernels>(
        &self,
        k: K,
        key: &FlowKey,
        mask: &FlowKey,
        hash: u32,
    ) -> Option<usize> {
        self.probe(hash, |e| {
            k.eq_masked_head(e.key.head(), key.head(), mask.head())
        })
    }

    /// Linear probing from `hash`'s home slot for an entry with this hash that `same` accepts.
    #[inline(always)]
    fn probe(&self, hash: u32, same: impl Fn(&Entry) -> bool) -> Option<usize> {
        let m = self.mask();
        let mut i = hash as usize & m;
        loop {
            let e = &self.entries[i];
            if e.id == NO_FLOW {
                return None;
            }
            if e.hash == hash && same(e) {
                return Some(i);
            }
            i = (i + 1) & m;
        }
    }

    /// Starts loading the home entry of `hash` (its first 88 bytes: hash, id, key head; two
    /// lines).
    #[inline(always)]
    fn prefetch(&self, hash: u32) {
        let i = hash as usize & self.mask();
        guestmem::prefetch_ref(&self.entries[i], true);
    }

    fn insert(&mut self, key: &FlowKey, hash: u32, id: u32) {
        if (self.len + 1) * 4 > self.entries.len() * 3 {
            self.grow();
        }
        let m = self.mask();
        let mut i = hash as usize & m;
        while self.entries[i].id != NO_FLOW {
            i = (i + 1) & m;
        }
        self.entries[i] = Entry {
            hash,
            id,
            key: *key,
        };
        self.len += 1;
    }

    fn grow(&mut self) {
        let bigger = vec![EMPTY; self.entries.len() * 2];
        let old = std::mem::replace(&mut self.entries, bigger);
        self.len = 0;
        for e in old.iter().filter(|e| e.id != NO_FLOW) {
            self.insert(&e.key, e.hash, e.id);
        }
    }

    fn remove_at(&mut self, mut hole: usize) {
        let m = self.mask();
        let mut i = hole;
        loop {
            i = (i + 1) & m;
            let e = self.entries[i];
            if e.id == NO_FLOW {
                break;
            }
            let home = e.hash as usize & m;
            // Move `e` into the hole unless its home lies cyclically in (hole, i].
            let stays = if hole <= i {
                hole < home && home <= i
            } else {
                hole < home || home <= i
            };
            if !stays {
                self.entries[hole] = e;
                hole = i;
            }
        }
        self.entries[hole] = EMPTY;
        self.len -= 1;
    }
}

/// All megaflows sharing one mask.
pub struct Subtable {
    mask: FlowKey,
    /// The mask's tail is zero: lookups use the head words only.
    head_only: bool,
    map: FlowMap,
    hits: u64,
}

impl Subtable {
    /// The mask.
    pub fn mask(&self) -> &FlowKey {
        &self.mask
    }

    /// Flows in this subtable.
    pub fn len(&self) -> usize {
        self.map.len
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.map.len == 0
    }

    /// True if lookups use the head words only (the mask's tail is zero).
    pub fn head_only(&self) -> bool {
        self.head_only
    }

    #[inline(always)]
    fn lookup<K: Kernels>(&self, k: K, key: &FlowKey) -> u32 {
        let found = if self.head_only {
            self.map.find_head(k, key, &self.mask, self.hash_head(key))
        } else {
            self.lookup_wide(k, key)
        };
        match found {
            Some(i) => self.map.entries[i].id,
            None => NO_FLOW,
        }
    }

    /// The hash of `key`'s head words under this subtable's mask (scalar in every variant:
    /// the masked words feed the hash's multiplies in general registers).
    #[inline(always)]
    fn hash_head(&self, key: &FlowKey) -> u32 {
        let mut mk = [0u64; HEAD_WORDS];
        for (i, o) in mk.iter_mut().enumerate() {
            *o = key.w[i] & self.mask.w[i];
        }
        FlowKey::hash_head_words(&mk)
    }

    /// A lookup in a subtable whose mask has a tail: every word.
    #[inline(always)]
    fn lookup_wide<K: Kernels>(&self, k: K, key: &FlowKey) -> Option<usize> {
        let hash = key.hash_masked(&self.mask);
        let m = &self.mask.w;
        self.map
            .probe(hash, |e| k.eq_masked_all(&e.key.w, &key.w, m))
    }
}

/// The classifier.
pub struct Dpcls {
    subtables: Vec<Subtable>,
    /// The kernels [`Dpcls::lookup_batch`] runs with.
    isa: Isa,
}

impl Default for Dpcls {
    fn default() -> Self {
        Dpcls::with_isa(Isa::detect())
    }
}

/// [`Dpcls::lookup_batch_in`] as a [`BurstFn`].
struct Batch<'a> {
    cls: &'a mut Dpcls,
    keys: &'a [FlowKey],
    out: &'a mut [u32],
    todo: u32,
}

impl BurstFn for Batch<'_> {
    type Output = u32;
    #[inline(always)]
    fn call<K: Kernels>(self, k: K) -> u32 {
        self.cls.lookup_batch_in(k, self.keys, self.out, self.todo)
    }
}

impl Dpcls {
    /// An empty classifier using the best kernels this CPU has.
    pub fn new() -> Dpcls {
        Dpcls::default()
    }

    /// An empty classifier whose [`Dpcls::lookup_batch`] uses `isa`'s kernels.
    pub fn with_isa(isa: Isa) -> Dpcls {
        Dpcls {
            subtables: Vec::new(),
            isa,
        }
    }

    /// The flow covering `key`, or [`NO_FLOW`] (one key: control path and tests).
    #[inline]
    pub fn lookup(&mut self, key: &FlowKey) -> u32 {
        for st in self.subtables.iter_mut() {
            let id = st.lookup(Scalar, key);
            if id != NO_FLOW {
                st.hits += 1;
                return id;
            }
        }
        NO_FLOW
    }

    /// Looks up the packets whose bits are set in `todo` (bit i = `keys[i]`), subtable by
    /// subtable, writing ids into `out`. Returns the bits still unmatched. Uses the kernels
    /// this classifier was made with ([`Dpcls::with_isa`]).
    #[inline]
    pub fn lookup_batch(&mut self, keys: &[FlowKey], out: &mut [u32], todo: u32) -> u32 {
        let isa = self.isa;
        let f = Batch {
            cls: self,
            keys,
            out,
            todo,
        };
        simd::dispatch(isa, f)
    }

    /// [`Dpcls::lookup_batch`] with kernels `k`, inlined into the caller (a PMD's burst
    /// function compiled for `k`'s instruction set). In a head-only subtable every key is
    /// masked and hashed and its home entry requested before any is probed, so a burst's
    /// misses in a large table overlap.
    #[inline(always)]
    pub fn lookup_batch_in<K: Kernels>(
        &mut self,
        k: K,
        keys: &[FlowKey],
        out: &mut [u32],
        mut todo: u32,
    ) -> u32 {
        let n = keys.len().min(out.len()).min(32);
        if n < 32 {
            todo &= (1u32 << n) - 1;
        }
        let mut hashes = [0u32; 32];
        for st in self.subtables.iter_mut() {
            if todo == 0 {
                break;
            }
            if !st.head_only {
                let mut bits = todo;
                while bits != 0 {
                    let i = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let id = st.lookup(k, &keys[i]);
                    if id != NO_FLOW {
                        out[i] = id;
                        st.hits += 1;
                        todo &= !(1 << i);
                    }
                }
                continue;
            }
            let mut bits = todo;
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let h = st.hash_head(&keys[i]);
                hashes[i] = h;
                st.map.prefetch(h);
            }
            let mut bits = todo;
            while bits != 0 {
                let i = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if let Some(e) = st.map.find_head(k, &keys[i], &st.mask, hashes[i]) {
                    out[i] = st.map.entries[e].id;
                    st.hits += 1;
                    todo &= !(1 << i);
                }
            }
        }
        todo
    }

    /// The id of the flow with exactly this masked key and mask, if installed.
    pub fn find_exact(&self, key: &FlowKey, mask: &FlowKey) -> Option<u32> {
        let st = self.subtables.iter().find(|s| s.mask == *mask)?;
        let mk = key.masked(mask);
        st.map.find(&mk, mk.hash()).map(|i| st.map.entries[i].id)
    }

    /// Installs `(key & mask, mask) -> id`. If that exact megaflow exists, its id is returned
    /// and nothing changes.
    pub fn insert(&mut self, key: &FlowKey, mask: &FlowKey, id: u32) -> Result<(), u32> {
        if let Some(old) = self.find_exact(key, mask) {
            return Err(old);
        }
        let mk = key.masked(mask);
        let pos = match self.subtables.iter().position(|s| s.mask == *mask) {
            Some(p) => p,
            None => {
                self.subtables.push(Subtable {
                    mask: *mask,
                    head_only: !mask.has_tail(),
                    map: FlowMap::new(),
                    hits: 0,
                });
                self.subtables.len() - 1
            }
        };
        self.subtables[pos].map.insert(&mk, mk.hash(), id);
        Ok(())
    }

    /// Removes the megaflow `(key & mask, mask)`; an emptied subtable goes away.
    pub fn remove(&mut self, key: &FlowKey, mask: &FlowKey) -> bool {
        let Some(pos) = self.subtables.iter().position(|s| s.mask == *mask) else {
            return false;
        };
        let mk = key.masked(mask);
        let st = &mut self.subtables[pos];
        let Some(i) = st.map.find(&mk, mk.hash()) else {
            return false;
        };
        st.map.remove_at(i);
        if st.map.len == 0 {
            self.subtables.remove(pos);
        }
        true
    }

    /// Sorts subtables by hits since the last call (most first) and restarts the counts.
    pub fn rerank(&mut self) {
        self.subtables.sort_by_key(|s| std::cmp::Reverse(s.hits));
        for s in &mut self.subtables {
            s.hits = 0;
        }
    }

    /// Removes every megaflow.
    pub fn clear(&mut self) {
        self.subtables.clear();
    }

    /// Subtables in rank order.
    pub fn subtables(&self) -> &[Subtable] {
        &self.subtables
    }

    /// Total megaflows.
    pub fn len(&self) -> usize {
        self.subtables.iter().map(|s| s.len()).sum()
    }

    /// True if no megaflow is installed.
    pub fn is_empty(&self) -> bool {
        self.subtables.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use wire::{Field, KEY_WORDS};

    fn k(dst: u32, port: u16) -> FlowKey {
        let mut k = FlowKey::ZERO;
        k.set(Field::InPort, 1);
        k.set(Field::Ipv4Dst, u64::from(dst));
        k.set(Field::TpDst, u64::from(port));
        k
    }

    fn mask(prefix: u32, port: bool) -> FlowKey {
        let mut m = FlowKey::ZERO;
        m.set_exact(Field::InPort);
        m.set(
            Field::Ipv4Dst,
            u64::from(u32::MAX.checked_shl(32 - prefix).unwrap_or(0)),
        );
        if port {
            m.set_exact(Field::TpDst);
        }
        m
    }

    #[test]
    fn insert_lookup_remove_rerank() {
        let mut c = Dpcls::new();
        assert!(c.insert(&k(0x0a00_0000, 0), &mask(8, false), 1).is_ok());
        assert!(c.insert(&k(0x0b00_0000, 80), &mask(16, true), 2).is_ok());
        assert_eq!(c.insert(&k(0x0aff_0000, 9), &mask(8, false), 3), Err(1));
        assert_eq!(c.lookup(&k(0x0a01_0203, 5)), 1);
        assert_eq!(c.lookup(&k(0x0b00_0203, 80)), 2);
        assert_eq!(c.lookup(&k(0x0b00_0203, 81)), NO_FLOW);
        for _ in 0..3 {
            c.lookup(&k(0x0b00_0001, 80));
        }
        c.rerank();
        assert_eq!(c.subtables()[0].mask(), &mask(16, true));
        assert!(c.remove(&k(0x0a00_0000, 0), &mask(8, false)));
        assert!(!c.remove(&k(0x0a00_0000, 0), &mask(8, false)));
        assert_eq!(c.lookup(&k(0x0a01_0203, 5)), NO_FLOW);
        assert_eq!(c.subtables().len(), 1);
    }

    #[test]
    fn batch_lookup_reports_misses() {
        let mut c = Dpcls::new();
        c.insert(&k(0x0a00_0000, 0), &mask(8, false), 4).unwrap();
        let keys = [k(0x0a00_0001, 1), k(0x0c00_0001, 1), k(0x0a00_0002, 1)];
        let mut out = [NO_FLOW; 3];
        let left = c.lookup_batch(&keys, &mut out, 0b111);
        assert_eq!(left, 0b010);
        assert_eq!(out, [4, NO_FLOW, 4]);
    }

    #[test]
    fn map_survives_growth_and_deletes() {
        let mut c = Dpcls::new();
        let m = mask(32, true);
        for i in 0..2000u32 {
            c.insert(&k(i, i as u16), &m, i).unwrap();
        }
        for i in (0..2000u32).step_by(3) {
            assert!(c.remove(&k(i, i as u16), &m));
        }
        for i in 0..2000u32 {
            let want = if i % 3 == 0 { NO_FLOW } else { i };
            assert_eq!(c.lookup(&k(i, i as u16)), want, "key {i}");
        }
        assert_eq!(c.len(), 2000 - 667);
    }

    /// Fields of the conntrack proptest: head (`recirc_id`, `ct_state`) and tail (`ct_mark`,
    /// `ct_label`, `ct_nw_src`) ones, each from a two-value domain so that keys often agree.
    const CT_FIELDS: [Field; 6] = [
        Field::Ipv4Dst,
        Field::RecircId,
        Field::CtState,
        Field::CtMark,
        Field::CtLabelLo,
        Field::CtNwSrc,
    ];

    fn ct_key(vals: u8) -> FlowKey {
        let mut k = k(0x0a00_0001, 80);
        for (b, f) in CT_FIELDS.iter().enumerate() {
            k.set(*f, u64::from(vals >> b & 1) * 0x21);
        }
        k
    }

    fn ct_mask(bits: u8) -> FlowKey {
        let mut m = FlowKey::ZERO;
        m.set_exact(Field::InPort);
        for (b, f) in CT_FIELDS.iter().enumerate() {
            if bits >> b & 1 == 1 {
                m.set_exact(*f);
            }
        }
        m
    }

    proptest! {
        /// Head-only subtables (masks without tail fields) and subtables with a tail, probed
        /// with keys with and without tails: every lookup agrees with a linear scan. A
        /// head-only shortcut that let a key hit a flow whose tail words differ (or a key
        /// with a tail miss a flow it matches) fails here.
        #[test]
        fn conntrack_words_agree_with_linear_scan_oracle(
            flows in proptest::collection::vec((0u8..64, 0u8..64), 1..24),
            probes in proptest::collection::vec(0u8..64, 1..64),
        ) {
            for isa in Isa::available() {
                let mut c = Dpcls::with_isa(isa);
                let mut installed: Vec<(FlowKey, FlowKey, u32)> = Vec::new();
                for (i, (bits, vals)) in flows.iter().enumerate() {
                    let m = ct_mask(*bits);
                    let key = ct_key(*vals).masked(&m);
                    // Overlapping flows are not what the pipeline installs; keep disjoint ones.
                    if installed.iter().any(|(fk, fm, _)| {
                        (0..KEY_WORDS).all(|w| (fk.w[w] ^ key.w[w]) & fm.w[w] & m.w[w] == 0)
                    }) {
                        continue;
                    }
                    if c.insert(&key, &m, i as u32).is_ok() {
                        installed.push((key, m, i as u32));
                    }
                }
                prop_assert!(c.subtables().iter().all(|s| s.head_only() != s.mask().has_tail()));
                let keys: Vec<FlowKey> = probes.iter().map(|v| ct_key(*v)).collect();
                for key in &keys {
                    let covering: Vec<u32> = installed.iter()
                        .filter(|(fk, m, _)| key.matches(fk, m)).map(|f| f.2).collect();
                    prop_assert!(covering.len() <= 1);
                    prop_assert_eq!(c.lookup(key), covering.first().copied().unwrap_or(NO_FLOW));
                }
                let n = keys.len().min(32);
                let mut out = [NO_FLOW; 32];
                let all = if n == 32 { u32::MAX } else { (1u32 << n) - 1 };
                let left = c.lookup_batch(&keys[..n], &mut out[..n], all);
                for i in 0..n {
                    let want = installed.iter().find(|(fk, m, _)| keys[i].matches(fk, m));
                    prop_assert_eq!(left & (1 << i) == 0, want.is_some());
                    if let Some(f) = want {
                        prop_assert_eq!(out[i], f.2);
                    }
                }
            }
        }
    }

    /// A flow for the oracle: prefix length, port matched?, and the key values.
    fn arb_flow() -> impl Strategy<Value = (u32, bool, u32, u16)> {
        (0u32..=32, any::<bool>(), any::<u32>(), 0u16..4)
    }

    proptest! {
        /// Every lookup agrees with a linear scan over the installed megaflows (first-installed
        /// flow wins in the oracle only when exactly one covers the key; with overlaps, the
        /// classifier must return some covering flow).
        #[test]
        fn agrees_with_linear_scan_oracle(
            flows in proptest::collection::vec(arb_flow(), 1..40),
            removals in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
            probes in proptest::collection::vec((any::<u32>(), 0u16..4), 1..64),
        ) {
            for isa in Isa::available() {
                let mut c = Dpcls::with_isa(isa);
                let mut installed: Vec<(FlowKey, FlowKey, u32)> = Vec::new();
                for (i, (plen, port, dst, tp)) in flows.iter().enumerate() {
                    let m = mask(*plen, *port);
                    let key = k(*dst, *tp).masked(&m);
                    if c.insert(&key, &m, i as u32).is_ok() {
                        installed.push((key, m, i as u32));
                    }
                }
                for r in removals.iter() {
                    if installed.is_empty() { break; }
                    let (key, m, _) = installed.remove(r.index(installed.len()));
                    prop_assert!(c.remove(&key, &m));
                }
                let mut keys = Vec::new();
                for (j, (dst, tp)) in probes.iter().enumerate() {
                    // Half the probes are derived from installed flows so hits are common.
                    let key = if j % 2 == 0 && !installed.is_empty() {
                        let (fk, _, _) = installed[j % installed.len()];
                        let mut x = k(*dst, *tp);
                        x.set(Field::Ipv4Dst, fk.get(Field::Ipv4Dst) | (u64::from(*dst) & 0xff));
                        x
                    } else {
                        k(*dst, *tp)
                    };
                    keys.push(key);
                    let covering: Vec<u32> = installed.iter()
                        .filter(|(fk, m, _)| key.matches(fk, m)).map(|f| f.2).collect();
                    let got = c.lookup(&key);
                    if covering.is_empty() {
                        prop_assert_eq!(got, NO_FLOW);
                    } else {
                        prop_assert!(covering.contains(&got), "got {} want one of {:?}", got, covering);
                    }
                    if covering.len() == 1 {
                        prop_assert_eq!(got, covering[0]);
                    }
                }
                c.rerank();
                let n = keys.len().min(32);
                let mut out = [NO_FLOW; 32];
                let all = if n == 32 { u32::MAX } else { (1u32 << n) - 1 };
                let left = c.lookup_batch(&keys[..n], &mut out[..n], all);
                for i in 0..n {
                    let any = installed.iter().any(|(fk, m, _)| keys[i].matches(fk, m));
                    prop_assert_eq!(left & (1 << i) == 0, any);
                    if any {
                        let f = installed.iter().find(|f| f.2 == out[i]).unwrap();
                        prop_assert!(keys[i].matches(&f.0, &f.1));
                    }
                }
            }
        }
    }
}
