//! Packet buffers, bursts and buffer pools.
//!
//! Owns: [`Packet`] (one fixed-size buffer with headroom for pushed headers), [`Batch`] (a burst
//! of up to [`BATCH_SIZE`] packets) and [`Pool`] (a free list of buffers tied to one NUMA node).
//!
//! Threads: a `Pool` and the `Batch`es it feeds belong to one PMD thread and are never shared,
//! so nothing here locks. Buffers are allocated only while a pool warms up (or grows after
//! packets are held elsewhere); in steady state a burst recycles the same buffers and the hot
//! path does not allocate.
//!
//! This crate sits below `ports` and `dp` (DESIGN.md puts buffers in `dp`; ports must fill them
//! too, so they live one layer down).
#![deny(unsafe_code)]

/// Largest burst a port receives or sends in one call.
pub const BATCH_SIZE: usize = 32;
/// Bytes kept free in front of the packet for pushed headers (VLAN, tunnel encapsulation).
pub const HEADROOM: usize = 128;
/// Largest frame a buffer holds (jumbo frames up to 9000 bytes of payload plus headers).
pub const MAX_FRAME: usize = 9216;
const BUF_SIZE: usize = HEADROOM + MAX_FRAME;

/// Metadata the datapath carries with a packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// Datapath port number the packet arrived on.
    pub in_port: u32,
    /// Hash of the flow key, computed once at classification (0 = not computed). An
    /// `af-xdp` port with `xdp-mark=on` fills it with the XDP program's flow hash, which the
    /// datapath replaces at classification.
    pub hash: u32,
    /// Mark the `af-xdp` XDP program gave the frame's 5-tuple (0 = none); not used for
    /// forwarding.
    pub mark: u32,
}

/// One packet: a fixed buffer, the window `[head, head + len)` holding the frame, and metadata.
pub struct Packet {
    buf: Box<[u8]>,
    head: usize,
    len: usize,
    /// Datapath metadata.
    pub meta: Meta,
}

impl Packet {
    fn alloc() -> Packet {
        Packet {
            buf: vec![0u8; BUF_SIZE].into_boxed_slice(),
            head: HEADROOM,
            len: 0,
            meta: Meta::default(),
        }
    }

    /// A packet holding a copy of `frame` (tests and slow paths; it allocates).
    pub fn from_slice(frame: &[u8]) -> Packet {
        let mut p = Packet::alloc();
        p.set_frame(frame);
        p
    }

    /// The frame bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf[self.head..self.head + self.len]
    }

    /// The frame bytes, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.head..self.head + self.len]
    }

    /// Frame length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the frame is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Room for a frame after the headroom.
    #[inline]
    pub fn capacity() -> usize {
        MAX_FRAME
    }

    /// Resets the window to `len` bytes after the default headroom and returns it for filling.
    /// `len` is clamped to [`MAX_FRAME`]; callers check their source length first.
    #[inline]
    pub fn reset_for_fill(&mut self, len: usize) -> &mut [u8] {
        let len = len.min(MAX_FRAME);
        self.head = HEADROOM;
        self.len = len;
        self.meta = Meta::default();
        &mut self.buf[HEADROOM..HEADROOM + len]
    }

    /// Replaces the frame with a copy of `frame` (truncated to [`MAX_FRAME`]).
    pub fn set_frame(&mut self, frame: &[u8]) {
        let n = frame.len().min(MAX_FRAME);
        self.reset_for_fill(n).copy_from_slice(&frame[..n]);
    }

    /// Shortens the frame to `len` bytes (no-op if already shorter).
    #[inline]
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Grows the frame at the front by `n` bytes (taken from the headroom) and returns the new
    /// front. `None` if the headroom is exhausted.
    pub fn push_front(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.head {
            return None;
        }
        self.head -= n;
        self.len += n;
        Some(&mut self.buf[self.head..self.head + n])
    }

    /// Removes `n` bytes from the front. `false` (and nothing changed) if the frame is shorter.
    pub fn pull_front(&mut self, n: usize) -> bool {
        if n > self.len {
            return false;
        }
        self.head += n;
        self.len -= n;
        true
    }

    /// Inserts `n` bytes at offset `at` within the frame, moving the first `at` bytes towards the
    /// front (used to insert a VLAN tag after the MAC addresses). Returns the inserted gap.
    pub fn insert_at(&mut self, at: usize, n: usize) -> Option<&mut [u8]> {
        if at > self.len || n > self.head {
            return None;
        }
        let old = self.head;
        self.buf.copy_within(old..old + at, old - n);
        self.head -= n;
        self.len += n;
        Some(&mut self.buf[self.head + at..self.head + at + n])
    }

    /// Removes `n` bytes at offset `at`, moving the first `at` bytes back (VLAN pop).
    pub fn remove_at(&mut self, at: usize, n: usize) -> bool {
        if at + n > self.len {
            return false;
        }
        let old = self.head;
        self.buf.copy_within(old..old + at, old + n);
        self.head += n;
        self.len -= n;
        true
    }
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packet")
            .field("len", &self.len)
            .field("meta", &self.meta)
            .finish()
    }
}

/// A burst of up to [`BATCH_SIZE`] packets. Its storage is reserved once; pushing never
/// reallocates.
pub struct Batch {
    pkts: Vec<Packet>,
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
        }
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
pub struct Pool {
    node: usize,
    free: Vec<Packet>,
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
                p.head = HEADROOM;
                p.len = 0;
                p.meta = Meta::default();
                p
            }
            None => {
                self.stats.allocated += 1;
                Packet::alloc()
            }
        }
    }

    /// Gives a buffer back.
    #[inline]
    pub fn put(&mut self, p: Packet) {
        self.free.push(p);
    }

    /// Gives back every packet in `batch`, leaving it empty.
    #[inline]
    pub fn put_batch(&mut self, batch: &mut Batch) {
        self.free.extend(batch.drain());
    }

    /// Buffers currently free.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Counters.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
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
    fn oversize_frames_are_truncated_not_panicking() {
        let big = vec![9u8; MAX_FRAME + 100];
        let p = Packet::from_slice(&big);
        assert_eq!(p.len(), MAX_FRAME);
    }
}
