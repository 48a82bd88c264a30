//! The driver side of one split virtqueue laid out in [`Shm`]: descriptor table, avail ring,
//! used ring and one fixed data buffer per descriptor (descriptor `i` always points at
//! buffer `i`, so the hot path writes only avail entries and a few payload bytes).
//!
//! Threads: vireo-gen's poll loop (single-threaded).
use super::shm::Shm;

/// Descriptor continues in `next`.
pub const VIRTQ_DESC_F_NEXT: u16 = 1;
/// Device writes into the buffer.
pub const VIRTQ_DESC_F_WRITE: u16 = 2;
/// The device does not want kicks (used ring flags).
pub const VRING_USED_F_NO_NOTIFY: u16 = 1;
/// The driver does not want interrupts (avail ring flags).
pub const VRING_AVAIL_F_NO_INTERRUPT: u16 = 1;

/// Where one ring lives in the shared memory (byte offsets into [`Shm`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingLayout {
    /// Entries (a power of two).
    pub size: u16,
    /// Descriptor table offset.
    pub desc: usize,
    /// Avail ring offset.
    pub avail: usize,
    /// Used ring offset.
    pub used: usize,
    /// First data buffer offset.
    pub bufs: usize,
    /// Bytes per data buffer.
    pub buf_len: usize,
}

impl RingLayout {
    /// Lays a ring of `size` entries with `buf_len`-byte buffers out from offset `at`;
    /// returns it and the first offset after it (4 KiB aligned).
    pub fn at(at: usize, size: u16, buf_len: usize) -> (RingLayout, usize) {
        let s = usize::from(size);
        let page = |x: usize| x.div_ceil(4096) * 4096;
        let desc = page(at);
        let avail = page(desc + 16 * s);
        let used = page(avail + 6 + 2 * s);
        let bufs = page(used + 6 + 8 * s);
        let end = page(bufs + buf_len * s);
        let l = RingLayout {
            size,
            desc,
            avail,
            used,
            bufs,
            buf_len,
        };
        (l, end)
    }

    /// Offset of buffer `i`.
    #[inline]
    pub fn buf(&self, i: u16) -> usize {
        self.bufs + usize::from(i) * self.buf_len
    }
}

/// Driver state of one ring.
pub struct Ring {
    /// Layout.
    pub l: RingLayout,
    avail_idx: u16,
    last_used: u16,
    mask: u16,
}

impl Ring {
    /// Writes descriptor `i` -> buffer `i` (at guest-physical `gpa_base` + its offset) of
    /// `len` bytes with `flags` for every entry, sets the avail flags to NO_INTERRUPT and the
    /// indices to 0.
    pub fn init(shm: &Shm, l: RingLayout, gpa_base: u64, len: u32, flags: u16) -> Ring {
        assert!(l.size.is_power_of_two());
        for i in 0..l.size {
            let d = l.desc + 16 * usize::from(i);
            shm.write_u64(d, gpa_base + l.buf(i) as u64);
            shm.write_u32(d + 8, len);
            shm.write_u16(d + 12, flags);
            shm.write_u16(d + 14, 0);
        }
        shm.write_u16(l.avail, VRING_AVAIL_F_NO_INTERRUPT);
        shm.store_u16_release(l.avail + 2, 0);
        shm.write_u16(l.used, 0);
        shm.store_u16_release(l.used + 2, 0);
        Ring {
            l,
            avail_idx: 0,
            last_used: 0,
            mask: l.size - 1,
        }
    }

    /// Sets descriptor `i`'s length (tx: frame size).
    #[inline]
    pub fn set_len(&self, shm: &Shm, i: u16, len: u32) {
        shm.write_u32(self.l.desc + 16 * usize::from(i) + 8, len);
    }

    /// Puts `id` in the next avail slot (not yet published).
    #[inline]
    pub fn push(&mut self, shm: &Shm, id: u16) {
        let slot = usize::from(self.avail_idx & self.mask);
        shm.write_u16(self.l.avail + 4 + 2 * slot, id);
        self.avail_idx = self.avail_idx.wrapping_add(1);
    }

    /// Publishes the pushed entries; returns whether the device asks for a kick.
    #[inline]
    pub fn publish(&self, shm: &Shm) -> bool {
        shm.store_u16_release(self.l.avail + 2, self.avail_idx);
        shm.read_u16(self.l.used) & VRING_USED_F_NO_NOTIFY == 0
    }

    /// Calls `f(id, len)` for up to `max` used entries the device returned; returns how many.
    #[inline]
    pub fn reap(&mut self, shm: &Shm, max: usize, mut f: impl FnMut(u16, u32)) -> usize {
        let end = shm.load_u16_acquire(self.l.used + 2);
        let n = usize::from(end.wrapping_sub(self.last_used)).min(max);
        for _ in 0..n {
            let e = self.l.used + 4 + 8 * usize::from(self.last_used & self.mask);
            let id = shm.read_u32(e);
            let len = shm.read_u32(e + 4);
            self.last_used = self.last_used.wrapping_add(1);
            // A hostile or broken device could return any id; keep it inside the ring.
            f((id as u16) & self.mask, len);
        }
        n
    }

    /// The avail index published so far (the count of buffers ever offered).
    pub fn avail_idx(&self) -> u16 {
        self.avail_idx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_push_publish_reap() {
        let (l, end) = RingLayout::at(0, 8, 2048);
        assert_eq!(
            (l.desc, l.avail % 4096, l.used % 4096, l.bufs % 4096),
            (0, 0, 0, 0)
        );
        assert!(end >= l.bufs + 8 * 2048);
        let shm = Shm::new("ring", end).unwrap();
        let mut r = Ring::init(&shm, l, 0x1000, 2048, VIRTQ_DESC_F_WRITE);
        assert_eq!(shm.read_u64(l.desc + 16 * 3), 0x1000 + l.buf(3) as u64);
        for id in [0u16, 1, 2] {
            r.push(&shm, id);
        }
        assert!(r.publish(&shm)); // the device has not set NO_NOTIFY
        assert_eq!(shm.load_u16_acquire(l.avail + 2), 3);
        assert_eq!(shm.read_u16(l.avail + 4 + 2), 1);
        // Play the device: return ids 2 and 0.
        shm.write_u32(l.used + 4, 2);
        shm.write_u32(l.used + 8, 60);
        shm.write_u32(l.used + 12, 0);
        shm.write_u32(l.used + 16, 64);
        shm.store_u16_release(l.used + 2, 2);
        shm.write_u16(l.used, VRING_USED_F_NO_NOTIFY);
        let mut got = Vec::new();
        assert_eq!(r.reap(&shm, 32, |id, len| got.push((id, len))), 2);
        assert_eq!(got, vec![(2, 60), (0, 64)]);
        assert_eq!(r.reap(&shm, 32, |_, _| ()), 0);
        assert!(!r.publish(&shm));
    }
}
