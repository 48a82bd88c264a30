//! ICMP (RFC 792) and ICMPv6 (RFC 4443) message headers.
//!
//! Owns: the [`IcmpPacket`] and [`Icmpv6Packet`] views (type, code, checksum; for ICMPv6
//! neighbor discovery also the target address).
//! Threads: any; plain views, no state.
use crate::bytes::{addr16, be16};
use crate::{need_len, view_ctor, Result};

/// Byte ranges of the ICMP / ICMPv6 header.
pub mod field {
    use core::ops::Range;
    /// Message type.
    pub const TYPE: usize = 0;
    /// Message code.
    pub const CODE: usize = 1;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 2..4;
    /// Neighbor solicitation / advertisement target address (ICMPv6 types 135, 136).
    pub const ND_TARGET: Range<usize> = 8..24;
}

/// Bytes of type, code and checksum.
pub const HEADER_LEN: usize = 4;

/// A view of an ICMP message.
#[derive(Debug, Clone)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

view_ctor!(IcmpPacket);

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// Ok if type, code and checksum fit.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need_len(self.buffer.as_ref(), HEADER_LEN)
    }
    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// Message code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }
}

/// A view of an ICMPv6 message.
#[derive(Debug, Clone)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

view_ctor!(Icmpv6Packet);

/// Neighbor solicitation.
pub const ND_NEIGHBOR_SOLICIT: u8 = 135;
/// Neighbor advertisement.
pub const ND_NEIGHBOR_ADVERT: u8 = 136;

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Ok if type, code and checksum fit.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need_len(self.buffer.as_ref(), HEADER_LEN)
    }
    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// Message code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }
    /// Target address of a neighbor solicitation or advertisement, if this is one and it fits.
    pub fn nd_target(&self) -> Option<[u8; 16]> {
        let b = self.buffer.as_ref();
        let t = self.msg_type();
        if (t == ND_NEIGHBOR_SOLICIT || t == ND_NEIGHBOR_ADVERT) && b.len() >= field::ND_TARGET.end
        {
            Some(addr16(b, field::ND_TARGET.start))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn icmp_echo_and_truncation() {
        let m = [8u8, 0, 0xf7, 0xff];
        let p = IcmpPacket::new_checked(&m[..]).unwrap();
        assert_eq!((p.msg_type(), p.code(), p.checksum()), (8, 0, 0xf7ff));
        assert!(IcmpPacket::new_checked(&m[..3]).is_err());
    }

    #[test]
    fn icmpv6_nd_target() {
        let mut m = [0u8; 24];
        m[0] = ND_NEIGHBOR_SOLICIT;
        m[8..24].copy_from_slice(&[0xfe; 16]);
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(p.nd_target(), Some([0xfe; 16]));
        let short = Icmpv6Packet::new_checked(&m[..20]).unwrap();
        assert_eq!(short.nd_target(), None);
        m[0] = 128;
        assert_eq!(Icmpv6Packet::new_checked(&m[..]).unwrap().nd_target(), None);
    }
}
