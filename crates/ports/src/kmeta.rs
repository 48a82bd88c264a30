//! Parsers of the metadata the kernel puts beside a frame: the virtio-net header
//! (`PACKET_VNET_HDR`, `IFF_VNET_HDR`) and the packet-socket control messages
//! (`PACKET_AUXDATA`: VLAN tag the kernel stripped, checksum state). Pure functions over bytes,
//! fuzzed (`crates/ports/fuzz`); everything is checked, nothing here panics.
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
}
