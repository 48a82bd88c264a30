//! Zero-copy typed views over `&[u8]` packet bytes and flow-key extraction.
//!
//! Owns: the [`FlowKey`] layout every cache and the OpenFlow pipeline agree on; header views in
//! the smoltcp style (`new_checked`, a `field` module of byte ranges, accessors that cannot panic
//! after the length check) with `parse`/`emit` representations ([`repr`]); one-pass key
//! extraction ([`extract()`]); RFC 1624 incremental checksum updates ([`checksum`]); and in-place
//! field rewrites used by datapath actions ([`rewrite`]).
//!
//! Threads: pure functions and plain data; used on PMD threads (extraction, rewrites) and the
//! control thread (rule parsing, display), never shared mutably. No locks.
#![deny(unsafe_code)]

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod extract;
pub mod flow;
mod format;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod offload;
pub mod repr;
pub mod rewrite;
pub mod tcp;
pub mod tunmd;
pub mod tunnel;
pub mod udp;

pub use extract::{extract, extract_into, l3_offset};
pub use flow::{Field, FlowKey, KEY_WORDS};
pub use format::{ct_state_string, CT_STATE_NAMES};

/// Why a header view refused a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the header (or than a length field inside it says).
    Truncated,
    /// A field holds a value the header cannot have (bad version, length below the minimum).
    Malformed,
    /// A well-formed header of a kind this view does not handle (e.g. non-Ethernet ARP).
    Unsupported,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated header",
            Error::Malformed => "malformed header",
            Error::Unsupported => "unsupported header",
        })
    }
}

impl std::error::Error for Error {}

/// Result of a header check.
pub type Result<T> = core::result::Result<T, Error>;

/// [`Error::Truncated`] if `b` is shorter than `len` (`check_len` of fixed-size headers).
#[inline]
pub(crate) fn need_len(b: &[u8], len: usize) -> Result<()> {
    if b.len() < len {
        Err(Error::Truncated)
    } else {
        Ok(())
    }
}

/// Big-endian reads and writes at fixed offsets. Callers check lengths first (the views do it
/// in `check_len`), so the indexing here never fails for them.
pub(crate) mod bytes {
    #[inline(always)]
    pub fn be16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    #[inline(always)]
    pub fn be32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    #[inline(always)]
    pub fn put16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    #[inline(always)]
    pub fn put32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    #[inline(always)]
    pub fn mac(b: &[u8], at: usize) -> [u8; 6] {
        [b[at], b[at + 1], b[at + 2], b[at + 3], b[at + 4], b[at + 5]]
    }
    #[inline(always)]
    pub fn addr16(b: &[u8], at: usize) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[at..at + 16]);
        a
    }
}

/// Implements the constructor trio every view shares.
macro_rules! view_ctor {
    ($ty:ident) => {
        impl<T: AsRef<[u8]>> $ty<T> {
            /// Wraps a buffer without checking it; accessors may panic if it is too short.
            #[inline]
            pub const fn new_unchecked(buffer: T) -> Self {
                $ty { buffer }
            }

            /// Wraps a buffer after [`Self::check_len`]; no accessor panics afterwards.
            #[inline]
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Gives the buffer back.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}
pub(crate) use view_ctor;
