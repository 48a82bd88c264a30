//! The harness of the golden datapath tests (`datapath.rs`, `datapath_pipeline.rs`): a vireod
//! with bridge br0 and dummy ports, frames injected with `vireoctl inject` and read back with
//! `vireoctl capture`, each exchange closed by marker frames (ethertype 0x88b5, sent to ALL
//! ports by a top-priority flow) so that "nothing arrived" is checked without sleeping.
#![allow(dead_code)]

use crate::common::Daemon;
use crate::frames::*;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The daemons' PMDs all busy-poll core 0: one test at a time keeps timings sane.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub const MARK_TYPE: u16 = 0x88b5;
pub const MARK_SRC: Mac = [2, 0, 0, 0, 0xff, 0xff];
pub const MARK_FLOW: &str = "priority=65535,dl_type=0x88b5,actions=all";
pub const BR: &str = "br0";

/// Frames each port was sent, by port name.
pub type Got = BTreeMap<String, Vec<Vec<u8>>>;

pub fn dump(got: &Got) -> String {
    got.iter()
        .map(|(p, fs)| format!("{p}: {:?}", fs.iter().map(|f| hex(f)).collect::<Vec<_>>()))
        .collect::<Vec<_>>()
        .join("; ")
}

pub fn marker(seq: u32) -> Vec<u8> {
    eth(BCAST, MARK_SRC, MARK_TYPE, &seq.to_be_bytes())
}

pub fn marker_seq(f: &[u8]) -> Option<u32> {
    (f.len() >= 18 && f[6..12] == MARK_SRC && f[12..14] == MARK_TYPE.to_be_bytes())
        .then(|| u32::from_be_bytes([f[14], f[15], f[16], f[17]]))
}

/// A vireod with bridge br0 and dummy ports.
pub struct Sw {
    pub d: Daemon,
    pub _dir: tempfile::TempDir,
    pub ports: Vec<String>,
    pub buf: RefCell<Got>,
    pub seq: Cell<u32>,
    /// Frames injected on each port so far.
    pub injected: RefCell<BTreeMap<String, u64>>,
}

impl Sw {
    /// `ports`: name and extra `add-port` options.
    pub fn new(ports: &[(&str, &[&str])]) -> Sw {
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

    pub fn simple(n: usize) -> Sw {
        let names: Vec<String> = (1..=n).map(|i| format!("p{i}")).collect();
        let spec: Vec<(&str, &[&str])> = names.iter().map(|n| (n.as_str(), &[][..])).collect();
        Sw::new(&spec)
    }

    pub fn ok(&self, args: &[&str]) -> String {
        self.d.ok(args)
    }

    pub fn inject(&self, port: &str, f: &[u8]) {
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
    pub fn drained(&self, port: &str) {
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
    pub fn flows(&self, flows: &[&str]) {
        self.ok(&["del-flows", BR]);
        self.ok(&["add-flow", BR, MARK_FLOW]);
        for f in flows {
            self.ok(&["add-flow", BR, f]);
        }
    }

    /// Waits for marker `seq` on `port`; returns the non-marker frames before it.
    pub fn until_marker(&self, port: &str, seq: u32) -> Vec<Vec<u8>> {
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

    pub fn next_seq(&self) -> u32 {
        self.seq.set(self.seq.get() + 1);
        self.seq.get()
    }

    /// Everything that frames injected on `from` so far produced on every port.
    pub fn flush(&self, from: &str) -> Got {
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
    pub fn send(&self, from: &str, f: &[u8]) -> Got {
        self.inject(from, f);
        self.flush(from)
    }

    /// Sends `f` (for a MAC learned just now) until it goes to `to` only: learning takes effect
    /// within the housekeeping tick (50 ms), then stays.
    #[track_caller]
    pub fn learned(&self, from: &str, f: &[u8], to: &str) {
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
    pub fn expect_same(&self, from: &str, f: &[u8], to: &[&str]) {
        let got = self.send(from, f);
        self.expect_out(&got, f, to);
    }

    #[track_caller]
    pub fn expect_out(&self, got: &Got, f: &[u8], to: &[&str]) {
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
    pub fn one(&self, from: &str, f: &[u8], to: &str) -> Vec<u8> {
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

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        self.d.json(args)
    }
}

pub const IP1: [u8; 4] = [10, 0, 0, 1];
pub const IP2: [u8; 4] = [10, 0, 0, 2];
