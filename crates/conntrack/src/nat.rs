//! NAT specifications and tuple allocation.
//!
//! Owns: [`NatSpec`] (parsed from `src=IP[-IP][:PORT[-PORT]]` / `dst=...` with the flags
//! `persistent`, `hash`, `random`) and [`allocate`], which picks a translated tuple whose reply
//! key is not in use: the original port first (when it lies in the range), then a hashed or
//! random starting point walked for at most [`MAX_TRIES`] candidates. A tuple handed out is
//! re-checked under the shard write locks at insert (a lost race picks again), so two
//! connections never share a reply key.
//!
//! Threads: PMD threads, when committing a connection; no locks of its own (it probes the
//! table with read locks).

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::parse::{proto, Tuple};
use crate::table::{Key, Table};

/// Candidates tried before a connection is refused.
pub const MAX_TRIES: usize = 256;

/// Which side is translated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NatDir {
    /// Source (SNAT).
    Src,
    /// Destination (DNAT).
    Dst,
}

/// Port selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PortSel {
    /// Start from a hash of the tuple (OVS's default).
    #[default]
    Hash,
    /// Start from a random port.
    Random,
}

/// A parsed NAT specification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NatSpec {
    /// Side translated.
    pub dir: NatDir,
    /// IPv6 addresses.
    pub v6: bool,
    /// First address of the range (IPv4 in the low 32 bits).
    pub addr_lo: u128,
    /// Last address of the range.
    pub addr_hi: u128,
    /// Port range (0, 0 = keep the port, or the default range 1024-65535 on a SNAT clash).
    pub port_lo: u16,
    /// Last port.
    pub port_hi: u16,
    /// Address chosen from the addresses alone (a client keeps its translated address).
    pub persistent: bool,
    /// Port selection.
    pub sel: PortSel,
}

fn parse_addr(s: &str) -> Result<(u128, bool), String> {
    if let Ok(a) = s.parse::<std::net::Ipv4Addr>() {
        return Ok((u128::from(u32::from(a)), false));
    }
    let t = s.trim_start_matches('[').trim_end_matches(']');
    t.parse::<std::net::Ipv6Addr>()
        .map(|a| (u128::from(a), true))
        .map_err(|_| format!("bad NAT address {s:?}"))
}

impl NatSpec {
    /// Parses `src=10.0.0.1-10.0.0.9:1024-2048,persistent,random` (and `dst=`; IPv6 addresses
    /// in brackets when a port follows: `src=[fd00::1]-[fd00::9]:80`).
    pub fn parse(s: &str) -> Result<NatSpec, String> {
        let mut parts = s.split(',');
        let head = parts.next().unwrap_or("");
        let (dir, rest) = if let Some(r) = head.strip_prefix("src=") {
            (NatDir::Src, r)
        } else if let Some(r) = head.strip_prefix("dst=") {
            (NatDir::Dst, r)
        } else {
            return Err(format!("NAT spec must start with src= or dst=: {s:?}"));
        };
        // Split the address part from the port part: the port follows the last ':' outside
        // brackets (IPv4) or after ']' (IPv6).
        let (addrs, ports) = if rest.contains('[') {
            match rest.rfind("]:") {
                Some(i) => (&rest[..=i], Some(&rest[i + 2..])),
                None => (rest, None),
            }
        } else if rest.matches(':').count() == 1 {
            let i = rest.find(':').unwrap_or(rest.len());
            (&rest[..i], Some(&rest[i + 1..]))
        } else {
            (rest, None)
        };
        let (lo, hi) = match addrs
            .split_once("]-[")
            .map(|(a, b)| (format!("{a}]"), format!("[{b}")))
        {
            Some((a, b)) => (a, b),
            None => match addrs.split_once('-') {
                Some((a, b)) => (a.to_string(), b.to_string()),
                None => (addrs.to_string(), addrs.to_string()),
            },
        };
        let (lo, v6a) = parse_addr(&lo)?;
        let (hi, v6b) = parse_addr(&hi)?;
        if v6a != v6b || hi < lo {
            return Err(format!("bad NAT address range {addrs:?}"));
        }
        let (port_lo, port_hi) = match ports {
            None => (0, 0),
            Some(p) => {
                let (a, b) = p.split_once('-').unwrap_or((p, p));
                let a: u16 = a.parse().map_err(|_| format!("bad NAT port {a:?}"))?;
                let b: u16 = b.parse().map_err(|_| format!("bad NAT port {b:?}"))?;
                if a == 0 || b < a {
                    return Err(format!("bad NAT port range {p:?}"));
                }
                (a, b)
            }
        };
        let mut spec = NatSpec {
            dir,
            v6: v6a,
            addr_lo: lo,
            addr_hi: hi,
            port_lo,
            port_hi,
            persistent: false,
            sel: PortSel::Hash,
        };
        for f in parts {
            match f {
                "persistent" => spec.persistent = true,
                "hash" => spec.sel = PortSel::Hash,
                "random" => spec.sel = PortSel::Random,
                _ => return Err(format!("unknown NAT flag {f:?}")),
            }
        }
        Ok(spec)
    }

    fn addr_bytes(&self, a: u128) -> [u8; 16] {
        if self.v6 {
            a.to_be_bytes()
        } else {
            crate::parse::v4_addr((a as u32).to_be_bytes())
        }
    }
}

/// Picks the translated tuple for `orig` under `spec`, or `None` if every candidate tried is
/// in use (or the spec's family differs from the packet's). `now` decides liveness of entries
/// in the way; `seed` feeds random selection.
pub fn allocate(
    table: &Table,
    hasher: &std::hash::RandomState,
    zone: u16,
    orig: &Tuple,
    spec: &NatSpec,
    now: u64,
    seed: &AtomicU64,
) -> Option<Tuple> {
    if spec.v6 != orig.v6 {
        return None;
    }
    let has_ports = matches!(orig.proto, proto::TCP | proto::UDP);
    let n_addr = (spec.addr_hi - spec.addr_lo).saturating_add(1);
    let mut h = hasher.build_hasher();
    orig.src.hash(&mut h);
    orig.dst.hash(&mut h);
    if !spec.persistent {
        (orig.sport, orig.dport, orig.proto).hash(&mut h);
    }
    let hv = h.finish();
    let rnd = {
        let x = seed.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        let mut z = x ^ (x >> 31);
        z = z.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z ^ (z >> 29)
    };
    let a0 = u128::from(hv) % n_addr;
    let (cur_port, plo, phi) = match spec.dir {
        NatDir::Src => (orig.sport, spec.port_lo, spec.port_hi),
        NatDir::Dst => (orig.dport, spec.port_lo, spec.port_hi),
    };
    // Without a range: keep the port; SNAT may fall back to 1024-65535 on a clash.
    let (plo, phi, keep_only) = if plo == 0 {
        match spec.dir {
            NatDir::Src => (1024, 65535, false),
            NatDir::Dst => (cur_port, cur_port, true),
        }
    } else {
        (plo, phi, false)
    };
    let n_port = u32::from(phi - plo) + 1;
    let pstart = match spec.sel {
        PortSel::Hash => (hv >> 32) as u32 % n_port,
        PortSel::Random => (rnd as u32) % n_port,
    };
    let make = |ai: u128, port: u16| {
        let addr = spec.addr_bytes(spec.addr_lo + (a0 + ai) % n_addr);
        let mut t = *orig;
        match spec.dir {
            NatDir::Src => {
                t.src = addr;
                if has_ports {
                    t.sport = port;
                }
            }
            NatDir::Dst => {
                t.dst = addr;
                if has_ports {
                    t.dport = port;
                }
            }
        }
        t
    };
    let free = |t: &Tuple| {
        !table.taken(
            &Key {
                zone,
                t: t.reverse(),
            },
            now,
        )
    };
    let addrs_to_try = n_addr.min(MAX_TRIES as u128);
    let mut tries = 0usize;
    // First the current port on each address (when it is in range): a translation that keeps
    // the port is the least surprising.
    let keep_ok = !has_ports || (plo..=phi).contains(&cur_port);
    if keep_ok {
        for ai in 0..addrs_to_try {
            let t = make(ai, cur_port);
            tries += 1;
            if free(&t) {
                return Some(t);
            }
            if tries >= MAX_TRIES / 2 {
                break;
            }
        }
    }
    if !has_ports || keep_only {
        return None;
    }
    let mut j = 0u32;
    while tries < MAX_TRIES {
        let ai = u128::from(j / n_port.clamp(1, 64)) % n_addr;
        let port = plo + ((pstart + j) % n_port) as u16;
        let t = make(ai, port);
        tries += 1;
        j += 1;
        if free(&t) {
            return Some(t);
        }
    }
    None
}
