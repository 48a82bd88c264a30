//! Handing a device to another owner (what `vireoctl upgrade` does between two vireods): the
//! fds are duplicated, the first owner lets go of everything (as an exiting process does),
//! and `Device::adopt` carries on with the same program, sockets, UMEM frames and rings; a
//! ping through an echo reflector is answered before and after. Fds that are not what they
//! claim to be, or books that do not fit, are refused with one line and leave the real ones
//! working.
mod common;

use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::time::Duration;
use testkit::veth::{have_ip, NsVeth};
use xsk::{
    Books, Device, DeviceConfig, DeviceFds, ModeInUse, ModeRequest, QueueFds, RxSide, TxSide,
};

fn cfg(ifname: &str) -> DeviceConfig {
    DeviceConfig {
        ifname: ifname.into(),
        queues: 1,
        mode: ModeRequest::Native,
        steer_targets: 0,
        marks: false,
    }
}

/// Pings 10.77.91.2 from the namespace `count` times through a reflector on the halves.
fn ping(net: &NsVeth, rx: &mut RxSide, tx: &mut TxSide, count: u32) {
    ping_to(net, "10.77.91.2", rx, tx, count)
}

/// Pings `to` from the namespace `count` times through a reflector on the halves.
fn ping_to(net: &NsVeth, to: &str, rx: &mut RxSide, tx: &mut TxSide, count: u32) {
    let mut p = net
        .command("ping")
        .args(["-c", &count.to_string(), "-i", "0.2", "-W", "2", to])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (got, sent) = common::reflect(rx, tx, Duration::from_secs(15), || {
        p.try_wait().unwrap().is_some()
    });
    let out = p.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains(&format!("{count} received")),
        "({got} rx, {sent} tx): {text}"
    );
}

/// Duplicates of everything a handed-over device needs.
fn fds(dev: &Device, rx: &RxSide) -> DeviceFds {
    let (link, prog, map) = dev.dup_program().unwrap();
    DeviceFds {
        link,
        prog,
        map,
        queues: vec![rx.dup_fds().unwrap()],
        steer: None,
        marks: None,
    }
}

fn not_an_xdp_socket() -> OwnedFd {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().into()
}

#[test]
fn a_device_handed_over_carries_on_and_bad_fds_are_refused() {
    if !have_ip() {
        return;
    }
    let net = NsVeth::new("vxk-u1", "vxku1h", "vxku1n", "10.77.91.1/24", 1);
    net.exec_must(&[
        "ip",
        "neigh",
        "add",
        "10.77.91.2",
        "lladdr",
        "02:00:00:00:00:02",
        "dev",
        &net.ns_if,
    ]);
    let c = cfg(&net.host_if);
    let mut dev = Device::open(&c).expect("open device");
    assert_eq!(dev.mode(), ModeInUse::Native);
    let (mut rx, mut tx) = dev.take_queues().pop().unwrap();
    ping(&net, &mut rx, &mut tx, 3);
    let books = vec![Books {
        rx_free: rx.free_frames(),
        tx_free: tx.free_frames(),
    }];
    // Refused: each names what is wrong, and leaves the real fds as they were.
    let refused = |f: DeviceFds, b: &[Books], mode: ModeInUse, want: &str| {
        let e = Device::adopt(&c, mode, f, b).unwrap_err().to_string();
        assert!(e.contains(want), "{e:?} does not say {want:?}");
        assert!(!e.contains('\n'), "{e:?}");
    };
    let mut f = fds(&dev, &rx);
    f.queues[0].sock = not_an_xdp_socket();
    refused(f, &books, ModeInUse::Native, "not AF_XDP");
    let mut f = fds(&dev, &rx);
    f.queues[0].umem = std::fs::File::open("/dev/null").unwrap().into();
    refused(f, &books, ModeInUse::Native, "not a memfd");
    let mut f = fds(&dev, &rx);
    f.link = f.map.try_clone().unwrap();
    refused(f, &books, ModeInUse::Native, "handed-over link");
    let mut f = fds(&dev, &rx);
    f.map = f.prog.try_clone().unwrap();
    refused(f, &books, ModeInUse::Native, "handed-over XSKMAP");
    let mut f = fds(&dev, &rx);
    let extra = QueueFds {
        sock: f.queues[0].sock.try_clone().unwrap(),
        umem: f.queues[0].umem.try_clone().unwrap(),
        steered: Vec::new(),
    };
    f.queues.push(extra);
    refused(f, &books, ModeInUse::Native, "2 sockets");
    refused(
        fds(&dev, &rx),
        &books,
        ModeInUse::NativeZeroCopy,
        "zero-copy",
    );
    let bad = vec![Books {
        rx_free: vec![FRAMES],
        tx_free: books[0].tx_free.clone(),
    }];
    refused(fds(&dev, &rx), &bad, ModeInUse::Native, "rx books");
    // The hand-over: the first owner lets go of everything (program fds, sockets, UMEM
    // mappings); the duplicates keep them alive and the program attached.
    let handed = fds(&dev, &rx);
    drop((rx, tx, dev));
    assert!(
        net.host_link().contains("prog/xdp"),
        "the program went with its first owner: {}",
        net.host_link()
    );
    let mut dev = Device::adopt(&c, ModeInUse::Native, handed, &books).expect("adopt");
    let (mut rx, mut tx) = dev.take_queues().pop().unwrap();
    assert_eq!(rx.free_frames().len(), books[0].rx_free.len());
    ping(&net, &mut rx, &mut tx, 5);
    // Every rx frame is accounted for: the fill ring is full again.
    let (ours, kernel) = rx.frames();
    assert_eq!(ours + kernel, FRAMES as usize / 2);
    drop((rx, tx, dev));
    assert!(
        !net.host_link().contains("prog/xdp"),
        "the program outlived its last owner: {}",
        net.host_link()
    );
}

const FRAMES: u32 = xsk::FRAMES_PER_QUEUE;

/// Duplicates of everything a handed-over steering and marking device needs (one queue).
fn steer_fds(dev: &Device, rx: &RxSide, steered: &[RxSide]) -> DeviceFds {
    let (link, prog, map) = dev.dup_program().unwrap();
    let (steer, marks) = dev.dup_maps().unwrap();
    let mut q = rx.dup_fds().unwrap();
    q.steered = steered.iter().map(|s| s.dup_steering().unwrap()).collect();
    DeviceFds {
        link,
        prog,
        map,
        queues: vec![q],
        steer,
        marks,
    }
}

/// A device with `xdp-steering` (one target) and `xdp-mark` is handed over with its steering
/// socket and its steering, counter and mark maps: the map entries are still there, and a
/// ping to the steered MAC is answered through the adopted steering socket (the counters go
/// on). Maps of the wrong shape, maps the program does not use, and a missing steering socket
/// are refused.
#[test]
fn a_steering_device_is_handed_over_with_its_maps_and_steering_sockets() {
    if !have_ip() {
        return;
    }
    let net = NsVeth::new("vxk-u2", "vxku2h", "vxku2n", "10.77.92.1/24", 1);
    let other = NsVeth::new("vxk-u3", "vxku3h", "vxku3n", "10.77.93.1/24", 1);
    let mac = [2, 0, 0, 0, 0, 2];
    net.exec_must(&[
        "ip",
        "neigh",
        "add",
        "10.77.92.2",
        "lladdr",
        "02:00:00:00:00:02",
        "dev",
        &net.ns_if,
    ]);
    let c = DeviceConfig {
        steer_targets: 1,
        marks: true,
        ..cfg(&net.host_if)
    };
    if common::marks_refused(&c) {
        return;
    }
    let mut dev = Device::open(&c).expect("open device");
    dev.steer_set(mac, 0).unwrap();
    let t = xsk::FiveTuple {
        src: [10, 77, 92, 1],
        dst: [10, 77, 92, 2],
        sport: 0,
        dport: 0,
        proto: 1,
    };
    dev.mark_set(&t, 0x0100_0007).unwrap();
    let (rx, mut tx) = dev.take_queues().pop().unwrap();
    let mut steered = dev.take_steered().pop().unwrap();
    ping_to(&net, "10.77.92.2", &mut steered[0], &mut tx, 3);
    let before = dev.steer_stats();
    assert!(before[0].steered[0] >= 3, "{before:?}");
    // Frames the queue socket never saw come through the shared fill side.
    let books = vec![Books {
        rx_free: rx.free_frames(),
        tx_free: tx.free_frames(),
    }];
    let refused = |f: DeviceFds, c: &DeviceConfig, want: &str| {
        let e = Device::adopt(c, ModeInUse::Native, f, &books)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e:?} does not say {want:?}");
        assert!(!e.contains('\n'), "{e:?}");
    };
    // The mark map where the steering map should be: the wrong shape.
    let mut f = steer_fds(&dev, &rx, &steered);
    let m = f.marks.take().unwrap();
    f.marks = f.steer.as_ref().map(|s| s.0.try_clone().unwrap());
    f.steer.as_mut().unwrap().0 = m;
    refused(f, &c, "steering map is not");
    // Another device's steering map (same shape, not this program's).
    let mut odev = Device::open(&DeviceConfig {
        steer_targets: 1,
        marks: true,
        ..cfg(&other.host_if)
    })
    .expect("open the other device");
    let (ost, _) = odev.dup_maps().unwrap();
    let mut f = steer_fds(&dev, &rx, &steered);
    f.steer = ost;
    refused(f, &c, "uses maps");
    drop((odev.take_queues(), odev.take_steered(), odev));
    // No steering socket, or a port configured without steering.
    let mut f = steer_fds(&dev, &rx, &steered);
    f.queues[0].steered.clear();
    refused(f, &c, "0 steering sockets");
    let plain = DeviceConfig {
        steer_targets: 0,
        ..c.clone()
    };
    refused(steer_fds(&dev, &rx, &steered), &plain, "steering sockets");
    let no_marks = DeviceConfig {
        marks: false,
        ..c.clone()
    };
    refused(
        steer_fds(&dev, &rx, &steered),
        &no_marks,
        "maps handed over",
    );
    // The hand-over: the first owner lets go of everything.
    let handed = steer_fds(&dev, &rx, &steered);
    drop((rx, tx, steered, dev));
    let mut dev = Device::adopt(&c, ModeInUse::Native, handed, &books).expect("adopt");
    assert!(dev.steering() && dev.marks());
    assert_eq!(dev.steer_entries().unwrap(), vec![(mac, 0)]);
    assert_eq!(dev.mark_entries().unwrap(), vec![(t, 0x0100_0007)]);
    let (rx, mut tx) = dev.take_queues().pop().unwrap();
    let mut steered = dev.take_steered().pop().unwrap();
    assert_eq!(steered.len(), 1);
    ping_to(&net, "10.77.92.2", &mut steered[0], &mut tx, 5);
    let after = dev.steer_stats();
    assert!(
        after[0].steered[0] >= before[0].steered[0] + 5,
        "{before:?} then {after:?}"
    );
    // Every rx frame is accounted for in the shared fill side.
    let (ours, kernel) = rx.frames();
    assert_eq!(ours + kernel, FRAMES as usize / 2);
}
