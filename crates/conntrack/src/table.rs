//! The connection table: sharded hash maps keyed by (zone, tuple) in both directions.
//!
//! Owns: [`Conn`] (one tracked connection: its original and translated tuples, expiry and
//! liveness as atomics, mutable state behind its own mutex) and [`Table`] (`SHARDS` shards, each
//! an `RwLock<HashMap<Key, Arc<Conn>>>`). A connection is entered twice: under its original
//! tuple and under the reverse of its translated tuple (what a reply looks like on arrival).
//! Keys are hashed with [`KeyHash`], a keyed multiply-fold hash with per-table random secrets
//! (cheap enough for two lookups per packet, keyed so a sender cannot aim tuples at a shard;
//! see its doc and `docs/threat-model.md`).
//!
//! Threads: every PMD thread looks up and inserts concurrently; the control thread dumps,
//! flushes and sweeps. There is no global lock: a lookup takes one shard's read lock for the
//! map probe only (the `Arc` is cloned and the lock dropped before the connection's mutex is
//! taken). Insert and removal take the write locks of the (at most two) shards the keys hash
//! to.
//!
//! Lock order: shard locks in ascending shard index, then a connection's mutex. Nothing takes
//! a shard lock while holding a connection mutex, and no code holds two connection mutexes.

use std::collections::HashMap;
use std::hash::RandomState;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockWriteGuard};

use crate::parse::Tuple;
use crate::tcp::TcpConn;

/// Number of shards (a power of two). With 1M connections (2M keys) a shard holds ~2K keys,
/// which bounds how long any one lock is held by a sweep slice.
pub const SHARDS: usize = 1024;

/// A table key: zone and the tuple of a packet as it arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// Zone.
    pub zone: u16,
    /// Tuple.
    pub t: Tuple,
}

/// Mutable per-connection state (behind [`Conn::inner`]).
#[derive(Clone, Copy, Debug)]
pub struct ConnInner {
    /// TCP state, for TCP connections.
    pub tcp: Option<TcpConn>,
    /// A packet was seen in the reply direction.
    pub replied: bool,
    /// Packets seen in the original direction.
    pub orig_pkts: u64,
    /// Mark.
    pub mark: u32,
    /// Label.
    pub label: u128,
}

/// NAT kinds a connection carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatDone {
    /// Source translated.
    pub snat: bool,
    /// Destination translated.
    pub dnat: bool,
}

/// One connection.
#[derive(Debug)]
pub struct Conn {
    /// Zone.
    pub zone: u16,
    /// Tuple of the original direction as it arrived.
    pub orig: Tuple,
    /// The original-direction tuple after NAT (equal to `orig` without NAT).
    pub trans: Tuple,
    /// NAT applied.
    pub nat: NatDone,
    /// Expiry time, ms.
    pub expires: AtomicU64,
    /// Removed from the table (a lookup that raced with removal ignores it).
    pub dead: AtomicBool,
    /// Timeout policy of its zone when it was created.
    pub policy: Arc<crate::Timeouts>,
    /// Mutable state.
    pub inner: Mutex<ConnInner>,
}

impl Conn {
    /// The key of the original direction.
    pub fn orig_key(&self) -> Key {
        Key {
            zone: self.zone,
            t: self.orig,
        }
    }
    /// The key of the reply direction.
    pub fn reply_key(&self) -> Key {
        Key {
            zone: self.zone,
            t: self.trans.reverse(),
        }
    }
    /// Live at `now`.
    pub fn alive(&self, now: u64) -> bool {
        !self.dead.load(Ordering::Acquire) && self.expires.load(Ordering::Relaxed) > now
    }
    /// Locks the state (a poisoned lock is recovered: the state is plain data).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, ConnInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A key with its hash computed once ([`KeyHash`]); the map hashes by that value alone.
#[derive(Clone, Copy, Debug)]
struct HKey {
    h: u64,
    k: Key,
}
impl PartialEq for HKey {
    fn eq(&self, o: &Self) -> bool {
        self.h == o.h && self.k == o.k
    }
}
impl Eq for HKey {}
impl std::hash::Hash for HKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.h);
    }
}

/// Passes a precomputed hash through.
#[derive(Default)]
struct PassThrough(u64);
impl std::hash::Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, b: &[u8]) {
        for &x in b {
            self.0 = self.0.rotate_left(8) ^ u64::from(x);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// The 128-bit product of `a` and `b`, its halves folded together by xor.
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// The table's keyed hash of a [`Key`]: each pair of the key's five 64-bit words (source
/// address, destination address, ports/protocol/family/zone) is xored with secret words and
/// multiplied (128-bit product, halves folded), the three products are summed and mixed once
/// more with a secret. The seven secret words come from the OS's random source
/// ([`std::hash::RandomState`]) when the table is created and never leave the process.
///
/// Why not SipHash: it cost a fifth of a PMD's time under `vireo-bench`'s `ct:64` (two
/// lookups per packet; `BENCHMARKS.md`, *Connection tracking*). This costs four multiplies.
/// Why it still stands against a guest choosing tuples (`docs/threat-model.md`): every input
/// word meets a secret before it is multiplied, so a sender who cannot read the secret cannot
/// aim tuples at one shard or bucket; the mapping from tuples to hashes changes with every
/// table (every vireod start). It is not a cryptographic PRF: a sender able to observe bucket
/// collisions precisely enough to recover the secrets could build colliding tuples; the
/// per-zone and global connection limits bound what such a flood can put in one shard.
#[derive(Clone, Copy, Debug)]
pub struct KeyHash {
    s: [u64; 7],
}

impl KeyHash {
    /// A hasher with fresh random secrets.
    pub fn random() -> KeyHash {
        use std::hash::BuildHasher;
        let r = RandomState::new();
        let mut s = [0u64; 7];
        for (i, w) in s.iter_mut().enumerate() {
            // SipHash of the index under the OS-seeded key: seven independent random words.
            *w = r.hash_one(i as u64);
        }
        KeyHash { s }
    }

    /// The hash of `k`.
    #[inline]
    pub fn hash(&self, k: &Key) -> u64 {
        let t = &k.t;
        let w = |a: &[u8; 16], i: usize| {
            u64::from_le_bytes([
                a[i],
                a[i + 1],
                a[i + 2],
                a[i + 3],
                a[i + 4],
                a[i + 5],
                a[i + 6],
                a[i + 7],
            ])
        };
        let tail = u64::from(t.sport)
            | u64::from(t.dport) << 16
            | u64::from(t.proto) << 32
            | u64::from(t.v6) << 40
            | u64::from(k.zone) << 48;
        let s = &self.s;
        let a = fold_mul(w(&t.src, 0) ^ s[0], w(&t.src, 8) ^ s[1]);
        let b = fold_mul(w(&t.dst, 0) ^ s[2], w(&t.dst, 8) ^ s[3]);
        let c = fold_mul(tail ^ s[4], a.rotate_left(23) ^ s[5]);
        fold_mul(b.wrapping_add(c) ^ s[6], s[2] | 1)
    }
}

type Map = HashMap<HKey, Arc<Conn>, std::hash::BuildHasherDefault<PassThrough>>;

/// Connections an insert found expired in its way and unlinked (the caller accounts them).
pub type Killed = [Option<Arc<Conn>>; 2];

/// The sharded table.
pub struct Table {
    shards: Box<[RwLock<Map>]>,
    hasher: KeyHash,
}

/// Why an insert failed.
#[derive(Debug)]
pub enum InsertErr {
    /// A key is taken by a live connection (returned).
    Exists(Arc<Conn>),
    /// The reply key clashes with another connection (NAT must pick again).
    Clash,
}

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

impl Table {
    /// An empty table.
    pub fn new() -> Table {
        Table {
            shards: (0..SHARDS).map(|_| RwLock::new(Map::default())).collect(),
            hasher: KeyHash::random(),
        }
    }

    fn hk(&self, k: &Key) -> HKey {
        HKey {
            h: self.hasher.hash(k),
            k: *k,
        }
    }

    /// The table's hash of `k` (for [`Table::get_hashed`]).
    #[inline]
    pub fn hash(&self, k: &Key) -> u64 {
        self.hasher.hash(k)
    }
    fn shard(&self, k: &HKey) -> usize {
        ((k.h >> 40) as usize) & (SHARDS - 1)
    }

    fn read(&self, i: usize) -> std::sync::RwLockReadGuard<'_, Map> {
        self.shards[i].read().unwrap_or_else(|e| e.into_inner())
    }
    fn write(&self, i: usize) -> RwLockWriteGuard<'_, Map> {
        self.shards[i].write().unwrap_or_else(|e| e.into_inner())
    }

    /// Finds the connection a packet with key `k` belongs to (live or not).
    pub fn get(&self, k: &Key) -> Option<Arc<Conn>> {
        self.get_hashed(k, self.hash(k))
    }

    /// [`Table::get`] with `h` = [`Table::hash`]`(k)` computed by the caller.
    #[inline]
    pub fn get_hashed(&self, k: &Key, h: u64) -> Option<Arc<Conn>> {
        let k = HKey { h, k: *k };
        self.read(self.shard(&k)).get(&k).cloned()
    }

    /// True if `k` is taken by a connection alive at `now`.
    pub fn taken(&self, k: &Key, now: u64) -> bool {
        let k = self.hk(k);
        self.read(self.shard(&k))
            .get(&k)
            .is_some_and(|c| c.alive(now))
    }

    /// Write-locks the shards of `a` and `b` in ascending order.
    fn lock2(
        &self,
        a: usize,
        b: usize,
    ) -> (RwLockWriteGuard<'_, Map>, Option<RwLockWriteGuard<'_, Map>>) {
        if a == b {
            (self.write(a), None)
        } else if a < b {
            let ga = self.write(a);
            (ga, Some(self.write(b)))
        } else {
            let gb = self.write(b);
            (self.write(a), Some(gb))
        }
    }

    /// Enters `c` under both keys. Dead or expired entries in the way are unlinked from the
    /// shard they sit in (their other key is left for the sweep, which ignores keys whose
    /// connection is already dead).
    pub fn insert(&self, c: Arc<Conn>, now: u64) -> Result<Killed, InsertErr> {
        let mut killed: Killed = [None, None];
        let (ko, kr) = (self.hk(&c.orig_key()), self.hk(&c.reply_key()));
        let (so, sr) = (self.shard(&ko), self.shard(&kr));
        let (mut g1, mut g2) = self.lock2(so, sr);
        let (mo, mr): (&mut Map, &mut Map) = match g2.as_deref_mut() {
            None => {
                let m = &mut *g1;
                if let Some(old) = m.get(&ko).filter(|o| o.alive(now)) {
                    return Err(InsertErr::Exists(old.clone()));
                }
                if m.get(&kr).is_some_and(|o| o.alive(now)) {
                    return Err(InsertErr::Clash);
                }
                for (i, k) in [ko, kr].into_iter().enumerate() {
                    if let Some(old) = m.remove(&k) {
                        if !old.dead.swap(true, Ordering::AcqRel) {
                            killed[i] = Some(old);
                        }
                    }
                }
                m.insert(ko, c.clone());
                m.insert(kr, c);
                return Ok(killed);
            }
            // `lock2` returns the guard of its first argument first, whatever the lock order.
            Some(m2) => (&mut *g1, m2),
        };
        if let Some(old) = mo.get(&ko).filter(|o| o.alive(now)) {
            return Err(InsertErr::Exists(old.clone()));
        }
        if mr.get(&kr).is_some_and(|o| o.alive(now)) {
            return Err(InsertErr::Clash);
        }
        if let Some(old) = mo.remove(&ko) {
            if !old.dead.swap(true, Ordering::AcqRel) {
                killed[0] = Some(old);
            }
        }
        if let Some(old) = mr.remove(&kr) {
            if !old.dead.swap(true, Ordering::AcqRel) {
                killed[1] = Some(old);
            }
        }
        mo.insert(ko, c.clone());
        mr.insert(kr, c);
        Ok(killed)
    }

    /// Removes `c` (both keys, where they still point at it). Returns true if this call
    /// removed it (so exactly one caller accounts for it).
    pub fn remove(&self, c: &Arc<Conn>) -> bool {
        self.remove_timed(c).0
    }

    /// [`Table::remove`], also returning how long the write locks were held, ns.
    pub fn remove_timed(&self, c: &Arc<Conn>) -> (bool, u64) {
        let (ko, kr) = (self.hk(&c.orig_key()), self.hk(&c.reply_key()));
        let (so, sr) = (self.shard(&ko), self.shard(&kr));
        let (mut g1, mut g2) = self.lock2(so, sr);
        let t = std::time::Instant::now();
        let r = Self::unlink_locked(c, ko, kr, &mut g1, g2.as_deref_mut());
        drop(g2);
        drop(g1);
        (r, t.elapsed().as_nanos() as u64)
    }

    fn unlink_locked(
        c: &Arc<Conn>,
        ko: HKey,
        kr: HKey,
        g1: &mut Map,
        g2: Option<&mut Map>,
    ) -> bool {
        // Already dead: still unlink any key that points at it, but do not account it again.
        let was_dead = c.dead.swap(true, Ordering::AcqRel);
        let unlink = |g: &mut Map| {
            for k in [ko, kr] {
                if g.get(&k).is_some_and(|o| Arc::ptr_eq(o, c)) {
                    g.remove(&k);
                }
            }
        };
        unlink(g1);
        if let Some(g2) = g2 {
            unlink(g2);
        }
        !was_dead
    }

    /// Calls `f` with every connection of shard `i` whose original key sits there, under the
    /// shard's read lock. Returns how long the lock was held, ns.
    pub fn scan_shard(&self, i: usize, mut f: impl FnMut(&Arc<Conn>)) -> u64 {
        let t = std::time::Instant::now();
        let g = self.read(i);
        for (k, c) in g.iter() {
            if k.k == c.orig_key() || c.dead.load(Ordering::Relaxed) {
                f(c);
            }
        }
        drop(g);
        t.elapsed().as_nanos() as u64
    }

    /// Unlinks from shard `i` every key whose connection is dead (keys left behind by
    /// [`Table::insert`] replacing a dead entry). Returns ns the write lock was held.
    pub fn purge_dead(&self, i: usize) -> u64 {
        if !self
            .read(i)
            .values()
            .any(|c| c.dead.load(Ordering::Relaxed))
        {
            return 0;
        }
        let t = std::time::Instant::now();
        self.write(i).retain(|_, c| !c.dead.load(Ordering::Relaxed));
        t.elapsed().as_nanos() as u64
    }
}
