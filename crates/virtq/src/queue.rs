//! Device side of one split virtqueue for virtio-net: batched dequeue (guest tx → packets) and
//! enqueue (packets → guest rx, with mergeable rx buffers).
//!
//! Threads: a [`Queue`] is built by a port's control thread when the ring is complete and then
//! used by one PMD at a time (the caller serializes, e.g. with a per-queue lock held for one
//! burst). Hot path: no allocation (scratch vectors are sized at activation), no locks.
//!
//! Everything in the rings is hostile. Each shared field is read once. Errors in one chain
//! (addresses outside memory, loops, bad indirect tables, short headers) drop that packet and
//! return the chain; errors in the ring itself (avail index jumping by more than the ring size,
//! a head index out of range) mark the queue broken, and a broken queue is never processed again.
//!
//! # Descriptor walks: the work per burst is bounded
//!
//! Every descriptor a burst reads counts against [`BURST_BUDGET`] (1024): a head, each chained
//! descriptor, an indirect-table pointer and each table entry, zero-length ones included, in
//! dequeue (guest tx) and enqueue (guest rx, every head a mergeable packet gathers). One chain
//! may hold at most [`MAX_CHAIN`] (256) descriptors; a longer one is malformed (the packet is
//! dropped and the chain returned, as for any bad chain). The budget holds at least one maximal
//! chain, so the first chain of a burst always completes or is found malformed: every burst
//! makes progress. A chain the budget cuts mid-walk is not consumed: it stays in the ring, whole,
//! for the next burst (`Burst::budget_cut`). On enqueue the burst also ends on the first packet
//! whose buffers cannot be reserved (too big, or the guest's buffers ran out): no rewind and
//! retry with the next packet; the packets left count as `cut` (too big) or `full`.
//!
//! So one burst reads at most 1024 descriptors plus at most 32 avail entries and head
//! descriptors read ahead, and copies at most 32 frames of `MAX_FRAME` bytes. Measured
//! (`cargo test --release -p virtq -- --ignored --nocapture budget_cost`, AMD EPYC at
//! 2.6 GHz, 2026-11-24): a burst that spends the whole budget costs about 5.3 µs (13,800
//! cycles) on ring-long zero-length chains, 8–11 µs (21,000–28,000 cycles) on indirect tables
//! at the cap, 4.0 µs (10,400 cycles) on mergeable gathers of zero-length heads; so about
//! 11 µs at worst. The fast path (32 packets of 1–2 descriptors, mergeable rx with a few
//! buffers each: 32–224 descriptors) stays far below the budget and is never cut.
use crate::ring::*;
use guestmem::{GuestMemory, GuestRange, MemError};
use packet::vnet::VnetError;
use packet::{Batch, Packet, Pool, BATCH_SIZE};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

mod rx;
pub(crate) use rx::{tail_src, write_piece, TailSrc};

/// Most buffer segments one received packet may be scattered over (mergeable or chained).
pub const MAX_SEGS: usize = 256;

/// Most descriptors one chain may hold, every one counted (head, indirect pointer, table
/// entries, zero-length ones); a longer chain is malformed. Real drivers use a few (Linux: at
/// most `MAX_SKB_FRAGS + 2`); DPDK's vhost caps chains at 256 too.
pub const MAX_CHAIN: u32 = 256;

/// Descriptors one burst may walk (dequeue or enqueue), every one counted. 32 packets × 32
/// descriptors: ten times what the fast path uses, and at least one maximal chain.
pub const BURST_BUDGET: u32 = 1024;

const _: () = assert!(BURST_BUDGET >= MAX_CHAIN);

/// Why a queue could not be activated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueError {
    /// Size zero, not a power of two, or above 32768.
    BadSize(u32),
    /// A ring does not lie within one memory region, or is misaligned.
    BadRing(&'static str, MemError),
}

impl std::fmt::Display for QueueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueueError::BadSize(n) => write!(f, "bad ring size {n}"),
            QueueError::BadRing(which, e) => write!(f, "bad {which} ring: {e}"),
        }
    }
}

impl std::error::Error for QueueError {}

/// Why a queue stopped being processed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    /// The avail index moved more than the ring size past what we consumed.
    AvailJump,
    /// An avail ring entry named a descriptor beyond the table.
    BadHead,
    /// Packed ring: a chain ran past [`MAX_CHAIN`] or the ring size without ending, so it
    /// cannot be returned.
    LongChain,
}

/// What one burst did, for the port's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Burst {
    /// Packets moved.
    pub packets: u32,
    /// Frame bytes moved (without virtio-net header).
    pub bytes: u64,
    /// Packets dropped: malformed descriptors or headers.
    pub malformed: u32,
    /// Packets dropped: larger than our buffer (dequeue) or the guest's buffers (enqueue).
    pub too_big: u32,
    /// Packets dropped: no guest buffer available.
    pub full: u32,
    /// Packets dropped (dequeue with offloads on): their virtio-net header was refused, by
    /// reason (index: `packet::vnet::VnetError as usize`).
    pub vnet: [u32; 4],
    /// Packets dropped because the queue is (or just became) broken.
    pub broken_drops: u32,
    /// Packets not enqueued because the burst ended early: the descriptor budget ran out, or
    /// an earlier packet of the burst found no room in the guest's buffers (enqueue only).
    pub cut: u32,
    /// Descriptors walked in this burst (at most [`BURST_BUDGET`]).
    pub descs: u32,
    /// Packets moved with one copy: dequeue, those whose tail stayed in the guest's buffer;
    /// enqueue, those whose tail was copied straight from the sender's memory.
    pub one_copy: u32,
    /// The descriptor budget ended this burst before its work was done.
    pub budget_cut: bool,
    /// The queue broke during this burst.
    pub broke: bool,
    /// The driver wants an interrupt (write the call eventfd once).
    pub notify: bool,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum ChainError {
    Malformed,
    TooBig,
    /// The burst's descriptor budget ran out before the chain ended (not consumed).
    Budget,
    /// The virtio-net header was refused.
    Vnet(VnetError),
}

impl ChainError {
    /// Counts a packet dropped for this reason.
    #[inline]
    pub(crate) fn count(self, b: &mut Burst) {
        match self {
            ChainError::TooBig => b.too_big += 1,
            ChainError::Vnet(e) => b.vnet[e as usize] += 1,
            ChainError::Malformed | ChainError::Budget => b.malformed += 1,
        }
    }
}

impl From<MemError> for ChainError {
    fn from(_: MemError) -> Self {
        ChainError::Malformed
    }
}

/// Where the descriptors of a chain come from.
#[derive(Clone, Copy)]
enum Table {
    Direct,
    Indirect { gpa: u64, n: u32 },
}

/// One device-side split virtqueue.
pub struct Queue {
    mem: Arc<GuestMemory>,
    desc: GuestRange,
    avail: GuestRange,
    used: GuestRange,
    size: u16,
    mask: u16,
    last_avail: u16,
    used_idx: u16,
    feat: NetFeatures,
    broken: Option<Broken>,
    /// Scratch: writable segments `(gpa, len)` of the packet being enqueued.
    segs: Vec<(u64, u32)>,
    /// Scratch: `(head, index into segs after its chain)` per buffer of that packet.
    heads: Vec<(u16, usize)>,
    /// Heads and head descriptors of this burst's first avail positions, each read once.
    pre: [(u16, Option<Desc>); BATCH_SIZE],
    /// Valid entries in `pre`.
    pre_n: u16,
    /// Descriptors walked in the current enqueue burst (against [`BURST_BUDGET`]).
    spent: u32,
    /// One copy for frames of at least this many bytes on dequeue (see [`crate::copy`]; 0, off,
    /// until the owner turns it on with [`Queue::set_one_copy`]).
    one_copy: usize,
    /// Heads of the last dequeue burst, in avail order, not yet returned because a packet of
    /// that burst still reads its tail from the guest's buffer: returned by the next
    /// `dequeue` (after the burst's transmit) or [`Queue::return_held`].
    held: [u16; BATCH_SIZE],
    /// Valid entries in `held`.
    held_n: u16,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("size", &self.size)
            .field("last_avail", &self.last_avail)
            .field("used_idx", &self.used_idx)
            .field("broken", &self.broken)
            .finish()
    }
}

impl Queue {
    /// Activates a ring: checks the size and that each ring lies, aligned, inside one region
    /// of `mem`, and caches the ranges. `last_avail` and `used_idx` are where to resume.
    pub fn new(
        mem: Arc<GuestMemory>,
        addrs: RingAddrs,
        feat: NetFeatures,
        last_avail: u16,
        used_idx: u16,
    ) -> Result<Queue, QueueError> {
        let size = addrs.size;
        if !valid_size(u32::from(size)) {
            return Err(QueueError::BadSize(u32::from(size)));
        }
        let desc = mem
            .range(addrs.desc, desc_table_size(size), 16)
            .map_err(|e| QueueError::BadRing("descriptor", e))?;
        let avail = mem
            .range(addrs.avail, avail_ring_size(size), 2)
            .map_err(|e| QueueError::BadRing("avail", e))?;
        let used = mem
            .range(addrs.used, used_ring_size(size), 4)
            .map_err(|e| QueueError::BadRing("used", e))?;
        if !feat.event_idx {
            // We poll: ask the driver not to kick us.
            used.write_u16(0, VRING_USED_F_NO_NOTIFY);
        }
        Ok(Queue {
            mem,
            desc,
            avail,
            used,
            size,
            mask: size - 1,
            last_avail,
            used_idx,
            feat,
            broken: None,
            segs: Vec::with_capacity(MAX_SEGS),
            heads: Vec::with_capacity(MAX_SEGS),
            pre: [(0, None); BATCH_SIZE],
            pre_n: 0,
            spent: 0,
            one_copy: 0,
            held: [0; BATCH_SIZE],
            held_n: 0,
        })
    }

    /// Moves both indices to the used index the ring holds in guest memory, if it differs from
    /// where this queue stands; returns whether it moved. Valid only at rest: this device
    /// returns every buffer it takes within the burst that took it (or, one copy, by the next
    /// burst or [`Queue::return_held`] as the queue stops), so at rest the used index in memory
    /// is exactly where both indices stand. A hostile value only moves the starting
    /// point; `avail_now` still breaks the queue on an impossible avail index.
    pub fn resync_to_used_ring(&mut self) -> bool {
        match self.used.load_u16_acquire(2) {
            Some(u) if u != self.used_idx => {
                self.last_avail = u;
                self.used_idx = u;
                true
            }
            _ => false,
        }
    }

    /// Turns one copy for large frames on (frames of at least `min` bytes; `None`: the default
    /// [`crate::copy::ONE_COPY_MIN`]) or off (`Some(0)`) for later dequeues. Values below
    /// [`crate::copy::HEAD_LEN`] + 1 are raised to it (a tail is never empty).
    pub fn set_one_copy(&mut self, min: Option<usize>) {
        self.one_copy = crate::copy::threshold(min);
    }

    /// Chains held for deferred tails (see `held`).
    pub fn held(&self) -> usize {
        usize::from(self.held_n)
    }

    /// Returns the chains the last dequeue burst held (used length 0, in avail order) and
    /// publishes the used index; whether the driver wants an interrupt. Called by the next
    /// dequeue, and by the owner before the queue stops (so a stopped queue is at rest).
    pub fn return_held(&mut self) -> bool {
        if self.held_n == 0 {
            return false;
        }
        let old = self.used_idx;
        self.push_held();
        let mut b = Burst::default();
        self.flush(old, &mut b);
        b.notify
    }

    #[inline]
    fn push_held(&mut self) {
        for i in 0..usize::from(self.held_n) {
            let head = self.held[i];
            self.push_used(head, 0);
        }
        self.held_n = 0;
    }

    /// The avail index the driver has published, as guest memory holds it now (diagnostics).
    pub fn driver_avail_idx(&self) -> Option<u16> {
        self.avail.load_u16_acquire(2)
    }

    /// Next avail index to consume (what `GET_VRING_BASE` reports).
    pub fn last_avail(&self) -> u16 {
        self.last_avail
    }

    /// Our used index (published at the end of every burst).
    pub fn used_idx(&self) -> u16 {
        self.used_idx
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

    fn set_broken(&mut self, why: Broken, b: &mut Burst) {
        if self.broken.is_none() {
            self.broken = Some(why);
            b.broke = true;
        }
    }

    /// Entries available now, or breaks the queue on an impossible avail index.
    #[inline]
    fn avail_now(&mut self, b: &mut Burst) -> u16 {
        let Some(idx) = self.avail.load_u16_acquire(2) else {
            return 0;
        };
        match pending(idx, self.last_avail, self.size) {
            Some(n) => n,
            None => {
                self.set_broken(Broken::AvailJump, b);
                0
            }
        }
    }

    /// The head descriptor index at avail position `last_avail + i`, checked.
    #[inline]
    fn head_at(&mut self, i: u16, b: &mut Burst) -> Option<u16> {
        let slot = usize::from(self.last_avail.wrapping_add(i) & self.mask);
        let head = self.avail.read_u16(4 + 2 * slot)?;
        if head >= self.size {
            self.set_broken(Broken::BadHead, b);
            return None;
        }
        Some(head)
    }

    /// Reads the heads and head descriptors of avail positions `0..n` of this burst once and
    /// starts fetching their buffers, so the copies that follow find them in cache.
    #[inline]
    fn prefetch_heads(&mut self, n: u16, write: bool, b: &mut Burst) {
        self.pre_n = 0;
        for i in 0..n.min(BATCH_SIZE as u16) {
            let Some(head) = self.head_at(i, b) else {
                break;
            };
            let d = self.read_desc(Table::Direct, head).ok();
            if let Some(d) = &d {
                self.mem.prefetch(d.addr, d.len, write);
            }
            self.pre[usize::from(i)] = (head, d);
            self.pre_n = i + 1;
        }
    }

    /// Head and head descriptor at avail position `i` of this burst (`None`: the queue broke).
    #[inline]
    fn head_desc(&mut self, i: u16, b: &mut Burst) -> Option<(u16, Option<Desc>)> {
        if i < self.pre_n {
            return Some(self.pre[usize::from(i)]);
        }
        if self.broken.is_some() {
            return None;
        }
        let head = self.head_at(i, b)?;
        Some((head, self.read_desc(Table::Direct, head).ok()))
    }

    #[inline]
    fn read_desc(&self, table: Table, idx: u16) -> Result<Desc, ChainError> {
        match table {
            Table::Direct => {
                let (w0, w1) = self
                    .desc
                    .read_u64_pair(usize::from(idx) * 16)
                    .ok_or(ChainError::Malformed)?;
                Ok(Desc::from_words(w0, w1))
            }
            Table::Indirect { gpa, .. } => {
                let mut b = [0u8; 16];
                self.mem.read(gpa + u64::from(idx) * DESC_SIZE, &mut b)?;
                Ok(Desc::from_bytes(&b))
            }
        }
    }

    /// Switches to an indirect table if `d` names one; checks the rules around it.
    #[inline]
    fn enter_indirect(&self, d: &Desc, table: Table) -> Result<Table, ChainError> {
        let n = d.len / DESC_SIZE as u32;
        let ok = self.feat.indirect
            && matches!(table, Table::Direct)
            && !d.has(VIRTQ_DESC_F_NEXT)
            && d.len.is_multiple_of(DESC_SIZE as u32)
            && n > 0
            && n <= MAX_INDIRECT
            && self.mem.contains(d.addr, u64::from(d.len));
        if !ok {
            return Err(ChainError::Malformed);
        }
        Ok(Table::Indirect { gpa: d.addr, n })
    }

    /// Walks a chain whose head descriptor `first` the caller already read, calling `seg(desc)`
    /// for each data descriptor (indirect tables resolved). Every descriptor counts in
    /// `*walked`: more than [`MAX_CHAIN`], or more than the table holds, is malformed (so loops
    /// end); more than `left` (what the burst's budget has left) is [`ChainError::Budget`], and
    /// no descriptor past `left` is read.
    #[inline]
    fn walk_from(
        &self,
        first: Desc,
        left: u32,
        walked: &mut u32,
        mut seg: impl FnMut(&Desc) -> Result<(), ChainError>,
    ) -> Result<(), ChainError> {
        let mut table = Table::Direct;
        let mut next = None;
        let mut limit = u32::from(self.size);
        let mut in_table = 0u32;
        loop {
            if *walked >= MAX_CHAIN {
                return Err(ChainError::Malformed);
            }
            if *walked >= left {
                return Err(ChainError::Budget);
            }
            in_table += 1;
            if in_table > limit {
                return Err(ChainError::Malformed);
            }
            let d = match next {
                None => first,
                Some(idx) => self.read_desc(table, idx)?,
            };
            *walked += 1;
            if d.has(VIRTQ_DESC_F_INDIRECT) {
                table = self.enter_indirect(&d, table)?;
                limit = match table {
                    Table::Indirect { n, .. } => n,
                    Table::Direct => limit,
                };
                next = Some(0);
                in_table = 0;
                continue;
            }
            seg(&d)?;
            if !d.has(VIRTQ_DESC_F_NEXT) {
                return Ok(());
            }
            let n = match table {
                Table::Direct => u32::from(self.size),
                Table::Indirect { n, .. } => n,
            };
            if u32::from(d.next) >= n {
                return Err(ChainError::Malformed);
            }
            next = Some(d.next);
        }
    }

    /// Copies the device-readable chain headed by `first` into a packet from `pool`, reading
    /// the virtio-net header once if offloads are on (see [`crate::copy`]). `*walked` counts the
    /// descriptors read (`left` > 0). Frames of at least `one_copy` bytes (0: none) may keep
    /// their tail in guest memory.
    #[inline]
    fn read_chain(
        &mut self,
        first: Desc,
        pool: &mut Pool,
        left: u32,
        walked: &mut u32,
        one_copy: usize,
    ) -> Result<Packet, ChainError> {
        if first.flags == 0 && first.len >= self.feat.hdr_len as u32 {
            // Fast path: header and frame in one descriptor.
            *walked = 1;
            return crate::copy::from_one(
                &self.mem, first.addr, first.len, &self.feat, pool, one_copy,
            );
        }
        let mut segs = std::mem::take(&mut self.segs);
        segs.clear();
        let r = self.walk_from(first, left, walked, |d| {
            if d.has(VIRTQ_DESC_F_WRITE) || segs.len() >= MAX_SEGS {
                return Err(ChainError::Malformed);
            }
            if d.len > 0 {
                segs.push((d.addr, d.len));
            }
            Ok(())
        });
        let r =
            r.and_then(|()| crate::copy::from_segs(&self.mem, &segs, &self.feat, pool, one_copy));
        self.segs = segs;
        r
    }

    #[inline]
    fn push_used(&mut self, head: u16, len: u32) {
        let slot = usize::from(self.used_idx & self.mask);
        self.used.write_u32_pair(4 + 8 * slot, u32::from(head), len);
        self.used_idx = self.used_idx.wrapping_add(1);
    }

    /// Publishes the used index once and decides whether the driver wants an interrupt.
    #[inline]
    fn flush(&mut self, old_used: u16, b: &mut Burst) {
        if old_used == self.used_idx {
            return;
        }
        self.used.store_u16_release(2, self.used_idx);
        // Order the index store before reading the driver's suppression fields.
        fence(Ordering::SeqCst);
        b.notify = if self.feat.event_idx {
            let off = 4 + 2 * usize::from(self.size);
            match self.avail.read_u16(off) {
                Some(ev) => need_event(ev, self.used_idx, old_used),
                None => true,
            }
        } else {
            self.avail
                .read_u16(0)
                .is_some_and(|f| f & VRING_AVAIL_F_NO_INTERRUPT == 0)
        };
    }

    /// Guest tx → packets: dequeues up to `out.room()` chains into buffers from `pool`, within
    /// the descriptor budget (a chain the budget cuts stays whole for the next burst).
    ///
    /// One copy ([`Queue::set_one_copy`]): if a packet of the burst keeps a tail in guest
    /// memory (`Burst::one_copy`), none of the burst's chains is returned now; they are held,
    /// in order (the driver may have negotiated in-order use), and returned first thing by the
    /// next call, which the PMD makes only after it sent this burst on. `out` then holds this
    /// queue's memory table for the tails (`Batch::hold_tails`); if it already holds another
    /// one, this burst copies every frame whole.
    pub fn dequeue(&mut self, pool: &mut Pool, out: &mut Batch) -> Burst {
        let mut b = Burst::default();
        let old_used = self.used_idx;
        if self.held_n > 0 {
            self.push_held();
        }
        if self.broken.is_some() {
            self.flush(old_used, &mut b);
            return b;
        }
        let n = self.avail_now(&mut b).min(out.room() as u16);
        let mut spent = 0u32;
        let mut taken = 0u16;
        let mut deferred = false;
        let one_copy = if out.tails_fit(&self.mem) {
            self.one_copy
        } else {
            0
        };
        self.prefetch_heads(n, false, &mut b);
        for i in 0..self.pre_n {
            let left = BURST_BUDGET - spent;
            if left == 0 {
                b.budget_cut = true;
                break;
            }
            let (head, first) = self.pre[usize::from(i)];
            let mut walked = 0;
            let r = first
                .ok_or(ChainError::Malformed)
                .and_then(|d| self.read_chain(d, pool, left, &mut walked, one_copy));
            // An unreadable head descriptor still counts as one.
            spent += walked.max(1);
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
                Err(ChainError::Budget) => {
                    // Not consumed: the chain is taken whole by the next burst.
                    b.budget_cut = true;
                    break;
                }
                Err(e) => e.count(&mut b),
            }
            self.held[usize::from(taken)] = head;
            taken += 1;
        }
        b.descs = spent;
        self.last_avail = self.last_avail.wrapping_add(taken);
        self.held_n = taken;
        if deferred {
            out.hold_tails(&self.mem);
        } else {
            self.push_held();
        }
        self.flush(old_used, &mut b);
        b
    }
}
