//! The generator's "guest memory": one memfd mapped shared into this process, handed to the
//! switch with SET_MEM_TABLE. This is the only module of the crate with `unsafe` code; it
//! owns the mapping and hands out bounds-checked accessors by offset.
//!
//! Threads: created on vireo-gen's main thread, then used only by its poll loop.
#![allow(unsafe_code)]
use rustix::fs::{ftruncate, memfd_create, MemfdFlags};
use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU16, Ordering};

/// A shared, memfd-backed mapping.
pub struct Shm {
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
}

impl Shm {
    /// Creates and maps `len` bytes (rounded up to 4 KiB), zeroed.
    pub fn new(name: &str, len: usize) -> io::Result<Shm> {
        let len = len.div_ceil(4096) * 4096;
        let fd = memfd_create(name, MemfdFlags::CLOEXEC)?;
        ftruncate(&fd, len as u64)?;
        // A fresh shared mapping of a file we just sized to `len`; the pointer is kept only
        // while `self` lives.
        // SAFETY: no existing memory is replaced (no MAP_FIXED); the result is checked.
        let p = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::POPULATE,
                &fd,
                0,
            )?
        };
        Ok(Shm {
            fd,
            ptr: p.cast(),
            len,
        })
    }

    /// The memfd, to send to the switch.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never, in practice).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Our virtual address of the mapping (the region's userspace_addr).
    pub fn uva(&self) -> u64 {
        self.ptr as u64
    }

    #[inline]
    fn check(&self, off: usize, n: usize, align: usize) {
        assert!(
            off.checked_add(n).is_some_and(|e| e <= self.len) && off.is_multiple_of(align),
            "shm access {off}+{n} out of {} (align {align})",
            self.len
        );
    }

    /// Copies `src` to `off`.
    #[inline]
    pub fn write(&self, off: usize, src: &[u8]) {
        self.check(off, src.len(), 1);
        // The switch may access the same bytes concurrently, but only bytes it does not own at
        // this point of the ring protocol are written here, and a raw copy never forms a Rust
        // reference to shared memory.
        // SAFETY: in bounds (checked above), and `src` is ours, so they cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) }
    }

    /// Copies from `off` into `dst`.
    #[inline]
    pub fn read(&self, off: usize, dst: &mut [u8]) {
        self.check(off, dst.len(), 1);
        // The ring protocol says the switch has finished writing these bytes.
        // SAFETY: in bounds (checked above), and `dst` is ours, so they cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) }
    }

    /// Writes a little-endian u16 (plain store).
    #[inline]
    pub fn write_u16(&self, off: usize, v: u16) {
        self.write(off, &v.to_le_bytes());
    }

    /// Writes a little-endian u32.
    #[inline]
    pub fn write_u32(&self, off: usize, v: u32) {
        self.write(off, &v.to_le_bytes());
    }

    /// Writes a little-endian u64.
    #[inline]
    pub fn write_u64(&self, off: usize, v: u64) {
        self.write(off, &v.to_le_bytes());
    }

    /// Reads a little-endian u16.
    #[inline]
    pub fn read_u16(&self, off: usize) -> u16 {
        let mut b = [0u8; 2];
        self.read(off, &mut b);
        u16::from_le_bytes(b)
    }

    /// Reads a little-endian u32.
    #[inline]
    pub fn read_u32(&self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        self.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    /// Reads a little-endian u64.
    #[inline]
    pub fn read_u64(&self, off: usize) -> u64 {
        let mut b = [0u8; 8];
        self.read(off, &mut b);
        u64::from_le_bytes(b)
    }

    #[inline]
    fn atomic_u16(&self, off: usize) -> &AtomicU16 {
        self.check(off, 2, 2);
        // AtomicU16 has the layout of u16, and every access to this shared index is atomic on
        // our side.
        // SAFETY: in bounds and 2-aligned (checked above; the mapping is page-aligned).
        unsafe { &*(self.ptr.add(off) as *const AtomicU16) }
    }

    /// Release-stores a ring index (x86 little-endian, as virtio wants).
    #[inline]
    pub fn store_u16_release(&self, off: usize, v: u16) {
        self.atomic_u16(off).store(v, Ordering::Release);
    }

    /// Acquire-loads a ring index.
    #[inline]
    pub fn load_u16_acquire(&self, off: usize) -> u16 {
        self.atomic_u16(off).load(Ordering::Acquire)
    }
}

/// Reads the time-stamp counter (constant rate on the machines we measure on).
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no memory effects and exists on every x86_64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no accessor outlives `self`.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_bounds() {
        let m = Shm::new("t", 5000).unwrap();
        assert_eq!(m.len(), 8192);
        m.write_u64(8, 0x1122_3344_5566_7788);
        assert_eq!(m.read_u32(8), 0x5566_7788);
        m.store_u16_release(4096, 7);
        assert_eq!(m.load_u16_acquire(4096), 7);
        assert_eq!(m.read_u16(4096), 7);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.read_u64(8190)));
        assert!(r.is_err());
    }
}
