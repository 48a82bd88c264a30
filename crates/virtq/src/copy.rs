//! Guest tx frame → packet, for both ring layouts: copies a chain's device-readable bytes
//! (one buffer, or the segments a walk gathered) into a packet from the pool, with the
//! virtio-net header handled once.
//!
//! With no tx offload negotiated (`NetFeatures::host` all off) the header is skipped unread,
//! as before offloads existed. With one on, the header's first 10 bytes are copied out of
//! guest memory once into a local array (never read again from guest memory: the guest may
//! rewrite it meanwhile), a GSO header gets a large buffer when the frame needs one, and the
//! copy is checked against the frame already in our buffer (`packet::vnet::Hdr::validate`)
//! before its offload is put in the packet's metadata.
//!
//! One copy for large frames: a frame of at least [`ONE_COPY_MIN`] bytes whose tail lies in one
//! buffer segment has only its first [`HEAD_LEN`] bytes copied, if those decide its flow key
//! (`wire::extract::key_within`) and its header asks for no offload; the rest becomes the
//! packet's [`packet::Tail`], copied later straight into the receiving guest (or into our
//! buffer by whoever needs the whole frame). The chain is not returned to the guest until
//! then (see `Queue::dequeue`, `PackedQueue::dequeue`).
//!
//! Threads: the PMD dequeuing, under the ring's slot lock.
use crate::queue::ChainError;
use crate::ring::NetFeatures;
use guestmem::GuestMemory;
use packet::vnet::Hdr;
use packet::{Packet, Pool, Tail, MAX_FRAME};

/// Frames at least this long (without virtio-net header) are dequeued with one copy, by
/// default (a queue's owner may set another threshold, `Queue::set_one_copy`). Measured
/// (BENCHMARKS.md, "One copy for large frames": the ring layer alone gains 6-22% from 1024
/// bytes up and loses 6-9% at 512; end to end a few percent at 1024 and 1518 bytes, nothing at
/// 512): below it the second memcpy is cheaper than reading the tail from the sender.
pub const ONE_COPY_MIN: usize = 1024;

/// The dequeue threshold `set_one_copy(min)` stores: 0 (off) for `Some(0)`, the default
/// [`ONE_COPY_MIN`] for `None`, otherwise `min` raised to [`HEAD_LEN`] + 1 (a tail is never
/// empty).
pub fn threshold(min: Option<usize>) -> usize {
    match min {
        Some(0) => 0,
        Some(n) => n.max(HEAD_LEN + 1),
        None => ONE_COPY_MIN,
    }
}

/// Bytes of a one-copy frame copied into the packet: two VLAN tags, the largest IPv4 header
/// and the largest TCP header (14 + 8 + 60 + 60 = 142) rounded up to whole cache lines.
pub const HEAD_LEN: usize = 192;

/// Whether a frame of `flen` bytes with header `h` may be dequeued with one copy, frames of at
/// least `min` bytes qualifying (0: one copy is off).
#[inline]
fn wants_one_copy(flen: usize, h: Option<&Hdr>, min: usize) -> bool {
    min != 0 && flen >= min && flen <= MAX_FRAME && h.is_none_or(Hdr::is_plain)
}

/// Having read the head of a one-copy candidate into `p` (`p.len() == HEAD_LEN`), defers the
/// `tail` bytes at `gpa` if the head decides the key and the range lies in one region (the
/// dequeue then makes its batch hold `mem`: `Batch::hold_tails`).
#[inline]
fn try_defer(p: &mut Packet, mem: &GuestMemory, gpa: u64, tail: usize) -> bool {
    wire::extract::key_within(p.data())
        && mem.contains(gpa, tail as u64)
        && p.set_tail(Tail {
            gpa,
            len: tail as u32,
        })
}

/// A buffer for a `len`-byte frame whose header is `h` (`None`: offloads off).
#[inline]
fn buffer_for(len: usize, h: Option<&Hdr>, pool: &mut Pool) -> Result<Packet, ChainError> {
    if len <= MAX_FRAME {
        return Ok(pool.get());
    }
    match h {
        Some(h) if h.is_gso() && len <= packet::MAX_LARGE_FRAME => Ok(pool.get_large()),
        Some(h) if h.is_gso() => Err(ChainError::Vnet(packet::vnet::VnetError::GsoTooBig)),
        _ => Err(ChainError::TooBig),
    }
}

/// Checks the header copy against the frame now in `p` and records the offload.
#[inline]
fn finish(
    mut p: Packet,
    h: &Hdr,
    feat: &NetFeatures,
    pool: &mut Pool,
) -> Result<Packet, ChainError> {
    match h.validate(p.data(), feat.host) {
        Ok(o) => {
            p.meta.set_offload(o);
            Ok(p)
        }
        Err(e) => {
            pool.put(p);
            Err(ChainError::Vnet(e))
        }
    }
}

/// One buffer at `addr` of `len` bytes (`len >= feat.hdr_len`) holding header and frame;
/// a frame of at least `one_copy` bytes (0: none) may keep its tail in guest memory (see the
/// module comment).
#[inline]
pub(crate) fn from_one(
    mem: &GuestMemory,
    addr: u64,
    len: u32,
    feat: &NetFeatures,
    pool: &mut Pool,
    one_copy: usize,
) -> Result<Packet, ChainError> {
    let hl = feat.hdr_len as u64;
    let flen = (u64::from(len) - hl) as usize;
    let data = addr.checked_add(hl).ok_or(ChainError::Malformed)?;
    let h = if feat.host.any() {
        let mut raw = [0u8; 10];
        mem.read(addr, &mut raw)?;
        Some(Hdr::parse(&raw))
    } else {
        None
    };
    if wants_one_copy(flen, h.as_ref(), one_copy) {
        return one_copy_one(mem, data, flen, pool);
    }
    let Some(h) = h else {
        if flen > MAX_FRAME {
            return Err(ChainError::TooBig);
        }
        let mut p = pool.get();
        return match mem.read(data, p.reset_for_fill(flen)) {
            Ok(()) => Ok(p),
            Err(_) => {
                pool.put(p);
                Err(ChainError::Malformed)
            }
        };
    };
    let mut p = buffer_for(flen, Some(&h), pool)?;
    if mem.read(data, p.reset_for_fill(flen)).is_err() {
        pool.put(p);
        return Err(ChainError::Malformed);
    }
    finish(p, &h, feat, pool)
}

/// A one-copy candidate of `flen` bytes at `data` (its header, if any, asks for nothing):
/// the head is copied, and the tail deferred if the head decides the key, else copied too.
#[inline]
fn one_copy_one(
    mem: &GuestMemory,
    data: u64,
    flen: usize,
    pool: &mut Pool,
) -> Result<Packet, ChainError> {
    let mut p = pool.get();
    if mem.read(data, p.reset_for_fill(HEAD_LEN)).is_err() {
        pool.put(p);
        return Err(ChainError::Malformed);
    }
    let tail = data.checked_add(HEAD_LEN as u64);
    if tail.is_some_and(|t| try_defer(&mut p, mem, t, flen - HEAD_LEN)) {
        return Ok(p);
    }
    // The head bytes stay in the buffer; read the rest after them.
    let buf = p.reset_for_fill(flen);
    match tail.map(|t| mem.read(t, &mut buf[HEAD_LEN..])) {
        Some(Ok(())) => Ok(p),
        _ => {
            pool.put(p);
            Err(ChainError::Malformed)
        }
    }
}

/// Reads bytes `[from, from + dst.len())` of the concatenation of `segs` into `dst`.
fn read_span(
    mem: &GuestMemory,
    segs: &[(u64, u32)],
    from: u64,
    dst: &mut [u8],
) -> Result<(), ChainError> {
    let mut pos = 0u64; // start of the current segment in the stream
    let mut done = 0usize;
    for &(addr, len) in segs {
        if done == dst.len() {
            break;
        }
        let end = pos + u64::from(len);
        let at = from + done as u64;
        if at < end {
            let off = at - pos;
            let n = ((end - at) as usize).min(dst.len() - done);
            let a = addr.checked_add(off).ok_or(ChainError::Malformed)?;
            mem.read(a, &mut dst[done..done + n])?;
            done += n;
        }
        pos = end;
    }
    if done < dst.len() {
        return Err(ChainError::Malformed);
    }
    Ok(())
}

/// The device-readable segments `segs` of one chain (a walk gathered them, zero-length ones
/// left out) holding header and frame; `one_copy` as for [`from_one`] (the tail must lie in
/// the last segment).
pub(crate) fn from_segs(
    mem: &GuestMemory,
    segs: &[(u64, u32)],
    feat: &NetFeatures,
    pool: &mut Pool,
    one_copy: usize,
) -> Result<Packet, ChainError> {
    let total: u64 = segs.iter().map(|s| u64::from(s.1)).sum();
    let hl = feat.hdr_len as u64;
    let flen = total.checked_sub(hl).ok_or(ChainError::Malformed)?;
    let flen = usize::try_from(flen).map_err(|_| ChainError::TooBig)?;
    let h = if feat.host.any() {
        let mut raw = [0u8; 10];
        read_span(mem, segs, 0, &mut raw)?;
        Some(Hdr::parse(&raw))
    } else {
        None
    };
    if wants_one_copy(flen, h.as_ref(), one_copy) {
        if let Some(&(addr, len)) = segs.last() {
            // Stream offset where the last segment starts; the tail must begin inside it.
            let last_at = total - u64::from(len);
            let tail_at = hl + HEAD_LEN as u64;
            if last_at <= tail_at {
                let mut p = pool.get();
                if read_span(mem, segs, hl, p.reset_for_fill(HEAD_LEN)).is_err() {
                    pool.put(p);
                    return Err(ChainError::Malformed);
                }
                let gpa = addr.checked_add(tail_at - last_at);
                if gpa.is_some_and(|g| try_defer(&mut p, mem, g, flen - HEAD_LEN)) {
                    return Ok(p);
                }
                pool.put(p);
            }
        }
    }
    let mut p = buffer_for(flen, h.as_ref(), pool)?;
    if read_span(mem, segs, hl, p.reset_for_fill(flen)).is_err() {
        pool.put(p);
        return Err(ChainError::Malformed);
    }
    match h {
        Some(h) => finish(p, &h, feat, pool),
        None => Ok(p),
    }
}
