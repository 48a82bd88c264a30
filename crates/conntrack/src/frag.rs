//! IP fragment reassembly for tracking.
//!
//! Owns: [`Frags`], the datagrams being reassembled. A fragment is copied in and held; once the
//! datagram is complete a reassembled copy is built (only for tracking) and the held originals
//! are handed back to be forwarded with the verdict. Rules: a fragment overlapping another
//! (even with the same bytes) poisons its datagram (all held fragments come back marked
//! invalid); a first fragment too short to hold its transport header is refused; every
//! non-final fragment must carry a multiple of 8 bytes; a datagram may not exceed 65,535 bytes
//! or [`MAX_PIECES`] fragments. Memory is bounded by [`FragLimits`] (datagrams and total bytes
//! held); a fragment that does not fit is refused and counted. Datagrams older than the timeout
//! are released (invalid) by [`Frags::expire`].
//!
//! Threads: PMD threads (through `Conntrack::execute`) and the control thread (expiry), under
//! the one fragment mutex in `Conntrack`: fragments are rare on a virtual switch, and this keeps
//! the connection table's lookups free of it.

use std::collections::HashMap;

use crate::parse::{proto, Frag, Parsed};

/// Most fragments in one datagram.
pub const MAX_PIECES: usize = 64;

/// Memory bounds.
#[derive(Clone, Copy, Debug)]
pub struct FragLimits {
    /// Datagrams under reassembly at once.
    pub max_datagrams: usize,
    /// Bytes of held fragments, all datagrams together.
    pub max_bytes: usize,
    /// How long a datagram may wait for its fragments, ms.
    pub timeout_ms: u64,
}

impl Default for FragLimits {
    fn default() -> Self {
        FragLimits {
            max_datagrams: 1000,
            max_bytes: 4 << 20,
            timeout_ms: 15_000,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FKey {
    zone: u16,
    v6: bool,
    src: [u8; 16],
    dst: [u8; 16],
    id: u32,
    proto: u8,
}

struct Datagram {
    first_seen: u64,
    /// (offset, end) of each piece, in arrival order, with its frame.
    pieces: Vec<(u32, u32, Vec<u8>)>,
    /// Datagram payload length, once the last fragment arrived.
    total: Option<u32>,
    bytes: usize,
}

/// Why a fragment was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FragErr {
    /// It overlaps another fragment of its datagram.
    Overlap,
    /// A first fragment too short for its transport header, or a bad length.
    Tiny,
    /// The reassembly memory is full.
    Full,
    /// Reassembled size over 65,535 bytes or too many pieces.
    TooBig,
}

/// What adding a fragment did.
pub enum FragOutcome {
    /// Held; nothing to forward yet.
    Held,
    /// The datagram is complete: the reassembled frame (for tracking) and the held
    /// originals (arrival order, the last one included).
    Complete {
        /// Ethernet frame holding the whole datagram.
        whole: Vec<u8>,
        /// The original fragments.
        originals: Vec<Vec<u8>>,
    },
    /// Refused: the fragment (and, for `Overlap`/`TooBig`, its datagram's held fragments
    /// returned here) are invalid.
    Refused(FragErr, Vec<Vec<u8>>),
}

/// Datagrams under reassembly.
pub struct Frags {
    map: HashMap<FKey, Datagram>,
    bytes: usize,
    /// Limits.
    pub limits: FragLimits,
}

fn min_l4(p: u8) -> u32 {
    match p {
        proto::TCP => 20,
        proto::UDP | proto::ICMP | proto::ICMPV6 => 8,
        _ => 1,
    }
}

impl Frags {
    /// Empty, with `limits`.
    pub fn new(limits: FragLimits) -> Frags {
        Frags {
            map: HashMap::new(),
            bytes: 0,
            limits,
        }
    }

    /// Datagrams and bytes held.
    pub fn usage(&self) -> (usize, usize) {
        (self.map.len(), self.bytes)
    }

    /// Adds fragment `frame` (parsed as `p`, fragment fields `f`) seen in `zone` at `now`.
    pub fn add(&mut self, zone: u16, frame: &[u8], p: &Parsed, f: &Frag, now: u64) -> FragOutcome {
        let len = p.end.saturating_sub(f.data) as u32;
        let (start, end) = (f.offset, f.offset + len);
        if (f.more && (len == 0 || !len.is_multiple_of(8)))
            || (f.offset == 0 && f.more && len < min_l4(f.proto))
        {
            return FragOutcome::Refused(FragErr::Tiny, Vec::new());
        }
        let key = FKey {
            zone,
            v6: p.tuple.v6,
            src: p.tuple.src,
            dst: p.tuple.dst,
            id: f.id,
            proto: f.proto,
        };
        if end > 65_535 {
            let held = self.drop_key(&key);
            return FragOutcome::Refused(FragErr::TooBig, held);
        }
        if !self.map.contains_key(&key) && self.map.len() >= self.limits.max_datagrams {
            return FragOutcome::Refused(FragErr::Full, Vec::new());
        }
        if self.bytes + frame.len() > self.limits.max_bytes {
            return FragOutcome::Refused(FragErr::Full, Vec::new());
        }
        let d = self.map.entry(key).or_insert_with(|| Datagram {
            first_seen: now,
            pieces: Vec::new(),
            total: None,
            bytes: 0,
        });
        let overlap = d.pieces.iter().any(|&(s, e, _)| start < e && s < end);
        let after_end = d.total.is_some_and(|t| end > t || (!f.more && end != t));
        let beyond_last = !f.more && d.pieces.iter().any(|&(_, e, _)| e > end);
        if overlap || after_end || beyond_last {
            let held = self.drop_key(&key);
            return FragOutcome::Refused(FragErr::Overlap, held);
        }
        if d.pieces.len() >= MAX_PIECES {
            let held = self.drop_key(&key);
            return FragOutcome::Refused(FragErr::TooBig, held);
        }
        d.pieces.push((start, end, frame.to_vec()));
        d.bytes += frame.len();
        self.bytes += frame.len();
        if !f.more {
            d.total = Some(end);
        }
        let Some(total) = d.total else {
            return FragOutcome::Held;
        };
        let covered: u32 = d.pieces.iter().map(|&(s, e, _)| e - s).sum();
        if covered != total {
            return FragOutcome::Held;
        }
        let d = self.map.remove(&key).expect("present");
        self.bytes -= d.bytes;
        let whole = build(&d, p.tuple.v6, f.proto);
        FragOutcome::Complete {
            whole,
            originals: d.pieces.into_iter().map(|(_, _, fr)| fr).collect(),
        }
    }

    fn drop_key(&mut self, key: &FKey) -> Vec<Vec<u8>> {
        match self.map.remove(key) {
            Some(d) => {
                self.bytes -= d.bytes;
                d.pieces.into_iter().map(|(_, _, f)| f).collect()
            }
            None => Vec::new(),
        }
    }

    /// Releases datagrams older than the timeout: their held fragments (invalid).
    pub fn expire(&mut self, now: u64) -> Vec<Vec<u8>> {
        let t = self.limits.timeout_ms;
        let old: Vec<FKey> = self
            .map
            .iter()
            .filter(|(_, d)| now.saturating_sub(d.first_seen) >= t)
            .map(|(k, _)| *k)
            .collect();
        old.iter().flat_map(|k| self.drop_key(k)).collect()
    }
}

/// Builds the reassembled frame: the first fragment's L2 and IP header with the fragment
/// fields cleared and lengths set, then the payload in order.
fn build(d: &Datagram, v6: bool, next: u8) -> Vec<u8> {
    let mut pieces: Vec<&(u32, u32, Vec<u8>)> = d.pieces.iter().collect();
    pieces.sort_by_key(|p| p.0);
    let total = d.total.unwrap_or(0) as usize;
    let first = &pieces[0].2;
    // Re-parse the stored first fragment to find its headers (it parsed before).
    let Ok(fp) = crate::parse::parse(first) else {
        return Vec::new();
    };
    let Some(ff) = fp.frag else {
        return Vec::new();
    };
    let mut out;
    if v6 {
        out = first[..fp.l3 + 40].to_vec();
        out[fp.l3 + 6] = next;
        let plen = total as u16;
        out[fp.l3 + 4..fp.l3 + 6].copy_from_slice(&plen.to_be_bytes());
    } else {
        out = first[..ff.data].to_vec();
        let hl = ff.data - fp.l3;
        let tl = (hl + total) as u16;
        out[fp.l3 + 2..fp.l3 + 4].copy_from_slice(&tl.to_be_bytes());
        out[fp.l3 + 6..fp.l3 + 8].copy_from_slice(&[0, 0]);
        // A header the tracker parses again: its checksum must verify.
        out[fp.l3 + 10..fp.l3 + 12].copy_from_slice(&[0, 0]);
        let c = wire::checksum::compute(&out[fp.l3..ff.data]);
        out[fp.l3 + 10..fp.l3 + 12].copy_from_slice(&c.to_be_bytes());
    }
    for (_, _, fr) in pieces {
        let Ok(pp) = crate::parse::parse(fr) else {
            return Vec::new();
        };
        let Some(pf) = pp.frag else {
            return Vec::new();
        };
        out.extend_from_slice(&fr[pf.data..pp.end]);
    }
    out
}
