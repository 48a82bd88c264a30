//! TCP headers (RFC 9293).
//!
//! Owns: the [`TcpPacket`] view; `check_len` accepts a header whose data offset is at least 5
//! words and fits in the buffer.
//! Threads: any; plain view, no state.
use crate::bytes::{be16, be32, put16};
use crate::{view_ctor, Error, Result};

/// Byte ranges of the fixed TCP header.
pub mod field {
    use core::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Sequence number.
    pub const SEQ: Range<usize> = 4..8;
    /// Acknowledgment number.
    pub const ACK: Range<usize> = 8..12;
    /// Data offset (4 bits), reserved (3), flags (9).
    pub const OFF_FLAGS: Range<usize> = 12..14;
    /// Window.
    pub const WINDOW: Range<usize> = 14..16;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 16..18;
    /// Urgent pointer.
    pub const URGENT: Range<usize> = 18..20;
}

/// Length of a header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// TCP flag bits as they appear in the low 12 bits of the offset/flags word.
pub mod flags {
    /// FIN.
    pub const FIN: u16 = 0x001;
    /// SYN.
    pub const SYN: u16 = 0x002;
    /// RST.
    pub const RST: u16 = 0x004;
    /// PSH.
    pub const PSH: u16 = 0x008;
    /// ACK.
    pub const ACK: u16 = 0x010;
    /// URG.
    pub const URG: u16 = 0x020;
}

/// A view of a TCP segment.
#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

view_ctor!(TcpPacket);

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Ok if the header, options included, fits and the data offset is valid.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = usize::from(b[field::OFF_FLAGS.start] >> 4) * 4;
        if hl < MIN_HEADER_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        Ok(())
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
    /// Sequence number.
    #[inline]
    pub fn seq(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ.start)
    }
    /// Acknowledgment number.
    #[inline]
    pub fn ack(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK.start)
    }
    /// Header length in bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::OFF_FLAGS.start] >> 4) * 4
    }
    /// Flags (low 12 bits, as the flow key holds them).
    #[inline]
    pub fn flags(&self) -> u16 {
        be16(self.buffer.as_ref(), field::OFF_FLAGS.start) & 0x0fff
    }
    /// Window.
    #[inline]
    pub fn window(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WINDOW.start)
    }
    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }
    /// Payload after the header and options.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
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
    fn tcp_fields_and_bad_offsets() {
        let mut h = [0u8; 24];
        h[..4].copy_from_slice(&[0x04, 0xd2, 0x00, 0x50]);
        h[4..8].copy_from_slice(&7u32.to_be_bytes());
        h[12] = 0x60; // 24-byte header
        h[13] = (flags::SYN | flags::ACK) as u8;
        let t = TcpPacket::new_checked(&h[..]).unwrap();
        assert_eq!((t.src_port(), t.dst_port(), t.seq()), (1234, 80, 7));
        assert_eq!((t.header_len(), t.flags()), (24, 0x12));
        assert!(t.payload().is_empty());
        assert_eq!(
            TcpPacket::new_checked(&h[..23]).unwrap_err(),
            Error::Truncated
        );
        h[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&h[..]).unwrap_err(),
            Error::Malformed
        );
    }
}
