//! Megaflows and the per-PMD flow table that owns them.
//!
//! Owns: [`Megaflow`] (masked key, mask, actions, hit counters) and [`FlowTable`], a slab of
//! megaflows addressed by small integer ids. Caches (EMC, SMC, dpcls) store ids, not pointers,
//! so a burst can look up every packet first and execute afterwards without borrowing.
//! An id is reused after its flow is removed; every slot carries a generation that the EMC
//! checks, and the SMC re-checks the flow's match, so a reused id never misleads a cache.
//!
//! Each megaflow remembers what its translation depended on ([`Deps`]: the pipeline version it
//! was translated at and opaque tags such as a learned MAC), so revalidation can remove only
//! the megaflows a change affects (see `Datapath::revalidate_tags`).
//!
//! XDP flow marks (`xdp-mark=on` af-xdp ports, see docs/architecture.md): a mark names one
//! megaflow of one PMD as [`mark_of`]`(tag, id)` — the PMD's tag (its core, 8 bits) above the
//! flow id plus one (24 bits). The mark is only a hint: the worker that receives a marked
//! packet uses it only if the tag is its own and the flow at that id covers the packet's key
//! ([`Megaflow::covers`], the check the SMC makes), so a stale, reused or forged mark can at
//! worst cost a fall back to the normal lookups. Each megaflow remembers one IPv4 5-tuple of
//! its packets ([`Megaflow::tuple`]), which is what vireod installs in the XDP program's mark
//! map, and the mark vireod installed for it ([`Megaflow::mark`], display only).
//!
//! Skipping extraction ([`SkipCheck`]): a marked packet normally still has its key extracted,
//! only for that check. A megaflow whose match a few fixed header bytes decide, and whose
//! actions never read the key, gets a [`SkipCheck`] when its tuple is set
//! ([`Megaflow::set_tuple`], decided once): then a packet whose bytes at fixed offsets show
//! exactly that tuple (untagged Ethernet + IPv4 without options, not a fragment, a complete
//! TCP/UDP header) is known to be covered without extracting its key. Why that is exact: every
//! key bit outside [`undetermined`] of such a packet equals the same bit of
//! [`Tuple5::implied_key`] (see [`SkipCheck::admits`] for each layer), the flow's mask uses no
//! bit of [`undetermined`], and the flow covers the implied key; so it covers the packet's
//! key. A stale mark naming a reused id meets the new flow's check, and fails it unless the
//! new flow covers the packet just as well.
//!
//! Threads: a `FlowTable` belongs to one PMD thread. It mirrors its flows into a registry
//! ([`RegistryData`] behind a mutex) that the control thread reads for `dump-megaflows` and
//! revalidation; the PMD takes that lock only when it installs or removes a flow (miss path),
//! never per packet. The registry's epoch, bumped by the control thread when it snapshots the
//! flows for revalidation, is stamped on each flow installed (under the same lock), so a PMD
//! can tell which flows a revalidation scan did not see. Lock order: the datapath control
//! lock, then a registry lock.
pub use crate::action::Deps;
use crate::action::{Action, Actions};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use wire::FlowKey;

/// Sentinel for "no action moves the packet": every output copies it.
pub const NO_STEAL: usize = usize::MAX;

/// Index of the output that may take the packet itself: the last `Output` with no `Userspace`,
/// `Ct`, `TnlPush` or `TnlPop` after it ([`NO_STEAL`] if none).
pub fn steal_index(actions: &[Action]) -> usize {
    let mut steal = NO_STEAL;
    for (i, a) in actions.iter().enumerate() {
        match a {
            Action::Output(_) => steal = i,
            Action::Userspace(_) | Action::Ct(_) | Action::TnlPush(_) | Action::TnlPop(_) => {
                steal = NO_STEAL
            }
            _ => {}
        }
    }
    steal
}

/// Bits of a mark holding the flow id plus one; the 8 bits above hold the PMD's tag.
pub const MARK_ID_BITS: u32 = 24;
const MARK_ID_MASK: u32 = (1 << MARK_ID_BITS) - 1;

/// The tag of the PMD pinned to `core` in its marks.
#[inline]
pub fn mark_tag(core: usize) -> u32 {
    (core & 0xff) as u32
}

/// The mark naming flow `id` of the PMD with `tag`; `None` when the id does not fit.
pub fn mark_of(tag: u32, id: u32) -> Option<u32> {
    (id < MARK_ID_MASK).then(|| (tag & 0xff) << MARK_ID_BITS | (id + 1))
}

/// The flow id a mark names for the PMD with `tag` (`None`: no mark, or another PMD's).
#[inline(always)]
pub fn mark_id(mark: u32, tag: u32) -> Option<u32> {
    let id = mark & MARK_ID_MASK;
    (id != 0 && mark >> MARK_ID_BITS == tag).then(|| id - 1)
}

/// The IPv4 5-tuple of a packet as the XDP program's mark map keys it (addresses as numbers,
/// ports 0 unless TCP or UDP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tuple5 {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
}

impl Tuple5 {
    /// The tuple of a packet's (unmasked) key, if the XDP program can mark such a packet: an
    /// untagged IPv4 frame straight from a port (no recirculation, no tunnel).
    pub fn of(key: &FlowKey) -> Option<Tuple5> {
        use wire::Field::*;
        if key.get(EthType) != 0x0800
            || key.get(VlanTci) != 0
            || key.get(RecircId) != 0
            || key.get(TunId) != 0
        {
            return None;
        }
        let proto = key.get(IpProto) as u8;
        let l4 = proto == 6 || proto == 17;
        Some(Tuple5 {
            src: key.get(Ipv4Src) as u32,
            dst: key.get(Ipv4Dst) as u32,
            sport: if l4 { key.get(TpSrc) as u16 } else { 0 },
            dport: if l4 { key.get(TpDst) as u16 } else { 0 },
            proto,
        })
    }
}

impl Tuple5 {
    /// The key fields every packet that [`SkipCheck::admits`] for this tuple on `in_port`
    /// extracts to, outside [`undetermined`]`(self.proto)` (whose bits are left 0 here): the
    /// port, EtherType IPv4 without a VLAN tag, the protocol and addresses, not a fragment,
    /// the ports for TCP and UDP, and every metadata word zero (a packet fresh from a port,
    /// not decapsulated).
    pub fn implied_key(&self, in_port: u32) -> FlowKey {
        use wire::Field::*;
        let mut k = FlowKey::ZERO;
        k.set(InPort, u64::from(in_port));
        k.set(EthType, 0x0800);
        k.set(IpProto, u64::from(self.proto));
        k.set(Ipv4Src, u64::from(self.src));
        k.set(Ipv4Dst, u64::from(self.dst));
        if self.proto == IPPROTO_TCP || self.proto == IPPROTO_UDP {
            k.set(TpSrc, u64::from(self.sport));
            k.set(TpDst, u64::from(self.dport));
        }
        k
    }
}

const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

/// The key bits a packet admitted by a [`SkipCheck`] for a tuple with protocol `proto` may
/// have anywhere: MAC addresses, TOS, TTL and TCP flags (bytes the check does not compare),
/// and the L4 words unless the protocol is TCP or UDP (ICMP type and code, SCTP ports). A
/// megaflow whose mask uses any of them never skips extraction.
pub fn undetermined(proto: u8) -> FlowKey {
    use wire::Field::*;
    let mut m = FlowKey::ZERO;
    for f in [EthDst, EthSrc, IpTos, IpTtl, TcpFlags] {
        m.set_exact(f);
    }
    if proto != IPPROTO_TCP && proto != IPPROTO_UDP {
        m.set_exact(TpSrc);
        m.set_exact(TpDst);
    }
    m
}

/// True if running `actions` never reads the packet's key: outputs, drops and header
/// rewrites only (`modify` works on the frame; `set_tunnel` writes the key, never reads
/// it). Userspace, meters (a remark band reads the key), `ct`, `ct_clear` and tunnel push and
/// pop read it or hand it on.
pub fn actions_ignore_key(actions: &[Action]) -> bool {
    actions.iter().all(|a| {
        matches!(
            a,
            Action::Output(_)
                | Action::PushVlan(_)
                | Action::PopVlan
                | Action::SetEthSrc(_)
                | Action::SetEthDst(_)
                | Action::SetIpv4Src(_)
                | Action::SetIpv4Dst(_)
                | Action::SetIpDscp(_)
                | Action::SetTpSrc(_)
                | Action::SetTpDst(_)
                | Action::SetIpTtl(_)
                | Action::SetTunnel { .. }
        )
    })
}

/// What a marked packet's frame must show for it to skip extraction: its in_port and the
/// flow's tuple, as the bytes are loaded from the frame (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkipCheck {
    in_port: u32,
    src: u32,
    dst: u32,
    ports: u32,
    proto: u8,
}

impl SkipCheck {
    /// The check for flow `f` with tuple `t`, if the flow may skip extraction at all: its
    /// actions ignore the key, its mask uses no [`undetermined`] bit, and it covers
    /// [`Tuple5::implied_key`].
    pub fn new(f: &Megaflow, t: &Tuple5) -> Option<SkipCheck> {
        let in_port = f.key.get(wire::Field::InPort) as u32;
        let free = f.mask.masked(&undetermined(t.proto)) == FlowKey::ZERO;
        let l4 = t.proto == IPPROTO_TCP || t.proto == IPPROTO_UDP;
        (f.key_free && free && f.covers(&t.implied_key(in_port))).then(|| {
            let mut ports = [0u8; 4];
            if l4 {
                ports[..2].copy_from_slice(&t.sport.to_be_bytes());
                ports[2..].copy_from_slice(&t.dport.to_be_bytes());
            }
            SkipCheck {
                in_port,
                src: u32::from_ne_bytes(t.src.to_be_bytes()),
                dst: u32::from_ne_bytes(t.dst.to_be_bytes()),
                ports: u32::from_ne_bytes(ports),
                proto: t.proto,
            }
        })
    }

    /// True if `frame`, received on `in_port` (not decapsulated: the caller checks), extracts
    /// to a key equal to the tuple's [`Tuple5::implied_key`] outside [`undetermined`]. Layer
    /// by layer, as `wire::extract_into` reads them: EtherType 0x0800 at offset 12 (so no VLAN
    /// tag: vlan_tci 0); version 4 with a 20-byte header and a total length of at least 20 (so
    /// the IPv4 header parses: protocol and addresses are in the key); flags and offset with
    /// neither MF nor an offset (ip_frag 0, L4 parsed); for TCP a payload (within the total
    /// length) holding a whole TCP header, for UDP one of at least 8 bytes (so the ports are
    /// in the key); every compared byte equal to the tuple's.
    #[inline(always)]
    pub fn admits(&self, frame: &[u8], in_port: u32) -> bool {
        let Some(h) = frame.get(..38) else {
            return false;
        };
        let w = |o: usize| u32::from_ne_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
        if in_port != self.in_port
            || h[12] != 0x08
            || h[13] != 0x00
            || h[14] != 0x45
            || h[23] != self.proto
            || w(26) != self.src
            || w(30) != self.dst
            || u16::from_be_bytes([h[20], h[21]]) & 0x3fff != 0
        {
            return false;
        }
        let total = usize::from(u16::from_be_bytes([h[16], h[17]]));
        if total < 20 {
            return false;
        }
        let l4_len = total.min(frame.len() - 14) - 20;
        match self.proto {
            IPPROTO_TCP => {
                w(34) == self.ports
                    && frame.get(46).is_some_and(|&b| {
                        let hl = usize::from(b >> 4) * 4;
                        hl >= 20 && l4_len >= hl
                    })
            }
            IPPROTO_UDP => w(34) == self.ports && l4_len >= 8,
            _ => true,
        }
    }
}

/// A cached decision: packets whose key agrees with `key` on the bits of `mask` get `actions`.
#[derive(Debug)]
pub struct Megaflow {
    /// The masked key (`key & mask == key`).
    pub key: FlowKey,
    /// Bits that matter.
    pub mask: FlowKey,
    /// What to do.
    pub actions: Actions,
    /// Index of the output action that may take the packet itself instead of a copy: the last
    /// `Output` when no `Userspace` follows it. [`NO_STEAL`] if none.
    pub(crate) steal: usize,
    /// The mask's tail is zero (`wire::flow`, *Head and tail*): [`Megaflow::covers`] compares
    /// the head words only.
    head_only: bool,
    /// What the translation depended on.
    pub deps: Deps,
    /// Registry epoch when installed (set by [`FlowTable::insert`] under the registry lock).
    pub(crate) epoch: u64,
    /// The 5-tuple an XDP mark for it is keyed by: that of the packet whose upcall created
    /// it, or (if that one had none, e.g. IPv6) of the first packet from an `xdp-mark` port
    /// that hit it past the EMC. Set once by the owning PMD; read by the control thread.
    pub tuple: OnceLock<Tuple5>,
    /// The XDP mark vireod installed for it (0: none); written by the control thread, shown
    /// by `dump-megaflows`, never read on the fast path.
    pub mark: AtomicU32,
    /// Its actions never read the key ([`actions_ignore_key`]).
    key_free: bool,
    /// Set with the tuple when a marked packet of it may skip extraction ([`SkipCheck`]).
    skip: OnceLock<SkipCheck>,
    packets: AtomicU64,
    bytes: AtomicU64,
    /// Counts already reported by [`Megaflow::take_delta`] (control thread only).
    reported: Mutex<(u64, u64)>,
}

impl Megaflow {
    /// A megaflow with no dependencies; `key` is masked here.
    pub fn new(key: &FlowKey, mask: &FlowKey, actions: Actions) -> Megaflow {
        Megaflow::with_deps(key, mask, actions, Deps::default())
    }

    /// A megaflow that depends on `deps`; `key` is masked here.
    pub fn with_deps(key: &FlowKey, mask: &FlowKey, actions: Actions, deps: Deps) -> Megaflow {
        let steal = steal_index(&actions);
        let key_free = actions_ignore_key(&actions);
        Megaflow {
            key: key.masked(mask),
            mask: *mask,
            actions,
            steal,
            head_only: !mask.has_tail(),
            deps,
            epoch: 0,
            tuple: OnceLock::new(),
            mark: AtomicU32::new(0),
            key_free,
            skip: OnceLock::new(),
            packets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            reported: Mutex::new((0, 0)),
        }
    }

    /// Gives the flow its tuple (once; later calls do nothing) and decides, from it, whether
    /// marked packets of it may skip extraction ([`SkipCheck::new`]).
    pub fn set_tuple(&self, t: Tuple5) {
        if self.tuple.set(t).is_ok() {
            if let Some(c) = SkipCheck::new(self, &t) {
                let _ = self.skip.set(c);
            }
        }
    }

    /// The check a marked packet passes to skip extraction, if this flow allows it.
    #[inline(always)]
    pub fn skip_check(&self) -> Option<&SkipCheck> {
        self.skip.get()
    }

    /// Marks hits as already reported: the packet whose upcall created the flow was counted by
    /// the pipeline itself.
    pub(crate) fn preset_reported(&self, packets: u64, bytes: u64) {
        *self.reported.lock().unwrap_or_else(|e| e.into_inner()) = (packets, bytes);
    }

    /// Packets and bytes since the previous call (for crediting the pipeline's rules).
    pub fn take_delta(&self) -> (u64, u64) {
        let (p, b) = (self.packets(), self.bytes());
        let mut r = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        let d = (p.saturating_sub(r.0), b.saturating_sub(r.1));
        *r = (p, b);
        d
    }

    /// Packets that hit this flow.
    pub fn packets(&self) -> u64 {
        self.packets.load(Relaxed)
    }

    /// Bytes of those packets.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Relaxed)
    }

    /// Adds hits. Only the owning PMD writes, so a plain load/store pair (no locked RMW).
    #[inline]
    pub(crate) fn hit(&self, packets: u64, bytes: u64) {
        self.packets
            .store(self.packets.load(Relaxed) + packets, Relaxed);
        self.bytes.store(self.bytes.load(Relaxed) + bytes, Relaxed);
    }

    /// Starts loading the words [`Megaflow::covers`] compares (the head of key and mask).
    #[inline(always)]
    pub fn prefetch_match(&self) {
        guestmem::prefetch_ref(&self.key, true);
        guestmem::prefetch_ref(&self.mask, true);
    }

    /// True if `key` falls under this megaflow.
    #[inline]
    pub fn covers(&self, key: &FlowKey) -> bool {
        self.covers_in(crate::simd::Scalar, key)
    }

    /// [`Megaflow::covers`] with kernels `k` (a PMD's burst function compiled for them).
    #[inline(always)]
    pub fn covers_in<K: crate::simd::Kernels>(&self, k: K, key: &FlowKey) -> bool {
        if self.head_only {
            k.eq_masked_head(key.head(), self.key.head(), self.mask.head())
        } else {
            k.eq_masked_all(&key.w, &self.key.w, &self.mask.w)
        }
    }
}

/// The control thread's view of one PMD's flows, indexed by flow id (derefs to the slots), and
/// the revalidation epoch.
#[derive(Debug, Default)]
pub struct RegistryData {
    flows: Vec<Option<Arc<Megaflow>>>,
    epoch: u64,
}

impl RegistryData {
    /// Starts a revalidation scan: bumps the epoch and returns it with a snapshot of the flows
    /// as (id, flow). Flows installed later carry an epoch at least the returned one.
    pub fn snapshot(&mut self) -> (u64, Vec<(u32, Arc<Megaflow>)>) {
        self.epoch += 1;
        let flows = self
            .flows
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.as_ref().map(|f| (i as u32, f.clone())))
            .collect();
        (self.epoch, flows)
    }
}

impl std::ops::Deref for RegistryData {
    type Target = Vec<Option<Arc<Megaflow>>>;
    fn deref(&self) -> &Self::Target {
        &self.flows
    }
}

impl std::ops::DerefMut for RegistryData {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.flows
    }
}

/// The control thread's view of one PMD's flows.
pub type Registry = Arc<Mutex<RegistryData>>;

struct Slot {
    flow: Option<Arc<Megaflow>>,
    gen: u32,
    seen_packets: u64,
    idle_sweeps: u32,
}

/// A slab of megaflows owned by one PMD.
pub struct FlowTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    registry: Registry,
}

impl Default for FlowTable {
    fn default() -> Self {
        FlowTable::new(Registry::default())
    }
}

impl FlowTable {
    /// An empty table mirroring into `registry`.
    pub fn new(registry: Registry) -> FlowTable {
        FlowTable {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            registry,
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, RegistryData> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of flows.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True if there is no flow.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Adds a flow; returns its id and generation.
    pub fn insert(&mut self, mut flow: Megaflow) -> (u32, u32) {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.slots.push(Slot {
                    flow: None,
                    gen: 0,
                    seen_packets: 0,
                    idle_sweeps: 0,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let flow = {
            let mut r = self.registry();
            flow.epoch = r.epoch;
            let flow = Arc::new(flow);
            if r.len() <= id as usize {
                r.resize(id as usize + 1, None);
            }
            r[id as usize] = Some(flow.clone());
            flow
        };
        let s = &mut self.slots[id as usize];
        s.flow = Some(flow);
        s.seen_packets = 0;
        s.idle_sweeps = 0;
        self.live += 1;
        (id, s.gen)
    }

    /// Every live flow with its id.
    pub fn live(&self) -> impl Iterator<Item = (u32, &Arc<Megaflow>)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.flow.as_ref().map(|f| (i as u32, f)))
    }

    /// The registry's current epoch (takes the registry lock: not for the fast path).
    pub fn epoch(&self) -> u64 {
        self.registry().epoch
    }

    /// The flow with this id, if live.
    #[inline]
    pub fn get(&self, id: u32) -> Option<&Arc<Megaflow>> {
        self.slots.get(id as usize).and_then(|s| s.flow.as_ref())
    }

    /// Starts loading the slot of flow `id` (its `Arc` and generation).
    #[inline(always)]
    pub fn prefetch_slot(&self, id: u32) {
        if let Some(s) = self.slots.get(id as usize) {
            guestmem::prefetch_ref(s, false);
        }
    }

    /// The flow with this id if it is still the one of generation `gen`.
    #[inline]
    pub fn get_gen(&self, id: u32, gen: u32) -> Option<&Arc<Megaflow>> {
        match self.slots.get(id as usize) {
            Some(s) if s.gen == gen => s.flow.as_ref(),
            _ => None,
        }
    }

    /// The current generation of a live flow's id.
    #[inline]
    pub fn gen(&self, id: u32) -> Option<u32> {
        match self.slots.get(id as usize) {
            Some(s) if s.flow.is_some() => Some(s.gen),
            _ => None,
        }
    }

    /// Removes a flow; its id's generation moves on.
    pub fn remove(&mut self, id: u32) -> Option<Arc<Megaflow>> {
        let s = self.slots.get_mut(id as usize)?;
        let f = s.flow.take()?;
        s.gen = s.gen.wrapping_add(1);
        self.free.push(id);
        self.live -= 1;
        if let Some(r) = self.registry().get_mut(id as usize) {
            *r = None;
        }
        Some(f)
    }

    /// Removes every flow.
    pub fn clear(&mut self) {
        self.free.clear();
        for (i, s) in self.slots.iter_mut().enumerate().rev() {
            if s.flow.take().is_some() {
                s.gen = s.gen.wrapping_add(1);
            }
            self.free.push(i as u32);
        }
        self.live = 0;
        self.registry().clear();
    }

    /// One idle sweep: returns the ids of flows with no new hit in `max_sweeps` consecutive
    /// sweeps (the caller removes them from the classifier and then from here).
    pub fn sweep_idle(&mut self, max_sweeps: u32, out: &mut Vec<u32>) {
        for (i, s) in self.slots.iter_mut().enumerate() {
            let Some(f) = &s.flow else { continue };
            let p = f.packets();
            if p != s.seen_packets {
                s.seen_packets = p;
                s.idle_sweeps = 0;
            } else {
                s.idle_sweeps += 1;
                if s.idle_sweeps >= max_sweeps {
                    out.push(i as u32);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::Field;

    fn flow(port: u64, acts: Vec<Action>) -> Megaflow {
        let mut k = FlowKey::ZERO;
        k.set(Field::InPort, port);
        k.set(Field::TpDst, 80);
        let mut m = FlowKey::ZERO;
        m.set_exact(Field::InPort);
        Megaflow::new(&k, &m, acts.into())
    }

    #[test]
    fn marks_name_one_flow_of_one_pmd() {
        let m = mark_of(mark_tag(3), 41).unwrap();
        assert_ne!(m, 0);
        assert_eq!(mark_id(m, mark_tag(3)), Some(41));
        assert_eq!(mark_id(m, mark_tag(4)), None, "another PMD's mark");
        assert_eq!(mark_id(0, 0), None, "0 is no mark");
        assert_eq!(
            mark_id(mark_tag(3) << MARK_ID_BITS, 3),
            None,
            "id 0 is no mark"
        );
        assert_eq!(mark_of(0, MARK_ID_MASK), None, "id too big");
        assert_eq!(mark_id(mark_of(0, 0).unwrap(), 0), Some(0));
    }

    /// Ethernet + IPv4 (10.0.0.1 → 10.0.0.2) + an L4 header of `l4` bytes of protocol
    /// `proto` (ports 1000 → 80; TCP data offset 5) + 4 bytes of payload.
    fn ipv4_frame(proto: u8, l4: usize) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        let total = (20 + l4 + 4) as u16;
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        let mut h = vec![0u8; l4 + 4];
        h[0..4].copy_from_slice(&[0x03, 0xe8, 0, 80]);
        if proto == IPPROTO_TCP {
            h[12] = 0x50;
            h[13] = 0x12;
        }
        f.extend_from_slice(&h);
        f
    }

    /// The bits of a key outside [`undetermined`].
    fn determined(key: &FlowKey, proto: u8) -> FlowKey {
        let u = undetermined(proto);
        let mut m = FlowKey::ZERO;
        for i in 0..m.w.len() {
            m.w[i] = !u.w[i];
        }
        key.masked(&m)
    }

    /// The claim the skip rests on, tried on frames bent at random: whatever frame a
    /// [`SkipCheck`] admits extracts to its tuple's implied key outside [`undetermined`]; and
    /// the unbent frames (TCP, UDP, ICMP) are admitted.
    #[test]
    fn an_admitted_frame_extracts_to_the_implied_key() {
        let mut rng = 0x2545_f491_u32;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            rng
        };
        for (proto, l4) in [
            (IPPROTO_TCP, 20),
            (IPPROTO_TCP, 24),
            (IPPROTO_UDP, 8),
            (1, 8),
        ] {
            let base = ipv4_frame(proto, l4);
            let key = wire::extract(&base, 3);
            let t = Tuple5::of(&key).unwrap();
            assert_eq!(
                determined(&key, proto),
                determined(&t.implied_key(3), proto)
            );
            // A flow matching every determined bit of it, so any check it gets is the tightest.
            let mut mask = FlowKey::ZERO;
            for i in 0..mask.w.len() {
                mask.w[i] = !undetermined(proto).w[i];
            }
            let f = Megaflow::new(&key, &mask, vec![Action::Output(1)].into());
            let c = SkipCheck::new(&f, &t).expect("a flow of determined bits may skip");
            assert!(c.admits(&base, 3), "proto {proto}");
            assert!(!c.admits(&base, 4), "another port");
            let (mut admitted, mut tries) = (0, 0);
            while tries < 20_000 {
                tries += 1;
                let mut g = base.clone();
                for _ in 0..1 + next() % 3 {
                    let at = next() as usize % g.len();
                    // Mostly small changes to header bytes (version/IHL, lengths, flags,
                    // offsets, data offset), sometimes any value.
                    g[at] = match next() % 4 {
                        0 => next() as u8,
                        1 => g[at] ^ (1 << (next() % 8)),
                        2 => g[at].wrapping_add(4),
                        _ => g[at].wrapping_sub(4),
                    };
                }
                if next() % 8 == 0 {
                    g.truncate(next() as usize % (g.len() + 1));
                }
                if c.admits(&g, 3) {
                    admitted += 1;
                    let k = wire::extract(&g, 3);
                    assert_eq!(
                        determined(&k, proto),
                        determined(&t.implied_key(3), proto),
                        "admitted but extracts otherwise: {g:02x?}"
                    );
                    assert!(f.covers(&k));
                }
            }
            assert!(admitted > 100, "proto {proto}: only {admitted} admitted");
        }
    }

    /// What may skip: not a flow whose mask uses an undetermined field (a MAC; the ICMP type,
    /// which the XDP program does not key on), nor one whose actions read the key, nor one
    /// that does not cover its own tuple's implied key (made by a fragment).
    #[test]
    fn skip_checks_only_for_flows_the_tuple_decides() {
        let udp = wire::extract(&ipv4_frame(IPPROTO_UDP, 8), 3);
        let icmp = wire::extract(&ipv4_frame(1, 8), 3);
        let exact = |fields: &[Field]| {
            let mut m = FlowKey::ZERO;
            for f in fields {
                m.set_exact(*f);
            }
            m
        };
        let base = [Field::InPort, Field::EthType, Field::Ipv4Dst, Field::IpFrag];
        let out: Actions = vec![Action::SetEthDst([2; 6]), Action::Output(1)].into();
        let check = |key: &FlowKey, mask: FlowKey, acts: &Actions| {
            let f = Megaflow::new(key, &mask, acts.clone());
            f.set_tuple(Tuple5::of(key).unwrap());
            f.skip_check().is_some()
        };
        assert!(check(&udp, exact(&base), &out));
        assert!(check(
            &udp,
            exact(&[&base[..], &[Field::TpSrc]].concat()),
            &out
        ));
        assert!(!check(
            &udp,
            exact(&[&base[..], &[Field::EthSrc]].concat()),
            &out
        ));
        assert!(!check(
            &udp,
            exact(&[&base[..], &[Field::IpTos]].concat()),
            &out
        ));
        assert!(check(&icmp, exact(&base), &out));
        assert!(!check(
            &icmp,
            exact(&[&base[..], &[Field::TpSrc]].concat()),
            &out
        ));
        for acts in [
            vec![Action::Userspace(1)],
            vec![Action::CtClear, Action::Output(1)],
        ] {
            assert!(!check(&udp, exact(&base), &acts.into()));
        }
        assert!(
            check(&udp, exact(&base), &Vec::new().into()),
            "a drop may skip"
        );
        let mut first_frag = udp;
        first_frag.set(Field::IpFrag, 1);
        assert!(!check(&first_frag, exact(&base), &out));
    }

    #[test]
    fn steal_index_is_last_output_without_userspace_after() {
        use Action::*;
        assert_eq!(flow(1, vec![Output(1), PopVlan, Output(2)]).steal, 2);
        assert_eq!(flow(1, vec![Output(1), Userspace(3)]).steal, NO_STEAL);
        assert_eq!(flow(1, vec![]).steal, NO_STEAL);
        let f = flow(1, vec![]);
        assert_eq!(f.key.get(Field::TpDst), 0, "key is masked");
    }

    /// The SMC's check: a megaflow whose mask has a tail field covers only keys with that
    /// tail value; one without covers keys whatever their tail.
    #[test]
    fn covers_compares_the_tail_only_when_the_mask_has_one() {
        let mut k = FlowKey::ZERO;
        k.set(Field::InPort, 1);
        k.set(Field::CtMark, 7);
        let mut m = FlowKey::ZERO;
        m.set_exact(Field::InPort);
        m.set_exact(Field::CtMark);
        let with_tail = Megaflow::new(&k, &m, Vec::new().into());
        let mut other = k;
        other.set(Field::CtMark, 8);
        assert!(with_tail.covers(&k));
        assert!(!with_tail.covers(&other));
        let mut plain = k;
        plain.set(Field::CtMark, 0);
        assert!(!with_tail.covers(&plain));
        let head = flow(1, vec![]);
        assert!(head.covers(&k) && head.covers(&other) && head.covers(&plain));
        let mut wrong_port = k;
        wrong_port.set(Field::InPort, 2);
        assert!(!head.covers(&wrong_port) && !with_tail.covers(&wrong_port));
    }

    #[test]
    fn ids_are_reused_with_a_new_generation_and_registry_mirrors() {
        let reg = Registry::default();
        let mut t = FlowTable::new(reg.clone());
        let (a, ga) = t.insert(flow(1, vec![]));
        let (b, _) = t.insert(flow(2, vec![]));
        assert_eq!(reg.lock().unwrap().iter().flatten().count(), 2);
        assert!(t.remove(a).is_some());
        assert!(t.get_gen(a, ga).is_none());
        let (c, gc) = t.insert(flow(3, vec![]));
        assert_eq!(c, a);
        assert_ne!(gc, ga);
        assert!(t.get_gen(c, gc).is_some());
        assert_eq!(t.len(), 2);
        t.clear();
        assert!(t.is_empty() && t.get(b).is_none());
        assert!(reg.lock().unwrap().is_empty());
    }

    #[test]
    fn idle_sweep_finds_flows_without_new_hits() {
        let mut t = FlowTable::default();
        let (a, _) = t.insert(flow(1, vec![]));
        let (b, _) = t.insert(flow(2, vec![]));
        let mut out = Vec::new();
        t.get(b).unwrap().hit(1, 60);
        t.sweep_idle(2, &mut out);
        t.get(b).unwrap().hit(1, 60);
        t.sweep_idle(2, &mut out);
        assert_eq!(out, vec![a]);
    }
}
