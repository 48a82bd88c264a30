//! End to end with real OpenFlow controllers through the real daemon: hosts on dummy ports
//! exchange frames through `vireoctl inject` / `vireoctl capture` while os-ken's
//! `simple_switch_13` or Faucet (two VLANs) drive the bridge over `set-controller`.
//!
//! Ignored until vireod wires `ofswitch::BridgeOf` (set-controller, inject, capture); run with
//! `cargo test -p vireo --test controllers -- --ignored`. Needs the venv of
//! `scripts/setup.sh` (`/opt/vireo-venv` or `$VIREO_VENV`); skipped with a message without it.
//! The one assumption about `capture`'s output lives in [`captured`]: one frame per line, in
//! hex (a JSON array of hex strings is accepted too).
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::wait_until;
use common::Daemon;

const T: Duration = Duration::from_secs(30);

use testkit::{free_port, venv_file, Proc};

fn frame(src: [u8; 6], dst: [u8; 6], eth_type: u16) -> String {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&eth_type.to_be_bytes());
    f.resize(60, 0x45);
    f.iter().map(|b| format!("{b:02x}")).collect()
}

/// Frames captured on a dummy port since the last call, as lowercase hex.
fn captured(d: &Daemon, port: &str) -> Vec<String> {
    let out = d.ok(&["capture", port]);
    if let Ok(serde_json::Value::Array(v)) = serde_json::from_str::<serde_json::Value>(&out) {
        return v
            .iter()
            .filter_map(|x| x.as_str().map(str::to_ascii_lowercase))
            .collect();
    }
    out.lines()
        .map(|l| l.trim().to_ascii_lowercase())
        .filter(|l| !l.is_empty())
        .collect()
}

fn flows(d: &Daemon) -> String {
    d.ok(&["dump-flows", "br0"])
}

fn bridge(d: &Daemon, ports: &[&str]) {
    d.ok(&["add-br", "br0", "internal=false"]);
    for p in ports {
        d.ok(&["add-port", "br0", p, "type=dummy"]);
    }
}

#[test]
fn os_ken_simple_switch_13_through_vireod() {
    let (Some(bin), Some(app)) = (
        venv_file("bin/osken-manager"),
        venv_file("apps/simple_switch_13.py"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(&dir.path().join("run"));
    bridge(&d, &["p1", "p2", "p3"]);
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.args(["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port"])
        .arg(port.to_string())
        .arg(app);
    let ctl = Proc::spawn(cmd, dir.path().join("osken.log"));
    d.ok(&["set-controller", "br0", &format!("tcp:127.0.0.1:{port}")]);
    assert!(
        wait_until(T, || flows(&d).contains("actions=CONTROLLER:65535")),
        "{}\n{}",
        flows(&d),
        ctl.log()
    );
    let (a, b) = ([2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb]);
    let ab = frame(a, b, 0x0800);
    d.ok(&["inject", "p1", &ab]);
    assert!(
        wait_until(T, || captured(&d, "p2").contains(&ab)),
        "flooded to p2"
    );
    assert!(captured(&d, "p3").contains(&ab) || wait_until(T, || captured(&d, "p3").contains(&ab)));
    let ba = frame(b, a, 0x0800);
    d.ok(&["inject", "p2", &ba]);
    assert!(
        wait_until(T, || captured(&d, "p1").contains(&ba)),
        "sent to p1 only"
    );
    assert!(
        wait_until(T, || flows(&d).contains("priority=1,in_port")),
        "{}",
        flows(&d)
    );
    // The learned flow forwards without the controller; p3 sees nothing.
    captured(&d, "p3");
    d.ok(&["inject", "p2", &ba]);
    assert!(wait_until(T, || captured(&d, "p1").contains(&ba)));
    assert!(captured(&d, "p3").is_empty());
}

fn faucet_yaml(dpid: u64) -> String {
    format!(
        "vlans:\n  office:\n    vid: 100\n  guest:\n    vid: 200\ndps:\n  br0:\n    dp_id: {dpid:#x}\n    hardware: \"Open vSwitch\"\n    interfaces:\n      1:\n        native_vlan: office\n      2:\n        native_vlan: office\n      3:\n        native_vlan: guest\n      4:\n        native_vlan: guest\n"
    )
}

/// The datapath id `ovs-ofctl show` reports on the bridge's management socket.
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

#[test]
fn faucet_two_vlans_through_vireod() {
    let Some(bin) = venv_file("bin/faucet") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start(&run);
    bridge(&d, &["p1", "p2", "p3", "p4"]);
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
    assert!(
        wait_until(T, || flows(&d).contains("dl_vlan=200")),
        "{}\n{}",
        flows(&d),
        ctl.log()
    );
    std::thread::sleep(Duration::from_secs(2));
    let hosts: Vec<[u8; 6]> = (1..=4).map(|n| [2, 0, 0, 0, 1, n]).collect();
    let ports = ["p1", "p2", "p3", "p4"];
    for p in ports {
        captured(&d, p);
    }
    // Broadcast from p1 reaches p2 only; from p3 reaches p4 only.
    let bc1 = frame(hosts[0], [0xff; 6], 0x0806);
    d.ok(&["inject", "p1", &bc1]);
    assert!(
        wait_until(T, || captured(&d, "p2").contains(&bc1)),
        "{}",
        ctl.log()
    );
    let bc3 = frame(hosts[2], [0xff; 6], 0x0806);
    d.ok(&["inject", "p3", &bc3]);
    assert!(wait_until(T, || captured(&d, "p4").contains(&bc3)));
    std::thread::sleep(Duration::from_millis(500));
    assert!(!captured(&d, "p3").contains(&bc1) && !captured(&d, "p4").contains(&bc1));
    assert!(!captured(&d, "p1").contains(&bc3) && !captured(&d, "p2").contains(&bc3));
    // Unicast to a host of the other VLAN never crosses.
    let cross = frame(hosts[0], hosts[2], 0x0800);
    d.ok(&["inject", "p1", &cross]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(captured(&d, "p3").is_empty() && captured(&d, "p4").is_empty());
}
