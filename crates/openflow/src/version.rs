//! OpenFlow versions Vireo speaks (1.0, 1.3, 1.4, 1.5), the per-bridge set of allowed
//! versions ([`Protocols`], written as OVS writes it: `OpenFlow10,OpenFlow13`), and HELLO
//! negotiation (OpenFlow 1.3.1 §6.3.1: with version bitmaps, the highest version both
//! bitmaps name; without, the lower of the two header versions, if we allow it).
//! Pure data; used from connection reader threads and the daemon's control thread.

use std::fmt;

use crate::error::{errors, OfError};
use crate::msg::Hello;

/// OpenFlow 1.0 wire version.
pub const OFP10: u8 = 0x01;
/// OpenFlow 1.3 wire version.
pub const OFP13: u8 = 0x04;
/// OpenFlow 1.4 wire version.
pub const OFP14: u8 = 0x05;
/// OpenFlow 1.5 wire version.
pub const OFP15: u8 = 0x06;

/// Every version this crate can encode and decode, lowest first.
pub const SUPPORTED: [u8; 4] = [OFP10, OFP13, OFP14, OFP15];

/// The name OVS uses for a wire version (`OpenFlow13`).
pub fn version_name(v: u8) -> String {
    match v {
        OFP10 => "OpenFlow10".into(),
        0x02 => "OpenFlow11".into(),
        0x03 => "OpenFlow12".into(),
        OFP13 => "OpenFlow13".into(),
        OFP14 => "OpenFlow14".into(),
        OFP15 => "OpenFlow15".into(),
        v => format!("version {v:#04x}"),
    }
}

/// A set of allowed versions: bit `n` set = wire version `n` allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Protocols(u32);

impl Default for Protocols {
    /// All supported versions.
    fn default() -> Self {
        Protocols::ALL
    }
}

impl Protocols {
    /// Every supported version.
    pub const ALL: Protocols = Protocols((1 << OFP10) | (1 << OFP13) | (1 << OFP14) | (1 << OFP15));
    /// OpenFlow 1.3 only.
    pub const OF13: Protocols = Protocols(1 << OFP13);

    /// The set from a bitmap; bits of unsupported versions are dropped.
    pub fn from_bits(bits: u32) -> Protocols {
        Protocols(bits & Self::ALL.0)
    }

    /// The bitmap (bit n = version n).
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether version `v` is allowed.
    pub fn contains(self, v: u8) -> bool {
        v < 32 && self.0 & (1 << v) != 0
    }

    /// The highest allowed version (1.0 for an empty set, which [`Protocols::parse`] never
    /// makes).
    pub fn highest(self) -> u8 {
        (31 - self.0.leading_zeros().min(31)) as u8
    }

    /// Parses `OpenFlow10,OpenFlow13,OpenFlow14,OpenFlow15` (any order, any non-empty
    /// subset; spaces allowed around commas).
    pub fn parse(s: &str) -> Result<Protocols, String> {
        let mut bits = 0u32;
        for name in s.split(',').map(str::trim) {
            let v = match name {
                "OpenFlow10" => OFP10,
                "OpenFlow13" => OFP13,
                "OpenFlow14" => OFP14,
                "OpenFlow15" => OFP15,
                "OpenFlow11" | "OpenFlow12" => {
                    return Err(format!("{name} is not supported (use OpenFlow10, OpenFlow13, OpenFlow14, OpenFlow15)"))
                }
                _ => {
                    return Err(format!(
                        "unknown protocol {name:?} (use OpenFlow10, OpenFlow13, OpenFlow14, OpenFlow15, comma-separated)"
                    ))
                }
            };
            bits |= 1 << v;
        }
        if bits == 0 {
            return Err("empty protocol list".into());
        }
        Ok(Protocols(bits))
    }

    /// Our HELLO: the highest allowed version in the header and the bitmap of all.
    pub fn hello(self) -> Hello {
        Hello {
            version: self.highest(),
            bitmap: Some(vec![self.0]),
        }
    }

    /// Negotiates with a peer's HELLO: the highest version in both bitmaps, or (peer sent
    /// no bitmap) the lower of the two header versions if we allow it; else
    /// HELLO_FAILED/INCOMPATIBLE.
    pub fn negotiate(self, peer: &Hello) -> Result<u8, OfError> {
        let common = match &peer.bitmap {
            Some(words) => self.0 & words.first().copied().unwrap_or(0),
            None => {
                let v = peer.version.min(self.highest());
                if self.contains(v) {
                    1 << v
                } else {
                    0
                }
            }
        };
        if common == 0 {
            Err(errors::HELLO_FAILED_INCOMPATIBLE)
        } else {
            Ok(Protocols(common).highest())
        }
    }
}

impl fmt::Display for Protocols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = SUPPORTED
            .iter()
            .filter(|v| self.contains(**v))
            .map(|v| version_name(*v))
            .collect();
        f.write_str(&names.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(version: u8, bitmap: Option<u32>) -> Hello {
        Hello {
            version,
            bitmap: bitmap.map(|b| vec![b]),
        }
    }

    #[test]
    fn parse_and_display() {
        let p = Protocols::parse("OpenFlow13, OpenFlow10").unwrap();
        assert_eq!(p.to_string(), "OpenFlow10,OpenFlow13");
        assert_eq!(p.bits(), 0b1_0010);
        assert_eq!(
            Protocols::ALL.to_string(),
            "OpenFlow10,OpenFlow13,OpenFlow14,OpenFlow15"
        );
        assert!(Protocols::parse("OpenFlow12")
            .unwrap_err()
            .contains("not supported"));
        assert!(Protocols::parse("OpenFlow99")
            .unwrap_err()
            .contains("unknown"));
        assert!(Protocols::parse("").is_err());
        assert_eq!(Protocols::ALL.highest(), OFP15);
    }

    #[test]
    fn negotiation_picks_highest_common() {
        let all = Protocols::ALL;
        // ovs-ofctl without -O: version 1 header, no bitmap.
        assert_eq!(all.negotiate(&hello(1, None)), Ok(OFP10));
        // Bitmaps: highest common.
        assert_eq!(all.negotiate(&hello(6, Some(0b111_0010))), Ok(OFP15));
        assert_eq!(all.negotiate(&hello(5, Some(0b11_0000))), Ok(OFP14));
        // Newer peer without bitmap: our highest.
        assert_eq!(all.negotiate(&hello(7, None)), Ok(OFP15));
        // 1.1 only / 1.2 only: nothing in common.
        assert_eq!(
            all.negotiate(&hello(3, Some(0b1000))),
            Err(errors::HELLO_FAILED_INCOMPATIBLE)
        );
        assert_eq!(
            all.negotiate(&hello(2, None)),
            Err(errors::HELLO_FAILED_INCOMPATIBLE)
        );
        // A bridge limited to 1.3 refuses a 1.0-only peer and takes 1.3 from a bitmap.
        let p13 = Protocols::OF13;
        assert_eq!(
            p13.negotiate(&hello(1, None)),
            Err(errors::HELLO_FAILED_INCOMPATIBLE)
        );
        assert_eq!(p13.negotiate(&hello(6, Some(0b111_0010))), Ok(OFP13));
        assert_eq!(p13.negotiate(&hello(6, None)), Ok(OFP13));
        // Our hello carries the bitmap and our highest version.
        let h = Protocols::parse("OpenFlow10,OpenFlow14").unwrap().hello();
        assert_eq!(h.version, OFP14);
        assert_eq!(h.bitmap, Some(vec![(1 << 1) | (1 << 5)]));
    }
}
