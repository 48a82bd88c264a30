//! AF_XDP for Vireo: the UMEM, the four rings (fill, completion, rx, tx), socket bind with mode
//! selection and need-wakeup, and the XDP program plus XSKMAP that Vireo makes itself with raw
//! `bpf()` system calls (no clang, no ELF, nothing downloaded).
//!
//! Owns: [`Device`] (one interface: the program attached through a bpf link, the map, one
//! socket per queue, plus with steering one more per target on every queue: `steer.rs`) split into per-queue [`RxSide`] and [`TxSide`] halves. Each socket has its
//! own UMEM (a memfd) of [`FRAMES_PER_QUEUE`] frames of [`FRAME_SIZE`] bytes; the first half feeds the
//! fill/rx rings, the second half the tx/completion rings, so rx and tx of one queue never
//! share a frame or a lock. `adopt.rs` hands a device to another process (an upgrade's new
//! vireod: fds, frame books) and checks and adopts it there.
//!
//! Threads: a `Device` is opened and dropped by the daemon's control thread. An `RxSide` is
//! used by one PMD at a time, a `TxSide` by whichever PMD holds its lock (the `ports` crate
//! wraps each in a mutex); nothing in this crate locks or blocks (kicks are `MSG_DONTWAIT`).
//!
//! # SAFETY argument (this is the second and last crate with `unsafe` besides `guestmem`)
//!
//! - Every mapping (UMEM, the four rings) is a [`sys::Mmap`] that unmaps on drop; a ring keeps
//!   its mapping alive for as long as its raw pointers exist (the pointers live in the same
//!   struct). The UMEM mapping is shared (`Arc`) by both halves of a socket and by nothing else.
//! - Ring pointers (producer, consumer, flags, descriptors) are computed once from the offsets
//!   the kernel reports (`XDP_MMAP_OFFSETS`), each checked to lie inside the mapping with room
//!   for its type before use. Ring indices are masked with `size - 1` (size is a power of two)
//!   before any descriptor access, so no index the kernel writes can move a pointer outside the
//!   ring.
//! - The producer/consumer words are shared with the kernel and are accessed only as
//!   `AtomicU32` (acquire loads of the other side's index, release stores of ours, as the
//!   kernel's `xsk_queue.h` pairs them). Descriptors are read once with `read_volatile`.
//! - Descriptors the kernel hands back (rx, completion) are checked input: an address or
//!   length outside the UMEM, across a frame, or naming a frame the kernel does not hold is
//!   counted and dropped by [`frames::FramePool`] before any byte of the UMEM is read, so a
//!   UMEM access is always inside one frame of the mapping.
//! - With steering, a queue's extra sockets (`XDP_SHARED_UMEM`, same queue) share its UMEM
//!   mapping (`Arc`) and its fill ring and rx frame books (`socket::FillSide`, behind one
//!   mutex that each rx burst holds while it checks, copies and refills; without steering
//!   the queue's socket owns it and takes no lock), so the ownership
//!   rules below hold per queue whichever socket a frame comes back through.
//! - The UMEM is a memfd mapped shared (`sys::Mmap::memfd`) so that an upgrade's new vireod
//!   maps the same frames (`adopt.rs`). Two processes never use it at once: the old one stops
//!   touching its halves (the port holds rx and tx) before it reads the frame books it hands
//!   over, and the new one maps it only after that; the frame books carry ownership across
//!   (a frame is the kernel's unless the books say the process holds it).
//! - The kernel writes UMEM frames it owns while we read frames we own; ownership moves only
//!   through the rings (a frame is ours from the moment the rx/completion descriptor is
//!   consumed until we publish it in the fill/tx ring), so no byte is read and written
//!   concurrently.
//! - `bpf()`, `setsockopt`, `getsockopt`, `bind`, `ioctl` get pointers to local, correctly
//!   sized and zero-initialised `repr(C)` values or byte buffers that outlive the call.
#![allow(unsafe_code)]

mod adopt;
mod bpf;
mod cost;
mod device;
pub mod frames;
mod mark;
pub mod ring;
mod socket;
mod steer;
mod sys;

pub use adopt::{Books, DeviceFds, MapFds, QueueFds};
pub use cost::{program_cost, program_meta_run, ProgramCost};
pub use device::{Device, DeviceConfig, ModeInUse, ModeRequest, QueueStats, SteerStats};
pub use frames::{DescError, FramePool, RawDesc};
pub use mark::{
    flow_hash, kernel_allows_meta, FiveTuple, XdpMeta, MARK_MAP_ENTRIES, META_LEN, META_MAGIC,
};
pub use socket::{RxBurst, RxSide, TxBurst, TxSide};
pub use steer::STEER_MAP_ENTRIES;

/// Bytes per UMEM frame (one page; aligned chunk mode).
pub const FRAME_SIZE: u32 = 4096;
/// Entries in each of the four rings of a socket.
pub const RING_SIZE: u32 = 2048;
/// Frames per queue: enough that all four rings can be full at once.
pub const FRAMES_PER_QUEUE: u32 = 4 * RING_SIZE;
/// Headroom the kernel leaves in front of a received frame in copy mode.
pub const XDP_PACKET_HEADROOM: u32 = 256;
/// Largest frame the port receives or sends (a received frame starts after the headroom).
pub const MAX_FRAME_LEN: u32 = FRAME_SIZE - XDP_PACKET_HEADROOM;
/// Largest interface MTU the port accepts: the largest frame less an Ethernet header with one
/// VLAN tag.
pub const MAX_MTU: u32 = MAX_FRAME_LEN - 18;
/// The name Vireo gives its XDP program; a program of this name on an interface is Vireo's.
pub const PROG_NAME: &str = "vireo_xsk";

/// An error from opening a device, with the step that failed; one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl Error {
    pub(crate) fn os(what: impl std::fmt::Display, e: std::io::Error) -> Error {
        Error(format!("{what}: {e}"))
    }
}
