//! The virtio-net header (virtio 1.1 §5.1.6): reading one a sender handed us into a checked
//! [`Offload`], and writing one for a receiver that takes offloads.
//!
//! Owns the rules a hostile header must pass before its offload reaches [`crate::Meta`]
//! (DPDK CVE-2022-2132, CVE-2024-11614): the caller copies the header out of guest or kernel
//! memory once and hands the copy here with the frame already in our buffer; the checksum
//! offsets must lie inside the frame with room for the 2-byte field; a GSO type must be one
//! that was negotiated (TCPv4, TCPv6; never UDP, never ECN, which Vireo does not offer); a
//! GSO frame must be Ethernet (at most one VLAN tag) + IPv4 (unfragmented) or IPv6 (no
//! extension header) + TCP whose checksum is the partial one the header names, with
//! `gso_size` > 0, a segment that fits a standard buffer and at most [`MAX_GSO_SEGS`] segments;
//! `hdr_len` is never read. Each violation is its own [`VnetError`], counted by the port.
//!
//! Threads: pure functions; called on PMD threads.
use crate::{Offload, MAX_FRAME, MAX_LARGE_FRAME};

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`.
pub const F_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
pub const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_TCPV6`.
pub const GSO_TCPV6: u8 = 4;
/// Most segments one GSO frame may be cut into; a frame needing more is dropped (a guest
/// announcing a tiny MSS would otherwise make the switch emit thousands of frames for one).
/// 64 KB at an MSS of 536 (the IPv4 default minimum) is 123 segments.
pub const MAX_GSO_SEGS: usize = 256;

/// Which offloads a sender may ask for (what was negotiated with it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offloads {
    /// Partial checksums (`VIRTIO_NET_F_CSUM` / `GUEST_CSUM`, `TUN_F_CSUM`).
    pub csum: bool,
    /// TCPv4 GSO (`HOST_TSO4` / `GUEST_TSO4`, `TUN_F_TSO4`).
    pub tso4: bool,
    /// TCPv6 GSO (`HOST_TSO6` / `GUEST_TSO6`, `TUN_F_TSO6`).
    pub tso6: bool,
}

impl Offloads {
    /// Everything.
    pub const ALL: Offloads = Offloads {
        csum: true,
        tso4: true,
        tso6: true,
    };

    /// True if a receiver with these offloads takes a packet needing `o` as is.
    #[inline]
    pub fn takes(&self, o: Offload) -> bool {
        match o {
            Offload::None => true,
            Offload::Csum { .. } => self.csum,
            Offload::Tso { v6, .. } => self.csum && if v6 { self.tso6 } else { self.tso4 },
        }
    }

    /// True if any offload is on.
    pub fn any(&self) -> bool {
        self.csum || self.tso4 || self.tso6
    }
}

/// The fields of a virtio-net header (little-endian, as virtio 1.x and `TUNSETVNETLE` write
/// them; `hdr_len` is kept only for diagnostics and never trusted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hdr {
    /// `flags`.
    pub flags: u8,
    /// `gso_type`, ECN bit included.
    pub gso_type: u8,
    /// `hdr_len` (a hint; unused).
    pub hdr_len: u16,
    /// `gso_size`.
    pub gso_size: u16,
    /// `csum_start`.
    pub csum_start: u16,
    /// `csum_offset`.
    pub csum_offset: u16,
}

/// Why a virtio-net header was refused (the frame is dropped and counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VnetError {
    /// `NEEDS_CSUM` without the checksum offload negotiated, or `csum_start + csum_offset + 2`
    /// past the frame's end.
    BadCsum,
    /// A GSO type that was not negotiated or is unknown (UDP, ECN, ...), or GSO without
    /// `NEEDS_CSUM`.
    BadGsoType,
    /// A GSO frame that is not the TCP frame its type and checksum offsets say, or whose
    /// `gso_size` is 0 or makes a segment larger than a buffer.
    BadGso,
    /// A GSO frame larger than 64 KB plus headers, or needing more than [`MAX_GSO_SEGS`]
    /// segments.
    GsoTooBig,
}

impl VnetError {
    /// The name port statistics use.
    pub fn name(self) -> &'static str {
        match self {
            VnetError::BadCsum => "vnet-bad-csum",
            VnetError::BadGsoType => "vnet-bad-gso-type",
            VnetError::BadGso => "vnet-bad-gso",
            VnetError::GsoTooBig => "vnet-gso-too-big",
        }
    }
}

impl Hdr {
    /// Decodes the first 10 bytes of a header (the copy the caller took).
    #[inline]
    pub fn parse(b: &[u8; 10]) -> Hdr {
        let u = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        Hdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        }
    }

    /// True if the header asks for nothing: no partial checksum, no segmentation (then
    /// [`Hdr::validate`] accepts it without looking at the frame).
    #[inline]
    pub fn is_plain(&self) -> bool {
        self.flags & F_NEEDS_CSUM == 0 && self.gso_type == GSO_NONE
    }

    /// True if the header asks for a large buffer (a GSO frame may exceed [`MAX_FRAME`]).
    #[inline]
    pub fn is_gso(&self) -> bool {
        self.gso_type != GSO_NONE
    }

    /// Checks the header against `frame` (already copied into our buffer) and the offloads
    /// negotiated with the sender, and returns the offload the packet carries.
    pub fn validate(&self, frame: &[u8], acc: Offloads) -> Result<Offload, VnetError> {
        let needs = self.flags & F_NEEDS_CSUM != 0;
        if needs {
            let end = usize::from(self.csum_start) + usize::from(self.csum_offset) + 2;
            if !acc.csum || end > frame.len() {
                return Err(VnetError::BadCsum);
            }
        }
        let v6 = match self.gso_type {
            GSO_NONE => {
                return Ok(if needs {
                    Offload::Csum {
                        start: self.csum_start,
                        offset: self.csum_offset,
                    }
                } else {
                    Offload::None
                });
            }
            GSO_TCPV4 if acc.tso4 && needs => false,
            GSO_TCPV6 if acc.tso6 && needs => true,
            _ => return Err(VnetError::BadGsoType),
        };
        if frame.len() > MAX_LARGE_FRAME {
            return Err(VnetError::GsoTooBig);
        }
        let (l4, hdrs) = tcp_offsets(frame, v6).ok_or(VnetError::BadGso)?;
        let mss = usize::from(self.gso_size);
        if usize::from(self.csum_start) != l4
            || self.csum_offset != 16
            || mss == 0
            || hdrs + mss > MAX_FRAME
        {
            return Err(VnetError::BadGso);
        }
        if (frame.len() - hdrs).div_ceil(mss) > MAX_GSO_SEGS {
            return Err(VnetError::GsoTooBig);
        }
        Ok(Offload::Tso {
            v6,
            mss: self.gso_size,
            l4: self.csum_start,
        })
    }
}

/// Offsets of the TCP header and of the payload in an Ethernet (at most one VLAN tag) +
/// IPv4 (unfragmented) / IPv6 (TCP as next header) + TCP frame.
pub fn tcp_offsets(f: &[u8], v6: bool) -> Option<(usize, usize)> {
    let mut l3 = 14;
    let mut et = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
    if et == 0x8100 || et == 0x88a8 {
        et = u16::from_be_bytes([*f.get(16)?, *f.get(17)?]);
        l3 = 18;
    }
    let l4 = match (et, v6) {
        (0x0800, false) => {
            let b = *f.get(l3)?;
            let ihl = usize::from(b & 0x0f) * 4;
            let frag = u16::from_be_bytes([*f.get(l3 + 6)?, *f.get(l3 + 7)?]) & 0x3fff;
            if b >> 4 != 4 || ihl < 20 || *f.get(l3 + 9)? != 6 || frag != 0 {
                return None;
            }
            l3 + ihl
        }
        (0x86dd, true) => {
            if *f.get(l3)? >> 4 != 6 || *f.get(l3 + 6)? != 6 {
                return None;
            }
            l3 + 40
        }
        _ => return None,
    };
    let doff = usize::from(*f.get(l4 + 12)? >> 4) * 4;
    if doff < 20 || f.len() < l4 + doff {
        return None;
    }
    Some((l4, l4 + doff))
}

/// Writes the first 10 bytes of the virtio-net header that hands `frame` with offload `o` to a
/// receiver that negotiated it: `NEEDS_CSUM` with the checksum offsets, and for TSO the GSO
/// type, `gso_size` and `hdr_len` (computed here from the frame). `Offload::None`: all zero.
#[inline]
pub fn write_hdr(o: Offload, frame: &[u8], out: &mut [u8]) {
    let mut h = [0u8; 10];
    match o {
        Offload::None => {}
        Offload::Csum { start, offset } => {
            h[0] = F_NEEDS_CSUM;
            h[2..4].copy_from_slice(&(start + offset + 2).to_le_bytes());
            h[6..8].copy_from_slice(&start.to_le_bytes());
            h[8..10].copy_from_slice(&offset.to_le_bytes());
        }
        Offload::Tso { v6, mss, l4 } => {
            let doff = frame
                .get(usize::from(l4) + 12)
                .map_or(20, |b| u16::from(b >> 4) * 4);
            h[0] = F_NEEDS_CSUM;
            h[1] = if v6 { GSO_TCPV6 } else { GSO_TCPV4 };
            h[2..4].copy_from_slice(&(l4 + doff).to_le_bytes());
            h[4..6].copy_from_slice(&mss.to_le_bytes());
            h[6..8].copy_from_slice(&l4.to_le_bytes());
            h[8..10].copy_from_slice(&16u16.to_le_bytes());
        }
    }
    let n = out.len().min(10);
    out[..n].copy_from_slice(&h[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(v6: bool, payload: usize) -> Vec<u8> {
        let l3 = if v6 { 40 } else { 20 };
        let mut f = vec![0u8; 14 + l3 + 20 + payload];
        if v6 {
            f[12..14].copy_from_slice(&[0x86, 0xdd]);
            f[14] = 0x60;
            f[14 + 6] = 6;
        } else {
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x45;
            f[14 + 9] = 6;
        }
        f[14 + l3 + 12] = 5 << 4;
        f
    }

    fn gso(v6: bool, mss: u16, l4: u16) -> Hdr {
        Hdr {
            flags: F_NEEDS_CSUM,
            gso_type: if v6 { GSO_TCPV6 } else { GSO_TCPV4 },
            hdr_len: 0xffff, // never trusted
            gso_size: mss,
            csum_start: l4,
            csum_offset: 16,
        }
    }

    #[test]
    fn parse_is_little_endian() {
        let h = Hdr::parse(&[1, 4, 0x36, 0, 0xa8, 0x05, 0x22, 0, 0x10, 0]);
        assert_eq!(h.gso_type, GSO_TCPV6);
        assert_eq!(h.gso_size, 1448);
        assert_eq!((h.csum_start, h.csum_offset), (34, 16));
    }

    #[test]
    fn plain_and_partial_frames() {
        let f = tcp(false, 100);
        assert_eq!(
            Hdr::default().validate(&f, Offloads::ALL),
            Ok(Offload::None)
        );
        let h = Hdr {
            flags: F_NEEDS_CSUM,
            csum_start: 34,
            csum_offset: 16,
            ..Hdr::default()
        };
        assert_eq!(
            h.validate(&f, Offloads::ALL),
            Ok(Offload::Csum {
                start: 34,
                offset: 16
            })
        );
        // Not negotiated.
        assert_eq!(h.validate(&f, Offloads::default()), Err(VnetError::BadCsum));
    }

    #[test]
    fn checksum_offsets_must_leave_room_for_the_field() {
        let f = vec![0u8; 60];
        let at = |start, offset| Hdr {
            flags: F_NEEDS_CSUM,
            csum_start: start,
            csum_offset: offset,
            ..Hdr::default()
        };
        assert!(at(40, 18).validate(&f, Offloads::ALL).is_ok());
        assert_eq!(
            at(40, 19).validate(&f, Offloads::ALL),
            Err(VnetError::BadCsum)
        );
        assert_eq!(
            at(59, 0).validate(&f, Offloads::ALL),
            Err(VnetError::BadCsum)
        );
        assert_eq!(
            at(u16::MAX, u16::MAX).validate(&f, Offloads::ALL),
            Err(VnetError::BadCsum)
        );
    }

    #[test]
    fn gso_frames_are_checked_against_the_frame() {
        let f4 = tcp(false, 3000);
        let f6 = tcp(true, 3000);
        assert_eq!(
            gso(false, 1448, 34).validate(&f4, Offloads::ALL),
            Ok(Offload::Tso {
                v6: false,
                mss: 1448,
                l4: 34
            })
        );
        assert!(gso(true, 1428, 54).validate(&f6, Offloads::ALL).is_ok());
        // Type against the frame, the checksum offsets against the TCP header.
        assert_eq!(
            gso(true, 1448, 34).validate(&f4, Offloads::ALL),
            Err(VnetError::BadGso)
        );
        assert_eq!(
            gso(false, 1448, 30).validate(&f4, Offloads::ALL),
            Err(VnetError::BadGso)
        );
        let mut h = gso(false, 1448, 34);
        h.csum_offset = 6;
        assert_eq!(h.validate(&f4, Offloads::ALL), Err(VnetError::BadGso));
        // Zero size, a segment bigger than a buffer.
        assert_eq!(
            gso(false, 0, 34).validate(&f4, Offloads::ALL),
            Err(VnetError::BadGso)
        );
        assert_eq!(
            gso(false, 9200, 34).validate(&f4, Offloads::ALL),
            Err(VnetError::BadGso)
        );
        // Not TCP.
        let mut udp = f4.clone();
        udp[14 + 9] = 17;
        assert_eq!(
            gso(false, 1448, 34).validate(&udp, Offloads::ALL),
            Err(VnetError::BadGso)
        );
        // A fragment.
        let mut frag = f4.clone();
        frag[14 + 6] = 0x20;
        assert_eq!(
            gso(false, 1448, 34).validate(&frag, Offloads::ALL),
            Err(VnetError::BadGso)
        );
        // TCP data offset past the frame.
        let mut short = tcp(false, 0);
        short[34 + 12] = 15 << 4;
        assert_eq!(
            gso(false, 1448, 34).validate(&short, Offloads::ALL),
            Err(VnetError::BadGso)
        );
    }

    #[test]
    fn gso_types_and_flags_must_be_negotiated_and_known() {
        let f4 = tcp(false, 3000);
        let mut h = gso(false, 1448, 34);
        let no_tso = Offloads {
            csum: true,
            tso4: false,
            tso6: true,
        };
        assert_eq!(h.validate(&f4, no_tso), Err(VnetError::BadGsoType));
        h.gso_type = GSO_TCPV4 | 0x80; // ECN, never offered
        assert_eq!(h.validate(&f4, Offloads::ALL), Err(VnetError::BadGsoType));
        h.gso_type = 3; // UDP (UFO), never offered
        assert_eq!(h.validate(&f4, Offloads::ALL), Err(VnetError::BadGsoType));
        h.gso_type = 5; // UDP_L4
        assert_eq!(h.validate(&f4, Offloads::ALL), Err(VnetError::BadGsoType));
        let mut h = gso(false, 1448, 34);
        h.flags = 0; // GSO without a partial checksum
        assert_eq!(h.validate(&f4, Offloads::ALL), Err(VnetError::BadGsoType));
    }

    #[test]
    fn gso_size_and_segment_count_are_bounded() {
        let big = tcp(false, MAX_LARGE_FRAME - 54 + 1);
        assert_eq!(
            gso(false, 1448, 34).validate(&big, Offloads::ALL),
            Err(VnetError::GsoTooBig)
        );
        let f = tcp(false, 60_000);
        assert_eq!(
            gso(false, 100, 34).validate(&f, Offloads::ALL),
            Err(VnetError::GsoTooBig),
            "600 segments"
        );
        assert!(gso(false, 536, 34).validate(&f, Offloads::ALL).is_ok());
    }

    #[test]
    fn vlan_tagged_gso_frames_are_found() {
        let mut f = tcp(false, 2000);
        f.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
        assert_eq!(tcp_offsets(&f, false), Some((38, 58)));
        assert!(gso(false, 1448, 38).validate(&f, Offloads::ALL).is_ok());
    }

    #[test]
    fn written_headers_read_back() {
        let f = tcp(false, 3000);
        let o = Offload::Tso {
            v6: false,
            mss: 1448,
            l4: 34,
        };
        let mut b = [0u8; 12];
        write_hdr(o, &f, &mut b);
        let h = Hdr::parse(b[..10].try_into().unwrap());
        assert_eq!(h.hdr_len, 54);
        assert_eq!(h.validate(&f, Offloads::ALL), Ok(o));
        let c = Offload::Csum {
            start: 34,
            offset: 16,
        };
        write_hdr(c, &f, &mut b);
        assert_eq!(
            Hdr::parse(b[..10].try_into().unwrap()).validate(&f, Offloads::ALL),
            Ok(c)
        );
        write_hdr(Offload::None, &f, &mut b);
        assert_eq!(&b[..10], &[0; 10]);
    }
}
