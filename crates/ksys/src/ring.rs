//! The receive ring of an `af-packet` socket: a `PACKET_RX_RING` (`TPACKET_V2`) the kernel
//! writes frames into and this process maps, so a PMD takes frames by reading each slot's
//! status word, with no system call per frame or per burst. It owns the mapping, the ring's
//! geometry and the read cursor; what is in a slot is parsed by the `ports` crate (`kmeta::parse_tpacket2`).
//!
//! Protocol (the kernel's `packet_mmap` contract): a slot whose `tp_status` has
//! `TP_STATUS_USER` holds a frame and the kernel does not touch it until user space writes
//! `TP_STATUS_KERNEL` (0) back; the kernel fills slots in order, so the reader does too.
//! Frames larger than a slot (TCP GSO frames up to 64 KB) are cut to the slot and, with
//! `PACKET_COPY_THRESH`, queued whole on the socket (`TP_STATUS_COPY`) for `recvmsg`.
//!
//! A socket handed over by an upgrade may already have a ring (the previous vireod made it;
//! `PACKET_VERSION` and `PACKET_RX_RING` then fail with `EBUSY`, and the ring cannot be
//! replaced while that process still maps it): the same geometry is mapped again and the
//! reader finds where the kernel is (the first slot of the run of full slots, or the first
//! slot to fill) instead of starting at slot 0. A ring of another geometry (`mmap` refuses
//! the size) is torn down and made anew.
//!
//! Threads: [`RxRing::attach`] on the control or housekeeping thread (port open, re-open,
//! adoption); [`RxRing::reader`] on the one PMD polling the port's rx queue (the cursor sits
//! behind an uncontended mutex, taken once per burst). Drop (unmap) on whichever thread drops
//! the last reference to the port's socket.
#![allow(unsafe_code)]

use crate::sys;

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

/// `TP_STATUS_USER`: the ring slot holds a frame for user space (else it is the kernel's).
pub const TP_STATUS_USER: u32 = 1;

/// `TPACKET2_HDRLEN`: `struct tpacket2_hdr` (32 bytes) plus the `sockaddr_ll` after it; the
/// frame (and a virtio-net header before it) starts no earlier.
pub const TPACKET2_HDRLEN: usize = 52;

/// `TPACKET_V2`.
const TPACKET_V2: libc::c_int = 1;
/// Bytes per slot: what the kernel puts before an Ethernet frame (`tpacket2_hdr`,
/// `sockaddr_ll`, the virtio-net header, alignment: 76 bytes) plus a full
/// `packet::MAX_FRAME` frame (a jumbo frame of the largest MTU a kernel port takes, with a
/// VLAN tag), rounded up to the kernel's 16-byte alignment with some slack.
pub const FRAME_SIZE: usize = 9344;
/// Bytes per block (the kernel allocates the ring in blocks; a slot never spans two).
const BLOCK_SIZE: usize = 64 << 10;
/// Blocks in a ring.
const BLOCKS: usize = 128;
/// Slots per block.
const PER_BLOCK: usize = BLOCK_SIZE / FRAME_SIZE;
/// Slots in a ring (896: 8 MiB of kernel memory per port).
pub const FRAMES: usize = PER_BLOCK * BLOCKS;
/// Bytes mapped.
const MAP_LEN: usize = BLOCK_SIZE * BLOCKS;

const _: () = assert!(FRAME_SIZE.is_multiple_of(16) && FRAME_SIZE >= TPACKET2_HDRLEN + 24 + 10);
const _: () = assert!(PER_BLOCK > 0);

/// `struct tpacket_req`.
#[repr(C)]
#[derive(Default)]
struct Req {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

fn set_ring(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    let req = if on {
        Req {
            block_size: BLOCK_SIZE as u32,
            block_nr: BLOCKS as u32,
            frame_size: FRAME_SIZE as u32,
            frame_nr: FRAMES as u32,
        }
    } else {
        Req::default()
    };
    sys::set_opt(fd, 263, sys::PACKET_RX_RING, &req)
}

fn is(e: &io::Error, errno: libc::c_int) -> bool {
    e.raw_os_error() == Some(errno)
}

/// True if packet socket `fd` has a receive ring already (made by another process, or
/// another port); leaves it at `TPACKET_V2` if not.
pub fn has_ring(fd: BorrowedFd<'_>) -> bool {
    let r = sys::set_packet_int(fd, sys::PACKET_VERSION, TPACKET_V2);
    matches!(r, Err(e) if is(&e, libc::EBUSY))
}

/// How [`RxRing::attach`] got its ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attached {
    /// Made on this socket now (the kernel discarded what was queued on the socket).
    Created,
    /// The socket already had one (an upgrade's hand-over): mapped again, cursor re-found.
    Existing,
}

/// Where the reader is.
struct Cursor {
    /// The slot to read next.
    next: usize,
    /// The ring came from another process: find `next` before reading.
    resync: bool,
}

/// A mapped `TPACKET_V2` receive ring.
pub struct RxRing {
    base: NonNull<u8>,
    cursor: Mutex<Cursor>,
}

// SAFETY: `base` is a shared mapping owned by this value (unmapped only in Drop); every access
// through it goes either through an `AtomicU32` (slot status words) or through a `Slot`, which
// exists only while holding the cursor mutex and only for a slot the kernel handed over, so
// sharing the value between threads introduces no unsynchronized access.
unsafe impl Send for RxRing {}
// SAFETY: as above.
unsafe impl Sync for RxRing {}

impl std::fmt::Debug for RxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxRing").field("frames", &FRAMES).finish()
    }
}

fn map(fd: BorrowedFd<'_>) -> io::Result<NonNull<u8>> {
    // SAFETY: a fresh shared mapping of the socket's ring, of the exact size the kernel
    // requires (it refuses any other); nothing else in this process refers to that range.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            MAP_LEN,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))
}

impl RxRing {
    /// Gives packet socket `fd` a receive ring (`TPACKET_V2`, [`FRAMES`] slots of
    /// [`FRAME_SIZE`], `PACKET_COPY_THRESH` for frames above a slot) and maps it; maps the one
    /// it already has if it has one (see the module doc). `PACKET_VNET_HDR` must be set before.
    pub fn attach(fd: BorrowedFd<'_>) -> io::Result<(RxRing, Attached)> {
        match sys::set_packet_int(fd, sys::PACKET_VERSION, TPACKET_V2) {
            Err(e) if is(&e, libc::EBUSY) => return RxRing::map_existing(fd),
            r => r?,
        }
        match set_ring(fd, true) {
            Err(e) if is(&e, libc::EBUSY) => return RxRing::map_existing(fd),
            r => r?,
        }
        RxRing::map_new(fd)
    }

    fn map_new(fd: BorrowedFd<'_>) -> io::Result<(RxRing, Attached)> {
        // Best effort: without it a frame above a slot is only counted (too big).
        let _ = sys::set_packet_int(fd, sys::PACKET_COPY_THRESH, 1);
        match map(fd) {
            Ok(base) => Ok((RxRing::new(base, false), Attached::Created)),
            Err(e) => {
                let _ = set_ring(fd, false);
                Err(e)
            }
        }
    }

    fn map_existing(fd: BorrowedFd<'_>) -> io::Result<(RxRing, Attached)> {
        match map(fd) {
            Ok(base) => Ok((RxRing::new(base, true), Attached::Existing)),
            Err(e) if is(&e, libc::EINVAL) => {
                // Another geometry: replace it (refused with EBUSY while still mapped).
                set_ring(fd, false)?;
                set_ring(fd, true)?;
                RxRing::map_new(fd)
            }
            Err(e) => Err(e),
        }
    }

    fn new(base: NonNull<u8>, resync: bool) -> RxRing {
        RxRing {
            base,
            cursor: Mutex::new(Cursor { next: 0, resync }),
        }
    }

    /// Start of slot `i` (< [`FRAMES`]).
    fn slot_ptr(&self, i: usize) -> *mut u8 {
        debug_assert!(i < FRAMES);
        let off = (i / PER_BLOCK) * BLOCK_SIZE + (i % PER_BLOCK) * FRAME_SIZE;
        // SAFETY: `off + FRAME_SIZE <= MAP_LEN` for every `i < FRAMES`, so the result stays
        // inside the mapping.
        unsafe { self.base.as_ptr().add(off) }
    }

    /// The status word of slot `i`.
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: the slot start is inside the mapping and 16-byte aligned (blocks are
        // page-aligned, FRAME_SIZE is a multiple of 16); the kernel and this process access
        // the word only atomically (the kernel with WRITE_ONCE/READ_ONCE and barriers), and the
        // mapping outlives `&self`.
        unsafe { AtomicU32::from_ptr(self.slot_ptr(i).cast()) }
    }

    /// The reader (one at a time: the PMD polling the port).
    pub fn reader(&self) -> Reader<'_> {
        Reader {
            ring: self,
            cur: self.cursor.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: `base`/`MAP_LEN` is the mapping made in `map`, unmapped once here; no `Slot`
        // can outlive `self` (it borrows it).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), MAP_LEN);
        }
    }
}

/// Reads a ring's slots in order (holds its cursor).
pub struct Reader<'r> {
    ring: &'r RxRing,
    cur: MutexGuard<'r, Cursor>,
}

impl Reader<'_> {
    /// The next slot the kernel has handed over, if any; it goes back to the kernel when the
    /// [`Slot`] is dropped.
    pub fn next_slot(&mut self) -> Option<Slot<'_>> {
        if self.cur.resync {
            self.cur.next = self.find_start()?;
            self.cur.resync = false;
        }
        let i = self.cur.next;
        if self.ring.status(i).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            return None;
        }
        self.cur.next = (i + 1) % FRAMES;
        Some(Slot { ring: self.ring, i })
    }

    /// Where the kernel's run of full slots starts: a full slot after an empty one (all
    /// full: the ring is full and any slot will do). None while every slot is empty.
    fn find_start(&self) -> Option<usize> {
        let full = |i: usize| self.ring.status(i).load(Ordering::Acquire) & TP_STATUS_USER != 0;
        let mut any = false;
        for i in 0..FRAMES {
            if full(i) {
                any = true;
                if !full((i + FRAMES - 1) % FRAMES) {
                    return Some(i);
                }
            }
        }
        any.then_some(0)
    }
}

/// A slot the kernel handed over, returned to it on drop.
pub struct Slot<'a> {
    ring: &'a RxRing,
    i: usize,
}

impl Slot<'_> {
    /// The slot's bytes (its `tpacket2_hdr`, then what the kernel wrote after it).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the slot lies inside the mapping (see `slot_ptr`); its status said
        // TP_STATUS_USER (read with Acquire, after the kernel's writes to it), and the kernel
        // writes no slot in that state until we store TP_STATUS_KERNEL, which happens only in
        // `drop`, after this borrow ends.
        unsafe { std::slice::from_raw_parts(self.ring.slot_ptr(self.i), FRAME_SIZE) }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        // TP_STATUS_KERNEL: the kernel may fill it again (Release: our reads happen before).
        self.ring.status(self.i).store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn root() -> bool {
        nix::unistd::geteuid().is_root() || testkit::missing_peer("root (packet sockets)", "sudo")
    }

    /// What the kernel does with a second ring request on a socket that has one, which the
    /// hand-over relies on: `PACKET_VERSION` and `PACKET_RX_RING` fail with EBUSY, the ring
    /// can be mapped again, and it can be torn down only once nobody maps it.
    #[test]
    fn a_socket_with_a_ring_keeps_it_and_maps_it_again() {
        if !root() {
            return;
        }
        let fd = sys::packet_socket().unwrap();
        sys::set_packet_opt(fd.as_fd(), sys::PacketOpt::VnetHdr, true).unwrap();
        let (first, how) = RxRing::attach(fd.as_fd()).unwrap();
        assert_eq!(how, Attached::Created);
        let e = sys::set_packet_int(fd.as_fd(), sys::PACKET_VERSION, TPACKET_V2).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
        let e = set_ring(fd.as_fd(), true).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
        // An upgrade's new process: the same ring, cursor to be re-found.
        let (second, how) = RxRing::attach(fd.as_fd()).unwrap();
        assert_eq!(how, Attached::Existing);
        assert!(second.cursor.lock().unwrap().resync);
        // Both mappings are the same memory.
        first.status(3).store(TP_STATUS_USER, Ordering::Release);
        assert_eq!(second.status(3).load(Ordering::Acquire), TP_STATUS_USER);
        // The re-found place: the start of the run of full slots.
        first.status(4).store(TP_STATUS_USER, Ordering::Release);
        {
            let mut r = second.reader();
            let s = r.next_slot().expect("slot 3 is full");
            assert_eq!(s.i, 3);
        }
        assert_eq!(first.status(3).load(Ordering::Acquire), 0, "slot returned");
        assert_eq!(second.reader().next_slot().map(|s| s.i), Some(4));
        assert!(second.reader().next_slot().is_none());
        // Not torn down while mapped.
        let e = set_ring(fd.as_fd(), false).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
        drop((first, second));
        set_ring(fd.as_fd(), false).unwrap();
        let (_third, how) = RxRing::attach(fd.as_fd()).unwrap();
        assert_eq!(how, Attached::Created);
    }

    #[test]
    fn resync_waits_for_the_first_frame_and_takes_a_run_across_the_end() {
        if !root() {
            return;
        }
        let fd = sys::packet_socket().unwrap();
        let (ring, _) = RxRing::attach(fd.as_fd()).unwrap();
        let adopted = RxRing::new(ring.base, true);
        assert!(adopted.reader().next_slot().is_none(), "all empty");
        assert!(adopted.cursor.lock().unwrap().resync, "still looking");
        for i in [FRAMES - 2, FRAMES - 1, 0, 1] {
            ring.status(i).store(TP_STATUS_USER, Ordering::Release);
        }
        let order: Vec<usize> = (0..5)
            .filter_map(|_| adopted.reader().next_slot().map(|s| s.i))
            .collect();
        assert_eq!(order, [FRAMES - 2, FRAMES - 1, 0, 1]);
        // `adopted` shares `ring`'s mapping: only one of them may unmap it.
        std::mem::forget(adopted);
    }
}
