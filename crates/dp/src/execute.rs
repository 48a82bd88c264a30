//! Action execution and per-port transmit batching.
//!
//! Owns: [`TxTable`] (one pending [`Batch`] per known output port, sent with one `tx_burst`
//! per port per rx burst, or earlier if a batch fills) and [`execute`], which runs an action
//! list on one packet. The packet itself goes to the last output when nothing after it needs
//! it; every other output sends a copy taken from the PMD's pool. Nothing here allocates once
//! the pool is warm.
//!
//! Offloads: a packet whose metadata says its checksum is partial or that it is a TCP GSO
//! frame (`packet::Offload`, set by the port it came from) is sent as is to a port whose
//! `tx_offloads` take it; for any other port it is finished in software at output
//! ([`TxTable::send`]): a partial checksum is completed in place on the packet itself before
//! its first copy is taken, so once per packet whatever the number of outputs; a GSO frame is
//! cut into checksummed segments (`wire::offload::segment_tcp`) for that port. Packets with
//! no offload pay one comparison. Rewrites of L3/L4 fields keep a partial checksum right
//! ([`modify`]).
//! Threads: PMD thread only; no locks (ports serialize tx internally if they must).
use crate::action::{Action, CtSpec, Upcall};
use crate::flow::NO_STEAL;
use crate::meter::{remark_dscp, Verdict};
use crate::stats::Tally;
use conntrack::{Conntrack, CtResult, Hint, Outcome};
use guestmem::GuestMemory;
use packet::{Batch, Offload, Packet, Pool, MAX_FRAME};
use ports::Port;
use std::sync::Arc;
use wire::ethernet::ethertype;
use wire::{offload, rewrite, Field, FlowKey};

pub use dpif::modify::{modify, partial_field, pop_vlan, push_vlan};

/// Port numbers below this are found by direct index; others by a scan.
const DIRECT_PORTS: usize = 4096;

/// Completes a partial checksum in place (`Offload::Csum` only) and clears the offload.
/// Returns false if the offsets were bad (they were checked at input; cannot happen unless an
/// action moved the headers under them).
#[inline]
fn complete_in_place(pkt: &mut Packet) -> bool {
    if let Offload::Csum { start, offset } = pkt.meta.offload() {
        pkt.meta.set_offload(Offload::None);
        return offload::complete_partial(pkt.data_mut(), usize::from(start), usize::from(offset))
            .is_ok();
    }
    true
}

struct TxSlot {
    port_no: u32,
    port: Arc<dyn Port>,
    /// The port copies a one-copy packet's tail itself (`Port::takes_tails`).
    tails: bool,
    batch: Batch,
}

/// Pending transmit batches, one per output port.
pub struct TxTable {
    slots: Vec<TxSlot>,
    direct: Vec<u16>,
    dirty: Vec<u16>,
    txq: usize,
    /// Per-port egress policing, if the datapath has any.
    pub(crate) policers: Option<Arc<crate::police::Policers>>,
    /// Scratch for software segmentation (one segment at a time).
    seg: Vec<u8>,
    /// The memory table the current burst's deferred tails lie in (one copy for large
    /// frames): taken from the rx batch for the burst ([`TxTable::hold_tails`]), lent to a
    /// tail-taking port's batch for each `tx_burst`, let go when the burst is flushed.
    tails: Option<Arc<GuestMemory>>,
}

impl TxTable {
    /// An empty table sending on tx queue `txq` of each port.
    pub fn new(txq: usize) -> TxTable {
        TxTable {
            slots: Vec::new(),
            direct: Vec::new(),
            dirty: Vec::new(),
            txq,
            policers: None,
            seg: Vec::new(),
            tails: None,
        }
    }

    /// Holds `mem`, the table the deferred tails of the burst about to be executed lie in
    /// (`Batch::take_tails` of the rx batch), until [`TxTable::flush`].
    #[inline]
    pub fn hold_tails(&mut self, mem: Option<Arc<GuestMemory>>) {
        self.tails = mem;
    }

    /// Copies `pkt`'s deferred tail (if any) in from the burst's table.
    #[inline]
    pub fn materialise(&self, pkt: &mut Packet) {
        if pkt.has_tail() {
            pkt.materialise(self.tails.as_deref());
        }
    }

    /// The tx queue used on every port from now on (control change; nothing may be pending).
    pub fn set_txq(&mut self, txq: usize) {
        self.txq = txq;
    }

    /// Replaces the set of ports (control change; nothing may be pending).
    pub fn set_ports(&mut self, ports: &[(u32, Arc<dyn Port>)], pool: &mut Pool) {
        for s in &mut self.slots {
            pool.put_batch(&mut s.batch);
        }
        self.slots.clear();
        self.dirty.clear();
        self.direct.clear();
        for (no, p) in ports.iter().take(u16::MAX as usize - 1) {
            let idx = self.slots.len() as u16 + 1;
            self.slots.push(TxSlot {
                port_no: *no,
                port: p.clone(),
                tails: p.takes_tails(),
                batch: Batch::new(),
            });
            let n = *no as usize;
            if n < DIRECT_PORTS {
                if self.direct.len() <= n {
                    self.direct.resize(n + 1, 0);
                }
                self.direct[n] = idx;
            }
        }
        self.dirty.reserve(self.slots.len());
    }

    #[inline]
    fn slot_of(&self, port_no: u32) -> Option<usize> {
        let n = port_no as usize;
        if n < DIRECT_PORTS {
            match self.direct.get(n) {
                Some(&s) if s != 0 => Some(usize::from(s) - 1),
                _ => None,
            }
        } else {
            self.slots.iter().position(|s| s.port_no == port_no)
        }
    }

    /// Whether `port_no` takes `pkt`'s offload as is (true for unknown ports: nothing to do).
    #[inline]
    fn takes(&self, port_no: u32, o: Offload) -> bool {
        self.slot_of(port_no)
            .is_none_or(|s| self.slots[s].port.tx_offloads().takes(o))
    }

    /// Queues `pkt` for `port_no`; a full batch is sent first. Unknown ports drop (lost). A
    /// packet carrying an offload the port does not take is finished in software first; a
    /// one-copy packet's tail is copied in unless the port copies it itself.
    #[inline(always)]
    pub fn send(&mut self, port_no: u32, mut pkt: Packet, pool: &mut Pool, tally: &mut Tally) {
        let Some(s) = self.slot_of(port_no) else {
            tally.lost += 1;
            pool.put(pkt);
            return;
        };
        if !self.slots[s].tails {
            self.materialise(&mut pkt);
        }
        if pkt.meta.has_offload() && !self.slots[s].port.tx_offloads().takes(pkt.meta.offload()) {
            match pkt.meta.offload() {
                Offload::Tso { mss, .. } => return self.send_segments(s, pkt, mss, pool, tally),
                _ => {
                    if !complete_in_place(&mut pkt) {
                        tally.lost += 1;
                        pool.put(pkt);
                        return;
                    }
                    tally.sw_csum += 1;
                }
            }
        }
        self.push(s, pkt, pool, tally);
    }

    /// Cuts a GSO frame into checksummed segments of at most `mss` payload bytes and queues
    /// them for slot `s` (software TSO for a port that does not take it).
    #[cold]
    fn send_segments(
        &mut self,
        s: usize,
        pkt: Packet,
        mss: u16,
        pool: &mut Pool,
        tally: &mut Tally,
    ) {
        let mut seg = std::mem::take(&mut self.seg);
        let mut meta = pkt.meta;
        meta.set_offload(Offload::None);
        let r = offload::segment_tcp(pkt.data(), usize::from(mss), MAX_FRAME, &mut seg, |f| {
            let mut q = pool.get();
            q.set_frame(f);
            q.meta = meta;
            self.push(s, q, pool, tally);
        });
        self.seg = seg;
        pool.put(pkt);
        match r {
            Ok(n) => {
                tally.sw_segmented += 1;
                tally.sw_segments += n as u64;
            }
            // Checked at input (`packet::vnet`); only an action that broke the headers gets here.
            Err(_) => tally.lost += 1,
        }
    }

    #[inline(always)]
    fn push(&mut self, s: usize, pkt: Packet, pool: &mut Pool, tally: &mut Tally) {
        let txq = self.txq;
        let slot = &mut self.slots[s];
        if slot.batch.is_empty() {
            self.dirty.push(s as u16);
        } else if slot.batch.is_full() {
            flush_slot(
                slot,
                txq,
                pool,
                tally,
                self.policers.as_deref(),
                &mut self.tails,
            );
        }
        if let Err(p) = slot.batch.push(pkt) {
            tally.lost += 1;
            pool.put(p);
        }
    }

    /// Sends every pending batch (one `tx_burst` per port) and recycles the buffers; the
    /// burst is over, so its tails' table is let go ([`TxTable::hold_tails`]).
    #[inline]
    pub fn flush(&mut self, pool: &mut Pool, tally: &mut Tally) {
        for s in self.dirty.drain(..) {
            if let Some(slot) = self.slots.get_mut(usize::from(s)) {
                flush_slot(
                    slot,
                    self.txq,
                    pool,
                    tally,
                    self.policers.as_deref(),
                    &mut self.tails,
                );
            }
        }
        if self.tails.is_some() {
            self.tails = None;
        }
    }
}

#[inline]
fn flush_slot(
    slot: &mut TxSlot,
    txq: usize,
    pool: &mut Pool,
    tally: &mut Tally,
    policers: Option<&crate::police::Policers>,
    tails: &mut Option<Arc<GuestMemory>>,
) {
    if let Some(pp) = policers.and_then(|p| p.get(slot.port_no)) {
        if let Some(m) = &pp.egress {
            crate::police::police(m, &mut slot.batch, pool, crate::meter::now_ns());
        }
    }
    let n = slot.batch.len();
    if n == 0 {
        return;
    }
    // A tail-taking port reads this burst's tails from the table the batch holds: lent for
    // the call, no reference-count change. Every tail in the batch came in this burst.
    let lend = slot.tails && tails.is_some();
    if lend {
        slot.batch.swap_tails(tails);
    }
    let sent = slot.port.tx_burst(txq, &mut slot.batch).min(n);
    if lend {
        slot.batch.swap_tails(tails);
    }
    tally.lost += (n - sent) as u64;
    pool.put_batch(&mut slot.batch);
}

/// What [`execute`] needs besides the packet.
pub struct ExecCtx<'a> {
    /// Output batches.
    pub tx: &'a mut TxTable,
    /// Buffers for copies, and where consumed packets go back.
    pub pool: &'a mut Pool,
    /// For `Userspace`.
    pub upcall: &'a dyn Upcall,
    /// Counts (lost).
    pub tally: &'a mut Tally,
    /// The time meters see for this burst ([`crate::meter::now_ns`]); 0 until the first meter
    /// of the burst reads the clock (a burst with no meter never does).
    pub now_ns: u64,
    /// The datapath's connection tracker (`None`: a `ct` action marks packets `+trk+inv`).
    pub ct: Option<&'a Conntrack>,
    /// The time conntrack sees for this burst ([`conntrack::clock_ms`]); 0 until read.
    pub now_ms: u64,
    /// Packets to classify again after this pass (`ct(table=N)`), with their keys: held
    /// fragments released by conntrack go here directly; the others return [`RECIRC`].
    pub recirc: &'a mut Batch,
    /// Keys of `recirc`, by index (conntrack words and `recirc_id` set).
    pub recirc_keys: &'a mut Vec<FlowKey>,
    /// Conntrack hints of the packets being executed, by packet index ([`conntrack::Hint`]:
    /// the connection a packet's last `ct` pass found, for its next one). Empty: no hints.
    pub hints: &'a mut [Hint],
    /// Index of the packet being executed, into `hints` (out of range: no hint).
    pub cur: usize,
    /// Hints of `recirc`, by index.
    pub recirc_hints: &'a mut Vec<Hint>,
}

/// [`execute`]'s answer for a packet to classify again (`ct(table=N)`): the caller moves it
/// to the recirculation batch with its key.
pub const RECIRC: u32 = u32::MAX - 1;

/// Port number meaning "the packet itself goes nowhere" (consumed or dropped).
pub const NO_PORT: u32 = u32::MAX;

/// Runs `actions` on `pkt` in place. Outputs before `steal` (see `Megaflow`) send copies taken
/// from the pool; the output at `steal` is not sent here but returned, so the caller moves the
/// packet to that port once per burst (moving a `Packet` through call frames right after
/// writing it costs store-forwarding stalls). Returns [`NO_PORT`] if the packet is not output.
#[inline(always)]
pub fn execute(
    pkt: &mut Packet,
    actions: &[Action],
    steal: usize,
    key: &mut FlowKey,
    cx: &mut ExecCtx,
) -> u32 {
    // Whether an action since the packet's last `ct` pass rewrote the frame (its conntrack
    // hint is then stale). Conservative: every modifying action counts.
    let mut dirty = false;
    for (j, a) in actions.iter().enumerate() {
        if pkt.has_tail() && !matches!(a, Action::Output(_)) {
            // One copy for large frames: only an output to a port that copies the tail itself
            // leaves it in the sender's memory; every other action sees the whole frame.
            cx.tx.materialise(pkt);
        }
        match a {
            Action::Output(p) => {
                if pkt.meta.has_offload()
                    && matches!(pkt.meta.offload(), Offload::Csum { .. })
                    && !cx.tx.takes(*p, pkt.meta.offload())
                {
                    // Completed once, on the packet itself: later outputs take it complete.
                    if !complete_in_place(pkt) {
                        cx.tally.lost += 1;
                        return NO_PORT;
                    }
                    cx.tally.sw_csum += 1;
                }
                if j == steal {
                    return *p;
                }
                // A copy for this output (a deferred tail is shared, not copied: each vhost
                // output copies it from the sender, any other port's `send` copies it in).
                let mut c = cx.pool.get_for(pkt.frame_len());
                pkt.copy_into(&mut c);
                cx.tx.send(*p, c, cx.pool, cx.tally);
            }
            Action::Userspace(cookie) => cx.upcall.userspace(*cookie, key, pkt),
            Action::Meter(m) => match m.0.apply(pkt.len(), burst_time(cx)) {
                Verdict::Drop => return NO_PORT,
                Verdict::Pass { remark: 0 } => {}
                Verdict::Pass { remark: r } => {
                    dirty = true;
                    remark(pkt, key, r)
                }
            },
            Action::Ct(spec) if spec.fork => {
                ct_fork(pkt, spec, key, cx);
                clear_ct(key);
            }
            Action::Ct(spec) => {
                if let Some(to) = ct(pkt, spec, &actions[j + 1..], key, cx, dirty) {
                    return to;
                }
                dirty = false;
            }
            Action::CtClear => clear_ct(key),
            // Tunnel metadata is no part of a connection's tuple: a hint stays valid.
            Action::SetTunnel { id, src, dst } => {
                modify(pkt, a);
                key.set(Field::TunId, *id);
                key.set(Field::TunSrc, u64::from(*src));
                key.set(Field::TunDst, u64::from(*dst));
            }
            Action::TnlPush(t) => {
                dirty = true;
                // The outer header moves every offset an offload names: finish it first. A
                // GSO frame is cut into segments, each encapsulated and sent on its own.
                if pkt.meta.has_offload() {
                    if let Offload::Tso { mss, .. } = pkt.meta.offload() {
                        tnl_push_segments(pkt, mss, t, key, cx);
                        if j + 1 == actions.len() {
                            return NO_PORT;
                        }
                        continue;
                    }
                    if !complete_in_place(pkt) {
                        crate::tnl::count_gso();
                        return NO_PORT;
                    }
                    cx.tally.sw_csum += 1;
                }
                // The outer source port comes from the flow hash; a packet whose burst probed no
                // cache was left unhashed (`worker::process`): hash the key it already has.
                if pkt.meta.hash == 0 {
                    pkt.meta.hash = key.hash();
                }
                if j + 1 == actions.len() {
                    // Last: the packet itself becomes the outer packet.
                    if !crate::tnl::push(pkt, t) {
                        return NO_PORT;
                    }
                    return tnl_nested(pkt, &t.actions, key, cx);
                }
                tnl_push_copy(pkt.data(), pkt.meta, t, key, cx);
            }
            Action::TnlPop(t) => match crate::tnl::pop(pkt, t, key) {
                crate::tnl::Popped::NotTunnel => {}
                crate::tnl::Popped::Dropped => return NO_PORT,
                crate::tnl::Popped::Inner => return RECIRC,
            },
            other => {
                dirty = true;
                modify(pkt, other)
            }
        }
    }
    NO_PORT
}

/// Software TSO in front of a tunnel: cuts the GSO frame `pkt` into checksummed segments of
/// at most `mss` payload bytes, encapsulates each with `t` and sends it where `t`'s underlay
/// actions say. `pkt` itself is left as it was (later actions still see the whole frame).
/// A frame that cannot be cut (headers broken by an action) is counted as a `gso` drop.
#[cold]
#[inline(never)]
fn tnl_push_segments(
    pkt: &Packet,
    mss: u16,
    t: &dpif::action::TnlPush,
    key: &FlowKey,
    cx: &mut ExecCtx,
) {
    let mut seg = std::mem::take(&mut cx.tx.seg);
    let mut meta = pkt.meta;
    meta.set_offload(Offload::None);
    let r = offload::segment_tcp(pkt.data(), usize::from(mss), MAX_FRAME, &mut seg, |f| {
        tnl_push_copy(f, meta, t, key, cx)
    });
    cx.tx.seg = seg;
    match r {
        Ok(n) => {
            cx.tally.sw_segmented += 1;
            cx.tally.sw_segments += n as u64;
        }
        Err(_) => crate::tnl::count_gso(),
    }
}

/// Encapsulates a copy of `frame` (with `meta`) by `t` and sends it where `t`'s underlay
/// actions say; the copy goes back to the pool if the push or the actions drop it.
fn tnl_push_copy(
    frame: &[u8],
    meta: packet::Meta,
    t: &dpif::action::TnlPush,
    key: &FlowKey,
    cx: &mut ExecCtx,
) {
    let mut c = cx.pool.get_for(frame.len());
    c.set_frame(frame);
    c.meta = meta;
    if crate::tnl::push(&mut c, t) {
        let mut k = *key;
        let to = tnl_nested(&mut c, &t.actions, &mut k, cx);
        if to != NO_PORT {
            cx.tx.send(to, c, cx.pool, cx.tally);
            return;
        }
    }
    cx.pool.put(c);
}

/// Runs a `TnlPush`'s underlay actions on the outer packet; returns the port that takes it
/// (the last output's) or [`NO_PORT`].
#[inline(never)]
fn tnl_nested(pkt: &mut Packet, actions: &[Action], key: &mut FlowKey, cx: &mut ExecCtx) -> u32 {
    let steal = crate::flow::steal_index(actions);
    execute(pkt, actions, steal, key, cx)
}

/// Zeroes a key's conntrack words (`ct_clear`), keeping `recirc_id`.
pub fn clear_ct(key: &mut FlowKey) {
    let recirc = key.get(Field::RecircId);
    for w in &mut key.w[CT_WORDS] {
        *w = 0;
    }
    key.set(Field::RecircId, recirc);
}

/// Key words that hold `recirc_id` and the conntrack fields (see `wire::flow`).
pub const CT_WORDS: std::ops::Range<usize> = wire::flow::CT_WORDS;

/// `ct_tp_src`/`ct_tp_dst` of a connection's original tuple: its ports, or for ICMP the type
/// and code of the packet that opened it (as OVS's datapaths fill them). Only echo requests
/// open ICMP connections, so that is echo request (8, ICMPv6 128), code 0.
fn ct_tp(t: &conntrack::Tuple) -> (u16, u16) {
    match (t.proto, t.v6) {
        (conntrack::parse::proto::ICMP, false) => (8, 0),
        (conntrack::parse::proto::ICMPV6, true) => (128, 0),
        _ => (t.sport, t.dport),
    }
}

/// Writes a conntrack verdict into a key's conntrack fields.
pub fn set_ct_fields(key: &mut FlowKey, r: &CtResult) {
    let recirc = key.get(Field::RecircId);
    for w in &mut key.w[CT_WORDS] {
        *w = 0;
    }
    key.set(Field::RecircId, recirc);
    key.set(Field::CtState, u64::from(r.state));
    key.set(Field::CtZone, u64::from(r.zone));
    key.set(Field::CtMark, u64::from(r.mark));
    key.set(Field::CtLabelHi, (r.label >> 64) as u64);
    key.set(Field::CtLabelLo, r.label as u64);
    if let Some(t) = &r.orig {
        key.set(Field::CtNwProto, u64::from(t.proto));
        let (tp_src, tp_dst) = ct_tp(t);
        key.set(Field::CtTpSrc, u64::from(tp_src));
        key.set(Field::CtTpDst, u64::from(tp_dst));
        if t.v6 {
            let (s, d) = (u128::from_be_bytes(t.src), u128::from_be_bytes(t.dst));
            key.set(Field::CtIpv6SrcHi, (s >> 64) as u64);
            key.set(Field::CtIpv6SrcLo, s as u64);
            key.set(Field::CtIpv6DstHi, (d >> 64) as u64);
            key.set(Field::CtIpv6DstLo, d as u64);
        } else {
            let v4 = |a: &[u8; 16]| u64::from(u32::from_be_bytes([a[0], a[1], a[2], a[3]]));
            key.set(Field::CtNwSrc, v4(&t.src));
            key.set(Field::CtNwDst, v4(&t.dst));
        }
    }
}

/// The `ct` action on one packet. `None`: go on with the rest of the list; `Some(to)`: the
/// list ends here with [`execute`]'s answer `to` (recirculation, or a fragment conntrack holds).
/// The packet's hint (`cx.hints[cx.cur]`) is used unless `dirty` (the frame was rewritten since
/// it was made), and refilled for the next pass. Out of line: conntrack costs far more than a
/// call.
#[inline(never)]
fn ct(
    pkt: &mut Packet,
    spec: &CtSpec,
    rest: &[Action],
    key: &mut FlowKey,
    cx: &mut ExecCtx,
    dirty: bool,
) -> Option<u32> {
    let Some(tracker) = cx.ct else {
        let r = CtResult {
            state: conntrack::state::TRK | conntrack::state::INV,
            zone: spec.ct.zone,
            ..CtResult::default()
        };
        set_ct_fields(key, &r);
        return spec.recirc.map(|id| recirculate(key, id));
    };
    if cx.now_ms == 0 {
        cx.now_ms = conntrack::clock_ms();
    }
    let out = match cx.hints.get_mut(cx.cur) {
        Some(h) => {
            if dirty {
                h.clear();
            }
            tracker.execute_hinted(pkt.data_mut(), &spec.ct, cx.now_ms, h)
        }
        None => tracker.execute(pkt.data_mut(), &spec.ct, cx.now_ms),
    };
    let (result, held) = match out {
        Outcome::Done(r) => (r, Vec::new()),
        Outcome::Held => return Some(NO_PORT),
        Outcome::Released { result, held } => (result, held),
    };
    set_ct_fields(key, &result);
    if let Some(id) = spec.recirc {
        recirculate(key, id);
    }
    // Earlier fragments of a datagram conntrack just released go on with the same verdict:
    // to the recirculation batch, or through the rest of this list (copies at every output).
    for frame in held {
        let mut c = cx.pool.get();
        c.set_frame(&frame);
        c.meta = pkt.meta;
        let mut k = *key;
        if spec.recirc.is_some() {
            to_recirc(c, k, cx);
        } else {
            // A copy, not the packet `cx.cur` names: no hint.
            let cur = std::mem::replace(&mut cx.cur, usize::MAX);
            execute(&mut c, rest, NO_STEAL, &mut k, cx);
            cx.cur = cur;
            cx.pool.put(c);
        }
    }
    spec.recirc.map(|_| RECIRC)
}

/// `ct(table=N)` with actions after it (OVS's fork): a copy of the packet goes through
/// conntrack and into the recirculation batch; the caller goes on with the packet itself,
/// untracked. The copy is not the packet `cx.cur` names, so it gets no hint.
#[cold]
fn ct_fork(pkt: &Packet, spec: &CtSpec, key: &FlowKey, cx: &mut ExecCtx) {
    let mut c = cx.pool.get_for(pkt.len());
    c.set_frame(pkt.data());
    c.meta = pkt.meta;
    let mut k = *key;
    let cur = std::mem::replace(&mut cx.cur, usize::MAX);
    let to = ct(&mut c, spec, &[], &mut k, cx, true);
    cx.cur = cur;
    if to == Some(RECIRC) {
        to_recirc(c, k, cx);
    } else {
        // Held (a fragment the tracker keeps) or no recirculation: nothing to resume.
        cx.pool.put(c);
    }
}

/// Queues a copy (no hint) with its key for the recirculation pass; a full batch drops it
/// (counted).
fn to_recirc(c: Packet, k: FlowKey, cx: &mut ExecCtx) {
    if cx.recirc.is_full() {
        cx.tally.recirc_drops += 1;
        cx.pool.put(c);
    } else {
        cx.recirc_keys.push(k);
        cx.recirc_hints.push(Hint::default());
        let _ = cx.recirc.push(c);
    }
}

/// Marks a key for recirculation with `id` (its conntrack words already set).
fn recirculate(key: &mut FlowKey, id: u32) -> u32 {
    key.set(Field::RecircId, u64::from(id));
    RECIRC
}

/// The burst's clock for meters, read once per burst.
#[inline]
fn burst_time(cx: &mut ExecCtx) -> u64 {
    if cx.now_ns == 0 {
        cx.now_ns = crate::meter::now_ns().max(1);
    }
    cx.now_ns
}

/// A meter's DSCP remark band: raises the AF drop precedence of an IP packet's DSCP.
#[cold]
fn remark(pkt: &mut Packet, key: &FlowKey, levels: u8) {
    let et = key.get(wire::Field::EthType) as u16;
    if et != ethertype::IPV4 && et != ethertype::IPV6 {
        return;
    }
    let dscp = (key.get(wire::Field::IpTos) as u8) >> 2;
    let new = remark_dscp(dscp, levels);
    if new != dscp {
        rewrite::set_ip_dscp(pkt.data_mut(), new);
    }
}

/// Sends `pkt` to `port` (from [`execute`]'s answer), or recycles it for [`NO_PORT`].
#[inline(always)]
pub fn finish(pkt: Packet, port: u32, cx: &mut ExecCtx) {
    if port == NO_PORT {
        cx.pool.put(pkt);
    } else {
        cx.tx.send(port, pkt, cx.pool, cx.tally);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ports::dummy::DummyPort;

    struct NoUpcall;
    impl Upcall for NoUpcall {
        fn upcall(&self, _: &FlowKey, _: &Packet) -> crate::UpcallResult {
            unreachable!("not used")
        }
    }

    #[test]
    fn vlan_push_pop_round_trip() {
        let frame: Vec<u8> = (0u8..60).collect();
        let mut p = Packet::from_slice(&frame);
        push_vlan(&mut p, 0x3064);
        assert_eq!(
            &p.data()[12..16],
            &[0x81, 0x00, 0x20, 0x64],
            "present bit not written"
        );
        assert_eq!(&p.data()[16..], &frame[12..]);
        pop_vlan(&mut p);
        assert_eq!(p.data(), &frame[..]);
        pop_vlan(&mut p); // untagged: unchanged
        assert_eq!(p.data(), &frame[..]);
    }

    #[test]
    fn a_meter_action_drops_over_its_rate_and_remarks_af_dscp() {
        use crate::meter::{BandConfig, BandKind, Meter, MeterConfig, MeterRef};
        let one = |kind| {
            MeterRef(Arc::new(Meter::new(
                1,
                MeterConfig {
                    pktps: true,
                    bands: vec![BandConfig {
                        kind,
                        rate: 1,
                        burst: 1,
                    }],
                },
            )))
        };
        let mut pool = Pool::new(0, 8);
        let mut tx = TxTable::new(0);
        let mut tally = Tally::default();
        let mut cx = ExecCtx {
            tx: &mut tx,
            pool: &mut pool,
            upcall: &NoUpcall,
            tally: &mut tally,
            now_ns: 0,
            ct: None,
            now_ms: 0,
            recirc: &mut Batch::new(),
            recirc_keys: &mut Vec::new(),
            hints: &mut [],
            cur: 0,
            recirc_hints: &mut Vec::new(),
        };
        let acts = [Action::Meter(one(BandKind::Drop)), Action::Output(3)];
        let mut pkt = Packet::from_slice(&[0u8; 60]);
        let got: Vec<u32> = (0..4)
            .map(|_| execute(&mut pkt, &acts, 1, &mut { FlowKey::ZERO }, &mut cx))
            .collect();
        assert_eq!(got, [3, 3, NO_PORT, NO_PORT], "burst 1 (+1), then dropped");
        // An IPv4 frame with DSCP AF11 (10): over the rate it leaves as AF12 (12).
        let mut f = vec![0u8; 34];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[15] = 10 << 2;
        f[17] = 20; // total length
        f[22] = 64; // ttl
        let key = wire::extract(&f, 1);
        let acts = [
            Action::Meter(one(BandKind::DscpRemark(1))),
            Action::Output(3),
        ];
        let mut pkt = Packet::from_slice(&f);
        for _ in 0..3 {
            assert_eq!(execute(&mut pkt, &acts, 1, &mut key.clone(), &mut cx), 3);
        }
        assert_eq!(pkt.data()[15] >> 2, 12);
    }

    #[test]
    fn outputs_copy_then_steal_and_unknown_port_is_lost() {
        let (a, b) = (Arc::new(DummyPort::new()), Arc::new(DummyPort::new()));
        let mut pool = Pool::new(0, 8);
        let mut tx = TxTable::new(0);
        tx.set_ports(
            &[(1, a.clone() as Arc<dyn Port>), (5000, b.clone())],
            &mut pool,
        );
        let mut tally = Tally::default();
        let mut cx = ExecCtx {
            tx: &mut tx,
            pool: &mut pool,
            upcall: &NoUpcall,
            tally: &mut tally,
            now_ns: 0,
            ct: None,
            now_ms: 0,
            recirc: &mut Batch::new(),
            recirc_keys: &mut Vec::new(),
            hints: &mut [],
            cur: 0,
            recirc_hints: &mut Vec::new(),
        };
        let acts = [
            Action::Output(1),
            Action::PushVlan(7),
            Action::Output(5000),
            Action::Output(9),
        ];
        let mut pkt = Packet::from_slice(&[0xaa; 20]);
        let to = execute(&mut pkt, &acts, 2, &mut { FlowKey::ZERO }, &mut cx);
        assert_eq!(to, 5000);
        finish(pkt, to, &mut cx);
        tx.flush(&mut pool, &mut tally);
        assert_eq!(a.take_captured(), vec![vec![0xaa; 20]]);
        let got = b.take_captured();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].len(), 24);
        // Output(9) comes after the stealing output: never reached, so nothing lost.
        assert_eq!(tally.lost, 0);
        let mut cx = ExecCtx {
            tx: &mut tx,
            pool: &mut pool,
            upcall: &NoUpcall,
            tally: &mut tally,
            now_ns: 0,
            ct: None,
            now_ms: 0,
            recirc: &mut Batch::new(),
            recirc_keys: &mut Vec::new(),
            hints: &mut [],
            cur: 0,
            recirc_hints: &mut Vec::new(),
        };
        let mut pkt = Packet::from_slice(&[1; 20]);
        let to = execute(
            &mut pkt,
            &[Action::Output(9)],
            0,
            &mut { FlowKey::ZERO },
            &mut cx,
        );
        finish(pkt, to, &mut cx);
        assert_eq!(tally.lost, 1);
    }

    #[test]
    fn more_than_a_batch_to_one_port_is_sent_in_several_bursts() {
        let a = Arc::new(DummyPort::new());
        let mut pool = Pool::new(0, 8);
        let mut tx = TxTable::new(0);
        tx.set_ports(&[(1, a.clone() as Arc<dyn Port>)], &mut pool);
        let mut tally = Tally::default();
        for i in 0..40u8 {
            let mut cx = ExecCtx {
                tx: &mut tx,
                pool: &mut pool,
                upcall: &NoUpcall,
                tally: &mut tally,
                now_ns: 0,
                ct: None,
                now_ms: 0,
                recirc: &mut Batch::new(),
                recirc_keys: &mut Vec::new(),
                hints: &mut [],
                cur: 0,
                recirc_hints: &mut Vec::new(),
            };
            let acts = [Action::Output(1), Action::Output(1)];
            let mut pkt = Packet::from_slice(&[i; 14]);
            let to = execute(&mut pkt, &acts, 1, &mut { FlowKey::ZERO }, &mut cx);
            finish(pkt, to, &mut cx);
        }
        tx.flush(&mut pool, &mut tally);
        assert_eq!(a.take_captured().len(), 80);
        assert_eq!(tally.lost, 0);
    }

    /// A port that takes every offload (a guest with GUEST_CSUM/TSO, a tap) and captures.
    #[derive(Default)]
    struct OffloadPort(std::sync::Mutex<Vec<(Vec<u8>, Offload)>>);

    impl Port for OffloadPort {
        fn kind(&self) -> &'static str {
            "test"
        }
        fn n_rxq(&self) -> usize {
            0
        }
        fn rx_burst(&self, _: usize, _: &mut Pool, _: &mut packet::Batch) -> usize {
            0
        }
        fn tx_burst(&self, _: usize, pkts: &mut packet::Batch) -> usize {
            let mut v = self.0.lock().unwrap();
            for p in pkts.as_slice() {
                v.push((p.data().to_vec(), p.meta.offload()));
            }
            pkts.len()
        }
        fn tx_offloads(&self) -> packet::vnet::Offloads {
            packet::vnet::Offloads::ALL
        }
        fn link(&self) -> ports::Link {
            ports::Link::Up
        }
        fn stats(&self) -> ports::PortStats {
            ports::PortStats::default()
        }
    }

    /// Ethernet + IPv4 + TCP with `payload` bytes, its TCP checksum partial (pseudo-header
    /// sum) as a sender with checksum offload leaves it.
    fn partial_tcp4(payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 54 + payload];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((40 + payload) as u16).to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&1234u16.to_be_bytes());
        f[36..38].copy_from_slice(&80u16.to_be_bytes());
        f[38..42].copy_from_slice(&7u32.to_be_bytes());
        f[46] = 5 << 4;
        f[47] = 0x18;
        let c = wire::checksum::compute(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        for (i, b) in f[54..].iter_mut().enumerate() {
            *b = (i * 13) as u8;
        }
        let p = wire::checksum::fold(wire::checksum::pseudo_v4(
            0x0a00_0001,
            0x0a00_0002,
            6,
            (20 + payload) as u16,
        ));
        f[50..52].copy_from_slice(&p.to_be_bytes());
        f
    }

    fn tcp_ok(s: &[u8], l3: usize) -> bool {
        let ip = |o: usize| u32::from_be_bytes([s[o], s[o + 1], s[o + 2], s[o + 3]]);
        let l4 = l3 + 20;
        let p = wire::checksum::pseudo_v4(ip(l3 + 12), ip(l3 + 16), 6, (s.len() - l4) as u16);
        wire::checksum::verify(&s[l3..l4])
            && wire::checksum::fold(wire::checksum::sum(&s[l4..], p)) == 0xffff
    }

    fn run(pkt: Packet, acts: &[Action], steal: usize, tx: &mut TxTable, pool: &mut Pool) -> Tally {
        let mut tally = Tally::default();
        let mut cx = ExecCtx {
            tx,
            pool,
            upcall: &NoUpcall,
            tally: &mut tally,
            now_ns: 0,
            ct: None,
            now_ms: 0,
            recirc: &mut Batch::new(),
            recirc_keys: &mut Vec::new(),
            hints: &mut [],
            cur: 0,
            recirc_hints: &mut Vec::new(),
        };
        let mut pkt = pkt;
        let mut key = FlowKey::ZERO;
        let to = execute(&mut pkt, acts, steal, &mut key, &mut cx);
        finish(pkt, to, &mut cx);
        tx.flush(pool, &mut tally);
        assert_eq!(tally.lost, 0);
        tally
    }

    #[test]
    fn offloads_pass_to_ports_that_take_them_and_are_finished_for_others() {
        let plain = Arc::new(DummyPort::new());
        let off = Arc::new(OffloadPort::default());
        let mut pool = Pool::new(0, 8);
        let mut tx = TxTable::new(0);
        tx.set_ports(
            &[(1, plain.clone() as Arc<dyn Port>), (2, off.clone())],
            &mut pool,
        );
        // A partial checksum: as is to port 2, completed (once, in place) for port 1.
        let f = partial_tcp4(300);
        let csum = Offload::Csum {
            start: 34,
            offset: 16,
        };
        let mut p = Packet::from_slice(&f);
        p.meta.set_offload(csum);
        let t = run(
            p,
            &[Action::Output(2), Action::Output(1)],
            1,
            &mut tx,
            &mut pool,
        );
        assert_eq!((t.sw_csum, t.sw_segmented), (1, 0), "counted once");
        let got = off.0.lock().unwrap().drain(..).collect::<Vec<_>>();
        assert_eq!(got, vec![(f.clone(), csum)], "passed as is");
        let done = plain.take_captured();
        assert_eq!(done.len(), 1);
        assert!(tcp_ok(&done[0], 14), "completed in software");
        assert!(!tcp_ok(&f, 14), "the input really was partial");
        // A GSO frame: as is to port 2 (large), segmented at the MSS for port 1.
        let big = partial_tcp4(20_000);
        let tso = Offload::Tso {
            v6: false,
            mss: 1448,
            l4: 34,
        };
        let mut p = Packet::from_slice_large(&big);
        p.meta.set_offload(tso);
        let t = run(
            p,
            &[Action::Output(1), Action::Output(2)],
            1,
            &mut tx,
            &mut pool,
        );
        let n = 20_000u64.div_ceil(1448);
        assert_eq!((t.sw_csum, t.sw_segmented, t.sw_segments), (0, 1, n));
        let got = off.0.lock().unwrap().drain(..).collect::<Vec<_>>();
        assert_eq!(
            got,
            vec![(big.clone(), tso)],
            "the copy is a large buffer too"
        );
        let segs = plain.take_captured();
        assert_eq!(segs.len(), 20_000usize.div_ceil(1448));
        let mut stream = Vec::new();
        for s in &segs {
            assert!(s.len() <= 54 + 1448 && tcp_ok(s, 14));
            stream.extend_from_slice(&s[54..]);
        }
        assert_eq!(stream, big[54..]);
    }

    #[test]
    fn a_gso_frame_into_a_tunnel_is_segmented_then_each_segment_encapsulated() {
        let phy = Arc::new(DummyPort::new());
        let plain = Arc::new(DummyPort::new());
        let mut pool = Pool::new(0, 8);
        let mut tx = TxTable::new(0);
        tx.set_ports(
            &[(1, phy.clone() as Arc<dyn Port>), (2, plain.clone())],
            &mut pool,
        );
        let template = tnl::header::Template::build(&tnl::header::Params {
            kind: wire::tunnel::TunnelKind::Vxlan,
            vni: 7,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: std::net::Ipv4Addr::new(10, 0, 0, 1).into(),
            dst_ip: std::net::Ipv4Addr::new(10, 0, 0, 2).into(),
            dst_port: 4789,
            tos: 0,
            ttl: 64,
            df: true,
            csum: false,
            options: Vec::new(),
        });
        let push = Action::TnlPush(Arc::new(dpif::action::TnlPush {
            template,
            mtu: 1600,
            actions: vec![Action::Output(1)],
        }));
        let big = partial_tcp4(10_000);
        let tso = Offload::Tso {
            v6: false,
            mss: 1448,
            l4: 34,
        };
        let n = 10_000usize.div_ceil(1448);
        let gso_before = crate::tnl::COUNTERS[18].load(std::sync::atomic::Ordering::Relaxed);
        // Last action, then before a plain output (which still gets the whole frame, cut for
        // its own sake).
        for acts in [vec![push.clone()], vec![push.clone(), Action::Output(2)]] {
            let mut p = Packet::from_slice_large(&big);
            p.meta.set_offload(tso);
            let t = run(
                p,
                &acts,
                crate::flow::steal_index(&acts),
                &mut tx,
                &mut pool,
            );
            assert!(t.sw_segmented >= 1 && t.sw_segments >= n as u64, "{t:?}");
            let outer = phy.take_captured();
            assert_eq!(outer.len(), n, "one outer packet per segment");
            let mut stream = Vec::new();
            for o in &outer {
                let hl = tnl::header::HEADER_LEN;
                assert!(o.len() <= hl + 54 + 1448, "segment {} bytes", o.len());
                let ip = wire::ipv4::Ipv4Packet::new_checked(&o[14..]).unwrap();
                assert!(ip.verify_checksum(), "outer IPv4 checksum");
                assert_eq!(usize::from(ip.total_len()), o.len() - 14, "outer length");
                assert!(tcp_ok(&o[hl..], 14), "inner TCP checksum finished");
                stream.extend_from_slice(&o[hl + 54..]);
            }
            assert_eq!(stream, big[54..], "the stream, in order");
            if acts.len() == 2 {
                let segs = plain.take_captured();
                assert_eq!(segs.len(), n);
                assert!(segs.iter().all(|s| tcp_ok(s, 14)));
            }
        }
        assert_eq!(
            crate::tnl::COUNTERS[18].load(std::sync::atomic::Ordering::Relaxed),
            gso_before,
            "no gso drop"
        );
    }

    #[test]
    fn rewrites_keep_partial_checksums_right() {
        let plain = Arc::new(DummyPort::new());
        let off = Arc::new(OffloadPort::default());
        let mut pool = Pool::new(0, 8);
        let mut tx = TxTable::new(0);
        tx.set_ports(
            &[(1, plain.clone() as Arc<dyn Port>), (2, off.clone())],
            &mut pool,
        );
        let acts = [
            Action::SetIpv4Src(0xc0a8_0101),
            Action::SetIpv4Dst(0xc0a8_0102),
            Action::SetTpDst(8080),
            Action::PushVlan(0x1005),
            Action::Output(2),
            Action::Output(1),
        ];
        for tso in [false, true] {
            let f = partial_tcp4(if tso { 5000 } else { 500 });
            let mut p = Packet::from_slice_large(&f);
            p.meta.set_offload(if tso {
                Offload::Tso {
                    v6: false,
                    mss: 1000,
                    l4: 34,
                }
            } else {
                Offload::Csum {
                    start: 34,
                    offset: 16,
                }
            });
            run(p, &acts, 5, &mut tx, &mut pool);
            // The port that takes the offload gets the partial field moved by exactly the
            // pseudo-header change and the offsets moved by the tag: completing it now gives
            // a valid checksum.
            let (mut g, o) = off.0.lock().unwrap().pop().unwrap();
            let at = match o {
                Offload::Csum { start, offset } => {
                    assert_eq!((start, offset), (38, 16));
                    usize::from(start)
                }
                Offload::Tso { l4, .. } => usize::from(l4),
                Offload::None => panic!("offload lost"),
            };
            assert_eq!(at, 38);
            wire::offload::complete_partial(&mut g, at, 16).unwrap();
            assert!(tcp_ok(&g, 18), "tso={tso}");
            assert_eq!(&g[40..42], &8080u16.to_be_bytes());
            // The port that does not gets it finished in software, tag and all.
            for s in plain.take_captured() {
                assert!(tcp_ok(&s, 18), "tso={tso}");
                assert_eq!(&s[12..14], &[0x81, 0x00]);
            }
        }
    }
}
