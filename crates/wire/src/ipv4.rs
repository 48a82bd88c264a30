//! IPv4 headers (RFC 791).
//!
//! Owns: the [`Ipv4Packet`] view. `check_len` accepts a header whose IHL and total length are
//! consistent and whose header fits in the buffer; the payload is bounded by both the buffer
//! and the total length (Ethernet padding is not payload; a short buffer yields a short payload).
//! Threads: any; plain view, no state.
use crate::bytes::{be16, be32, put16, put32};
use crate::{checksum, view_ctor, Error, Result};

/// Byte ranges of the fixed IPv4 header.
pub mod field {
    use core::ops::Range;
    /// Version (high nibble) and IHL (low nibble, in 32-bit words).
    pub const VER_IHL: usize = 0;
    /// DSCP (6 bits) and ECN (2 bits).
    pub const TOS: usize = 1;
    /// Total length.
    pub const LENGTH: Range<usize> = 2..4;
    /// Identification.
    pub const IDENT: Range<usize> = 4..6;
    /// Flags (3 bits) and fragment offset (13 bits).
    pub const FLG_OFF: Range<usize> = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Range<usize> = 10..12;
    /// Source address.
    pub const SRC: Range<usize> = 12..16;
    /// Destination address.
    pub const DST: Range<usize> = 16..20;
}

/// Length of a header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// IP protocol numbers the datapath understands.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// SCTP.
    pub const SCTP: u8 = 132;
}

/// A view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

view_ctor!(Ipv4Packet);

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Ok if the version is 4, IHL ≥ 5, the header fits, and total length ≥ header length.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = usize::from(b[field::VER_IHL] & 0x0f) * 4;
        if b[field::VER_IHL] >> 4 != 4 || hl < MIN_HEADER_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        if usize::from(be16(b, field::LENGTH.start)) < hl {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// Version field.
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }
    /// DSCP and ECN byte.
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }
    /// Total length field.
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }
    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT.start)
    }
    /// Don't-fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & 0x4000 != 0
    }
    /// More-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & 0x2000 != 0
    }
    /// Fragment offset in 8-byte units.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & 0x1fff
    }
    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Protocol of the payload.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    /// Header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }
    /// Source address.
    #[inline]
    pub fn src(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SRC.start)
    }
    /// Destination address.
    #[inline]
    pub fn dst(&self) -> u32 {
        be32(self.buffer.as_ref(), field::DST.start)
    }
    /// True if the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(&self.buffer.as_ref()[..self.header_len()])
    }
    /// The payload: after the header, up to the total length or the buffer's end.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = usize::from(self.total_len()).min(b.len());
        b.get(self.header_len()..end).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the TOS byte (checksum not touched).
    #[inline]
    pub fn set_tos(&mut self, v: u8) {
        self.buffer.as_mut()[field::TOS] = v;
    }
    /// Sets the source address (checksum not touched).
    #[inline]
    pub fn set_src(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::SRC.start, v);
    }
    /// Sets the destination address (checksum not touched).
    #[inline]
    pub fn set_dst(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::DST.start, v);
    }
    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }
    /// Recomputes the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = checksum::compute(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr() -> [u8; 24] {
        let mut h = [0u8; 24];
        h[..20].copy_from_slice(&[
            0x45, 0xb8, 0, 24, 0, 1, 0x20, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        h
    }

    #[test]
    fn fields_checksum_and_payload() {
        let mut h = hdr();
        let mut p = Ipv4Packet::new_checked(&mut h[..]).unwrap();
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!((p.version(), p.header_len(), p.tos()), (4, 20, 0xb8));
        assert_eq!((p.ttl(), p.protocol(), p.total_len()), (64, 17, 24));
        assert!(p.more_frags() && !p.dont_frag());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!((p.src(), p.dst()), (0x0a00_0001, 0x0a00_0002));
        assert_eq!(p.payload().len(), 4);
    }

    #[test]
    fn bad_headers_are_refused() {
        let h = hdr();
        assert_eq!(
            Ipv4Packet::new_checked(&h[..19]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = h;
        bad[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).unwrap_err(),
            Error::Malformed
        );
        let mut long = h;
        long[0] = 0x4f; // 60-byte header in a 24-byte buffer
        assert_eq!(
            Ipv4Packet::new_checked(&long[..]).unwrap_err(),
            Error::Truncated
        );
        let mut short_total = h;
        short_total[3] = 10;
        assert!(Ipv4Packet::new_checked(&short_total[..]).is_err());
    }
}
