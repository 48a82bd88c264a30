//! Tests of the `af-packet` port's receive ring against the kernel: a veth pair in this
//! namespace (named `tpk…`, deleted on drop), frames sent into one end with a packet socket,
//! read through the port on the other. Need root and iproute2.
use super::*;
use std::process::Command;

/// A veth pair `<name>a`/`<name>b`, up, IPv6 off (no stray frames), deleted on drop.
struct Veth(String);

impl Veth {
    fn new(tag: char) -> Option<Veth> {
        if !nix::unistd::geteuid().is_root() {
            testkit::missing_peer("root (veth, packet sockets)", "sudo");
            return None;
        }
        if !testkit::veth::have_ip() {
            return None;
        }
        let n = format!("tpk{tag}{}", std::process::id() % 100_000);
        let (a, b) = (format!("{n}a"), format!("{n}b"));
        let _ = Command::new("ip").args(["link", "del", &a]).output();
        let v = Veth(n);
        let ip = |args: &[&str]| testkit::veth::must("ip", args);
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        for i in [&a, &b] {
            let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{i}/disable_ipv6"), "1");
            ip(&["link", "set", i, "up"]);
        }
        Some(v)
    }
    fn a(&self) -> String {
        format!("{}a", self.0)
    }
    fn b(&self) -> String {
        format!("{}b", self.0)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.a()]).output();
    }
}

/// The test frames' EtherType (local experimental): anything else on the wire is ignored.
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];

fn frame(seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&ETHERTYPE);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f
}

/// A packet socket on `ifname` that sends with a (zero) virtio-net header.
fn sender(ifname: &str) -> OwnedFd {
    let fd = sys::packet_socket().unwrap();
    sys::set_packet_opt(fd.as_fd(), PacketOpt::VnetHdr, true).unwrap();
    sys::bind_packet(fd.as_fd(), sys::if_index(ifname).unwrap()).unwrap();
    fd
}

/// Sends frames `seqs` of `len` bytes, 32 at a time with a pause between (the receiving
/// veth's backlog must not overflow: only the ring may drop).
fn send(fd: &OwnedFd, seqs: std::ops::Range<u32>, len: usize) {
    let frames: Vec<Vec<u8>> = seqs.map(|s| frame(s, len)).collect();
    let vnets = [[0u8; VNET_HDR_LEN]; MAX_BATCH];
    for chunk in frames.chunks(MAX_BATCH) {
        let refs: Vec<&[u8]> = chunk.iter().map(|f| f.as_slice()).collect();
        let mut at = 0;
        while at < refs.len() {
            at += sys::send_batch(fd.as_fd(), &vnets[..refs.len() - at], &refs[at..]).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
}

/// The sequence numbers (and lengths) of the test frames the port has for us now: read until
/// nothing more came for 100 ms (on a loaded machine the kernel may deliver late).
fn receive(port: &AfPacketPort, pool: &mut Pool) -> Vec<(u32, usize)> {
    let mut got = Vec::new();
    let mut idle = 0;
    while idle < 10 {
        let mut out = Batch::new();
        if port.rx_burst(0, pool, &mut out) == 0 {
            idle += 1;
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        idle = 0;
        for p in out.drain() {
            let d = p.data();
            if d.len() >= 18 && d[12..14] == ETHERTYPE {
                got.push((u32::from_be_bytes(d[14..18].try_into().unwrap()), d.len()));
            }
            pool.put(p);
        }
    }
    got
}

fn seqs(got: &[(u32, usize)]) -> Vec<u32> {
    got.iter().map(|g| g.0).collect()
}

/// A held port's ring fills; what the kernel could not put in it is counted (housekeeping
/// reads `PACKET_STATISTICS`), what it could comes out in order, and jumbo frames pass whole.
#[test]
fn ring_fills_counts_kernel_drops_and_keeps_order() {
    let Some(v) = Veth::new('r') else { return };
    let port = AfPacketPort::open(&v.b()).unwrap();
    assert_eq!(port.status()["rx_ring"]["slots"], ring::FRAMES);
    let tx = sender(&v.a());
    let mut pool = Pool::new(0, 64);
    port.hold_rx(true);
    let n = ring::FRAMES as u32 + 300;
    send(&tx, 0..n, 100);
    port.maintain();
    let st = port.status();
    let dropped = st["kernel_drops"].as_u64().unwrap();
    assert!(
        (300..=310).contains(&dropped),
        "{dropped} kernel drops for {n} frames into {} slots: {st}",
        ring::FRAMES
    );
    let full = port
        .stats()
        .drops
        .iter()
        .find(|d| d.0 == DropReason::QueueFull)
        .map(|d| d.1);
    assert_eq!(full, Some(dropped));
    port.hold_rx(false);
    let got = receive(&port, &mut pool);
    let want: Vec<u32> = (0..ring::FRAMES as u32).collect();
    assert_eq!(seqs(&got), want, "the ring's frames, in order");
    assert!(got.iter().all(|g| g.1 == 100));
    // The ring goes on after a full lap; a jumbo frame (MTU 9000) comes through whole.
    for i in [v.a(), v.b()] {
        sys::set_if_mtu(&i, 9000).unwrap();
    }
    send(&tx, n..n + 10, 100);
    send(&tx, n + 10..n + 11, 9014);
    let got = receive(&port, &mut pool);
    assert_eq!(seqs(&got), (n..n + 11).collect::<Vec<_>>());
    assert_eq!(got[10].1, 9014);
    assert_eq!(port.status()["bad_ring_slots"], 0);
}

/// An upgrade's hand-over: a second port adopts the socket (its ring is mapped again, not
/// replaced) while the first still maps it, and reads on exactly where the first stopped.
#[test]
fn adopted_socket_reads_its_ring_on_where_the_old_reader_stopped() {
    let Some(v) = Veth::new('h') else { return };
    let old = AfPacketPort::open(&v.b()).unwrap();
    let tx = sender(&v.a());
    let mut pool = Pool::new(0, 64);
    send(&tx, 0..50, 80);
    let mut out = Batch::new();
    assert_eq!(old.rx_burst(0, &mut pool, &mut out), 32);
    pool.put_batch(&mut out);
    old.hold_rx(true);
    let new = AfPacketPort::adopt(&v.b(), true, old.dup_fd().unwrap()).unwrap();
    send(&tx, 50..60, 80);
    assert_eq!(
        seqs(&receive(&new, &mut pool)),
        (32..60).collect::<Vec<_>>()
    );
    drop(old);
    send(&tx, 60..70, 80);
    assert_eq!(
        seqs(&receive(&new, &mut pool)),
        (60..70).collect::<Vec<_>>()
    );
}

/// A socket handed over by a vireod without a ring (frames queued on it) gets one; the
/// queued frames come first, then the ring's.
#[test]
fn socket_without_a_ring_gets_one_and_its_queue_is_read_first() {
    let Some(v) = Veth::new('q') else { return };
    let fd = sys::packet_socket().unwrap();
    for o in [
        PacketOpt::VnetHdr,
        PacketOpt::AuxData,
        PacketOpt::IgnoreOutgoing,
    ] {
        sys::set_packet_opt(fd.as_fd(), o, true).unwrap();
    }
    sys::bind_packet(fd.as_fd(), sys::if_index(&v.b()).unwrap()).unwrap();
    let tx = sender(&v.a());
    send(&tx, 0..40, 70);
    // The first 40 must be in the socket's queue before the ring exists (a loaded machine
    // delivers late: a frame still in flight would land in the ring instead).
    std::thread::sleep(std::time::Duration::from_millis(200));
    let port = AfPacketPort::adopt(&v.b(), true, fd).unwrap();
    send(&tx, 40..50, 70);
    let mut pool = Pool::new(0, 64);
    assert_eq!(
        seqs(&receive(&port, &mut pool)),
        (0..50).collect::<Vec<_>>()
    );
}

/// A tagged frame: the receiving veth strips the tag (the slot's `tp_vlan_tci`); the port puts
/// it back in.
#[test]
fn stripped_vlan_tag_is_put_back() {
    let Some(v) = Veth::new('v') else { return };
    let port = AfPacketPort::open(&v.b()).unwrap();
    let tx = sender(&v.a());
    let mut f = frame(7, 64);
    f.splice(12..12, [0x81, 0x00, 0x00, 0x64]);
    let vnets = [[0u8; VNET_HDR_LEN]; 1];
    assert_eq!(sys::send_batch(tx.as_fd(), &vnets, &[&f]).unwrap(), 1);
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut pool = Pool::new(0, 8);
    let mut out = Batch::new();
    let mut got = Vec::new();
    for _ in 0..3 {
        port.rx_burst(0, &mut pool, &mut out);
        got.extend(out.drain().map(|p| p.data().to_vec()));
    }
    assert!(got.contains(&f), "{got:x?} {:?}", port.stats());
}

/// Nothing reads the socket with rx on the ring, so the ENETDOWN the kernel leaves pending on
/// it (bound while the interface was down, or the interface went down and came back) must not
/// fail a send: the first frame after open, and after a down/up, goes out.
#[test]
fn first_send_after_the_interface_comes_up_goes_out() {
    let Some(v) = Veth::new('d') else { return };
    testkit::veth::must("ip", &["link", "set", &v.b(), "down"]);
    let port = AfPacketPort::open(&v.b()).unwrap();
    let sent = |n: u32| {
        let mut b = Batch::new();
        let _ = b.push(Packet::from_slice(&frame(n, 60)));
        port.tx_burst(0, &mut b)
    };
    assert_eq!(sent(1), 1, "{:?}", port.stats());
    testkit::veth::must("ip", &["link", "set", &v.b(), "down"]);
    port.maintain();
    testkit::veth::must("ip", &["link", "set", &v.b(), "up"]);
    port.maintain();
    assert_eq!(sent(2), 1, "{:?}", port.stats());
    assert!(port.stats().drops.is_empty(), "{:?}", port.stats());
}

/// A packet socket receives nothing before it is bound to its interface: a port being opened
/// never takes frames of other interfaces (a socket made with protocol ETH_P_ALL would, until
/// its bind; seen in CI as another test's frames at the head of a new port's ring).
#[test]
fn an_unbound_packet_socket_receives_nothing() {
    let Some(v) = Veth::new('u') else { return };
    let fd = sys::packet_socket().unwrap();
    let tx = sender(&v.a());
    send(&tx, 0..10, 70);
    let mut buf = [0u8; 2048];
    let r = nix::sys::socket::recv(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &mut buf,
        nix::sys::socket::MsgFlags::MSG_DONTWAIT,
    );
    assert_eq!(
        r,
        Err(nix::errno::Errno::EAGAIN),
        "an unbound socket received"
    );
}
