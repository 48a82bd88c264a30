//! The cost of connection tracking on the fast path: a worker forwarding bursts of 32
//! established TCP segments (ACKs, window-valid when repeated) through the conntrack
//! tutorial's pipeline (`ct(table=1)`, then `+trk+est` → output: two classifications and one
//! conntrack lookup per packet), at 1 and 1,000 connections, against the same traffic with a
//! plain `output` (no ct). Port I/O is a loop port (copies only), as in `caches.rs`.
use conntrack::{state, Conntrack, CtAction, Outcome};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dp::flow::Registry;
use dp::worker::{Worker, WorkerConfig};
use dp::{Action, CtSpec, Upcall, UpcallResult};
use packet::{Batch, Packet, Pool};
use ports::{Link, Port, PortStats};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use wire::{checksum, Field, FlowKey};

const A: u32 = 0x0a00_0001;
const B: u32 = 0x0a00_0002;

fn tcp(src: u32, dst: u32, sport: u16, dport: u16, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let mut ip = vec![0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0];
    ip.extend_from_slice(&src.to_be_bytes());
    ip.extend_from_slice(&dst.to_be_bytes());
    let c = checksum::compute(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    let ps = checksum::pseudo_v4(src, dst, 6, 20);
    let c = !checksum::fold(checksum::sum(&t, ps));
    t[16..18].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&t);
    f
}

/// Receives full bursts of its frames in turn; "sends" by dropping.
struct LoopPort {
    frames: Vec<Vec<u8>>,
    next: AtomicUsize,
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
            let i = self.next.fetch_add(1, Relaxed) % self.frames.len();
            let mut p = pool.get();
            p.set_frame(&self.frames[i]);
            let _ = out.push(p);
            n += 1;
        }
        n
    }
    fn tx_burst(&self, _q: usize, pkts: &mut Batch) -> usize {
        pkts.len()
    }
    fn link(&self) -> Link {
        Link::Up
    }
    fn stats(&self) -> PortStats {
        PortStats::default()
    }
}

/// `ct(table=1)`, then `+trk+est` → output:2 (else drop); or plain output:2 when `ct` is off.
struct Pipe {
    ct: bool,
}

impl Upcall for Pipe {
    fn upcall(&self, key: &FlowKey, _: &Packet) -> UpcallResult {
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::EthType);
        let actions = if !self.ct {
            vec![Action::Output(2)]
        } else if key.get(Field::RecircId) == 0 {
            vec![Action::Ct(Box::new(CtSpec {
                ct: CtAction::default(),
                recirc: Some(1),
                fork: false,
            }))]
        } else {
            mask.set(Field::CtState, u64::from(state::TRK | state::EST));
            if key.get(Field::CtState) as u32 & state::EST != 0 {
                vec![Action::Output(2)]
            } else {
                vec![]
            }
        };
        UpcallResult {
            actions: actions.into(),
            mask,
            install: true,
            deps: Default::default(),
        }
    }
}

/// `n` established connections A:(20000+i) → B:80 in `ct`, and their data segments.
fn established(ct: &Conntrack, n: u16) -> Vec<Vec<u8>> {
    let commit = CtAction {
        commit: true,
        ..CtAction::default()
    };
    let mut data = Vec::new();
    for i in 0..n {
        let sp = 20_000 + i;
        let run = |mut f: Vec<u8>, a: &CtAction| match ct.execute(&mut f, a, 1_000) {
            Outcome::Done(r) => r.state,
            _ => unreachable!(),
        };
        run(tcp(A, B, sp, 80, 100, 0, 0x02), &commit);
        run(tcp(B, A, 80, sp, 500, 101, 0x12), &CtAction::default());
        let st = run(tcp(A, B, sp, 80, 101, 501, 0x10), &CtAction::default());
        assert!(st & state::EST != 0);
        data.push(tcp(A, B, sp, 80, 101, 501, 0x10));
    }
    data
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("ct_firewall_burst32");
    g.throughput(Throughput::Elements(32));
    for (name, use_ct, conns) in [
        ("no_ct", false, 1000u16),
        ("ct", true, 1),
        ("ct", true, 1000),
    ] {
        let ct = Arc::new(Conntrack::new());
        let frames = established(&ct, conns);
        let port = Arc::new(LoopPort {
            frames,
            next: AtomicUsize::new(0),
        });
        let cfg = WorkerConfig {
            emc_insert_inv_prob: 1,
            ..WorkerConfig::default()
        };
        let mut w = Worker::new(Arc::new(Pipe { ct: use_ct }), cfg, Registry::default());
        w.set_ports(&[(2, port.clone() as Arc<dyn Port>)]);
        w.set_conntrack(ct.clone());
        for _ in 0..(usize::from(conns) / 32 + 2) {
            w.poll(1, &*port, 0);
        }
        let _ = w.take_tally();
        g.bench_with_input(BenchmarkId::new(name, conns), &conns, |b, _| {
            b.iter(|| w.poll(1, &*port, 0))
        });
        let t = w.take_tally();
        assert_eq!(t.misses, 0, "no upcall once warm: {t:?}");
    }
    g.finish();
    eprintln!("TSC rate: {:.3} GHz", dp::cycles::hz() as f64 / 1e9);
}

criterion_group!(benches, bench);
criterion_main!(benches);
