//! A guest that posts the costliest descriptor chains it can (ring-long loops of zero-length
//! descriptors, indirect tables at the cap, frames that come back into maximal mergeable
//! gathers) next to two ports forwarding real testpmd traffic through a running vireod: the
//! per-burst descriptor budget keeps the neighbours forwarding, the attacker's port is
//! counted (`budget_cuts`, malformed chains), and vireod stays up.
//!
//! The rate comparison within 10% is the benchmark (`scripts/bench/hostile-guest.sh`, release
//! build, real-time priorities); here, a debug build on a shared 2-core machine, the test
//! asserts what separates bounded from unbounded walks: the neighbours keep at least a quarter
//! of their rate (before the budget they fell to about 0.1% of it). Measured 2026-12-07 on the
//! 2-vCPU EPYC VM, debug build: the neighbours kept 41.6% to 82.0% of their rate over 6 runs
//! while the attacker's own thread used 4% of a core, so the loss is the PMD's time on the
//! attacker's budgeted walks, and half was a threshold it could cross.
mod common;

use common::peers::{missing, Testpmd, VirtioUser};
use common::wait_until;
use common::Daemon;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vhost::attack::CostlyChains;
use vhost::frontend::MockGuest;

fn stats(d: &Daemon, port: &str) -> Value {
    d.json(&["port-stats", port])[0].clone()
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

/// Packets vm1 and vm2 received per second (vireod's own counters) over `secs`.
fn neighbours_rate(d: &Daemon, secs: f64) -> f64 {
    let sum = |d: &Daemon| n(&stats(d, "vm1"), "rx_packets") + n(&stats(d, "vm2"), "rx_packets");
    let (c0, t0) = (sum(d), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(secs));
    (sum(d) - c0) as f64 / t0.elapsed().as_secs_f64()
}

#[test]
fn costly_chains_cost_only_the_attackers_port_under_live_traffic() {
    if let Some(m) = missing("dpdk-testpmd") {
        eprintln!("{m}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start_logged(&run, &dir.path().join("vireod.log"));
    d.ok(&["add-br", "br0", "internal=false"]);
    for p in ["vm1", "vm2", "h1"] {
        d.ok(&["add-port", "br0", p, "type=vhost-user"]);
    }
    d.ok(&["add-flow", "br0", "in_port=vm1,actions=output:vm2"]);
    d.ok(&["add-flow", "br0", "in_port=vm2,actions=output:vm1"]);
    // The attacker's valid frames come back to it, into its maximal mergeable gathers.
    d.ok(&["add-flow", "br0", "in_port=h1,actions=in_port"]);
    let vu = |p: &str, mac: &str| VirtioUser {
        path: run.join(format!("{p}.sock")),
        mac: mac.into(),
        extra: String::new(),
    };
    let mut tp = Testpmd::start(
        &format!("vireo-budget-{}", std::process::id()),
        &[
            vu("vm1", "00:00:00:00:00:01"),
            vu("vm2", "00:00:00:00:00:02"),
        ],
        &["--forward-mode=io"],
    );
    tp.wait_ready();
    tp.cmd("start tx_first 4");
    assert!(
        wait_until(Duration::from_secs(30), || n(
            &stats(&d, "vm2"),
            "rx_packets"
        ) > 5000),
        "no traffic between vm1 and vm2: {}",
        d.ok(&["show"])
    );
    let before = neighbours_rate(&d, 2.0);
    assert!(before > 1000.0, "baseline too low to compare: {before} pps");

    // The attacker: its own thread, re-posting up to 8 chains every 500 µs on a 32768-entry
    // ring, all three kinds of costly chain.
    let stop = Arc::new(AtomicBool::new(false));
    let posted = Arc::new(AtomicU64::new(0));
    let sock = run.join("h1.sock");
    let (s2, p2) = (Arc::clone(&stop), Arc::clone(&posted));
    let attacker = std::thread::spawn(move || {
        let mut g = MockGuest::connect(&sock, 1, 32768, u64::MAX).expect("attacker connects");
        let mut chains = CostlyChains::arm(&mut g, &["zero", "indirect", "mrg"]).unwrap();
        while !s2.load(Ordering::Relaxed) {
            let k = chains.post(&mut g, 8);
            p2.fetch_add(u64::from(k), Ordering::Relaxed);
            std::thread::sleep(Duration::from_micros(500));
        }
        g
    });
    assert!(
        wait_until(Duration::from_secs(10), || n(
            &stats(&d, "h1"),
            "budget_cuts"
        ) > 0),
        "the attacker's chains never reached the budget: {}",
        stats(&d, "h1")
    );
    // The best of three windows: starvation by the attacker would show in every one, while
    // this machine's host can halve any single window (rates moved 2x between consecutive
    // 3 s benchmark trials on the 2-vCPU EPYC VM of 2026-12-07).
    let during = (0..3)
        .map(|_| neighbours_rate(&d, 1.5))
        .fold(0.0f64, f64::max);
    let h1 = stats(&d, "h1");
    stop.store(true, Ordering::Relaxed);
    let g = attacker.join().expect("attacker thread");
    let chains = posted.load(Ordering::Relaxed);
    eprintln!(
        "neighbours: {before:.0} pps before, {during:.0} pps under attack ({:.1}%); \
         attacker posted {chains} chains; h1 {h1}",
        100.0 * during / before
    );
    assert!(
        during >= 0.25 * before,
        "the neighbours lost more than three quarters of their rate: {before:.0} -> \
         {during:.0} pps"
    );
    assert!(chains > 1000, "the attacker posted only {chains} chains");
    // Counted on the attacker's port: budget cuts and its over-long chains as malformed.
    assert!(n(&h1, "budget_cuts") > 0, "{h1}");
    assert!(
        h1["drops"]["malformed"].as_u64().unwrap_or(0) > 0,
        "over-long chains not counted as malformed: {h1}"
    );
    // vireod is alive and answers; the neighbours still forward after the attacker leaves.
    drop(g);
    assert!(neighbours_rate(&d, 1.0) > 1000.0);
    assert!(d.ok(&["list-br"]).contains("br0"));
    let _ = tp.quit();
}
