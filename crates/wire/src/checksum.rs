//! Internet checksum (RFC 1071) and its incremental update (RFC 1624, eqn. 3).
//!
//! Owns: one's-complement sums over bytes, pseudo-header sums, and the update helpers set-field
//! actions use so a rewrite never re-reads the payload.
//! Threads: any; pure functions.

/// Folds a 32-bit (or wider) one's-complement accumulator to 16 bits.
#[inline]
pub fn fold(mut sum: u64) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// One's-complement sum of `data` (as big-endian 16-bit words, odd byte padded with zero),
/// added to `initial`. Not folded or inverted.
pub fn sum(data: &[u8], initial: u64) -> u64 {
    let mut acc = initial;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// The checksum field value for `data` (whose checksum field is zero): `!fold(sum)`.
#[inline]
pub fn compute(data: &[u8]) -> u16 {
    !fold(sum(data, 0))
}

/// True if `data`, checksum field included, sums to all ones.
#[inline]
pub fn verify(data: &[u8]) -> bool {
    fold(sum(data, 0)) == 0xffff
}

/// The IPv4 pseudo-header sum for a transport checksum.
#[inline]
pub fn pseudo_v4(src: u32, dst: u32, proto: u8, len: u16) -> u64 {
    u64::from(src >> 16)
        + u64::from(src & 0xffff)
        + u64::from(dst >> 16)
        + u64::from(dst & 0xffff)
        + u64::from(proto)
        + u64::from(len)
}

/// The IPv6 pseudo-header sum for a transport checksum.
pub fn pseudo_v6(src: &[u8; 16], dst: &[u8; 16], proto: u8, len: u32) -> u64 {
    let s = sum(src, 0) + sum(dst, 0);
    s + u64::from(len >> 16) + u64::from(len & 0xffff) + u64::from(proto)
}

/// New checksum after a 16-bit word covered by it changed from `old` to `new`
/// (RFC 1624 eqn. 3: `HC' = ~(~HC + ~m + m')`).
#[inline]
pub fn update16(csum: u16, old: u16, new: u16) -> u16 {
    let s = u64::from(!csum) + u64::from(!old) + u64::from(new);
    !fold(s)
}

/// New checksum after a 32-bit value covered by it (two aligned words) changed.
#[inline]
pub fn update32(csum: u16, old: u32, new: u32) -> u16 {
    let s = u64::from(!csum)
        + u64::from(!(old >> 16) as u16)
        + u64::from(!(old as u16))
        + u64::from((new >> 16) as u16)
        + u64::from(new as u16);
    !fold(s)
}

/// Like [`update16`] for a UDP checksum: a zero checksum (IPv4 "none") stays zero, and a
/// computed zero is sent as `0xffff`.
#[inline]
pub fn update16_udp(csum: u16, old: u16, new: u16) -> u16 {
    if csum == 0 {
        return 0;
    }
    match update16(csum, old, new) {
        0 => 0xffff,
        c => c,
    }
}

/// Like [`update32`] with the UDP rules of [`update16_udp`].
#[inline]
pub fn update32_udp(csum: u16, old: u32, new: u32) -> u16 {
    if csum == 0 {
        return 0;
    }
    match update32(csum, old, new) {
        0 => 0xffff,
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3 example bytes: sum 0xddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&d, 0)), 0xddf2);
        assert_eq!(compute(&d), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(fold(sum(&[0x12, 0x34, 0x56], 0)), 0x1234 + 0x5600);
    }

    #[test]
    fn incremental_matches_recompute() {
        let mut d = [
            0x45u8, 0, 0, 40, 0x12, 0x34, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let c = compute(&d);
        d[10..12].copy_from_slice(&c.to_be_bytes());
        assert!(verify(&d));
        let old = u32::from_be_bytes([d[12], d[13], d[14], d[15]]);
        let new: u32 = 0xc0a8_0101;
        d[12..16].copy_from_slice(&new.to_be_bytes());
        let c2 = update32(c, old, new);
        d[10..12].copy_from_slice(&c2.to_be_bytes());
        assert!(verify(&d));
        d[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(compute(&d), c2);
    }

    #[test]
    fn udp_zero_rules() {
        assert_eq!(update16_udp(0, 1, 2), 0);
        // ~0xffff + ~0 + 0 = 0xffff, whose complement is 0: UDP must send 0xffff instead.
        assert_eq!(update16(0xffff, 0, 0), 0);
        assert_eq!(update16_udp(0xffff, 0, 0), 0xffff);
        assert_eq!(update32_udp(0, 1, 2), 0);
    }
}
