//! The AF_XDP rings: index arithmetic (pure functions, unit- and property-tested) and
//! [`Ring`], one ring mapped from its socket with its shared producer/consumer words.
//!
//! Threads: a ring belongs to one side of one socket ([`crate::RxSide`] holds fill and rx,
//! [`crate::TxSide`] holds tx and completion) and is used by whichever PMD holds that side.
//! Memory ordering follows the kernel's `xsk_queue.h`: the side that fills entries publishes
//! its index with a release store after writing them, the other side reads that index with
//! an acquire load before reading entries, and publishes its own index (release) only after
//! it has finished with them.
use crate::sys::Mmap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

/// Entries a producer may still write: `size` less those written and not yet consumed.
/// Indices are free-running `u32`s; a consumer index the other side reports ahead of ours or
/// more than `size` behind it is treated as "no room" (it can only come from a broken peer).
#[inline]
pub fn free_entries(size: u32, prod: u32, cons: u32) -> u32 {
    let used = prod.wrapping_sub(cons);
    size.saturating_sub(used)
}

/// Entries a consumer may read: those produced and not yet consumed, never more than `size`
/// (an index that jumps further is clamped, so a broken producer cannot make us read an entry
/// twice in one pass).
#[inline]
pub fn available(size: u32, prod: u32, cons: u32) -> u32 {
    prod.wrapping_sub(cons).min(size)
}

/// Slot of free-running index `idx` in a ring of `size` (a power of two).
#[inline]
pub fn slot(size: u32, idx: u32) -> usize {
    (idx & (size - 1)) as usize
}

/// One mapped ring with entries of type `T` (`u64` addresses for fill/completion,
/// `xdp_desc` for rx/tx).
pub(crate) struct Ring<T> {
    prod: *const AtomicU32,
    cons: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    size: u32,
    /// Our own index (the producer index on fill/tx, the consumer index on rx/completion).
    local: u32,
    /// Last value read of the other side's index.
    cached_other: u32,
    _map: Mmap,
    _t: PhantomData<T>,
}

// The raw pointers point into `_map`, owned by this value; the kernel side is synchronised
// through the atomics, and one `Ring` is used by one thread at a time (`&mut`).
// SAFETY: moving a ring to another thread moves its mapping with it.
unsafe impl<T: Send> Send for Ring<T> {}

impl<T: Copy> Ring<T> {
    /// Maps ring `pgoff` of socket `fd` with `size` entries at the offsets the kernel reported.
    pub(crate) fn map(
        fd: i32,
        pgoff: u64,
        off: &libc::xdp_ring_offset,
        size: u32,
    ) -> std::io::Result<Ring<T>> {
        assert!(size.is_power_of_two());
        let entry = std::mem::size_of::<T>() as u64;
        let len = off.desc + u64::from(size) * entry;
        let map = Mmap::shared(fd, len as usize, pgoff)?;
        let bad = |o: u64, sz: u64, align: u64| {
            o.checked_add(sz).is_none_or(|e| e > len) || !o.is_multiple_of(align)
        };
        if bad(off.producer, 4, 4)
            || bad(off.consumer, 4, 4)
            || bad(off.flags, 4, 4)
            || bad(off.desc, u64::from(size) * entry, entry.min(8))
        {
            return Err(std::io::Error::other("ring offsets outside the mapping"));
        }
        let base = map.ptr();
        // Each offset was checked above to lie inside the mapping, aligned for its type, with
        // room for the whole field.
        // SAFETY: the four `add`s stay inside the mapping (checked above).
        let (prod, cons, flags, descs) = unsafe {
            (
                base.add(off.producer as usize).cast::<AtomicU32>(),
                base.add(off.consumer as usize).cast::<AtomicU32>(),
                base.add(off.flags as usize).cast::<AtomicU32>(),
                base.add(off.desc as usize).cast::<T>(),
            )
        };
        Ok(Ring {
            prod,
            cons,
            flags,
            descs,
            size,
            local: 0,
            cached_other: 0,
            _map: map,
            _t: PhantomData,
        })
    }

    /// Maps a ring of a socket another process used (an upgrade), carrying on where it
    /// stopped: our index is the one it last published (producer on fill/tx, consumer on
    /// rx/completion), the other side's is read now.
    pub(crate) fn adopt(
        fd: i32,
        pgoff: u64,
        off: &libc::xdp_ring_offset,
        size: u32,
        producer: bool,
    ) -> std::io::Result<Ring<T>> {
        let mut r = Self::map(fd, pgoff, off, size)?;
        let (prod, cons) = (
            Self::load(r.prod, Ordering::Acquire),
            Self::load(r.cons, Ordering::Acquire),
        );
        (r.local, r.cached_other) = if producer { (prod, cons) } else { (cons, prod) };
        Ok(r)
    }

    fn load(p: *const AtomicU32, o: Ordering) -> u32 {
        // SAFETY: `p` points into the live mapping (checked in `map`) at an aligned u32.
        unsafe { (*p).load(o) }
    }

    fn store(p: *const AtomicU32, v: u32) {
        // SAFETY: as in `load`.
        unsafe { (*p).store(v, Ordering::Release) }
    }

    /// True if the kernel asked to be woken up for this ring.
    pub(crate) fn needs_wakeup(&self) -> bool {
        Self::load(self.flags, Ordering::Acquire) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    // ---- producer side (fill, tx) ----

    /// Entries we may write now (refreshes the consumer index only when the cached value
    /// shows fewer than `want`).
    pub(crate) fn prod_room(&mut self, want: u32) -> u32 {
        let mut room = free_entries(self.size, self.local, self.cached_other);
        if room < want {
            self.cached_other = Self::load(self.cons, Ordering::Acquire);
            room = free_entries(self.size, self.local, self.cached_other);
        }
        room
    }

    /// Writes entry `i` past our producer index (`i` < the room last returned).
    pub(crate) fn prod_write(&mut self, i: u32, v: T) {
        let s = slot(self.size, self.local.wrapping_add(i));
        // `s` < size (masked), and the descriptor array has `size` entries inside the mapping
        // (checked in `map`). The entry is ours: it lies within the room past our producer
        // index, which the kernel does not read until we publish it.
        // SAFETY: an in-bounds write to an entry no one else reads yet.
        unsafe { self.descs.add(s).write_volatile(v) }
    }

    /// Publishes `n` written entries.
    pub(crate) fn prod_submit(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        Self::store(self.prod, self.local);
    }

    // ---- consumer side (rx, completion) ----

    /// Entries ready to read, at most `max`.
    pub(crate) fn cons_peek(&mut self, max: u32) -> u32 {
        let mut n = available(self.size, self.cached_other, self.local);
        if n < max {
            self.cached_other = Self::load(self.prod, Ordering::Acquire);
            n = available(self.size, self.cached_other, self.local);
        }
        n.min(max)
    }

    /// Reads entry `i` past our consumer index (`i` < what `cons_peek` returned), once.
    pub(crate) fn cons_read(&self, i: u32) -> T {
        let s = slot(self.size, self.local.wrapping_add(i));
        // The acquire load of the producer index in `cons_peek` orders this read after the
        // kernel's write.
        // SAFETY: `s` < size (masked), inside the mapped descriptor array.
        unsafe { self.descs.add(s).read_volatile() }
    }

    /// Gives `n` read entries back to the kernel.
    pub(crate) fn cons_release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        Self::store(self.cons, self.local);
    }
}

#[cfg(test)]
impl<T: Copy> Ring<T> {
    /// A ring in private memory with the kernel's layout (for tests that play the kernel).
    pub(crate) fn anon(size: u32) -> Ring<T> {
        let off = libc::xdp_ring_offset {
            producer: 0,
            consumer: 64,
            flags: 128,
            desc: 256,
        };
        let len = 256 + size as usize * std::mem::size_of::<T>();
        let map = Mmap::anon(len).unwrap();
        let base = map.ptr();
        // SAFETY: the offsets lie inside the fresh mapping, aligned.
        let (prod, cons, flags, descs) = unsafe {
            (
                base.add(off.producer as usize).cast::<AtomicU32>(),
                base.add(off.consumer as usize).cast::<AtomicU32>(),
                base.add(off.flags as usize).cast::<AtomicU32>(),
                base.add(off.desc as usize).cast::<T>(),
            )
        };
        Ring {
            prod,
            cons,
            flags,
            descs,
            size,
            local: 0,
            cached_other: 0,
            _map: map,
            _t: PhantomData,
        }
    }

    /// Plays the kernel producing `v` on a ring we consume.
    pub(crate) fn kernel_produce(&mut self, v: T) {
        let p = Self::load(self.prod, Ordering::Relaxed);
        let s = slot(self.size, p);
        // SAFETY: masked slot inside the descriptor array.
        unsafe { self.descs.add(s).write_volatile(v) };
        Self::store(self.prod, p.wrapping_add(1));
    }

    /// Plays the kernel consuming one entry of a ring we produce.
    pub(crate) fn kernel_consume(&mut self) -> Option<T> {
        let c = Self::load(self.cons, Ordering::Relaxed);
        if Self::load(self.prod, Ordering::Acquire) == c {
            return None;
        }
        // SAFETY: masked slot inside the descriptor array.
        let v = unsafe { self.descs.add(slot(self.size, c)).read_volatile() };
        Self::store(self.cons, c.wrapping_add(1));
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn room_and_availability_at_the_edges() {
        assert_eq!(free_entries(8, 0, 0), 8);
        assert_eq!(free_entries(8, 8, 0), 0);
        assert_eq!(free_entries(8, 5, 1), 4);
        // Wrapped free-running indices.
        assert_eq!(free_entries(8, 2, u32::MAX - 3), 2);
        assert_eq!(available(8, 2, u32::MAX - 3), 6);
        // A consumer index ahead of the producer (broken peer): no room, nothing to read
        // beyond one ring's worth.
        assert_eq!(free_entries(8, 0, 3), 0);
        assert_eq!(available(8, 100, 0), 8);
        assert_eq!(slot(8, 9), 1);
        assert_eq!(slot(2048, u32::MAX), 2047);
    }

    proptest! {
        #[test]
        fn produced_plus_free_is_the_ring(size_log in 1u32..12, cons in any::<u32>(), used in 0u32..4096) {
            let size = 1u32 << size_log;
            let used = used % (size + 1);
            let prod = cons.wrapping_add(used);
            prop_assert_eq!(free_entries(size, prod, cons) + available(size, prod, cons), size);
            prop_assert!(slot(size, prod) < size as usize);
        }

        #[test]
        fn never_more_than_the_ring(size_log in 1u32..12, prod in any::<u32>(), cons in any::<u32>()) {
            let size = 1u32 << size_log;
            prop_assert!(available(size, prod, cons) <= size);
            prop_assert!(free_entries(size, prod, cons) <= size);
        }
    }
}
