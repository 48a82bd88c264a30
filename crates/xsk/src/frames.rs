//! Frame ownership and the checks on descriptors the kernel hands back.
//!
//! A [`FramePool`] owns a contiguous range of UMEM frames and knows, per frame, whether we or
//! the kernel hold it. Frames go to the kernel through the fill or tx ring and come back
//! through the rx or completion ring; each descriptor that comes back is checked before any
//! UMEM byte is touched: its address must name a frame of this pool that the kernel holds,
//! and its bytes must lie inside that frame. Anything else is counted by reason and dropped;
//! the frame is reclaimed when it can be identified. This is safe code: the fuzz target
//! `crates/xsk/fuzz/fuzz_targets/descs.rs` drives it with arbitrary descriptors.
//!
//! Threads: a pool belongs to one side of one socket (one PMD at a time).

/// A descriptor as the kernel writes it (`struct xdp_desc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct RawDesc {
    /// Byte address in the UMEM.
    pub addr: u64,
    /// Frame length.
    pub len: u32,
    /// Option flags (`XDP_PKT_CONTD` for multi-buffer frames, which Vireo does not enable).
    pub options: u32,
}

/// Why a returned descriptor was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DescError {
    /// The address is outside this pool's frames.
    OutOfRange,
    /// The frame is not one the kernel holds (returned twice, or never given).
    NotOwned,
    /// The bytes run past the end of the frame.
    CrossesFrame,
    /// Shorter than an Ethernet header.
    Truncated,
    /// Option flags set that Vireo never asked for (multi-buffer).
    BadOptions,
}

/// Shortest frame accepted on rx (an Ethernet header).
pub const MIN_FRAME: u32 = 14;

/// A range of UMEM frames and who holds each.
#[derive(Debug)]
pub struct FramePool {
    frame_size: u64,
    first: u32,
    kernel: Vec<bool>,
    free: Vec<u32>,
}

impl FramePool {
    /// Frames `first..first + count` of `frame_size` bytes (a power of two), all ours.
    pub fn new(frame_size: u32, first: u32, count: u32) -> FramePool {
        assert!(frame_size.is_power_of_two());
        FramePool {
            frame_size: u64::from(frame_size),
            first,
            kernel: vec![false; count as usize],
            free: (first..first + count).rev().collect(),
        }
    }

    /// Frames `first..first + count` where we hold exactly `free` (frame numbers) and the kernel
    /// the rest: the books of a pool another process kept (an upgrade). A frame outside the
    /// range or named twice is refused.
    pub fn with_free(
        frame_size: u32,
        first: u32,
        count: u32,
        free: &[u32],
    ) -> Result<FramePool, String> {
        let mut p = FramePool::new(frame_size, first, count);
        p.kernel.iter_mut().for_each(|k| *k = true);
        p.free.clear();
        for &f in free {
            let i = f
                .checked_sub(first)
                .filter(|&i| i < count)
                .ok_or_else(|| format!("frame {f} is not in frames {first}..{}", first + count))?;
            if !p.kernel[i as usize] {
                return Err(format!("frame {f} is named twice"));
            }
            p.kernel[i as usize] = false;
            p.free.push(f);
        }
        Ok(p)
    }

    /// The frames we hold (frame numbers), for [`FramePool::with_free`].
    pub fn free_frames(&self) -> Vec<u32> {
        self.free.clone()
    }

    /// Frames we hold.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Frames the kernel holds.
    pub fn in_kernel(&self) -> usize {
        self.kernel.len() - self.free.len()
    }

    /// Frames in the pool.
    pub fn total(&self) -> usize {
        self.kernel.len()
    }

    /// Takes a free frame and marks it held by the kernel (the caller puts it in a ring
    /// straight away). Returns its UMEM address.
    pub fn give(&mut self) -> Option<u64> {
        let f = self.free.pop()?;
        self.kernel[(f - self.first) as usize] = true;
        Some(u64::from(f) * self.frame_size)
    }

    /// Undoes the last [`FramePool::give`] of `addr` (the ring had no room after all).
    pub fn ungive(&mut self, addr: u64) {
        if let Ok(i) = self.index(addr) {
            if self.kernel[i] {
                self.kernel[i] = false;
                self.free.push(self.first + i as u32);
            }
        }
    }

    fn index(&self, addr: u64) -> Result<usize, DescError> {
        let f = addr / self.frame_size;
        let i = f
            .checked_sub(u64::from(self.first))
            .ok_or(DescError::OutOfRange)?;
        if i >= self.kernel.len() as u64 {
            return Err(DescError::OutOfRange);
        }
        Ok(i as usize)
    }

    /// Takes back the frame of `addr` if the kernel holds it.
    fn reclaim(&mut self, addr: u64) -> Result<(), DescError> {
        let i = self.index(addr)?;
        if !self.kernel[i] {
            return Err(DescError::NotOwned);
        }
        self.kernel[i] = false;
        self.free.push(self.first + i as u32);
        Ok(())
    }

    /// Checks a received descriptor and takes its frame back. `Ok((addr, len))` is a byte
    /// range inside one frame of this pool, safe to read until the frame is given again. On
    /// error the frame is still reclaimed when the address names one the kernel held.
    pub fn take_rx(&mut self, d: RawDesc) -> Result<(u64, u32), DescError> {
        self.reclaim(d.addr)?;
        if d.options != 0 {
            return Err(DescError::BadOptions);
        }
        let off = d.addr % self.frame_size;
        if off + u64::from(d.len) > self.frame_size {
            return Err(DescError::CrossesFrame);
        }
        if d.len < MIN_FRAME {
            return Err(DescError::Truncated);
        }
        Ok((d.addr, d.len))
    }

    /// Takes back the frame of a completed tx descriptor.
    pub fn take_completion(&mut self, addr: u64) -> Result<(), DescError> {
        self.reclaim(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FS: u32 = 4096;

    #[test]
    fn frames_cycle_and_bad_descriptors_are_refused() {
        let mut p = FramePool::new(FS, 4, 4);
        assert_eq!(p.free_count(), 4);
        let a = p.give().unwrap();
        assert_eq!(a, 4 * 4096);
        assert_eq!(p.in_kernel(), 1);
        let d = RawDesc {
            addr: a + 256,
            len: 60,
            options: 0,
        };
        assert_eq!(p.take_rx(d), Ok((a + 256, 60)));
        // Returned twice.
        assert_eq!(p.take_rx(d), Err(DescError::NotOwned));
        // Outside the pool, both sides.
        let out = RawDesc {
            addr: 0,
            len: 60,
            options: 0,
        };
        assert_eq!(p.take_rx(out), Err(DescError::OutOfRange));
        let out = RawDesc {
            addr: 8 * 4096,
            ..out
        };
        assert_eq!(p.take_rx(out), Err(DescError::OutOfRange));
        assert_eq!(
            p.take_rx(RawDesc {
                addr: u64::MAX,
                ..out
            }),
            Err(DescError::OutOfRange)
        );
        // Crossing the frame end: refused, frame reclaimed.
        let a = p.give().unwrap();
        let cross = RawDesc {
            addr: a + 256,
            len: FS - 255,
            options: 0,
        };
        assert_eq!(p.take_rx(cross), Err(DescError::CrossesFrame));
        assert_eq!(p.in_kernel(), 0);
        let a = p.give().unwrap();
        let short = RawDesc {
            addr: a,
            len: 13,
            options: 0,
        };
        assert_eq!(p.take_rx(short), Err(DescError::Truncated));
        let a = p.give().unwrap();
        let opt = RawDesc {
            addr: a,
            len: 60,
            options: 1,
        };
        assert_eq!(p.take_rx(opt), Err(DescError::BadOptions));
        assert_eq!(p.free_count(), 4);
    }

    #[test]
    fn completions_must_name_a_frame_in_flight() {
        let mut p = FramePool::new(FS, 0, 2);
        let a = p.give().unwrap();
        assert_eq!(p.take_completion(a + 100), Ok(()));
        assert_eq!(p.take_completion(a), Err(DescError::NotOwned));
        assert_eq!(p.take_completion(2 * 4096), Err(DescError::OutOfRange));
        let b = p.give().unwrap();
        p.ungive(b);
        assert_eq!(p.free_count(), 2);
    }

    #[test]
    fn books_carried_over_rebuild_the_same_pool_and_bad_ones_are_refused() {
        let mut p = FramePool::new(FS, 8, 8);
        let a = p.give().unwrap();
        let _b = p.give().unwrap();
        let q = FramePool::with_free(FS, 8, 8, &p.free_frames()).unwrap();
        assert_eq!((q.free_count(), q.in_kernel()), (6, 2));
        let mut q = q;
        // The frames the kernel held come back through the new pool, the others are refused.
        assert_eq!(q.take_completion(a), Ok(()));
        assert_eq!(q.take_completion(a), Err(DescError::NotOwned));
        assert!(FramePool::with_free(FS, 8, 8, &[7]).is_err());
        assert!(FramePool::with_free(FS, 8, 8, &[16]).is_err());
        assert!(FramePool::with_free(FS, 8, 8, &[9, 9]).is_err());
        assert_eq!(FramePool::with_free(FS, 8, 8, &[]).unwrap().in_kernel(), 8);
    }

    #[test]
    fn the_whole_pool_goes_out_and_comes_back() {
        let mut p = FramePool::new(FS, 0, 16);
        let addrs: Vec<u64> = std::iter::from_fn(|| p.give()).collect();
        assert_eq!(addrs.len(), 16);
        assert!(p.give().is_none());
        for a in addrs {
            p.take_completion(a).unwrap();
        }
        assert_eq!((p.free_count(), p.in_kernel()), (16, 0));
    }
}
