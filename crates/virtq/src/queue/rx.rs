//! Enqueue (packets → guest rx): gathers the guest's writable buffers for each packet
//! (chained, indirect, mergeable rx over several heads), writes header and frame over them and
//! returns them, within the burst's descriptor budget (see the parent module).
//!
//! Threads: the PMD sending to this port, holding the ring's lock for one burst.
use super::*;
use packet::Tail;

/// A packet's deferred tail and the sender's memory table it lies in (the table its batch
/// holds, `Batch::tails`).
pub(crate) type TailSrc<'a> = Option<(&'a GuestMemory, Tail)>;

/// The source of `p`'s tail, if it has one: `Err(())` for a tail without its table (a packet
/// kept past its burst; it is not sent: never resolved against another table).
#[inline]
pub(crate) fn tail_src<'a>(p: &Packet, tails: Option<&'a GuestMemory>) -> Result<TailSrc<'a>, ()> {
    match (p.tail(), tails) {
        (None, _) => Ok(None),
        (Some(t), Some(m)) => Ok(Some((m, t))),
        (Some(_), None) => Err(()),
    }
}

/// Writes piece `[at, at + n)` of the stream `hdr ++ data ++ tail` to `gpa` of `mem`: from
/// our buffers, or (the deferred tail of a one-copy packet) straight from the sender's memory.
#[inline]
pub(crate) fn write_piece(
    mem: &GuestMemory,
    gpa: u64,
    hdr: &[u8],
    data: &[u8],
    tail: TailSrc,
    at: usize,
    n: usize,
) -> Result<(), MemError> {
    let mut pos = 0usize;
    while pos < n {
        let a = at + pos;
        let k = if a < hdr.len() {
            let k = (hdr.len() - a).min(n - pos);
            mem.write(gpa + pos as u64, &hdr[a..a + k])?;
            k
        } else if a < hdr.len() + data.len() {
            let off = a - hdr.len();
            let k = (data.len() - off).min(n - pos);
            mem.write(gpa + pos as u64, &data[off..off + k])?;
            k
        } else {
            let off = a - hdr.len() - data.len();
            let (src, t) = tail.ok_or(MemError::OutOfRange {
                addr: gpa,
                len: n as u64,
            })?;
            let k = (t.len as usize).saturating_sub(off).min(n - pos);
            if k == 0 {
                return Err(MemError::OutOfRange {
                    addr: gpa,
                    len: n as u64,
                });
            }
            mem.copy_from(gpa + pos as u64, src, t.gpa + off as u64, k)?;
            k
        };
        pos += k;
    }
    Ok(())
}

impl Queue {
    /// Collects the writable segments of the chain headed by `first` into `segs`; returns its
    /// capacity.
    fn gather(&mut self, first: Desc) -> Result<u64, ChainError> {
        let mut segs = std::mem::take(&mut self.segs);
        let mut cap = 0u64;
        let left = BURST_BUDGET.saturating_sub(self.spent);
        let mut walked = 0;
        let r = self.walk_from(first, left, &mut walked, |d| {
            if !d.has(VIRTQ_DESC_F_WRITE) || segs.len() >= MAX_SEGS {
                return Err(ChainError::Malformed);
            }
            if d.len > 0 {
                segs.push((d.addr, d.len));
                cap += u64::from(d.len);
            }
            Ok(())
        });
        self.spent += walked;
        self.segs = segs;
        r.map(|_| cap)
    }

    /// Writes `hdr ++ data ++ tail` over the gathered segments.
    fn scatter(&mut self, hdr: &[u8], data: &[u8], tail: TailSrc) -> Result<(), ChainError> {
        let total = hdr.len() + data.len() + tail.map_or(0, |(_, t)| t.len as usize);
        let mut done = 0usize;
        let mut seg_i = 0usize;
        for &(_, seg_end) in &self.heads {
            while seg_i < seg_end && done < total {
                let (addr, len) = self.segs[seg_i];
                let n = (len as usize).min(total - done);
                write_piece(&self.mem, addr, hdr, data, tail, done, n)?;
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
            if self.spent >= BURST_BUDGET {
                return Err(Some(ChainError::Budget));
            }
            let Some((head, first)) = self.head_desc(*taken, b) else {
                return Err(None);
            };
            *taken += 1;
            let Some(first) = first else {
                self.spent += 1;
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
    fn enqueue_gathered(
        &mut self,
        hdr: &mut [u8; 12],
        data: &[u8],
        tail: TailSrc,
        need: u64,
        b: &mut Burst,
    ) {
        let nbuf = self.heads.len() as u16;
        hdr[10..12].copy_from_slice(&nbuf.to_le_bytes());
        let r = self.scatter(&hdr[..self.feat.hdr_len], data, tail);
        hdr[10..12].copy_from_slice(&1u16.to_le_bytes());
        match r {
            Ok(()) => {
                self.return_heads_written(need as usize);
                b.packets += 1;
                b.bytes += need - self.feat.hdr_len as u64;
                b.one_copy += u32::from(tail.is_some());
            }
            Err(_) => {
                self.return_heads_empty();
                b.malformed += 1;
            }
        }
    }

    /// Enqueues one frame, consuming guest buffers from avail position `*taken`. `Err` ends the
    /// burst (buffers of a packet that could not be reserved stay in the ring, whole); every
    /// other outcome is counted in `b`.
    #[inline]
    fn enqueue_one(
        &mut self,
        data: &[u8],
        tail: TailSrc,
        avail: u16,
        taken: &mut u16,
        hdr: &mut [u8; 12],
        b: &mut Burst,
    ) -> Result<(), Stop> {
        let tlen = tail.map_or(0, |(_, t)| t.len as usize);
        let need = (self.feat.hdr_len + data.len() + tlen) as u64;
        let start = *taken;
        if *taken == avail {
            return Err(Stop::Full);
        }
        if self.spent >= BURST_BUDGET {
            return Err(Stop::Budget);
        }
        let Some((head, first)) = self.head_desc(*taken, b) else {
            return Err(Stop::Full);
        };
        *taken += 1;
        let Some(first) = first else {
            self.spent += 1;
            self.push_used(head, 0);
            b.malformed += 1;
            return Ok(());
        };
        if first.flags == VIRTQ_DESC_F_WRITE && u64::from(first.len) >= need {
            // Fast path: the frame fits in one plain buffer.
            self.spent += 1;
            let h = &hdr[..self.feat.hdr_len];
            let mut ok = self.mem.write2(first.addr, h, data).is_ok();
            if let (true, Some((src, t))) = (ok, tail) {
                let at = first.addr + (h.len() + data.len()) as u64;
                ok = self.mem.copy_from(at, src, t.gpa, t.len as usize).is_ok();
                b.one_copy += u32::from(ok);
            }
            if ok {
                self.push_used(head, need as u32);
                b.packets += 1;
                b.bytes += (data.len() + tlen) as u64;
            } else {
                self.push_used(head, 0);
                b.malformed += 1;
            }
            return Ok(());
        }
        match self.gather_for(need, head, first, avail, taken, b) {
            Ok(()) => self.enqueue_gathered(hdr, data, tail, need, b),
            Err(Some(ChainError::Malformed)) => {
                self.return_heads_empty();
                b.malformed += 1;
            }
            Err(e) => {
                // No reservation: the buffers stay whole in the ring and the burst ends.
                *taken = start;
                return Err(match e {
                    Some(ChainError::TooBig) => Stop::TooBig,
                    Some(_) => Stop::Budget,
                    None => Stop::Full,
                });
            }
        }
        Ok(())
    }

    /// Packets → guest rx: enqueues each packet of `pkts` into the guest's buffers, within the
    /// descriptor budget. Stops at the first packet whose buffers cannot be reserved: no
    /// buffer left (it and the rest count as `full`), too big (it counts as `too_big`, the rest
    /// as `cut`) or the budget ran out (it and the rest count as `cut`). Packets must not
    /// carry deferred tails (see [`Queue::enqueue_from`]).
    pub fn enqueue(&mut self, pkts: &[Packet]) -> Burst {
        self.enqueue_from(pkts, None)
    }

    /// As [`Queue::enqueue`], for packets whose deferred tails (one copy) lie in `tails`, the
    /// memory table their batch holds (`Batch::tails`): each tail is copied straight from
    /// there. A packet with a tail but no table is not sent (counted `malformed`).
    pub fn enqueue_from(&mut self, pkts: &[Packet], tails: Option<&GuestMemory>) -> Burst {
        let mut b = Burst::default();
        if self.broken.is_some() {
            b.broken_drops = pkts.len() as u32;
            return b;
        }
        let avail = self.avail_now(&mut b);
        let old_used = self.used_idx;
        let mut taken = 0u16;
        self.spent = 0;
        self.prefetch_heads(avail.min(pkts.len() as u16), true, &mut b);
        let mut hdr = [0u8; 12];
        hdr[10] = 1;
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
            let Err(stop) = self.enqueue_one(p.data(), tail, avail, &mut taken, &mut hdr, &mut b)
            else {
                continue;
            };
            let rest = (pkts.len() - i) as u32;
            if self.broken.is_some() {
                b.broken_drops += rest;
                break;
            }
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
            }
            break;
        }
        b.descs = self.spent;
        self.last_avail = self.last_avail.wrapping_add(taken);
        self.flush(old_used, &mut b);
        b
    }
}

/// Why an enqueue burst ended early.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// The guest has no buffer left.
    Full,
    /// The packet does not fit in what the guest offers.
    TooBig,
    /// The descriptor budget ran out.
    Budget,
}
