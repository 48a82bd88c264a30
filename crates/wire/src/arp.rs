//! ARP for IPv4 over Ethernet (RFC 826).
//!
//! Owns: the [`ArpPacket`] view. Only the Ethernet/IPv4 form (htype 1, ptype 0x0800, hlen 6,
//! plen 4) passes `check_len`; other forms are [`Error::Unsupported`].
//! Threads: any; plain view, no state.
use crate::bytes::{be16, be32, mac};
use crate::{view_ctor, Error, Result};

/// Byte ranges of an Ethernet/IPv4 ARP packet.
pub mod field {
    use core::ops::Range;
    /// Hardware type.
    pub const HTYPE: Range<usize> = 0..2;
    /// Protocol type.
    pub const PTYPE: Range<usize> = 2..4;
    /// Hardware address length.
    pub const HLEN: usize = 4;
    /// Protocol address length.
    pub const PLEN: usize = 5;
    /// Operation.
    pub const OPER: Range<usize> = 6..8;
    /// Sender hardware address.
    pub const SHA: Range<usize> = 8..14;
    /// Sender protocol address.
    pub const SPA: Range<usize> = 14..18;
    /// Target hardware address.
    pub const THA: Range<usize> = 18..24;
    /// Target protocol address.
    pub const TPA: Range<usize> = 24..28;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;

/// A view of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

view_ctor!(ArpPacket);

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Ok if the buffer holds a whole Ethernet/IPv4 ARP packet.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < PACKET_LEN {
            return Err(Error::Truncated);
        }
        if be16(b, field::HTYPE.start) != 1
            || be16(b, field::PTYPE.start) != 0x0800
            || b[field::HLEN] != 6
            || b[field::PLEN] != 4
        {
            return Err(Error::Unsupported);
        }
        Ok(())
    }

    /// Operation (1 request, 2 reply).
    #[inline]
    pub fn oper(&self) -> u16 {
        be16(self.buffer.as_ref(), field::OPER.start)
    }
    /// Sender hardware address.
    #[inline]
    pub fn sha(&self) -> [u8; 6] {
        mac(self.buffer.as_ref(), field::SHA.start)
    }
    /// Sender IPv4 address.
    #[inline]
    pub fn spa(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SPA.start)
    }
    /// Target hardware address.
    #[inline]
    pub fn tha(&self) -> [u8; 6] {
        mac(self.buffer.as_ref(), field::THA.start)
    }
    /// Target IPv4 address.
    #[inline]
    pub fn tpa(&self) -> u32 {
        be32(self.buffer.as_ref(), field::TPA.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arp_request_and_unsupported_forms() {
        let mut p = [
            0, 1, 8, 0, 6, 4, 0, 1, 1, 2, 3, 4, 5, 6, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
        ];
        let a = ArpPacket::new_checked(&p[..]).unwrap();
        assert_eq!(a.oper(), 1);
        assert_eq!(a.sha(), [1, 2, 3, 4, 5, 6]);
        assert_eq!(a.spa(), 0x0a00_0001);
        assert_eq!(a.tpa(), 0x0a00_0002);
        assert_eq!(a.tha(), [0; 6]);
        assert_eq!(
            ArpPacket::new_checked(&p[..27]).unwrap_err(),
            Error::Truncated
        );
        p[5] = 16;
        assert_eq!(
            ArpPacket::new_checked(&p[..]).unwrap_err(),
            Error::Unsupported
        );
    }
}
