//! Tunnel headers: VXLAN (RFC 7348) and Geneve (RFC 8926).
//!
//! Owns: the [`VxlanHeader`] and [`GeneveHeader`] views (the UDP payload of a tunnel packet).
//! The datapath does not terminate tunnels yet; these views are for parsing and tests.
//! Threads: any; plain views, no state.
use crate::bytes::{be16, be32};
use crate::{view_ctor, Error, Result};

/// UDP port of VXLAN.
pub const VXLAN_PORT: u16 = 4789;
/// UDP port of Geneve.
pub const GENEVE_PORT: u16 = 6081;

/// Byte ranges of the VXLAN header.
pub mod vxlan_field {
    use core::ops::Range;
    /// Flags (bit 0x08: VNI valid).
    pub const FLAGS: usize = 0;
    /// VNI (24 bits) followed by a reserved byte.
    pub const VNI: Range<usize> = 4..8;
}

/// VXLAN header length.
pub const VXLAN_LEN: usize = 8;

/// A view of a VXLAN header.
#[derive(Debug, Clone)]
pub struct VxlanHeader<T: AsRef<[u8]>> {
    buffer: T,
}

view_ctor!(VxlanHeader);

impl<T: AsRef<[u8]>> VxlanHeader<T> {
    /// Ok if the header fits and the I flag (VNI valid) is set.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < VXLAN_LEN {
            return Err(Error::Truncated);
        }
        if b[vxlan_field::FLAGS] & 0x08 == 0 {
            return Err(Error::Malformed);
        }
        Ok(())
    }
    /// The VXLAN network identifier.
    #[inline]
    pub fn vni(&self) -> u32 {
        be32(self.buffer.as_ref(), vxlan_field::VNI.start) >> 8
    }
    /// The encapsulated Ethernet frame.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[VXLAN_LEN..]
    }
}

/// Byte ranges of the Geneve header.
pub mod geneve_field {
    use core::ops::Range;
    /// Version (2 bits) and option length (6 bits, in 4-byte words).
    pub const VER_OPTLEN: usize = 0;
    /// O (control) and C (critical options) flags.
    pub const FLAGS: usize = 1;
    /// Protocol type of the payload (0x6558 = Ethernet).
    pub const PROTOCOL: Range<usize> = 2..4;
    /// VNI (24 bits) followed by a reserved byte.
    pub const VNI: Range<usize> = 4..8;
}

/// Fixed Geneve header length (options follow).
pub const GENEVE_MIN_LEN: usize = 8;

/// A view of a Geneve header.
#[derive(Debug, Clone)]
pub struct GeneveHeader<T: AsRef<[u8]>> {
    buffer: T,
}

view_ctor!(GeneveHeader);

impl<T: AsRef<[u8]>> GeneveHeader<T> {
    /// Ok if the version is 0 and the header with its options fits.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < GENEVE_MIN_LEN {
            return Err(Error::Truncated);
        }
        if b[geneve_field::VER_OPTLEN] >> 6 != 0 {
            return Err(Error::Unsupported);
        }
        if b.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }
    /// Header length including options.
    #[inline]
    pub fn header_len(&self) -> usize {
        GENEVE_MIN_LEN + usize::from(self.buffer.as_ref()[geneve_field::VER_OPTLEN] & 0x3f) * 4
    }
    /// True for a control (OAM) packet.
    #[inline]
    pub fn is_control(&self) -> bool {
        self.buffer.as_ref()[geneve_field::FLAGS] & 0x80 != 0
    }
    /// Protocol type of the payload.
    #[inline]
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), geneve_field::PROTOCOL.start)
    }
    /// The virtual network identifier.
    #[inline]
    pub fn vni(&self) -> u32 {
        be32(self.buffer.as_ref(), geneve_field::VNI.start) >> 8
    }
    /// The option bytes.
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[GENEVE_MIN_LEN..self.header_len()]
    }
    /// The encapsulated frame.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vxlan_vni() {
        let h = [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0, 0xaa];
        let v = VxlanHeader::new_checked(&h[..]).unwrap();
        assert_eq!(v.vni(), 0x123456);
        assert_eq!(v.payload(), &[0xaa]);
        assert_eq!(
            VxlanHeader::new_checked(&[0u8; 8][..]).unwrap_err(),
            Error::Malformed
        );
    }

    #[test]
    fn geneve_options_bounded() {
        let h = [0x01, 0x80, 0x65, 0x58, 0, 0, 7, 0, 1, 2, 3, 4, 9];
        let g = GeneveHeader::new_checked(&h[..]).unwrap();
        assert_eq!((g.header_len(), g.vni(), g.protocol()), (12, 7, 0x6558));
        assert!(g.is_control());
        assert_eq!(g.options(), &[1, 2, 3, 4]);
        assert_eq!(g.payload(), &[9]);
        assert_eq!(
            GeneveHeader::new_checked(&h[..11]).unwrap_err(),
            Error::Truncated
        );
    }
}
