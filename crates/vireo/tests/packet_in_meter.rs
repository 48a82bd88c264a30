//! The OFPM_CONTROLLER meter on packet-ins, end to end: `ovs-ofctl -O OpenFlow13 monitor` (a
//! real OpenFlow client that asks for packet-ins with SET_CONFIG) on the bridge's management
//! socket, a rule sending everything to the controller, and frames injected on a dummy port
//! much faster than the meter's rate. Without the meter every frame reaches the monitor; with
//! a 5 packets/s meter (burst 3) only the burst and the rate do, and the meter's band counts
//! the rest. Fails under VIREO_REQUIRE_PEERS=1 without ovs-ofctl.
//!
//! The same meter set by a real controller: an os-ken app programs OFPM_CONTROLLER and a
//! table-miss rule, real kernel frames from a namespace (af-packet port) miss the table, and
//! the app counts the packet-ins it gets with and without the meter.
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
    let ctl_path = d.run_dir.join("monitor.ctl");
    let _ = std::fs::remove_file(&ctl_path);
    let unixctl = format!("--unixctl={}", ctl_path.display());
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
    // The monitor makes its unixctl socket once its OpenFlow connection is up; then give it a
    // moment to ask for packet-ins (a fixed wait alone missed frames on a loaded machine).
    assert!(
        common::wait_until(Duration::from_secs(20), || ctl_path.exists()),
        "ovs-ofctl monitor did not start"
    );
    std::thread::sleep(Duration::from_millis(500));
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

/// An os-ken app for the metered packet-in rate: on connect it deletes every meter and flow
/// (as Faucet does), adds meter OFPM_CONTROLLER (PKTPS, BURST, one drop band of
/// `VIREO_METER_PPS` packets/s and `VIREO_METER_BURST` packets; none when the rate is 0) and a
/// table-miss rule to the controller, then writes one line per packet-in of the test's frames
/// (source MAC `SRC`) with the time it arrived.
const COUNT_APP: &str = r#"
import os, time
from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3

RATE = int(os.environ["VIREO_METER_PPS"])
BURST = int(os.environ["VIREO_METER_BURST"])
LOG = open(os.environ["VIREO_PKTIN_LOG"], "a", buffering=1)
SRC = bytes.fromhex("02006d740001")


class Count(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def features(self, ev):
        dp = ev.msg.datapath
        o, p = dp.ofproto, dp.ofproto_parser
        dp.send_msg(p.OFPMeterMod(dp, command=o.OFPMC_DELETE, meter_id=o.OFPM_ALL))
        dp.send_msg(p.OFPFlowMod(datapath=dp, command=o.OFPFC_DELETE, table_id=o.OFPTT_ALL,
                                 out_port=o.OFPP_ANY, out_group=o.OFPG_ANY,
                                 match=p.OFPMatch()))
        if RATE:
            band = p.OFPMeterBandDrop(rate=RATE, burst_size=BURST)
            dp.send_msg(p.OFPMeterMod(dp, command=o.OFPMC_ADD,
                                      flags=o.OFPMF_PKTPS | o.OFPMF_BURST | o.OFPMF_STATS,
                                      meter_id=o.OFPM_CONTROLLER, bands=[band]))
        to_ctl = [p.OFPActionOutput(o.OFPP_CONTROLLER, o.OFPCML_NO_BUFFER)]
        inst = [p.OFPInstructionActions(o.OFPIT_APPLY_ACTIONS, to_ctl)]
        dp.send_msg(p.OFPFlowMod(datapath=dp, priority=0, match=p.OFPMatch(),
                                 instructions=inst))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        if ev.msg.data[6:12] == SRC:
            LOG.write("%.6f\n" % time.time())
"#;

/// Sends `PPS` frames/s (ethertype 0x88b5, source MAC `SRC` of the app) for `SECS` seconds
/// on an AF_PACKET socket bound to `IFNAME`; prints how many it sent.
const SENDER: &str = r#"
import socket, sys, time
ifname, pps, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((ifname, 0))
f = bytes.fromhex("ffffffffffff" "02006d740001" "88b5") + bytes(46)
t0, n = time.time(), 0
while True:
    now = time.time() - t0
    if now >= secs:
        break
    while n < int(now * pps):
        s.send(f)
        n += 1
    time.sleep(0.001)
print(n)
"#;

/// Meter rate and burst of the metered run; frames offered per second and for how long.
const METER_PPS: u32 = 50;
const METER_BURST: u32 = 10;
const OFFERED_PPS: u32 = 1_000;
const SEND_SECS: f64 = 5.0;

/// One run: the app (meter rate `rate`, 0 for none) takes the bridge, the namespace sends
/// [`OFFERED_PPS`] for [`SEND_SECS`]; returns (frames sent, the arrival times of the
/// packet-ins the app got, in seconds since the first).
fn counted_packet_ins(
    d: &Daemon,
    ns: &common::host::Ns,
    bin: &std::path::Path,
    dir: &std::path::Path,
    rate: u32,
) -> (u64, Vec<f64>) {
    let app = dir.join("count_app.py");
    std::fs::write(&app, COUNT_APP).unwrap();
    let log = dir.join(format!("pktin-{rate}.txt"));
    let port = testkit::free_port();
    let mut cmd = Command::new(bin);
    cmd.env("VIREO_METER_PPS", rate.to_string())
        .env("VIREO_METER_BURST", METER_BURST.to_string())
        .env("VIREO_PKTIN_LOG", &log)
        .args(["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port"])
        .arg(port.to_string())
        .arg(&app);
    let ctl = testkit::Proc::spawn(cmd, dir.join(format!("osken-{rate}.log")));
    d.ok(&["set-controller", "br0", &format!("tcp:127.0.0.1:{port}")]);
    let ready = || {
        let flows = d.ok(&["dump-flows", "br0"]);
        let meters = d.ok(&["dump-meters", "br0"]);
        flows.contains("CONTROLLER") && (rate == 0) != meters.contains("meter=controller")
    };
    // os-ken takes seconds to import; much longer when the machine is busy.
    assert!(
        common::wait_until(Duration::from_secs(120), ready),
        "the app did not program the bridge: {}\n{}\n{}",
        d.ok(&["dump-flows", "br0"]),
        d.ok(&["dump-meters", "br0"]),
        ctl.log()
    );
    let sender = dir.join("sender.py");
    std::fs::write(&sender, SENDER).unwrap();
    let out = ns.exec(&[
        "python3",
        &sender.display().to_string(),
        &ns.ns_if,
        &OFFERED_PPS.to_string(),
        &SEND_SECS.to_string(),
    ]);
    let sent: u64 = out.trim().parse().expect("frames sent");
    // Packet-ins still queued towards the app arrive within this.
    std::thread::sleep(Duration::from_secs(2));
    d.ok(&["del-controller", "br0"]);
    drop(ctl);
    let times: Vec<f64> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let t0 = times.first().copied().unwrap_or(0.0);
    (sent, times.iter().map(|t| t - t0).collect())
}

/// Packet-ins per second in `[from, to)` seconds after the first.
fn rate_in(times: &[f64], from: f64, to: f64) -> f64 {
    times.iter().filter(|&&t| t >= from && t < to).count() as f64 / (to - from)
}

/// A real controller (os-ken, a small app above) limits its own packet-ins with meter
/// OFPM_CONTROLLER; real kernel frames from a namespace come in on an af-packet port at
/// 1,000/s and miss the table. Without the meter the app gets most of them (at least ten
/// times the meter's rate); with a 50 packets/s meter (burst 10) it gets 50/s within 20%
/// over the steady seconds, at most the burst plus the rate over the whole run, and the
/// meter's band counts the rest. Needs root, iproute2 and the venv of `scripts/setup.sh`.
#[test]
fn os_ken_meters_its_packet_ins_from_namespace_traffic() {
    if !common::host::kernel_ok() || !testkit::require_peer("python3", "python3") {
        return;
    }
    let Some(bin) = testkit::venv_file("bin/osken-manager") else {
        return;
    };
    let dir = tempfile::Builder::new().prefix("mtpi-").tempdir().unwrap();
    let ns = common::host::Ns::create("mtpi", 'm', 'a');
    let d = Daemon::start(&dir.path().join("run"));
    d.ok(&["add-br", "br0", "internal=false"]);
    let ifname = format!("ifname={}", ns.host_if);
    d.ok(&["add-port", "br0", "a", "type=af-packet", &ifname]);

    let (sent, free) = counted_packet_ins(&d, &ns, &bin, dir.path(), 0);
    let free_rate = rate_in(&free, 1.0, 4.0);
    eprintln!(
        "no meter: {} packet-ins of {sent} frames, {free_rate:.0}/s over seconds 1-4",
        free.len()
    );
    assert!(
        sent >= u64::from(OFFERED_PPS) * 4,
        "the sender fell behind: {sent}"
    );
    assert!(
        free_rate >= f64::from(METER_PPS * 10),
        "without a meter only {free_rate:.0} packet-ins/s arrived"
    );

    let (sent, metered) = counted_packet_ins(&d, &ns, &bin, dir.path(), METER_PPS);
    let steady = rate_in(&metered, 1.0, 4.0);
    let meters = d.ok(&["dump-meters", "br0"]);
    eprintln!(
        "meter {METER_PPS}/s burst {METER_BURST}: {} packet-ins of {sent} frames, \
         {steady:.1}/s over seconds 1-4; {meters}",
        metered.len()
    );
    let r = f64::from(METER_PPS);
    assert!(
        (0.8 * r..=1.2 * r).contains(&steady),
        "{steady:.1} packet-ins/s through a {METER_PPS}/s meter"
    );
    let most = f64::from(METER_BURST) + r * (SEND_SECS + 1.0);
    assert!(
        metered.len() as f64 <= most,
        "{} packet-ins in a {SEND_SECS} s run (at most {most})",
        metered.len()
    );
    let dropped: u64 = meters
        .split("band0:packet_count:")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    assert!(
        dropped + metered.len() as u64 >= sent && dropped >= sent / 2,
        "the band counted {dropped} of {sent} frames ({} packet-ins): {meters}",
        metered.len()
    );
}
