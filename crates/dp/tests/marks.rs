//! XDP flow marks and hashes on the per-PMD pipeline, driven directly (no threads): packets
//! that arrive with a mark and a hash in their metadata (as an `af-xdp` port with
//! `xdp-mark=on` delivers them) get exactly the actions the normal lookups give, whatever the
//! mark — right, stale after a rule change, naming another flow or another PMD, or random —
//! and whatever the hash; a right mark skips the caches (`mark_hits`), and skips extraction
//! too (`mark_skips`) exactly when the named megaflow allows it and the frame shows its tuple
//! at fixed offsets. Frames bent to fool a careless fixed-offset check (a VLAN tag whose TCI
//! reads as an IPv4 version byte, IP options, fragments, a short UDP header, another MAC or
//! source port under a flow whose mask uses them) are part of the mix.
mod common;

use common::*;
use dp::flow::{mark_of, mark_tag, Megaflow, Registry, Tuple5};
use dp::worker::{Worker, WorkerConfig};
use dp::{Action, Upcall, UpcallResult};
use packet::{Batch, Packet, Pool, BATCH_SIZE};
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

/// The oracle's rules, on the destination's /24 10.0.X.0 (so one megaflow covers many
/// 5-tuples, and a mark installed for one of them is checked for others). Every megaflow
/// matches eth_type, the /24 and vlan_tci; a tagged frame is dropped. By X mod 4:
/// 0: nothing more; 1: the source MAC too (allowed if its last byte is even: a mask with a
/// field the XDP program does not see); 2: protocol, ip_frag and tp_src too (allowed if not a
/// fragment and tp_src is odd); 3: the TOS byte too (allowed if 0: a field the XDP program
/// does not see, matched at the value an implied key has). Allowed packets with X in the set
/// get their destination MAC set to 02:00:00:00:X:version and go to port 1; others are
/// dropped.
struct Rules(Mutex<(Vec<u8>, u8)>);

impl Rules {
    fn decide(&self, key: &FlowKey) -> (FlowKey, Option<[u8; 6]>) {
        let x = (key.get(Field::Ipv4Dst) >> 8) as u8;
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::EthType);
        mask.set(Field::Ipv4Dst, 0xffff_ff00);
        mask.set_exact(Field::VlanTci);
        // Port 2 only (the datapath adds in_port to every mask).
        let mut ok = key.get(Field::EthType) == 0x0800
            && key.get(Field::VlanTci) == 0
            && key.get(Field::InPort) == 2;
        match x % 4 {
            1 => {
                mask.set_exact(Field::EthSrc);
                ok &= key.get(Field::EthSrc) & 1 == 0;
            }
            2 => {
                mask.set_exact(Field::IpProto);
                mask.set_exact(Field::IpFrag);
                mask.set_exact(Field::TpSrc);
                ok &= key.get(Field::IpFrag) == 0 && key.get(Field::TpSrc) % 2 == 1;
            }
            3 => {
                mask.set_exact(Field::IpTos);
                ok &= key.get(Field::IpTos) == 0;
            }
            _ => {}
        }
        let g = self.0.lock().unwrap();
        let out = (ok && g.0.contains(&x)).then_some([2, 0, 0, 0, x, g.1]);
        (mask, out)
    }

    /// Where the normal lookups send `frame` (received on port 2): the pipeline's own answer
    /// for its key.
    fn want(&self, frame: &[u8]) -> Option<[u8; 6]> {
        self.decide(&wire::extract(frame, 2)).1
    }
}

impl Upcall for Rules {
    fn upcall(&self, key: &FlowKey, _: &Packet) -> UpcallResult {
        let (mask, out) = self.decide(key);
        let actions = match out {
            Some(mac) => vec![Action::SetEthDst(mac), Action::Output(1)],
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

/// Shapes a frame can be bent into ([`pkt`]): only `PLAIN` may ever skip extraction.
const PLAIN: u8 = 0;
/// TPID 0x8100 where the EtherType was: a VLAN tag with TCI 0x4500, its "EtherType" the IPv4
/// total length (so no EtherType); the bytes after offset 14 are the plain frame's.
const VLAN: u8 = 1;
/// IHL 6: the UDP ports become IPv4 options, the real "ports" are the UDP length and checksum.
const IP_OPTS: u8 = 2;
/// A later fragment (offset 8): the UDP header's bytes are payload.
const LATER_FRAG: u8 = 3;
/// A first fragment (MF).
const FIRST_FRAG: u8 = 4;
/// Total length 24: a UDP header of 4 bytes (too short, so no ports in the key).
const SHORT_L4: u8 = 5;
/// TOS 4: a plain layout, which may skip unless the flow's mask uses the TOS.
const TOS: u8 = 6;
const SHAPES: u8 = 7;

/// UDP from 10.0.0.1:`sport` (source MAC 02:00:00:00:00:`mac`) to 10.0.X.`low`:7, bent into
/// `shape`. Every shape keeps the plain frame's bytes at the offsets the XDP program and the
/// skip check read the 5-tuple from.
fn pkt(x: u8, low: u8, mac: u8, sport: u16, shape: u8) -> Vec<u8> {
    let mut f = udp_frame(0x0a00_0000 | u32::from(x) << 8 | u32::from(low), 7);
    f[11] = mac;
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    match shape {
        VLAN => f[12..14].copy_from_slice(&[0x81, 0x00]),
        IP_OPTS => f[14] = 0x46,
        LATER_FRAG => f[20..22].copy_from_slice(&[0, 1]),
        FIRST_FRAG => f[20] |= 0x20,
        SHORT_L4 => f[16..18].copy_from_slice(&[0, 24]),
        TOS => f[15] = 4,
        _ => {}
    }
    f
}

/// The plain frame's 5-tuple.
fn tuple_of(x: u8, low: u8, sport: u16) -> Tuple5 {
    Tuple5 {
        src: 0x0a00_0001,
        dst: 0x0a00_0000 | u32::from(x) << 8 | u32::from(low),
        sport,
        dport: 7,
        proto: 17,
    }
}

fn frame(x: u8, low: u8) -> Vec<u8> {
    pkt(x, low, 2, 4001, PLAIN)
}

/// A flow the worker holds now, as vireod would mark it (tag 0:
/// `WorkerConfig::default().txq`).
#[derive(Clone, Debug)]
struct Marked {
    /// The /24 it covers.
    x: u8,
    mark: u32,
    tuple: Option<Tuple5>,
    flow: Arc<Megaflow>,
}

fn marks_now(reg: &Registry) -> Vec<Marked> {
    let r = reg.lock().unwrap();
    r.iter()
        .enumerate()
        .filter_map(|(id, f)| {
            let f = f.as_ref()?;
            Some(Marked {
                x: (f.key.get(Field::Ipv4Dst) >> 8) as u8,
                mark: mark_of(mark_tag(0), id as u32)?,
                tuple: f.tuple.get().copied(),
                flow: f.clone(),
            })
        })
        .collect()
}

fn run(w: &mut Worker, input: &MetaPort) {
    while input.pending() > 0 {
        w.poll(2, input, 0);
    }
}

/// Destination MACs of what port 1 sent.
fn sent(output: &ports::dummy::DummyPort) -> Vec<[u8; 6]> {
    output
        .take_captured()
        .iter()
        .map(|f| f[..6].try_into().unwrap())
        .collect()
}

proptest::proptest! {
    /// Every packet gets the oracle's decision with marks and XDP hashes of every kind — none,
    /// random, the mark of the flow that covers it, of the flow whose tuple it has, of
    /// another flow, marks kept from before a rule change (stale: their ids are reused by
    /// other flows), another PMD's tag — and frames of every shape, through flushes, idle
    /// expiry and rule changes. Burst by burst, exactly the packets that may skip extraction
    /// do: a plain frame (TOS or not) with an XDP hash whose mark names a flow that covers
    /// it, holds the frame's own tuple and has neither a MAC nor the TOS in its mask (X mod 4
    /// is 0 or 2).
    #[test]
    fn marked_packets_get_what_the_normal_lookups_give(
        rules in proptest::collection::btree_set(0u8..12, 0..8),
        bursts in proptest::collection::vec(
            (proptest::collection::vec(
                (0u8..12, 0u8..3, 2u8..4, 4001u16..4003, 0u8..(2 * SHAPES), 0u8..10,
                 proptest::num::u32::ANY),
                1..40),
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
        let mut stale: Vec<Marked> = Vec::new();
        for (pkts, op) in bursts {
            for chunk in pkts.chunks(BATCH_SIZE) {
                // One poll per chunk: the flows it sees are those of now.
                let now = marks_now(&reg);
                let mut want = Vec::new();
                let mut skips = 0;
                for &(x, low, mac, sport, shape, kind, r) in chunk {
                    // Half the frames plain.
                    let shape = shape.saturating_sub(SHAPES);
                    let f = pkt(x, low, mac, sport, shape);
                    let pick = |v: &[Marked], keep: &dyn Fn(&Marked) -> bool| {
                        let c: Vec<u32> = v.iter().filter(|m| keep(m)).map(|m| m.mark).collect();
                        if c.is_empty() { 0 } else { c[r as usize % c.len()] }
                    };
                    let t = tuple_of(x, low, sport);
                    let mark = match kind {
                        0 => 0,
                        1 => r,
                        2 => pick(&now, &|m| m.x == x),
                        3 => pick(&now, &|m| m.x != x),
                        4 => pick(&stale, &|m| m.x == x),
                        5 => pick(&now, &|m| m.x == x) ^ 0x0100_0000,
                        _ => pick(&now, &|m| m.tuple == Some(t)),
                    };
                    let hash = match r % 3 {
                        0 => 0,
                        1 => 0x5bd1_e995,
                        _ => r | 1,
                    };
                    let named = now.iter().find(|m| m.mark == mark && mark != 0);
                    let key = wire::extract(&f, 2);
                    if hash != 0
                        && (shape == PLAIN || shape == TOS)
                        && named.is_some_and(|m| {
                            m.x % 2 == 0 && m.tuple == Some(t) && m.flow.covers(&key)
                        })
                    {
                        skips += 1;
                    }
                    want.extend(pipe.want(&f));
                    input.push(f, mark, hash);
                }
                w.poll(2, &input, 0);
                proptest::prop_assert_eq!(input.pending(), 0);
                let t = w.take_tally();
                proptest::prop_assert_eq!(t.mark_skips, skips, "{:?}", t);
                proptest::prop_assert!(t.mark_hits >= t.mark_skips);
                proptest::prop_assert_eq!(sent(&output), want);
            }
            match op {
                0 => w.flush(),
                1 => w.housekeep(),
                2 => {
                    // A rule change: the datapath revalidates (here: flushes) and the marks
                    // already in the XDP map go stale until vireod replaces them.
                    stale = marks_now(&reg);
                    let mut g = pipe.0.lock().unwrap();
                    g.1 += 1;
                    let flip = g.1 % 12;
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

/// A right mark is a hit of its own tier, with no cache lookup, and with the XDP hash and the
/// flow's own tuple also without extraction; a mark naming a flow that does not cover the
/// packet, another PMD's mark and an unknown mark fall back to the caches.
#[test]
fn right_marks_skip_the_caches_and_wrong_ones_fall_back() {
    let pipe = Arc::new(Rules(Mutex::new((vec![4, 8], 0))));
    let input = MetaPort::default();
    let output = Arc::new(ports::dummy::DummyPort::new());
    let cfg = WorkerConfig {
        emc_insert_inv_prob: 1,
        ..WorkerConfig::default()
    };
    let reg = Registry::default();
    let mut w = Worker::new(pipe, cfg, reg.clone());
    w.set_ports(&[(1, output.clone() as Arc<dyn Port>)]);
    input.push(frame(4, 0), 0, 0);
    input.push(frame(8, 0), 0, 0);
    run(&mut w, &input);
    let _ = w.take_tally();
    let marks = marks_now(&reg);
    let m1 = marks.iter().find(|m| m.x == 4).unwrap().mark;
    let m2 = marks.iter().find(|m| m.x == 8).unwrap().mark;
    // Every flow remembers the tuple of the packet that created it.
    let t = marks.iter().find(|m| m.x == 4).unwrap().tuple.unwrap();
    assert_eq!(t, tuple_of(4, 0, 4001));
    // Its own tuple: no extraction (with the XDP hash only, as the program always gives
    // one with a mark); others of its /24: verified by the key.
    for low in 0..10 {
        input.push(frame(4, 0), m1, 0x5bd1_e995);
        input.push(frame(4, low + 1), m1, 0x5bd1_e995);
    }
    input.push(frame(4, 0), m1, 0);
    run(&mut w, &input);
    let t = w.take_tally();
    assert_eq!(
        (t.mark_hits, t.mark_skips, t.emc_hits, t.smc_hits),
        (21, 10, 0, 0)
    );
    // The mark of 10.0.8.0/24's flow on a packet to 10.0.4.5; another PMD's mark; junk.
    input.push(frame(4, 5), m2, 1);
    input.push(frame(4, 5), m1 ^ 0x0300_0000, 1);
    input.push(frame(4, 5), 0x00ff_fff0, 1);
    // Its own tuple but the mark of the other flow.
    input.push(frame(4, 0), m2, 1);
    run(&mut w, &input);
    let t = w.take_tally();
    assert_eq!((t.mark_hits, t.mark_skips), (0, 0));
    assert_eq!(t.emc_hits + t.smc_hits + t.megaflow_hits, 4);
    let got = sent(&output);
    assert_eq!(got.len(), 2 + 21 + 4);
    assert!(got[2..].iter().all(|m| m[4] == 4), "{got:?}");
}

/// Packets that a skip check too trusting would send where their flow does not go: each
/// carries the right mark (and an XDP hash) of a flow that holds the plain frame's tuple at
/// the fixed offsets, and the oracle drops it; then the plain frame itself, with the same
/// mark, skips extraction and goes out. Each case fails if the one condition named beside it
/// is taken out of the skip decision.
#[test]
fn only_frames_that_show_the_flows_tuple_skip_extraction() {
    let cases: [(u8, u8, u8, u16, &str); 9] = [
        // A flow whose mask uses the source MAC; a frame from another MAC.
        (5, 3, PLAIN, 4001, "mask with a MAC"),
        // A flow whose mask uses the TOS, at 0 (the value the implied key has: only the
        // mask check stops it); a frame with TOS 4.
        (7, 2, TOS, 4001, "mask with the TOS"),
        // A flow matching tp_src; a frame with another source port (the tuple comparison).
        (6, 2, PLAIN, 4002, "another tuple"),
        // The tuple's ports as IPv4 options (the IHL check).
        (6, 2, IP_OPTS, 4001, "IP options"),
        // A later fragment with the ports' bytes as payload (the offset check).
        (6, 2, LATER_FRAG, 4001, "later fragment"),
        // A first fragment (the MF check).
        (6, 2, FIRST_FRAG, 4001, "first fragment"),
        // A UDP header cut short by the total length (the L4 length check).
        (6, 2, SHORT_L4, 4001, "short UDP header"),
        // A VLAN tag whose TCI reads as "IPv4, IHL 5" (the EtherType check).
        (4, 2, VLAN, 4001, "VLAN tag"),
        (6, 2, VLAN, 4001, "VLAN tag"),
    ];
    for (x, mac, shape, sport, what) in cases {
        let pipe = Arc::new(Rules(Mutex::new((vec![x], 0))));
        let input = MetaPort::default();
        let output = Arc::new(ports::dummy::DummyPort::new());
        let reg = Registry::default();
        let mut w = Worker::new(pipe.clone(), WorkerConfig::default(), reg.clone());
        w.set_ports(&[(1, output.clone() as Arc<dyn Port>)]);
        let plain = pkt(x, 1, 2, 4001, PLAIN);
        input.push(plain.clone(), 0, 0);
        run(&mut w, &input);
        assert_eq!(sent(&output).len(), 1, "{what}: the plain frame is allowed");
        let m = marks_now(&reg).remove(0);
        assert_eq!(m.tuple, Some(tuple_of(x, 1, 4001)));
        let bent = pkt(x, 1, mac, sport, shape);
        assert_eq!(pipe.want(&bent), None, "{what}: the oracle drops it");
        if sport == 4001 {
            assert_eq!(
                &bent[23..38],
                &plain[23..38],
                "{what}: same bytes at the tuple"
            );
        }
        let _ = w.take_tally();
        input.push(bent, m.mark, 0x5bd1_e995);
        run(&mut w, &input);
        let t = w.take_tally();
        assert_eq!(
            sent(&output),
            Vec::<[u8; 6]>::new(),
            "{what}: sent where its flow does not go"
        );
        assert_eq!(t.mark_skips, 0, "{what}");
        input.push(plain, m.mark, 0x5bd1_e995);
        run(&mut w, &input);
        let t = w.take_tally();
        // Except under a flow that matches a MAC or the TOS, which never skips.
        let skips = u64::from(x % 2 == 0);
        assert_eq!(
            (t.mark_hits, t.mark_skips),
            (1, skips),
            "{what}: the plain frame"
        );
        assert_eq!(sent(&output).len(), 1, "{what}");
    }
}

/// A mark of a flow of port 2 on a frame with its tuple that arrives on port 3 (a stale or
/// shared map entry) does not skip: the oracle drops what comes from port 3.
#[test]
fn a_mark_on_a_frame_from_another_port_does_not_skip() {
    let pipe = Arc::new(Rules(Mutex::new((vec![4], 0))));
    let input = MetaPort::default();
    let output = Arc::new(ports::dummy::DummyPort::new());
    let reg = Registry::default();
    let mut w = Worker::new(pipe.clone(), WorkerConfig::default(), reg.clone());
    w.set_ports(&[(1, output.clone() as Arc<dyn Port>)]);
    input.push(frame(4, 1), 0, 0);
    run(&mut w, &input);
    assert_eq!(sent(&output).len(), 1);
    let m = marks_now(&reg).remove(0);
    let _ = w.take_tally();
    assert_eq!(pipe.decide(&wire::extract(&frame(4, 1), 3)).1, None);
    input.push(frame(4, 1), m.mark, 0x5bd1_e995);
    w.poll(3, &input, 0);
    let t = w.take_tally();
    assert_eq!((t.mark_hits, t.mark_skips, t.misses), (0, 0, 1));
    assert_eq!(sent(&output), Vec::<[u8; 6]>::new());
    input.push(frame(4, 1), m.mark, 0x5bd1_e995);
    w.poll(2, &input, 0);
    assert_eq!(w.take_tally().mark_skips, 1);
    assert_eq!(sent(&output).len(), 1);
}

/// A flow whose actions read the key (here a `userspace` action) never skips extraction,
/// whatever its mask: the slow path gets the packet's real key.
#[test]
fn flows_whose_actions_read_the_key_do_not_skip() {
    struct ToUserspace(Mutex<Vec<FlowKey>>);
    impl Upcall for ToUserspace {
        fn upcall(&self, _: &FlowKey, _: &Packet) -> UpcallResult {
            let mut mask = FlowKey::ZERO;
            mask.set_exact(Field::EthType);
            UpcallResult {
                actions: vec![Action::Userspace(9)].into(),
                mask,
                install: true,
                deps: Default::default(),
            }
        }
        fn userspace(&self, _: u64, key: &FlowKey, _: &Packet) {
            self.0.lock().unwrap().push(*key);
        }
    }
    let pipe = Arc::new(ToUserspace(Mutex::new(Vec::new())));
    let input = MetaPort::default();
    let reg = Registry::default();
    let mut w = Worker::new(pipe.clone(), WorkerConfig::default(), reg.clone());
    input.push(frame(3, 1), 0, 0);
    run(&mut w, &input);
    let m = marks_now(&reg).remove(0);
    assert_eq!(m.tuple, Some(tuple_of(3, 1, 4001)));
    let _ = w.take_tally();
    pipe.0.lock().unwrap().clear();
    for _ in 0..5 {
        input.push(frame(3, 1), m.mark, 0x5bd1_e995);
    }
    run(&mut w, &input);
    let t = w.take_tally();
    assert_eq!((t.mark_hits, t.mark_skips), (5, 0));
    let keys = pipe.0.lock().unwrap();
    assert_eq!(keys.len(), 5);
    assert!(keys.iter().all(|k| *k == wire::extract(&frame(3, 1), 2)));
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
