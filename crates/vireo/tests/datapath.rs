//! Golden datapath tests through a real vireod with dummy ports, packet by packet: a frame is
//! injected on one port (`vireoctl inject`) and what every port was sent is read back
//! (`vireoctl capture`). NORMAL (learning, flooding, VLANs), every OpenFlow match field class and
//! action, goto_table and priorities, megaflow masks, revalidation without delay, PMD and port
//! statistics, and a live PMD core change.
//!
//! Capture is asynchronous, so every exchange ends with marker frames (ethertype 0x88b5, sent to
//! ALL ports by a top-priority flow) that follow the frame under test through the same rx queue:
//! what a port got before the marker is exactly what the frame produced there, so "nothing
//! arrived" is checked without sleeping.
mod common;
mod frames;

use common::Daemon;
use frames::*;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The daemons' PMDs all busy-poll core 0: one test at a time keeps timings sane.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const MARK_TYPE: u16 = 0x88b5;
const MARK_SRC: Mac = [2, 0, 0, 0, 0xff, 0xff];
const MARK_FLOW: &str = "priority=65535,dl_type=0x88b5,actions=all";
const BR: &str = "br0";

/// Frames each port was sent, by port name.
type Got = BTreeMap<String, Vec<Vec<u8>>>;

fn dump(got: &Got) -> String {
    got.iter()
        .map(|(p, fs)| format!("{p}: {:?}", fs.iter().map(|f| hex(f)).collect::<Vec<_>>()))
        .collect::<Vec<_>>()
        .join("; ")
}

fn marker(seq: u32) -> Vec<u8> {
    eth(BCAST, MARK_SRC, MARK_TYPE, &seq.to_be_bytes())
}

fn marker_seq(f: &[u8]) -> Option<u32> {
    (f.len() >= 18 && f[6..12] == MARK_SRC && f[12..14] == MARK_TYPE.to_be_bytes())
        .then(|| u32::from_be_bytes([f[14], f[15], f[16], f[17]]))
}

/// A vireod with bridge br0 and dummy ports.
struct Sw {
    d: Daemon,
    _dir: tempfile::TempDir,
    ports: Vec<String>,
    buf: RefCell<Got>,
    seq: Cell<u32>,
    /// Frames injected on each port so far.
    injected: RefCell<BTreeMap<String, u64>>,
}

impl Sw {
    /// `ports`: name and extra `add-port` options.
    fn new(ports: &[(&str, &[&str])]) -> Sw {
        let dir = tempfile::tempdir().unwrap();
        let d = Daemon::start_with(&dir.path().join("run"), &["--pmd-cores", "0"]);
        d.ok(&["add-br", BR, "internal=false"]);
        for (p, opts) in ports {
            let mut a = vec!["add-port", BR, p, "type=dummy"];
            a.extend_from_slice(opts);
            d.ok(&a);
        }
        d.ok(&["add-flow", BR, MARK_FLOW]);
        Sw {
            d,
            _dir: dir,
            ports: ports.iter().map(|(p, _)| p.to_string()).collect(),
            buf: RefCell::new(BTreeMap::new()),
            seq: Cell::new(0),
            injected: RefCell::new(BTreeMap::new()),
        }
    }

    fn simple(n: usize) -> Sw {
        let names: Vec<String> = (1..=n).map(|i| format!("p{i}")).collect();
        let spec: Vec<(&str, &[&str])> = names.iter().map(|n| (n.as_str(), &[][..])).collect();
        Sw::new(&spec)
    }

    fn ok(&self, args: &[&str]) -> String {
        self.d.ok(args)
    }

    fn inject(&self, port: &str, f: &[u8]) {
        self.ok(&["inject", port, &hex(f)]);
        *self
            .injected
            .borrow_mut()
            .entry(port.to_string())
            .or_default() += 1;
    }

    /// Waits until the PMD has taken every frame injected on `port` off its rx queue, so the
    /// next one is in a later burst. (Within one burst, packets of different flows may leave
    /// in a different order, as in OVS; the markers must not overtake the frames under test.)
    fn drained(&self, port: &str) {
        let want = self.injected.borrow().get(port).copied().unwrap_or(0);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let rx = self.d.json(&["port-stats", port])[0]["rx_packets"]
                .as_u64()
                .unwrap();
            if rx >= want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{port}: rx {rx} of {want} injected"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Removes every flow and puts the marker flow back, plus `flows` (one per line).
    fn flows(&self, flows: &[&str]) {
        self.ok(&["del-flows", BR]);
        self.ok(&["add-flow", BR, MARK_FLOW]);
        for f in flows {
            self.ok(&["add-flow", BR, f]);
        }
    }

    /// Waits for marker `seq` on `port`; returns the non-marker frames before it.
    fn until_marker(&self, port: &str, seq: u32) -> Vec<Vec<u8>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            {
                let mut buf = self.buf.borrow_mut();
                let q = buf.entry(port.to_string()).or_default();
                if let Some(i) = q.iter().position(|f| marker_seq(f) == Some(seq)) {
                    let before: Vec<Vec<u8>> = q.drain(..=i).collect();
                    return before
                        .into_iter()
                        .filter(|f| marker_seq(f).is_none())
                        .collect();
                }
            }
            assert!(
                Instant::now() < deadline,
                "marker {seq} never reached {port}; it got {:?}",
                self.buf
                    .borrow()
                    .get(port)
                    .map(|q| q.iter().map(|f| hex(f)).collect::<Vec<_>>())
            );
            let v = self.d.json(&["capture", port]);
            let fresh: Vec<Vec<u8>> = v
                .as_array()
                .unwrap()
                .iter()
                .map(|h| unhex(h.as_str().unwrap()))
                .collect();
            if fresh.is_empty() {
                std::thread::sleep(Duration::from_millis(2));
            }
            self.buf
                .borrow_mut()
                .entry(port.to_string())
                .or_default()
                .extend(fresh);
        }
    }

    fn next_seq(&self) -> u32 {
        self.seq.set(self.seq.get() + 1);
        self.seq.get()
    }

    /// Everything that frames injected on `from` so far produced on every port.
    fn flush(&self, from: &str) -> Got {
        let mut got = Got::new();
        let s1 = self.next_seq();
        self.drained(from);
        self.inject(from, &marker(s1));
        for p in self.ports.iter().filter(|p| *p != from) {
            got.insert(p.clone(), self.until_marker(p, s1));
        }
        // A second marker from another port shows what reached `from` itself.
        let other = self.ports.iter().find(|p| *p != from).unwrap();
        let s2 = self.next_seq();
        self.inject(other, &marker(s2));
        got.insert(from.to_string(), self.until_marker(from, s2));
        got
    }

    /// Injects `f` on `from` and returns what each port was sent because of it.
    fn send(&self, from: &str, f: &[u8]) -> Got {
        self.inject(from, f);
        self.flush(from)
    }

    /// Sends `f` (for a MAC learned just now) until it goes to `to` only: learning takes effect
    /// within the housekeeping tick (50 ms), then stays.
    #[track_caller]
    fn learned(&self, from: &str, f: &[u8], to: &str) {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let got = self.send(from, f);
            if got.iter().all(|(p, fs)| (p == to) != fs.is_empty()) {
                break;
            }
            assert!(Instant::now() < deadline, "never learned: {}", dump(&got));
            std::thread::sleep(Duration::from_millis(20));
        }
        self.expect_same(from, f, &[to]);
    }

    /// Sends `f` on `from` and asserts exactly the ports in `to` got exactly `f` once.
    #[track_caller]
    fn expect_same(&self, from: &str, f: &[u8], to: &[&str]) {
        let got = self.send(from, f);
        self.expect_out(&got, f, to);
    }

    #[track_caller]
    fn expect_out(&self, got: &Got, f: &[u8], to: &[&str]) {
        for p in &self.ports {
            let want: Vec<Vec<u8>> = if to.contains(&p.as_str()) {
                vec![f.to_vec()]
            } else {
                vec![]
            };
            assert_eq!(
                got[p].iter().map(|x| hex(x)).collect::<Vec<_>>(),
                want.iter().map(|x| hex(x)).collect::<Vec<_>>(),
                "frames on {p}, expected on {to:?} only; all: {}",
                dump(got)
            );
        }
    }

    #[track_caller]
    /// The one frame `from`'s frame `f` produced, which must go to `to` only.
    fn one(&self, from: &str, f: &[u8], to: &str) -> Vec<u8> {
        let got = self.send(from, f);
        for (p, fs) in &got {
            if p == to {
                assert_eq!(fs.len(), 1, "expected one frame on {to}: {got:?}");
            } else {
                assert!(
                    fs.is_empty(),
                    "unexpected frames on {p} (want {to}): {fs:?}"
                );
            }
        }
        got[to][0].clone()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        self.d.json(args)
    }
}

const IP1: [u8; 4] = [10, 0, 0, 1];
const IP2: [u8; 4] = [10, 0, 0, 2];

#[test]
fn normal_learns_floods_and_never_reflects() {
    let _g = serial();
    let sw = Sw::simple(3);
    let a_to_b = udp(mac(2), mac(1), IP1, IP2, 1000, 2000);
    let b_to_a = udp(mac(1), mac(2), IP2, IP1, 2000, 1000);
    // Unknown unicast floods (not back to p1).
    sw.expect_same("p1", &a_to_b, &["p2", "p3"]);
    // The reply goes to the learned port only.
    sw.expect_same("p2", &b_to_a, &["p1"]);
    // Now both are known.
    sw.learned("p1", &a_to_b, "p2");
    sw.expect_same("p1", &a_to_b, &["p2"]);
    // Broadcast floods everywhere but the input port.
    let bc = arp(1, mac(3), [10, 0, 0, 3], [0; 6], IP1);
    sw.expect_same("p3", &bc, &["p1", "p2"]);
    // The MAC table.
    let macs = sw.json(&["dump-macs", BR]);
    let port_of = |m: &str| {
        macs.as_array()
            .unwrap()
            .iter()
            .find(|e| e["mac"] == m)
            .map(|e| e["port"].as_u64().unwrap())
    };
    assert_eq!(port_of("02:00:00:00:00:01"), Some(1), "{macs}");
    assert_eq!(port_of("02:00:00:00:00:02"), Some(2), "{macs}");
    assert_eq!(port_of("02:00:00:00:00:03"), Some(3), "{macs}");
    // A frame for a MAC learned on its own input port is dropped.
    let to_self = udp(mac(1), mac(4), [10, 0, 0, 4], IP1, 1, 2);
    sw.expect_same("p1", &to_self, &[]);
    // MAC 1 moves to p3: traffic for it follows at once.
    sw.expect_same("p3", &udp(mac(2), mac(1), IP1, IP2, 5, 6), &["p2"]);
    sw.learned("p2", &b_to_a, "p3");
    // Multicast floods too.
    let mc = udp([0x01, 0, 0x5e, 0, 0, 1], mac(2), IP2, [224, 0, 0, 1], 7, 7);
    sw.expect_same("p2", &mc, &["p1", "p3"]);
}

#[test]
fn normal_vlans_access_and_trunk_ports() {
    let _g = serial();
    let sw = Sw::new(&[
        ("a1", &["tag=10"]),
        ("a2", &["tag=10"]),
        ("b1", &["tag=20"]),
        ("t1", &["trunks=10,20"]),
        ("t2", &[]),
        ("t3", &["trunks=20"]),
    ]);
    let bc = udp(BCAST, mac(1), IP1, [10, 0, 0, 255], 1, 2);
    // Untagged into access VLAN 10: untagged on the other VLAN 10 access port, tagged 10 on the
    // trunks carrying 10, nothing in VLAN 20.
    let got = sw.send("a1", &bc);
    assert_eq!(got["a2"], vec![bc.clone()]);
    assert_eq!(got["t1"], vec![tagged(&bc, 10)]);
    assert_eq!(got["t2"], vec![tagged(&bc, 10)]);
    for p in ["a1", "b1", "t3"] {
        assert!(got[p].is_empty(), "{p} got {:?}", got[p]);
    }
    // Tagged 20 into a trunk: untagged to VLAN 20's access port, tagged to the other trunks.
    let bc20 = tagged(&udp(BCAST, mac(4), IP1, [10, 0, 0, 255], 3, 4), 20);
    let got = sw.send("t1", &bc20);
    assert_eq!(got["b1"], vec![untagged(&bc20)]);
    assert_eq!(got["t2"], vec![bc20.clone()]);
    assert_eq!(got["t3"], vec![bc20.clone()]);
    for p in ["a1", "a2", "t1"] {
        assert!(got[p].is_empty(), "{p} got {:?}", got[p]);
    }
    // VLAN 30 is not in t1's trunks: dropped at input. From t2 (all VLANs) it has nowhere to go.
    let bc30 = tagged(&bc, 30);
    sw.expect_same("t1", &bc30, &[]);
    sw.expect_same("t2", &bc30, &[]);
    // A tagged frame on an access port is dropped.
    sw.expect_same("a1", &tagged(&bc, 20), &[]);
    // Learning is per VLAN: MAC 1 is known in VLAN 10 (on a1) ...
    let to1 = udp(mac(1), mac(5), [10, 0, 0, 5], IP1, 9, 9);
    sw.learned("a2", &to1, "a1");
    let got = sw.send("t2", &tagged(&to1, 10));
    assert_eq!(got["a1"], vec![to1.clone()]);
    assert!(
        got.iter().all(|(p, f)| p == "a1" || f.is_empty()),
        "{got:?}"
    );
    // ... but unknown in VLAN 20: flooded there only.
    let got = sw.send("b1", &to1);
    assert_eq!(got["t1"], vec![tagged(&to1, 20)]);
    assert_eq!(got["t2"], vec![tagged(&to1, 20)]);
    assert_eq!(got["t3"], vec![tagged(&to1, 20)]);
    for p in ["a1", "a2", "b1"] {
        assert!(got[p].is_empty(), "{p} got {:?}", got[p]);
    }
    // Moving a port to another VLAN applies at once.
    sw.ok(&["set-port", "a2", "tag=20"]);
    let got = sw.send("a1", &bc);
    assert!(got["a2"].is_empty(), "a2 left VLAN 10: {:?}", got["a2"]);
    assert_eq!(got["t1"], vec![tagged(&bc, 10)]);
    let got = sw.send("b1", &bc);
    assert_eq!(got["a2"], vec![bc.clone()]);
}

/// One match field: a flow with `m` outputs to p2; a frame that matches goes there, one that
/// differs only in that field falls to the default rule (p4).
struct Case {
    m: &'static str,
    from: &'static str,
    hit: Vec<u8>,
    miss: Vec<u8>,
    miss_from: &'static str,
}

fn case(m: &'static str, hit: Vec<u8>, miss: Vec<u8>) -> Case {
    Case {
        m,
        from: "p1",
        hit,
        miss,
        miss_from: "p1",
    }
}

#[test]
fn every_match_field_class() {
    let _g = serial();
    let sw = Sw::simple(4);
    let u = |sip, dip, sp, dp| udp(mac(2), mac(1), sip, dip, sp, dp);
    let base = u(IP1, IP2, 1000, 2000);
    let cases = vec![
        Case {
            m: "in_port=p1",
            from: "p1",
            hit: base.clone(),
            miss: base.clone(),
            miss_from: "p3",
        },
        case(
            "dl_src=02:00:00:00:00:01",
            base.clone(),
            udp(mac(2), mac(9), IP1, IP2, 1000, 2000),
        ),
        case(
            "dl_dst=02:00:00:00:00:02",
            base.clone(),
            udp(mac(8), mac(1), IP1, IP2, 1000, 2000),
        ),
        case(
            "dl_dst=01:00:00:00:00:00/01:00:00:00:00:00",
            udp(BCAST, mac(1), IP1, IP2, 1000, 2000),
            base.clone(),
        ),
        case(
            "dl_type=0x0806",
            arp(1, mac(1), IP1, [0; 6], IP2),
            base.clone(),
        ),
        case("dl_vlan=10", tagged(&base, 10), tagged(&base, 11)),
        case(
            "ip,nw_src=10.1.0.0/16",
            u([10, 1, 2, 3], IP2, 1, 2),
            u([10, 2, 2, 3], IP2, 1, 2),
        ),
        case(
            "ip,nw_dst=192.168.1.0/255.255.255.0",
            u(IP1, [192, 168, 1, 77], 1, 2),
            u(IP1, [192, 168, 2, 77], 1, 2),
        ),
        case(
            "ip,nw_proto=17",
            base.clone(),
            tcp(mac(2), mac(1), IP1, IP2, 1000, 2000),
        ),
        case(
            "udp,tp_dst=53",
            u(IP1, IP2, 1000, 53),
            u(IP1, IP2, 1000, 54),
        ),
        case(
            "tcp,tp_src=1234",
            tcp(mac(2), mac(1), IP1, IP2, 1234, 80),
            tcp(mac(2), mac(1), IP1, IP2, 1235, 80),
        ),
        case(
            "tcp,tcp_dst=80",
            tcp(mac(2), mac(1), IP1, IP2, 1234, 80),
            // Same port, other protocol.
            u(IP1, IP2, 1234, 80),
        ),
        case(
            "icmp,icmp_type=8,icmp_code=0",
            icmp(mac(2), mac(1), IP1, IP2, 8, 0),
            icmp(mac(2), mac(1), IP1, IP2, 0, 0),
        ),
        case(
            "arp,arp_op=2",
            arp(2, mac(1), IP1, mac(2), IP2),
            arp(1, mac(1), IP1, mac(2), IP2),
        ),
        case(
            "arp,arp_spa=10.0.0.1,arp_tpa=10.0.0.2",
            arp(1, mac(1), IP1, [0; 6], IP2),
            arp(1, mac(1), IP1, [0; 6], [10, 0, 0, 3]),
        ),
        case(
            "arp,arp_sha=02:00:00:00:00:07",
            arp(1, mac(7), IP1, [0; 6], IP2),
            arp(1, mac(1), IP1, [0; 6], IP2),
        ),
    ];
    for c in &cases {
        sw.flows(&[
            "priority=1,actions=output:p4",
            &format!("priority=100,{},actions=output:p2", c.m),
        ]);
        let got = sw.send(c.from, &c.hit);
        assert_eq!(got["p2"], vec![c.hit.clone()], "{}: matching frame", c.m);
        assert!(got["p4"].is_empty(), "{}: matching frame also on p4", c.m);
        let got = sw.send(c.miss_from, &c.miss);
        assert!(got["p2"].is_empty(), "{}: non-matching frame matched", c.m);
        assert_eq!(
            got["p4"],
            vec![c.miss.clone()],
            "{}: non-matching frame",
            c.m
        );
    }
}

#[test]
fn every_action() {
    let _g = serial();
    let sw = Sw::simple(4);
    let f = udp(mac(2), mac(1), IP1, IP2, 1000, 2000);
    let t = tcp(mac(2), mac(1), IP1, IP2, 1234, 80);
    let flow = |a: &str| sw.flows(&[&format!("in_port=p1,actions={a}")]);

    flow("output:p2");
    sw.expect_same("p1", &f, &["p2"]);
    flow("output:3");
    sw.expect_same("p1", &f, &["p3"]);
    flow("drop");
    sw.expect_same("p1", &f, &[]);
    flow("output:p1");
    sw.expect_same("p1", &f, &[]);
    flow("in_port");
    sw.expect_same("p1", &f, &["p1"]);
    flow("flood");
    sw.expect_same("p1", &f, &["p2", "p3", "p4"]);
    flow("all");
    sw.expect_same("p1", &f, &["p2", "p3", "p4"]);
    flow("normal");
    sw.expect_same("p1", &f, &["p2", "p3", "p4"]);
    // Two outputs.
    flow("output:p2,output:p4");
    sw.expect_same("p1", &f, &["p2", "p4"]);

    // VLAN actions.
    flow("mod_vlan_vid:100,output:p2");
    assert_eq!(sw.one("p1", &f, "p2"), tagged(&f, 100));
    flow("push_vlan:0x8100,set_field:200->vlan_vid,output:p2");
    assert_eq!(sw.one("p1", &f, "p2"), tagged(&f, 200));
    flow("mod_vlan_vid:300,output:p2");
    assert_eq!(sw.one("p1", &tagged(&f, 5), "p2"), tagged(&f, 300));
    flow("strip_vlan,output:p2");
    assert_eq!(sw.one("p1", &tagged(&f, 7), "p2"), f);
    // Output before and after a change: the first copy is unmodified.
    flow("output:p2,mod_vlan_vid:9,output:p3");
    let got = sw.send("p1", &f);
    assert_eq!(got["p2"], vec![f.clone()]);
    assert_eq!(got["p3"], vec![tagged(&f, 9)]);

    // Ethernet addresses.
    flow("mod_dl_src:0a:0b:0c:0d:0e:0f,mod_dl_dst:02:00:00:00:00:33,output:p2");
    let o = sw.one("p1", &f, "p2");
    assert_eq!(o[..6], [2, 0, 0, 0, 0, 0x33]);
    assert_eq!(o[6..12], [0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f]);
    assert_eq!(o[12..], f[12..]);
    flow("set_field:02:00:00:00:00:44->eth_dst,output:p2");
    let o = sw.one("p1", &f, "p2");
    assert_eq!(o[..6], mac(0x44));
    assert_eq!(o[6..], f[6..]);

    // IPv4 addresses: IP header checksum and the UDP/TCP pseudo-header checksum follow.
    sw.flows(&["udp,in_port=p1,actions=mod_nw_src:192.168.7.1,mod_nw_dst:172.16.0.9,output:p2"]);
    let o = sw.one("p1", &f, "p2");
    check_sums(&o).unwrap();
    assert_eq!(
        ip_fields(&o),
        ([192, 168, 7, 1], [172, 16, 0, 9], 1000, 2000)
    );
    assert_eq!(o.len(), f.len());
    sw.flows(&["tcp,in_port=p1,actions=set_field:1.2.3.4->ip_dst,output:p2"]);
    let o = sw.one("p1", &t, "p2");
    check_sums(&o).unwrap();
    assert_eq!(ip_fields(&o), (IP1, [1, 2, 3, 4], 1234, 80));
    // ICMP: IP checksum fixed, ICMP checksum (no pseudo-header) still right.
    sw.flows(&["icmp,in_port=p1,actions=mod_nw_dst:10.9.9.9,output:p2"]);
    let o = sw.one("p1", &icmp(mac(2), mac(1), IP1, IP2, 8, 0), "p2");
    check_sums(&o).unwrap();
    assert_eq!(ip_fields(&o).1, [10, 9, 9, 9]);

    // L4 ports.
    sw.flows(&["udp,in_port=p1,actions=mod_tp_src:53,mod_tp_dst:5353,output:p2"]);
    let o = sw.one("p1", &f, "p2");
    check_sums(&o).unwrap();
    assert_eq!(ip_fields(&o), (IP1, IP2, 53, 5353));
    sw.flows(&["tcp,in_port=p1,actions=mod_tp_dst:8080,set_field:4321->tcp_src,output:p2"]);
    let o = sw.one("p1", &t, "p2");
    check_sums(&o).unwrap();
    assert_eq!(ip_fields(&o), (IP1, IP2, 4321, 8080));
    sw.flows(&["udp,in_port=p1,actions=set_field:7->udp_src,output:p2"]);
    let o = sw.one("p1", &tagged(&f, 12), "p2");
    assert_eq!(vlan_of(&o), Some(12));
    check_sums(&o).unwrap();
    assert_eq!(ip_fields(&o), (IP1, IP2, 7, 2000));
}

#[test]
fn goto_table_and_priorities() {
    let _g = serial();
    let sw = Sw::simple(4);
    let f = udp(mac(2), mac(1), IP1, IP2, 1000, 2000);
    sw.flows(&[
        "table=0,priority=10,in_port=p1,actions=mod_dl_src:02:00:00:00:00:aa,goto_table:1",
        "table=1,priority=5,udp,actions=output:p3",
        "table=1,priority=6,udp,tp_dst=2000,actions=output:p4",
    ]);
    let o = sw.one("p1", &f, "p4");
    assert_eq!(o[6..12], mac(0xaa));
    assert_eq!(o[12..], f[12..]);
    let o = sw.one("p1", &udp(mac(2), mac(1), IP1, IP2, 1000, 2001), "p3");
    assert_eq!(o[6..12], mac(0xaa));
    // A table miss in table 1 drops.
    sw.expect_same("p1", &tcp(mac(2), mac(1), IP1, IP2, 1, 2), &[]);
    // A higher priority rule in table 0 wins over the goto.
    sw.ok(&[
        "add-flow",
        BR,
        "table=0,priority=20,udp,in_port=p1,actions=output:p2",
    ]);
    sw.expect_same("p1", &f, &["p2"]);
    // Deleting it strictly brings the lower one back, at once.
    sw.ok(&[
        "del-flows",
        BR,
        "--strict",
        "table=0,priority=20,udp,in_port=p1",
    ]);
    assert_eq!(sw.one("p1", &f, "p4")[6..12], mac(0xaa));
    // Same priority, more specific flow wins nothing by itself: priority decides.
    sw.ok(&[
        "add-flow",
        BR,
        "table=1,priority=1,udp,tp_dst=2000,actions=output:p2",
    ]);
    sw.one("p1", &f, "p4");
    // mod-flows changes actions in place.
    sw.ok(&["mod-flows", BR, "table=1,udp,tp_dst=2000,actions=output:p2"]);
    assert_eq!(sw.one("p1", &f, "p2")[6..12], mac(0xaa));
    let dump = sw.ok(&["dump-flows", BR]);
    assert!(dump.contains("goto_table:1"), "{dump}");
}

#[test]
fn revalidation_is_immediate() {
    let _g = serial();
    let sw = Sw::simple(3);
    let f = udp(mac(2), mac(1), IP1, IP2, 1000, 2000);
    // Learn both MACs, then warm the caches with the same frame.
    sw.send("p2", &udp(mac(1), mac(2), IP2, IP1, 2000, 1000));
    sw.learned("p1", &f, "p2");
    for _ in 0..3 {
        sw.expect_same("p1", &f, &["p2"]);
    }
    for round in 0..5 {
        // The very first packet after each command follows the new decision.
        sw.ok(&["add-flow", BR, "priority=100,in_port=p1,actions=drop"]);
        sw.expect_same("p1", &f, &[]);
        sw.ok(&["mod-flows", BR, "in_port=p1,actions=output:p3"]);
        sw.expect_same("p1", &f, &["p3"]);
        sw.ok(&["del-flows", BR, "in_port=p1"]);
        sw.expect_same("p1", &f, &["p2"]);
        // A port's VLAN change too.
        sw.ok(&["set-port", "p2", "tag=5"]);
        // MAC 2 is unknown in VLAN 0 now: flooded there, and p2 is not in it.
        sw.expect_same("p1", &f, &["p3"]);
        sw.ok(&["set-port", "p2", "tag="]);
        // Back in VLAN 0, p2 is flooded to at once (its MACs may have been forgotten).
        let got = sw.send("p1", &f);
        assert_eq!(got["p2"], vec![f.clone()], "round {round}");
        sw.send("p2", &udp(mac(1), mac(2), IP2, IP1, 2000, 1000));
        sw.learned("p1", &f, "p2");
    }
}

#[test]
fn megaflows_are_masked_and_stats_add_up() {
    let _g = serial();
    let sw = Sw::simple(3);
    sw.send("p2", &udp(mac(1), mac(2), IP2, IP1, 1, 1));
    sw.learned("p1", &udp(mac(2), mac(1), IP1, IP2, 1, 1), "p2");
    sw.learned("p2", &udp(mac(1), mac(2), IP2, IP1, 1, 1), "p1");
    sw.ok(&["pmd-stats-clear"]);
    // 100 flows differing in UDP ports, both ways, all through NORMAL.
    for i in 0..100u16 {
        sw.inject(
            "p1",
            &udp_id(mac(2), mac(1), IP1, IP2, 1000 + i, 2000 + i, i.into()),
        );
        sw.inject(
            "p2",
            &udp_id(mac(1), mac(2), IP2, IP1, 3000 + i, 4000 + i, i.into()),
        );
    }
    let got1 = sw.flush("p1");
    let got2 = sw.flush("p2");
    assert_eq!(got1["p2"].len(), 100);
    assert_eq!(got1["p1"].len() + got2["p1"].len(), 100);
    assert!(got1["p3"].is_empty() && got2["p3"].is_empty());
    // In order, unmodified.
    for (i, fr) in got1["p2"].iter().enumerate() {
        assert_eq!(fr[42..46], (i as u32).to_be_bytes());
    }
    let mf = sw.json(&["dump-megaflows"]);
    let mfs = mf.as_array().unwrap();
    let udp_mfs: Vec<&serde_json::Value> = mfs
        .iter()
        .filter(|m| !m["match"].as_str().unwrap().contains("0x88b5"))
        .collect();
    assert!(
        !udp_mfs.is_empty() && udp_mfs.len() <= 4,
        "NORMAL needs a handful of megaflows, got {}: {mf:#}",
        udp_mfs.len()
    );
    for m in &udp_mfs {
        let s = m["match"].as_str().unwrap();
        assert!(!s.contains("tp_dst") && !s.contains("tp_src"), "{s}");
        assert!(!s.contains("ipv4"), "NORMAL does not look at IP: {s}");
    }
    let pkts: u64 = udp_mfs.iter().map(|m| m["packets"].as_u64().unwrap()).sum();
    assert!(pkts >= 198, "megaflow hits {pkts}: {mf:#}");
    // PMD counters add up.
    let st = sw.json(&["pmd-stats-show"]);
    let pmds = st.as_array().unwrap();
    assert_eq!(pmds.len(), 1, "{st:#}");
    let p = &pmds[0];
    let n = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k} in {p}"));
    assert_eq!(p["core"], 0);
    // 200 frames plus 4 markers.
    assert_eq!(n("packets"), 204, "{p}");
    assert_eq!(
        n("packets"),
        n("emc_hits") + n("smc_hits") + n("megaflow_hits") + n("misses"),
        "{p}"
    );
    assert!(n("misses") <= 6, "{p}");
    assert_eq!(n("lost"), 0, "{p}");
    assert!(n("busy_cycles") > 0, "{p}");
    // Port counters: what went in and out.
    let ps = sw.json(&["port-stats", "p1"]);
    assert_eq!(ps[0]["rx_packets"], sw.injected.borrow()["p1"]);
    sw.ok(&["pmd-stats-clear"]);
    let p = &sw.json(&["pmd-stats-show"])[0];
    assert_eq!(p["packets"], 0);
    assert_eq!(p["emc_hits"], 0);
}

#[test]
fn port_stats_count_drops_by_reason() {
    let _g = serial();
    let sw = Sw::simple(3);
    // A vhost-user port nobody connected to: its link is down.
    sw.ok(&["add-port", BR, "v1", "type=vhost-user"]);
    let drops = |p: &str, why: &str| {
        sw.json(&["port-stats", p])[0]["drops"][why]
            .as_u64()
            .unwrap_or(0)
    };
    let before = drops("v1", "link-down");
    let bc = udp(BCAST, mac(1), IP1, IP2, 1, 2);
    for _ in 0..5 {
        sw.inject("p1", &bc);
    }
    let got = sw.flush("p1");
    assert_eq!(got["p2"].len(), 5);
    assert_eq!(got["p3"].len(), 5);
    // Five floods plus the two markers (ALL) reached v1 and were dropped there as link-down.
    assert_eq!(drops("v1", "link-down") - before, 7);
    let ps = sw.json(&["port-stats"]);
    let v1 = ps
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["port"] == "v1")
        .unwrap();
    assert_eq!(v1["tx_packets"], 0);
    let p2 = ps
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["port"] == "p2")
        .unwrap();
    assert_eq!(p2["tx_packets"], 6);
    assert_eq!(p2["tx_bytes"], 5 * bc.len() as u64 + 60);
    let text = sw.ok(&["port-stats", "v1"]);
    assert!(text.contains("link-down=7"), "{text}");
}

#[test]
fn set_pmd_cores_live_keeps_forwarding() {
    let _g = serial();
    let sw = Sw::simple(3);
    let f = udp(mac(2), mac(1), IP1, IP2, 1000, 2000);
    sw.send("p2", &udp(mac(1), mac(2), IP2, IP1, 2000, 1000));
    sw.learned("p1", &f, "p2");
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    let other = if online > 1 { "1" } else { "0" };
    for cores in [other, "0", if online > 1 { "0,1" } else { "0" }, "0"] {
        eprintln!("pmd cores {cores}");
        sw.ok(&["set-pmd-cores", cores]);
        let want: Vec<u64> = cores.split(',').map(|c| c.parse().unwrap()).collect();
        let st = sw.json(&["pmd-stats-show"]);
        let mut have: Vec<u64> = st
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["core"].as_u64().unwrap())
            .collect();
        have.sort();
        assert_eq!(have, want, "{st:#}");
        // Every rx queue is polled by one of them.
        let rxq = sw.json(&["pmd-rxq-show"]);
        assert_eq!(rxq.as_array().unwrap().len(), 3, "{rxq:#}");
        for q in rxq.as_array().unwrap() {
            assert!(want.contains(&q["core"].as_u64().unwrap()), "{rxq:#}");
        }
        for _ in 0..3 {
            sw.expect_same("p1", &f, &["p2"]);
            sw.expect_same("p3", &udp(BCAST, mac(3), IP1, IP2, 1, 1), &["p1", "p2"]);
        }
        // The MAC table survived.
        sw.expect_same("p2", &udp(mac(1), mac(2), IP2, IP1, 2000, 1000), &["p1"]);
    }
    assert_eq!(sw.json(&["show"])["pmd_cores"], "0");
}

fn n_packets(sw: &Sw, flow: &str) -> u64 {
    let flows = sw.json(&["dump-flows", BR]);
    let line = flows
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .find(|f| f.contains(flow))
        .unwrap_or_else(|| panic!("no flow with {flow}: {flows:#}"));
    line.split("n_packets=")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no n_packets in {line}"))
}

/// OpenFlow rule counters and idle timeouts must see the traffic the datapath caches
/// (megaflow/EMC hits) carry, not only the packets that went up to the pipeline.
#[test]
fn flow_counters_and_idle_timeouts_see_cached_traffic() {
    let _g = serial();
    let sw = Sw::simple(3);
    sw.flows(&[
        "priority=100,in_port=p1,actions=output:p2",
        "priority=100,idle_timeout=2,in_port=p3,actions=output:p2",
    ]);
    let f = udp(mac(2), mac(1), IP1, IP2, 1000, 2000);
    for _ in 0..20 {
        sw.inject("p1", &f);
    }
    assert_eq!(sw.flush("p1")["p2"].len(), 20);
    let deadline = Instant::now() + Duration::from_secs(3);
    while n_packets(&sw, "in_port=p1") != 20 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        n_packets(&sw, "in_port=p1"),
        20,
        "dump-flows does not count cached hits: {}",
        sw.ok(&["dump-flows", BR])
    );
    // A flow with traffic every 300 ms outlives its 2 s idle timeout.
    let g = udp(mac(2), mac(3), IP1, IP2, 3, 4);
    for i in 0..12 {
        let got = sw.send("p3", &g);
        assert!(
            got["p2"] == vec![g.clone()] && got["p1"].is_empty(),
            "packet {i}: the idle timeout expired a busy flow (NORMAL took over): {}\n{}",
            dump(&got),
            sw.ok(&["dump-flows", BR])
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // Cached hits are credited to rules once a second.
    let deadline = Instant::now() + Duration::from_secs(3);
    while n_packets(&sw, "in_port=p3") < 12 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(n_packets(&sw, "in_port=p3") >= 12);
}
