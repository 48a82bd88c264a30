//! Split-ring layout (virtio 1.1 §2.6), flags, descriptor decoding and index arithmetic.
//!
//! Pure functions and constants; used by the device side ([`crate::Queue`]) and the mock driver.
use packet::vnet::Offloads;

/// Descriptor continues via `next`.
pub const VIRTQ_DESC_F_NEXT: u16 = 1;
/// Buffer is device-writable.
pub const VIRTQ_DESC_F_WRITE: u16 = 2;
/// Buffer holds a table of indirect descriptors.
pub const VIRTQ_DESC_F_INDIRECT: u16 = 4;
/// Driver to device: do not interrupt me (used when event-idx is off).
pub const VRING_AVAIL_F_NO_INTERRUPT: u16 = 1;
/// Device to driver: do not kick me (used when event-idx is off).
pub const VRING_USED_F_NO_NOTIFY: u16 = 1;

/// Largest split ring.
pub const MAX_QUEUE_SIZE: u16 = 32768;
/// Bytes per descriptor.
pub const DESC_SIZE: u64 = 16;
/// Most descriptors in one indirect table (bounded, far above what drivers use).
pub const MAX_INDIRECT: u32 = 1024;

/// Byte size of the descriptor table.
pub fn desc_table_size(size: u16) -> u64 {
    DESC_SIZE * u64::from(size)
}

/// Byte size of the avail ring (flags, idx, ring, used_event).
pub fn avail_ring_size(size: u16) -> u64 {
    6 + 2 * u64::from(size)
}

/// Byte size of the used ring (flags, idx, ring, avail_event).
pub fn used_ring_size(size: u16) -> u64 {
    6 + 8 * u64::from(size)
}

/// True if `size` is a valid split-ring size: a power of two, 1..=32768.
pub fn valid_size(size: u32) -> bool {
    size.is_power_of_two() && size <= u32::from(MAX_QUEUE_SIZE)
}

/// Entries the driver made available beyond what we consumed, or `None` if the distance
/// exceeds the ring size (a driver bug or attack: the queue is then broken).
#[inline]
pub fn pending(avail_idx: u16, last_avail: u16, size: u16) -> Option<u16> {
    let n = avail_idx.wrapping_sub(last_avail);
    (n <= size).then_some(n)
}

/// Event-idx rule (virtio 1.1 §2.6.7.2): notify if `event` lies in `[old, new)` modulo 2^16.
#[inline]
pub fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

/// One descriptor, decoded from the two little-endian words of its 16 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Desc {
    /// Guest-physical buffer address.
    pub addr: u64,
    /// Buffer length.
    pub len: u32,
    /// `VIRTQ_DESC_F_*`.
    pub flags: u16,
    /// Next descriptor if `NEXT` is set.
    pub next: u16,
}

impl Desc {
    /// Decodes from `(addr, len | flags << 32 | next << 48)`.
    #[inline]
    pub fn from_words(w0: u64, w1: u64) -> Desc {
        Desc {
            addr: w0,
            len: w1 as u32,
            flags: (w1 >> 32) as u16,
            next: (w1 >> 48) as u16,
        }
    }

    /// Decodes from 16 little-endian bytes.
    #[inline]
    pub fn from_bytes(b: &[u8; 16]) -> Desc {
        let mut lo = [0u8; 8];
        let mut hi = [0u8; 8];
        lo.copy_from_slice(&b[..8]);
        hi.copy_from_slice(&b[8..]);
        Desc::from_words(u64::from_le_bytes(lo), u64::from_le_bytes(hi))
    }

    /// Encodes into 16 little-endian bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..14].copy_from_slice(&self.flags.to_le_bytes());
        b[14..16].copy_from_slice(&self.next.to_le_bytes());
        b
    }

    /// Flag test.
    #[inline]
    pub fn has(&self, f: u16) -> bool {
        self.flags & f != 0
    }
}

/// Ring addresses (guest-physical) and size of one split virtqueue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingAddrs {
    /// Number of entries (power of two).
    pub size: u16,
    /// Descriptor table.
    pub desc: u64,
    /// Avail (driver) ring.
    pub avail: u64,
    /// Used (device) ring.
    pub used: u64,
}

/// The virtio-net options a queue needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetFeatures {
    /// virtio-net header length: 12 with VERSION_1 or MRG_RXBUF, else 10.
    pub hdr_len: usize,
    /// VIRTIO_NET_F_MRG_RXBUF.
    pub mrg_rxbuf: bool,
    /// VIRTIO_RING_F_INDIRECT_DESC.
    pub indirect: bool,
    /// VIRTIO_RING_F_EVENT_IDX.
    pub event_idx: bool,
    /// Offloads the driver may ask of us on its tx queue (`CSUM`, `HOST_TSO4/6`): with any on,
    /// dequeue reads each chain's virtio-net header (once) and checks it; with none, the
    /// header is skipped unread.
    pub host: Offloads,
    /// Offloads the driver takes on its rx queue (`GUEST_CSUM`, `GUEST_TSO4/6`): with any on,
    /// enqueue writes each packet's offload into its header.
    pub guest: Offloads,
}

impl Default for NetFeatures {
    fn default() -> Self {
        NetFeatures {
            hdr_len: 12,
            mrg_rxbuf: false,
            indirect: false,
            event_idx: false,
            host: Offloads::default(),
            guest: Offloads::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes() {
        assert!(valid_size(1) && valid_size(256) && valid_size(32768));
        assert!(!valid_size(0) && !valid_size(3) && !valid_size(65536));
        assert_eq!(used_ring_size(256), 6 + 2048);
    }

    #[test]
    fn desc_round_trip() {
        let d = Desc {
            addr: 0x1122_3344_5566_7788,
            len: 0x99aa_bbcc,
            flags: 7,
            next: 0xfffe,
        };
        assert_eq!(Desc::from_bytes(&d.to_bytes()), d);
    }

    proptest! {
        // The ring index arithmetic agrees with a model over unbounded integers.
        #[test]
        fn pending_matches_unbounded_model(start in any::<u32>(), adv in 0u32..70000, size_log in 0u32..16) {
            let size = 1u32 << size_log;
            let last = start as u16;
            let avail = start.wrapping_add(adv) as u16;
            let got = pending(avail, last, size as u16);
            let real = adv % 65536;
            if real <= size {
                prop_assert_eq!(got, Some(real as u16));
            } else {
                prop_assert_eq!(got, None);
            }
        }

        #[test]
        fn need_event_matches_model(old in any::<u16>(), step in 0u16..1000, ev_off in 0u16..2000) {
            let new = old.wrapping_add(step);
            let event = old.wrapping_add(ev_off);
            // Notify exactly when the event index lies among the entries published: old..new.
            prop_assert_eq!(need_event(event, new, old), ev_off < step);
        }
    }
}
