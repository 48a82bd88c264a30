//! Tables on transparent huge pages: [`HugeTable`], a fixed-length array of plain values in an
//! anonymous mapping aligned to 2 MiB and advised `MADV_HUGEPAGE`, for the PMD's per-packet
//! lookup tables (`dp`'s exact-match and signature caches). Their probes land anywhere in
//! megabytes of memory; on 4 KiB pages nearly every probe at a million flows also misses the
//! TLB, on 2 MiB pages a whole cache fits in a few entries. Where the kernel has no huge page
//! to give (THP `never`, fragmentation), the mapping simply stays on 4 KiB pages.
//!
//! Threads: made and dropped by whichever thread owns the table (a PMD's worker); no locks.
#![allow(unsafe_code)]

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Huge-page size the mapping is aligned to.
const HUGE: usize = 2 << 20;

/// A fixed-length array of `T` on (where the kernel grants them) 2 MiB pages.
pub struct HugeTable<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    /// Start and length of the whole mapping (aligned start, length a multiple of 2 MiB).
    map: NonNull<libc::c_void>,
    map_len: usize,
}

// SAFETY: the table owns its mapping exclusively, like a `Box<[T]>`.
unsafe impl<T: Copy + Send> Send for HugeTable<T> {}
// SAFETY: shared access is only through `&[T]`.
unsafe impl<T: Copy + Sync> Sync for HugeTable<T> {}

impl<T: Copy> HugeTable<T> {
    /// `len` copies of `fill`; `None` if the mapping cannot be made (then use the heap).
    pub fn new(fill: T, len: usize) -> Option<HugeTable<T>> {
        assert!(std::mem::align_of::<T>() <= HUGE);
        let bytes = std::mem::size_of::<T>().checked_mul(len)?.max(1);
        let map_len = bytes.div_ceil(HUGE).checked_mul(HUGE)?;
        let over = map_len.checked_add(HUGE)?;
        // SAFETY: a fresh anonymous private mapping; no existing memory is affected.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                over,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let start = raw as usize;
        let aligned = start.next_multiple_of(HUGE);
        let head = aligned - start;
        let tail = over - head - map_len;
        // A failed unmap only leaves unused address space mapped.
        // SAFETY: both ranges lie inside the mapping just made, outside the part kept.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((aligned + map_len) as *mut libc::c_void, tail);
            }
            // Advice only: without THP the mapping works on small pages.
            libc::madvise(aligned as *mut libc::c_void, map_len, libc::MADV_HUGEPAGE);
        }
        let ptr = NonNull::new(aligned as *mut T)?;
        let map = NonNull::new(aligned as *mut libc::c_void)?;
        for i in 0..len {
            // `len * size_of::<T>() <= map_len` bytes are mapped writable at `aligned`.
            // SAFETY: `i < len`, in the mapping; 2 MiB alignment ≥ `align_of::<T>()`.
            unsafe { ptr.as_ptr().add(i).write(fill) };
        }
        Some(HugeTable {
            ptr,
            len,
            map,
            map_len,
        })
    }
}

impl<T: Copy> Deref for HugeTable<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised values of `T` at `ptr`, mapped while `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> DerefMut for HugeTable<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for HugeTable<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours, made in `new`, and no reference into it outlives `self`.
        unsafe {
            libc::munmap(self.map.as_ptr(), self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_aligned_writable_and_dropped() {
        let mut t = HugeTable::new(7u64, 300_000).expect("mapping");
        assert_eq!(t.len(), 300_000);
        assert_eq!(t.as_ptr() as usize % HUGE, 0);
        assert!(t.iter().all(|&x| x == 7));
        t[299_999] = 9;
        assert_eq!(t[299_999], 9);
        let empty = HugeTable::new(0u8, 0).expect("mapping");
        assert!(empty.is_empty());
    }
}
