//! One copy for large frames in the datapath: a packet whose tail is still in the sender's
//! memory reaches a port that copies tails itself (vhost-user) with the tail deferred, and
//! every other consumer (another port kind, a second output, the pipeline on a miss, a
//! `userspace` action, any rewrite) with the whole frame. No tail outlives the burst.
mod common;

use common::*;
use dp::flow::Registry;
use dp::worker::{Worker, WorkerConfig};
use dp::{Action, Upcall, UpcallResult};
use guestmem::GuestMemory;
use packet::{Batch, Packet, Pool, Tail};
use ports::{Link, Port, PortStats};
use std::sync::{Arc, Mutex};
use wire::{Field, FlowKey};

const HEAD: usize = 192;

/// The frame the source "guest" sends: a UDP frame padded to 1518 bytes with a pattern.
fn big_frame() -> Vec<u8> {
    let mut f = udp_frame(0x0a00_0002, 7);
    let n = f.len();
    f.extend((n..1518).map(|i| (i * 7 + 3) as u8));
    f
}

/// Receives bursts of [`big_frame`] with only the head in the buffer and the tail in `mem`;
/// on tx, records each packet's whole frame (resolving a tail from its memory, as a vhost-user
/// enqueue does) and whether it came with a tail.
struct TailPort {
    mem: Arc<GuestMemory>,
    frame: Vec<u8>,
    takes: bool,
    got: Mutex<Vec<(bool, Vec<u8>)>>,
}

impl TailPort {
    fn new(takes: bool) -> Arc<TailPort> {
        let mem = Arc::new(GuestMemory::anonymous(&[(0x1000, 8192)]).unwrap());
        let frame = big_frame();
        mem.write(0x1000, &frame[HEAD..]).unwrap();
        Arc::new(TailPort {
            mem,
            frame,
            takes,
            got: Mutex::new(Vec::new()),
        })
    }
}

impl Port for TailPort {
    fn kind(&self) -> &'static str {
        "tail-test"
    }
    fn n_rxq(&self) -> usize {
        1
    }
    fn rx_burst(&self, _q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        for _ in 0..4 {
            let mut p = pool.get();
            p.set_frame(&self.frame[..HEAD]);
            assert!(p.set_tail(Tail {
                gpa: 0x1000,
                len: (self.frame.len() - HEAD) as u32,
            }));
            let _ = out.push(p);
        }
        // As a vhost-user dequeue: the batch holds the table once for the burst.
        assert!(out.tails_fit(&self.mem));
        out.hold_tails(&self.mem);
        4
    }
    fn tx_burst(&self, _q: usize, pkts: &mut Batch) -> usize {
        let mut g = self.got.lock().unwrap();
        for p in pkts.as_slice() {
            let mut f = p.data().to_vec();
            if let Some(t) = p.tail() {
                // Resolved against the table the batch was lent for this call.
                let mem = pkts.tails().expect("a batch with tails holds their table");
                let mut rest = vec![0u8; t.len as usize];
                mem.read(t.gpa, &mut rest).unwrap();
                f.extend_from_slice(&rest);
            }
            g.push((p.has_tail(), f));
        }
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

/// A pipeline answering `actions` that records the length of every frame it is shown.
struct Seen {
    actions: Vec<Action>,
    lens: Mutex<Vec<usize>>,
}

impl Upcall for Seen {
    fn upcall(&self, _key: &FlowKey, pkt: &Packet) -> UpcallResult {
        self.lens.lock().unwrap().push(pkt.data().len());
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::EthType);
        UpcallResult {
            actions: self.actions.clone().into(),
            mask,
            install: true,
            deps: dp::flow::Deps::new(0, vec![]),
        }
    }
    fn userspace(&self, _cookie: u64, _key: &FlowKey, pkt: &Packet) {
        self.lens.lock().unwrap().push(pkt.data().len());
    }
}

/// Runs two bursts from a source port (no. 1) with `actions`; ports 2 (takes tails) and 3
/// (does not). Returns what each received and what the pipeline saw; checks that the worker
/// keeps no memory table past the bursts.
type Got = Vec<(bool, Vec<u8>)>;
fn run(actions: Vec<Action>) -> (Got, Got, Vec<usize>) {
    let src = TailPort::new(false);
    let vh = TailPort::new(true);
    let other = TailPort::new(false);
    let pipe = Arc::new(Seen {
        actions,
        lens: Mutex::new(Vec::new()),
    });
    let mut w = Worker::new(pipe.clone(), WorkerConfig::default(), Registry::default());
    w.set_ports(&[
        (1, src.clone() as Arc<dyn Port>),
        (2, vh.clone() as Arc<dyn Port>),
        (3, other.clone() as Arc<dyn Port>),
    ]);
    w.poll(1, &*src, 0);
    w.poll(1, &*src, 0);
    // The worker let the burst's table go at the flush (only the port holds it).
    assert_eq!(
        Arc::strong_count(&src.mem),
        1,
        "no table kept past the burst"
    );
    let a = std::mem::take(&mut *vh.got.lock().unwrap());
    let b = std::mem::take(&mut *other.got.lock().unwrap());
    let lens = pipe.lens.lock().unwrap().clone();
    (a, b, lens)
}

#[test]
fn a_vhost_output_keeps_the_tail_and_any_other_port_gets_the_whole_frame() {
    let want = big_frame();
    // Output to the tail-taking port only: the tail stays deferred; bit-exact once resolved.
    // (The packet that missed was shown to the pipeline whole, so it went out whole.)
    let (a, b, lens) = run(vec![Action::Output(2)]);
    assert_eq!(a.len(), 8);
    assert!(a.iter().all(|(_, f)| *f == want));
    assert_eq!(a.iter().filter(|(tail, _)| *tail).count(), 7);
    assert!(!a[0].0);
    assert!(b.is_empty());
    // The miss showed the pipeline the whole frame (once: the flow was installed).
    assert_eq!(lens, vec![1518]);

    // Output to a port that does not take tails: whole frames.
    let (a, b, _) = run(vec![Action::Output(3)]);
    assert!(a.is_empty());
    assert_eq!(b.len(), 8);
    assert!(b.iter().all(|(tail, f)| !*tail && *f == want));

    // Both: the vhost output copies from the source, the other materialises its own copy.
    let (a, b, _) = run(vec![Action::Output(3), Action::Output(2)]);
    assert_eq!((a.len(), b.len()), (8, 8));
    assert!(a.iter().all(|(_, f)| *f == want));
    assert_eq!(a.iter().filter(|(tail, _)| *tail).count(), 7);
    assert!(b.iter().all(|(tail, f)| !*tail && *f == want));
}

#[test]
fn any_other_action_sees_the_whole_frame_first() {
    let want = big_frame();
    // `userspace` (a controller's packet-in) then output: the slow path saw 1518 bytes, and
    // the output got the frame already whole.
    let (a, _, lens) = run(vec![Action::Userspace(7), Action::Output(2)]);
    assert_eq!(lens, vec![1518; 9], "one miss, then eight packet-ins");
    assert!(a.iter().all(|(tail, f)| !*tail && *f == want));
    // A rewrite: materialised, then rewritten, then sent whole.
    let (a, _, _) = run(vec![Action::SetIpv4Dst(0x0a00_0009), Action::Output(2)]);
    assert_eq!(a.len(), 8);
    for (tail, f) in &a {
        assert!(!*tail);
        assert_eq!(f.len(), 1518);
        assert_eq!(&f[30..34], &[10, 0, 0, 9]);
        assert_eq!(&f[HEAD..], &want[HEAD..], "the payload came along");
    }
}
