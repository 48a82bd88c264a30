//! Signature-match cache (SMC): a 16-bit signature of the key's hash mapped to a megaflow id.
//!
//! Owns: [`Smc`], 2^18 buckets of 4 ways (about 1M entries) in 4 MiB: each way is a 16-bit
//! signature and a 16-bit flow id, so only flows with ids below 65535 are cached. A hit is only
//! a candidate: the caller checks that the megaflow covers the key (signatures collide), which
//! also makes stale entries harmless, so the SMC is never flushed.
//! The buckets sit on 2 MiB pages where the kernel grants them (`ksys::huge`): a probe at a
//! million flows then misses the cache but not the TLB.
//! Threads: one per PMD, never shared. No locks.

/// Buckets (a power of two).
pub const SMC_BUCKETS: usize = 1 << 18;
/// Ways per bucket.
pub const SMC_WAYS: usize = 4;
const EMPTY: u16 = u16::MAX;

use ksys::huge::HugeTable;

#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Bucket {
    sig: [u16; SMC_WAYS],
    flow: [u16; SMC_WAYS],
}

/// The signature-match cache.
pub struct Smc {
    buckets: HugeTable<Bucket>,
}

impl Default for Smc {
    fn default() -> Self {
        Smc::new()
    }
}

impl Smc {
    /// An empty cache (allocates 4 MiB).
    pub fn new() -> Smc {
        let b = Bucket {
            sig: [0; SMC_WAYS],
            flow: [EMPTY; SMC_WAYS],
        };
        Smc {
            buckets: HugeTable::new(b, SMC_BUCKETS).expect("out of memory for the SMC"),
        }
    }

    #[inline(always)]
    fn split(hash: u32) -> (usize, u16) {
        ((hash as usize) & (SMC_BUCKETS - 1), (hash >> 16) as u16)
    }

    /// Starts loading the bucket of `hash` (see [`crate::emc::Emc::prefetch`]).
    #[inline(always)]
    pub fn prefetch(&self, hash: u32) {
        let (i, _) = Self::split(hash);
        guestmem::prefetch_ref(&self.buckets[i], false);
    }

    /// A candidate flow id for a key with this hash.
    #[inline]
    pub fn lookup(&self, hash: u32) -> Option<u32> {
        let (i, sig) = Self::split(hash);
        let b = &self.buckets[i];
        for w in 0..SMC_WAYS {
            if b.sig[w] == sig && b.flow[w] != EMPTY {
                return Some(u32::from(b.flow[w]));
            }
        }
        None
    }

    /// Maps `hash`'s signature to `flow`. Ids that do not fit in 16 bits are not cached.
    pub fn insert(&mut self, hash: u32, flow: u32) {
        let Ok(f) = u16::try_from(flow) else { return };
        if f == EMPTY {
            return;
        }
        let (i, sig) = Self::split(hash);
        let b = &mut self.buckets[i];
        let way = (0..SMC_WAYS)
            .find(|&w| b.flow[w] != EMPTY && b.sig[w] == sig)
            .or_else(|| (0..SMC_WAYS).find(|&w| b.flow[w] == EMPTY))
            .unwrap_or((hash as usize >> 8) % SMC_WAYS);
        b.sig[way] = sig;
        b.flow[way] = f;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_lookup_and_overflow_ids() {
        let mut s = Smc::new();
        assert_eq!(s.lookup(0xabcd_0001), None);
        s.insert(0xabcd_0001, 5);
        assert_eq!(s.lookup(0xabcd_0001), Some(5));
        s.insert(0xabcd_0001, 6);
        assert_eq!(s.lookup(0xabcd_0001), Some(6));
        // Other signature, same bucket: separate way.
        s.insert(0x1234_0001, 9);
        assert_eq!(s.lookup(0x1234_0001), Some(9));
        assert_eq!(s.lookup(0xabcd_0001), Some(6));
        s.insert(0x5555_0002, 70_000);
        assert_eq!(s.lookup(0x5555_0002), None);
        // Five signatures in one bucket: one is evicted, the last one stays.
        for sig in 1..=5u32 {
            s.insert(sig << 16 | 7, sig);
        }
        assert_eq!(s.lookup(5 << 16 | 7), Some(5));
    }
}
