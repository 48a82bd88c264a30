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
use crate::ring::*;
use guestmem::{GuestMemory, GuestRange, MemError};
use packet::{Batch, Packet, Pool, BATCH_SIZE, MAX_FRAME};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// Most buffer segments one received packet may be scattered over (mergeable or chained).
pub const MAX_SEGS: usize = 256;

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
    /// Packets dropped because the queue is (or just became) broken.
    pub broken_drops: u32,
    /// The queue broke during this burst.
    pub broke: bool,
    /// The driver wants an interrupt (write the call eventfd once).
    pub notify: bool,
}

#[derive(Clone, Copy, Debug)]
enum ChainError {
    Malformed,
    TooBig,
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
        })
    }

    /// Moves both indices to the used index the ring holds in guest memory, if it differs from
    /// where this queue stands; returns whether it moved. Valid only at rest: this device
    /// returns every buffer it takes within the burst that took it, so at rest the used index
    /// in memory is exactly where both indices stand. A hostile value only moves the starting
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
    /// for each data descriptor (indirect tables resolved). Caps the walk at the table size so
    /// loops end.
    #[inline]
    fn walk_from(
        &self,
        first: Desc,
        mut seg: impl FnMut(&Desc) -> Result<(), ChainError>,
    ) -> Result<(), ChainError> {
        let mut table = Table::Direct;
        let mut next = None;
        let mut limit = u32::from(self.size);
        let mut count = 0u32;
        loop {
            let d = match next {
                None => first,
                Some(idx) => self.read_desc(table, idx)?,
            };
            count += 1;
            if count > limit {
                return Err(ChainError::Malformed);
            }
            if d.has(VIRTQ_DESC_F_INDIRECT) {
                table = self.enter_indirect(&d, table)?;
                limit = match table {
                    Table::Indirect { n, .. } => n,
                    Table::Direct => limit,
                };
                next = Some(0);
                count = 0;
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

    /// Copies the device-readable chain headed by `first` into `buf`, stripping the virtio-net
    /// header. Returns the frame length.
    #[inline]
    fn read_chain(&self, first: Desc, buf: &mut [u8]) -> Result<usize, ChainError> {
        let hdr = self.feat.hdr_len as u32;
        if first.flags == 0 && first.len >= hdr {
            // Fast path: header and frame in one descriptor.
            let len = (first.len - hdr) as usize;
            let dst = buf.get_mut(..len).ok_or(ChainError::TooBig)?;
            let addr = first
                .addr
                .checked_add(u64::from(hdr))
                .ok_or(ChainError::Malformed)?;
            self.mem.read(addr, dst)?;
            return Ok(len);
        }
        self.read_chain_from(first, buf)
    }

    fn read_chain_from(&self, first: Desc, buf: &mut [u8]) -> Result<usize, ChainError> {
        let mut skip = self.feat.hdr_len as u64;
        let mut written = 0usize;
        self.walk_from(first, |d| {
            if d.has(VIRTQ_DESC_F_WRITE) {
                return Err(ChainError::Malformed);
            }
            let s = skip.min(u64::from(d.len));
            skip -= s;
            let len = (u64::from(d.len) - s) as usize;
            if len == 0 {
                return Ok(());
            }
            let addr = d.addr.checked_add(s).ok_or(ChainError::Malformed)?;
            let dst = buf
                .get_mut(written..written + len)
                .ok_or(ChainError::TooBig)?;
            self.mem.read(addr, dst)?;
            written += len;
            Ok(())
        })?;
        if skip > 0 {
            return Err(ChainError::Malformed);
        }
        Ok(written)
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

    /// Guest tx → packets: dequeues up to `out.room()` chains into buffers from `pool`.
    pub fn dequeue(&mut self, pool: &mut Pool, out: &mut Batch) -> Burst {
        let mut b = Burst::default();
        if self.broken.is_some() {
            return b;
        }
        let n = self.avail_now(&mut b).min(out.room() as u16);
        let old_used = self.used_idx;
        self.prefetch_heads(n, false, &mut b);
        for i in 0..self.pre_n {
            let (head, first) = self.pre[usize::from(i)];
            let mut p = pool.get();
            let r = first.ok_or(ChainError::Malformed);
            match r.and_then(|d| self.read_chain(d, p.reset_for_fill(MAX_FRAME))) {
                Ok(len) => {
                    p.truncate(len);
                    b.packets += 1;
                    b.bytes += len as u64;
                    // Cannot fail: at most `out.room()` chains are taken.
                    if let Err(p) = out.push(p) {
                        pool.put(p);
                    }
                }
                Err(e) => {
                    pool.put(p);
                    match e {
                        ChainError::Malformed => b.malformed += 1,
                        ChainError::TooBig => b.too_big += 1,
                    }
                }
            }
            self.push_used(head, 0);
        }
        self.last_avail = self
            .last_avail
            .wrapping_add(self.used_idx.wrapping_sub(old_used));
        self.flush(old_used, &mut b);
        b
    }

    /// Collects the writable segments of the chain headed by `first` into `segs`; returns its
    /// capacity.
    fn gather(&mut self, first: Desc) -> Result<u64, ChainError> {
        let mut segs = std::mem::take(&mut self.segs);
        let mut cap = 0u64;
        let r = self.walk_from(first, |d| {
            if !d.has(VIRTQ_DESC_F_WRITE) || segs.len() >= MAX_SEGS {
                return Err(ChainError::Malformed);
            }
            if d.len > 0 {
                segs.push((d.addr, d.len));
                cap += u64::from(d.len);
            }
            Ok(())
        });
        self.segs = segs;
        r.map(|_| cap)
    }

    /// Writes `hdr ++ data` over the gathered segments and the used entries per buffer.
    fn scatter(&mut self, hdr: &[u8], data: &[u8]) -> Result<(), ChainError> {
        let total = hdr.len() + data.len();
        let mut done = 0usize;
        let mut seg_i = 0usize;
        for &(_, seg_end) in &self.heads {
            while seg_i < seg_end && done < total {
                let (addr, len) = self.segs[seg_i];
                let n = (len as usize).min(total - done);
                let mut pos = 0usize;
                while pos < n {
                    let at = done + pos;
                    let (src, off) = if at < hdr.len() {
                        (hdr, at)
                    } else {
                        (data, at - hdr.len())
                    };
                    let k = (src.len() - off).min(n - pos);
                    self.mem.write(addr + pos as u64, &src[off..off + k])?;
                    pos += k;
                }
                done += n;
                seg_i += 1;
            }
        }
        Ok(())
    }

    /// Gathers enough guest buffers for `need` bytes: the chain `(head, first)` already taken,
    /// then more from avail position `*taken` (mergeable rx).
    /// Err(None) = no buffers left (queue full); Err(Some(e)) = this packet fails with `e`.
    fn gather_for(
        &mut self,
        need: u64,
        head: u16,
        first: Desc,
        avail: u16,
        taken: &mut u16,
        b: &mut Burst,
    ) -> Result<(), Option<ChainError>> {
        self.segs.clear();
        self.heads.clear();
        let r = self.gather(first);
        self.heads.push((head, self.segs.len()));
        let mut cap = r.map_err(Some)?;
        while cap < need {
            // `heads` holds the first chain already: more buffers need mergeable rx.
            if !self.feat.mrg_rxbuf {
                return Err(Some(ChainError::TooBig));
            }
            if self.heads.len() >= MAX_SEGS {
                return Err(Some(ChainError::TooBig));
            }
            if *taken == avail {
                return Err(None);
            }
            let Some((head, first)) = self.head_desc(*taken, b) else {
                return Err(None);
            };
            *taken += 1;
            let Some(first) = first else {
                self.heads.push((head, self.segs.len()));
                return Err(Some(ChainError::Malformed));
            };
            let r = self.gather(first);
            self.heads.push((head, self.segs.len()));
            cap += r.map_err(Some)?;
        }
        Ok(())
    }

    /// Returns every head gathered for the current packet with used length 0.
    fn return_heads_empty(&mut self) {
        for i in 0..self.heads.len() {
            let head = self.heads[i].0;
            self.push_used(head, 0);
        }
    }

    /// Pushes the used entries of a packet written over the gathered heads.
    fn return_heads_written(&mut self, total: usize) {
        let mut left = total as u64;
        let mut seg_i = 0usize;
        for i in 0..self.heads.len() {
            let (head, seg_end) = self.heads[i];
            let mut cap = 0u64;
            while seg_i < seg_end {
                cap += u64::from(self.segs[seg_i].1);
                seg_i += 1;
            }
            let n = cap.min(left);
            left -= n;
            self.push_used(head, n as u32);
        }
    }

    /// Writes a packet over the gathered buffers (slow path: chains, mergeable).
    fn enqueue_gathered(&mut self, hdr: &mut [u8; 12], data: &[u8], need: u64, b: &mut Burst) {
        let nbuf = self.heads.len() as u16;
        hdr[10..12].copy_from_slice(&nbuf.to_le_bytes());
        let r = self.scatter(&hdr[..self.feat.hdr_len], data);
        hdr[10..12].copy_from_slice(&1u16.to_le_bytes());
        match r {
            Ok(()) => {
                self.return_heads_written(need as usize);
                b.packets += 1;
                b.bytes += data.len() as u64;
            }
            Err(_) => {
                self.return_heads_empty();
                b.malformed += 1;
            }
        }
    }

    /// Enqueues one frame, consuming guest buffers from avail position `*taken`. False when no
    /// buffer is left (the burst stops); every other outcome is counted in `b`.
    #[inline]
    fn enqueue_one(
        &mut self,
        data: &[u8],
        avail: u16,
        taken: &mut u16,
        hdr: &mut [u8; 12],
        b: &mut Burst,
    ) -> bool {
        let need = (self.feat.hdr_len + data.len()) as u64;
        let start = *taken;
        if *taken == avail {
            return false;
        }
        let Some((head, first)) = self.head_desc(*taken, b) else {
            return false;
        };
        *taken += 1;
        let Some(first) = first else {
            self.push_used(head, 0);
            b.malformed += 1;
            return true;
        };
        if first.flags == VIRTQ_DESC_F_WRITE && u64::from(first.len) >= need {
            // Fast path: the frame fits in one plain buffer.
            let h = &hdr[..self.feat.hdr_len];
            if self.mem.write2(first.addr, h, data).is_ok() {
                self.push_used(head, need as u32);
                b.packets += 1;
                b.bytes += data.len() as u64;
            } else {
                self.push_used(head, 0);
                b.malformed += 1;
            }
            return true;
        }
        match self.gather_for(need, head, first, avail, taken, b) {
            Ok(()) => self.enqueue_gathered(hdr, data, need, b),
            Err(Some(ChainError::Malformed)) => {
                self.return_heads_empty();
                b.malformed += 1;
            }
            Err(Some(ChainError::TooBig)) => {
                // Keep the buffers for the next frame.
                *taken = start;
                b.too_big += 1;
            }
            Err(None) => {
                *taken = start;
                return false;
            }
        }
        true
    }

    /// Packets → guest rx: enqueues each packet of `pkts` into the guest's buffers. Stops at
    /// the first packet that finds no buffer (the rest count as `full`).
    pub fn enqueue(&mut self, pkts: &[Packet]) -> Burst {
        let mut b = Burst::default();
        if self.broken.is_some() {
            b.broken_drops = pkts.len() as u32;
            return b;
        }
        let avail = self.avail_now(&mut b);
        let old_used = self.used_idx;
        let mut taken = 0u16;
        self.prefetch_heads(avail.min(pkts.len() as u16), true, &mut b);
        let mut hdr = [0u8; 12];
        hdr[10] = 1;
        for (i, p) in pkts.iter().enumerate() {
            if !self.enqueue_one(p.data(), avail, &mut taken, &mut hdr, &mut b) {
                let rest = (pkts.len() - i) as u32;
                if self.broken.is_some() {
                    b.broken_drops += rest;
                } else {
                    b.full += rest;
                }
                break;
            }
        }
        self.last_avail = self.last_avail.wrapping_add(taken);
        self.flush(old_used, &mut b);
        b
    }
}
