//! The `ct` action in the datapath, driven through a worker directly (no threads): a stateful
//! firewall pipeline (`ct(table=1)` then allow new from port 1 and established both ways) with
//! real TCP handshakes, upcall counts on established flows (none per packet), the
//! recirculation depth limit, `ct_clear`, SNAT and its un-NAT, and a SYN flood past the
//! connection limit that leaves an existing connection working.
use conntrack::{state, Conntrack, CtAction, Nat, NatSpec};
use dp::flow::Registry;
use dp::worker::{Worker, WorkerConfig, MAX_RECIRC_DEPTH};
use dp::{Action, CtSpec, Deps, Upcall, UpcallResult};
use packet::Packet;
use ports::dummy::DummyPort;
use ports::Port;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use wire::{checksum, Field, FlowKey};

const A: u32 = 0x0a00_0001;
const B: u32 = 0x0a00_0002;

/// Ethernet + an IPv4 header (valid checksum) for `l4_len` bytes of protocol `proto`.
fn eth_ipv4(src: u32, dst: u32, proto: u8, l4_len: u16) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let total = (20 + l4_len).to_be_bytes();
    let mut ip = vec![0x45, 0, total[0], total[1], 0, 1, 0x40, 0, 64, proto, 0, 0];
    ip.extend_from_slice(&src.to_be_bytes());
    ip.extend_from_slice(&dst.to_be_bytes());
    let c = checksum::compute(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f
}

/// Ethernet + IPv4 + TCP (no options) with valid checksums.
fn tcp(src: u32, dst: u32, sport: u16, dport: u16, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    let mut f = eth_ipv4(src, dst, 6, 20);
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

/// An upcall's answer: these actions for `mask`, installed.
fn installed(actions: Vec<Action>, mask: FlowKey) -> UpcallResult {
    UpcallResult {
        actions: actions.into(),
        mask,
        install: true,
        deps: Deps::default(),
    }
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const SYNACK: u8 = 0x12;

fn ct(zone: u16, commit: bool, recirc: Option<u32>) -> Action {
    Action::Ct(Box::new(CtSpec {
        ct: CtAction {
            zone,
            commit,
            ..CtAction::default()
        },
        recirc,
        fork: false,
    }))
}

/// The conntrack tutorial's firewall as a pipeline, on datapath ports 1 (A) and 2 (B):
/// recirc_id 0: `ct(zone=1,table=1)`; recirc_id 1: `+trk+new` from 1 → `ct(commit)`, out 2;
/// `+trk+est` → out to the other port; anything else dropped. Records every key it sees.
struct Firewall {
    upcalls: AtomicU64,
    seen: Mutex<Vec<FlowKey>>,
    first: Mutex<Vec<Action>>,
}

impl Firewall {
    fn new() -> Arc<Firewall> {
        Arc::new(Firewall {
            upcalls: AtomicU64::new(0),
            seen: Mutex::new(Vec::new()),
            first: Mutex::new(vec![ct(1, false, Some(1))]),
        })
    }
}

impl Upcall for Firewall {
    fn upcall(&self, key: &FlowKey, _pkt: &Packet) -> UpcallResult {
        self.upcalls.fetch_add(1, SeqCst);
        self.seen.lock().unwrap().push(*key);
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::EthType);
        let actions = if key.get(Field::RecircId) == 0 {
            self.first.lock().unwrap().clone()
        } else {
            mask.set(
                Field::CtState,
                u64::from(state::TRK | state::NEW | state::EST),
            );
            let st = key.get(Field::CtState) as u32;
            let port = key.get(Field::InPort) as u32;
            if st & (state::TRK | state::NEW) == state::TRK | state::NEW && port == 1 {
                vec![ct(1, true, None), Action::Output(2)]
            } else if st & (state::TRK | state::EST) == state::TRK | state::EST {
                vec![Action::Output(3 - port)]
            } else {
                vec![]
            }
        };
        installed(actions, mask)
    }
}

struct Rig {
    w: Worker,
    a: Arc<DummyPort>,
    b: Arc<DummyPort>,
    ct: Arc<Conntrack>,
}

fn rig(pipe: Arc<dyn Upcall>) -> Rig {
    let cfg = WorkerConfig {
        emc_insert_inv_prob: 1,
        ..WorkerConfig::default()
    };
    let mut w = Worker::new(pipe, cfg, Registry::default());
    let (a, b) = (Arc::new(DummyPort::new()), Arc::new(DummyPort::new()));
    w.set_ports(&[
        (1, a.clone() as Arc<dyn Port>),
        (2, b.clone() as Arc<dyn Port>),
    ]);
    let ct = Arc::new(Conntrack::new());
    w.set_conntrack(ct.clone());
    Rig { w, a, b, ct }
}

impl Rig {
    /// Sends `frames` in on port `from` (one burst) and returns what came out of the other.
    fn send(&mut self, from: u32, frames: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let (inp, out) = if from == 1 {
            (&self.a, &self.b)
        } else {
            (&self.b, &self.a)
        };
        for f in frames {
            inp.inject(f).unwrap();
        }
        let port: &dyn Port = &**inp;
        while inp.pending() > 0 {
            self.w.poll(from, port, 0);
        }
        out.take_captured()
    }

    /// A three-way handshake from A:sport to B:80; returns A's and B's next sequence numbers.
    fn handshake(&mut self, sport: u16) -> (u32, u32) {
        assert_eq!(
            self.send(1, vec![tcp(A, B, sport, 80, 100, 0, SYN)]).len(),
            1
        );
        let sa = tcp(B, A, 80, sport, 500, 101, SYNACK);
        assert_eq!(
            self.send(2, vec![sa]).len(),
            1,
            "reply to a new connection passes"
        );
        let ack = tcp(A, B, sport, 80, 101, 501, ACK);
        assert_eq!(self.send(1, vec![ack]).len(), 1);
        (101, 501)
    }
}

#[test]
fn firewall_allows_new_from_a_and_established_both_ways_without_upcalls_per_packet() {
    let fw = Firewall::new();
    let mut r = rig(fw.clone());
    // B may not open a connection to A: +trk+new from port 2 is dropped.
    assert!(r.send(2, vec![tcp(B, A, 4000, 22, 1, 0, SYN)]).is_empty());
    let (mut sa, mut sb) = r.handshake(1234);
    let after_setup = fw.upcalls.load(SeqCst);
    let _ = r.w.take_tally();
    // 100 bursts of 8 data segments each way.
    for _ in 0..100 {
        let mut fa = Vec::new();
        let mut fb = Vec::new();
        for _ in 0..8 {
            fa.push(tcp(A, B, 1234, 80, sa, sb, ACK | 0x08));
            fb.push(tcp(B, A, 80, 1234, sb, sa, ACK));
        }
        // No payload: the sequence numbers stay; the segments are window-valid.
        assert_eq!(r.send(1, fa).len(), 8);
        assert_eq!(r.send(2, fb).len(), 8);
        sa = sa.wrapping_add(0);
        sb = sb.wrapping_add(0);
    }
    let t = r.w.take_tally();
    assert_eq!(t.packets, 1600);
    assert_eq!(t.recirculations, 1600, "every packet went round once");
    assert_eq!(t.recirc_drops, 0);
    assert_eq!(
        fw.upcalls.load(SeqCst),
        after_setup,
        "established traffic never upcalls"
    );
    assert!(after_setup <= 8, "upcalls for the set-up: {after_setup}");
    assert!(t.emc_hits >= 3000, "both passes hit the EMC: {t:?}");
    // The recirculated keys the pipeline saw carry the conntrack fields.
    let seen = fw.seen.lock().unwrap();
    let rec: Vec<_> = seen
        .iter()
        .filter(|k| k.get(Field::RecircId) == 1)
        .collect();
    assert!(rec.iter().all(|k| k.get(Field::CtZone) == 1));
    assert!(rec
        .iter()
        .all(|k| k.get(Field::CtState) as u32 & state::TRK != 0));
    let est_rpl = rec
        .iter()
        .find(|k| k.get(Field::InPort) == 2 && k.get(Field::CtState) as u32 & state::EST != 0);
    let k = est_rpl.expect("B's established reply was translated");
    assert!(k.get(Field::CtState) as u32 & state::RPL != 0);
    assert_eq!(k.get(Field::CtNwSrc), u64::from(A), "original tuple: A → B");
    assert_eq!(k.get(Field::CtNwDst), u64::from(B));
    assert_eq!((k.get(Field::CtTpSrc), k.get(Field::CtTpDst)), (1234, 80));
    assert_eq!(k.get(Field::CtNwProto), 6);
    drop(seen);
    assert_eq!(r.ct.len(), 1, "one connection committed");
    // A new connection from B is still refused while A's works.
    assert!(r.send(2, vec![tcp(B, A, 4001, 22, 1, 0, SYN)]).is_empty());
}

/// Recirculates every packet again, whatever its state.
struct Loop;
impl Upcall for Loop {
    fn upcall(&self, key: &FlowKey, _pkt: &Packet) -> UpcallResult {
        let id = key.get(Field::RecircId) as u32 + 1;
        installed(vec![ct(0, false, Some(id))], FlowKey::ZERO)
    }
}

#[test]
fn a_packet_recirculating_past_the_depth_limit_is_dropped_and_counted() {
    let mut r = rig(Arc::new(Loop));
    let out = r.send(
        1,
        vec![tcp(A, B, 1, 80, 1, 0, SYN), tcp(A, B, 2, 80, 1, 0, SYN)],
    );
    assert!(out.is_empty());
    let t = r.w.take_tally();
    assert_eq!(t.recirc_drops, 2);
    assert_eq!(t.recirculations, 2 * MAX_RECIRC_DEPTH as u64);
    // The worker still forwards afterwards (nothing left in its recirculation batch).
    assert_eq!(r.w.pool().stats().allocated, r.w.pool().free_count() as u64);
}

/// recirc 0: ct(table=1); recirc 1: ct_clear then recirculate to 2; recirc 2: out 2 if the
/// conntrack fields are clear.
struct Clear;
impl Upcall for Clear {
    fn upcall(&self, key: &FlowKey, _pkt: &Packet) -> UpcallResult {
        let actions = match key.get(Field::RecircId) {
            0 => vec![ct(7, false, Some(1))],
            1 => {
                assert_ne!(key.get(Field::CtState), 0);
                assert_eq!(key.get(Field::CtZone), 7);
                vec![Action::CtClear, ct(7, false, Some(2))]
            }
            _ => vec![Action::Output(2)],
        };
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::CtZone);
        installed(actions, mask)
    }
}

#[test]
fn ct_clear_zeroes_the_fields_and_a_later_ct_sets_them_again() {
    let mut r = rig(Arc::new(Clear));
    assert_eq!(r.send(1, vec![tcp(A, B, 9, 80, 1, 0, SYN)]).len(), 1);
    assert_eq!(r.w.take_tally().recirculations, 2);
}

/// SNAT A to 10.0.0.100 on commit; replies get `ct(nat)` (un-NAT) and go back.
struct Snat;
impl Upcall for Snat {
    fn upcall(&self, key: &FlowKey, _pkt: &Packet) -> UpcallResult {
        let port = key.get(Field::InPort) as u32;
        let nat = if port == 1 {
            Nat::Set(NatSpec::parse("src=10.0.0.100").unwrap())
        } else {
            Nat::Existing
        };
        let a = Action::Ct(Box::new(CtSpec {
            ct: CtAction {
                zone: 3,
                commit: port == 1,
                nat,
                ..CtAction::default()
            },
            recirc: None,
            fork: false,
        }));
        installed(vec![a, Action::Output(3 - port)], FlowKey::ZERO)
    }
}

#[test]
fn snat_rewrites_the_source_and_replies_are_translated_back() {
    let mut r = rig(Arc::new(Snat));
    let out = r.send(1, vec![tcp(A, B, 5555, 80, 100, 0, SYN)]);
    assert_eq!(out.len(), 1);
    let k = wire::extract(&out[0], 0);
    assert_eq!(k.get(Field::Ipv4Src), 0x0a00_0064, "source translated");
    let port = k.get(Field::TpSrc) as u16;
    let back = r.send(2, vec![tcp(B, 0x0a00_0064, 80, port, 500, 101, SYNACK)]);
    assert_eq!(back.len(), 1);
    let k = wire::extract(&back[0], 0);
    assert_eq!(k.get(Field::Ipv4Dst), u64::from(A), "reply un-NATed");
    assert_eq!(k.get(Field::TpDst), 5555);
    // Checksums still verify after both rewrites.
    let ip = wire::ipv4::Ipv4Packet::new_checked(&back[0][14..]).unwrap();
    assert!(ip.verify_checksum());
    let ps = checksum::pseudo_v4(ip.src(), ip.dst(), 6, ip.payload().len() as u16);
    assert_eq!(checksum::fold(checksum::sum(ip.payload(), ps)), 0xffff);
}

#[test]
fn a_syn_flood_past_the_limit_is_refused_and_the_existing_connection_keeps_working() {
    let fw = Firewall::new();
    let mut r = rig(fw.clone());
    r.ct.set_limit(50);
    let (sa, sb) = r.handshake(1000);
    // 1,000 SYNs from distinct ports: 49 fit under the limit, the rest are refused.
    let mut passed = 0;
    for chunk in (0..1000u16).collect::<Vec<_>>().chunks(32) {
        let frames = chunk
            .iter()
            .map(|p| tcp(A, B, 20_000 + p, 80, 7, 0, SYN))
            .collect();
        passed += r.send(1, frames).len();
    }
    assert_eq!(r.ct.len(), 50, "the table stops at its limit");
    assert_eq!(
        passed, 1000,
        "new connections are forwarded but not committed past it"
    );
    let st = r.ct.stats();
    assert!(st.limit_global_hits >= 950, "refusals counted: {st:?}");
    // The established connection is untouched: data both ways still passes.
    assert_eq!(r.send(1, vec![tcp(A, B, 1000, 80, sa, sb, ACK)]).len(), 1);
    assert_eq!(r.send(2, vec![tcp(B, A, 80, 1000, sb, sa, ACK)]).len(), 1);
}

/// An IPv4 fragment of a UDP datagram A:7 → B:9 with id 0x4242: `l4` bytes at `off` (bytes,
/// a multiple of 8), more fragments follow if `more`.
fn frag(l4: &[u8], off: u16, more: bool) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let total = 20 + l4.len() as u16;
    let fo = (off / 8) | if more { 0x2000 } else { 0 };
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0x42, 0x42]);
    ip.extend_from_slice(&fo.to_be_bytes());
    ip.extend_from_slice(&[64, 17, 0, 0]);
    ip.extend_from_slice(&A.to_be_bytes());
    ip.extend_from_slice(&B.to_be_bytes());
    let c = checksum::compute(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(l4);
    f
}

/// The UDP datagram (8-byte header + 16 bytes of payload) split in two fragments.
fn fragments() -> (Vec<u8>, Vec<u8>) {
    let payload = [0xabu8; 16];
    let mut udp = vec![0, 7, 0, 9, 0, 24, 0, 0];
    udp.extend_from_slice(&payload);
    let ps = checksum::pseudo_v4(A, B, 17, 24);
    let c = !checksum::fold(checksum::sum(&udp, ps));
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    (frag(&udp[..16], 0, true), frag(&udp[16..], 16, false))
}

/// `ct(commit,zone=2)` then out on the other port, with or without `table=1` (after which
/// `+trk` packets go out).
struct FragPipe {
    recirc: bool,
}
impl Upcall for FragPipe {
    fn upcall(&self, key: &FlowKey, _pkt: &Packet) -> UpcallResult {
        let port = key.get(Field::InPort) as u32;
        let actions = if self.recirc && key.get(Field::RecircId) == 0 {
            vec![Action::Ct(Box::new(CtSpec {
                ct: CtAction {
                    zone: 2,
                    commit: true,
                    ..CtAction::default()
                },
                recirc: Some(1),
                fork: false,
            }))]
        } else if self.recirc {
            assert_ne!(key.get(Field::CtState) as u32 & state::TRK, 0);
            vec![Action::Output(3 - port)]
        } else {
            vec![ct(2, true, None), Action::Output(3 - port)]
        };
        let mut mask = FlowKey::ZERO;
        mask.set_exact(Field::IpFrag);
        installed(actions, mask)
    }
}

#[test]
fn fragments_are_held_then_forwarded_as_they_came_with_the_verdict() {
    for recirc in [false, true] {
        let mut r = rig(Arc::new(FragPipe { recirc }));
        let (f1, f2) = fragments();
        assert!(
            r.send(1, vec![f1.clone()]).is_empty(),
            "the first fragment is held"
        );
        let out = r.send(1, vec![f2.clone()]);
        assert_eq!(out.len(), 2, "recirc={recirc}: both fragments forwarded");
        assert!(
            out.contains(&f1) && out.contains(&f2),
            "unchanged, as they came"
        );
        assert_eq!(r.ct.len(), 1, "the datagram was tracked and committed");
        assert_eq!(r.w.pool().stats().allocated, r.w.pool().free_count() as u64);
    }
}

/// Ethernet + IPv6 + TCP SYN fd00::1 → fd00::2, with a valid checksum.
fn tcp6_syn(sport: u16, dport: u16) -> Vec<u8> {
    let (s, d) = (
        0xfd00_0000_0000_0000_0000_0000_0000_0001u128.to_be_bytes(),
        0xfd00_0000_0000_0000_0000_0000_0000_0002u128.to_be_bytes(),
    );
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0, 0, 20, 6, 64]);
    f.extend_from_slice(&s);
    f.extend_from_slice(&d);
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, SYN, 0xff, 0xff, 0, 0, 0, 0]);
    let c = !checksum::fold(checksum::sum(&t, checksum::pseudo_v6(&s, &d, 6, 20)));
    t[16..18].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&t);
    f
}

#[test]
fn ipv6_connections_fill_the_ct_ipv6_fields_of_the_recirculated_key() {
    let fw = Firewall::new();
    let mut r = rig(fw.clone());
    assert_eq!(
        r.send(1, vec![tcp6_syn(4321, 443)]).len(),
        1,
        "new from A passes"
    );
    let seen = fw.seen.lock().unwrap();
    let k = seen
        .iter()
        .find(|k| k.get(Field::RecircId) == 1)
        .expect("the recirculated key was translated");
    assert_eq!(k.get(Field::CtState) as u32, state::TRK | state::NEW);
    assert_eq!(k.get(Field::CtIpv6SrcHi), 0xfd00_0000_0000_0000);
    assert_eq!(k.get(Field::CtIpv6SrcLo), 1);
    assert_eq!(k.get(Field::CtIpv6DstLo), 2);
    assert_eq!((k.get(Field::CtTpSrc), k.get(Field::CtTpDst)), (4321, 443));
    assert_eq!(k.get(Field::CtNwProto), 6);
    drop(seen);
    assert_eq!(r.ct.len(), 1);
}

/// Ethernet + IPv4 + ICMP echo (request or reply) with id 0x4242, valid checksums.
fn echo(src: u32, dst: u32, request: bool) -> Vec<u8> {
    let mut f = eth_ipv4(src, dst, 1, 8);
    let mut m = vec![if request { 8 } else { 0 }, 0, 0, 0, 0x42, 0x42, 0, 1];
    let c = checksum::compute(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&m);
    f
}

/// An ICMP connection's `ct_tp_src`/`ct_tp_dst` are the type and code of the request that
/// opened it (8, 0), in both directions, as OVS's datapaths set them, not the echo id.
#[test]
fn icmp_connections_carry_the_request_type_and_code_in_ct_tp() {
    let fw = Firewall::new();
    let mut r = rig(fw.clone());
    assert_eq!(r.send(1, vec![echo(A, B, true)]).len(), 1, "new from A");
    assert_eq!(r.send(2, vec![echo(B, A, false)]).len(), 1, "its reply");
    let seen = fw.seen.lock().unwrap();
    let rec: Vec<_> = seen
        .iter()
        .filter(|k| k.get(Field::RecircId) == 1)
        .collect();
    assert_eq!(rec.len(), 2, "both directions translated after ct");
    for k in rec {
        assert_eq!(k.get(Field::CtNwProto), 1);
        assert_eq!(
            (k.get(Field::CtTpSrc), k.get(Field::CtTpDst)),
            (8, 0),
            "state {:#x}",
            k.get(Field::CtState)
        );
        assert_eq!(k.get(Field::CtNwSrc), u64::from(A));
    }
}

/// recirc 0: `ct(commit,table=1)` (zone 4); recirc 1: set the source port to 7777, then
/// `ct(commit)` in the same zone, output. The second pass sees another packet (another tuple)
/// than the first: the hint the first pass left must not be used.
struct RewriteBetweenPasses;
impl Upcall for RewriteBetweenPasses {
    fn upcall(&self, key: &FlowKey, _pkt: &Packet) -> UpcallResult {
        let commit = |recirc| {
            Action::Ct(Box::new(CtSpec {
                ct: CtAction {
                    zone: 4,
                    commit: true,
                    ..CtAction::default()
                },
                recirc,
                fork: false,
            }))
        };
        let actions = if key.get(Field::RecircId) == 0 {
            vec![commit(Some(1))]
        } else {
            vec![Action::SetTpSrc(7777), commit(None), Action::Output(2)]
        };
        installed(actions, FlowKey::ZERO)
    }
}

#[test]
fn a_rewrite_between_two_ct_passes_makes_the_second_pass_look_up_the_new_tuple() {
    let mut r = rig(Arc::new(RewriteBetweenPasses));
    let out = r.send(1, vec![tcp(A, B, 4000, 80, 100, 0, SYN)]);
    assert_eq!(out.len(), 1);
    assert_eq!(wire::extract(&out[0], 0).get(Field::TpSrc), 7777);
    // Two connections: the original tuple (first pass) and the rewritten one (second pass).
    let d = r.ct.dump(Some(4), conntrack::clock_ms());
    let sports: Vec<u16> = d.iter().map(|c| c.orig.sport).collect();
    assert_eq!(sports, vec![4000, 7777], "{d:?}");
    // Same again with the connections in place: both passes find their own connection.
    let out = r.send(1, vec![tcp(A, B, 4000, 80, 100, 0, SYN)]);
    assert_eq!(out.len(), 1);
    assert_eq!(r.ct.stats().created, 2);
}

/// The conntrack tutorial's firewall at a burst of 32 established packets over 8 connections:
/// each packet's two `ct` passes agree with a tracker driven directly (the second pass reuses
/// the first's hint), and no connection is created twice.
#[test]
fn a_burst_of_established_packets_through_two_passes_creates_nothing_new() {
    let fw = Firewall::new();
    let mut r = rig(fw.clone());
    for sp in 0..8u16 {
        r.handshake(30_000 + sp);
    }
    let created = r.ct.stats().created;
    let burst: Vec<Vec<u8>> = (0..32u16)
        .map(|i| tcp(A, B, 30_000 + i % 8, 80, 101, 501, ACK))
        .collect();
    assert_eq!(r.send(1, burst).len(), 32);
    let back: Vec<Vec<u8>> = (0..32u16)
        .map(|i| tcp(B, A, 80, 30_000 + i % 8, 501, 101, ACK))
        .collect();
    assert_eq!(r.send(2, back).len(), 32);
    assert_eq!(r.ct.stats().created, created);
    assert_eq!(r.ct.len(), 8);
}

/// recirc 0: `ct(commit,table=1)` then a NAT-free rewrite of the source port and output 2 (a
/// fork); recirc 1: output 2 with the source port as conntrack left it. Records the ct state
/// of every key the pipeline sees.
struct ForkPipe {
    seen: Mutex<Vec<(u64, u64)>>,
}
impl Upcall for ForkPipe {
    fn upcall(&self, key: &FlowKey, _pkt: &Packet) -> UpcallResult {
        let recirc = key.get(Field::RecircId);
        self.seen
            .lock()
            .unwrap()
            .push((recirc, key.get(Field::CtState)));
        let actions = if recirc == 0 {
            vec![
                Action::Ct(Box::new(CtSpec {
                    ct: CtAction {
                        commit: true,
                        ..CtAction::default()
                    },
                    recirc: Some(1),
                    fork: true,
                })),
                Action::SetTpSrc(5555),
                Action::Output(2),
            ]
        } else {
            vec![Action::Output(2)]
        };
        installed(actions, FlowKey::ZERO)
    }
}

/// A forking `ct(table=N)`: the packet itself goes on (rewritten, out port 2) and a copy goes
/// through conntrack and recirculates (out port 2 as it came); one connection, of the
/// original tuple.
#[test]
fn a_forking_ct_sends_a_copy_round_and_the_packet_on() {
    let pipe = Arc::new(ForkPipe {
        seen: Mutex::new(Vec::new()),
    });
    let mut r = rig(pipe.clone());
    let out = r.send(1, vec![tcp(A, B, 4000, 80, 100, 0, SYN)]);
    let mut sports: Vec<u64> = out
        .iter()
        .map(|f| wire::extract(f, 0).get(Field::TpSrc))
        .collect();
    sports.sort_unstable();
    assert_eq!(
        sports,
        vec![4000, 5555],
        "the copy as it came, the packet rewritten"
    );
    let d = r.ct.dump(None, conntrack::clock_ms());
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].orig.sport, 4000, "the copy's tuple was tracked");
    let seen = pipe.seen.lock().unwrap();
    assert!(
        seen.iter()
            .any(|&(id, st)| id == 1 && st as u32 == state::TRK | state::NEW),
        "the copy resumed tracked: {seen:?}"
    );
    let t = r.w.take_tally();
    assert_eq!(t.recirculations, 1);
    assert_eq!(t.recirc_drops, 0);
    drop(seen);
    // No buffer leaked by the copy.
    assert_eq!(r.w.pool().stats().allocated, r.w.pool().free_count() as u64);
}
