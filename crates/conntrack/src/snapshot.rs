//! The connection table as bytes, for `vireoctl upgrade`: the old vireod exports every live
//! connection (with its NAT, TCP windows, mark, label and time left) and its limits; the new
//! one imports them before its PMDs run, so established connections stay established and NATed
//! ones keep their translation across the upgrade.
//!
//! Format (little-endian): magic `VCT1`, global limit `u32`, zone-limit count `u32` and that
//! many `(zone u16, limit u32)`, connection count `u32`, then [`RECORD`] bytes per connection:
//! zone `u16`, flags `u8` (bit 0 IPv6, 1 SNAT, 2 DNAT, 3 replied, 4 TCP), protocol `u8`, the
//! original and the translated tuple (source 16, destination 16, ports 2 + 2 each), time left
//! `u64` ms, original-direction packets `u64`, mark `u32`, label `u128`, TCP state
//! ([`TcpConn::BYTES`], zero without TCP).
//!
//! The bytes come from another process over the upgrade socket (0600, its pid checked), but
//! they are parsed as hostile all the same: every length is checked before it is read, an
//! unknown flag, state or protocol mismatch refuses the whole snapshot, and nothing panics
//! (fuzz target `import`).
//!
//! Threads: the control thread of either process (the old one after its PMDs stopped, the new
//! one before they start); the table's usual locks are taken per connection.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::table::{Conn, ConnInner, NatDone};
use crate::tcp::TcpConn;
use crate::{Conntrack, Tuple, ZONES};

const MAGIC: &[u8; 4] = b"VCT1";
/// Bytes per connection.
pub const RECORD: usize = 2 + 1 + 1 + 36 + 36 + 8 + 8 + 4 + 16 + TcpConn::BYTES;

const F_V6: u8 = 1;
const F_SNAT: u8 = 2;
const F_DNAT: u8 = 4;
const F_REPLIED: u8 = 8;
const F_TCP: u8 = 16;
const F_ALL: u8 = 31;
const TCP: u8 = 6;

/// What an import did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Imported {
    /// Connections entered.
    pub added: usize,
    /// Connections left out: the limit was reached, or the same tuple was already tracked.
    pub skipped: usize,
}

fn put_tuple(out: &mut Vec<u8>, t: &Tuple) {
    out.extend_from_slice(&t.src);
    out.extend_from_slice(&t.dst);
    out.extend_from_slice(&t.sport.to_le_bytes());
    out.extend_from_slice(&t.dport.to_le_bytes());
}

/// A cursor over bytes that only ever fails, never panics.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!(
                "conntrack snapshot truncated ({} bytes short)",
                n - self.0.len()
            ));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u16(&mut self) -> Result<u16, String> {
        self.array().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, String> {
        self.array().map(u64::from_le_bytes)
    }
    fn tuple(&mut self, proto: u8, v6: bool) -> Result<Tuple, String> {
        Ok(Tuple {
            src: self.array()?,
            dst: self.array()?,
            sport: self.u16()?,
            dport: self.u16()?,
            proto,
            v6,
        })
    }
}

/// One connection as read, not yet entered.
fn record(r: &mut Reader<'_>, now: u64, ct: &Conntrack) -> Result<Conn, String> {
    let zone = r.u16()?;
    let [flags] = r.array::<1>()?;
    let [proto] = r.array::<1>()?;
    if flags & !F_ALL != 0 {
        return Err(format!("conntrack snapshot: unknown flags {flags:#x}"));
    }
    let v6 = flags & F_V6 != 0;
    let orig = r.tuple(proto, v6)?;
    let trans = r.tuple(proto, v6)?;
    let left = r.u64()?;
    let orig_pkts = r.u64()?;
    let mark = r.u32()?;
    let label = u128::from_le_bytes(r.array()?);
    let tcp_bytes = r.array::<{ TcpConn::BYTES }>()?;
    let tcp = if flags & F_TCP != 0 {
        if proto != TCP {
            return Err(format!("conntrack snapshot: TCP state on protocol {proto}"));
        }
        Some(TcpConn::from_bytes(&tcp_bytes).ok_or("conntrack snapshot: bad TCP state")?)
    } else {
        None
    };
    Ok(Conn {
        zone,
        orig,
        trans,
        nat: NatDone {
            snat: flags & F_SNAT != 0,
            dnat: flags & F_DNAT != 0,
        },
        expires: AtomicU64::new(now.saturating_add(left)),
        dead: AtomicBool::new(false),
        policy: ct.policy(zone),
        inner: Mutex::new(ConnInner {
            tcp,
            replied: flags & F_REPLIED != 0,
            orig_pkts,
            mark,
            label,
        }),
    })
}

impl Conntrack {
    /// Every connection alive at `now` (ms, [`crate::clock_ms`]) and the limits, as bytes.
    /// Call it with the PMDs stopped for an exact copy (connections keep changing otherwise).
    pub fn export(&self, now: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.len() as usize * RECORD);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.limit.load(Ordering::Relaxed).to_le_bytes());
        let zones: Vec<(u16, u32)> = (0..ZONES)
            .filter_map(|z| {
                let l = self.zone_limit[z].load(Ordering::Relaxed);
                (l != 0).then_some((z as u16, l))
            })
            .collect();
        out.extend_from_slice(&(zones.len() as u32).to_le_bytes());
        for (z, l) in zones {
            out.extend_from_slice(&z.to_le_bytes());
            out.extend_from_slice(&l.to_le_bytes());
        }
        let count_at = out.len();
        out.extend_from_slice(&0u32.to_le_bytes());
        let mut n = 0u32;
        self.for_each(|c| {
            let left = c.expires.load(Ordering::Relaxed);
            if !c.alive(now) {
                return;
            }
            let inner = *c.lock();
            let mut flags = 0;
            for (on, bit) in [
                (c.orig.v6, F_V6),
                (c.nat.snat, F_SNAT),
                (c.nat.dnat, F_DNAT),
                (inner.replied, F_REPLIED),
                (inner.tcp.is_some(), F_TCP),
            ] {
                if on {
                    flags |= bit;
                }
            }
            out.extend_from_slice(&c.zone.to_le_bytes());
            out.push(flags);
            out.push(c.orig.proto);
            put_tuple(&mut out, &c.orig);
            put_tuple(&mut out, &c.trans);
            out.extend_from_slice(&(left - now).to_le_bytes());
            out.extend_from_slice(&inner.orig_pkts.to_le_bytes());
            out.extend_from_slice(&inner.mark.to_le_bytes());
            out.extend_from_slice(&inner.label.to_le_bytes());
            let tcp = inner.tcp.map_or([0; TcpConn::BYTES], |t| t.to_bytes());
            out.extend_from_slice(&tcp);
            n += 1;
        });
        out[count_at..count_at + 4].copy_from_slice(&n.to_le_bytes());
        out
    }

    /// Enters the connections and limits of an [`Conntrack::export`] (made by this or another
    /// process) at time `now`, each with the time it had left. The whole snapshot is checked
    /// before anything is entered: a malformed one changes nothing and says why. A connection
    /// with no time left, whose tuple is already tracked here, or beyond the global limit, is
    /// skipped and counted.
    pub fn import(&self, bytes: &[u8], now: u64) -> Result<Imported, String> {
        let mut r = Reader(bytes);
        if r.take(4)? != MAGIC {
            return Err("not a conntrack snapshot (bad magic)".into());
        }
        let limit = r.u32()?;
        let nz = r.u32()? as usize;
        if nz > ZONES || r.0.len() < nz * 6 {
            return Err(format!("conntrack snapshot: {nz} zone limits do not fit"));
        }
        let mut zones = Vec::with_capacity(nz);
        for _ in 0..nz {
            zones.push((r.u16()?, r.u32()?));
        }
        let n = r.u32()? as usize;
        if r.0.len() != n.saturating_mul(RECORD) {
            return Err(format!(
                "conntrack snapshot: {} bytes for {n} connections of {RECORD}",
                r.0.len()
            ));
        }
        let mut recs = Vec::with_capacity(n);
        for _ in 0..n {
            recs.push(record(&mut r, now, self)?);
        }
        self.set_limit(limit);
        for (z, l) in zones {
            self.set_zone_limit(z, l);
        }
        let mut done = Imported::default();
        for rec in recs {
            let z = usize::from(rec.zone);
            // No time left: it expired on the way (an export only writes live ones).
            if !rec.alive(now) {
                done.skipped += 1;
                continue;
            }
            if self.total.fetch_add(1, Ordering::Relaxed) >= limit {
                self.total.fetch_sub(1, Ordering::Relaxed);
                done.skipped += 1;
                continue;
            }
            self.zone_count[z].fetch_add(1, Ordering::Relaxed);
            match self.table.insert(Arc::new(rec), now) {
                Ok(killed) => {
                    for k in killed.iter().flatten() {
                        self.account_gone(k, true);
                    }
                    done.added += 1;
                }
                Err(_) => {
                    self.zone_count[z].fetch_sub(1, Ordering::Relaxed);
                    self.total.fetch_sub(1, Ordering::Relaxed);
                    done.skipped += 1;
                }
            }
        }
        Ok(done)
    }
}
