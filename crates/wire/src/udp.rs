//! UDP headers (RFC 768).
//!
//! Owns: the [`UdpPacket`] view.
//! Threads: any; plain view, no state.
use crate::bytes::{be16, put16};
use crate::{need_len, view_ctor, Result};

/// Byte ranges of the UDP header.
pub mod field {
    use core::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Length of header and data.
    pub const LENGTH: Range<usize> = 4..6;
    /// Checksum (0 = none, IPv4 only).
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// UDP header length.
pub const HEADER_LEN: usize = 8;

/// A view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

view_ctor!(UdpPacket);

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Ok if the header fits.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need_len(self.buffer.as_ref(), HEADER_LEN)
    }
    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }
    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }
    /// Length field.
    #[inline]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }
    /// True if the length field says there is no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }
    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }
    /// Payload after the header, bounded by the length field and the buffer.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = usize::from(self.len()).clamp(HEADER_LEN, b.len());
        &b[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port (checksum not touched).
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::SRC_PORT.start, v);
    }
    /// Sets the destination port (checksum not touched).
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::DST_PORT.start, v);
    }
    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_fields_and_bounded_payload() {
        let h = [0x00, 0x35, 0x13, 0x88, 0x00, 0x0a, 0xab, 0xcd, 1, 2, 3, 4];
        let u = UdpPacket::new_checked(&h[..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port()), (53, 5000));
        assert_eq!((u.len(), u.checksum()), (10, 0xabcd));
        assert_eq!(u.payload(), &[1, 2]);
        assert!(!u.is_empty());
        assert!(UdpPacket::new_checked(&h[..7]).is_err());
        // A length field below the header size yields an empty payload, not a panic.
        let bad = [0, 1, 0, 2, 0, 3, 0, 0];
        assert!(UdpPacket::new_checked(&bad[..])
            .unwrap()
            .payload()
            .is_empty());
    }
}
