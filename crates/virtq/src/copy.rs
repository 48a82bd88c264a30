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
//! Threads: the PMD dequeuing, under the ring's slot lock.
use crate::queue::ChainError;
use crate::ring::NetFeatures;
use guestmem::GuestMemory;
use packet::vnet::Hdr;
use packet::{Packet, Pool, MAX_FRAME};

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

/// One buffer at `addr` of `len` bytes (`len >= feat.hdr_len`) holding header and frame.
#[inline]
pub(crate) fn from_one(
    mem: &GuestMemory,
    addr: u64,
    len: u32,
    feat: &NetFeatures,
    pool: &mut Pool,
) -> Result<Packet, ChainError> {
    let hl = feat.hdr_len as u64;
    let flen = (u64::from(len) - hl) as usize;
    let data = addr.checked_add(hl).ok_or(ChainError::Malformed)?;
    if !feat.host.any() {
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
    }
    let mut raw = [0u8; 10];
    mem.read(addr, &mut raw)?;
    let h = Hdr::parse(&raw);
    let mut p = buffer_for(flen, Some(&h), pool)?;
    if mem.read(data, p.reset_for_fill(flen)).is_err() {
        pool.put(p);
        return Err(ChainError::Malformed);
    }
    finish(p, &h, feat, pool)
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
/// left out) holding header and frame.
pub(crate) fn from_segs(
    mem: &GuestMemory,
    segs: &[(u64, u32)],
    feat: &NetFeatures,
    pool: &mut Pool,
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
