//! Parsers of the metadata the kernel puts beside a frame: the virtio-net header
//! (`PACKET_VNET_HDR`, `IFF_VNET_HDR`) and the packet-socket control messages
//! (`PACKET_AUXDATA`: VLAN tag the kernel stripped, checksum state), and the `tpacket2_hdr` at
//! the start of each slot of a `PACKET_RX_RING` (`af-packet` ports): its offsets are checked
//! against the slot before anything is read through them. Pure functions over bytes, fuzzed
//! (`crates/ports/fuzz`); everything is checked, nothing here panics.
//!
//! Threads: any; called on PMD threads.

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`.
pub const NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
pub const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_TCPV6`.
pub const GSO_TCPV6: u8 = 4;
/// `VIRTIO_NET_HDR_GSO_ECN` (a flag on the type).
pub const GSO_ECN: u8 = 0x80;

/// What a frame's virtio-net header asks of us.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `flags` (`NEEDS_CSUM`, ...).
    pub flags: u8,
    /// `gso_type` without the ECN bit.
    pub gso_type: u8,
    /// Length of the headers (a hint).
    pub hdr_len: u16,
    /// Segment payload size for GSO frames.
    pub gso_size: u16,
    /// Where the partial checksum's coverage starts.
    pub csum_start: u16,
    /// Offset of the checksum field from `csum_start`.
    pub csum_offset: u16,
}

/// Why a virtio-net header was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VnetError {
    /// Fewer than 10 bytes.
    Short,
    /// `csum_start + csum_offset + 2` passes the end of the frame.
    CsumPastEnd,
    /// A GSO type we do not segment, or GSO with a zero size.
    BadGso,
}

impl VnetHdr {
    /// Parses the 10-byte header (host byte order, as the kernel writes it without
    /// `TUNSETVNETLE`/`BE`).
    pub fn parse(b: &[u8]) -> Result<VnetHdr, VnetError> {
        if b.len() < 10 {
            return Err(VnetError::Short);
        }
        let u = |o: usize| u16::from_ne_bytes([b[o], b[o + 1]]);
        Ok(VnetHdr {
            flags: b[0],
            gso_type: b[1] & !GSO_ECN,
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        })
    }

    /// Checks the header against the frame it came with (`frame_len` bytes).
    pub fn check(&self, frame_len: usize) -> Result<(), VnetError> {
        if self.flags & NEEDS_CSUM != 0 {
            let end = usize::from(self.csum_start) + usize::from(self.csum_offset) + 2;
            if end > frame_len {
                return Err(VnetError::CsumPastEnd);
            }
        }
        match self.gso_type {
            GSO_NONE => Ok(()),
            GSO_TCPV4 | GSO_TCPV6 if self.gso_size > 0 => Ok(()),
            _ => Err(VnetError::BadGso),
        }
    }

    /// True if the checksum is partial and must be completed.
    pub fn needs_csum(&self) -> bool {
        self.flags & NEEDS_CSUM != 0
    }

    /// True for a GSO frame.
    pub fn is_gso(&self) -> bool {
        self.gso_type != GSO_NONE
    }
}

/// `SOL_PACKET`.
const SOL_PACKET: i32 = 263;
/// `PACKET_AUXDATA`.
const PACKET_AUXDATA: i32 = 8;
/// `TP_STATUS_CSUMNOTREADY`.
pub const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
/// `TP_STATUS_VLAN_VALID`.
pub const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
/// `TP_STATUS_VLAN_TPID_VALID`.
pub const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// What a packet's `tpacket_auxdata` says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuxData {
    /// `tp_status`.
    pub status: u32,
    /// The stripped VLAN tag as `(tpid, tci)`, if the kernel stripped one.
    pub vlan: Option<(u16, u16)>,
}

/// Size of `struct cmsghdr` on 64-bit Linux (`size_t len; int level; int type`).
const CMSG_HDR: usize = 16;
/// Size of `struct tpacket_auxdata`.
const AUXDATA_LEN: usize = 20;

/// Finds the `PACKET_AUXDATA` message in a control buffer (`cmsg` holds exactly the bytes the
/// kernel reported). `None` if there is none or the buffer is malformed.
pub fn parse_auxdata(cmsg: &[u8]) -> Option<AuxData> {
    let mut off = 0usize;
    while off + CMSG_HDR <= cmsg.len() {
        let h = &cmsg[off..off + CMSG_HDR];
        let len = usize::try_from(u64::from_ne_bytes(h[0..8].try_into().ok()?)).ok()?;
        let level = i32::from_ne_bytes(h[8..12].try_into().ok()?);
        let typ = i32::from_ne_bytes(h[12..16].try_into().ok()?);
        if len < CMSG_HDR || len > cmsg.len() - off {
            return None;
        }
        if level == SOL_PACKET && typ == PACKET_AUXDATA && len >= CMSG_HDR + AUXDATA_LEN {
            let d = &cmsg[off + CMSG_HDR..off + CMSG_HDR + AUXDATA_LEN];
            let u32_at = |o: usize| u32::from_ne_bytes([d[o], d[o + 1], d[o + 2], d[o + 3]]);
            let u16_at = |o: usize| u16::from_ne_bytes([d[o], d[o + 1]]);
            let status = u32_at(0);
            let tci = u16_at(16);
            let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
                u16_at(18)
            } else {
                0x8100
            };
            // A tag of 0 with VLAN_VALID is a real (priority) tag; without it, no tag.
            let vlan = (status & TP_STATUS_VLAN_VALID != 0 || tci != 0).then_some((tpid, tci));
            return Some(AuxData { status, vlan });
        }
        // Next message: aligned to 8 bytes.
        off = off.checked_add(len.div_ceil(8) * 8)?;
    }
    None
}

pub use ksys::ring::TP_STATUS_USER;
/// `TP_STATUS_COPY`: the frame did not fit its slot; a full copy waits on the socket's receive
/// queue (`PACKET_COPY_THRESH`), to be read with `recvmsg`.
pub const TP_STATUS_COPY: u32 = 1 << 1;
/// `TP_STATUS_LOSING`: the kernel dropped frames since the statistics were last read.
pub const TP_STATUS_LOSING: u32 = 1 << 2;
pub use ksys::ring::TPACKET2_HDRLEN;

/// A ring slot's `tpacket2_hdr`, checked against the slot it sits in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tpacket2 {
    /// `tp_status` (`TP_STATUS_USER`, `TP_STATUS_COPY`, VLAN flags, ...).
    pub status: u32,
    /// `tp_len`: the frame's length on the wire (may exceed what the slot holds).
    pub len: usize,
    /// Where the frame's first `tp_snaplen` bytes are in the slot.
    pub data: std::ops::Range<usize>,
    /// Where the virtio-net header is in the slot (just before the frame), if asked for.
    pub vnet: Option<std::ops::Range<usize>>,
    /// The VLAN tag the kernel stripped, as `(tpid, tci)`.
    pub vlan: Option<(u16, u16)>,
}

impl Tpacket2 {
    /// True when the slot holds only the frame's head (`tp_snaplen < tp_len`).
    pub fn truncated(&self) -> bool {
        self.data.len() < self.len
    }
}

/// Why a ring slot's header was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotError {
    /// The slot is smaller than a `tpacket2_hdr` and `sockaddr_ll`.
    Short,
    /// `tp_mac` points into the header (or leaves no room for the virtio-net header).
    MacInHeader,
    /// `tp_mac + tp_snaplen` passes the end of the slot.
    PastSlot,
    /// `tp_snaplen` above `tp_len`.
    SnapAboveLen,
}

/// Parses the `tpacket2_hdr` at the start of `slot` (a whole ring slot, host byte order) and
/// checks every offset in it against the slot: the frame `[tp_mac, tp_mac + tp_snaplen)` and
/// the `vnet_len`-byte virtio-net header before it must lie after the header, inside the slot.
pub fn parse_tpacket2(slot: &[u8], vnet_len: usize) -> Result<Tpacket2, SlotError> {
    if slot.len() < TPACKET2_HDRLEN {
        return Err(SlotError::Short);
    }
    let u32_at = |o: usize| u32::from_ne_bytes([slot[o], slot[o + 1], slot[o + 2], slot[o + 3]]);
    let u16_at = |o: usize| u16::from_ne_bytes([slot[o], slot[o + 1]]);
    let status = u32_at(0);
    let len = u32_at(4) as usize;
    let snap = u32_at(8) as usize;
    let mac = usize::from(u16_at(12));
    if mac < TPACKET2_HDRLEN + vnet_len {
        return Err(SlotError::MacInHeader);
    }
    if mac > slot.len() || snap > slot.len() - mac {
        return Err(SlotError::PastSlot);
    }
    if snap > len {
        return Err(SlotError::SnapAboveLen);
    }
    let tci = u16_at(24);
    let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 {
        u16_at(26)
    } else {
        0x8100
    };
    // As for auxdata: a tag of 0 with VLAN_VALID is a real (priority) tag.
    let vlan = (status & TP_STATUS_VLAN_VALID != 0 || tci != 0).then_some((tpid, tci));
    Ok(Tpacket2 {
        status,
        len,
        data: mac..mac + snap,
        vnet: (vnet_len > 0).then_some(mac - vnet_len..mac),
        vlan,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aux(status: u32, tci: u16, tpid: u16) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((CMSG_HDR + AUXDATA_LEN) as u64).to_ne_bytes());
        b.extend_from_slice(&SOL_PACKET.to_ne_bytes());
        b.extend_from_slice(&PACKET_AUXDATA.to_ne_bytes());
        b.extend_from_slice(&status.to_ne_bytes());
        b.extend_from_slice(&[0; 12]);
        b.extend_from_slice(&tci.to_ne_bytes());
        b.extend_from_slice(&tpid.to_ne_bytes());
        b.resize(b.len().div_ceil(8) * 8, 0);
        b
    }

    #[test]
    fn vlan_from_auxdata() {
        let a = parse_auxdata(&aux(TP_STATUS_VLAN_VALID, 100, 0)).unwrap();
        assert_eq!(a.vlan, Some((0x8100, 100)));
        let a = parse_auxdata(&aux(
            TP_STATUS_VLAN_VALID | TP_STATUS_VLAN_TPID_VALID,
            7,
            0x88a8,
        ))
        .unwrap();
        assert_eq!(a.vlan, Some((0x88a8, 7)));
        let a = parse_auxdata(&aux(TP_STATUS_CSUMNOTREADY, 0, 0)).unwrap();
        assert_eq!(a.vlan, None);
        assert_eq!(a.status, TP_STATUS_CSUMNOTREADY);
    }

    #[test]
    fn malformed_control_buffers() {
        assert_eq!(parse_auxdata(&[]), None);
        let mut b = aux(TP_STATUS_VLAN_VALID, 1, 0);
        b[0..8].copy_from_slice(&1000u64.to_ne_bytes());
        assert_eq!(parse_auxdata(&b), None);
        b[0..8].copy_from_slice(&3u64.to_ne_bytes());
        assert_eq!(parse_auxdata(&b), None);
        let b = aux(1, 1, 0);
        assert_eq!(parse_auxdata(&b[..20]), None);
    }

    #[test]
    fn vnet_header_checks() {
        let mut b = [0u8; 10];
        b[0] = NEEDS_CSUM;
        b[6..8].copy_from_slice(&34u16.to_ne_bytes());
        b[8..10].copy_from_slice(&16u16.to_ne_bytes());
        let h = VnetHdr::parse(&b).unwrap();
        assert!(h.needs_csum());
        assert_eq!(h.check(52), Ok(()));
        assert_eq!(h.check(51), Err(VnetError::CsumPastEnd));
        assert_eq!(VnetHdr::parse(&b[..9]), Err(VnetError::Short));
        b[0] = 0;
        b[1] = GSO_TCPV4;
        assert_eq!(
            VnetHdr::parse(&b).unwrap().check(60),
            Err(VnetError::BadGso)
        );
        b[4..6].copy_from_slice(&1448u16.to_ne_bytes());
        assert_eq!(VnetHdr::parse(&b).unwrap().check(60), Ok(()));
        b[1] = 3; // UDP (UFO): not segmented here
        assert_eq!(
            VnetHdr::parse(&b).unwrap().check(60),
            Err(VnetError::BadGso)
        );
    }

    /// A slot of `size` bytes whose header says `status`, `len`, `snap`, `mac`, `tci`.
    fn slot(size: usize, status: u32, len: u32, snap: u32, mac: u16, tci: u16) -> Vec<u8> {
        let mut b = vec![0u8; size];
        b[0..4].copy_from_slice(&status.to_ne_bytes());
        b[4..8].copy_from_slice(&len.to_ne_bytes());
        b[8..12].copy_from_slice(&snap.to_ne_bytes());
        b[12..14].copy_from_slice(&mac.to_ne_bytes());
        b[24..26].copy_from_slice(&tci.to_ne_bytes());
        b
    }

    #[test]
    fn ring_slot_headers() {
        // What the kernel writes for a 60-byte frame with a virtio-net header: frame at 76.
        let s = slot(2048, TP_STATUS_USER | TP_STATUS_VLAN_VALID, 60, 60, 76, 5);
        let t = parse_tpacket2(&s, 10).unwrap();
        assert_eq!((t.data.clone(), t.vnet.clone()), (76..136, Some(66..76)));
        assert_eq!(
            (t.len, t.truncated(), t.vlan),
            (60, false, Some((0x8100, 5)))
        );
        // A frame cut at the slot's end (TP_STATUS_COPY): accepted, marked truncated.
        let s = slot(
            2048,
            TP_STATUS_USER | TP_STATUS_COPY,
            65_000,
            2048 - 76,
            76,
            0,
        );
        let t = parse_tpacket2(&s, 10).unwrap();
        assert!(t.truncated());
        assert_eq!((t.data.end, t.vlan), (2048, None));
    }

    #[test]
    fn hostile_ring_slot_headers_are_refused() {
        let user = TP_STATUS_USER;
        assert_eq!(parse_tpacket2(&[0; 51], 0), Err(SlotError::Short));
        // Frame or vnet header over the tpacket2_hdr / sockaddr_ll.
        let s = slot(2048, user, 60, 60, 0, 0);
        assert_eq!(parse_tpacket2(&s, 10), Err(SlotError::MacInHeader));
        let s = slot(2048, user, 60, 60, 56, 0);
        assert_eq!(parse_tpacket2(&s, 10), Err(SlotError::MacInHeader));
        assert!(parse_tpacket2(&s, 0).is_ok());
        // Frame past the slot: by one byte, by a huge snaplen, mac itself past the end.
        let s = slot(2048, user, 2048, 2048 - 75, 76, 0);
        assert_eq!(parse_tpacket2(&s, 10), Err(SlotError::PastSlot));
        let s = slot(2048, user, u32::MAX, u32::MAX, 76, 0);
        assert_eq!(parse_tpacket2(&s, 10), Err(SlotError::PastSlot));
        let s = slot(2048, user, 0, 0, u16::MAX, 0);
        assert_eq!(parse_tpacket2(&s, 10), Err(SlotError::PastSlot));
        // More captured than the frame had.
        let s = slot(2048, user, 10, 60, 76, 0);
        assert_eq!(parse_tpacket2(&s, 10), Err(SlotError::SnapAboveLen));
        // Ends exactly at the slot's end: fine.
        let s = slot(2048, user, 2048 - 76, 2048 - 76, 76, 0);
        assert_eq!(parse_tpacket2(&s, 10).unwrap().data, 76..2048);
    }
}
