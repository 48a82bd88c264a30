//! Packet buffers, bursts and buffer pools.
//!
//! Owns: [`Packet`] (one fixed-size buffer with headroom for pushed headers: standard, or large
//! for GSO frames), [`Batch`] (a burst of up to [`BATCH_SIZE`] packets), [`Pool`] (free lists of
//! buffers tied to one NUMA node), the packet's metadata ([`Meta`], with the [`Offload`] it
//! still needs and its tunnel metadata, [`TunMeta`]) and the virtio-net header rules
//! ([`vnet`]).
//!
//! Threads: a `Pool` and the `Batch`es it feeds belong to one PMD thread and are never shared,
//! so nothing here locks. Buffers are allocated only while a pool warms up (or grows after
//! packets are held elsewhere); in steady state a burst recycles the same buffers and the hot
//! path does not allocate.
//!
//! This crate sits below `ports` and `dp` (DESIGN.md puts buffers in `dp`; ports must fill them
//! too, so they live one layer down).
//!
//! One copy for large frames: a packet may hold only the head of its frame in its buffer and
//! name the rest as a [`Tail`], a range of the sending guest's memory (still owned by us: the
//! guest gets that chain back only after the burst's transmit). [`Packet::data`] and
//! [`Packet::len`] are then the head only; [`Packet::frame_len`] is the whole frame. A
//! vhost-user port's enqueue copies the tail straight from guest to guest; every other
//! consumer first calls [`Packet::materialise`], which copies it in. The tail is one packed
//! word in the packet (address and length, no reference): the memory table it lies in is held
//! once for the whole burst by the [`Batch`] it was received in ([`Batch::tails`]), and every
//! tail in a batch lies in that one table. So a `Packet` stays 64 bytes (one cache line) and
//! a deferred frame costs no atomic operation; in exchange a packet with a tail must not
//! outlive its burst (the datapath sends or materialises every one before the burst ends).
#![deny(unsafe_code)]

use guestmem::GuestMemory;
use std::sync::Arc;

/// Largest burst a port receives or sends in one call.
pub const BATCH_SIZE: usize = 32;
/// Bytes kept free in front of the packet for pushed headers (VLAN, tunnel encapsulation).
pub const HEADROOM: usize = 128;
/// Largest frame a buffer holds (jumbo frames up to 9000 bytes of payload plus headers).
pub const MAX_FRAME: usize = 9216;
/// Largest frame a large buffer holds: a TCP GSO frame of up to 64 KB of IP packet, plus an
/// Ethernet header and one VLAN tag (what a guest with `HOST_TSO4/6` may hand us).
pub const MAX_LARGE_FRAME: usize = 65_535 + 14 + 4;
const BUF_SIZE: usize = HEADROOM + MAX_FRAME;
const LARGE_BUF_SIZE: usize = HEADROOM + MAX_LARGE_FRAME;

pub mod vnet;

/// An offload the packet still needs from whoever sends it on (set from the virtio-net header
/// the sender handed us, checked; see [`vnet`]). Offsets are from the start of the frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Offload {
    /// Nothing to do: the frame is complete.
    #[default]
    None,
    /// The transport checksum is partial: the 16-bit field at `start + offset` holds the
    /// pseudo-header sum; the sum of `frame[start..]` must be folded in.
    Csum {
        /// Where the checksum's coverage starts.
        start: u16,
        /// Offset of the checksum field from `start`.
        offset: u16,
    },
    /// A TCP GSO frame: to be cut into segments of at most `mss` payload bytes. Its TCP
    /// checksum is partial (pseudo-header sum) at `l4 + 16`.
    Tso {
        /// IPv6 (else IPv4).
        v6: bool,
        /// Segment payload size.
        mss: u16,
        /// Offset of the TCP header.
        l4: u16,
    },
}

impl Offload {
    /// True if something is left to do.
    #[inline]
    pub fn is_some(&self) -> bool {
        !matches!(self, Offload::None)
    }

    /// The offload of a frame whose bytes before `at` grew by `n` (VLAN push) or shrank
    /// (`n` negative, VLAN pop); `None` if an offset would leave the frame's start.
    pub fn shifted(self, at: usize, n: isize) -> Option<Offload> {
        let mv = |o: u16| -> Option<u16> {
            if usize::from(o) < at {
                return None;
            }
            u16::try_from(isize::try_from(o).ok()?.checked_add(n)?).ok()
        };
        Some(match self {
            Offload::None => Offload::None,
            Offload::Csum { start, offset } => Offload::Csum {
                start: mv(start)?,
                offset,
            },
            Offload::Tso { v6, mss, l4 } => Offload::Tso {
                v6,
                mss,
                l4: mv(l4)?,
            },
        })
    }
}

/// Metadata the datapath carries with a packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// Datapath port number the packet arrived on.
    pub in_port: u32,
    /// Hash of the flow key, computed once at classification (0 = not computed). An
    /// `af-xdp` port with `xdp-mark=on` fills it with the XDP program's flow hash, which the
    /// datapath then keeps as the packet's cache hash.
    pub hash: u32,
    /// Mark the `af-xdp` XDP program gave the frame's 5-tuple (0 = none): a hint naming a
    /// megaflow, which the datapath uses only after checking that flow covers the packet.
    pub mark: u32,
    /// The [`Offload`], packed into plain bits (kind in bits 0..8, its two 16-bit fields in
    /// bits 16..32 and 32..48): a plain integer keeps `Meta` one 16-byte store to reset and
    /// copy; the enum itself (with padding) made the 64-byte burst of gets and puts twice as
    /// slow (`cargo bench -p packet --bench pool`).
    offload: u64,
    /// Tunnel metadata: what a `vxlan`/`geneve` port decapsulated, or what a `set_tunnel`
    /// action set for the output to a flow-based tunnel port (all zero: none).
    pub tun: TunMeta,
}

/// A packet's tunnel metadata (IPv4 outer addresses; an IPv6 underlay leaves them zero).
/// Twelve bytes, so `Meta` stays 32: the flow key holds the full 64-bit `tun_id` for the
/// pipeline, and a recirculated packet keeps the key's words, not these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunMeta {
    /// Low 32 bits of the tunnel id (VNI: VXLAN and Geneve carry the low 24).
    pub id: u32,
    /// Outer source address (big-endian number; on decap, the remote endpoint).
    pub src: u32,
    /// Outer destination address (on decap, our address when the port is bound to one; on
    /// encap to a `remote_ip=flow` port, where the packet goes).
    pub dst: u32,
}

impl TunMeta {
    /// True if any field is set.
    #[inline(always)]
    pub fn is_set(&self) -> bool {
        self.id | self.src | self.dst != 0
    }
}

impl Meta {
    /// Checksum or segmentation work left for the output.
    #[inline]
    pub fn offload(&self) -> Offload {
        let a = (self.offload >> 16) as u16;
        let b = (self.offload >> 32) as u16;
        match self.offload as u8 {
            1 => Offload::Csum {
                start: a,
                offset: b,
            },
            2 | 3 => Offload::Tso {
                v6: self.offload as u8 == 3,
                mss: a,
                l4: b,
            },
            _ => Offload::None,
        }
    }

    /// True if the packet carries an offload (one comparison).
    #[inline]
    pub fn has_offload(&self) -> bool {
        self.offload != 0
    }

    /// Sets the offload.
    #[inline]
    pub fn set_offload(&mut self, o: Offload) {
        let (k, a, b) = match o {
            Offload::None => (0u64, 0u16, 0u16),
            Offload::Csum { start, offset } => (1, start, offset),
            Offload::Tso { v6, mss, l4 } => (if v6 { 3 } else { 2 }, mss, l4),
        };
        self.offload = k | u64::from(a) << 16 | u64::from(b) << 32;
    }
}

/// The part of a frame left in the sending guest's memory (see the crate comment): `len`
/// bytes at guest-physical `gpa` of the memory table its batch holds ([`Batch::tails`]),
/// checked to lie in one region of it when it was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tail {
    /// Where the tail starts (below [`TAIL_GPA_LIMIT`]).
    pub gpa: u64,
    /// Its length (1 to [`MAX_FRAME`]).
    pub len: u32,
}

/// Guest-physical addresses a deferred tail may start at lie below this (48 bits: the packed
/// tail word keeps the length in its top 16 bits). A frame elsewhere is copied whole.
pub const TAIL_GPA_LIMIT: u64 = 1 << TAIL_LEN_SHIFT;
const TAIL_LEN_SHIFT: u32 = 48;

/// One packet: a fixed buffer, the window `[head, head + len)` holding the frame (or its head,
/// with the rest in `tail`), and metadata. 64 bytes, one cache line (checked below): bursts,
/// transmit batches and free lists move and touch one line per packet.
pub struct Packet {
    buf: Box<[u8]>,
    head: u32,
    len: u32,
    /// The deferred tail packed: guest address in bits 0..48, length in bits 48..64; 0: none.
    tail: u64,
    /// Datapath metadata.
    pub meta: Meta,
}

const _: () = assert!(std::mem::size_of::<Packet>() == 64);

impl Packet {
    fn alloc() -> Packet {
        Packet::alloc_sized(BUF_SIZE)
    }

    fn alloc_sized(size: usize) -> Packet {
        Packet {
            buf: vec![0u8; size].into_boxed_slice(),
            head: HEADROOM as u32,
            len: 0,
            tail: 0,
            meta: Meta::default(),
        }
    }

    /// A packet holding a copy of `frame` (tests and slow paths; it allocates). Frames above
    /// [`MAX_FRAME`] are truncated to it.
    pub fn from_slice(frame: &[u8]) -> Packet {
        let mut p = Packet::alloc();
        p.set_frame(frame);
        p
    }

    /// A packet with a large buffer ([`MAX_LARGE_FRAME`]) holding a copy of `frame` (tests
    /// and slow paths; it allocates).
    pub fn from_slice_large(frame: &[u8]) -> Packet {
        let mut p = Packet::alloc_sized(LARGE_BUF_SIZE);
        p.set_frame(frame);
        p
    }

    /// True for a large buffer (one of [`MAX_LARGE_FRAME`] bytes).
    #[inline]
    pub fn is_large(&self) -> bool {
        self.buf.len() > BUF_SIZE
    }

    /// Room for a frame after the default headroom in this packet's buffer.
    #[inline]
    pub fn room(&self) -> usize {
        self.buf.len() - HEADROOM
    }

    /// The deferred tail, if the frame's end is still in the sender's memory (in the table
    /// of the batch it came in: [`Batch::tails`]).
    #[inline]
    pub fn tail(&self) -> Option<Tail> {
        (self.tail != 0).then_some(Tail {
            gpa: self.tail & (TAIL_GPA_LIMIT - 1),
            len: (self.tail >> TAIL_LEN_SHIFT) as u32,
        })
    }

    /// True if the frame's end is still in the sender's memory.
    #[inline]
    pub fn has_tail(&self) -> bool {
        self.tail != 0
    }

    /// Defers the rest of the frame: `t` follows the bytes in the buffer. The caller checked
    /// that `t` lies in one region of the table its batch will hold ([`Batch::tails`]). A tail
    /// that is empty, longer than [`MAX_FRAME`], at or above [`TAIL_GPA_LIMIT`], or that would
    /// not fit the buffer after the head is refused (`false`, nothing changed).
    #[inline]
    pub fn set_tail(&mut self, t: Tail) -> bool {
        let n = t.len as usize;
        if n == 0
            || n > MAX_FRAME
            || t.gpa >= TAIL_GPA_LIMIT
            || (self.head + self.len) as usize + n > self.buf.len()
        {
            return false;
        }
        self.tail = t.gpa | (u64::from(t.len) << TAIL_LEN_SHIFT);
        true
    }

    /// Whole frame length: the bytes held plus the deferred tail.
    #[inline]
    pub fn frame_len(&self) -> usize {
        self.len as usize + (self.tail >> TAIL_LEN_SHIFT) as usize
    }

    /// Copies the deferred tail (if any) from `mem`, the table of the batch the packet came in
    /// ([`Batch::tails`]), into the buffer after the head, so that [`Packet::data`] is the
    /// whole frame. The tail was checked to lie in that table when it was made and the batch
    /// keeps the table, so the read cannot fail; if it did, or if there is no table (a packet
    /// kept past its burst: a bug), the bytes are zeros: never another guest's.
    #[inline]
    pub fn materialise(&mut self, mem: Option<&GuestMemory>) {
        let Some(t) = self.tail() else { return };
        self.tail = 0;
        let at = (self.head + self.len) as usize;
        let n = t.len as usize;
        // In the buffer: `set_tail` checked head + tail against it, and pushes and pulls at
        // the front keep the frame's end where it was.
        if let Some(dst) = self.buf.get_mut(at..at + n) {
            if mem.is_none_or(|m| m.read(t.gpa, dst).is_err()) {
                dst.fill(0);
            }
            self.len += n as u32;
        }
    }

    /// A copy of this packet's frame (its tail, if deferred, still deferred: the copy names
    /// the same range) and metadata into `c` (another output of the same packet, in the same
    /// burst; take `c` with `Pool::get_for(self.frame_len())`).
    #[inline]
    pub fn copy_into(&self, c: &mut Packet) {
        c.set_frame(self.data());
        c.meta = self.meta;
        if let Some(t) = self.tail() {
            c.set_tail(t);
        }
    }

    /// The frame bytes (only the head while a tail is deferred: see [`Packet::materialise`]).
    #[inline]
    pub fn data(&self) -> &[u8] {
        let h = self.head as usize;
        &self.buf[h..h + self.len as usize]
    }

    /// The frame bytes, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let h = self.head as usize;
        &mut self.buf[h..h + self.len as usize]
    }

    /// Frame length in bytes (the head only while a tail is deferred: see
    /// [`Packet::frame_len`]).
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True if the frame is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Room for a frame after the headroom in a standard buffer.
    #[inline]
    pub fn capacity() -> usize {
        MAX_FRAME
    }

    /// Resets the window to `len` bytes after the default headroom and returns it for filling.
    /// `len` is clamped to the buffer's room ([`MAX_FRAME`], or [`MAX_LARGE_FRAME`] for a large
    /// buffer); callers check their source length first.
    #[inline]
    pub fn reset_for_fill(&mut self, len: usize) -> &mut [u8] {
        let len = len.min(self.buf.len() - HEADROOM);
        self.head = HEADROOM as u32;
        self.len = len as u32;
        self.tail = 0;
        self.meta = Meta::default();
        &mut self.buf[HEADROOM..HEADROOM + len]
    }

    /// Replaces the frame with a copy of `frame` (truncated to the buffer's room).
    pub fn set_frame(&mut self, frame: &[u8]) {
        let n = frame.len().min(self.room());
        self.reset_for_fill(n).copy_from_slice(&frame[..n]);
    }

    /// Shortens the frame to `len` bytes (no-op if already shorter); a deferred tail is
    /// shortened or dropped with it.
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        if let Some(t) = self.tail() {
            let keep = len.saturating_sub(self.len as usize).min(t.len as usize);
            self.tail = if keep == 0 {
                0
            } else {
                t.gpa | ((keep as u64) << TAIL_LEN_SHIFT)
            };
        }
        self.len = self.len.min(len.min(u32::MAX as usize) as u32);
    }

    /// Grows the frame at the front by `n` bytes (taken from the headroom) and returns the new
    /// front. `None` if the headroom is exhausted.
    pub fn push_front(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.head as usize {
            return None;
        }
        self.head -= n as u32;
        self.len += n as u32;
        let h = self.head as usize;
        Some(&mut self.buf[h..h + n])
    }

    /// Removes `n` bytes from the front. `false` (and nothing changed) if the frame is shorter.
    pub fn pull_front(&mut self, n: usize) -> bool {
        if n > self.len as usize {
            return false;
        }
        self.head += n as u32;
        self.len -= n as u32;
        true
    }

    /// Inserts `n` bytes at offset `at` within the frame, moving the first `at` bytes towards the
    /// front (used to insert a VLAN tag after the MAC addresses). Returns the inserted gap.
    pub fn insert_at(&mut self, at: usize, n: usize) -> Option<&mut [u8]> {
        if at > self.len as usize || n > self.head as usize {
            return None;
        }
        let old = self.head as usize;
        self.buf.copy_within(old..old + at, old - n);
        self.head -= n as u32;
        self.len += n as u32;
        let h = self.head as usize;
        Some(&mut self.buf[h + at..h + at + n])
    }

    /// Removes `n` bytes at offset `at`, moving the first `at` bytes back (VLAN pop).
    pub fn remove_at(&mut self, at: usize, n: usize) -> bool {
        if at.saturating_add(n) > self.len as usize {
            return false;
        }
        let old = self.head as usize;
        self.buf.copy_within(old..old + at, old + n);
        self.head += n as u32;
        self.len -= n as u32;
        true
    }
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packet")
            .field("len", &self.len)
            .field("tail", &self.tail())
            .field("meta", &self.meta)
            .finish()
    }
}

/// A burst of up to [`BATCH_SIZE`] packets. Its storage is reserved once; pushing never
/// reallocates.
///
/// One copy for large frames: the batch holds the memory table its packets' deferred tails
/// lie in ([`Batch::tails`]), one reference for the whole burst; every tail in the batch lies
/// in that table. Only a batch made with [`Batch::taking_tails`] (the datapath's, whose
/// every consumer copies a tail in or sends it guest to guest) is given packets with tails;
/// any other receiver gets whole frames.
pub struct Batch {
    pkts: Vec<Packet>,
    tails: Option<Arc<GuestMemory>>,
    tails_allowed: bool,
}

impl Default for Batch {
    fn default() -> Self {
        Batch::new()
    }
}

impl Batch {
    /// An empty batch with room for [`BATCH_SIZE`] packets.
    pub fn new() -> Batch {
        Batch {
            pkts: Vec::with_capacity(BATCH_SIZE),
            tails: None,
            tails_allowed: false,
        }
    }

    /// An empty batch that may be given packets with deferred tails (one copy): for a
    /// receiver that materialises each tail ([`Packet::materialise`]) or sends it guest to
    /// guest before the burst ends.
    pub fn taking_tails() -> Batch {
        Batch {
            tails_allowed: true,
            ..Batch::new()
        }
    }

    /// The memory table the deferred tails of this batch's packets lie in, if any.
    #[inline]
    pub fn tails(&self) -> Option<&Arc<GuestMemory>> {
        self.tails.as_ref()
    }

    /// Whether packets whose tails lie in `mem` may join this batch: it takes tails
    /// ([`Batch::taking_tails`]) and holds no table yet or holds `mem` (a batch never mixes
    /// tails of two tables).
    #[inline]
    pub fn tails_fit(&self, mem: &Arc<GuestMemory>) -> bool {
        self.tails_allowed && self.tails.as_ref().is_none_or(|m| Arc::ptr_eq(m, mem))
    }

    /// Makes this batch hold `mem` for its packets' tails (one reference per burst; nothing
    /// if it already does). Call only if [`Batch::tails_fit`].
    #[inline]
    pub fn hold_tails(&mut self, mem: &Arc<GuestMemory>) {
        if self.tails.is_none() {
            self.tails = Some(Arc::clone(mem));
        }
    }

    /// Takes the table out of this batch (to hold it for the burst elsewhere, or to drop it).
    #[inline]
    pub fn take_tails(&mut self) -> Option<Arc<GuestMemory>> {
        self.tails.take()
    }

    /// Swaps this batch's table with `mem` (lends a burst's table to a transmit batch for one
    /// `tx_burst`, and takes it back after; no reference-count change).
    #[inline]
    pub fn swap_tails(&mut self, mem: &mut Option<Arc<GuestMemory>>) {
        std::mem::swap(&mut self.tails, mem);
    }

    /// Number of packets held.
    #[inline]
    pub fn len(&self) -> usize {
        self.pkts.len()
    }

    /// True if no packet is held.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    /// True if the batch holds [`BATCH_SIZE`] packets.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.pkts.len() >= BATCH_SIZE
    }

    /// Free slots left.
    #[inline]
    pub fn room(&self) -> usize {
        BATCH_SIZE - self.pkts.len()
    }

    /// Adds a packet. A full batch hands the packet back.
    #[inline]
    pub fn push(&mut self, p: Packet) -> Result<(), Packet> {
        if self.is_full() {
            return Err(p);
        }
        self.pkts.push(p);
        Ok(())
    }

    /// The packets, in arrival order.
    #[inline]
    pub fn as_slice(&self) -> &[Packet] {
        &self.pkts
    }

    /// The packets, writable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Packet] {
        &mut self.pkts
    }

    /// Removes and yields every packet.
    #[inline]
    pub fn drain(&mut self) -> std::vec::Drain<'_, Packet> {
        self.pkts.drain(..)
    }

    /// Removes the first `n` packets (those a port sent) and yields them.
    #[inline]
    pub fn drain_front(&mut self, n: usize) -> std::vec::Drain<'_, Packet> {
        let n = n.min(self.pkts.len());
        self.pkts.drain(..n)
    }

    /// Removes the last packet.
    #[inline]
    pub fn pop(&mut self) -> Option<Packet> {
        self.pkts.pop()
    }

    /// Keeps the packets `keep` accepts, in order, and hands every other one to `reject`
    /// (e.g. back to its pool). No allocation.
    #[inline]
    pub fn retain(&mut self, mut keep: impl FnMut(&Packet) -> bool, reject: impl FnMut(Packet)) {
        self.pkts.extract_if(.., |p| !keep(p)).for_each(reject);
    }
}

/// Counters a pool keeps about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers ever allocated from the system.
    pub allocated: u64,
    /// Buffers handed out.
    pub gets: u64,
}

/// A free list of packet buffers belonging to one NUMA node, used by one thread.
///
/// Buffers are first touched by the thread that owns the pool; since PMD threads are pinned
/// to cores of their node, first-touch places the pages on that node.
///
/// Two classes: standard buffers ([`MAX_FRAME`]) for every frame, and large ones
/// ([`MAX_LARGE_FRAME`]) only for GSO frames a guest or kernel hands over with TSO; the large
/// free list stays empty (and costs nothing) where no such frame is seen. [`Pool::put`] sends
/// each buffer back to its own list.
pub struct Pool {
    node: usize,
    free: Vec<Packet>,
    free_large: Vec<Packet>,
    /// Large buffers handed out and not yet given back here: while 0, [`Pool::put_batch`]
    /// moves a batch back in one copy (a large buffer from another pool given back then joins
    /// the standard list, where it serves as a standard one).
    large_out: usize,
    stats: PoolStats,
}

impl Pool {
    /// A pool for `node`, with `prefill` buffers allocated now.
    pub fn new(node: usize, prefill: usize) -> Pool {
        let mut free = Vec::with_capacity(prefill.max(BATCH_SIZE * 4));
        for _ in 0..prefill {
            free.push(Packet::alloc());
        }
        Pool {
            node,
            free,
            free_large: Vec::new(),
            large_out: 0,
            stats: PoolStats {
                allocated: prefill as u64,
                gets: 0,
            },
        }
    }

    /// The NUMA node the buffers belong to.
    pub fn node(&self) -> usize {
        self.node
    }

    /// A buffer, empty, with default headroom and metadata.
    #[inline]
    pub fn get(&mut self) -> Packet {
        self.stats.gets += 1;
        match self.free.pop() {
            Some(mut p) => {
                p.head = HEADROOM as u32;
                p.len = 0;
                p.tail = 0;
                p.meta = Meta::default();
                p
            }
            None => {
                self.stats.allocated += 1;
                Packet::alloc()
            }
        }
    }

    /// A large buffer ([`MAX_LARGE_FRAME`]), empty, with default headroom and metadata.
    #[cold]
    pub fn get_large(&mut self) -> Packet {
        self.stats.gets += 1;
        self.large_out += 1;
        match self.free_large.pop() {
            Some(mut p) => {
                p.head = HEADROOM as u32;
                p.len = 0;
                p.tail = 0;
                p.meta = Meta::default();
                p
            }
            None => {
                self.stats.allocated += 1;
                Packet::alloc_sized(LARGE_BUF_SIZE)
            }
        }
    }

    /// A buffer with room for `len` bytes: standard, or large above [`MAX_FRAME`].
    #[inline]
    pub fn get_for(&mut self, len: usize) -> Packet {
        if len > MAX_FRAME {
            self.get_large()
        } else {
            self.get()
        }
    }

    /// Gives a buffer back (to the list of its class). A deferred tail is forgotten (`get`
    /// clears it).
    #[inline]
    pub fn put(&mut self, p: Packet) {
        if p.is_large() {
            self.large_out = self.large_out.saturating_sub(1);
            self.free_large.push(p);
        } else {
            self.free.push(p);
        }
    }

    /// Gives back every packet in `batch`, leaving it empty (and holding no memory table).
    #[inline]
    pub fn put_batch(&mut self, batch: &mut Batch) {
        if batch.tails.is_some() {
            batch.tails = None;
        }
        if self.large_out == 0 {
            self.free.extend(batch.drain());
            return;
        }
        for p in batch.drain() {
            self.put(p);
        }
    }

    /// Buffers currently free (both classes).
    pub fn free_count(&self) -> usize {
        self.free.len() + self.free_large.len()
    }

    /// Counters.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn meta_stays_32_bytes() {
        // Reset on every pool get and copied on every extra output: keep it small.
        assert!(
            std::mem::size_of::<Meta>() <= 32,
            "{}",
            std::mem::size_of::<Meta>()
        );
    }

    use super::*;

    #[test]
    fn batch_refuses_beyond_capacity() {
        let mut b = Batch::new();
        for _ in 0..BATCH_SIZE {
            assert!(b.push(Packet::from_slice(&[1, 2, 3])).is_ok());
        }
        assert!(b.is_full());
        assert!(b.push(Packet::from_slice(&[4])).is_err());
        assert_eq!(b.drain_front(5).count(), 5);
        assert_eq!(b.len(), BATCH_SIZE - 5);
    }

    #[test]
    fn pool_recycles_without_allocating() {
        let mut pool = Pool::new(0, 64);
        let mut b = Batch::new();
        for _ in 0..10 {
            for _ in 0..BATCH_SIZE {
                let mut p = pool.get();
                p.reset_for_fill(60).fill(7);
                b.push(p).unwrap();
            }
            pool.put_batch(&mut b);
        }
        assert_eq!(pool.stats().allocated, 64);
        assert_eq!(pool.free_count(), 64);
    }

    #[test]
    fn vlan_style_insert_and_remove() {
        let frame: Vec<u8> = (0u8..20).collect();
        let mut p = Packet::from_slice(&frame);
        p.insert_at(12, 4)
            .unwrap()
            .copy_from_slice(&[0x81, 0, 0, 5]);
        assert_eq!(p.len(), 24);
        assert_eq!(&p.data()[..12], &frame[..12]);
        assert_eq!(&p.data()[12..16], &[0x81, 0, 0, 5]);
        assert_eq!(&p.data()[16..], &frame[12..]);
        assert!(p.remove_at(12, 4));
        assert_eq!(p.data(), &frame[..]);
        assert!(!p.remove_at(18, 4));
    }

    #[test]
    fn headroom_is_bounded() {
        let mut p = Packet::from_slice(&[1]);
        assert!(p.push_front(HEADROOM).is_some());
        assert!(p.push_front(1).is_none());
        assert!(p.pull_front(HEADROOM));
        assert_eq!(p.data(), &[1]);
        assert!(!p.pull_front(2));
    }

    #[test]
    fn large_buffers_go_back_to_their_own_list() {
        let mut pool = Pool::new(0, 2);
        let big = pool.get_for(MAX_FRAME + 1);
        assert!(big.is_large() && big.room() == MAX_LARGE_FRAME);
        let small = pool.get_for(MAX_FRAME);
        assert!(!small.is_large());
        pool.put(big);
        pool.put(small);
        assert_eq!(pool.free_count(), 3);
        assert!(pool.get_large().is_large());
        assert!(!pool.get().is_large());
        assert_eq!(pool.stats().allocated, 3);
        let f = vec![5u8; 60_000];
        assert_eq!(Packet::from_slice_large(&f).data(), &f[..]);
    }

    #[test]
    fn offloads_round_trip_through_meta() {
        let mut m = Meta::default();
        assert!(!m.has_offload() && m.offload() == Offload::None);
        for o in [
            Offload::Csum {
                start: 34,
                offset: 0xffff,
            },
            Offload::Tso {
                v6: true,
                mss: 1428,
                l4: 54,
            },
            Offload::Tso {
                v6: false,
                mss: 0xffff,
                l4: 0,
            },
            Offload::None,
        ] {
            m.set_offload(o);
            assert_eq!(m.offload(), o);
            assert_eq!(m.has_offload(), o.is_some());
        }
    }

    #[test]
    fn offload_offsets_follow_vlan_push_and_pop() {
        let o = Offload::Tso {
            v6: false,
            mss: 1448,
            l4: 34,
        };
        assert_eq!(
            o.shifted(12, 4),
            Some(Offload::Tso {
                v6: false,
                mss: 1448,
                l4: 38
            })
        );
        let c = Offload::Csum {
            start: 34,
            offset: 6,
        };
        assert_eq!(
            c.shifted(12, -4),
            Some(Offload::Csum {
                start: 30,
                offset: 6
            })
        );
        assert_eq!(c.shifted(40, 4), None, "an offset inside the moved bytes");
    }

    #[test]
    fn a_deferred_tail_is_copied_in_shared_and_truncated() {
        let mem = Arc::new(GuestMemory::anonymous(&[(0x1000, 8192)]).unwrap());
        let frame: Vec<u8> = (0..1518u32).map(|i| (i * 13 + 5) as u8).collect();
        mem.write(0x1000 + 192, &frame[192..]).unwrap();
        let mut pool = Pool::new(0, 4);
        let mut p = pool.get();
        p.set_frame(&frame[..192]);
        let t = Tail {
            gpa: 0x1000 + 192,
            len: 1518 - 192,
        };
        assert!(p.set_tail(t));
        assert_eq!(p.tail(), Some(t));
        assert_eq!((p.len(), p.frame_len()), (192, 1518));
        // A plain batch takes no tails: its receiver gets whole frames.
        assert!(!Batch::new().tails_fit(&mem));
        // The batch holds the table once; no packet holds a reference.
        let mut b = Batch::taking_tails();
        assert!(b.tails_fit(&mem));
        b.hold_tails(&mem);
        b.hold_tails(&mem);
        assert_eq!(Arc::strong_count(&mem), 2);
        let other = Arc::new(GuestMemory::anonymous(&[(0x1000, 8192)]).unwrap());
        assert!(!b.tails_fit(&other), "a batch never mixes two tables");
        // A second output names the same range, still deferred.
        let mut c = pool.get_for(p.frame_len());
        p.copy_into(&mut c);
        assert_eq!((c.tail(), c.frame_len()), (Some(t), 1518));
        assert_eq!(c.data(), &frame[..192]);
        c.materialise(b.tails().map(|m| &**m));
        assert!(!c.has_tail());
        assert_eq!(c.data(), &frame[..]);
        // Without the table (a packet kept past its burst) the tail reads as zeros.
        let mut z = pool.get();
        z.set_frame(&frame[..192]);
        assert!(z.set_tail(t));
        z.materialise(None);
        assert_eq!(&z.data()[..192], &frame[..192]);
        assert!(z.data()[192..].iter().all(|&x| x == 0) && z.len() == 1518);
        // Truncation shortens the tail, or drops it when the cut is in the head.
        let mut q = pool.get();
        p.copy_into(&mut q);
        q.truncate(1000);
        assert_eq!((q.len(), q.frame_len()), (192, 1000));
        q.truncate(100);
        assert_eq!((q.len(), q.frame_len(), q.has_tail()), (100, 100, false));
        // Given back, a buffer comes out again without a tail; the batch lets its table go.
        pool.put(q);
        pool.put(z);
        pool.put(c);
        b.push(p).unwrap();
        pool.put_batch(&mut b);
        assert!(b.tails().is_none());
        assert_eq!(Arc::strong_count(&mem), 1);
        for _ in 0..4 {
            assert!(!pool.get().has_tail());
        }
        // Tails that cannot be packed or do not fit are refused.
        let mut r = pool.get();
        r.set_frame(&[0u8; 100]);
        for bad in [
            Tail {
                gpa: 0x1000,
                len: MAX_FRAME as u32,
            },
            Tail {
                gpa: 0x1000,
                len: 0,
            },
            Tail {
                gpa: TAIL_GPA_LIMIT,
                len: 100,
            },
        ] {
            assert!(!r.set_tail(bad), "{bad:?}");
            assert!(!r.has_tail());
        }
        assert!(r.set_tail(Tail {
            gpa: TAIL_GPA_LIMIT - 1,
            len: (MAX_FRAME - 100) as u32
        }));
        assert_eq!(r.tail().map(|t| t.gpa), Some(TAIL_GPA_LIMIT - 1));
        assert_eq!(r.frame_len(), MAX_FRAME);
    }

    #[test]
    fn oversize_frames_are_truncated_not_panicking() {
        let big = vec![9u8; MAX_FRAME + 100];
        let p = Packet::from_slice(&big);
        assert_eq!(p.len(), MAX_FRAME);
    }
}
