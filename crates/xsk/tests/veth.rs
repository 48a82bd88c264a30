//! AF_XDP sockets on real veth pairs in network namespaces: a ping from the namespace is
//! answered by an echo reflector on the socket, in native and generic XDP mode; the program is
//! attached while the device lives and gone after; bad input gives one-line errors.
mod common;

use std::process::Stdio;
use std::time::Duration;
use testkit::veth::{have_ip, NsVeth};
use xsk::{Device, DeviceConfig, ModeInUse, ModeRequest, FRAMES_PER_QUEUE, RING_SIZE};

fn cfg(ifname: &str, queues: u32, mode: ModeRequest) -> DeviceConfig {
    DeviceConfig {
        ifname: ifname.into(),
        queues,
        mode,
        steer_targets: 0,
        marks: false,
    }
}

fn ping_through(mode: ModeRequest, n: u32, want: ModeInUse) {
    let net = NsVeth::new(
        &format!("vxk-e{n}"),
        &format!("vxke{n}h"),
        &format!("vxke{n}n"),
        &format!("10.77.{n}.1/24"),
        1,
    );
    net.exec_must(&[
        "ip",
        "neigh",
        "add",
        &format!("10.77.{n}.2"),
        "lladdr",
        "02:00:00:00:00:02",
        "dev",
        &net.ns_if,
    ]);
    let mut dev = Device::open(&cfg(&net.host_if, 1, mode)).expect("open device");
    assert_eq!(dev.mode(), want);
    let link = net.host_link();
    assert!(link.contains("prog/xdp"), "no XDP program attached: {link}");
    let expect_tag = if want == ModeInUse::Generic {
        "xdpgeneric"
    } else {
        "xdp "
    };
    assert!(
        link.contains(expect_tag),
        "wrong attach mode (want {expect_tag:?}): {link}"
    );
    let (mut rx, mut tx) = dev.take_queues().pop().unwrap();
    let mut ping = net
        .command("ping")
        .args(["-c", "5", "-i", "0.2", "-W", "2", &format!("10.77.{n}.2")])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut status = None;
    let (got, sent) = common::reflect(&mut rx, &mut tx, Duration::from_secs(15), || {
        status = ping.try_wait().unwrap();
        status.is_some()
    });
    let out = ping.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ping through the AF_XDP reflector failed ({got} rx, {sent} tx): {text}"
    );
    assert!(text.contains("5 received"), "{text}");
    assert!(got >= 5 && sent >= 5, "rx {got} tx {sent}");
    // No frame was lost, and the fill ring is full again (every received frame went back).
    let (ours, kernel) = rx.frames();
    assert_eq!(ours + kernel, FRAMES_PER_QUEUE as usize / 2);
    assert_eq!(
        kernel, RING_SIZE as usize,
        "rx frames not returned to the fill ring"
    );
    // Every sent frame comes back through the completion ring.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while tx.frames().1 > 0 && std::time::Instant::now() < deadline {
        tx.send(std::iter::empty());
        std::thread::sleep(Duration::from_millis(10));
    }
    let (t_ours, t_kernel) = tx.frames();
    assert_eq!(t_ours + t_kernel, FRAMES_PER_QUEUE as usize / 2);
    assert_eq!(t_kernel, 0, "tx frames not completed");
    drop((rx, tx));
    drop(dev);
    let link = net.host_link();
    assert!(
        !link.contains("xdp"),
        "XDP program left after the device was dropped: {link}"
    );
}

#[test]
fn ping_is_answered_through_a_native_mode_socket() {
    if !have_ip() {
        return;
    }
    ping_through(ModeRequest::Native, 1, ModeInUse::Native);
}

#[test]
fn ping_is_answered_through_a_generic_mode_socket() {
    if !have_ip() {
        return;
    }
    ping_through(ModeRequest::Generic, 2, ModeInUse::Generic);
}

#[test]
fn best_effort_on_veth_falls_back_from_zero_copy_to_native() {
    if !have_ip() {
        return;
    }
    ping_through(ModeRequest::BestEffort, 3, ModeInUse::Native);
}

#[test]
fn bad_interfaces_and_queues_are_one_line_errors_and_leave_nothing() {
    if !have_ip() {
        return;
    }
    let e = Device::open(&cfg("vxk-nope0", 1, ModeRequest::BestEffort))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no interface \"vxk-nope0\""), "{e}");
    assert!(!e.contains('\n'));
    let net = NsVeth::new("vxk-e4", "vxke4h", "vxke4n", "10.77.4.1/24", 1);
    // More queues than the veth has: the bind of queue 1 fails, nothing stays attached.
    let e = Device::open(&cfg(&net.host_if, 2, ModeRequest::Generic))
        .unwrap_err()
        .to_string();
    assert!(e.contains("bind queue 1"), "{e}");
    assert!(!e.contains('\n'));
    assert!(!net.host_link().contains("xdp"), "{}", net.host_link());
    // An MTU larger than a frame holds.
    testkit::veth::must("ip", &["link", "set", "dev", &net.host_if, "mtu", "9000"]);
    let e = Device::open(&cfg(&net.host_if, 1, ModeRequest::Generic))
        .unwrap_err()
        .to_string();
    assert!(e.contains("MTU 9000"), "{e}");
    assert!(!net.host_link().contains("xdp"));
}

#[test]
fn a_program_of_ours_left_without_sockets_is_replaced() {
    if !have_ip() {
        return;
    }
    let net = NsVeth::new("vxk-e5", "vxke5h", "vxke5n", "10.77.5.1/24", 1);
    net.exec_must(&[
        "ip",
        "neigh",
        "add",
        "10.77.5.2",
        "lladdr",
        "02:00:00:00:00:02",
        "dev",
        &net.ns_if,
    ]);
    // The first device keeps its program attached but closes its sockets: an earlier Vireo's
    // program with nobody behind it. Opening again detaches it and attaches a new one.
    let mut old = Device::open(&cfg(&net.host_if, 1, ModeRequest::Generic)).unwrap();
    assert_eq!(old.replaced(), 0);
    drop(old.take_queues());
    let mut new = Device::open(&cfg(&net.host_if, 1, ModeRequest::Generic)).expect("replace");
    assert_eq!(new.replaced(), 1);
    let (mut rx, mut tx) = new.take_queues().pop().unwrap();
    let mut ping = net
        .command("ping")
        .args(["-c", "3", "-i", "0.2", "-W", "2", "10.77.5.2"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut st = None;
    common::reflect(&mut rx, &mut tx, Duration::from_secs(10), || {
        st = ping.try_wait().unwrap();
        st.is_some()
    });
    assert!(
        ping.wait().unwrap().success(),
        "ping through the replacing device failed"
    );
    drop(old);
    // The old device's drop does not take the new program away.
    assert!(net.host_link().contains("prog/xdp"), "{}", net.host_link());
    drop((rx, tx, new));
    assert!(!net.host_link().contains("xdp"));
}
