//! Packet-in buffers of one bridge: a small ring of recent frames sent to controllers cut to
//! `max_len`, so a PACKET_OUT or FLOW_MOD can name them by `buffer_id`. Ids are never reused
//! within 2^32 packet-ins; an entry expires after [`BUFFER_LIFETIME`] or when the ring wraps.
//! A buffer is consumed by its first use, as OpenFlow asks.
//!
//! Owns: [`Buffers`]. Threads: the housekeeping thread adds (packet-in delivery), connection
//! reader threads take; callers hold it in one `Mutex` (a leaf lock).

use std::time::{Duration, Instant};

/// Frames kept.
pub const N_BUFFERS: usize = 256;
/// How long a buffered frame stays usable.
pub const BUFFER_LIFETIME: Duration = Duration::from_secs(5);

/// A buffered frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffered {
    /// OpenFlow ingress port of the packet-in.
    pub in_port: u32,
    /// The whole frame.
    pub frame: Vec<u8>,
}

struct Slot {
    id: u32,
    at: Instant,
    pkt: Option<Buffered>,
}

/// The ring.
pub struct Buffers {
    slots: Vec<Slot>,
    next: u32,
    /// Slot the next frame overwrites once the ring is full (the oldest).
    cursor: usize,
}

impl Default for Buffers {
    fn default() -> Self {
        Buffers {
            slots: Vec::with_capacity(N_BUFFERS),
            next: 1,
            cursor: 0,
        }
    }
}

/// Why a buffer id could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferError {
    /// Never issued, expired or overwritten.
    Unknown,
    /// Already used.
    Empty,
}

impl Buffers {
    /// Stores a frame; returns its buffer id (never `OFP_NO_BUFFER`).
    pub fn put(&mut self, in_port: u32, frame: Vec<u8>, now: Instant) -> u32 {
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        if self.next == openflow::NO_BUFFER {
            self.next = 1;
        }
        let slot = Slot {
            id,
            at: now,
            pkt: Some(Buffered { in_port, frame }),
        };
        if self.slots.len() < N_BUFFERS {
            self.slots.push(slot);
        } else {
            self.slots[self.cursor] = slot;
            self.cursor = (self.cursor + 1) % N_BUFFERS;
        }
        id
    }

    /// Takes the frame of `id`.
    pub fn take(&mut self, id: u32, now: Instant) -> Result<Buffered, BufferError> {
        let s = self
            .slots
            .iter_mut()
            .find(|s| s.id == id)
            .ok_or(BufferError::Unknown)?;
        if now.saturating_duration_since(s.at) > BUFFER_LIFETIME {
            s.pkt = None;
            return Err(BufferError::Unknown);
        }
        s.pkt.take().ok_or(BufferError::Empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_single_use_and_expire() {
        let now = Instant::now();
        let mut b = Buffers::default();
        let id = b.put(3, vec![1, 2, 3], now);
        assert_eq!(
            b.take(id, now),
            Ok(Buffered {
                in_port: 3,
                frame: vec![1, 2, 3]
            })
        );
        assert_eq!(b.take(id, now), Err(BufferError::Empty));
        assert_eq!(b.take(999, now), Err(BufferError::Unknown));
        let id2 = b.put(1, vec![9], now);
        assert_eq!(
            b.take(id2, now + BUFFER_LIFETIME + Duration::from_secs(1)),
            Err(BufferError::Unknown)
        );
    }

    #[test]
    fn ring_overwrites_oldest() {
        let now = Instant::now();
        let mut b = Buffers::default();
        let first = b.put(1, vec![0], now);
        for _ in 0..N_BUFFERS {
            b.put(1, vec![1], now);
        }
        assert_eq!(b.take(first, now), Err(BufferError::Unknown));
        let last = b.put(2, vec![2], now);
        assert_eq!(b.take(last, now).map(|p| p.in_port), Ok(2));
    }
}
