//! OpenFlow PORT_MOD and PORT_STATUS against the real kernel: two namespaces on `af-packet`
//! ports of a running vireod, `ovs-ofctl mod-port ... down` takes the veth itself
//! administratively down (as OVS does) and traffic stops; `mod-port ... up` brings both back.
//! A monitoring `ovs-ofctl monitor` (a real OpenFlow client) sees a PORT_STATUS for the config
//! change and another when the link goes down, and one when an operator takes an interface
//! down with `ip link` behind Vireo's back.
//!
//! Names: namespaces `vpm-m-X-PID`, interfaces `vpmmXPID`, removed by Drop guards.
mod common;

use common::host::{kernel_ok, sh, Bg, Ns};
use common::Daemon;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn ns(side: char, addr: &str) -> Ns {
    let ns = Ns::create("vpm", 'm', side);
    ns.exec(&["ip", "addr", "add", addr, "dev", &ns.ns_if]);
    ns
}

fn ping(ns: &Ns, ip: &str) -> bool {
    ns.try_exec(&["ping", "-c", "1", "-W", "1", ip])
        .status
        .success()
}

fn wait(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// The interface's flags as `ip link` prints them (`<BROADCAST,MULTICAST,UP,LOWER_UP>`).
fn admin_up(ifname: &str) -> bool {
    let o = sh(&["ip", "-o", "link", "show", "dev", ifname]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let flags = text.split('<').nth(1).and_then(|r| r.split('>').next());
    flags.is_some_and(|f| f.split(',').any(|x| x == "UP"))
}

/// `ovs-ofctl -O OpenFlow13 monitor` on the bridge, its output in `out` (line-buffered; ovs-ofctl
/// 3.1 printed the messages on stderr in this set-up, so both go there). A
/// management connection gets asynchronous messages once it sets a miss length (as with OVS),
/// hence the `65535`.
fn monitor(sock: &Path, run: &Path, out: &Path) -> Bg {
    let unixctl = format!("--unixctl={}", run.join("monitor.ctl").display());
    let file = std::fs::File::create(out).unwrap();
    Bg(Command::new("stdbuf")
        .args(["-oL", "ovs-ofctl", &unixctl, "-O", "OpenFlow13", "monitor"])
        .arg(format!("unix:{}", sock.display()))
        .arg("65535")
        .stdout(file.try_clone().unwrap())
        .stderr(file.try_clone().unwrap())
        .spawn()
        .expect("ovs-ofctl monitor"))
}

/// PORT_STATUS messages (each with its description lines) the monitor printed so far.
fn port_status(out: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let mut msgs: Vec<String> = Vec::new();
    for l in text.lines() {
        if l.starts_with("OFPT_") {
            msgs.push(l.to_string());
        } else if let Some(m) = msgs.last_mut() {
            m.push('\n');
            m.push_str(l);
        }
    }
    msgs.retain(|m| m.starts_with("OFPT_PORT_STATUS"));
    msgs
}

fn has_status(out: &Path, port: &str, want: &[&str]) -> bool {
    port_status(out)
        .iter()
        .any(|m| m.contains(&format!("({port})")) && want.iter().all(|w| m.contains(w)))
}

#[test]
fn port_mod_down_takes_the_interface_down_and_port_status_follows() {
    if !kernel_ok() || !testkit::have_ofctl() {
        return;
    }
    let dir = tempfile::Builder::new().prefix("vpm-").tempdir().unwrap();
    let a = ns('a', "10.91.0.1/24");
    let b = ns('b', "10.91.0.2/24");
    let d = Daemon::start(dir.path());
    d.ok(&["add-br", "br0", "internal=false"]);
    for (name, n) in [("a", &a), ("b", &b)] {
        let ifname = format!("ifname={}", n.host_if);
        d.ok(&["add-port", "br0", name, "type=af-packet", &ifname]);
    }
    assert!(wait(15, || ping(&a, "10.91.0.2")), "no ping through vireod");
    let sock = d.run_dir.join("br0.mgmt");
    let out = dir.path().join("monitor.txt");
    let _mon = monitor(&sock, &d.run_dir, &out);
    std::thread::sleep(Duration::from_millis(700));

    // PORT_MOD down: the veth goes down, traffic stops, both PORT_STATUS messages come.
    testkit::ofctl_must(&sock, "mod-port", &["a", "down"]);
    assert!(wait(5, || !admin_up(&a.host_if)), "{} still up", a.host_if);
    assert!(!ping(&a, "10.91.0.2"), "ping through a port that is down");
    assert!(
        wait(5, || has_status(&out, "a", &["MOD", "PORT_DOWN"])),
        "no PORT_STATUS for the config change: {:?}",
        std::fs::read_to_string(&out)
    );
    assert!(
        wait(5, || has_status(&out, "a", &["MOD", "LINK_DOWN"])),
        "no PORT_STATUS for the link: {:?}",
        port_status(&out)
    );
    let desc = testkit::ofctl_must(&sock, "dump-ports-desc", &[]);
    assert!(desc.contains("PORT_DOWN"), "{desc}");

    // Back up: interface, traffic and a PORT_STATUS without PORT_DOWN.
    let before = port_status(&out).len();
    testkit::ofctl_must(&sock, "mod-port", &["a", "up"]);
    assert!(wait(5, || admin_up(&a.host_if)), "{} still down", a.host_if);
    assert!(
        wait(15, || ping(&a, "10.91.0.2")),
        "no ping after mod-port up"
    );
    assert!(
        wait(5, || port_status(&out)[before..]
            .iter()
            .any(|m| m.contains("(a)")
                && !m.contains("PORT_DOWN")
                && m.contains("LIVE"))),
        "no PORT_STATUS for the port coming back: {:?}",
        port_status(&out)
    );

    // An operator takes b's interface down behind Vireo's back: the link change is reported.
    sh(&["ip", "link", "set", &b.host_if, "down"]);
    assert!(
        wait(5, || has_status(&out, "b", &["MOD", "LINK_DOWN"])),
        "no PORT_STATUS for b's link: {:?}",
        port_status(&out)
    );
    assert!(
        !has_status(&out, "b", &["PORT_DOWN"]),
        "b's config never changed"
    );
}
