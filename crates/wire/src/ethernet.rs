//! Ethernet II frames and 802.1Q / 802.1ad VLAN tags.
//!
//! Owns: [`EthernetFrame`] and [`VlanTag`] views and the [`ethertype`] constants.
//! Threads: any; plain views, no state.
use crate::bytes::{be16, mac, put16};
use crate::{need_len, view_ctor, Result};

/// EtherType values the datapath understands.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service VLAN tag (QinQ outer).
    pub const QINQ: u16 = 0x88a8;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// Values below this are 802.3 lengths, not types.
    pub const MIN_TYPE: u16 = 0x0600;
    /// What the flow key holds for an 802.3 (length-field) frame, as OVS does.
    pub const NONE: u16 = 0x05ff;

    /// True for a VLAN tag protocol identifier.
    #[inline]
    pub const fn is_vlan(t: u16) -> bool {
        t == VLAN || t == QINQ
    }
}

/// Byte ranges of the Ethernet header.
pub mod field {
    use core::ops::Range;
    /// Destination MAC.
    pub const DST: Range<usize> = 0..6;
    /// Source MAC.
    pub const SRC: Range<usize> = 6..12;
    /// EtherType (or TPID of the first VLAN tag).
    pub const ETHERTYPE: Range<usize> = 12..14;
    /// First payload byte.
    pub const PAYLOAD: usize = 14;
}

/// Ethernet header length.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// A view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

view_ctor!(EthernetFrame);

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Ok if the buffer holds a whole header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need_len(self.buffer.as_ref(), HEADER_LEN)
    }

    /// Destination MAC.
    #[inline]
    pub fn dst(&self) -> [u8; 6] {
        mac(self.buffer.as_ref(), field::DST.start)
    }

    /// Source MAC.
    #[inline]
    pub fn src(&self) -> [u8; 6] {
        mac(self.buffer.as_ref(), field::SRC.start)
    }

    /// EtherType (the TPID if a VLAN tag follows).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE.start)
    }

    /// Everything after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC.
    #[inline]
    pub fn set_dst(&mut self, m: [u8; 6]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&m);
    }

    /// Sets the source MAC.
    #[inline]
    pub fn set_src(&mut self, m: [u8; 6]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&m);
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        put16(self.buffer.as_mut(), field::ETHERTYPE.start, t);
    }
}

/// Byte ranges of a VLAN tag as it follows the TPID: TCI, then the inner EtherType.
pub mod vlan_field {
    use core::ops::Range;
    /// Tag control information (PCP 3 bits, DEI 1 bit, VID 12 bits).
    pub const TCI: Range<usize> = 0..2;
    /// EtherType of what the tag encloses.
    pub const ETHERTYPE: Range<usize> = 2..4;
}

/// Length of a VLAN tag after its TPID (the TPID sits in the preceding EtherType field).
pub const VLAN_TAG_LEN: usize = 4;

/// A view of an 802.1Q tag body (TCI and inner EtherType).
#[derive(Debug, Clone)]
pub struct VlanTag<T: AsRef<[u8]>> {
    buffer: T,
}

view_ctor!(VlanTag);

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// Ok if the buffer holds a whole tag.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        need_len(self.buffer.as_ref(), VLAN_TAG_LEN)
    }

    /// The whole TCI.
    #[inline]
    pub fn tci(&self) -> u16 {
        be16(self.buffer.as_ref(), vlan_field::TCI.start)
    }

    /// VLAN id (12 bits).
    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// Priority code point (3 bits).
    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Inner EtherType.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), vlan_field::ETHERTYPE.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    /// Sets the TCI.
    #[inline]
    pub fn set_tci(&mut self, tci: u16) {
        put16(self.buffer.as_mut(), vlan_field::TCI.start, tci);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn ethernet_fields_and_truncation() {
        let mut f = [0u8; 18];
        f[..6].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        f[6..12].copy_from_slice(&[7, 8, 9, 10, 11, 12]);
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f[14..18].copy_from_slice(&[0x20, 0x64, 0x08, 0x00]);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.dst(), [1, 2, 3, 4, 5, 6]);
        assert_eq!(e.src(), [7, 8, 9, 10, 11, 12]);
        assert!(ethertype::is_vlan(e.ethertype()));
        let t = VlanTag::new_checked(e.payload()).unwrap();
        assert_eq!((t.vid(), t.pcp(), t.ethertype()), (100, 1, ethertype::IPV4));
        assert_eq!(
            EthernetFrame::new_checked(&f[..13]).unwrap_err(),
            Error::Truncated
        );
        assert!(VlanTag::new_checked(&f[14..17]).is_err());
    }

    #[test]
    fn ethernet_setters() {
        let mut f = [0u8; 14];
        let mut e = EthernetFrame::new_checked(&mut f[..]).unwrap();
        e.set_dst([9; 6]);
        e.set_src([8; 6]);
        e.set_ethertype(ethertype::ARP);
        assert_eq!(&f[..6], &[9; 6]);
        assert_eq!(&f[6..12], &[8; 6]);
        assert_eq!(&f[12..], &[0x08, 0x06]);
    }
}
