//! A worker's classification stage: each packet of a burst to a megaflow id through the cache
//! tiers (verified XDP mark, EMC, SMC, dpcls) and, on a miss, the upcall; and what a hit
//! leaves in the caches. Compiled once per key-compare variant (`crate::simd`).
//!
//! Owns no state: these are methods of [`Worker`] over its caches and burst arrays.
//! Threads: the worker's PMD thread.
use super::*;
use crate::simd::{self, BurstFn, Kernels};

/// [`Worker::classify_in`] as a [`BurstFn`].
struct Classify<'a>(&'a mut Worker, usize);

impl BurstFn for Classify<'_> {
    type Output = ();
    #[inline(always)]
    fn call<K: Kernels>(self, k: K) {
        self.0.classify_in(k, self.1)
    }
}

impl Worker {
    #[inline]
    fn emc_insert_wanted(&mut self) -> bool {
        match self.cfg.emc_insert_inv_prob {
            0 => false,
            1 => true,
            inv => {
                // xorshift32: a cheap per-PMD random stream.
                let mut x = self.rng;
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                self.rng = x;
                x <= u32::MAX / inv
            }
        }
    }

    fn cache(&mut self, i: usize, id: u32, smc: bool) {
        let smc = smc && self.smc_on;
        let emc = self.emc_insert_wanted();
        if !smc && !emc {
            return;
        }
        let h = self.hash_of(i);
        if smc {
            self.smc.insert(h, id);
        }
        if emc {
            if let Some(gen) = self.flows.gen(id) {
                self.emc.insert(&self.keys[i], h, id, gen);
            }
        }
    }

    /// Packet `i`'s cache hash, computed now if `process` left it out (zero).
    #[inline]
    fn hash_of(&mut self, i: usize) -> u32 {
        let meta = &mut self.rx.as_mut_slice()[i].meta;
        if meta.hash == 0 {
            meta.hash = self.keys[i].hash();
        }
        meta.hash
    }

    /// Fills `ids` for the first `n` packets: a verified XDP mark (already filled for a
    /// packet `process` classified without extraction), EMC, SMC, dpcls, upcall.
    ///
    /// Batched in stages so that the cache misses of a burst overlap instead of following one
    /// another (at a million flows every tier's memory is a miss): the EMC ways and SMC bucket
    /// of every packet were requested as its hash was known (`process`, `recirculate`); here
    /// the EMC is compared and each miss's SMC candidate
    /// read (its flow slot requested), then the candidates' match words requested, and only then
    /// compared with `covers`.
    ///
    /// Compiled once per kernel variant ([`crate::simd`]); `cfg.isa` picks one.
    pub(super) fn classify(&mut self, n: usize) {
        simd::dispatch(self.cfg.isa, Classify(self, n));
    }

    /// [`Worker::classify`] with kernels `k`.
    #[inline(always)]
    fn classify_in<K: Kernels>(&mut self, k: K, n: usize) {
        let mut todo = 0u32;
        let mut cand = 0u32;
        let probe = self.gate.probing();
        let (mut probed, hits_before) = (0u32, self.tally.emc_hits);
        for i in 0..n {
            if self.skipped & (1 << i) != 0 {
                // `ids[i]` set by `process`.
                self.tally.mark_hits += 1;
                self.tally.mark_skips += 1;
                continue;
            }
            let key = &self.keys[i];
            let meta = &self.rx.as_slice()[i].meta;
            let h = meta.hash;
            if let Some(id) = mark_id(meta.mark, self.tag) {
                if self.flows.get(id).is_some_and(|f| f.covers_in(k, key)) {
                    self.ids[i] = id;
                    self.tally.mark_hits += 1;
                    continue;
                }
            }
            if probe {
                probed += 1;
                if let Some((id, gen)) = self.emc.lookup_in(k, key, h) {
                    if self.flows.get_gen(id, gen).is_some() {
                        self.ids[i] = id;
                        self.tally.emc_hits += 1;
                        continue;
                    }
                }
            } else {
                self.tally.emc_bypassed += 1;
            }
            let smc_candidate = if self.smc_on {
                self.smc.lookup(h)
            } else {
                self.tally.smc_bypassed += 1;
                None
            };
            if let Some(id) = smc_candidate {
                self.flows.prefetch_slot(id);
                self.ids[i] = id;
                cand |= 1 << i;
                continue;
            }
            todo |= 1 << i;
        }
        if probe {
            let hits = (self.tally.emc_hits - hits_before) as u32;
            self.gate.account(probed, hits);
        }
        let mut c = cand;
        while c != 0 {
            let i = c.trailing_zeros() as usize;
            c &= c - 1;
            if let Some(f) = self.flows.get(self.ids[i]) {
                f.prefetch_match();
            }
        }
        while cand != 0 {
            let i = cand.trailing_zeros() as usize;
            cand &= cand - 1;
            let id = self.ids[i];
            if self
                .flows
                .get(id)
                .is_some_and(|f| f.covers_in(k, &self.keys[i]))
            {
                self.tally.smc_hits += 1;
                if self.from_xdp & (1 << i) != 0 {
                    self.note_tuple(i, id);
                }
                self.cache(i, id, false);
            } else {
                todo |= 1 << i;
            }
        }
        if todo == 0 {
            return;
        }
        let left = self
            .cls
            .lookup_batch_in(k, &self.keys[..n], &mut self.ids[..n], todo);
        let mut hit = todo & !left;
        while hit != 0 {
            let i = hit.trailing_zeros() as usize;
            hit &= hit - 1;
            self.tally.megaflow_hits += 1;
            if self.from_xdp & (1 << i) != 0 {
                self.note_tuple(i, self.ids[i]);
            }
            self.cache(i, self.ids[i], true);
        }
        let mut miss = left;
        while miss != 0 {
            let i = miss.trailing_zeros() as usize;
            miss &= miss - 1;
            self.handle_miss(i);
        }
    }

    /// Gives flow `id` packet `i`'s 5-tuple for an XDP mark if it has none yet (the packet came
    /// with an XDP hash, so from an `xdp-mark` port; only past the EMC, so rarely per flow).
    #[inline(never)]
    fn note_tuple(&self, i: usize, id: u32) {
        if let Some(f) = self.flows.get(id) {
            if f.tuple.get().is_none() {
                if let Some(t) = Tuple5::of(&self.keys[i]) {
                    f.set_tuple(t);
                }
            }
        }
    }

    /// A packet that missed every cache: re-check the classifier (an earlier packet of this
    /// burst may have installed its flow), else ask the pipeline and install the answer.
    fn handle_miss(&mut self, i: usize) {
        let key = self.keys[i];
        let id = self.cls.lookup(&key);
        if id != NO_FLOW {
            self.ids[i] = id;
            self.tally.megaflow_hits += 1;
            return;
        }
        self.tally.misses += 1;
        self.activity.in_upcall.store(true, SeqCst);
        self.install_upcall(i, key);
        self.activity.in_upcall.store(false, SeqCst);
    }

    /// Asks the pipeline about packet `i` and installs the answer (see [`Activity`]).
    fn install_upcall(&mut self, i: usize, key: FlowKey) {
        // The pipeline (and a controller's packet-in) sees the whole frame.
        self.tx.materialise(&mut self.rx.as_mut_slice()[i]);
        let pkt = &self.rx.as_slice()[i];
        let up = &*self.upcall;
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| up.upcall(&key, pkt)));
        let res = match res {
            Ok(r) => r,
            Err(_) => {
                tracing::error!("upcall panicked; dropping the packet");
                self.ids[i] = ADHOC;
                self.adhoc.push((i, Arc::from(Vec::new())));
                return;
            }
        };
        if !res.install || self.flows.len() >= self.cfg.flow_limit {
            self.ids[i] = ADHOC;
            self.adhoc.push((i, res.actions));
            return;
        }
        let mut mask = res.mask;
        mask.set_exact(Field::InPort);
        mask.set_exact(Field::RecircId);
        self.activity.holds_flows.store(true, SeqCst);
        let flow = Megaflow::with_deps(&key, &mask, res.actions, res.deps);
        if let Some(t) = Tuple5::of(&key) {
            flow.set_tuple(t);
        }
        // This packet was counted by the pipeline's upcall; only later hits are credited.
        flow.preset_reported(1, pkt.len() as u64);
        let (mut id, _) = self.flows.insert(flow);
        if let Err(existing) = self.cls.insert(&key, &mask, id) {
            self.flows.remove(id);
            id = existing;
        } else if self.fresh.len() < FRESH_CAP {
            self.fresh.push(id);
        } else {
            self.fresh_overflow = true;
        }
        self.ids[i] = id;
        self.cache(i, id, true);
    }
}
