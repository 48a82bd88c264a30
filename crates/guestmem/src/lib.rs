//! Guest memory table: the regions a vhost-user frontend shares with us, mmapped from the fds of
//! `SET_MEM_TABLE`, and bounds-checked translation of guest-physical and frontend user-virtual
//! `(addr, len)` ranges into host memory.
//!
//! This is the ONE crate of Vireo that makes raw pointers into guest memory. Everything above it
//! reaches guest memory through [`GuestMemory`] (copy in/out, little-endian ring fields) or a
//! [`GuestRange`] (a range checked once, e.g. a vring, kept for fast access while its table
//! lives).
//!
//! Threads: a table is built by a port's control thread and shared read-only (`Arc`) with PMD
//! threads. A new table replaces the old one by swapping the `Arc`; the mappings are unmapped when
//! the last `Arc` (the control thread's or a queue's) goes, so no PMD ever touches an unmapped
//! region. No locks.
//!
//! A frontend that shrinks a mapped file after `SET_MEM_TABLE` (or hugetlbfs running out of
//! pages) makes accesses beyond the new end fault with `SIGBUS`. The [`lost`] module catches
//! such a fault inside a guest mapping, replaces the mapping by zero pages and marks the table
//! [`GuestMemory::poisoned`]: the access completes (reading zeros; writes land in private pages the
//! frontend never sees) and the
//! caller, which checks the flag after touching guest memory, gives up that port alone. A fault
//! anywhere else still kills the process.
#![allow(unsafe_code)]

pub mod lost;

use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

/// Most regions in one table (vhost-user `VHOST_MEMORY_BASELINE_NREGIONS`).
pub const MAX_REGIONS: usize = 8;

/// One region as a frontend describes it (`VhostUserMemoryRegion`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionSpec {
    /// Guest-physical start.
    pub guest_phys_addr: u64,
    /// Size in bytes.
    pub memory_size: u64,
    /// Start in the frontend's virtual address space (used by vring addresses).
    pub userspace_addr: u64,
    /// Offset of the region in its fd.
    pub mmap_offset: u64,
}

/// Why a table could not be built or an access was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemError {
    /// More regions than [`MAX_REGIONS`], none, or a region count that does not match the fds.
    BadRegionCount(usize),
    /// A region of size zero.
    ZeroSize,
    /// Address arithmetic overflowed.
    Overflow,
    /// The region does not fit in its fd (`mmap_offset + size > st_size`).
    BeyondFile {
        /// Bytes the region needs.
        need: u64,
        /// Size of the fd.
        have: u64,
    },
    /// Two regions overlap in guest-physical or user-virtual space.
    Overlap,
    /// A system call failed (errno).
    Os(i32),
    /// Every slot of the fault registry is taken ([`lost::SLOTS`] guest mappings live at
    /// once): the table is refused rather than mapped without protection against shrinking.
    NoGuardSlot,
    /// An access fell outside every region.
    OutOfRange {
        /// Start of the access.
        addr: u64,
        /// Length of the access.
        len: u64,
    },
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemError::BadRegionCount(n) => write!(f, "bad region count {n}"),
            MemError::ZeroSize => f.write_str("region of size zero"),
            MemError::Overflow => f.write_str("address overflow"),
            MemError::BeyondFile { need, have } => {
                write!(f, "region needs {need} bytes of its fd, which has {have}")
            }
            MemError::Overlap => f.write_str("regions overlap"),
            MemError::Os(e) => write!(f, "system error {e}"),
            MemError::NoGuardSlot => write!(
                f,
                "too many guest memory regions mapped at once ({})",
                lost::SLOTS
            ),
            MemError::OutOfRange { addr, len } => {
                write!(f, "access {addr:#x}+{len} outside guest memory")
            }
        }
    }
}

impl std::error::Error for MemError {}

/// One mmap; unmapped on drop.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
    /// Its slot in the fault registry (fd mappings; anonymous ones cannot shrink).
    slot: Option<usize>,
}

impl Mapping {
    /// Whether a fault replaced this mapping by zero pages.
    #[inline]
    fn poisoned(&self) -> bool {
        self.slot.is_some_and(lost::is_poisoned)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // The fault handler must let go of the range before it can be unmapped and reused.
        if let Some(s) = self.slot {
            lost::retire(s);
        }
        // Nothing can reach the mapping after the table (and every GuestRange holding the
        // table's Arc) is gone.
        // SAFETY: `base`/`len` are what a successful mmap returned; this value alone owns it.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
        if let Some(s) = self.slot {
            lost::release(s);
        }
    }
}

/// A region with its host address.
struct Region {
    spec: RegionSpec,
    /// Host address of guest-physical `spec.guest_phys_addr`.
    host: NonNull<u8>,
}

/// A guest memory table. Immutable once built; replace it as a whole.
pub struct GuestMemory {
    regions: Vec<Region>,
    maps: Vec<Mapping>,
}

// SAFETY: the table only holds pointers into mappings it owns; they stay valid for its lifetime
// and it has no interior mutability of its own. Concurrent access to guest bytes goes through
// raw-pointer copies and atomics, never through Rust references.
unsafe impl Send for GuestMemory {}
// SAFETY: see `Send`; every method takes `&self` and only reads the immutable table.
unsafe impl Sync for GuestMemory {}

impl fmt::Debug for GuestMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.regions.iter().map(|r| r.spec))
            .finish()
    }
}

/// `(st_size, st_blksize)` of an fd.
fn fd_size(fd: BorrowedFd<'_>) -> Result<(u64, u64), MemError> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `st` is a valid, writable stat buffer and `fd` is an open descriptor.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(MemError::Os(last_errno()));
    }
    // SAFETY: fstat succeeded, so it initialized the buffer (and it was zeroed before anyway).
    let st = unsafe { st.assume_init() };
    Ok((st.st_size.max(0) as u64, st.st_blksize.max(0) as u64))
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn mmap(fd: Option<BorrowedFd<'_>>, len: usize) -> Result<Mapping, MemError> {
    let (flags, raw) = match fd {
        Some(fd) => (libc::MAP_SHARED, fd.as_raw_fd()),
        None => (libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1),
    };
    // A fresh mapping at an address of the kernel's choosing; the result is checked before use.
    // SAFETY: no existing memory is affected (no MAP_FIXED).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags | libc::MAP_NORESERVE,
            raw,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(MemError::Os(last_errno()));
    }
    let Some(base) = NonNull::new(p.cast::<u8>()) else {
        return Err(MemError::Os(libc::EINVAL));
    };
    let mut map = Mapping {
        base,
        len,
        slot: None,
    };
    if fd.is_some() {
        // A file can shrink under us: no fd mapping lives without a registry slot (dropping
        // `map` unmaps it).
        map.slot = Some(lost::register(base.as_ptr() as usize, len).ok_or(MemError::NoGuardSlot)?);
    }
    Ok(map)
}

fn end(start: u64, len: u64) -> Result<u64, MemError> {
    start.checked_add(len).ok_or(MemError::Overflow)
}

fn check_specs(specs: &[RegionSpec]) -> Result<(), MemError> {
    if specs.is_empty() || specs.len() > MAX_REGIONS {
        return Err(MemError::BadRegionCount(specs.len()));
    }
    for (i, a) in specs.iter().enumerate() {
        if a.memory_size == 0 {
            return Err(MemError::ZeroSize);
        }
        let a_gend = end(a.guest_phys_addr, a.memory_size)?;
        let a_uend = end(a.userspace_addr, a.memory_size)?;
        end(a.mmap_offset, a.memory_size)?;
        if usize::try_from(a.memory_size).is_err() {
            return Err(MemError::Overflow);
        }
        for b in &specs[..i] {
            let b_gend = b.guest_phys_addr + b.memory_size;
            let b_uend = b.userspace_addr + b.memory_size;
            if a.guest_phys_addr < b_gend && b.guest_phys_addr < a_gend {
                return Err(MemError::Overlap);
            }
            if a.userspace_addr < b_uend && b.userspace_addr < a_uend {
                return Err(MemError::Overlap);
            }
        }
    }
    Ok(())
}

impl GuestMemory {
    /// Maps the regions of a `SET_MEM_TABLE` message, one fd per region. Checks the count, sizes,
    /// overlaps and that each region lies inside its fd. The fds may be closed afterwards.
    pub fn from_fds(specs: &[RegionSpec], fds: &[BorrowedFd<'_>]) -> Result<Self, MemError> {
        if specs.len() != fds.len() {
            return Err(MemError::BadRegionCount(fds.len()));
        }
        check_specs(specs)?;
        let mut regions = Vec::with_capacity(specs.len());
        let mut maps = Vec::with_capacity(specs.len());
        for (spec, fd) in specs.iter().zip(fds) {
            let need = end(spec.mmap_offset, spec.memory_size)?;
            let (have, blksize) = fd_size(*fd)?;
            if need > have {
                return Err(MemError::BeyondFile { need, have });
            }
            // hugetlbfs maps whole huge pages: round up within the file when we can.
            let rounded = if blksize.is_power_of_two() && blksize > 4096 {
                need.checked_next_multiple_of(blksize)
                    .filter(|r| *r <= have)
                    .unwrap_or(need)
            } else {
                need
            };
            let len = usize::try_from(rounded).map_err(|_| MemError::Overflow)?;
            let map = mmap(Some(*fd), len)?;
            // `mmap_offset < need <= len` (memory_size > 0), so the offset is inside the mapping.
            let off = spec.mmap_offset as usize;
            // SAFETY: `off < len`, the size of the mapping just made.
            let host = unsafe { map.base.as_ptr().add(off) };
            let host = NonNull::new(host).ok_or(MemError::Overflow)?;
            regions.push(Region { spec: *spec, host });
            maps.push(map);
        }
        Ok(GuestMemory { regions, maps })
    }

    /// Anonymous zeroed regions `(guest_phys_addr, size)` with user-virtual address equal to the
    /// guest-physical one: for tests, fuzzing and the mock driver.
    pub fn anonymous(layout: &[(u64, u64)]) -> Result<Self, MemError> {
        let specs: Vec<RegionSpec> = layout
            .iter()
            .map(|&(gpa, size)| RegionSpec {
                guest_phys_addr: gpa,
                memory_size: size,
                userspace_addr: gpa,
                mmap_offset: 0,
            })
            .collect();
        check_specs(&specs)?;
        let mut regions = Vec::with_capacity(specs.len());
        let mut maps = Vec::with_capacity(specs.len());
        for spec in specs {
            let len = usize::try_from(spec.memory_size).map_err(|_| MemError::Overflow)?;
            let map = mmap(None, len)?;
            regions.push(Region {
                spec,
                host: map.base,
            });
            maps.push(map);
        }
        Ok(GuestMemory { regions, maps })
    }

    /// NUMA node of the memory behind the first region (where the guest's RAM starts), if the
    /// kernel can tell.
    pub fn numa_node(&self) -> Option<usize> {
        let r = self.regions.first()?;
        let mut node: libc::c_int = -1;
        const MPOL_F_NODE: libc::c_ulong = 1;
        const MPOL_F_ADDR: libc::c_ulong = 2;
        // get_mempolicy(2) reads nothing through the null nodemask (maxnode 0), and `host` is
        // an address inside our own mapping, which the kernel only looks up.
        // SAFETY: the call writes one int, to `node`, a live local.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_get_mempolicy,
                &mut node as *mut libc::c_int,
                std::ptr::null_mut::<libc::c_ulong>(),
                0 as libc::c_ulong,
                r.host.as_ptr(),
                MPOL_F_NODE | MPOL_F_ADDR,
            )
        };
        (rc == 0 && node >= 0).then_some(node as usize)
    }

    /// True once a region of this table has faulted (its file shrank or vanished, or its huge
    /// pages ran out) and was replaced by zero pages: what was read since reads as zeros, what
    /// was written since stays in private pages the frontend never sees. The table stays usable (no access faults again) but the
    /// frontend's memory is gone: give up the connection. Cheap: one relaxed load when no guest
    /// mapping in the process was ever lost, else one load per region.
    #[inline]
    pub fn poisoned(&self) -> bool {
        lost::mappings_lost() != 0 && self.maps.iter().any(Mapping::poisoned)
    }

    /// The first region that was lost (see [`Self::poisoned`]): its index and description.
    pub fn lost_region(&self) -> Option<(usize, RegionSpec)> {
        self.maps
            .iter()
            .zip(&self.regions)
            .enumerate()
            .find(|(_, (m, _))| m.poisoned())
            .map(|(i, (_, r))| (i, r.spec))
    }

    /// The regions, as given.
    pub fn regions(&self) -> impl Iterator<Item = RegionSpec> + '_ {
        self.regions.iter().map(|r| r.spec)
    }

    /// Host pointer for guest-physical `[gpa, gpa + len)` if it lies in one region, and how many
    /// bytes of the region remain from `gpa` (at least `len`).
    #[inline]
    fn lookup(&self, gpa: u64, len: u64) -> Option<(NonNull<u8>, u64)> {
        for r in &self.regions {
            let off = gpa.wrapping_sub(r.spec.guest_phys_addr);
            if gpa >= r.spec.guest_phys_addr && off < r.spec.memory_size {
                let room = r.spec.memory_size - off;
                if len > room {
                    return None;
                }
                // The mapping covers `memory_size` bytes from `host` (checked against the fd
                // size when the table was built).
                // SAFETY: `off < memory_size`, so the result stays inside the mapping.
                let p = unsafe { r.host.as_ptr().add(off as usize) };
                return NonNull::new(p).map(|p| (p, room));
            }
        }
        None
    }

    /// True if `[gpa, gpa + len)` lies within one region.
    #[inline]
    pub fn contains(&self, gpa: u64, len: u64) -> bool {
        self.lookup(gpa, len).is_some()
    }

    /// Translates a frontend user-virtual range (vring addresses) to guest-physical, if it lies
    /// within one region.
    pub fn uva_to_gpa(&self, uva: u64, len: u64) -> Option<u64> {
        self.regions.iter().find_map(|r| {
            let off = uva.checked_sub(r.spec.userspace_addr)?;
            let room = r.spec.memory_size.checked_sub(off)?;
            (off < r.spec.memory_size && len <= room).then(|| r.spec.guest_phys_addr + off)
        })
    }

    /// Walks `[gpa, gpa + len)` region by region; `f(host, done, n)` per piece.
    #[inline]
    fn for_each_piece(
        &self,
        gpa: u64,
        len: usize,
        mut f: impl FnMut(NonNull<u8>, usize, usize),
    ) -> Result<(), MemError> {
        let oor = MemError::OutOfRange {
            addr: gpa,
            len: len as u64,
        };
        end(gpa, len as u64).map_err(|_| oor.clone())?;
        // Check every piece before touching anything, so a failed access has no effect.
        let mut done = 0usize;
        while done < len {
            let (_, room) = self.lookup(gpa + done as u64, 1).ok_or(oor.clone())?;
            done += (room.min((len - done) as u64)) as usize;
        }
        let mut done = 0usize;
        while done < len {
            let (p, room) = self.lookup(gpa + done as u64, 1).ok_or(oor.clone())?;
            let n = (room.min((len - done) as u64)) as usize;
            f(p, done, n);
            done += n;
        }
        Ok(())
    }

    /// Copies guest bytes at `gpa` into `dst` (may cross adjacent regions).
    #[inline]
    pub fn read(&self, gpa: u64, dst: &mut [u8]) -> Result<(), MemError> {
        if let Some((p, _)) = self.lookup(gpa, dst.len() as u64) {
            // Guest memory is only ever accessed through raw copies, never through references;
            // `dst` is our own memory, so the two cannot overlap.
            // SAFETY: `lookup` checked that `dst.len()` bytes from `p` lie in a live mapping.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), dst.as_mut_ptr(), dst.len()) };
            return Ok(());
        }
        let base = dst.as_mut_ptr();
        self.for_each_piece(gpa, dst.len(), |p, done, n| {
            // `for_each_piece` checked that the piece `[p, p + n)` lies in a mapping.
            // SAFETY: that piece is live, and `done + n <= dst.len()`.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), base.add(done), n) };
        })
    }

    /// Copies `src` into guest memory at `gpa` (may cross adjacent regions).
    #[inline]
    pub fn write(&self, gpa: u64, src: &[u8]) -> Result<(), MemError> {
        if let Some((p, _)) = self.lookup(gpa, src.len() as u64) {
            // `src` is our own memory, so source and destination cannot overlap.
            // SAFETY: `lookup` checked that the destination range lies in a live mapping.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p.as_ptr(), src.len()) };
            return Ok(());
        }
        let base = src.as_ptr();
        self.for_each_piece(gpa, src.len(), |p, done, n| {
            // SAFETY: the destination piece lies in a mapping; `done + n <= src.len()`.
            unsafe { std::ptr::copy_nonoverlapping(base.add(done), p.as_ptr(), n) };
        })
    }

    /// Copies `a` then `b` into guest memory at `gpa` (a header and its frame): one lookup
    /// when both fit in one region.
    #[inline]
    pub fn write2(&self, gpa: u64, a: &[u8], b: &[u8]) -> Result<(), MemError> {
        let total = (a.len() + b.len()) as u64;
        if let Some((p, _)) = self.lookup(gpa, total) {
            // `a` and `b` are our own memory, so nothing overlaps.
            // SAFETY: `lookup` checked that `a.len() + b.len()` bytes from `p` are live.
            unsafe {
                std::ptr::copy_nonoverlapping(a.as_ptr(), p.as_ptr(), a.len());
                std::ptr::copy_nonoverlapping(b.as_ptr(), p.as_ptr().add(a.len()), b.len());
            }
            return Ok(());
        }
        if !self.contains_split(gpa, total) {
            return Err(MemError::OutOfRange {
                addr: gpa,
                len: total,
            });
        }
        self.write(gpa, a)?;
        self.write(gpa + a.len() as u64, b)
    }

    /// Copies `len` bytes from guest memory `src` at `src_gpa` into this guest memory at `gpa`
    /// (one copy between two guests, or within one: the ranges may even overlap, a hostile
    /// guest can post an rx buffer over its own tx buffer, so the copy is a `memmove`). Each
    /// range must lie within one region of its table; nothing is copied otherwise.
    #[inline]
    pub fn copy_from(
        &self,
        gpa: u64,
        src: &GuestMemory,
        src_gpa: u64,
        len: usize,
    ) -> Result<(), MemError> {
        let oor = |addr| MemError::OutOfRange {
            addr,
            len: len as u64,
        };
        let (d, _) = self.lookup(gpa, len as u64).ok_or(oor(gpa))?;
        let (s, _) = src.lookup(src_gpa, len as u64).ok_or(oor(src_gpa))?;
        // Guest memory is only ever reached through raw copies; both mappings stay mapped while
        // `self` and `src` are borrowed. `lookup` checked that `len` bytes from `s` and from
        // `d` lie in live mappings.
        // SAFETY: both ranges are checked and live (above); `copy` allows them to overlap.
        unsafe { std::ptr::copy(s.as_ptr(), d.as_ptr(), len) };
        Ok(())
    }

    /// True if `[gpa, gpa + len)` is covered by regions (possibly several adjacent ones).
    fn contains_split(&self, gpa: u64, len: u64) -> bool {
        self.for_each_piece(gpa, len as usize, |_, _, _| {}).is_ok()
    }

    /// Starts fetching the first (up to two) cache lines of `[gpa, gpa + len)` into the cache,
    /// for reading or for writing. Never faults; does nothing outside guest memory.
    #[inline]
    pub fn prefetch(&self, gpa: u64, len: u32, write: bool) {
        if let Some((p, _)) = self.lookup(gpa, 1) {
            prefetch_line(p.as_ptr(), write);
            if len > 64 {
                prefetch_line(p.as_ptr().wrapping_add(64), write);
            }
        }
    }

    /// Reads a plain little-endian field.
    #[inline]
    pub fn read_obj<T: LeField>(&self, gpa: u64) -> Result<T, MemError> {
        let mut b = [0u8; 8];
        self.read(gpa, &mut b[..T::SIZE])?;
        Ok(T::from_le(&b[..T::SIZE]))
    }

    /// Writes a plain little-endian field.
    #[inline]
    pub fn write_obj<T: LeField>(&self, gpa: u64, v: T) -> Result<(), MemError> {
        let mut b = [0u8; 8];
        v.to_le(&mut b[..T::SIZE]);
        self.write(gpa, &b[..T::SIZE])
    }

    /// A range `[gpa, gpa + len)` within one region, checked now and usable without further
    /// lookups while it (and so this table) lives. `align` must divide `gpa`'s host address.
    pub fn range(
        self: &Arc<Self>,
        gpa: u64,
        len: u64,
        align: usize,
    ) -> Result<GuestRange, MemError> {
        let oor = MemError::OutOfRange { addr: gpa, len };
        let len_us = usize::try_from(len).map_err(|_| MemError::Overflow)?;
        let (ptr, _) = self.lookup(gpa, len).ok_or(oor.clone())?;
        if align == 0 || !align.is_power_of_two() || !(ptr.as_ptr() as usize).is_multiple_of(align)
        {
            return Err(oor);
        }
        Ok(GuestRange {
            ptr,
            len: len_us,
            _mem: Arc::clone(self),
        })
    }
}

/// Asks the CPU to bring the cache line holding `r` (and the next one when `two` is set) into
/// L1, for read. A hint for the datapath's batched lookups (`dp`): the caches and classifier
/// touch the next packets' buckets while earlier packets are compared. Safe: `r` is a live
/// reference and a prefetch never faults.
#[inline(always)]
pub fn prefetch_ref<T>(r: &T, two: bool) {
    let p = (r as *const T).cast::<u8>();
    prefetch_line(p, false);
    if two {
        prefetch_line(p.wrapping_add(64), false);
    }
}

/// A prefetch hint (no access is made; an address outside any mapping is ignored by the CPU).
#[inline(always)]
fn prefetch_line(p: *const u8, write: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T0};
        // SSE is part of the x86_64 baseline.
        // SAFETY: a prefetch is only a hint; it never dereferences `p` or faults.
        unsafe {
            if write {
                _mm_prefetch::<_MM_HINT_ET0>(p.cast());
            } else {
                _mm_prefetch::<_MM_HINT_T0>(p.cast());
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, write);
}

/// Plain little-endian integer fields of rings and headers.
pub trait LeField: Copy {
    /// Size in bytes.
    const SIZE: usize;
    /// Decodes from `SIZE` little-endian bytes.
    fn from_le(b: &[u8]) -> Self;
    /// Encodes into `SIZE` little-endian bytes.
    fn to_le(self, b: &mut [u8]);
}

macro_rules! le_field {
    ($t:ty) => {
        impl LeField for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline]
            fn from_le(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::SIZE]);
                <$t>::from_le_bytes(a)
            }
            #[inline]
            fn to_le(self, b: &mut [u8]) {
                b[..Self::SIZE].copy_from_slice(&self.to_le_bytes());
            }
        }
    };
}
le_field!(u8);
le_field!(u16);
le_field!(u32);
le_field!(u64);

/// A range of guest memory checked once (a vring's descriptor table, avail or used ring).
/// Accessors check offsets against the range and never fault while the range lives: it holds
/// its table's `Arc`, so the mapping outlives it.
pub struct GuestRange {
    ptr: NonNull<u8>,
    len: usize,
    _mem: Arc<GuestMemory>,
}

// SAFETY: the pointer targets a mapping kept alive by the `Arc` we hold; all accesses are raw
// copies or atomics, which are valid from any thread.
unsafe impl Send for GuestRange {}
// SAFETY: as for `Send`; `&self` methods perform only raw copies and atomic operations.
unsafe impl Sync for GuestRange {}

impl fmt::Debug for GuestRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GuestRange({:p}+{})", self.ptr, self.len)
    }
}

impl GuestRange {
    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pointer to `[off, off + n)` if inside the range and aligned to `align`.
    #[inline(always)]
    fn at(&self, off: usize, n: usize, align: usize) -> Option<*mut u8> {
        if off > self.len || n > self.len - off {
            return None;
        }
        // SAFETY: `off + n <= len`, so the pointer stays inside the checked range.
        let p = unsafe { self.ptr.as_ptr().add(off) };
        ((p as usize) & (align - 1) == 0).then_some(p)
    }

    /// Loads a u16 ring index with acquire ordering (pairs with the peer's release store).
    #[inline]
    pub fn load_u16_acquire(&self, off: usize) -> Option<u16> {
        let p = self.at(off, 2, 2)?;
        // AtomicU16 has the layout of u16, and the peer only accesses it atomically or as
        // plain u16 stores.
        // SAFETY: `p` is 2-aligned and inside the live mapping.
        let a = unsafe { &*(p as *const AtomicU16) };
        Some(u16::from_le(a.load(Ordering::Acquire)))
    }

    /// Stores a u16 ring index with release ordering (publishes the writes before it).
    #[inline]
    pub fn store_u16_release(&self, off: usize, v: u16) -> bool {
        let Some(p) = self.at(off, 2, 2) else {
            return false;
        };
        // SAFETY: as in `load_u16_acquire`.
        let a = unsafe { &*(p as *const AtomicU16) };
        a.store(v.to_le(), Ordering::Release);
        true
    }

    /// Reads a u16 once (volatile: the compiler cannot fetch it twice).
    #[inline]
    pub fn read_u16(&self, off: usize) -> Option<u16> {
        let p = self.at(off, 2, 2)?;
        // SAFETY: aligned, in range, mapping alive.
        Some(u16::from_le(unsafe {
            std::ptr::read_volatile(p as *const u16)
        }))
    }

    /// Writes a u16 (volatile).
    #[inline]
    pub fn write_u16(&self, off: usize, v: u16) -> bool {
        let Some(p) = self.at(off, 2, 2) else {
            return false;
        };
        // SAFETY: aligned, in range, mapping alive.
        unsafe { std::ptr::write_volatile(p as *mut u16, v.to_le()) };
        true
    }

    /// Writes a u64 made of two little-endian u32s `(lo, hi)` (a used-ring element), volatile.
    #[inline]
    pub fn write_u32_pair(&self, off: usize, lo: u32, hi: u32) -> bool {
        let Some(p) = self.at(off, 8, 4) else {
            return false;
        };
        // SAFETY: 4-aligned, 8 bytes in range, mapping alive.
        unsafe {
            std::ptr::write_volatile(p as *mut u32, lo.to_le());
            std::ptr::write_volatile((p as *mut u32).add(1), hi.to_le());
        }
        true
    }

    /// Reads 16 bytes once as two little-endian u64 (a descriptor), volatile.
    #[inline]
    pub fn read_u64_pair(&self, off: usize) -> Option<(u64, u64)> {
        let p = self.at(off, 16, 8)?;
        // SAFETY: 8-aligned, 16 bytes in range, mapping alive.
        unsafe {
            Some((
                u64::from_le(std::ptr::read_volatile(p as *const u64)),
                u64::from_le(std::ptr::read_volatile((p as *const u64).add(1))),
            ))
        }
    }
}

#[cfg(test)]
mod tests;
