//! Tunnel headers: VXLAN (RFC 7348) and Geneve (RFC 8926).
//!
//! Owns: the [`VxlanHeader`] and [`GeneveHeader`] views (the UDP payload of a tunnel packet),
//! the checked decapsulation parser [`decap`] (every way a received tunnel payload can be
//! refused, as a [`DecapError`]) and the encapsulation headers [`encap_header`].
//! Used by the `vxlan`/`geneve` ports (`crates/ports/src/tunnel.rs`).
//! Threads: any; plain functions and views, no state.
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

/// The tunnel protocols Vireo encapsulates and decapsulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelKind {
    /// VXLAN (RFC 7348): 8-byte header, no options.
    Vxlan,
    /// Geneve (RFC 8926): 8-byte header followed by up to 252 bytes of options.
    Geneve,
}

/// Why a received tunnel payload was refused (each is counted by the port).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecapError {
    /// Shorter than the tunnel header.
    Truncated,
    /// VXLAN without the I flag (VNI valid).
    BadFlags,
    /// Geneve version other than 0.
    BadVersion,
    /// Geneve option length runs past the packet, or an option's length runs past the
    /// option area.
    OptionOverrun,
    /// A Geneve option with the critical bit (or the C flag) that Vireo does not understand
    /// (it understands none).
    CriticalOption,
    /// A Geneve control (OAM) packet.
    Control,
    /// The payload is not Ethernet (Geneve protocol type other than 0x6558).
    NotEthernet,
    /// The VNI is not the port's key.
    VniMismatch,
    /// The inner frame is shorter than an Ethernet header.
    InnerTruncated,
}

impl DecapError {
    /// Every reason, in declaration order (`reason as usize` indexes a counter array).
    pub const ALL: [DecapError; 9] = [
        DecapError::Truncated,
        DecapError::BadFlags,
        DecapError::BadVersion,
        DecapError::OptionOverrun,
        DecapError::CriticalOption,
        DecapError::Control,
        DecapError::NotEthernet,
        DecapError::VniMismatch,
        DecapError::InnerTruncated,
    ];

    /// Name used in counters (`vireoctl show`).
    pub fn name(self) -> &'static str {
        match self {
            DecapError::Truncated => "truncated",
            DecapError::BadFlags => "bad-flags",
            DecapError::BadVersion => "bad-version",
            DecapError::OptionOverrun => "option-overrun",
            DecapError::CriticalOption => "critical-option",
            DecapError::Control => "control",
            DecapError::NotEthernet => "not-ethernet",
            DecapError::VniMismatch => "vni-mismatch",
            DecapError::InnerTruncated => "inner-truncated",
        }
    }
}

/// Ethernet protocol type carried by Geneve.
pub const GENEVE_PROTO_ETHERNET: u16 = 0x6558;

/// Checks a received tunnel payload (the UDP payload) of `kind` against the port's VNI `vni`
/// and returns the length of the tunnel header (options included): the inner Ethernet frame
/// is `udp_payload[len..]`. Never panics, whatever the input.
pub fn decap(
    kind: TunnelKind,
    udp_payload: &[u8],
    vni: u32,
) -> core::result::Result<usize, DecapError> {
    match decap_any(kind, udp_payload)? {
        (h, v) if v == vni => Ok(h),
        _ => Err(DecapError::VniMismatch),
    }
}

/// Like [`decap`] for any VNI: returns the tunnel header's length and the VNI it carries
/// (the caller picks the port by it). Every Geneve option is unknown: a critical one refuses
/// the packet.
pub fn decap_any(
    kind: TunnelKind,
    udp_payload: &[u8],
) -> core::result::Result<(usize, u32), DecapError> {
    decap_any_with(kind, udp_payload, |_, _, _| false)
}

/// Geneve options of a header [`decap_any_with`] accepted: (class, type, value bytes).
pub fn geneve_options(udp_payload: &[u8]) -> impl Iterator<Item = (u16, u8, &[u8])> {
    let end = if udp_payload.len() >= GENEVE_MIN_LEN {
        GeneveHeader::new_unchecked(udp_payload)
            .header_len()
            .min(udp_payload.len())
    } else {
        0
    };
    let mut opts = udp_payload.get(GENEVE_MIN_LEN..end).unwrap_or(&[]);
    core::iter::from_fn(move || {
        if opts.len() < 4 {
            return None;
        }
        let olen = (4 + usize::from(opts[3] & 0x1f) * 4).min(opts.len());
        let o = (be16(opts, 0), opts[2], &opts[4..olen]);
        opts = &opts[olen..];
        Some(o)
    })
}

/// [`decap_any`] where `known(class, type, value length)` says which Geneve options the
/// receiver understands (those its TLV map names with that length): a critical option is
/// refused only when it is not known, and the C flag only when no known critical option is
/// there.
pub fn decap_any_with(
    kind: TunnelKind,
    udp_payload: &[u8],
    known: impl Fn(u16, u8, usize) -> bool,
) -> core::result::Result<(usize, u32), DecapError> {
    let b = udp_payload;
    if b.len() < 8 {
        return Err(DecapError::Truncated);
    }
    let (hlen, got) = match kind {
        TunnelKind::Vxlan => {
            if b[vxlan_field::FLAGS] & 0x08 == 0 {
                return Err(DecapError::BadFlags);
            }
            (VXLAN_LEN, be32(b, vxlan_field::VNI.start) >> 8)
        }
        TunnelKind::Geneve => {
            let g = GeneveHeader::new_unchecked(b);
            if b[geneve_field::VER_OPTLEN] >> 6 != 0 {
                return Err(DecapError::BadVersion);
            }
            let hlen = g.header_len();
            if hlen > b.len() {
                return Err(DecapError::OptionOverrun);
            }
            if g.is_control() {
                return Err(DecapError::Control);
            }
            if g.protocol() != GENEVE_PROTO_ETHERNET {
                return Err(DecapError::NotEthernet);
            }
            // Options: class (2), type (1, bit 7 = critical), 3 reserved bits + 5-bit length
            // in 4-byte words, then the data.
            let mut opts = &b[GENEVE_MIN_LEN..hlen];
            let mut known_critical = false;
            while !opts.is_empty() {
                if opts.len() < 4 {
                    return Err(DecapError::OptionOverrun);
                }
                let olen = 4 + usize::from(opts[3] & 0x1f) * 4;
                if olen > opts.len() {
                    return Err(DecapError::OptionOverrun);
                }
                if opts[2] & 0x80 != 0 {
                    if !known(be16(opts, 0), opts[2], olen - 4) {
                        return Err(DecapError::CriticalOption);
                    }
                    known_critical = true;
                }
                opts = &opts[olen..];
            }
            // The C flag says a critical option is present: we found none we understood.
            if b[geneve_field::FLAGS] & 0x40 != 0 && !known_critical {
                return Err(DecapError::CriticalOption);
            }
            (hlen, g.vni())
        }
    };
    if b.len() - hlen < 14 {
        return Err(DecapError::InnerTruncated);
    }
    Ok((hlen, got))
}

/// The 8-byte tunnel header Vireo puts in front of an Ethernet frame (no Geneve options).
pub fn encap_header(kind: TunnelKind, vni: u32) -> [u8; 8] {
    let v = (vni & 0x00ff_ffff) << 8;
    let mut h = [0u8; 8];
    match kind {
        TunnelKind::Vxlan => h[0] = 0x08,
        TunnelKind::Geneve => h[2..4].copy_from_slice(&GENEVE_PROTO_ETHERNET.to_be_bytes()),
    }
    h[4..8].copy_from_slice(&v.to_be_bytes());
    h
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

    fn frame() -> Vec<u8> {
        vec![0xee; 14]
    }

    #[test]
    fn encap_then_decap_round_trips() {
        for kind in [TunnelKind::Vxlan, TunnelKind::Geneve] {
            let mut p = encap_header(kind, 0x00ab_cdef).to_vec();
            p.extend(frame());
            assert_eq!(decap(kind, &p, 0xab_cdef), Ok(8));
            assert_eq!(decap(kind, &p, 5), Err(DecapError::VniMismatch));
            assert_eq!(decap(kind, &p[..7], 0xab_cdef), Err(DecapError::Truncated));
            assert_eq!(
                decap(kind, &p[..8 + 13], 0xab_cdef),
                Err(DecapError::InnerTruncated)
            );
        }
        // The kernel's VXLAN header for VNI 42.
        let k = [0x08, 0, 0, 0, 0, 0, 42, 0];
        assert_eq!(encap_header(TunnelKind::Vxlan, 42), k);
    }

    #[test]
    fn vxlan_without_i_flag_refused() {
        let mut p = vec![0u8; 8];
        p.extend(frame());
        assert_eq!(decap(TunnelKind::Vxlan, &p, 0), Err(DecapError::BadFlags));
    }

    #[test]
    fn geneve_options_checked() {
        let g = |ver_optlen: u8, flags: u8, opts: &[u8]| {
            let mut p = vec![ver_optlen, flags, 0x65, 0x58, 0, 0, 7, 0];
            p.extend_from_slice(opts);
            p.extend(frame());
            decap(TunnelKind::Geneve, &p, 7)
        };
        // One non-critical option of 4 data bytes: skipped.
        assert_eq!(g(2, 0, &[0x01, 0x02, 0x03, 1, 9, 9, 9, 9]), Ok(16));
        // Critical option type.
        assert_eq!(
            g(2, 0, &[0x01, 0x02, 0x83, 1, 9, 9, 9, 9]),
            Err(DecapError::CriticalOption)
        );
        // C flag without any option.
        assert_eq!(g(0, 0x40, &[]), Err(DecapError::CriticalOption));
        // Option says 8 data bytes, the area holds 4.
        assert_eq!(
            g(2, 0, &[0x01, 0x02, 0x03, 2, 9, 9, 9, 9]),
            Err(DecapError::OptionOverrun)
        );
        // Option area longer than the packet.
        let p = [0x3f, 0, 0x65, 0x58, 0, 0, 7, 0, 1, 2, 3, 4];
        assert_eq!(
            decap(TunnelKind::Geneve, &p, 7),
            Err(DecapError::OptionOverrun)
        );
        assert_eq!(g(0x40, 0, &[]), Err(DecapError::BadVersion));
        assert_eq!(g(0, 0x80, &[]), Err(DecapError::Control));
        let mut p = vec![0, 0, 0x08, 0x00, 0, 0, 7, 0];
        p.extend(frame());
        assert_eq!(
            decap(TunnelKind::Geneve, &p, 7),
            Err(DecapError::NotEthernet)
        );
    }
}
