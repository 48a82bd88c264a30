//! The per-PMD pipeline driven directly (no threads): cache tiers, allocation-free steady
//! state, flow limit, idle expiry, upcall panics.
mod common;

use common::*;
use dp::flow::Registry;
use dp::simd::Isa;
use dp::worker::{Worker, WorkerConfig};
use dp::{Action, Upcall, UpcallResult};
use packet::{Batch, Packet, Pool};
use ports::{Link, Port, PortStats};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use wire::{Field, FlowKey};

/// Receives full bursts of the given frames (round robin) and "sends" by counting.
struct LoopPort {
    frames: Vec<Vec<u8>>,
    next: AtomicUsize,
    sent: AtomicUsize,
    tx_calls: AtomicUsize,
}

impl LoopPort {
    fn new(frames: Vec<Vec<u8>>) -> Arc<LoopPort> {
        Arc::new(LoopPort {
            frames,
            next: AtomicUsize::new(0),
            sent: AtomicUsize::new(0),
            tx_calls: AtomicUsize::new(0),
        })
    }
}

impl Port for LoopPort {
    fn kind(&self) -> &'static str {
        "loop"
    }
    fn n_rxq(&self) -> usize {
        1
    }
    fn rx_burst(&self, _q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let mut n = 0;
        while !out.is_full() {
            let i = self.next.fetch_add(1, SeqCst) % self.frames.len();
            let mut p = pool.get();
            p.set_frame(&self.frames[i]);
            let _ = out.push(p);
            n += 1;
        }
        n
    }
    fn tx_burst(&self, _q: usize, pkts: &mut Batch) -> usize {
        self.sent.fetch_add(pkts.len(), SeqCst);
        self.tx_calls.fetch_add(1, SeqCst);
        pkts.len()
    }
    fn link(&self) -> Link {
        Link::Up
    }
    fn stats(&self) -> PortStats {
        PortStats::default()
    }
}

fn worker(pipe: Arc<dyn Upcall>, cfg: WorkerConfig, port: &Arc<LoopPort>) -> (Worker, Registry) {
    let reg = Registry::default();
    let mut w = Worker::new(pipe, cfg, reg.clone());
    w.set_ports(&[(1, port.clone() as Arc<dyn Port>)]);
    (w, reg)
}

#[test]
fn steady_state_does_not_allocate_buffers_and_uses_the_emc() {
    let frames = (0..8).map(|i| udp_frame(0x0a00_0000 + i, 1)).collect();
    let port = LoopPort::new(frames);
    let cfg = WorkerConfig {
        emc_insert_inv_prob: 1,
        ..WorkerConfig::default()
    };
    let pipe = TestPipeline::new(vec![Action::Output(1), Action::Output(1)]);
    let (mut w, _) = worker(pipe.clone(), cfg, &port);
    for _ in 0..10 {
        w.poll(1, &*port, 0);
    }
    let warm = w.pool().stats().allocated;
    let _ = w.take_tally();
    for _ in 0..1000 {
        assert_eq!(w.poll(1, &*port, 0), 32);
    }
    assert_eq!(
        w.pool().stats().allocated,
        warm,
        "no buffer allocated in steady state"
    );
    let t = w.take_tally();
    assert_eq!(t.packets, 32_000);
    assert_eq!(t.emc_hits, 32_000);
    assert_eq!(
        port.sent.load(SeqCst),
        2 * 32 * 1010,
        "two outputs: one copy, one move"
    );
    assert_eq!(pipe.upcalls.load(SeqCst), 8);
    assert_eq!(w.flow_count(), 8);
}

/// While the EMC's gate is closed (and the SMC off: one subtable) a burst that does not probe
/// leaves its packets unhashed; the EMC entries they get are hashed when inserted, at the
/// place the next sampling burst looks: its probes all hit.
#[test]
fn packets_cached_in_a_burst_that_skipped_the_emc_are_found_by_the_next_probe() {
    let many = LoopPort::new((0..20_000).map(|i| udp_frame(0x0a00_0000 + i, 1)).collect());
    let few = LoopPort::new((0..4).map(|i| udp_frame(0x0b00_0000 + i, 1)).collect());
    let pipe = TestPipeline::new(vec![Action::Output(1)]);
    let cfg = WorkerConfig {
        emc_insert_inv_prob: 1,
        ..WorkerConfig::default()
    };
    let mut w = Worker::new(pipe, cfg, Registry::default());
    w.set_ports(&[
        (1, many.clone() as Arc<dyn Port>),
        (2, few.clone() as Arc<dyn Port>),
    ]);
    for _ in 0..1250 {
        w.poll(1, &*many, 0);
    }
    assert!(w.take_tally().emc_bypassed > 20_000, "the gate closed");
    // Up to a sampling burst (one in GATE_SAMPLE probes while the gate is closed).
    let mut polls = 0;
    loop {
        w.poll(1, &*many, 0);
        polls += 1;
        if w.take_tally().emc_bypassed == 0 {
            break;
        }
        assert!(polls <= dp::emc::GATE_SAMPLE, "no sampling burst");
    }
    // The next GATE_SAMPLE - 1 bursts skip the EMC: the four flows are installed and
    // cached there with hashes computed late.
    for _ in 1..dp::emc::GATE_SAMPLE {
        w.poll(2, &*few, 0);
    }
    let t = w.take_tally();
    assert_eq!((t.emc_bypassed, t.emc_hits), (32 * 15, 0), "{t:?}");
    w.poll(2, &*few, 0);
    let t = w.take_tally();
    assert_eq!(
        (t.emc_bypassed, t.emc_hits),
        (0, 32),
        "the sampling burst hit: {t:?}"
    );
}

/// With far more flows than EMC entries the EMC's gate closes (packets skip the probe,
/// counted), every packet still follows its flow; when the traffic narrows to a few flows the
/// sampled probes hit again and the gate reopens.
#[test]
fn the_emc_gate_closes_at_many_flows_and_reopens_for_few() {
    let many = LoopPort::new((0..20_000).map(|i| udp_frame(0x0a00_0000 + i, 1)).collect());
    let few = LoopPort::new((0..4).map(|i| udp_frame(0x0b00_0000 + i, 1)).collect());
    let pipe = TestPipeline::new(vec![Action::Output(1)]);
    let mut w = Worker::new(pipe.clone(), WorkerConfig::default(), Registry::default());
    w.set_ports(&[
        (1, many.clone() as Arc<dyn Port>),
        (2, few.clone() as Arc<dyn Port>),
    ]);
    // Two rounds over the 20,000 flows: the second finds every megaflow installed.
    for _ in 0..1250 {
        w.poll(1, &*many, 0);
    }
    let t = w.take_tally();
    assert_eq!(pipe.upcalls.load(SeqCst), 20_000, "one upcall per flow");
    assert!(t.emc_bypassed > 20_000, "the gate closed: {t:?}");
    assert_eq!(
        t.emc_hits + t.smc_hits + t.megaflow_hits + t.misses,
        t.packets,
        "every packet classified once: {t:?}"
    );
    assert_eq!(many.sent.load(SeqCst), 40_000, "every packet sent");
    // Four flows: sampled probes hit (insertion went on), the gate reopens.
    for _ in 0..4000 {
        w.poll(2, &*few, 0);
    }
    let _ = w.take_tally();
    for _ in 0..100 {
        w.poll(2, &*few, 0);
    }
    let t = w.take_tally();
    assert_eq!(
        (t.emc_bypassed, t.emc_hits),
        (0, 3200),
        "the gate reopened: {t:?}"
    );
}

#[test]
fn smc_serves_when_the_emc_does_not_insert() {
    let port = LoopPort::new(vec![udp_frame(0x0a00_0001, 1)]);
    let cfg = WorkerConfig {
        emc_insert_inv_prob: 0,
        smc_min_subtables: 1,
        ..WorkerConfig::default()
    };
    let (mut w, _) = worker(TestPipeline::new(vec![Action::Output(1)]), cfg, &port);
    w.poll(1, &*port, 0);
    let t = w.take_tally();
    assert_eq!((t.misses, t.megaflow_hits), (1, 31));
    w.poll(1, &*port, 0);
    let t = w.take_tally();
    assert_eq!((t.emc_hits, t.smc_hits), (0, 32));
    assert_eq!(
        port.tx_calls.load(SeqCst),
        2,
        "one tx burst per output port per rx burst"
    );
}

/// Megaflows on the destination for 10.0.0.1, on the source for anything else: two
/// subtables once both were seen.
struct TwoMasks;

impl Upcall for TwoMasks {
    fn upcall(&self, key: &FlowKey, _: &Packet) -> UpcallResult {
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::EthType);
        if key.get(Field::Ipv4Dst) == 0x0a00_0001 {
            mask.set_exact(Field::Ipv4Dst);
        } else {
            mask.set_exact(Field::Ipv4Src);
        }
        UpcallResult {
            actions: Arc::from(vec![Action::Output(1)]),
            mask,
            install: true,
            deps: dp::flow::Deps::new(0, vec![]),
        }
    }
}

#[test]
fn the_smc_is_used_only_once_the_classifier_has_two_subtables() {
    let one = LoopPort::new(vec![udp_frame(0x0a00_0001, 1)]);
    let other = LoopPort::new(vec![udp_frame(0x0a00_0002, 1)]);
    let cfg = WorkerConfig {
        emc_insert_inv_prob: 0,
        ..WorkerConfig::default()
    };
    let (mut w, _) = worker(Arc::new(TwoMasks), cfg, &one);
    w.poll(1, &*one, 0);
    w.take_tally();
    w.poll(1, &*one, 0);
    let t = w.take_tally();
    assert_eq!(
        (t.emc_hits, t.smc_hits, t.smc_bypassed, t.megaflow_hits),
        (0, 0, 32, 32),
        "one subtable: the classifier's probe alone, no SMC"
    );
    // A second mask: the SMC is filled from the classifier's hits, then serves.
    w.poll(1, &*other, 0);
    w.poll(1, &*one, 0);
    w.take_tally();
    w.poll(1, &*one, 0);
    let t = w.take_tally();
    assert_eq!(
        (t.emc_hits, t.smc_hits, t.smc_bypassed, t.megaflow_hits),
        (0, 32, 0, 0),
        "two subtables: the SMC serves"
    );
}

#[test]
fn flow_limit_executes_without_caching() {
    let frames = vec![udp_frame(0x0a00_0001, 1), udp_frame(0x0a00_0002, 1)];
    let port = LoopPort::new(frames);
    let cfg = WorkerConfig {
        flow_limit: 1,
        ..WorkerConfig::default()
    };
    let pipe = TestPipeline::new(vec![Action::Output(1)]);
    let (mut w, reg) = worker(pipe.clone(), cfg, &port);
    w.poll(1, &*port, 0);
    assert_eq!(w.flow_count(), 1);
    assert_eq!(reg.lock().unwrap().iter().flatten().count(), 1);
    assert_eq!(
        pipe.upcalls.load(SeqCst),
        1 + 16,
        "the uncached flow asks every time"
    );
    assert_eq!(port.sent.load(SeqCst), 32);
}

#[test]
fn idle_megaflows_expire_and_revalidate_flush_empties_everything() {
    let port = LoopPort::new(vec![udp_frame(0x0a00_0001, 1)]);
    let cfg = WorkerConfig {
        idle_sweeps: 1,
        emc_insert_inv_prob: 1,
        ..WorkerConfig::default()
    };
    let pipe = TestPipeline::new(vec![Action::Output(1)]);
    let (mut w, reg) = worker(pipe.clone(), cfg, &port);
    w.poll(1, &*port, 0);
    w.housekeep(); // saw hits since the last sweep: stays
    assert_eq!(w.flow_count(), 1);
    w.housekeep(); // no hit since: expires
    assert_eq!(w.flow_count(), 0);
    assert!(reg.lock().unwrap().iter().all(|f| f.is_none()));
    w.poll(1, &*port, 0);
    assert_eq!(
        pipe.upcalls.load(SeqCst),
        2,
        "the stale EMC entry is not used"
    );
    w.flush();
    assert_eq!((w.flow_count(), w.subtable_count()), (0, 0));
}

struct Panicky(Mutex<u32>);
impl Upcall for Panicky {
    fn upcall(&self, _: &FlowKey, _: &Packet) -> UpcallResult {
        *self.0.lock().unwrap() += 1;
        panic!("pipeline bug");
    }
}

#[test]
fn a_panicking_upcall_drops_the_packet_and_the_worker_survives() {
    let port = LoopPort::new(vec![udp_frame(0x0a00_0001, 1)]);
    let pipe = Arc::new(Panicky(Mutex::new(0)));
    let (mut w, _) = worker(pipe.clone(), WorkerConfig::default(), &port);
    assert_eq!(w.poll(1, &*port, 0), 32);
    assert_eq!(*pipe.0.lock().unwrap_or_else(|e| e.into_inner()), 32);
    assert_eq!(port.sent.load(SeqCst), 0);
}

/// Pipeline for the oracle test: a packet to 10.0.X.* with X in `rules` gets tp_dst 1000+X and
/// goes to port 1; others are dropped. The decision depends only on the /24 of the destination.
struct Rules(Vec<u8>);
impl Upcall for Rules {
    fn upcall(&self, key: &FlowKey, _: &Packet) -> UpcallResult {
        let x = (key.get(wire::Field::Ipv4Dst) >> 8) as u8;
        let mut mask = FlowKey::ZERO;
        mask.set_exact(wire::Field::EthType);
        mask.set(wire::Field::Ipv4Dst, 0xffff_ff00);
        let actions = if self.0.contains(&x) {
            vec![Action::SetTpDst(1000 + u16::from(x)), Action::Output(1)]
        } else {
            vec![]
        };
        UpcallResult {
            actions: actions.into(),
            mask,
            install: true,
            deps: Default::default(),
        }
    }
}

proptest::proptest! {
    /// Through EMC, SMC, dpcls, revalidation flushes and idle expiry, every packet gets the
    /// decision a direct evaluation of the rules gives.
    #[test]
    fn every_cache_tier_agrees_with_the_rules(
        rules in proptest::collection::btree_set(0u8..12, 0..8),
        bursts in proptest::collection::vec(
            (proptest::collection::vec((0u8..12, 0u8..4), 1..40), 0u8..4), 1..12),
    ) {
        // Every lookup variant this CPU has (dp::simd).
        for isa in Isa::available() {
            let rules: Vec<u8> = rules.iter().copied().collect();
            let input = Arc::new(ports::dummy::DummyPort::new());
            let output = Arc::new(ports::dummy::DummyPort::new());
            let cfg = WorkerConfig { emc_insert_inv_prob: 2, idle_sweeps: 1, isa, ..WorkerConfig::default() };
            let mut w = Worker::new(Arc::new(Rules(rules.clone())), cfg, Registry::default());
            w.set_ports(&[(1, output.clone() as Arc<dyn Port>)]);
            for (pkts, op) in bursts.iter().cloned() {
                let mut want = Vec::new();
                for (x, low) in &pkts {
                    input.inject(udp_frame(0x0a00_0000 | u32::from(*x) << 8 | u32::from(*low), 7)).unwrap();
                    if rules.contains(x) {
                        want.push(1000 + u16::from(*x));
                    }
                }
                while input.pending() > 0 {
                    w.poll(2, &*input, 0);
                }
                let got: Vec<u16> = output.take_captured().iter()
                    .map(|f| wire::extract(f, 1).get(wire::Field::TpDst) as u16).collect();
                proptest::prop_assert_eq!(got, want);
                match op {
                    0 => w.flush(),
                    1 => w.housekeep(),
                    _ => {}
                }
            }
        }
    }
}

/// Per-flow revalidation on one worker: the flows named are removed (their EMC and SMC entries
/// are not used afterwards), the others keep serving from the caches; a flow the control
/// thread's scan could not see (installed after its snapshot) goes only if it was translated
/// before the change.
#[test]
fn revalidate_removes_named_and_unseen_stale_flows_only() {
    let (a, b) = (udp_frame(0x0a00_0001, 1), udp_frame(0x0a00_0002, 1));
    let pa = LoopPort::new(vec![a]);
    let pb = LoopPort::new(vec![b]);
    let cfg = WorkerConfig {
        emc_insert_inv_prob: 1,
        ..WorkerConfig::default()
    };
    let pipe = TestPipeline::new(vec![Action::Output(1)]);
    pipe.version.store(5, SeqCst);
    let (mut w, reg) = worker(pipe.clone(), cfg, &pa);
    w.poll(1, &*pa, 0);
    w.poll(1, &*pb, 0);
    assert_eq!((w.flow_count(), pipe.upcalls.load(SeqCst)), (2, 2));
    // The control thread's scan: snapshot (epoch 1), picks the flow towards 10.0.0.1.
    let (epoch, flows) = reg.lock().unwrap().snapshot();
    let kills: Vec<_> = flows
        .into_iter()
        .filter(|(_, f)| f.deps.touches(&[0x0a00_0001]))
        .collect();
    assert_eq!(kills.len(), 1);
    let req = |kills, version| dp::worker::Revalidation {
        kills,
        since_epoch: epoch,
        version,
    };
    assert_eq!(w.revalidate(req(kills.clone(), 6)), 1);
    assert_eq!(w.flow_count(), 1);
    assert_eq!(w.revalidate(req(kills, 6)), 0, "already gone: nothing else");
    w.poll(1, &*pb, 0);
    assert_eq!(pipe.upcalls.load(SeqCst), 2, "10.0.0.2 still cached");
    w.poll(1, &*pa, 0);
    assert_eq!(
        pipe.upcalls.load(SeqCst),
        3,
        "10.0.0.1: stale caches not used"
    );
    // That new flow was installed after the snapshot, translated at version 5: a request for
    // version 6 removes it although its scan did not list it; one for version 5 keeps it.
    assert_eq!(w.revalidate(req(Vec::new(), 5)), 0);
    assert_eq!(w.flow_count(), 2);
    assert_eq!(w.revalidate(req(Vec::new(), 6)), 1);
    assert_eq!(w.flow_count(), 1);
    // Flows installed before the newest snapshot are not judged by version.
    w.poll(1, &*pa, 0);
    let (epoch2, _) = reg.lock().unwrap().snapshot();
    let later = dp::worker::Revalidation {
        kills: Vec::new(),
        since_epoch: epoch2,
        version: 9,
    };
    assert_eq!(w.revalidate(later), 0);
    assert_eq!(w.flow_count(), 2);
}
