//! Software versions of the offloads a kernel or guest hands us half-done: completing a partial
//! (`CHECKSUM_PARTIAL` / `TP_STATUS_CSUMNOTREADY`) transport checksum, and segmenting a TCP
//! GSO frame (the large frames a veth with TSO on passes to a packet socket) into MSS-sized
//! frames with their IP and TCP headers and checksums fixed.
//!
//! Every input comes from a kernel and is checked as hostile: offsets beyond the frame, header
//! lengths that do not add up, a zero MSS are errors, never panics.
//!
//! Threads: pure functions; called on PMD threads.
use crate::checksum;

/// Why an offload could not be completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffloadError {
    /// The checksum offsets point past the frame.
    BadOffsets,
    /// Not an Ethernet (at most one VLAN tag) + IPv4/IPv6 (no extension headers) + TCP frame.
    NotTcp,
    /// Header lengths inconsistent with the frame, or an MSS of zero.
    Malformed,
    /// A segment would not fit the output buffer.
    TooBig,
}

/// Completes a partial checksum: the 16-bit field at `start + offset` holds the pseudo-header
/// sum; the one's complement of the sum of `frame[start..]` is written over it.
pub fn complete_partial(frame: &mut [u8], start: usize, offset: usize) -> Result<(), OffloadError> {
    let at = start.checked_add(offset).ok_or(OffloadError::BadOffsets)?;
    if at.checked_add(2).is_none_or(|e| e > frame.len()) {
        return Err(OffloadError::BadOffsets);
    }
    let c = !checksum::fold(checksum::sum(&frame[start..], 0));
    frame[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// Where the headers of a TCP frame are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TcpLayout {
    l3: usize,
    l4: usize,
    payload: usize,
    v6: bool,
}

fn tcp_layout(f: &[u8]) -> Result<TcpLayout, OffloadError> {
    if f.len() < 14 {
        return Err(OffloadError::NotTcp);
    }
    let mut l3 = 14;
    let mut et = u16::from_be_bytes([f[12], f[13]]);
    if (et == 0x8100 || et == 0x88a8) && f.len() >= 18 {
        // One VLAN tag (a tag pushed onto a GSO frame by an action).
        et = u16::from_be_bytes([f[16], f[17]]);
        l3 = 18;
    }
    let (v6, l4) = match et {
        0x0800 => {
            let b = f.get(l3).ok_or(OffloadError::NotTcp)?;
            let ihl = usize::from(b & 0x0f) * 4;
            if b >> 4 != 4 || ihl < 20 || f.len() < l3 + ihl || f[l3 + 9] != 6 {
                return Err(OffloadError::NotTcp);
            }
            (false, l3 + ihl)
        }
        0x86dd => {
            if f.len() < l3 + 40 || f[l3] >> 4 != 6 || f[l3 + 6] != 6 {
                return Err(OffloadError::NotTcp);
            }
            (true, l3 + 40)
        }
        _ => return Err(OffloadError::NotTcp),
    };
    let doff = usize::from(f.get(l4 + 12).ok_or(OffloadError::Malformed)? >> 4) * 4;
    if doff < 20 || f.len() < l4 + doff {
        return Err(OffloadError::Malformed);
    }
    Ok(TcpLayout {
        l3,
        l4,
        payload: l4 + doff,
        v6,
    })
}

/// Fixes the IP lengths (and IPv4 id and header checksum) and computes the TCP checksum of a
/// frame laid out as `t`, in place.
fn finish_segment(s: &mut [u8], t: &TcpLayout, ip_id_add: u16) {
    let tcp_len = s.len() - t.l4;
    let pseudo = if t.v6 {
        s[t.l3 + 4..t.l3 + 6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
        let src: [u8; 16] = s[t.l3 + 8..t.l3 + 24].try_into().unwrap_or([0; 16]);
        let dst: [u8; 16] = s[t.l3 + 24..t.l3 + 40].try_into().unwrap_or([0; 16]);
        checksum::pseudo_v6(&src, &dst, 6, tcp_len as u32)
    } else {
        let total = (s.len() - t.l3) as u16;
        s[t.l3 + 2..t.l3 + 4].copy_from_slice(&total.to_be_bytes());
        let id = u16::from_be_bytes([s[t.l3 + 4], s[t.l3 + 5]]).wrapping_add(ip_id_add);
        s[t.l3 + 4..t.l3 + 6].copy_from_slice(&id.to_be_bytes());
        s[t.l3 + 10..t.l3 + 12].copy_from_slice(&[0, 0]);
        let c = checksum::compute(&s[t.l3..t.l4]);
        s[t.l3 + 10..t.l3 + 12].copy_from_slice(&c.to_be_bytes());
        let ip = |o: usize| u32::from_be_bytes([s[o], s[o + 1], s[o + 2], s[o + 3]]);
        checksum::pseudo_v4(ip(t.l3 + 12), ip(t.l3 + 16), 6, tcp_len as u16)
    };
    s[t.l4 + 16..t.l4 + 18].copy_from_slice(&[0, 0]);
    let c = !checksum::fold(checksum::sum(&s[t.l4..], pseudo));
    s[t.l4 + 16..t.l4 + 18].copy_from_slice(&c.to_be_bytes());
}

/// Finishes a TCP GSO frame as one packet, without cutting it: IP length, IPv4 header checksum
/// and the TCP checksum over the whole payload (any partial checksum in the input is ignored).
/// For a copy handed to something that cannot segment, such as a controller's packet-in.
pub fn finish_unsegmented(frame: &mut [u8]) -> Result<(), OffloadError> {
    let t = tcp_layout(frame)?;
    let ip_len = frame.len() - t.l3 - if t.v6 { 40 } else { 0 };
    if ip_len > usize::from(u16::MAX) {
        return Err(OffloadError::TooBig);
    }
    finish_segment(frame, &t, 0);
    Ok(())
}

/// Splits a TCP frame whose payload exceeds `mss` into frames of at most `mss` payload bytes,
/// each built in `buf` (resized; its capacity is reused) and handed to `emit`. Headers are
/// copied; the sequence number advances, FIN and PSH stay only on the last segment and CWR only
/// on the first; IP lengths, IPv4 ids and every checksum are recomputed (any partial checksum
/// in the input is ignored). A frame whose payload fits `mss` is emitted once, checksummed.
/// Returns the number of segments. `max_len` bounds each segment's length.
pub fn segment_tcp(
    frame: &[u8],
    mss: usize,
    max_len: usize,
    buf: &mut Vec<u8>,
    mut emit: impl FnMut(&[u8]),
) -> Result<usize, OffloadError> {
    let t = tcp_layout(frame)?;
    if mss == 0 {
        return Err(OffloadError::Malformed);
    }
    if t.payload + mss.min(frame.len() - t.payload) > max_len {
        return Err(OffloadError::TooBig);
    }
    let data = &frame[t.payload..];
    let seq0 = u32::from_be_bytes([
        frame[t.l4 + 4],
        frame[t.l4 + 5],
        frame[t.l4 + 6],
        frame[t.l4 + 7],
    ]);
    let flags0 = frame[t.l4 + 13];
    let chunks = data.len().div_ceil(mss).max(1);
    for i in 0..chunks {
        let chunk = &data[(i * mss).min(data.len())..((i + 1) * mss).min(data.len())];
        buf.clear();
        buf.extend_from_slice(&frame[..t.payload]);
        buf.extend_from_slice(chunk);
        let seq = seq0.wrapping_add((i * mss) as u32);
        buf[t.l4 + 4..t.l4 + 8].copy_from_slice(&seq.to_be_bytes());
        let mut flags = flags0;
        if i + 1 < chunks {
            flags &= !0x09; // FIN, PSH
        }
        if i > 0 {
            flags &= !0x80; // CWR
        }
        buf[t.l4 + 13] = flags;
        finish_segment(buf, &t, i as u16);
        emit(buf);
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp4(payload: usize, flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20 + payload];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[14 + 8] = 64;
        f[14 + 9] = 6;
        f[14 + 12..14 + 16].copy_from_slice(&[10, 0, 0, 1]);
        f[14 + 16..14 + 20].copy_from_slice(&[10, 0, 0, 2]);
        f[34 + 4..34 + 8].copy_from_slice(&1000u32.to_be_bytes());
        f[34 + 12] = 5 << 4;
        f[34 + 13] = flags;
        for (i, b) in f[54..].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    fn tcp_ok(s: &[u8]) -> bool {
        let ip = |o: usize| u32::from_be_bytes([s[o], s[o + 1], s[o + 2], s[o + 3]]);
        let len = (s.len() - 34) as u16;
        let p = checksum::pseudo_v4(ip(26), ip(30), 6, len);
        checksum::fold(checksum::sum(&s[34..], p)) == 0xffff
    }

    #[test]
    fn partial_checksum_is_completed() {
        let mut f = tcp4(100, 0x18);
        let len = (f.len() - 34) as u16;
        let p = checksum::fold(checksum::pseudo_v4(0x0a00_0001, 0x0a00_0002, 6, len));
        f[34 + 16..34 + 18].copy_from_slice(&p.to_be_bytes());
        assert!(!tcp_ok(&f));
        complete_partial(&mut f, 34, 16).unwrap();
        assert!(tcp_ok(&f));
    }

    #[test]
    fn a_gso_frame_is_finished_whole_for_a_copy() {
        let mut f = tcp4(20_000, 0x18);
        f[14 + 2..14 + 4].copy_from_slice(&[0, 0]); // length left to the segmenter
        assert!(!tcp_ok(&f));
        finish_unsegmented(&mut f).unwrap();
        assert_eq!(
            usize::from(u16::from_be_bytes([f[16], f[17]])),
            f.len() - 14
        );
        assert_eq!(
            checksum::fold(checksum::sum(&f[14..34], 0)),
            0xffff,
            "IPv4 header"
        );
        assert!(tcp_ok(&f));
        let mut big = tcp4(70_000, 0x18);
        assert_eq!(finish_unsegmented(&mut big), Err(OffloadError::TooBig));
        assert_eq!(
            finish_unsegmented(&mut [0u8; 20]),
            Err(OffloadError::NotTcp)
        );
    }

    #[test]
    fn partial_offsets_past_the_end_are_refused() {
        let mut f = vec![0u8; 40];
        assert_eq!(
            complete_partial(&mut f, 38, 1),
            Err(OffloadError::BadOffsets)
        );
        assert_eq!(
            complete_partial(&mut f, 41, 0),
            Err(OffloadError::BadOffsets)
        );
        assert_eq!(
            complete_partial(&mut f, usize::MAX, 2),
            Err(OffloadError::BadOffsets)
        );
        assert!(complete_partial(&mut f, 30, 8).is_ok());
    }

    #[test]
    fn segments_carry_the_stream_and_valid_checksums() {
        let f = tcp4(3000, 0x19); // FIN|PSH|ACK... (ACK 0x10, PSH 0x08, FIN 0x01)
        let mut buf = Vec::new();
        let mut segs = Vec::new();
        let n = segment_tcp(&f, 1448, 1514, &mut buf, |s| segs.push(s.to_vec())).unwrap();
        assert_eq!(n, 3);
        let mut stream = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            assert!(tcp_ok(s), "segment {i} tcp checksum");
            assert!(checksum::verify(&s[14..34]), "segment {i} ip checksum");
            assert_eq!(
                usize::from(u16::from_be_bytes([s[16], s[17]])),
                s.len() - 14
            );
            let seq = u32::from_be_bytes([s[38], s[39], s[40], s[41]]);
            assert_eq!(seq, 1000 + (i * 1448) as u32);
            let fin_psh = s[47] & 0x09;
            assert_eq!(fin_psh, if i == 2 { 0x09 } else { 0 });
            stream.extend_from_slice(&s[54..]);
        }
        assert_eq!(stream, f[54..]);
    }

    #[test]
    fn bad_frames_are_errors() {
        let mut buf = Vec::new();
        assert_eq!(
            segment_tcp(&[0u8; 10], 100, 1514, &mut buf, |_| {}),
            Err(OffloadError::NotTcp)
        );
        let f = tcp4(10, 0);
        assert_eq!(
            segment_tcp(&f, 0, 1514, &mut buf, |_| {}),
            Err(OffloadError::Malformed)
        );
        let mut g = f.clone();
        g[46] = 15 << 4; // data offset 60 bytes past a 64-byte frame
        assert_eq!(
            segment_tcp(&g, 100, 1514, &mut buf, |_| {}),
            Err(OffloadError::Malformed)
        );
        assert_eq!(
            segment_tcp(&tcp4(3000, 0), 2000, 1514, &mut buf, |_| {}),
            Err(OffloadError::TooBig)
        );
    }
}
