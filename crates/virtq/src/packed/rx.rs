//! Packed-ring enqueue (packets → guest rx): gathers the guest's writable chains for each
//! packet (chained, indirect, mergeable rx over several chains), writes header and frame over
//! them and returns them, within the burst's descriptor budget; no rewind and retry.
//!
//! Threads: the PMD sending to this port, holding the ring's lock for one burst.
use super::*;
use crate::queue::{tail_src, write_piece, TailSrc};
use packet::Packet;

/// Why an enqueue burst ended early.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// The guest has no buffer left.
    Full,
    /// The packet does not fit in what the guest offers.
    TooBig,
    /// The descriptor budget ran out.
    Budget,
    /// A chain without an end: the queue broke.
    Broken,
}

impl PackedQueue {
    /// Gathers chains from `(*pos, *wrap)` until they hold `need` bytes. On success the chains
    /// are in `heads` (and their buffers in `segs`) and `(*pos, *wrap)` is past them; `Ok(false)`:
    /// a gathered chain was malformed (the chains gathered so far are to be returned empty).
    fn gather_for(&mut self, need: u64, pos: &mut (u16, bool)) -> Result<bool, Stop> {
        self.segs.clear();
        self.heads.clear();
        let mut cap = 0u64;
        while cap < need || self.heads.is_empty() {
            if !self.heads.is_empty() && !self.feat.mrg_rxbuf {
                return Err(Stop::TooBig);
            }
            if self.heads.len() >= MAX_SEGS {
                return Err(Stop::TooBig);
            }
            let Some(head) = self.avail_head(pos.0, pos.1) else {
                return Err(Stop::Full);
            };
            let left = BURST_BUDGET.saturating_sub(self.spent);
            if left == 0 {
                return Err(Stop::Budget);
            }
            let c = match self.walk(pos.0, head, true, left) {
                Ok(c) => c,
                Err(Bad::Budget) => return Err(Stop::Budget),
                Err(_) => return Err(Stop::Broken),
            };
            self.heads.push((c.id, c.ndesc, self.segs.len()));
            *pos = self.advance(pos.0, pos.1, c.ndesc);
            if c.bad.is_some() {
                return Ok(false);
            }
            cap += c.cap;
        }
        Ok(true)
    }

    /// Writes `hdr ++ data ++ tail` over the gathered segments.
    fn scatter(&self, hdr: &[u8], data: &[u8], tail: TailSrc) -> Result<(), ()> {
        let total = hdr.len() + data.len() + tail.map_or(0, |(_, t)| t.len as usize);
        let mut done = 0usize;
        for &(addr, len) in &self.segs {
            if done == total {
                break;
            }
            let n = (len as usize).min(total - done);
            write_piece(&self.mem, addr, hdr, data, tail, done, n).map_err(|_| ())?;
            done += n;
        }
        Ok(())
    }

    /// Returns the gathered chains: `total` bytes spread over them in order (0: all empty).
    fn return_heads(&mut self, total: u64) {
        let mut left = total;
        let mut seg_i = 0usize;
        for i in 0..self.heads.len() {
            let (id, ndesc, seg_end) = self.heads[i];
            let mut cap = 0u64;
            while seg_i < seg_end {
                cap += u64::from(self.segs[seg_i].1);
                seg_i += 1;
            }
            let n = cap.min(left);
            left -= n;
            self.push_used(id, n as u32, ndesc);
        }
    }

    /// Enqueues one frame from ring position `*pos`. `Err` ends the burst (the chains of a
    /// packet that could not be reserved stay in the ring, whole).
    fn enqueue_one(
        &mut self,
        data: &[u8],
        tail: TailSrc,
        hdr: &mut [u8; 12],
        pos: &mut (u16, bool),
        b: &mut Burst,
    ) -> Result<(), Stop> {
        let tlen = tail.map_or(0, |(_, t)| t.len as usize);
        let need = (self.feat.hdr_len + data.len() + tlen) as u64;
        let start = *pos;
        if let Some((addr, len, id, flags)) = self.avail_head(pos.0, pos.1) {
            if flags & (DESC_F_NEXT | DESC_F_INDIRECT | DESC_F_WRITE) == DESC_F_WRITE
                && u64::from(len) >= need
                && self.spent < BURST_BUDGET
            {
                // Fast path: the frame fits in one plain buffer (one descriptor read).
                self.spent += 1;
                hdr[10..12].copy_from_slice(&1u16.to_le_bytes());
                let h = &hdr[..self.feat.hdr_len];
                let mut ok = self.mem.write2(addr, h, data).is_ok();
                if let (true, Some((src, t))) = (ok, tail) {
                    let at = addr + (h.len() + data.len()) as u64;
                    ok = self.mem.copy_from(at, src, t.gpa, t.len as usize).is_ok();
                    b.one_copy += u32::from(ok);
                }
                if ok {
                    self.push_used(id, need as u32, 1);
                    b.packets += 1;
                    b.bytes += (data.len() + tlen) as u64;
                } else {
                    self.push_used(id, 0, 1);
                    b.malformed += 1;
                }
                *pos = self.advance(pos.0, pos.1, 1);
                return Ok(());
            }
        }
        match self.gather_for(need, pos) {
            Ok(true) => {
                let nbuf = self.heads.len() as u16;
                hdr[10..12].copy_from_slice(&nbuf.to_le_bytes());
                let r = self.scatter(&hdr[..self.feat.hdr_len], data, tail);
                if r.is_ok() {
                    self.return_heads(need);
                    b.packets += 1;
                    b.bytes += (data.len() + tlen) as u64;
                    b.one_copy += u32::from(tail.is_some());
                } else {
                    self.return_heads(0);
                    b.malformed += 1;
                }
                Ok(())
            }
            Ok(false) => {
                self.return_heads(0);
                b.malformed += 1;
                Ok(())
            }
            Err(e) => {
                *pos = start;
                Err(e)
            }
        }
    }

    /// Packets → guest rx: enqueues each packet of `pkts` into the guest's buffers, within the
    /// descriptor budget; stops at the first packet whose buffers cannot be reserved (no
    /// buffer left: it and the rest count as `full`; too big: it counts as `too_big`, the rest
    /// as `cut`; budget: it and the rest count as `cut`). Packets must not carry deferred
    /// tails (see [`PackedQueue::enqueue_from`]).
    pub fn enqueue(&mut self, pkts: &[Packet]) -> Burst {
        self.enqueue_from(pkts, None)
    }

    /// As [`PackedQueue::enqueue`], for packets whose deferred tails lie in `tails` (as
    /// [`crate::Queue::enqueue_from`]).
    pub fn enqueue_from(&mut self, pkts: &[Packet], tails: Option<&GuestMemory>) -> Burst {
        let mut b = Burst::default();
        if self.broken.is_some() {
            b.broken_drops = pkts.len() as u32;
            return b;
        }
        let old = (self.used_idx, self.used_wrap);
        let mut pos = (self.last_avail, self.avail_wrap);
        self.spent = 0;
        let mut hdr = [0u8; 12];
        for (i, p) in pkts.iter().enumerate() {
            if self.feat.guest.any() {
                // The driver takes offloads: say what this packet still needs (nothing, a
                // partial checksum, or TSO with the MSS), computed by us from the packet.
                packet::vnet::write_hdr(p.meta.offload(), p.data(), &mut hdr[..10]);
            }
            let Ok(tail) = tail_src(p, tails) else {
                b.malformed += 1;
                continue;
            };
            let Err(stop) = self.enqueue_one(p.data(), tail, &mut hdr, &mut pos, &mut b) else {
                continue;
            };
            let rest = (pkts.len() - i) as u32;
            match stop {
                Stop::Full => b.full += rest,
                Stop::TooBig => {
                    b.too_big += 1;
                    b.cut += rest - 1;
                }
                Stop::Budget => {
                    b.budget_cut = true;
                    b.cut += rest;
                }
                Stop::Broken => {
                    self.set_broken(Broken::LongChain, &mut b);
                    b.broken_drops += rest;
                }
            }
            break;
        }
        (self.last_avail, self.avail_wrap) = pos;
        b.descs = self.spent;
        self.flush(old, &mut b);
        b
    }
}
