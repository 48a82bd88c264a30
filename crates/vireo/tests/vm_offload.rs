//! Checksum and TSO offloads with real peers: QEMU (software emulation) boots Debian's kernel
//! with the test initramfs on vhost-user ports; its virtio-net driver negotiates `csum`,
//! `guest_csum`, `host_tso4/6`, `guest_tso4/6` with Vireo and sends TCP (busybox `nc`, the
//! output of `seq`, checked by byte count and MD5 at the far end):
//! - to two kernel namespaces behind `tap` ports, one with tap offloads on (the GSO frames
//!   reach the kernel as they are) and one with `offloads=false` (Vireo segments and
//!   completes checksums: `tcpdump -vv` in that namespace sees only segments within the MTU,
//!   every checksum correct);
//! - to a second QEMU guest that negotiated `guest_tso4` (the frames reach it unsegmented).
//!
//! Skipped (with a message; failing under `VIREO_REQUIRE_PEERS=1`) when QEMU, a kernel image,
//! root or tcpdump is missing.
mod common;

use common::host::{kernel_ok, must, sh, Bg, Ns};
use common::peers::{build_initramfs, guest_peers, Guest};
use common::Daemon;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// QEMU guests are heavy: one such test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Lines of `seq 1 N` each guest sends (1.3 MB).
const SEQ_N: u64 = 200_000;
const MAC_A: &str = "52:54:00:0f:00:01";
const MAC_B: &str = "52:54:00:0f:00:02";

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// What `seq 1 N` prints: its length and MD5 (computed by the host's `md5sum`).
fn expected(n: u64) -> (u64, String) {
    let text: String = (1..=n).map(|i| format!("{i}\n")).collect();
    let mut c = Command::new("md5sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("md5sum");
    use std::io::Write;
    c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    let md5 = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    (text.len() as u64, md5)
}

fn peers_ok() -> Option<std::path::PathBuf> {
    if !testkit::require_peer("tcpdump", "tcpdump") || !testkit::require_peer("busybox", "busybox")
    {
        return None;
    }
    guest_peers(&[])
}

fn port_stats(d: &Daemon, port: &str) -> serde_json::Value {
    d.json(&["port-stats", port])[0].clone()
}

/// The negotiated features of a vhost-user port, as `show` lists them.
fn features(d: &Daemon, port: &str) -> Vec<String> {
    let st = common::port_status(d, port)["status"]["features"].clone();
    st.as_array()
        .unwrap_or_else(|| panic!("no features for {port}: {st}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

/// Features seen while the guest runs (a guest that powered off negotiated nothing): the
/// last non-empty list `show` gave, polled from `watch`.
fn assert_offloads_negotiated(f: &[String], port: &str) {
    for want in [
        "csum",
        "guest_csum",
        "host_tso4",
        "host_tso6",
        "guest_tso4",
        "guest_tso6",
    ] {
        assert!(f.iter().any(|x| x == want), "{port}: {want} not in {f:?}");
    }
    for never in ["host_ufo", "guest_ufo", "host_ecn", "guest_ecn"] {
        assert!(!f.iter().any(|x| x == never), "{port}: {never} in {f:?}");
    }
}

/// A tap port of br0 moved into its own namespace with `ip`, a `tcpdump -vv` of the stream
/// and a busybox `nc` listener writing what it receives to a file.
struct TapPeer {
    ns: Ns,
    dump: std::path::PathBuf,
    rx: std::path::PathBuf,
    _tcpdump: Bg,
    _nc: Bg,
}

fn tap_peer(d: &Daemon, dir: &std::path::Path, side: char, ip: &str, opts: &[&str]) -> TapPeer {
    let pid = std::process::id();
    let tap = format!("voff{side}{pid}");
    let mut args = vec!["add-port", "br0", &tap, "type=tap"];
    args.extend_from_slice(opts);
    d.ok(&args);
    let ns = Ns {
        name: format!("voff-{side}-{pid}"),
        host_if: tap.clone(),
        ns_if: tap.clone(),
    };
    let _ = sh(&["ip", "netns", "del", &ns.name]);
    must(&["ip", "netns", "add", &ns.name]);
    must(&["ip", "link", "set", &tap, "netns", &ns.name]);
    ns.exec(&["ip", "addr", "add", ip, "dev", &tap]);
    ns.exec(&["ip", "link", "set", &tap, "up"]);
    ns.exec(&["ip", "link", "set", "lo", "up"]);
    let dump = dir.join(format!("tcpdump-{side}.txt"));
    let rx = dir.join(format!("rx-{side}"));
    let spawn = |args: Vec<String>, out: &std::path::Path| {
        Bg(Command::new(&args[0])
            .args(&args[1..])
            .stdin(Stdio::piped()) // held open: busybox nc stops listening on stdin EOF
            .stdout(std::fs::File::create(out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn"))
    };
    let tcpdump = spawn(
        ns.cmd(&[
            "tcpdump", "-i", &tap, "-nn", "-vv", "-l", "tcp", "port", "5001",
        ]),
        &dump,
    );
    let nc = spawn(ns.cmd(&["busybox", "nc", "-l", "-p", "5001"]), &rx);
    TapPeer {
        ns,
        dump,
        rx,
        _tcpdump: tcpdump,
        _nc: nc,
    }
}

/// `(IP total length, TCP checksum verdict)` of each data packet tcpdump -vv printed.
fn dumped(path: &std::path::Path) -> Vec<(u64, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = Vec::new();
    let mut len = None;
    for line in text.lines() {
        if let Some(i) = line.find("proto TCP (6), length ") {
            let rest = &line[i + "proto TCP (6), length ".len()..];
            len = rest
                .trim_end_matches(')')
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|s| s.parse::<u64>().ok());
        } else if let (Some(l), Some(i)) = (len, line.find("cksum 0x")) {
            let verdict = line[i..]
                .split('(')
                .nth(1)
                .map(|s| s.split(')').next().unwrap_or("").to_string())
                .unwrap_or_default();
            if l > 60 {
                out.push((l, verdict));
            }
            len = None;
        }
    }
    out
}

#[test]
fn guest_tso_reaches_namespaces_through_taps_with_and_without_tap_offloads() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(kernel) = peers_ok() else { return };
    if !kernel_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start_with(&run, &["--pmd-cores", "0"]);
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&["add-port", "br0", "vm", "type=vhost-user"]);
    let on = tap_peer(&d, dir.path(), 'a', "10.213.0.2/24", &[]);
    let off = tap_peer(&d, dir.path(), 'b', "10.213.0.3/24", &["offloads=false"]);
    let initrd = build_initramfs(dir.path());
    let guest = Guest::boot(
        &kernel,
        &initrd,
        &run.join("vm.sock"),
        false,
        MAC_A,
        &format!(
            "vireo.ip=10.213.0.1/24 vireo.ping=10.213.0.2 vireo.count=1 \
             vireo.send=10.213.0.2:5001:{SEQ_N},10.213.0.3:5001:{SEQ_N}"
        ),
    );
    let (len, md5) = expected(SEQ_N);
    let t0 = Instant::now();
    let mut feats = Vec::new();
    let done = wait_until(Duration::from_secs(400), || {
        let f = features(&d, "vm");
        if !f.is_empty() {
            feats = f;
        }
        let o = guest.out.text();
        o.contains("VIREO-GUEST-DONE") || o.contains("Kernel panic")
    });
    let console = guest.out.text();
    eprintln!("guest finished in {:.0?}", t0.elapsed());
    let diag = || format!("{console}\n{}\n{}", d.ok(&["port-stats"]), d.ok(&["show"]));
    assert!(done, "guest did not finish in time:\n{}", diag());
    assert!(
        console.contains("VIREO-SEND-OK 10.213.0.2")
            && console.contains("VIREO-SEND-OK 10.213.0.3"),
        "{}",
        diag()
    );
    assert_offloads_negotiated(&feats, "vm");
    for peer in [&on, &off] {
        let ok = wait_until(Duration::from_secs(20), || {
            std::fs::metadata(&peer.rx).is_ok_and(|m| m.len() >= len)
        });
        let got = std::fs::read(&peer.rx).unwrap_or_default();
        assert!(
            ok,
            "{}: {} of {len} bytes\n{}",
            peer.ns.name,
            got.len(),
            diag()
        );
        let sum = must(&["md5sum", peer.rx.to_str().unwrap()]);
        assert!(sum.starts_with(&md5), "{}: content differs", peer.ns.name);
    }
    std::thread::sleep(Duration::from_millis(500));
    // Tap offloads on: the GSO frames reached the kernel whole.
    let a = dumped(&on.dump);
    let b = dumped(&off.dump);
    eprintln!(
        "tcpdump: {} packets on the offloading tap (largest {}), {} on the other (largest {})",
        a.len(),
        a.iter().map(|x| x.0).max().unwrap_or(0),
        b.len(),
        b.iter().map(|x| x.0).max().unwrap_or(0),
    );
    assert!(
        a.iter().any(|(l, _)| *l > 1500),
        "no frame above the MTU on the offloading tap ({} packets)",
        a.len()
    );
    // Tap offloads off: Vireo segmented and completed checksums.
    let big = b.iter().filter(|(l, _)| *l > 1500).count();
    let bad: Vec<_> = b.iter().filter(|(_, v)| v != "correct").collect();
    assert!(
        b.len() as u64 > len / 1500,
        "too few packets seen: {}",
        b.len()
    );
    assert_eq!(big, 0, "segments above the MTU on the non-offloading tap");
    assert!(
        bad.is_empty(),
        "bad checksums: {:?}",
        &bad[..bad.len().min(5)]
    );
    // The guest handed Vireo GSO frames: more than an MTU-sized frame per packet on average.
    let vm = port_stats(&d, "vm");
    let (rxp, rxb) = (
        vm["rx_packets"].as_u64().unwrap(),
        vm["rx_bytes"].as_u64().unwrap(),
    );
    eprintln!("vm port: {rxp} packets, {rxb} bytes from the guest");
    assert!(rxb / rxp.max(1) > 1514, "no TSO from the guest: {vm}");
    let drops = port_stats(&d, "vm")["drops"].clone();
    assert!(
        drops
            .as_object()
            .is_none_or(|m| !m.keys().any(|k| k.starts_with("vnet-"))),
        "{drops}"
    );
    // The software work for the non-offloading tap is counted (`pmd-stats-show`): GSO frames
    // cut, each into two segments at least (a sender uses GSO only past one MSS).
    let pmd: serde_json::Value = d.json(&["pmd-stats-show"]);
    let sum = |k: &str| -> u64 {
        pmd.as_array()
            .into_iter()
            .flatten()
            .map(|p| p[k].as_u64().unwrap_or(0))
            .sum()
    };
    let (cut, segs) = (sum("sw_segmented"), sum("sw_segments"));
    eprintln!("pmd-stats-show: {cut} GSO frames segmented in software into {segs} segments, {} checksums completed", sum("sw_csum"));
    assert!(
        cut > 0 && segs >= 2 * cut,
        "software segmentation not counted: {pmd}"
    );
}

#[test]
fn guest_tso_reaches_a_second_guest_unsegmented() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(kernel) = peers_ok() else { return };
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start_with(&run, &["--pmd-cores", "0"]);
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&["add-port", "br0", "va", "type=vhost-user"]);
    d.ok(&["add-port", "br0", "vb", "type=vhost-user"]);
    let initrd = build_initramfs(dir.path());
    let rx = Guest::boot(
        &kernel,
        &initrd,
        &run.join("vb.sock"),
        false,
        MAC_B,
        "vireo.ip=10.214.0.2/24 vireo.listen=5001",
    );
    assert!(
        rx.out.wait_for("VIREO-LISTENING", Duration::from_secs(200)),
        "receiver did not come up:\n{}",
        rx.out.text()
    );
    let tx = Guest::boot(
        &kernel,
        &initrd,
        &run.join("va.sock"),
        false,
        MAC_A,
        &format!("vireo.ip=10.214.0.1/24 vireo.send=10.214.0.2:5001:{SEQ_N}"),
    );
    let (len, md5) = expected(SEQ_N);
    let mut feats = [Vec::new(), Vec::new()];
    let done = wait_until(Duration::from_secs(400), || {
        for (i, p) in ["va", "vb"].iter().enumerate() {
            let f = features(&d, p);
            if !f.is_empty() {
                feats[i] = f;
            }
        }
        let o = rx.out.text();
        o.contains("VIREO-RECV") || o.contains("Kernel panic")
    });
    let console = format!("{}\n---\n{}", tx.out.text(), rx.out.text());
    let diag = || format!("{console}\n{}\n{}", d.ok(&["port-stats"]), d.ok(&["show"]));
    assert!(done, "nothing received in time:\n{}", diag());
    let want = format!("VIREO-RECV {len} {md5}");
    assert!(rx.out.text().contains(&want), "want {want}\n{}", diag());
    for (f, p) in feats.iter().zip(["va", "vb"]) {
        assert_offloads_negotiated(f, p);
    }
    // vb's guest took the GSO frames as they came: more than an MTU per packet on average.
    let vb = port_stats(&d, "vb");
    let (txp, txb) = (
        vb["tx_packets"].as_u64().unwrap(),
        vb["tx_bytes"].as_u64().unwrap(),
    );
    eprintln!("vb port: {txp} packets, {txb} bytes to the receiving guest");
    assert!(txb / txp.max(1) > 1514, "frames were segmented: {vb}");
}

/// TCP throughput guest → namespace through a tap, offloads on (guest TSO, tap takes the GSO
/// frames) against `offloads=false` on both ports, in one run: a benchmark, not a check
/// (`cargo test -p vireo --test vm_offload -- --ignored --nocapture tcp_throughput`). The
/// guest is software-emulated, so absolute rates are low; the ratio is the figure.
#[test]
#[ignore]
fn tcp_throughput_guest_to_namespace_offloads_on_vs_off() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(kernel) = peers_ok() else { return };
    if !kernel_ok() {
        return;
    }
    const N: u64 = 3_000_000; // 20.9 MB
    let (len, md5) = expected(N);
    let mut rates = Vec::new();
    for (round, offloads) in [(0u8, true), (1, false), (2, true), (3, false)] {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let d = Daemon::start_with(&run, &["--pmd-cores", "0"]);
        d.ok(&["add-br", "br0", "internal=false"]);
        let opt = format!("offloads={offloads}");
        d.ok(&["add-port", "br0", "vm", "type=vhost-user", &opt]);
        let side = (b'c' + round) as char;
        let peer = tap_peer(&d, dir.path(), side, "10.215.0.2/24", &[opt.as_str()]);
        let initrd = build_initramfs(dir.path());
        let guest = Guest::boot(
            &kernel,
            &initrd,
            &run.join("vm.sock"),
            false,
            MAC_A,
            &format!("vireo.ip=10.215.0.1/24 vireo.send=10.215.0.2:5001:{N}"),
        );
        let size = || std::fs::metadata(&peer.rx).map_or(0, |m| m.len());
        assert!(
            wait_until(Duration::from_secs(400), || size() > 0),
            "nothing received:\n{}",
            guest.out.text()
        );
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs(600);
        while size() < len && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        let ok = size() >= len;
        let secs = t0.elapsed().as_secs_f64();
        assert!(ok, "{} of {len} bytes:\n{}", size(), guest.out.text());
        let sum = must(&["md5sum", peer.rx.to_str().unwrap()]);
        assert!(sum.starts_with(&md5), "content differs");
        let mbps = len as f64 * 8.0 / secs / 1e6;
        let vm = port_stats(&d, "vm");
        eprintln!(
            "offloads={offloads}: {len} bytes in {secs:.2} s = {mbps:.1} Mbit/s; vm port rx {} packets",
            vm["rx_packets"]
        );
        rates.push(mbps);
    }
    eprintln!(
        "ratio on/off: {:.2}, {:.2}",
        rates[0] / rates[1],
        rates[2] / rates[3]
    );
}

/// One switch of the Vireo-vs-OVS-DPDK offload benchmarks: Vireo (release `vireod`,
/// `offloads=true|false` on its ports) or OVS-DPDK 3.1 (`userspace-tso-enable=true|false`), both
/// with vhost-user-client ports `vu0`/`vu1` (QEMU the socket server) and p2p rules.
enum Switch {
    Vireo(bench::contender::Vireo),
    Ovs(bench::contender::Ovs),
}

impl Switch {
    fn new(sw: &str, on: bool) -> Switch {
        if sw == "vireo" {
            let bin = std::env::var_os("VIREO_BENCH_BIN").map_or_else(
                || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release"),
                std::path::PathBuf::from,
            );
            let mut v = bench::contender::Vireo::new(0, bin);
            v.port_options.push(format!("offloads={on}"));
            Switch::Vireo(v)
        } else {
            let mut o = bench::contender::Ovs::new(0);
            o.other_config.push(format!("userspace-tso-enable={on}"));
            Switch::Ovs(o)
        }
    }

    fn c(&mut self) -> &mut dyn bench::contender::Contender {
        match self {
            Switch::Vireo(v) => v,
            Switch::Ovs(o) => o,
        }
    }

    /// Adds the kernel interface `ifname` (Vireo `af-packet`, OVS `system`: both packet
    /// sockets) and makes the rules `vu0` ↔ it instead of `vu0` ↔ `vu1`.
    fn kernel_port(&self, ifname: &str, on: bool) {
        match self {
            Switch::Vireo(v) => {
                let (i, o) = (format!("ifname={ifname}"), format!("offloads={on}"));
                v.ctl_running(&["add-port", "br0", "kp", "type=af-packet", &i, &o])
                    .unwrap();
                v.ctl_running(&["del-flows", "br0"]).unwrap();
                for r in [
                    "in_port=vu0,actions=output:kp",
                    "in_port=kp,actions=output:vu0",
                ] {
                    v.ctl_running(&["add-flow", "br0", r]).unwrap();
                }
            }
            Switch::Ovs(o) => {
                o.vsctl_running(&[
                    "add-port",
                    "br0",
                    ifname,
                    "--",
                    "set",
                    "Interface",
                    ifname,
                    "ofport_request=3",
                ])
                .unwrap();
                o.ofctl_running(&["del-flows", "br0"]).unwrap();
                for r in ["in_port=1,actions=output:3", "in_port=3,actions=output:1"] {
                    o.ofctl_running(&["add-flow", "br0", r]).unwrap();
                }
            }
        }
    }

    /// Whether the guest(s) connected now negotiated TSO (virtio feature bit 11,
    /// `host_tso4`), as the switch reports it (kept in `dir` by `pmd_cycles`).
    fn tso_negotiated(&mut self, dir: &std::path::Path) -> bool {
        let _ = self.c().pmd_cycles();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        match self {
            Switch::Vireo(_) => {
                let show = read("show.txt");
                assert!(show.contains("features:"), "{show}");
                show.contains("host_tso4")
            }
            Switch::Ovs(_) => {
                let st = read("interfaces.txt");
                let f: Vec<u64> = st
                    .split("features=\"0x")
                    .skip(1)
                    .filter_map(|x| u64::from_str_radix(x.split('"').next()?, 16).ok())
                    .collect();
                assert!(!f.is_empty(), "{st}");
                f.iter().all(|f| f & (1 << 11) != 0)
            }
        }
    }
}

/// A switch stopped when dropped, also when a case panics (OVS-DPDK daemonizes: left running,
/// its PMD would spin on core 0 and it would hold whatever lock its parent held).
struct Stopped(Switch);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.c().stop();
    }
}

/// Runs `case(switch, offloads, round, dir)` for the four cases interleaved in each round
/// (`VIREO_BENCH_ROUNDS`, default 3) and prints the medians and the Vireo/OVS ratios.
fn offload_bench(what: &str, mut case: impl FnMut(&mut Switch, bool, &std::path::Path) -> f64) {
    let rounds: usize = std::env::var("VIREO_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let mut rates: std::collections::BTreeMap<(&str, bool), Vec<f64>> = Default::default();
    for round in 0..rounds {
        for (sw, on) in [
            ("vireo", true),
            ("ovs", true),
            ("vireo", false),
            ("ovs", false),
        ] {
            // Declared first, dropped last: the switch stops while its run directory (pid
            // files, control sockets) still exists.
            let dir = tempfile::tempdir().unwrap();
            let mut s = Stopped(Switch::new(sw, on));
            if let Err(e) = s.0.c().check() {
                assert!(!testkit::peers_required(), "{sw}: {e}");
                eprintln!("skipped: {sw}: {e}");
                return;
            }
            let mbps = case(&mut s.0, on, dir.path());
            eprintln!("{what} round {round} {sw} offloads={on}: {mbps:.0} Mbit/s");
            rates.entry((sw, on)).or_default().push(mbps);
        }
    }
    let med = |v: &Vec<f64>| {
        let mut s = v.clone();
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    };
    for ((sw, on), v) in &rates {
        let r: Vec<String> = v.iter().map(|x| format!("{x:.0}")).collect();
        eprintln!(
            "{what}: {sw} offloads={on}: median {:.0} Mbit/s ({})",
            med(v),
            r.join(", ")
        );
    }
    for on in [true, false] {
        eprintln!(
            "{what}: offloads={on}: vireo/ovs {:.2}",
            med(&rates[&("vireo", on)]) / med(&rates[&("ovs", on)])
        );
    }
}

/// The guest accelerator of the benchmarks: software emulation (TCG, which bounds every
/// case) unless `VIREO_GUEST_ACCEL=kvm` (on this VM's nested KVM a guest hangs at boot).
fn bench_accel() -> String {
    std::env::var("VIREO_GUEST_ACCEL").unwrap_or_else(|_| "tcg".into())
}

/// Bytes each benchmark transfer carries: `seq 1 3000000` (22.9 MB).
const BENCH_N: u64 = 3_000_000;

/// TCP throughput guest → guest (two QEMU guests on the two vhost-user ports of a p2p
/// bridge), Vireo against OVS-DPDK with and without offloads (see [`Switch`]), the four cases
/// interleaved in each round; switch PMD on core 0, both guests on core 1. A benchmark, not a
/// check: `cargo build --release -p vireo && cargo test -p vireo --test vm_offload --
/// --ignored --nocapture guest_to_` (`VIREO_BENCH_BIN` = the directory of a vireod build to
/// use). The rate is timed inside the receiving guest, from the accepted connection to its
/// end (`VIREO-RECV-SECS`, guest uptime). Each case checks that TSO was negotiated exactly
/// when offloads are on.
#[test]
#[ignore]
fn tcp_throughput_guest_to_guest_vireo_vs_ovs_dpdk() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(kernel) = peers_ok() else { return };
    let accel = bench_accel();
    let (len, md5) = expected(BENCH_N);
    eprintln!("guests: {accel}, {len} bytes per transfer");
    let sc = bench::scenario::Scenario::p2p(64);
    offload_bench("guest to guest", |s, on, dir| {
        let ports = s.c().start(dir, &sc).expect("switch start");
        assert!(ports.gen_server, "the guests listen on the sockets");
        let initrd = build_initramfs(dir);
        let boot = |sock: &std::path::Path, mac: &str, cmd: &str| {
            Guest::boot_with(&accel, Some(1), &kernel, &initrd, sock, true, mac, cmd)
        };
        let rx = boot(
            &ports.socks[1],
            MAC_B,
            "vireo.ip=10.216.0.2/24 vireo.listen=5001",
        );
        assert!(
            rx.out.wait_for("VIREO-LISTENING", Duration::from_secs(200)),
            "receiver did not come up:\n{}",
            rx.out.text()
        );
        // Read now: the guests power off when done.
        assert_eq!(
            s.tso_negotiated(dir),
            on,
            "TSO negotiated with offloads={on}?"
        );
        let tx = boot(
            &ports.socks[0],
            MAC_A,
            &format!("vireo.ip=10.216.0.1/24 vireo.send=10.216.0.2:5001:{BENCH_N}"),
        );
        let done = rx.out.wait_for("VIREO-RECV-SECS", Duration::from_secs(600));
        let text = rx.out.text();
        assert!(
            done && text.contains(&format!("VIREO-RECV {len} {md5}")),
            "offloads={on}: transfer incomplete:\n{text}\n---\n{}",
            tx.out.text()
        );
        let secs: Vec<f64> = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("VIREO-RECV-SECS "))
            .map(|s| {
                s.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(secs.len(), 2, "{text}");
        len as f64 * 8.0 / (secs[1] - secs[0]).max(0.01) / 1e6
    });
}

/// TCP throughput guest → namespace: the guest on `vu0`, a namespace behind a veth whose host
/// end is the switch's packet-socket port (Vireo `af-packet`, OVS `system`), rules `vu0` ↔ it;
/// otherwise as [`tcp_throughput_guest_to_guest_vireo_vs_ovs_dpdk`]. Timed on the host from
/// the first byte the namespace's `nc` wrote to the last (polled every 5 ms).
#[test]
#[ignore]
fn tcp_throughput_guest_to_namespace_vireo_vs_ovs_dpdk() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(kernel) = peers_ok() else { return };
    if !kernel_ok() {
        return;
    }
    let accel = bench_accel();
    let (len, md5) = expected(BENCH_N);
    eprintln!("guest: {accel}, {len} bytes per transfer");
    let sc = bench::scenario::Scenario::p2p(64);
    offload_bench("guest to namespace", |s, on, dir| {
        let ports = s.c().start(dir, &sc).expect("switch start");
        let ns = Ns::create("vob", 'n', 'b');
        ns.exec(&["ip", "addr", "add", "10.217.0.2/24", "dev", &ns.ns_if]);
        // The namespace's own transmit checksum offload off (only its ACKs): OVS's `system`
        // port without userspace TSO passes partial checksums on and TCP never connects (the
        // kernel-port benchmarks do the same for every switch).
        ns.exec(&["ethtool", "-K", &ns.ns_if, "tx", "off"]);
        must(&["ip", "link", "set", &ns.host_if, "up"]);
        s.kernel_port(&ns.host_if, on);
        let rx = dir.join("rx");
        let argv = ns.cmd(&["busybox", "nc", "-l", "-p", "5001"]);
        let _nc = Bg(Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped()) // held open: busybox nc stops listening on stdin EOF
            .stdout(std::fs::File::create(&rx).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("nc"));
        let initrd = build_initramfs(dir);
        let guest = Guest::boot_with(
            &accel,
            Some(1),
            &kernel,
            &initrd,
            &ports.socks[0],
            true,
            MAC_A,
            &format!("vireo.ip=10.217.0.1/24 vireo.send=10.217.0.2:5001:{BENCH_N}"),
        );
        let size = || std::fs::metadata(&rx).map_or(0, |m| m.len());
        assert!(
            wait_until(Duration::from_secs(400), || size() > 0),
            "nothing received:\n{}",
            guest.out.text()
        );
        let t0 = Instant::now();
        // Read while the transfer runs: the guest powers off when done.
        assert_eq!(
            s.tso_negotiated(dir),
            on,
            "TSO negotiated with offloads={on}?"
        );
        let end = t0 + Duration::from_secs(600);
        while size() < len && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        let secs = t0.elapsed().as_secs_f64();
        assert!(
            size() >= len,
            "{} of {len} bytes:\n{}",
            size(),
            guest.out.text()
        );
        let sum = must(&["md5sum", rx.to_str().unwrap()]);
        assert!(sum.starts_with(&md5), "content differs");
        len as f64 * 8.0 / secs / 1e6
    });
}
