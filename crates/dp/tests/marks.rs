//! XDP flow marks and hashes on the per-PMD pipeline, driven directly (no threads): packets
//! that arrive with a mark and a hash in their metadata (as an `af-xdp` port with
//! `xdp-mark=on` delivers them) get exactly the actions the normal lookups give, whatever the
//! mark — right, stale after a rule change, naming another flow or another PMD, or random —
//! and whatever the hash; a right mark skips the caches (`mark_hits`).
mod common;

use common::*;
use dp::flow::{mark_of, mark_tag, Registry};
use dp::worker::{Worker, WorkerConfig};
use dp::{Action, Upcall, UpcallResult};
use packet::{Batch, Packet, Pool};
use ports::{Link, Port, PortStats};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use wire::{Field, FlowKey};

/// An rx port whose frames carry the metadata the test gives them; tx counts.
#[derive(Default)]
struct MetaPort {
    rx: Mutex<VecDeque<(Vec<u8>, u32, u32)>>,
    sent: AtomicUsize,
}

impl MetaPort {
    fn push(&self, frame: Vec<u8>, mark: u32, hash: u32) {
        self.rx.lock().unwrap().push_back((frame, mark, hash));
    }
    fn pending(&self) -> usize {
        self.rx.lock().unwrap().len()
    }
}

impl Port for MetaPort {
    fn kind(&self) -> &'static str {
        "meta"
    }
    fn n_rxq(&self) -> usize {
        1
    }
    fn rx_burst(&self, _q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let mut q = self.rx.lock().unwrap();
        let mut n = 0;
        while !out.is_full() {
            let Some((f, mark, hash)) = q.pop_front() else {
                break;
            };
            let mut p = pool.get();
            p.set_frame(&f);
            p.meta.mark = mark;
            p.meta.hash = hash;
            let _ = out.push(p);
            n += 1;
        }
        n
    }
    fn tx_burst(&self, _q: usize, pkts: &mut Batch) -> usize {
        self.sent.fetch_add(pkts.len(), SeqCst);
        pkts.len()
    }
    fn link(&self) -> Link {
        Link::Up
    }
    fn stats(&self) -> PortStats {
        PortStats::default()
    }
}

/// The oracle's rules: a packet to 10.0.X.* with X in the set gets tp_dst 1000+X+10·version
/// and goes to port 1; others are dropped. Megaflows match the destination's /24 only, so one
/// megaflow covers many 5-tuples (and a mark installed for one of them is checked for others).
struct Rules(Mutex<(Vec<u8>, u16)>);

impl Rules {
    fn want(&self, x: u8) -> Option<u16> {
        let g = self.0.lock().unwrap();
        g.0.contains(&x).then(|| 1000 + u16::from(x) + 10 * g.1)
    }
}

impl Upcall for Rules {
    fn upcall(&self, key: &FlowKey, _: &Packet) -> UpcallResult {
        let x = (key.get(Field::Ipv4Dst) >> 8) as u8;
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::EthType);
        mask.set(Field::Ipv4Dst, 0xffff_ff00);
        let actions = match self.want(x) {
            Some(tp) => vec![Action::SetTpDst(tp), Action::Output(1)],
            None => vec![],
        };
        UpcallResult {
            actions: actions.into(),
            mask,
            install: true,
            deps: Default::default(),
        }
    }
}

fn frame(x: u8, low: u8) -> Vec<u8> {
    udp_frame(0x0a00_0000 | u32::from(x) << 8 | u32::from(low), 7)
}

/// Marks of every flow the worker holds now (tag 0: `WorkerConfig::default().txq`), with the
/// /24 each covers.
fn marks_now(reg: &Registry) -> Vec<(u8, u32)> {
    let r = reg.lock().unwrap();
    r.iter()
        .enumerate()
        .filter_map(|(id, f)| {
            let f = f.as_ref()?;
            let x = (f.key.get(Field::Ipv4Dst) >> 8) as u8;
            Some((x, mark_of(mark_tag(0), id as u32)?))
        })
        .collect()
}

fn run(w: &mut Worker, input: &MetaPort) {
    while input.pending() > 0 {
        w.poll(2, input, 0);
    }
}

proptest::proptest! {
    /// Every packet gets the oracle's decision with marks and XDP hashes of every kind — none,
    /// random, the mark of the flow that covers it, the mark of another flow, marks kept from
    /// before a rule change (stale: their ids are reused by other flows), another PMD's tag —
    /// through flushes, idle expiry and rule changes.
    #[test]
    fn marked_packets_get_what_the_normal_lookups_give(
        rules in proptest::collection::btree_set(0u8..12, 0..8),
        bursts in proptest::collection::vec(
            (proptest::collection::vec((0u8..12, 0u8..4, 0u8..6, proptest::num::u32::ANY), 1..40),
             0u8..4),
            1..12),
    ) {
        let pipe = Arc::new(Rules(Mutex::new((rules.into_iter().collect(), 0))));
        let input = MetaPort::default();
        let output = Arc::new(ports::dummy::DummyPort::new());
        let cfg = WorkerConfig { emc_insert_inv_prob: 2, idle_sweeps: 1, ..WorkerConfig::default() };
        let reg = Registry::default();
        let mut w = Worker::new(pipe.clone(), cfg, reg.clone());
        w.set_ports(&[(1, output.clone() as Arc<dyn Port>)]);
        // Marks handed out before the last rule change: stale now.
        let mut stale: Vec<(u8, u32)> = Vec::new();
        for (pkts, op) in bursts {
            let now = marks_now(&reg);
            let mut want = Vec::new();
            for (x, low, kind, r) in &pkts {
                let f = frame(*x, *low);
                let pick = |v: &[(u8, u32)], own: bool| {
                    let c: Vec<u32> = v.iter().filter(|(y, _)| (y == x) == own).map(|m| m.1).collect();
                    if c.is_empty() { 0 } else { c[*r as usize % c.len()] }
                };
                let mark = match kind {
                    0 => 0,
                    1 => *r,
                    2 => pick(&now, true),
                    3 => pick(&now, false),
                    4 => pick(&stale, true),
                    _ => pick(&now, true) ^ 0x0100_0000,
                };
                let hash = match r % 3 {
                    0 => 0,
                    1 => 0x5bd1_e995,
                    _ => *r | 1,
                };
                input.push(f, mark, hash);
                want.extend(pipe.want(*x));
            }
            run(&mut w, &input);
            let got: Vec<u16> = output.take_captured().iter()
                .map(|f| wire::extract(f, 1).get(Field::TpDst) as u16).collect();
            proptest::prop_assert_eq!(got, want);
            match op {
                0 => w.flush(),
                1 => w.housekeep(),
                2 => {
                    // A rule change: the datapath revalidates (here: flushes) and the marks
                    // already in the XDP map go stale until vireod replaces them.
                    stale = marks_now(&reg);
                    let mut g = pipe.0.lock().unwrap();
                    g.1 += 1;
                    let flip = g.1 as u8 % 12;
                    if let Some(i) = g.0.iter().position(|&y| y == flip) {
                        g.0.remove(i);
                    } else {
                        g.0.push(flip);
                    }
                    drop(g);
                    w.flush();
                }
                _ => {}
            }
        }
    }
}

/// A right mark is a hit of its own tier, with no cache lookup; a mark naming a flow that does
/// not cover the packet, another PMD's mark and an unknown mark fall back to the caches.
#[test]
fn right_marks_skip_the_caches_and_wrong_ones_fall_back() {
    let pipe = Arc::new(Rules(Mutex::new((vec![1, 2], 0))));
    let input = MetaPort::default();
    let output = Arc::new(ports::dummy::DummyPort::new());
    let cfg = WorkerConfig {
        emc_insert_inv_prob: 1,
        ..WorkerConfig::default()
    };
    let reg = Registry::default();
    let mut w = Worker::new(pipe, cfg, reg.clone());
    w.set_ports(&[(1, output.clone() as Arc<dyn Port>)]);
    input.push(frame(1, 0), 0, 0);
    input.push(frame(2, 0), 0, 0);
    run(&mut w, &input);
    let _ = w.take_tally();
    let marks = marks_now(&reg);
    let m1 = marks.iter().find(|m| m.0 == 1).unwrap().1;
    let m2 = marks.iter().find(|m| m.0 == 2).unwrap().1;
    // Every flow remembers the tuple of the packet that created it.
    let r = reg.lock().unwrap();
    let f1 = r
        .iter()
        .flatten()
        .find(|f| f.key.get(Field::Ipv4Dst) == 0x0a00_0100);
    let t = *f1.unwrap().tuple.get().unwrap();
    assert_eq!((t.dst, t.dport, t.proto), (0x0a00_0100, 7, 17));
    drop(r);
    for low in 0..20 {
        input.push(frame(1, low), m1, 0);
    }
    run(&mut w, &input);
    let t = w.take_tally();
    assert_eq!((t.mark_hits, t.emc_hits, t.smc_hits), (20, 0, 0));
    // The mark of 10.0.2.0/24's flow on a packet to 10.0.1.5; another PMD's mark; junk.
    input.push(frame(1, 5), m2, 0);
    input.push(frame(1, 5), m1 ^ 0x0300_0000, 0);
    input.push(frame(1, 5), 0x00ff_fff0, 0);
    run(&mut w, &input);
    let t = w.take_tally();
    assert_eq!(t.mark_hits, 0);
    assert_eq!(t.emc_hits + t.smc_hits + t.megaflow_hits, 3);
    let got: Vec<u16> = output
        .take_captured()
        .iter()
        .map(|f| wire::extract(f, 1).get(Field::TpDst) as u16)
        .collect();
    assert_eq!(got.len(), 2 + 20 + 3);
    assert!(got[2..].iter().all(|&tp| tp == 1001), "{got:?}");
}

/// The XDP hash replaces the key's hash in the caches: a flow cached under it is found in the
/// EMC only by packets that bring the same hash (a packet without one hashes its key and finds
/// the flow in the classifier instead — never a wrong entry).
#[test]
fn the_xdp_hash_places_the_flow_in_the_caches() {
    let pipe = TestPipeline::new(vec![Action::Output(1)]);
    let input = MetaPort::default();
    let output = Arc::new(ports::dummy::DummyPort::new());
    let cfg = WorkerConfig {
        emc_insert_inv_prob: 1,
        ..WorkerConfig::default()
    };
    let mut w = Worker::new(pipe, cfg, Registry::default());
    w.set_ports(&[(1, output as Arc<dyn Port>)]);
    let f = frame(1, 1);
    let h = 0x5bd1_e995;
    let mut tiers = Vec::new();
    for hash in [h, h, 0, h] {
        input.push(f.clone(), 0, hash);
        run(&mut w, &input);
        let t = w.take_tally();
        tiers.push((t.misses, t.emc_hits, t.smc_hits, t.megaflow_hits));
    }
    assert_eq!(
        tiers,
        [(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 0, 1), (0, 1, 0, 0)]
    );
}

/// Every packet to port 1 under one megaflow (in_port only).
struct AllToOne;
impl Upcall for AllToOne {
    fn upcall(&self, _: &FlowKey, _: &Packet) -> UpcallResult {
        UpcallResult {
            actions: vec![Action::Output(1)].into(),
            mask: FlowKey::ZERO,
            install: true,
            deps: Default::default(),
        }
    }
}

/// A megaflow created by a frame without a 5-tuple (here IPv6) takes the tuple of the first
/// XDP-hashed IPv4 packet that reaches it past the EMC, so vireod can mark it; a packet
/// without an XDP hash (another port kind) does not set it.
#[test]
fn a_megaflow_created_without_a_tuple_takes_one_from_a_later_xdp_packet() {
    let input = MetaPort::default();
    let output = Arc::new(ports::dummy::DummyPort::new());
    let cfg = WorkerConfig {
        emc_insert_inv_prob: 0,
        ..WorkerConfig::default()
    };
    let reg = Registry::default();
    let mut w = Worker::new(Arc::new(AllToOne), cfg, reg.clone());
    w.set_ports(&[(1, output as Arc<dyn Port>)]);
    let mut v6 = frame(1, 1);
    v6[12..14].copy_from_slice(&[0x86, 0xdd]);
    input.push(v6, 0, 0);
    run(&mut w, &input);
    let tuple = || {
        let r = reg.lock().unwrap();
        let f = r.iter().flatten().next().expect("one megaflow");
        f.tuple.get().copied()
    };
    assert_eq!(tuple(), None);
    input.push(frame(1, 7), 0, 0);
    run(&mut w, &input);
    assert_eq!(tuple(), None, "no XDP hash: not from an xdp-mark port");
    input.push(frame(1, 9), 0, 0x5bd1_e995);
    run(&mut w, &input);
    let t = tuple().expect("a tuple from the XDP packet");
    assert_eq!((t.dst, t.dport, t.proto), (0x0a00_0109, 7, 17));
    assert_eq!(w.flow_count(), 1);
}
