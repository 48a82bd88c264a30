//! IPv6 headers (RFC 8200) and a bounded walk over extension headers.
//!
//! Owns: the [`Ipv6Packet`] view and [`skip_extensions`], which follows at most
//! [`MAX_EXT_HEADERS`] hop-by-hop, routing, fragment, destination-options and AH headers.
//! Threads: any; plain view, no state.
use crate::bytes::{addr16, be16, be32};
use crate::{view_ctor, Error, Result};

/// Byte ranges of the fixed IPv6 header.
pub mod field {
    use core::ops::Range;
    /// Version (4 bits), traffic class (8), flow label (20).
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    /// Payload length.
    pub const LENGTH: Range<usize> = 4..6;
    /// Next header.
    pub const NXT_HDR: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC: Range<usize> = 8..24;
    /// Destination address.
    pub const DST: Range<usize> = 24..40;
}

/// Fixed header length.
pub const HEADER_LEN: usize = 40;

/// Most extension headers [`skip_extensions`] follows before giving up.
pub const MAX_EXT_HEADERS: usize = 8;

/// Extension header numbers.
pub mod ext {
    /// Hop-by-hop options.
    pub const HOP_BY_HOP: u8 = 0;
    /// Routing.
    pub const ROUTING: u8 = 43;
    /// Fragment.
    pub const FRAGMENT: u8 = 44;
    /// Authentication header.
    pub const AUTH: u8 = 51;
    /// Destination options.
    pub const DEST_OPTS: u8 = 60;
    /// No next header.
    pub const NONE: u8 = 59;
}

/// A view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

view_ctor!(Ipv6Packet);

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Ok if the fixed header fits and the version is 6.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// Traffic class (DSCP and ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (be16(self.buffer.as_ref(), 0) >> 4) as u8
    }
    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        be32(self.buffer.as_ref(), 0) & 0x000f_ffff
    }
    /// Payload length field.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }
    /// Next header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }
    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address.
    #[inline]
    pub fn src(&self) -> [u8; 16] {
        addr16(self.buffer.as_ref(), field::SRC.start)
    }
    /// Destination address.
    #[inline]
    pub fn dst(&self) -> [u8; 16] {
        addr16(self.buffer.as_ref(), field::DST.start)
    }
    /// The payload: after the fixed header, up to the payload length or the buffer's end.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = (HEADER_LEN + usize::from(self.payload_len())).min(b.len());
        &b[HEADER_LEN..end]
    }
}

/// Where the upper-layer header starts after the extension headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpperLayer {
    /// Protocol of the upper layer (the last next-header value seen).
    pub proto: u8,
    /// Offset of the upper-layer header within the payload given to [`skip_extensions`].
    pub offset: usize,
    /// Flow-key fragment bits: bit 0 fragment, bit 1 later (non-first) fragment.
    pub frag: u8,
    /// False if the walk stopped early (truncated or too many headers): do not parse L4.
    pub complete: bool,
}

/// Follows extension headers in `payload` starting with `next`. Never reads past `payload`
/// and never follows more than [`MAX_EXT_HEADERS`].
pub fn skip_extensions(mut next: u8, payload: &[u8]) -> UpperLayer {
    let mut off = 0usize;
    let mut frag = 0u8;
    for _ in 0..MAX_EXT_HEADERS {
        let len = match next {
            ext::HOP_BY_HOP | ext::ROUTING | ext::DEST_OPTS => match payload.get(off + 1) {
                Some(&l) => (usize::from(l) + 1) * 8,
                None => break,
            },
            ext::AUTH => match payload.get(off + 1) {
                Some(&l) => (usize::from(l) + 2) * 4,
                None => break,
            },
            ext::FRAGMENT => {
                let Some(h) = payload.get(off..off + 8) else {
                    break;
                };
                let offset_flags = be16(h, 2);
                frag = 1;
                if offset_flags & 0xfff8 != 0 {
                    frag |= 2;
                }
                8
            }
            _ => {
                return UpperLayer {
                    proto: next,
                    offset: off,
                    frag,
                    complete: true,
                }
            }
        };
        if off + len > payload.len() {
            break;
        }
        next = payload[off];
        off += len;
    }
    UpperLayer {
        proto: next,
        offset: off,
        frag,
        complete: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut h = vec![0x6b, 0x81, 0x23, 0x45, 0, payload.len() as u8, next, 33];
        h.extend((1..=16).collect::<Vec<u8>>());
        h.extend((17..=32).collect::<Vec<u8>>());
        h.extend_from_slice(payload);
        h
    }

    #[test]
    fn fixed_header_fields() {
        let h = hdr(17, &[0; 8]);
        let p = Ipv6Packet::new_checked(&h[..]).unwrap();
        assert_eq!(p.traffic_class(), 0xb8);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!((p.next_header(), p.hop_limit()), (17, 33));
        assert_eq!(p.src()[0], 1);
        assert_eq!(p.dst()[15], 32);
        assert_eq!(p.payload().len(), 8);
        assert_eq!(
            Ipv6Packet::new_checked(&h[..39]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn extension_walk_hop_by_hop_then_fragment() {
        // hop-by-hop (8 bytes) -> fragment (offset 0, M=1) -> UDP
        let mut pl = vec![ext::FRAGMENT, 0, 0, 0, 0, 0, 0, 0];
        pl.extend_from_slice(&[17, 0, 0x00, 0x01, 0, 0, 0, 1]);
        let u = skip_extensions(ext::HOP_BY_HOP, &pl);
        assert_eq!(
            u,
            UpperLayer {
                proto: 17,
                offset: 16,
                frag: 1,
                complete: true
            }
        );
        // A later fragment.
        pl[10] = 0x01;
        pl[11] = 0x00;
        assert_eq!(skip_extensions(ext::HOP_BY_HOP, &pl).frag, 3);
    }

    #[test]
    fn extension_walk_is_bounded() {
        // A chain of destination-option headers pointing at themselves, longer than the cap.
        let pl = [ext::DEST_OPTS, 0, 0, 0, 0, 0, 0, 0].repeat(MAX_EXT_HEADERS + 2);
        let u = skip_extensions(ext::DEST_OPTS, &pl);
        assert!(!u.complete);
        assert_eq!(u.offset, MAX_EXT_HEADERS * 8);
        // Truncated header length.
        assert!(!skip_extensions(ext::ROUTING, &[6]).complete);
        assert!(!skip_extensions(ext::ROUTING, &[6, 1, 0, 0]).complete);
    }
}
