//! Action execution and per-port transmit batching.
//!
//! Owns: [`TxTable`] (one pending [`Batch`] per known output port, sent with one `tx_burst`
//! per port per rx burst, or earlier if a batch fills) and [`execute`], which runs an action
//! list on one packet. The packet itself goes to the last output when nothing after it needs
//! it; every other output sends a copy taken from the PMD's pool. Nothing here allocates once
//! the pool is warm.
//! Threads: PMD thread only; no locks (ports serialize tx internally if they must).
use crate::action::{Action, CtSpec, Upcall};
use crate::flow::NO_STEAL;
use crate::meter::{remark_dscp, Verdict};
use crate::stats::Tally;
use conntrack::{Conntrack, CtResult, Outcome};
use packet::{Batch, Packet, Pool};
use ports::Port;
use std::sync::Arc;
use wire::ethernet::ethertype;
use wire::{rewrite, Field, FlowKey};

pub use dpif::modify::{modify, pop_vlan, push_vlan};

/// Port numbers below this are found by direct index; others by a scan.
const DIRECT_PORTS: usize = 4096;

struct TxSlot {
    port_no: u32,
    port: Arc<dyn Port>,
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
        }
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

    /// Queues `pkt` for `port_no`; a full batch is sent first. Unknown ports drop (lost).
    #[inline(always)]
    pub fn send(&mut self, port_no: u32, pkt: Packet, pool: &mut Pool, tally: &mut Tally) {
        let Some(s) = self.slot_of(port_no) else {
            tally.lost += 1;
            pool.put(pkt);
            return;
        };
        let txq = self.txq;
        let slot = &mut self.slots[s];
        if slot.batch.is_empty() {
            self.dirty.push(s as u16);
        } else if slot.batch.is_full() {
            flush_slot(slot, txq, pool, tally, self.policers.as_deref());
        }
        if let Err(p) = slot.batch.push(pkt) {
            tally.lost += 1;
            pool.put(p);
        }
    }

    /// Sends every pending batch (one `tx_burst` per port) and recycles the buffers.
    #[inline]
    pub fn flush(&mut self, pool: &mut Pool, tally: &mut Tally) {
        for s in self.dirty.drain(..) {
            if let Some(slot) = self.slots.get_mut(usize::from(s)) {
                flush_slot(slot, self.txq, pool, tally, self.policers.as_deref());
            }
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
    let sent = slot.port.tx_burst(txq, &mut slot.batch).min(n);
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
    for (j, a) in actions.iter().enumerate() {
        match a {
            Action::Output(p) => {
                if j == steal {
                    return *p;
                }
                let mut c = cx.pool.get();
                c.set_frame(pkt.data());
                c.meta = pkt.meta;
                cx.tx.send(*p, c, cx.pool, cx.tally);
            }
            Action::Userspace(cookie) => cx.upcall.userspace(*cookie, key, pkt),
            Action::Meter(m) => match m.0.apply(pkt.len(), burst_time(cx)) {
                Verdict::Drop => return NO_PORT,
                Verdict::Pass { remark: 0 } => {}
                Verdict::Pass { remark: r } => remark(pkt, key, r),
            },
            Action::Ct(spec) => {
                if let Some(to) = ct(pkt, spec, &actions[j + 1..], key, cx) {
                    return to;
                }
            }
            Action::CtClear => clear_ct(key),
            other => modify(pkt, other),
        }
    }
    NO_PORT
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
pub const CT_WORDS: std::ops::Range<usize> = 9..wire::KEY_WORDS;

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
        key.set(Field::CtTpSrc, u64::from(t.sport));
        key.set(Field::CtTpDst, u64::from(t.dport));
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
/// Out of line: conntrack costs far more than a call.
#[inline(never)]
fn ct(
    pkt: &mut Packet,
    spec: &CtSpec,
    rest: &[Action],
    key: &mut FlowKey,
    cx: &mut ExecCtx,
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
    let (result, held) = match tracker.execute(pkt.data_mut(), &spec.ct, cx.now_ms) {
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
            if cx.recirc.is_full() {
                cx.tally.recirc_drops += 1;
                cx.pool.put(c);
            } else {
                cx.recirc_keys.push(k);
                let _ = cx.recirc.push(c);
            }
        } else {
            execute(&mut c, rest, NO_STEAL, &mut k, cx);
            cx.pool.put(c);
        }
    }
    spec.recirc.map(|_| RECIRC)
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
}
