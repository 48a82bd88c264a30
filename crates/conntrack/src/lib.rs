//! Userspace connection tracking and NAT for the `ct()` action.
//!
//! Owns: [`Conntrack`], the connection table of one datapath with its zones, limits, timeout
//! policies, NAT and fragment reassembly, and the operations API (dump, flush, stats, limits).
//!
//! Use from a PMD thread (`dp::execute`, for the datapath's `Action::Ct`): for each
//! packet a `ct(zone=Z, commit?, force?, nat(...)?, exec(set_field mark/label)?)` action
//! reaches, call [`Conntrack::execute`] with the frame, a [`CtAction`] and the current time in
//! ms; put the returned [`CtResult`]'s `state`, `zone`, `mark`, `label` into the packet's
//! metadata (the `ct_state`/`ct_zone`/`ct_mark`/`ct_label` match fields) and recirculate (a
//! packet that may meet `ct` again goes through [`Conntrack::execute_hinted`] with a [`Hint`]
//! that travels with it, so its next pass skips the hash and the table probe). NAT
//! rewrites the frame in place (checksums updated incrementally). A fragment returns
//! [`Outcome::Held`] (the tracker keeps a copy; drop the buffer) until its datagram is complete,
//! then [`Outcome::Released`] gives the held originals back, to be forwarded with the verdict.
//! The datapath's housekeeping thread calls [`Conntrack::sweep`] every 100 ms (a sixteenth of the
//! shards per call, times from [`clock_ms`]) and
//! [`Conntrack::expire_frags`].
//!
//! Threads: `Conntrack` is `Sync`; every PMD shares one (`Arc`). Lookups of existing
//! connections take one shard read lock (see [`table`]) and the connection's own mutex; no
//! global lock. Counters are relaxed atomics. Per-zone policies are read under an `RwLock` only
//! when a connection is created.
//!
//! Lock order: fragment mutex → shard locks (ascending index) → connection mutex. The zone
//! policy lock is never held while taking another lock.
#![deny(unsafe_code)]

mod action;
pub mod frag;
mod hint;
pub mod nat;
mod ops;
pub mod parse;
pub mod snapshot;
pub mod table;
pub mod tcp;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub use action::{
    CtAction, CtResult, Invalid, Nat, Outcome, Timeouts, INVALID_NAMES, INVALID_REASONS,
};
pub use frag::FragLimits;
pub use hint::Hint;
pub use nat::{NatDir, NatSpec, PortSel};
pub use ops::{ConnDump, Stats, SweepReport};
pub use parse::Tuple;

use frag::{FragErr, FragOutcome, Frags};
use parse::{Bad, Delta, Parsed, L4};
use table::{Conn, ConnInner, InsertErr, Key, NatDone, Table};
use tcp::{TcpConn, TcpState, Verdict};

/// `ct_state` bits (the values OVS uses for the `ct_state` match field).
pub mod state {
    /// First packet(s) of a connection not yet replied to.
    pub const NEW: u32 = 0x01;
    /// Part of a connection that has seen replies.
    pub const EST: u32 = 0x02;
    /// Related to a connection (an ICMP error quoting it).
    pub const REL: u32 = 0x04;
    /// In the reply direction.
    pub const RPL: u32 = 0x08;
    /// Invalid.
    pub const INV: u32 = 0x10;
    /// Went through conntrack.
    pub const TRK: u32 = 0x20;
    /// Source translated.
    pub const SNAT: u32 = 0x40;
    /// Destination translated.
    pub const DNAT: u32 = 0x80;
}

/// Number of zones.
pub const ZONES: usize = 65_536;

/// Default global connection limit (as OVS).
pub const DEFAULT_LIMIT: u32 = 3_000_000;

/// Milliseconds on a monotonic clock shared by the process (since its first call): the `now`
/// the datapath passes to [`Conntrack::execute`] and the sweeper to [`Conntrack::sweep`], so
/// both agree on expiry times.
pub fn clock_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    // Starts at 1 s so that no connection ever expires at time 0.
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
        + 1000
}

pub(crate) struct Counters {
    invalid: [AtomicU64; INVALID_REASONS],
    limit_global: AtomicU64,
    limit_zone: AtomicU64,
    nat_exhausted: AtomicU64,
    created: AtomicU64,
    expired: AtomicU64,
}

/// The connection tracker of one datapath.
pub struct Conntrack {
    table: Table,
    nat_hasher: std::hash::RandomState,
    nat_seed: AtomicU64,
    total: AtomicU32,
    limit: AtomicU32,
    zone_count: Box<[AtomicU32]>,
    /// Per-zone limit; 0 = none.
    zone_limit: Box<[AtomicU32]>,
    /// Per-zone bit: window checks off.
    no_window: Box<[AtomicU64]>,
    policies: RwLock<HashMap<u16, Arc<Timeouts>>>,
    default_policy: Arc<Timeouts>,
    frags: Mutex<Frags>,
    sweep_cursor: AtomicUsize,
    sweep_max_hold_ns: AtomicU64,
    ctr: Counters,
}

impl Default for Conntrack {
    fn default() -> Self {
        Self::new()
    }
}

fn ms(s: u32) -> u64 {
    u64::from(s) * 1000
}

impl Conntrack {
    /// A tracker with the default limit, timeouts and fragment limits.
    pub fn new() -> Conntrack {
        Self::with_limits(DEFAULT_LIMIT, FragLimits::default())
    }

    /// A tracker with a global connection limit and fragment memory limits.
    pub fn with_limits(limit: u32, frag: FragLimits) -> Conntrack {
        Conntrack {
            table: Table::new(),
            nat_hasher: std::hash::RandomState::new(),
            nat_seed: AtomicU64::new(0x1234_5678),
            total: AtomicU32::new(0),
            limit: AtomicU32::new(limit),
            zone_count: (0..ZONES).map(|_| AtomicU32::new(0)).collect(),
            zone_limit: (0..ZONES).map(|_| AtomicU32::new(0)).collect(),
            no_window: (0..ZONES / 64).map(|_| AtomicU64::new(0)).collect(),
            policies: RwLock::new(HashMap::new()),
            default_policy: Arc::new(Timeouts::default()),
            frags: Mutex::new(Frags::new(frag)),
            sweep_cursor: AtomicUsize::new(0),
            sweep_max_hold_ns: AtomicU64::new(0),
            ctr: Counters {
                invalid: Default::default(),
                limit_global: AtomicU64::new(0),
                limit_zone: AtomicU64::new(0),
                nat_exhausted: AtomicU64::new(0),
                created: AtomicU64::new(0),
                expired: AtomicU64::new(0),
            },
        }
    }

    fn invalid(&self, why: Invalid, zone: u16) -> CtResult {
        self.ctr.invalid[why as usize].fetch_add(1, Ordering::Relaxed);
        CtResult {
            state: state::TRK | state::INV,
            zone,
            ..CtResult::default()
        }
    }

    fn window_check(&self, zone: u16) -> bool {
        let z = usize::from(zone);
        self.no_window[z / 64].load(Ordering::Relaxed) & (1 << (z % 64)) == 0
    }

    pub(crate) fn policy(&self, zone: u16) -> Arc<Timeouts> {
        let p = self.policies.read().unwrap_or_else(|e| e.into_inner());
        p.get(&zone)
            .cloned()
            .unwrap_or_else(|| self.default_policy.clone())
    }

    /// Runs one `ct` action on `frame` (an Ethernet frame) at time `now` (ms, monotonic).
    pub fn execute(&self, frame: &mut [u8], a: &CtAction, now: u64) -> Outcome {
        self.run(frame, a, now, None, None)
    }

    /// [`Conntrack::execute`] for a packet that may pass through `ct` again (recirculation):
    /// tries the connection `hint` holds before a table lookup, and leaves in it the
    /// connection this pass found (see [`Hint`]). The verdict is the same as without a hint.
    pub fn execute_hinted(
        &self,
        frame: &mut [u8],
        a: &CtAction,
        now: u64,
        hint: &mut Hint,
    ) -> Outcome {
        let known = hint.0.take();
        self.run(frame, a, now, known, Some(hint))
    }

    fn run(
        &self,
        frame: &mut [u8],
        a: &CtAction,
        now: u64,
        known: Option<Arc<Conn>>,
        out: Option<&mut Hint>,
    ) -> Outcome {
        let p = match parse::parse(frame) {
            Ok(p) => p,
            Err(Bad::NotIp) => return Outcome::Done(self.invalid(Invalid::NotIp, a.zone)),
            Err(Bad::Truncated) => return Outcome::Done(self.invalid(Invalid::Truncated, a.zone)),
            Err(Bad::Checksum) => return Outcome::Done(self.invalid(Invalid::L3Checksum, a.zone)),
        };
        if let Some(f) = p.frag {
            return self.fragment(frame, &p, &f, a, now);
        }
        Outcome::Done(self.track(frame, &p, a, now, known, out))
    }

    /// [`Conntrack::execute`] over a burst of frames with one action; `out[i]` gets frame
    /// `i`'s outcome.
    pub fn execute_burst(
        &self,
        frames: &mut [&mut [u8]],
        a: &CtAction,
        now: u64,
        out: &mut Vec<Outcome>,
    ) {
        out.clear();
        for f in frames.iter_mut() {
            out.push(self.execute(f, a, now));
        }
    }

    fn fragment(
        &self,
        frame: &mut [u8],
        p: &Parsed,
        f: &parse::Frag,
        a: &CtAction,
        now: u64,
    ) -> Outcome {
        let out = {
            let mut fr = self.frags.lock().unwrap_or_else(|e| e.into_inner());
            fr.add(a.zone, frame, p, f, now)
        };
        match out {
            FragOutcome::Held => Outcome::Held,
            FragOutcome::Refused(why, held) => {
                let r = self.invalid(
                    match why {
                        FragErr::Overlap => Invalid::FragOverlap,
                        FragErr::Tiny => Invalid::FragTiny,
                        FragErr::Full => Invalid::FragFull,
                        FragErr::TooBig => Invalid::FragTooBig,
                    },
                    a.zone,
                );
                if held.is_empty() {
                    Outcome::Done(r)
                } else {
                    Outcome::Released { result: r, held }
                }
            }
            FragOutcome::Complete {
                mut whole,
                mut originals,
            } => {
                // The current frame (the last one added) is the caller's; hand back the others.
                originals.pop();
                let r = match parse::parse(&whole) {
                    Ok(wp) if wp.frag.is_none() => {
                        let before = wp.tuple;
                        let r = self.track(&mut whole, &wp, a, now, None, None);
                        // NAT changed the reassembled copy: carry the change to the originals
                        // (addresses in every fragment; ports and the transport checksum,
                        // which sit in the first).
                        match parse::parse(&whole) {
                            Ok(after) if after.tuple != before => {
                                if matches!(wp.kind, L4::Error(_)) {
                                    self.invalid(Invalid::FragNat, a.zone)
                                } else {
                                    nat_fragment(frame, &before, &after.tuple);
                                    for o in originals.iter_mut() {
                                        nat_fragment(o, &before, &after.tuple);
                                    }
                                    r
                                }
                            }
                            _ => r,
                        }
                    }
                    _ => self.invalid(Invalid::Truncated, a.zone),
                };
                Outcome::Released {
                    result: r,
                    held: originals,
                }
            }
        }
    }

    /// Datagrams whose fragments did not all arrive in time: their held fragments, to be
    /// forwarded (or dropped) as invalid. Call from the control thread.
    pub fn expire_frags(&self, now: u64) -> Vec<Vec<u8>> {
        let v = self
            .frags
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .expire(now);
        if !v.is_empty() {
            self.ctr.invalid[Invalid::FragTimeout as usize]
                .fetch_add(v.len() as u64, Ordering::Relaxed);
        }
        v
    }

    /// Finds the live connection for key `k`, unlinking a dead or expired one in the way.
    fn find(&self, k: &Key, now: u64) -> Option<Arc<Conn>> {
        self.find_hashed(k, self.table.hash(k), now)
    }

    /// [`Conntrack::find`] with the key's hash already computed.
    fn find_hashed(&self, k: &Key, h: u64, now: u64) -> Option<Arc<Conn>> {
        let c = self.table.get_hashed(k, h)?;
        if c.alive(now) {
            return Some(c);
        }
        self.unlink(&c, true);
        None
    }

    /// Removes a connection and accounts for it once.
    fn unlink(&self, c: &Arc<Conn>, expired: bool) {
        if self.table.remove(c) {
            self.account_gone(c, expired);
        }
    }

    pub(crate) fn account_gone(&self, c: &Conn, expired: bool) {
        self.total.fetch_sub(1, Ordering::Relaxed);
        self.zone_count[usize::from(c.zone)].fetch_sub(1, Ordering::Relaxed);
        if expired {
            self.ctr.expired.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn track(
        &self,
        frame: &mut [u8],
        p: &Parsed,
        a: &CtAction,
        now: u64,
        known: Option<Arc<Conn>>,
        out: Option<&mut Hint>,
    ) -> CtResult {
        match p.kind {
            L4::Error(q) => return self.related(frame, p, &q, a, now),
            L4::IcmpOther => return self.invalid(Invalid::IcmpOther, a.zone),
            _ => (),
        }
        let key = Key {
            zone: a.zone,
            t: p.tuple,
        };
        // The hint's connection is the one the lookup would find if the packet's key is one
        // of its two keys and it is alive (a connection not dead is linked under both keys,
        // `table`): then neither hash nor probe is needed.
        let hinted = known.and_then(|c| {
            let reply = if key == c.orig_key() {
                false
            } else if key == c.reply_key() {
                true
            } else {
                return None;
            };
            c.alive(now).then_some((c, reply))
        });
        let found = match hinted {
            Some(f) => Some(f),
            None => self.find(&key, now).map(|c| {
                let reply = key != c.orig_key();
                (c, reply)
            }),
        };
        let (res, conn) = 'done: {
            if let Some((c, reply)) = found {
                match self.existing(frame, p, a, &c, reply, now) {
                    Some(r) => break 'done (r, Some((c, reply))),
                    None => {
                        // Force, or a SYN reopening a closed connection: start over.
                        self.unlink(&c, false);
                    }
                }
            }
            self.new_conn(frame, p, a, now)
        };
        if let Some(out) = out {
            out.0 = conn.map(|(c, _)| c);
        }
        res
    }

    /// A packet of an existing connection; `None` if the connection must be replaced.
    fn existing(
        &self,
        frame: &mut [u8],
        p: &Parsed,
        a: &CtAction,
        c: &Arc<Conn>,
        reply: bool,
        now: u64,
    ) -> Option<CtResult> {
        if a.force && reply {
            return None;
        }
        let pol = &c.policy;
        let mut g = c.lock();
        let timeout = match (&p.kind, g.tcp.as_mut()) {
            (L4::Tcp(t), Some(tc)) => {
                match tc.update(usize::from(reply), t, self.window_check(c.zone)) {
                    Verdict::Ok => {}
                    Verdict::Reopen => return None,
                    Verdict::OutOfWindow => return Some(self.invalid(Invalid::TcpWindow, c.zone)),
                    Verdict::BadFlags => return Some(self.invalid(Invalid::TcpFlags, c.zone)),
                }
                match tc.state {
                    TcpState::SynSent | TcpState::SynRecv => pol.tcp_syn,
                    TcpState::Established => pol.tcp_est,
                    TcpState::FinWait => pol.tcp_fin,
                    TcpState::TimeWait => pol.tcp_time_wait,
                    TcpState::Closed => pol.tcp_closed,
                }
            }
            (L4::Echo { request }, _) => {
                if *request == reply {
                    // A request in the reply direction or a reply in the original one.
                    return Some(self.invalid(Invalid::IcmpOther, c.zone));
                }
                if reply || g.replied {
                    pol.icmp_reply
                } else {
                    pol.icmp_first
                }
            }
            (L4::Udp, _) => {
                if reply || g.replied {
                    pol.udp_multiple
                } else {
                    pol.udp_first
                }
            }
            _ => {
                if reply || g.replied {
                    pol.other_multiple
                } else {
                    pol.other_first
                }
            }
        };
        if reply {
            g.replied = true;
        } else {
            g.orig_pkts += 1;
        }
        c.expires.store(now + ms(timeout), Ordering::Relaxed);
        if a.commit {
            apply_marks(&mut g, a);
        }
        let mut st = state::TRK | if g.replied { state::EST } else { state::NEW };
        if reply {
            st |= state::RPL;
        }
        let res = CtResult {
            state: st,
            zone: c.zone,
            mark: g.mark,
            label: g.label,
            orig: Some(c.orig),
        };
        drop(g);
        Some(self.nat_packet(frame, p, a, c, reply, res))
    }

    fn nat_packet(
        &self,
        frame: &mut [u8],
        p: &Parsed,
        a: &CtAction,
        c: &Conn,
        reply: bool,
        mut res: CtResult,
    ) -> CtResult {
        if !rewrites(a, c) {
            return res;
        }
        let (from, to) = if reply {
            (c.trans.reverse(), c.orig.reverse())
        } else {
            (c.orig, c.trans)
        };
        let mut d = Delta::default();
        parse::rewrite(frame, p.l3, p.l4, p.end, &from, &to, &mut d);
        if c.nat.snat {
            res.state |= state::SNAT;
        }
        if c.nat.dnat {
            res.state |= state::DNAT;
        }
        res
    }

    /// A packet no live connection owns: committed if `a.commit`. Returns the verdict and the
    /// connection it now belongs to (with its direction: reply if another PMD committed the
    /// same connection from the other side first).
    fn new_conn(
        &self,
        frame: &mut [u8],
        p: &Parsed,
        a: &CtAction,
        now: u64,
    ) -> (CtResult, Option<(Arc<Conn>, bool)>) {
        let tcp = match p.kind {
            L4::Tcp(t) => {
                if !tcp::valid_new(&t) {
                    return (self.invalid(Invalid::TcpFlags, a.zone), None);
                }
                Some(TcpConn::new(&t))
            }
            L4::Echo { request: false } => return (self.invalid(Invalid::IcmpOther, a.zone), None),
            _ => None,
        };
        let mut res = CtResult {
            state: state::TRK | state::NEW,
            zone: a.zone,
            mark: 0,
            label: 0,
            orig: Some(p.tuple),
        };
        if !a.commit {
            return (res, None);
        }
        // Reserve a slot under both limits before building anything.
        let limit = self.limit.load(Ordering::Relaxed);
        if self.total.fetch_add(1, Ordering::Relaxed) >= limit {
            self.total.fetch_sub(1, Ordering::Relaxed);
            self.ctr.limit_global.fetch_add(1, Ordering::Relaxed);
            let r = CtResult {
                orig: None,
                ..self.invalid_silent(a.zone)
            };
            return (r, None);
        }
        let z = usize::from(a.zone);
        let zl = self.zone_limit[z].load(Ordering::Relaxed);
        if self.zone_count[z].fetch_add(1, Ordering::Relaxed) >= zl && zl != 0 {
            self.zone_count[z].fetch_sub(1, Ordering::Relaxed);
            self.total.fetch_sub(1, Ordering::Relaxed);
            self.ctr.limit_zone.fetch_add(1, Ordering::Relaxed);
            return (self.invalid_silent(a.zone), None);
        }
        let pol = self.policy(a.zone);
        let timeout = match p.kind {
            L4::Tcp(_) => pol.tcp_syn,
            L4::Udp => pol.udp_first,
            L4::Echo { .. } => pol.icmp_first,
            _ => pol.other_first,
        };
        let mut inner = ConnInner {
            tcp,
            replied: false,
            orig_pkts: 1,
            mark: 0,
            label: 0,
        };
        apply_marks(&mut inner, a);
        for _attempt in 0..4 {
            let (trans, nat) = match a.nat {
                Nat::Set(spec) => {
                    match nat::allocate(
                        &self.table,
                        &self.nat_hasher,
                        a.zone,
                        &p.tuple,
                        &spec,
                        now,
                        &self.nat_seed,
                    ) {
                        Some(t) => (
                            t,
                            NatDone {
                                snat: spec.dir == NatDir::Src,
                                dnat: spec.dir == NatDir::Dst,
                            },
                        ),
                        None => break,
                    }
                }
                _ => (p.tuple, NatDone::default()),
            };
            let c = Arc::new(Conn {
                zone: a.zone,
                orig: p.tuple,
                trans,
                nat,
                expires: AtomicU64::new(now + ms(timeout)),
                dead: AtomicBool::new(false),
                policy: pol.clone(),
                inner: Mutex::new(inner),
            });
            match self.table.insert(c.clone(), now) {
                Ok(killed) => {
                    for k in killed.iter().flatten() {
                        self.account_gone(k, true);
                    }
                    self.ctr.created.fetch_add(1, Ordering::Relaxed);
                    res.mark = inner.mark;
                    res.label = inner.label;
                    let r = self.nat_packet(frame, p, a, &c, false, res);
                    return (r, Some((c, false)));
                }
                Err(InsertErr::Exists(other)) => {
                    // Another PMD committed the same connection first: use it.
                    self.zone_count[z].fetch_sub(1, Ordering::Relaxed);
                    self.total.fetch_sub(1, Ordering::Relaxed);
                    let reply = other.orig_key()
                        != (Key {
                            zone: a.zone,
                            t: p.tuple,
                        });
                    return match self.existing(frame, p, a, &other, reply, now) {
                        Some(r) => (r, Some((other, reply))),
                        None => (self.invalid_silent(a.zone), None),
                    };
                }
                Err(InsertErr::Clash) => {
                    if a.nat == Nat::Off || matches!(a.nat, Nat::Existing) {
                        // Our reply key is another connection's: a tuple clash, refuse.
                        break;
                    }
                }
            }
        }
        self.zone_count[z].fetch_sub(1, Ordering::Relaxed);
        self.total.fetch_sub(1, Ordering::Relaxed);
        self.ctr.nat_exhausted.fetch_add(1, Ordering::Relaxed);
        (self.invalid_silent(a.zone), None)
    }

    /// An invalid verdict for a refused commit (counted by the caller under its own reason).
    fn invalid_silent(&self, zone: u16) -> CtResult {
        CtResult {
            state: state::TRK | state::INV,
            zone,
            ..CtResult::default()
        }
    }

    fn related(
        &self,
        frame: &mut [u8],
        p: &Parsed,
        q: &parse::Quote,
        a: &CtAction,
        now: u64,
    ) -> CtResult {
        let key = Key {
            zone: a.zone,
            t: q.tuple.reverse(),
        };
        let Some(c) = self.find(&key, now) else {
            return self.invalid(Invalid::IcmpUnknown, a.zone);
        };
        // Hit by the original key: the quoted packet was a reply, the error goes the
        // original way.
        let reply = key != c.orig_key();
        let g = c.lock();
        let mut res = CtResult {
            state: state::TRK | state::REL | if reply { state::RPL } else { 0 },
            zone: c.zone,
            mark: g.mark,
            label: g.label,
            orig: Some(c.orig),
        };
        drop(g);
        if a.nat == Nat::Off || c.nat == NatDone::default() {
            return res;
        }
        // This direction's transform for the outer header, the other direction's inverse for
        // the quoted one.
        let (from, to) = if reply {
            (c.trans.reverse(), c.orig.reverse())
        } else {
            (c.orig, c.trans)
        };
        let mut outer_old = p.tuple;
        let mut outer_new = p.tuple;
        if outer_old.src == from.src {
            outer_new.src = to.src;
        }
        if outer_old.dst == from.dst {
            outer_new.dst = to.dst;
        }
        outer_old.sport = 0;
        outer_old.dport = 0;
        outer_new.sport = 0;
        outer_new.dport = 0;
        let mut od = Delta::default();
        parse::rewrite(frame, p.l3, p.l4, p.end, &outer_old, &outer_new, &mut od);
        let (qfrom, qto) = if reply {
            (c.trans, c.orig)
        } else {
            (c.orig.reverse(), c.trans.reverse())
        };
        let mut d = Delta::default();
        parse::rewrite(frame, q.l3, q.l4, q.end, &qfrom, &qto, &mut d);
        parse::icmp_csum_fix(frame, p.l4, &d);
        if c.nat.snat {
            res.state |= state::SNAT;
        }
        if c.nat.dnat {
            res.state |= state::DNAT;
        }
        res
    }
}

/// Rewrites one original fragment from tuple `old` to `new`: addresses in every fragment,
/// ports and the transport checksum in the first one only.
fn nat_fragment(frame: &mut [u8], old: &Tuple, new: &Tuple) {
    let Ok(p) = parse::parse(frame) else { return };
    let Some(f) = p.frag else { return };
    let mut d = Delta::default();
    if f.offset == 0 {
        parse::rewrite(frame, p.l3, f.data, p.end, old, new, &mut d);
    } else {
        // No transport header here: rewrite addresses only (protocol 0 has no checksum).
        let strip = |t: &Tuple| Tuple {
            sport: 0,
            dport: 0,
            proto: 0,
            ..*t
        };
        parse::rewrite(frame, p.l3, f.data, p.end, &strip(old), &strip(new), &mut d);
    }
}

/// True if `a` applied to a packet of `c` rewrites the packet (NAT).
fn rewrites(a: &CtAction, c: &Conn) -> bool {
    a.nat != Nat::Off && c.nat != NatDone::default()
}

fn apply_marks(g: &mut ConnInner, a: &CtAction) {
    if let Some((v, m)) = a.mark {
        g.mark = (g.mark & !m) | (v & m);
    }
    if let Some((v, m)) = a.label {
        g.label = (g.label & !m) | (v & m);
    }
}
