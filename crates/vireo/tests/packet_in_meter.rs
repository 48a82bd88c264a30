//! The OFPM_CONTROLLER meter on packet-ins, end to end: `ovs-ofctl -O OpenFlow13 monitor` (a
//! real OpenFlow client that asks for packet-ins with SET_CONFIG) on the bridge's management
//! socket, a rule sending everything to the controller, and frames injected on a dummy port
//! much faster than the meter's rate. Without the meter every frame reaches the monitor; with
//! a 5 packets/s meter (burst 3) only the burst and the rate do, and the meter's band counts
//! the rest. Fails under VIREO_REQUIRE_PEERS=1 without ovs-ofctl.
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Daemon;

fn frame(n: u8) -> String {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 1, 1]);
    f.extend_from_slice(&[0x08, 0x00]);
    f.resize(59, 0x45);
    f.push(n);
    f.iter().map(|b| format!("{b:02x}")).collect()
}

/// Injects `n` frames on p1 while `ovs-ofctl monitor` listens; returns how many packet-ins it
/// printed and how long the injection took.
fn packet_ins(d: &Daemon, n: u8) -> (usize, f64) {
    let sock = format!("unix:{}", d.run_dir.join("br0.mgmt").display());
    // Line-buffered: the monitor is killed, and a pipe would keep its output in stdio's buffer.
    // It also opens a unixctl socket (default /var/run/openvswitch): keep it in the run dir.
    let unixctl = format!("--unixctl={}", d.run_dir.join("monitor.ctl").display());
    let mut mon = Command::new("stdbuf")
        .args([
            "-oL",
            "ovs-ofctl",
            &unixctl,
            "-O",
            "OpenFlow13",
            "monitor",
            &sock,
            "65535",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ovs-ofctl monitor");
    std::thread::sleep(Duration::from_millis(700));
    let t0 = Instant::now();
    for i in 0..n {
        d.ok(&["inject", "p1", &frame(i)]);
    }
    let secs = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(700));
    let _ = mon.kill();
    let out = mon.wait_with_output().expect("monitor output");
    // The monitor prints what it receives on stdout or stderr (it depends on its build).
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    let n = text.matches("OFPT_PACKET_IN").count();
    if n == 0 {
        eprintln!("monitor: {text}");
    }
    (n, secs)
}

#[test]
fn controller_meter_limits_packet_ins_to_a_real_monitor() {
    if !testkit::have_ofctl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("run"));
    d.ok(&["add-br", "br0", "internal=false"]);
    d.ok(&["add-port", "br0", "p1", "type=dummy"]);
    d.ok(&["del-flows", "br0"]);
    d.ok(&["add-flow", "br0", "actions=controller"]);
    let (all, _) = packet_ins(&d, 30);
    assert_eq!(all, 30, "without a meter every frame is a packet-in");
    d.ok(&[
        "add-meter",
        "br0",
        "meter=controller,pktps,burst,bands=type=drop,rate=5,burst_size=3",
    ]);
    let (some, secs) = packet_ins(&d, 30);
    let most = 4 + (secs * 5.0).ceil() as usize;
    let m = d.ok(&["dump-meters", "br0"]);
    eprintln!("{some} of 30 packet-ins in {secs:.2} s (at most {most}); {m}");
    assert!(
        (1..=most).contains(&some),
        "{some} packet-ins in {secs:.2} s; {m}"
    );
    assert!(
        m.contains(&format!("band0:packet_count:{},", 30 - some)),
        "the band counts what it held back: {m}"
    );
}
