//! The fast path allocates nothing per packet: a counting global allocator (this test binary's
//! own) counts every allocation the test thread makes while armed, and a worker is driven
//! through each tier of the fast path for many bursts after warm-up — EMC hits, SMC hits,
//! megaflow (dpcls) hits on keys the caches have never seen, a set-field action, two outputs
//! (one copy, one move), a burst through `ct` with recirculation, and large frames received
//! with one copy (tails left in a guest memory table the batch holds) sent to a port that
//! takes tails and to one that does not — with zero allocations allowed. Misses (upcalls, flow installs) allocate and are kept out of the armed windows.
//!
//! One `#[test]` only, and only the test thread is counted, so the harness's own threads do
//! not disturb the count. The allocator is the only `unsafe` here (`GlobalAlloc` is an unsafe
//! trait); it forwards to the system allocator.
#![allow(unsafe_code)]
use conntrack::{Conntrack, CtAction};
use dp::flow::Registry;
use dp::worker::{Worker, WorkerConfig};
use dp::{Action, CtSpec, Deps, Upcall, UpcallResult};
use guestmem::GuestMemory;
use packet::{Batch, Packet, Pool, Tail};
use ports::{Link, Port, PortStats};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use wire::{Field, FlowKey};

/// Counts allocations made by a thread that has armed it.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if ARMED.with(|a| a.get()) {
        ALLOCS.fetch_add(1, Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting touches only
// an atomic and a const-initialised thread-local (neither allocates).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations `f` makes on this thread.
fn allocs_in(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.load(Relaxed);
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    ALLOCS.load(Relaxed) - before
}

/// Ethernet + IPv4 (valid header checksum) + UDP (no checksum) from 10.0.0.100:12345 to
/// 10.0.0.`dst`:53, 64 bytes.
fn frame(dst: u8) -> Vec<u8> {
    let mut ip = vec![
        0x45, 0, 0, 50, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 100, 10, 0, 0, dst,
    ];
    let c = wire::checksum::compute(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x30, 0x39, 0, 53, 0, 30, 0, 0]);
    f.resize(64, 0);
    f
}

/// Receives full bursts built from `frames` (round robin), with the UDP source port taken
/// from a counter when `vary` is set (every packet a key no cache has seen); counts what it
/// is given to send. Builds packets in the pool's buffers: no allocation of its own.
struct Gen {
    frames: Vec<Vec<u8>>,
    next: AtomicUsize,
    vary: std::sync::atomic::AtomicBool,
    sent: AtomicUsize,
    /// One copy, as a vhost-user port: frames are received as their first [`HEAD`] bytes with
    /// the rest deferred to this table (which holds every frame's tail at [`TAIL_GPA`]).
    mem: Option<Arc<GuestMemory>>,
    /// Takes packets with tails on tx (as a vhost-user port); counts them in `tails_sent`.
    takes: bool,
    tails_sent: AtomicUsize,
}

/// One-copy head length and where the tail lies in [`Gen::mem`].
const HEAD: usize = 192;
const TAIL_GPA: u64 = 0x1000;

impl Gen {
    fn new(frames: Vec<Vec<u8>>) -> Arc<Gen> {
        Arc::new(Gen {
            frames,
            next: AtomicUsize::new(0),
            vary: false.into(),
            sent: AtomicUsize::new(0),
            mem: None,
            takes: false,
            tails_sent: AtomicUsize::new(0),
        })
    }
}

impl Port for Gen {
    fn kind(&self) -> &'static str {
        "gen"
    }
    fn n_rxq(&self) -> usize {
        1
    }
    fn rx_burst(&self, _q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let mut n = 0;
        while !out.is_full() {
            let i = self.next.fetch_add(1, Relaxed);
            let mut p = pool.get();
            let f = &self.frames[i % self.frames.len()];
            if let Some(mem) = &self.mem {
                p.set_frame(&f[..HEAD]);
                let len = (f.len() - HEAD) as u32;
                assert!(p.set_tail(Tail { gpa: TAIL_GPA, len }));
                out.hold_tails(mem);
            } else {
                p.set_frame(f);
            }
            if self.vary.load(Relaxed) {
                // Source port and the low byte of the source address: 2^24 distinct keys.
                let v = (i as u32).to_be_bytes();
                p.data_mut()[29..30].copy_from_slice(&v[1..2]);
                p.data_mut()[34..36].copy_from_slice(&v[2..4]);
            }
            let _ = out.push(p);
            n += 1;
        }
        n
    }
    fn tx_burst(&self, _q: usize, pkts: &mut Batch) -> usize {
        let tails = pkts.as_slice().iter().filter(|p| p.has_tail()).count();
        assert!(tails == 0 || (self.takes && pkts.tails().is_some()));
        self.tails_sent.fetch_add(tails, Relaxed);
        self.sent.fetch_add(pkts.len(), Relaxed);
        pkts.len()
    }
    fn takes_tails(&self) -> bool {
        self.takes
    }
    fn link(&self) -> Link {
        Link::Up
    }
    fn stats(&self) -> PortStats {
        PortStats::default()
    }
}

/// Megaflows on eth_type + ipv4_dst: packets to 10.0.0.1 get a set-field and two outputs;
/// packets to 10.0.0.2 go through `ct(commit,zone=1,table=1)` and, recirculated, are matched
/// on `ct_state` and output.
struct Pipe;

impl Upcall for Pipe {
    fn upcall(&self, key: &FlowKey, _pkt: &Packet) -> UpcallResult {
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::EthType);
        mask.set_exact(Field::Ipv4Dst);
        let actions = if key.get(Field::Ipv4Dst) & 0xff == 3 {
            // One copy: a tail-taking port gets a copy (the tail shared), the other port the
            // packet itself (its tail copied in).
            vec![Action::Output(4), Action::Output(3)]
        } else if key.get(Field::Ipv4Dst) & 0xff == 1 {
            vec![
                Action::SetEthDst([2, 0, 0, 0, 0, 9]),
                Action::SetIpTtl(63),
                Action::Output(2),
                Action::Output(3),
            ]
        } else if key.get(Field::RecircId) == 0 {
            vec![Action::Ct(Box::new(CtSpec {
                ct: CtAction {
                    zone: 1,
                    commit: true,
                    ..CtAction::default()
                },
                recirc: Some(1),
                fork: false,
            }))]
        } else {
            mask.set_exact(Field::CtState);
            vec![Action::Output(2)]
        };
        UpcallResult {
            actions: actions.into(),
            mask,
            install: true,
            deps: Deps::default(),
        }
    }
}

const BURSTS: usize = 500;

fn worker(emc_insert_inv_prob: u32, gen: &Arc<Gen>, out: &[Arc<Gen>; 2]) -> Worker {
    // The SMC even with one subtable, so that its probes and inserts are held too.
    let cfg = WorkerConfig {
        emc_insert_inv_prob,
        smc_min_subtables: 1,
        ..WorkerConfig::default()
    };
    let mut w = Worker::new(Arc::new(Pipe), cfg, Registry::default());
    w.set_ports(&[
        (1, gen.clone() as Arc<dyn Port>),
        (2, out[0].clone() as Arc<dyn Port>),
        (3, out[1].clone() as Arc<dyn Port>),
    ]);
    w.set_conntrack(Arc::new(Conntrack::new()));
    w
}

/// Polls `BURSTS` bursts armed; returns (allocations, packets sent on ports 2 and 3).
fn drive(w: &mut Worker, gen: &Gen, out: &[Arc<Gen>; 2]) -> (u64, usize) {
    for _ in 0..20 {
        w.poll(1, gen, 0);
    }
    let _ = w.take_tally();
    let sent = || out[0].sent.load(Relaxed) + out[1].sent.load(Relaxed);
    let before = sent();
    let n = allocs_in(|| {
        for _ in 0..BURSTS {
            assert_eq!(w.poll(1, gen, 0), 32);
        }
    });
    (n, sent() - before)
}

#[test]
fn the_fast_path_allocates_nothing_per_packet() {
    let out = [Gen::new(vec![frame(0)]), Gen::new(vec![frame(0)])];
    let pkts = (BURSTS * 32) as u64;

    // EMC hits: eight flows, set-field, two outputs.
    let gen = Gen::new((0..8).map(|_| frame(1)).collect());
    let mut w = worker(1, &gen, &out);
    let (n, sent) = drive(&mut w, &gen, &out);
    let t = w.take_tally();
    assert_eq!(t.emc_hits, pkts, "every packet an EMC hit");
    assert_eq!(sent, 2 * pkts as usize, "two outputs per packet");
    assert_eq!(n, 0, "{n} allocations in {pkts} EMC-hit packets");

    // SMC hits: the same traffic with EMC insertion off.
    let mut w = worker(0, &gen, &out);
    let (n, _) = drive(&mut w, &gen, &out);
    let t = w.take_tally();
    assert_eq!(t.smc_hits, pkts, "every packet an SMC hit");
    assert_eq!(n, 0, "{n} allocations in {pkts} SMC-hit packets");

    // Megaflow hits: every packet a key no cache has seen, under one megaflow.
    gen.vary.store(true, Relaxed);
    let mut w = worker(0, &gen, &out);
    let (n, _) = drive(&mut w, &gen, &out);
    let t = w.take_tally();
    // A rare key may meet an earlier one's SMC bucket and signature (the flow hash has a
    // per-process random seed) and, being covered by the same megaflow, count as an SMC hit.
    assert_eq!(
        t.megaflow_hits + t.smc_hits,
        pkts,
        "every packet a cache hit"
    );
    assert!(
        t.megaflow_hits * 100 >= pkts * 99,
        "{} of {pkts} dpcls hits",
        t.megaflow_hits
    );
    assert_eq!(t.misses, 0);
    assert_eq!(n, 0, "{n} allocations in {pkts} dpcls-hit packets");

    // Through ct and back: one tracked UDP connection, recirculated, EMC hits on both passes.
    let ct_gen = Gen::new(vec![frame(2)]);
    let mut w = worker(1, &ct_gen, &out);
    let (n, sent) = drive(&mut w, &ct_gen, &out);
    let t = w.take_tally();
    assert_eq!(t.recirculations, pkts, "every packet recirculated once");
    assert_eq!(t.emc_hits, 2 * pkts, "both passes hit the EMC");
    assert_eq!(sent, pkts as usize);
    assert_eq!(n, 0, "{n} allocations in {pkts} packets through ct");

    // One copy: 1518-byte frames received with their tails deferred to a guest memory table
    // (held by the batch once per burst), output to a port taking tails and to one not.
    let mut big = frame(3);
    big.extend((64..1518).map(|i| i as u8));
    let mem = Arc::new(GuestMemory::anonymous(&[(TAIL_GPA, 4096)]).unwrap());
    mem.write(TAIL_GPA, &big[HEAD..]).unwrap();
    let oc_gen = Arc::new(Gen {
        mem: Some(mem.clone()),
        ..Arc::into_inner(Gen::new(vec![big])).unwrap()
    });
    let vhost = Arc::new(Gen {
        takes: true,
        ..Arc::into_inner(Gen::new(vec![])).unwrap()
    });
    let mut w = Worker::new(Arc::new(Pipe), WorkerConfig::default(), Registry::default());
    w.set_ports(&[
        (1, oc_gen.clone() as Arc<dyn Port>),
        (3, out[1].clone() as Arc<dyn Port>),
        (4, vhost.clone() as Arc<dyn Port>),
    ]);
    let before = out[1].sent.load(Relaxed);
    let (n, _) = drive(&mut w, &oc_gen, &[vhost.clone(), out[1].clone()]);
    assert_eq!(w.take_tally().misses, 0);
    // All but the warm-up's misses (shown to the pipeline whole) with the tail deferred.
    let tails = vhost.tails_sent.load(Relaxed);
    assert_eq!(vhost.sent.load(Relaxed), (BURSTS + 20) * 32);
    assert!(
        tails >= (BURSTS + 19) * 32,
        "{tails} packets kept their tail"
    );
    assert_eq!(out[1].sent.load(Relaxed) - before, (BURSTS + 20) * 32);
    assert_eq!(
        out[1].tails_sent.load(Relaxed),
        0,
        "the other port got whole frames"
    );
    assert_eq!(
        Arc::strong_count(&mem),
        2,
        "no reference kept past the bursts"
    );
    assert_eq!(n, 0, "{n} allocations in {pkts} one-copy packets");
}
