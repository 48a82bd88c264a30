//! Faucet with a `meters:` block through the real daemon: an ACL on port 1 sends IPv4 through
//! a 2-packets/s drop meter, and `packetin_pps` makes Faucet program the OFPM_CONTROLLER meter.
//! Faucet deletes every meter when it connects (METER_MOD delete OFPM_ALL) and adds its own;
//! frames injected on dummy port p1 faster than the meter's rate must mostly be dropped (and
//! counted by the meter's band), ARP on the same port is not metered. Needs the venv of
//! `scripts/setup.sh` (`/opt/vireo-venv` or `$VIREO_VENV`); without it the test fails under
//! `VIREO_REQUIRE_PEERS=1` and is skipped with a message otherwise (`testkit::venv_file`).
mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::wait_until;
use common::Daemon;
use testkit::{free_port, venv_file, Proc};

fn frame(src: [u8; 6], dst: [u8; 6], eth_type: u16, n: u8) -> String {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&eth_type.to_be_bytes());
    f.resize(59, 0x45);
    f.push(n);
    f.iter().map(|b| format!("{b:02x}")).collect()
}

fn captured(d: &Daemon, port: &str) -> Vec<String> {
    let out = d.ok(&["capture", port]);
    out.lines()
        .map(|l| l.trim().to_ascii_lowercase())
        .filter(|l| !l.is_empty())
        .collect()
}

fn dpid(run: &Path) -> u64 {
    let out = Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow13", "show"])
        .arg(format!("unix:{}", run.join("br0.mgmt").display()))
        .output()
        .expect("ovs-ofctl");
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text
        .split("dpid:")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .expect("dpid in ovs-ofctl show");
    u64::from_str_radix(hex, 16).unwrap()
}

fn faucet_yaml(dpid: u64) -> String {
    format!(
        "meters:\n  lossy:\n    meter_id: 1\n    entry:\n      flags: \"PKTPS\"\n      bands:\n        [{{type: \"DROP\", rate: 2}}]\n\
         acls:\n  metered:\n    - rule:\n        dl_type: 0x800\n        actions:\n          meter: lossy\n          allow: 1\n    - rule:\n        actions:\n          allow: 1\n\
         vlans:\n  office:\n    vid: 100\n\
         dps:\n  br0:\n    dp_id: {dpid:#x}\n    hardware: \"Open vSwitch\"\n    packetin_pps: 50\n    interfaces:\n      1:\n        native_vlan: office\n        acls_in: [metered]\n      2:\n        native_vlan: office\n"
    )
}

#[test]
fn faucet_meter_on_an_acl_limits_traffic_end_to_end() {
    let Some(bin) = venv_file("bin/faucet") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start(&run);
    d.ok(&["add-br", "br0", "internal=false"]);
    for p in ["p1", "p2"] {
        d.ok(&["add-port", "br0", p, "type=dummy"]);
    }
    // A meter left from before Faucet: its OFPM_ALL delete must remove it.
    d.ok(&["add-meter", "br0", "meter=9,pktps,bands=type=drop,rate=1"]);
    let conf = dir.path().join("faucet.yaml");
    std::fs::write(&conf, faucet_yaml(dpid(&run))).unwrap();
    let port = free_port();
    let mut cmd = Command::new(&bin);
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    cmd.env("PATH", path)
        .env("FAUCET_CONFIG", &conf)
        .env("FAUCET_LOG", dir.path().join("faucet.log"))
        .env("FAUCET_EXCEPTION_LOG", dir.path().join("faucet_exc.log"))
        .env("FAUCET_PROMETHEUS_ADDR", "127.0.0.1")
        .env("FAUCET_PROMETHEUS_PORT", free_port().to_string())
        .arg("--ryu-ofp-listen-host=127.0.0.1")
        .arg(format!("--ryu-ofp-tcp-listen-port={port}"));
    let ctl = Proc::spawn(cmd, dir.path().join("faucet.out"));
    d.ok(&["set-controller", "br0", &format!("tcp:127.0.0.1:{port}")]);
    let meters = || d.ok(&["dump-meters", "br0"]);
    assert!(
        wait_until(Duration::from_secs(30), || meters()
            .contains("meter=1,pktps")
            && d.ok(&["dump-flows", "br0"]).contains("meter:1")),
        "Faucet's meter and metered rule never arrived:\n{}\n{}\n{}",
        meters(),
        d.ok(&["dump-flows", "br0"]),
        ctl.log()
    );
    let m = meters();
    assert!(!m.contains("meter=9"), "OFPM_ALL delete: {m}");
    assert!(m.contains("meter=controller,pktps"), "packetin_pps: {m}");
    std::thread::sleep(Duration::from_secs(2));
    let (h1, h2) = ([2, 0, 0, 0, 1, 1], [0xff; 6]);
    captured(&d, "p2");
    // 20 broadcast IPv4 frames as fast as vireoctl goes (well above 2/s): the meter passes
    // its burst and 2/s.
    let t0 = Instant::now();
    let sent: Vec<String> = (0..20).map(|n| frame(h1, h2, 0x0800, n)).collect();
    for f in &sent {
        d.ok(&["inject", "p1", f]);
    }
    let secs = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(500));
    let got = captured(&d, "p2");
    let passed = sent.iter().filter(|f| got.contains(f)).count();
    let line = meters();
    eprintln!("{passed} of 20 IPv4 frames passed in {secs:.2} s; {line}");
    assert!(
        (1..=2 + (secs * 2.0).ceil() as usize + 1).contains(&passed),
        "{passed} passed in {secs:.2} s\n{line}\n{}",
        d.ok(&["dump-flows", "br0"])
    );
    let m1 = line
        .lines()
        .find(|l| l.contains("meter=1,"))
        .unwrap_or_default();
    let band0 = m1
        .split("band0:packet_count:")
        .nth(1)
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse::<usize>().ok());
    assert_eq!(
        band0,
        Some(20 - passed),
        "the drop band counts every frame held back: {m1}"
    );
    // ARP is not metered: every frame passes.
    let arps: Vec<String> = (0..10).map(|n| frame(h1, h2, 0x0806, n)).collect();
    for f in &arps {
        d.ok(&["inject", "p1", f]);
    }
    std::thread::sleep(Duration::from_millis(500));
    let got = captured(&d, "p2");
    assert_eq!(arps.iter().filter(|f| got.contains(f)).count(), 10);
}
