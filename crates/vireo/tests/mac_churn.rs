//! Issue 10, item 4, against a running vireod with real traffic: two vhost-user ports (DPDK
//! testpmd in mac forwarding mode with 1,024 circulating frames, each its own IPv4 flow;
//! testpmd 22.11's flowgen sends every port's frames from one fixed MAC pair, which NORMAL
//! sees as a MAC flapping between the ports) switched by NORMAL while a third vhost-user guest
//! (Vireo's own frontend from `bench`) offers 12,000 frames a second, each from a new source
//! MAC. The victims' megaflows must never be flushed and their traffic must cause no upcalls;
//! the churning port is held at its MAC limit (default 1024) and its refusals are counted.
//! The victims' rate with and without the churn is measured in alternating phases and printed.
//! Under `VIREO_STRICT_RATE=1` (`scripts/bench/mac-churn.sh`, release build) the switch must
//! take ≥ 10,000 new MACs/s and the victims keep ≥ 90% of their rate; otherwise (CI, a debug
//! vireod on 2 shared cores) ≥ 4,000 new MACs/s and the rates are only printed.
mod common;

use bench::frontend::{Endpoint, PortConfig, VhostPort};
use common::peers::{missing, Testpmd, VirtioUser};
use common::wait_until;
use common::Daemon;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAC0: &str = "00:00:00:00:00:01";
const MAC1: &str = "00:00:00:00:00:02";
/// Source MACs per second the churning guest sends from.
const CHURN_PPS: u64 = 12_000;
const PHASE: Duration = Duration::from_secs(3);

/// A guest that sends a frame from a new source MAC each time (all to its own first MAC, so
/// NORMAL drops them instead of flooding the victims), at `rate` frames/s (0 = paused).
struct Churner {
    rate: Arc<AtomicU64>,
    sent: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Churner {
    fn start(sock: PathBuf) -> Churner {
        let rate = Arc::new(AtomicU64::new(0));
        let sent = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s, st) = (rate.clone(), sent.clone(), stop.clone());
        let thread = std::thread::spawn(move || churn(&sock, &r, &s, &st));
        Churner {
            rate,
            sent,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Churner {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn churn_frame(n: u64) -> Vec<u8> {
    let own = [0x02, 0xaa, 0, 0, 0, 0];
    let mut f = Vec::with_capacity(60);
    if n == 0 {
        f.extend_from_slice(&[0xff; 6]);
        f.extend_from_slice(&own);
    } else {
        f.extend_from_slice(&own);
        f.extend_from_slice(&[0x02, 0xbb]);
        f.extend_from_slice(&(n as u32).to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 9, 0, 1, 10, 9, 0, 2]);
    f.resize(60, 0);
    f
}

fn churn(sock: &Path, rate: &AtomicU64, sent: &AtomicU64, stop: &AtomicBool) {
    let cfg = PortConfig {
        pairs: 1,
        ring_size: 256,
        rx_ring_size: 256,
        timeout: Duration::from_secs(20),
        mrg_rxbuf: true,
    };
    let ep = Endpoint::new(sock, false).expect("endpoint");
    let mut port = VhostPort::open(ep, cfg).expect("churning guest connects");
    let hdr = port.hdr_len;
    let (mut n, mut t0, mut base) = (0u64, Instant::now(), 0u64);
    let mut last_rate = 0;
    while !stop.load(SeqCst) {
        let r = rate.load(SeqCst);
        if r != last_rate {
            (t0, base, last_rate) = (Instant::now(), n, r);
        }
        let due = base + (t0.elapsed().as_secs_f64() * r as f64) as u64;
        if r == 0 || n >= due {
            std::thread::sleep(Duration::from_micros(500));
            continue;
        }
        let shm = &port.shm;
        let qp = &mut port.qps[0];
        let free = &mut qp.tx_free;
        qp.tx.reap(shm, usize::MAX, |id, _| free.push(id));
        let burst = (due - n).min(32).min(qp.tx_free.len() as u64);
        for _ in 0..burst {
            let Some(id) = qp.tx_free.pop() else { break };
            let mut buf = vec![0u8; hdr];
            buf.extend(churn_frame(n));
            shm.write(qp.tx.l.buf(id), &buf);
            qp.tx.set_len(shm, id, buf.len() as u32);
            qp.tx.push(shm, id);
            n += 1;
        }
        if qp.tx.publish(shm) {
            qp.kick_tx();
        }
        sent.store(n, SeqCst);
    }
}

struct Sample {
    at: Instant,
    /// testpmd RX packets per port (what the switch delivered to each victim).
    victim_rx: Vec<u64>,
    misses: u64,
    churn_rx: u64,
}

/// Packets of each victim direction's megaflows, by source MAC (`dump-megaflows`: expensive
/// while the churning guest's megaflows are installed, so only taken outside the phases).
fn victim_flows(d: &Daemon) -> Vec<Vec<u64>> {
    let mf = d.json(&["dump-megaflows"]);
    [MAC0, MAC1]
        .iter()
        .map(|m| {
            let needle = format!("eth_src={m}");
            mf.as_array()
                .unwrap()
                .iter()
                .filter(|f| f["match"].as_str().unwrap().contains(&needle))
                .map(|f| f["packets"].as_u64().unwrap())
                .collect()
        })
        .collect()
}

fn sample(d: &Daemon, tp: &mut Testpmd) -> Sample {
    let victim_rx = tp.port_stats().iter().map(|s| s.0).collect();
    let misses = d
        .json(&["pmd-stats-show"])
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["misses"].as_u64().unwrap())
        .sum();
    let churn_rx = d.json(&["port-stats", "atk"])[0]["rx_packets"]
        .as_u64()
        .unwrap();
    Sample {
        at: Instant::now(),
        victim_rx,
        misses,
        churn_rx,
    }
}

struct Phase {
    churn: bool,
    rate: f64,
    victim_upcalls: i64,
    churn_pps: f64,
}

/// One phase: victims' rate, and upcalls not caused by the churning guest (each of its frames
/// has a new source MAC: one upcall each).
fn phase(d: &Daemon, tp: &mut Testpmd, churner: &Churner, churn: bool) -> Phase {
    churner
        .rate
        .store(if churn { CHURN_PPS } else { 0 }, SeqCst);
    std::thread::sleep(Duration::from_millis(500)); // the churner fills its MAC limit
    let a = sample(d, tp);
    std::thread::sleep(PHASE);
    let b = sample(d, tp);
    let secs = (b.at - a.at).as_secs_f64();
    let rx: Vec<u64> = (0..2).map(|i| b.victim_rx[i] - a.victim_rx[i]).collect();
    let churned = b.churn_rx - a.churn_rx;
    Phase {
        churn,
        rate: (rx[0] + rx[1]) as f64 / secs,
        victim_upcalls: (b.misses - a.misses) as i64 - churned as i64,
        churn_pps: churned as f64 / secs,
    }
}

#[test]
fn a_guest_churning_source_macs_does_not_flush_other_guests_megaflows() {
    if let Some(why) = missing("dpdk-testpmd") {
        eprintln!("{why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path();
    let d = Daemon::start_with(run, &["--pmd-cores", "0"]);
    d.ok(&["add-br", "br0", "internal=false"]);
    for p in ["v0", "v1", "atk"] {
        d.ok(&["add-port", "br0", p, "type=vhost-user"]);
    }
    let vu = |name: &str, mac: &str| VirtioUser {
        path: run.join(format!("{name}.sock")),
        mac: mac.into(),
        extra: String::new(),
    };
    let prefix = format!("vireo-it-churn-{}", std::process::id());
    let mut tp = Testpmd::start(
        &prefix,
        &[vu("v0", MAC0), vu("v1", MAC1)],
        &[
            "--forward-mode=mac",
            "--txonly-multi-flow",
            "--txpkts=64",
            "--eth-peer=0,00:00:00:00:00:02",
            "--eth-peer=1,00:00:00:00:00:01",
        ],
    );
    tp.wait_ready();
    let churner = Churner::start(run.join("atk.sock"));
    // 32 bursts of 32 frames, each from its own IPv4 source, circulate between the ports.
    tp.cmd("start tx_first 32");
    let mut seen = String::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            let (s, f) = (sample(&d, &mut tp), victim_flows(&d));
            seen = format!("flows {f:?} rx {:?}", s.victim_rx);
            f.iter().all(|f| f.len() == 1) && s.victim_rx.iter().all(|&r| r > 10_000)
        }),
        "victim traffic never flowed: {seen}\n{}",
        d.ok(&["dump-megaflows"]),
    );
    let (first, flows0) = (sample(&d, &mut tp), victim_flows(&d));
    let mut phases = Vec::new();
    for churn in [false, true, false, true] {
        let p = phase(&d, &mut tp, &churner, churn);
        eprintln!(
            "phase churn={}: victims {:.0} pps, victim upcalls {}, churn {:.0} new MACs/s",
            p.churn, p.rate, p.victim_upcalls, p.churn_pps
        );
        phases.push(p);
    }
    churner.rate.store(0, SeqCst);
    // The churning guest's megaflows idle out (10 s); then the victims' megaflows are cheap to
    // find. Each must be the one installed before the churn: it carried (nearly) every packet
    // delivered since. A flush during the churn restarts its count.
    assert!(
        wait_until(Duration::from_secs(30), || d
            .json(&["dump-megaflows"])
            .as_array()
            .unwrap()
            .len()
            <= 4),
        "the churning guest's megaflows never expired"
    );
    let (last, flows1) = (sample(&d, &mut tp), victim_flows(&d));
    // Read only now: frames the churning guest put on its ring just before it paused (up to
    // the ring's 256) are switched by the time its megaflows have idled out.
    let atk = d.json(&["port-stats", "atk"])[0]["mac"].clone();
    eprintln!("churning port: {atk}");
    tp.quit();
    for dir in 0..2 {
        assert_eq!(flows1[dir].len(), 1, "one megaflow per victim direction");
        let carried = flows1[dir][0].saturating_sub(flows0[dir][0]);
        // testpmd port 1 receives what port 0 (MAC0) sent.
        let delivered = last.victim_rx[1 - dir] - first.victim_rx[1 - dir];
        eprintln!(
            "victim megaflow from {}: carried {carried} of {delivered}",
            [MAC0, MAC1][dir]
        );
        assert!(
            carried as f64 >= 0.9 * delivered as f64,
            "the victims' megaflow from {} was flushed: it carried {carried} of the {delivered} \
             packets delivered since before the churn",
            [MAC0, MAC1][dir]
        );
    }
    let sent = churner.sent.load(SeqCst);
    drop(churner);
    eprintln!("the churning guest sent {sent} frames");
    // Upcalls over the whole run, less one per churned frame (each has a new source MAC):
    // both ends are sampled with the churning guest idle, so this is exact.
    let victim_upcalls =
        (last.misses - first.misses) as i64 - (last.churn_rx - first.churn_rx) as i64;
    eprintln!("victim upcalls over the run: {victim_upcalls}");
    assert!(
        victim_upcalls <= 4,
        "victims' traffic caused {victim_upcalls} upcalls while the guest churned"
    );
    // A debug vireod's PMD takes fewer new MACs a second than a release one; the strict run
    // (release, scripts/bench/mac-churn.sh) holds it to the issue's 10,000.
    let strict = std::env::var_os("VIREO_STRICT_RATE").is_some();
    let min_churn = if strict { 10_000.0 } else { 4_000.0 };
    for p in phases.iter().filter(|p| p.churn) {
        assert!(
            p.churn_pps >= min_churn,
            "the churning guest reached only {:.0} new MACs/s",
            p.churn_pps
        );
    }
    assert_eq!(atk["limit"], 1024, "the default per-port MAC limit");
    assert_eq!(atk["entries"], 1024, "the churning port holds its limit");
    assert_eq!(
        atk["refused"].as_u64().unwrap() + 1024,
        sent,
        "every MAC beyond the limit is refused and counted: {atk} of {sent} sent"
    );
    let base: f64 = phases
        .iter()
        .filter(|p| !p.churn)
        .map(|p| p.rate)
        .sum::<f64>()
        / 2.0;
    let churned: f64 = phases
        .iter()
        .filter(|p| p.churn)
        .map(|p| p.rate)
        .sum::<f64>()
        / 2.0;
    eprintln!(
        "victim rate: {base:.0} pps without churn, {churned:.0} pps with ({:.1}%)",
        churned * 100.0 / base
    );
    if strict {
        assert!(
            churned >= 0.9 * base,
            "victims kept less than 90% of their rate"
        );
    }
}
