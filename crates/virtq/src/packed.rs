//! Device side of one packed virtqueue (virtio 1.1 §2.8) for virtio-net: batched dequeue
//! (guest tx → packets) and enqueue (packets → guest rx, mergeable rx buffers), the same API
//! and the same guarantees as the split [`crate::Queue`].
//!
//! Threads: built by a port's control thread when the ring is complete, then driven by one PMD
//! at a time (the caller serializes bursts). Hot path: no allocation (scratch vectors sized at
//! activation), no locks.
//!
//! Layout: one table of `size` 16-byte descriptors (`addr u64, len u32, id u16, flags u16`),
//! any size 1..=32768 (not only powers of two), plus a 4-byte driver event suppression area
//! (driver writes) and a 4-byte device area (we write). The driver makes a chain available by
//! writing its descriptors at consecutive positions from its avail index and flipping the
//! head's AVAIL/USED bits last; the device writes one used descriptor per chain, in order, at
//! its own used index, and advances it by the chain's descriptor count. Both sides keep a wrap
//! counter that toggles each time their index passes the end of the ring.
//!
//! Hostile input, as for split (see the parent module's *Descriptor walks*): each descriptor
//! is read once (the head's flags with acquire, then its other fields), every buffer is
//! range-checked through `guestmem`, a chain holds at most [`MAX_CHAIN`] descriptors and at
//! most `size`, an indirect table is one level deep with `len % 16 == 0`, and every descriptor
//! counts against [`BURST_BUDGET`]; a chain the budget cuts stays whole in the ring. A chain
//! whose buffers are bad (out of range, wrong direction, nested indirect, too big) is walked to
//! its end and returned with length 0 (packet dropped and counted). A chain whose end cannot
//! be found within the caps cannot be returned (the packed ring has no other way to skip it):
//! the queue is marked broken ([`Broken::LongChain`]).
//!
//! Used descriptors: ids and lengths are written as chains complete; their flags, which hand
//! them to the driver, are written once per burst after one release fence, the first used
//! descriptor of the burst last. At most one notification per burst, decided from the
//! driver's event suppression area (enable / disable / a descriptor position with EVENT_IDX).
use crate::queue::{Broken, Burst, ChainError, QueueError, BURST_BUDGET, MAX_CHAIN, MAX_SEGS};
use crate::ring::{NetFeatures, RingAddrs, DESC_SIZE, MAX_INDIRECT, MAX_QUEUE_SIZE};
use guestmem::{GuestMemory, GuestRange};
use packet::{Batch, Pool, BATCH_SIZE};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

mod rx;

/// Descriptor continues at the next ring position (or next table entry).
pub const DESC_F_NEXT: u16 = 1;
/// Buffer is device-writable.
pub const DESC_F_WRITE: u16 = 2;
/// Buffer holds a table of indirect descriptors.
pub const DESC_F_INDIRECT: u16 = 4;
/// Avail bit (driver's wrap counter when it makes a descriptor available).
pub const DESC_F_AVAIL: u16 = 1 << 7;
/// Used bit (device's wrap counter when it marks a descriptor used).
pub const DESC_F_USED: u16 = 1 << 15;
/// Event suppression flags: notify on every used buffer.
pub const EVENT_F_ENABLE: u16 = 0;
/// Event suppression flags: never notify.
pub const EVENT_F_DISABLE: u16 = 1;
/// Event suppression flags: notify when the position in `off_wrap` is used (EVENT_IDX).
pub const EVENT_F_DESC: u16 = 2;
/// The wrap counter's bit in `SET/GET_VRING_BASE` values and in `off_wrap`.
pub const WRAP_BIT: u16 = 1 << 15;

/// True if `size` is a valid packed-ring size (1..=32768, any value).
pub fn valid_size(size: u32) -> bool {
    (1..=u32::from(MAX_QUEUE_SIZE)).contains(&size)
}

/// Splits a `SET/GET_VRING_BASE` value into index (bits 0..15) and wrap counter (bit 15).
#[inline]
pub fn split_base(v: u16) -> (u16, bool) {
    (v & !WRAP_BIT, v & WRAP_BIT != 0)
}

/// Joins an index and a wrap counter into a `SET/GET_VRING_BASE` value.
#[inline]
pub fn join_base(idx: u16, wrap: bool) -> u16 {
    idx | if wrap { WRAP_BIT } else { 0 }
}

/// Whether a descriptor with `flags` is available to a device whose avail wrap counter is
/// `wrap`: AVAIL equals the counter and USED differs from it.
#[inline]
pub fn is_avail(flags: u16, wrap: bool) -> bool {
    (flags & DESC_F_AVAIL != 0) == wrap && (flags & DESC_F_USED != 0) != wrap
}

/// The flags of a used descriptor written while the used wrap counter is `wrap`.
#[inline]
pub fn used_flags(wrap: bool, written: bool) -> u16 {
    let w = if wrap { DESC_F_AVAIL | DESC_F_USED } else { 0 };
    w | if written { DESC_F_WRITE } else { 0 }
}

/// A ring position on the line of `2 * size` positions that one pair of laps covers.
#[inline]
fn lin(idx: u16, wrap: bool, size: u16) -> u32 {
    let s = u32::from(size);
    (u32::from(idx) + if wrap { 0 } else { s }) % (2 * s)
}

/// EVENT_IDX for packed rings: notify if the event position `(ev, ev_wrap)` lies among the
/// positions used from `old` up to (not including) `new`. All positions are taken modulo one
/// pair of laps; a burst never uses more than `size` positions.
#[inline]
pub fn need_event_packed(ev: (u16, bool), new: (u16, bool), old: (u16, bool), size: u16) -> bool {
    let m = 2 * u32::from(size);
    let o = lin(old.0, old.1, size);
    let d = |p: (u16, bool)| (lin(p.0, p.1, size) + m - o) % m;
    d(ev) < d(new)
}

/// Why a chain failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bad {
    /// Its buffers are malformed; it was walked to its end and can be returned.
    Malformed,
    /// Its end was not found within the caps: cannot be returned.
    Endless,
    /// The burst's budget ran out before its end (not consumed).
    Budget,
}

/// What a walk found of one chain.
#[derive(Clone, Copy, Debug, Default)]
struct Chain {
    /// Buffer id (from the chain's last ring descriptor).
    id: u16,
    /// Ring positions the chain takes.
    ndesc: u16,
    /// Descriptors read (ring and indirect table), for the budget.
    walked: u32,
    /// Total bytes of its buffers.
    cap: u64,
    /// A buffer was bad (content error; the chain's end was still found).
    bad: Option<Bad>,
}

/// One device-side packed virtqueue.
pub struct PackedQueue {
    pub(crate) mem: Arc<GuestMemory>,
    desc: GuestRange,
    drv: GuestRange,
    size: u16,
    last_avail: u16,
    avail_wrap: bool,
    used_idx: u16,
    used_wrap: bool,
    pub(crate) feat: NetFeatures,
    broken: Option<Broken>,
    /// Scratch: segments `(gpa, len)` of the chain(s) being walked.
    segs: Vec<(u64, u32)>,
    /// Scratch (enqueue): `(id, ring positions, index into segs after it)` per buffer.
    heads: Vec<(u16, u16, usize)>,
    /// Ring offsets and flags of the used descriptors written this burst, flags not yet set.
    shadow: Vec<(usize, u16)>,
    /// Descriptors walked in the current burst.
    spent: u32,
    /// One copy for frames of at least this many bytes on dequeue (0: off; see
    /// [`crate::copy`] and [`crate::Queue::set_one_copy`]).
    one_copy: usize,
    /// `(id, ring positions)` of the last dequeue burst's chains, in ring order, not yet
    /// returned because a packet of that burst still reads its tail from the guest's buffer
    /// (as [`crate::Queue`]'s: returned by the next dequeue or [`PackedQueue::return_held`]).
    held: [(u16, u16); BATCH_SIZE],
    /// Valid entries in `held`.
    held_n: u16,
}

impl std::fmt::Debug for PackedQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedQueue")
            .field("size", &self.size)
            .field("last_avail", &self.last_avail)
            .field("avail_wrap", &self.avail_wrap)
            .field("used_idx", &self.used_idx)
            .field("used_wrap", &self.used_wrap)
            .field("broken", &self.broken)
            .finish()
    }
}

impl PackedQueue {
    /// Activates a packed ring: `addrs.desc` is the descriptor table, `addrs.avail` the driver
    /// event suppression area, `addrs.used` the device area. `avail` and `used` are where to
    /// resume, as `SET_VRING_BASE` gives them (index in bits 0..15, wrap counter in bit 15).
    pub fn new(
        mem: Arc<GuestMemory>,
        addrs: RingAddrs,
        feat: NetFeatures,
        avail: u16,
        used: u16,
    ) -> Result<PackedQueue, QueueError> {
        let size = addrs.size;
        if !valid_size(u32::from(size)) {
            return Err(QueueError::BadSize(u32::from(size)));
        }
        let desc = mem
            .range(addrs.desc, DESC_SIZE * u64::from(size), 16)
            .map_err(|e| QueueError::BadRing("descriptor", e))?;
        let drv = mem
            .range(addrs.avail, 4, 4)
            .map_err(|e| QueueError::BadRing("driver event", e))?;
        let dev = mem
            .range(addrs.used, 4, 4)
            .map_err(|e| QueueError::BadRing("device event", e))?;
        // We poll: ask the driver never to kick us.
        dev.write_u16(2, EVENT_F_DISABLE);
        let (la, aw) = split_base(avail);
        let (ui, uw) = split_base(used);
        Ok(PackedQueue {
            mem,
            desc,
            drv,
            size,
            last_avail: la % size,
            avail_wrap: aw,
            used_idx: ui % size,
            used_wrap: uw,
            feat,
            broken: None,
            segs: Vec::with_capacity(MAX_CHAIN as usize + MAX_SEGS),
            heads: Vec::with_capacity(MAX_SEGS),
            shadow: Vec::with_capacity(BURST_BUDGET as usize + 1),
            spent: 0,
            one_copy: 0,
            held: [(0, 0); BATCH_SIZE],
            held_n: 0,
        })
    }

    /// Turns one copy for large frames on or off for later dequeues (as
    /// [`crate::Queue::set_one_copy`]).
    pub fn set_one_copy(&mut self, min: Option<usize>) {
        self.one_copy = crate::copy::threshold(min);
    }

    /// Chains held for deferred tails.
    pub fn held(&self) -> usize {
        usize::from(self.held_n)
    }

    /// Returns the chains the last dequeue burst held (used length 0, in ring order) and
    /// hands them to the driver; whether it wants an interrupt.
    pub fn return_held(&mut self) -> bool {
        if self.held_n == 0 {
            return false;
        }
        let old = (self.used_idx, self.used_wrap);
        self.push_held();
        let mut b = Burst::default();
        self.flush(old, &mut b);
        b.notify
    }

    #[inline]
    fn push_held(&mut self) {
        for i in 0..usize::from(self.held_n) {
            let (id, ndesc) = self.held[i];
            self.push_used(id, 0, ndesc);
        }
        self.held_n = 0;
    }

    /// Records a chain this burst consumed, to be returned at its end or held.
    #[inline]
    fn hold(&mut self, id: u16, ndesc: u16) {
        // At most `out.room()` <= BATCH_SIZE chains per burst.
        if let Some(h) = self.held.get_mut(usize::from(self.held_n)) {
            *h = (id, ndesc);
            self.held_n += 1;
        } else {
            self.push_used(id, 0, ndesc);
        }
    }

    /// Next descriptor to take, with the avail wrap counter in bit 15 (`GET_VRING_BASE`).
    pub fn last_avail(&self) -> u16 {
        join_base(self.last_avail, self.avail_wrap)
    }

    /// Our used index, with the used wrap counter in bit 15.
    pub fn used_idx(&self) -> u16 {
        join_base(self.used_idx, self.used_wrap)
    }

    /// Ring size.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// Why the queue is broken, if it is.
    pub fn broken(&self) -> Option<Broken> {
        self.broken
    }

    /// The memory table this queue uses.
    pub fn mem(&self) -> &Arc<GuestMemory> {
        &self.mem
    }

    /// Whether the driver has made the descriptor at our avail index available (diagnostics).
    pub fn driver_has_avail(&self) -> Option<bool> {
        let f = self
            .desc
            .load_u16_acquire(usize::from(self.last_avail) * 16 + 14)?;
        Some(is_avail(f, self.avail_wrap))
    }

    fn set_broken(&mut self, why: Broken, b: &mut Burst) {
        if self.broken.is_none() {
            self.broken = Some(why);
            b.broke = true;
        }
    }

    /// `(pos, wrap)` advanced by `n` positions.
    #[inline]
    fn advance(&self, pos: u16, wrap: bool, n: u16) -> (u16, bool) {
        let p = u32::from(pos) + u32::from(n);
        let s = u32::from(self.size);
        if p >= s {
            ((p - s) as u16, !wrap)
        } else {
            (p as u16, wrap)
        }
    }

    /// The head at ring position `pos` if the driver made it available (wrap `wrap`): its
    /// flags read with acquire, then its other fields, each once.
    #[inline]
    fn avail_head(&self, pos: u16, wrap: bool) -> Option<(u64, u32, u16, u16)> {
        let off = usize::from(pos) * 16;
        let flags = self.desc.load_u16_acquire(off + 14)?;
        if !is_avail(flags, wrap) {
            return None;
        }
        let (w0, w1) = self.desc.read_u64_pair(off)?;
        Some((w0, w1 as u32, (w1 >> 32) as u16, flags))
    }

    /// Walks the chain whose head `(addr, len, id, flags)` sits at ring position `pos`, pushing
    /// its buffers to `segs` (`write`: device-writable ones expected). At most `left`
    /// descriptors are read.
    fn walk(
        &mut self,
        pos: u16,
        head: (u64, u32, u16, u16),
        write: bool,
        left: u32,
    ) -> Result<Chain, Bad> {
        let mut c = Chain::default();
        let r = self.walk_into(pos, head, write, left, &mut c);
        self.spent += c.walked;
        r.map(|_| c)
    }

    fn walk_into(
        &mut self,
        pos: u16,
        head: (u64, u32, u16, u16),
        write: bool,
        left: u32,
        c: &mut Chain,
    ) -> Result<(), Bad> {
        let (mut addr, mut len, mut id, mut flags) = head;
        let mut p = pos;
        loop {
            if c.walked >= MAX_CHAIN || c.ndesc >= self.size {
                return Err(Bad::Endless);
            }
            if c.walked >= left {
                return Err(Bad::Budget);
            }
            c.walked += 1;
            c.ndesc += 1;
            if flags & DESC_F_INDIRECT != 0 {
                if flags & DESC_F_NEXT != 0 || c.ndesc > 1 {
                    // INDIRECT with NEXT, or inside a chain: the chain's end is still findable.
                    c.bad = Some(Bad::Malformed);
                } else {
                    self.walk_indirect(addr, len, write, left, c)?;
                }
            } else {
                self.seg(addr, len, flags, write, c);
            }
            if flags & DESC_F_NEXT == 0 {
                c.id = id;
                return Ok(());
            }
            p = if u32::from(p) + 1 >= u32::from(self.size) {
                0
            } else {
                p + 1
            };
            let (w0, w1) = self
                .desc
                .read_u64_pair(usize::from(p) * 16)
                .ok_or(Bad::Endless)?;
            addr = w0;
            len = w1 as u32;
            id = (w1 >> 32) as u16;
            flags = (w1 >> 48) as u16;
        }
    }

    /// Adds one buffer to the chain being walked, or marks it bad.
    #[inline]
    fn seg(&mut self, addr: u64, len: u32, flags: u16, write: bool, c: &mut Chain) {
        if (flags & DESC_F_WRITE != 0) != write || !self.mem.contains(addr, u64::from(len)) {
            c.bad.get_or_insert(Bad::Malformed);
            return;
        }
        if len == 0 {
            return;
        }
        if self.segs.len() >= self.segs.capacity() {
            c.bad.get_or_insert(Bad::Malformed);
            return;
        }
        self.segs.push((addr, len));
        c.cap += u64::from(len);
    }

    /// Walks an indirect table (one level, entries in order, NEXT ignored).
    fn walk_indirect(
        &mut self,
        gpa: u64,
        len: u32,
        write: bool,
        left: u32,
        c: &mut Chain,
    ) -> Result<(), Bad> {
        let n = len / DESC_SIZE as u32;
        let ok = self.feat.indirect
            && len.is_multiple_of(DESC_SIZE as u32)
            && n > 0
            && n <= MAX_INDIRECT
            && self.mem.contains(gpa, u64::from(len));
        if !ok {
            c.bad.get_or_insert(Bad::Malformed);
            return Ok(());
        }
        for i in 0..u64::from(n) {
            if c.walked >= MAX_CHAIN {
                // The table is bounded and the chain's end is known: malformed, returnable.
                c.bad.get_or_insert(Bad::Malformed);
                return Ok(());
            }
            if c.walked >= left {
                return Err(Bad::Budget);
            }
            c.walked += 1;
            let mut b = [0u8; 16];
            if self.mem.read(gpa + i * DESC_SIZE, &mut b).is_err() {
                c.bad.get_or_insert(Bad::Malformed);
                return Ok(());
            }
            let addr = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
            let l = u32::from_le_bytes(b[8..12].try_into().unwrap_or_default());
            let f = u16::from_le_bytes([b[14], b[15]]);
            if f & DESC_F_INDIRECT != 0 {
                c.bad.get_or_insert(Bad::Malformed);
                continue;
            }
            self.seg(addr, l, f, write, c);
        }
        Ok(())
    }

    /// Writes the id and length of a used descriptor at our used index and advances it by
    /// `ndesc`; its flags are written at the end of the burst.
    #[inline]
    fn push_used(&mut self, id: u16, len: u32, ndesc: u16) {
        let off = usize::from(self.used_idx) * 16;
        self.desc.write_u16(off + 8, len as u16);
        self.desc.write_u16(off + 10, (len >> 16) as u16);
        self.desc.write_u16(off + 12, id);
        self.shadow
            .push((off + 14, used_flags(self.used_wrap, len > 0)));
        (self.used_idx, self.used_wrap) = self.advance(self.used_idx, self.used_wrap, ndesc);
    }

    /// Hands this burst's used descriptors to the driver (one release fence, the first one's
    /// flags last) and decides whether the driver wants an interrupt.
    fn flush(&mut self, old: (u16, bool), b: &mut Burst) {
        if self.shadow.is_empty() {
            return;
        }
        fence(Ordering::Release);
        for &(off, f) in self.shadow.iter().skip(1) {
            self.desc.store_u16_release(off, f);
        }
        let (off, f) = self.shadow[0];
        self.desc.store_u16_release(off, f);
        self.shadow.clear();
        // Order the flag stores before reading the driver's suppression fields.
        fence(Ordering::SeqCst);
        let flags = self.drv.read_u16(2).unwrap_or(EVENT_F_ENABLE);
        b.notify = match flags {
            EVENT_F_DISABLE => false,
            EVENT_F_DESC if self.feat.event_idx => {
                let ow = self.drv.read_u16(0).unwrap_or(0);
                let ev = split_base(ow);
                need_event_packed(ev, (self.used_idx, self.used_wrap), old, self.size)
            }
            _ => true,
        };
    }

    /// Guest tx → packets: dequeues up to `out.room()` chains into buffers from `pool`, within
    /// the descriptor budget (a chain the budget cuts stays whole for the next burst).
    ///
    /// One copy: as [`crate::Queue::dequeue`], a burst with a deferred tail holds its chains
    /// until the next call, and `out` holds this queue's memory table.
    pub fn dequeue(&mut self, pool: &mut Pool, out: &mut Batch) -> Burst {
        let mut b = Burst::default();
        let old = (self.used_idx, self.used_wrap);
        if self.held_n > 0 {
            self.push_held();
        }
        if self.broken.is_some() {
            self.flush(old, &mut b);
            return b;
        }
        self.spent = 0;
        let mut deferred = false;
        let oc = if out.tails_fit(&self.mem) {
            self.one_copy
        } else {
            0
        };
        for _ in 0..out.room() {
            let left = BURST_BUDGET - self.spent;
            let Some(head) = self.avail_head(self.last_avail, self.avail_wrap) else {
                break;
            };
            if left == 0 {
                b.budget_cut = true;
                break;
            }
            let hdr = self.feat.hdr_len as u32;
            if head.3 & (DESC_F_NEXT | DESC_F_INDIRECT | DESC_F_WRITE) == 0 && head.1 >= hdr {
                // Fast path: header and frame in one descriptor (one descriptor read).
                self.spent += 1;
                match crate::copy::from_one(&self.mem, head.0, head.1, &self.feat, pool, oc) {
                    Ok(p) => {
                        b.packets += 1;
                        b.bytes += p.frame_len() as u64;
                        if p.has_tail() {
                            b.one_copy += 1;
                            deferred = true;
                        }
                        if let Err(p) = out.push(p) {
                            pool.put(p);
                        }
                    }
                    Err(e) => e.count(&mut b),
                }
                self.hold(head.2, 1);
                (self.last_avail, self.avail_wrap) =
                    self.advance(self.last_avail, self.avail_wrap, 1);
                continue;
            }
            self.segs.clear();
            let c = match self.walk(self.last_avail, head, false, left) {
                Ok(c) => c,
                Err(Bad::Budget) => {
                    b.budget_cut = true;
                    break;
                }
                Err(_) => {
                    b.malformed += 1;
                    self.set_broken(Broken::LongChain, &mut b);
                    break;
                }
            };
            let r = match c.bad {
                Some(_) => Err(ChainError::Malformed),
                None => crate::copy::from_segs(&self.mem, &self.segs, &self.feat, pool, oc),
            };
            match r {
                Ok(p) => {
                    b.packets += 1;
                    b.bytes += p.frame_len() as u64;
                    if p.has_tail() {
                        b.one_copy += 1;
                        deferred = true;
                    }
                    // Cannot fail: at most `out.room()` chains are taken.
                    if let Err(p) = out.push(p) {
                        pool.put(p);
                    }
                }
                Err(e) => e.count(&mut b),
            }
            self.hold(c.id, c.ndesc);
            (self.last_avail, self.avail_wrap) =
                self.advance(self.last_avail, self.avail_wrap, c.ndesc);
        }
        b.descs = self.spent;
        if deferred {
            out.hold_tails(&self.mem);
        } else {
            self.push_held();
        }
        self.flush(old, &mut b);
        b
    }
}
