//! [`VirtQueue`]: a running virtqueue of either layout, split or packed, behind one API (what
//! the vhost device's slots hold).
//!
//! Threads: as for the queues it wraps (one PMD at a time).
use crate::packed::PackedQueue;
use crate::queue::{Broken, Burst, Queue};
use guestmem::GuestMemory;
use packet::{Batch, Packet, Pool};
use std::sync::Arc;

/// A split or packed device-side virtqueue.
// Unboxed on purpose: one lives in each ring's slot, and a box would add a pointer chase to
// every burst; the size difference (the split queue's read-ahead array) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum VirtQueue {
    /// Split ring (virtio 1.1 §2.6).
    Split(Queue),
    /// Packed ring (virtio 1.1 §2.8).
    Packed(PackedQueue),
}

impl From<Queue> for VirtQueue {
    fn from(q: Queue) -> Self {
        VirtQueue::Split(q)
    }
}

impl From<PackedQueue> for VirtQueue {
    fn from(q: PackedQueue) -> Self {
        VirtQueue::Packed(q)
    }
}

impl VirtQueue {
    /// Guest tx → packets (see [`Queue::dequeue`], [`PackedQueue::dequeue`]).
    #[inline]
    pub fn dequeue(&mut self, pool: &mut Pool, out: &mut Batch) -> Burst {
        match self {
            VirtQueue::Split(q) => q.dequeue(pool, out),
            VirtQueue::Packed(q) => q.dequeue(pool, out),
        }
    }

    /// Packets → guest rx (see [`Queue::enqueue`], [`PackedQueue::enqueue`]).
    #[inline]
    pub fn enqueue(&mut self, pkts: &[Packet]) -> Burst {
        self.enqueue_from(pkts, None)
    }

    /// Packets with deferred tails in `tails` → guest rx (see [`Queue::enqueue_from`]).
    #[inline]
    pub fn enqueue_from(&mut self, pkts: &[Packet], tails: Option<&GuestMemory>) -> Burst {
        match self {
            VirtQueue::Split(q) => q.enqueue_from(pkts, tails),
            VirtQueue::Packed(q) => q.enqueue_from(pkts, tails),
        }
    }

    /// Turns one copy for large frames on or off for later dequeues (see
    /// [`Queue::set_one_copy`]).
    pub fn set_one_copy(&mut self, min: Option<usize>) {
        match self {
            VirtQueue::Split(q) => q.set_one_copy(min),
            VirtQueue::Packed(q) => q.set_one_copy(min),
        }
    }

    /// Returns the chains held for deferred tails (see [`Queue::return_held`]); whether the
    /// driver wants an interrupt.
    pub fn return_held(&mut self) -> bool {
        match self {
            VirtQueue::Split(q) => q.return_held(),
            VirtQueue::Packed(q) => q.return_held(),
        }
    }

    /// Chains held for deferred tails.
    pub fn held(&self) -> usize {
        match self {
            VirtQueue::Split(q) => q.held(),
            VirtQueue::Packed(q) => q.held(),
        }
    }

    /// Whether this is a packed ring.
    pub fn is_packed(&self) -> bool {
        matches!(self, VirtQueue::Packed(_))
    }

    /// Next avail position to take: the split avail index, or the packed index with the avail
    /// wrap counter in bit 15 (what `GET_VRING_BASE` reports).
    pub fn last_avail(&self) -> u16 {
        match self {
            VirtQueue::Split(q) => q.last_avail(),
            VirtQueue::Packed(q) => q.last_avail(),
        }
    }

    /// Our used index (packed: with the used wrap counter in bit 15).
    pub fn used_idx(&self) -> u16 {
        match self {
            VirtQueue::Split(q) => q.used_idx(),
            VirtQueue::Packed(q) => q.used_idx(),
        }
    }

    /// Split: the avail index the driver published. Packed: the ring has no such index; `None`.
    pub fn driver_avail_idx(&self) -> Option<u16> {
        match self {
            VirtQueue::Split(q) => q.driver_avail_idx(),
            VirtQueue::Packed(_) => None,
        }
    }

    /// Split only (see [`Queue::resync_to_used_ring`]); a packed ring has no used index in
    /// memory to resync to, and returns false.
    pub fn resync_to_used_ring(&mut self) -> bool {
        match self {
            VirtQueue::Split(q) => q.resync_to_used_ring(),
            VirtQueue::Packed(_) => false,
        }
    }

    /// Ring size.
    pub fn size(&self) -> u16 {
        match self {
            VirtQueue::Split(q) => q.size(),
            VirtQueue::Packed(q) => q.size(),
        }
    }

    /// Why the queue is broken, if it is.
    pub fn broken(&self) -> Option<Broken> {
        match self {
            VirtQueue::Split(q) => q.broken(),
            VirtQueue::Packed(q) => q.broken(),
        }
    }

    /// The memory table this queue uses.
    pub fn mem(&self) -> &Arc<GuestMemory> {
        match self {
            VirtQueue::Split(q) => q.mem(),
            VirtQueue::Packed(q) => q.mem(),
        }
    }
}
