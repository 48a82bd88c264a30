//! Unit tests of the tunnel ports over loopback addresses (127.0.0.0/8): each test binds its
//! own addresses and a port number derived from the process id.
use super::*;
use packet::Batch;
use std::net::{Ipv4Addr, UdpSocket};
use wire::tunnel::{encap_header, GENEVE_PORT, VXLAN_PORT};

fn opts<'a>(kv: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + 'a {
    move |k| kv.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
}

#[test]
fn options_parsed_and_checked() {
    let c = TunnelConfig::parse(
        TunnelKind::Geneve,
        opts(&[("remote_ip", "127.0.0.9"), ("key", "7")]),
    )
    .unwrap();
    assert_eq!(
        (c.dst_port, c.vni, c.local),
        (GENEVE_PORT, Some(7), IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    );
    let c = TunnelConfig::parse(
        TunnelKind::Vxlan,
        opts(&[("remote_ip", "flow"), ("key", "flow")]),
    )
    .unwrap();
    assert_eq!((c.remote, c.vni, c.csum), (None, None, false));
    let c = TunnelConfig::parse(TunnelKind::Vxlan, opts(&[("remote_ip", "10.0.0.1")])).unwrap();
    assert_eq!(c.dst_port, VXLAN_PORT);
    // Flow-based over IPv6 (native tunneling sends to `tun_ipv6_dst`), checksums by default;
    // `csum=false` over IPv6 is allowed (RFC 6935).
    let c = TunnelConfig::parse(
        TunnelKind::Vxlan,
        opts(&[("remote_ip", "flow"), ("local_ip", "fd00::1")]),
    )
    .unwrap();
    assert_eq!((c.remote, c.local.is_ipv6(), c.csum), (None, true, true));
    let c = TunnelConfig::parse(
        TunnelKind::Geneve,
        opts(&[("remote_ip", "fd00::2"), ("csum", "false")]),
    )
    .unwrap();
    assert!(!c.csum);
    for bad in [
        vec![],
        vec![("remote_ip", "::1"), ("local_ip", "flow")],
        vec![("remote_ip", "::1"), ("local_ip", "127.0.0.1")],
        vec![("remote_ip", "10.0.0.1"), ("key", "16777216")],
        vec![("remote_ip", "10.0.0.1"), ("dst_port", "0")],
        vec![("remote_ip", "10.0.0.1"), ("ttl", "0")],
    ] {
        assert!(
            TunnelConfig::parse(TunnelKind::Vxlan, opts(&bad)).is_err(),
            "{bad:?}"
        );
    }
}

/// Two ports on loopback addresses: a frame sent on one comes out of the other; bad
/// datagrams from the remote and datagrams from elsewhere are counted by reason.
#[test]
fn loopback_pair_and_bad_datagrams() {
    let pid = std::process::id();
    let port = 20000 + (pid % 20000) as u16;
    let mk = |l: [u8; 4], r: [u8; 4]| {
        TunnelPort::open(TunnelConfig {
            kind: TunnelKind::Geneve,
            remote: Some(r.into()),
            local: l.into(),
            local_flow: false,
            vni: Some(7),
            dst_port: port,
            csum: false,
            tos: None,
            ttl: None,
            df: true,
        })
        .unwrap()
    };
    let a = mk([127, 0, 0, 2], [127, 0, 0, 3]);
    let b = mk([127, 0, 0, 3], [127, 0, 0, 2]);
    let frame: Vec<u8> = (0..60u8).collect();
    let mut batch = Batch::new();
    batch.push(packet::Packet::from_slice(&frame)).unwrap();
    assert_eq!(a.tx_burst(0, &mut batch), 1);
    assert_eq!(
        batch.as_slice()[0].data(),
        &frame[..],
        "tx restores the frame"
    );
    let mut pool = Pool::new(0, 4);
    let mut out = Batch::new();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while out.is_empty() && std::time::Instant::now() < end {
        b.rx_burst(0, &mut pool, &mut out);
    }
    assert_eq!(out.as_slice()[0].data(), &frame[..]);
    // From the remote, but a wrong VNI and a critical option; then from a stranger.
    let raw = UdpSocket::bind("127.0.0.2:0").unwrap();
    let mut wrong_vni = encap_header(TunnelKind::Geneve, 8).to_vec();
    wrong_vni.extend(&frame);
    let mut crit = vec![0x01, 0, 0x65, 0x58, 0, 0, 7, 0, 0, 1, 0x80, 0];
    crit.extend(&frame);
    let to = ("127.0.0.3", port);
    raw.send_to(&wrong_vni, to).unwrap();
    raw.send_to(&crit, to).unwrap();
    raw.send_to(&[1, 2, 3], to).unwrap();
    let stranger = UdpSocket::bind("127.0.0.4:0").unwrap();
    let mut good = encap_header(TunnelKind::Geneve, 7).to_vec();
    good.extend(&frame);
    stranger.send_to(&good, to).unwrap();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while b.stats().rx_errors < 4 && std::time::Instant::now() < end {
        b.rx_burst(0, &mut pool, &mut out);
    }
    let st = b.status();
    let d = &st["decap_drops"];
    assert_eq!(
        (
            d["vni-mismatch"].as_u64(),
            d["critical-option"].as_u64(),
            d["truncated"].as_u64()
        ),
        (Some(1), Some(1), Some(1)),
        "{st}"
    );
    assert_eq!(d["remote-mismatch"], 1, "{st}");
    assert_eq!(out.len(), 1, "only the good frame came through");
    assert_eq!(b.stats().rx_errors, 4);
}

/// Two ports on one socket (same local address and port, different VNIs): the port that
/// reads hands the other's datagram to its inbox; duplicates and conflicts are refused;
/// the socket closes with its last port.
#[test]
fn ports_share_a_socket_by_remote_and_vni() {
    let port = 40000 + (std::process::id() % 20000) as u16;
    let cfg = |kind, l: [u8; 4], r: [u8; 4], vni| TunnelConfig {
        kind,
        remote: Some(r.into()),
        local: l.into(),
        local_flow: false,
        vni: Some(vni),
        dst_port: port,
        csum: false,
        tos: None,
        ttl: None,
        df: true,
    };
    let vx = TunnelKind::Vxlan;
    let a7 = TunnelPort::open(cfg(vx, [127, 0, 0, 5], [127, 0, 0, 6], 7)).unwrap();
    let a8 = TunnelPort::open(cfg(vx, [127, 0, 0, 5], [127, 0, 0, 6], 8)).unwrap();
    let b7 = TunnelPort::open(cfg(vx, [127, 0, 0, 6], [127, 0, 0, 5], 7)).unwrap();
    let b8 = TunnelPort::open(cfg(vx, [127, 0, 0, 6], [127, 0, 0, 5], 8)).unwrap();
    assert_eq!(a7.status()["ports_on_socket"], 2);
    let dup = TunnelPort::open(cfg(vx, [127, 0, 0, 5], [127, 0, 0, 6], 8)).unwrap_err();
    assert!(dup.0.contains("already has"), "{dup}");
    let other = TunnelPort::open(cfg(TunnelKind::Geneve, [127, 0, 0, 5], [127, 0, 0, 9], 1));
    assert!(other.unwrap_err().0.contains("vxlan"));
    let mut c = cfg(vx, [127, 0, 0, 5], [127, 0, 0, 9], 1);
    c.ttl = Some(9);
    assert!(TunnelPort::open(c).unwrap_err().0.contains("ttl"));

    for (tx, byte) in [(&b7, 7u8), (&b8, 8u8)] {
        let mut batch = Batch::new();
        batch.push(Packet::from_slice(&[byte; 64])).unwrap();
        assert_eq!(tx.tx_burst(0, &mut batch), 1);
    }
    let mut pool = Pool::new(0, 4);
    let (mut o7, mut o8) = (Batch::new(), Batch::new());
    let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
    // Only a7 reads the socket until both datagrams are in.
    while o7.is_empty() || a8.sh.inbox.lock().unwrap().is_empty() {
        assert!(std::time::Instant::now() < end, "datagrams did not arrive");
        a7.rx_burst(0, &mut pool, &mut o7);
    }
    assert_eq!(a8.rx_burst(0, &mut pool, &mut o8), 1);
    assert_eq!(o7.as_slice()[0].data(), &[7u8; 64][..]);
    assert_eq!(o8.as_slice()[0].data(), &[8u8; 64][..]);
    assert_eq!((a7.stats().rx_packets, a8.stats().rx_packets), (1, 1));
    drop((a7, a8, o7, o8));
    // The socket closed with its last port: the address can be bound again.
    UdpSocket::bind(("127.0.0.5", port)).unwrap();
}

/// A flow-based port (`remote_ip=flow,key=flow`) beside a fixed one on the same socket:
/// the fixed one wins its own remote and VNI, the flow one takes any other VNI and marks
/// it as tunnel metadata; output follows the packet's metadata, and a packet without
/// `tun_dst` is dropped and counted.
#[test]
fn flow_based_port_uses_and_sets_tunnel_metadata() {
    let port = 30000 + (std::process::id() % 20000) as u16;
    let cfg = |l: [u8; 4], r: Option<[u8; 4]>, vni: Option<u32>| TunnelConfig {
        kind: TunnelKind::Vxlan,
        remote: r.map(IpAddr::from),
        local: l.into(),
        local_flow: false,
        vni,
        dst_port: port,
        csum: false,
        tos: None,
        ttl: None,
        df: true,
    };
    let (a, b) = ([127, 0, 0, 7], [127, 0, 0, 8]);
    let flow = TunnelPort::open(cfg(a, None, None)).unwrap();
    let fixed = TunnelPort::open(cfg(a, Some(b), Some(9))).unwrap();
    let b5 = TunnelPort::open(cfg(b, Some(a), Some(5))).unwrap();
    let b9 = TunnelPort::open(cfg(b, Some(a), Some(9))).unwrap();
    assert_eq!(flow.status()["key"], "flow");
    for (tx, byte) in [(&b5, 5u8), (&b9, 9u8)] {
        let mut batch = Batch::new();
        batch.push(Packet::from_slice(&[byte; 64])).unwrap();
        assert_eq!(tx.tx_burst(0, &mut batch), 1);
    }
    let mut pool = Pool::new(0, 4);
    let (mut of, mut ox) = (Batch::new(), Batch::new());
    let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while of.is_empty() || fixed.sh.inbox.lock().unwrap().is_empty() {
        assert!(std::time::Instant::now() < end, "datagrams did not arrive");
        flow.rx_burst(0, &mut pool, &mut of);
    }
    assert_eq!(fixed.rx_burst(0, &mut pool, &mut ox), 1);
    let (pf, px) = (&of.as_slice()[0], &ox.as_slice()[0]);
    assert_eq!(pf.data(), &[5u8; 64][..], "VNI 5 went to the flow port");
    assert_eq!(px.data(), &[9u8; 64][..], "VNI 9 went to the fixed port");
    let want = |id| packet::TunMeta {
        id,
        src: u32::from_be_bytes(b),
        dst: u32::from_be_bytes(a),
    };
    assert_eq!((pf.meta.tun, px.meta.tun), (want(5), want(9)));

    // Output: to tun_dst with tun_id's VNI; without tun_dst, dropped and counted.
    let mut batch = Batch::new();
    let mut p = Packet::from_slice(&[0x55; 64]);
    p.meta.tun = packet::TunMeta {
        id: 5,
        src: 0,
        dst: u32::from_be_bytes(b),
    };
    batch.push(p).unwrap();
    batch.push(Packet::from_slice(&[0x66; 64])).unwrap();
    assert_eq!(flow.tx_burst(0, &mut batch), 1);
    assert_eq!(flow.status()["no_tun_dst_drops"], 1);
    assert!(flow.stats().drops.contains(&(DropReason::NoTunnelDst, 1)));
    let mut o5 = Batch::new();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while o5.is_empty() {
        assert!(
            std::time::Instant::now() < end,
            "encap to tun_dst did not arrive"
        );
        b5.rx_burst(0, &mut pool, &mut o5);
        b9.rx_burst(0, &mut pool, &mut o5);
    }
    assert_eq!(o5.as_slice()[0].data(), &[0x55; 64][..]);
    assert_eq!(b5.stats().rx_packets, 1, "it carried VNI 5");
}

/// Batched receive: a burst of datagrams sent by a plain UDP socket is read by one poll with
/// one `recvmmsg` (`rx_batches`), in order and intact; more than a batch's room is read over
/// successive polls (a poll takes at most what fits its batch) without losing any.
#[test]
fn a_burst_is_received_with_one_recvmmsg() {
    let port = 21000 + (std::process::id() % 20000) as u16;
    let (l, r) = ([127, 0, 0, 11], [127, 0, 0, 10]);
    let b = TunnelPort::open(TunnelConfig {
        kind: TunnelKind::Vxlan,
        remote: Some(r.into()),
        local: l.into(),
        local_flow: false,
        vni: Some(3),
        dst_port: port,
        csum: false,
        tos: None,
        ttl: None,
        df: true,
    })
    .unwrap();
    let raw = UdpSocket::bind((Ipv4Addr::from(r), 0)).unwrap();
    let frame = |i: usize| -> Vec<u8> { (0..60 + i).map(|k| (i * 7 + k) as u8).collect() };
    let send = |range: std::ops::Range<usize>| {
        for i in range {
            let mut d = encap_header(TunnelKind::Vxlan, 3).to_vec();
            d.extend(frame(i));
            raw.send_to(&d, (Ipv4Addr::from(l), port)).unwrap();
        }
        // Loopback delivers within the send; the pause only makes that certain.
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let batches = || b.status()["rx_batches"].as_u64().unwrap();
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    assert_eq!(b.rx_burst(0, &mut pool, &mut out), 0);
    assert_eq!(batches(), 0, "an empty poll is no batch");

    send(0..24);
    assert_eq!(
        b.rx_burst(0, &mut pool, &mut out),
        24,
        "one poll took the burst"
    );
    assert_eq!(batches(), 1, "with one recvmmsg");
    for (i, p) in out.as_slice().iter().enumerate() {
        assert_eq!(p.data(), &frame(i)[..], "datagram {i} in order, intact");
        assert_eq!(p.meta.tun.id, 3);
    }
    pool.put_batch(&mut out);

    // 40 datagrams: the first poll fills its batch (32) with one call, the next takes 8.
    send(100..140);
    assert_eq!(b.rx_burst(0, &mut pool, &mut out), packet::BATCH_SIZE);
    assert_eq!(batches(), 2);
    let mut got: Vec<Vec<u8>> = out.drain().map(|p| p.data().to_vec()).collect();
    assert_eq!(b.rx_burst(0, &mut pool, &mut out), 40 - packet::BATCH_SIZE);
    assert_eq!(batches(), 3);
    got.extend(out.drain().map(|p| p.data().to_vec()));
    let want: Vec<Vec<u8>> = (100..140).map(frame).collect();
    assert_eq!(got, want, "all 40 in order");
    assert_eq!(b.stats().rx_packets, 64);
}

/// Batched send: one `tx_burst` to a flow-based port whose packets go to two remote endpoints
/// (`tun_dst` alternating, a VNI each) leaves with one `sendmmsg` (`tx_batches`), and each
/// remote's plain UDP socket receives its share complete and in order, header included; the
/// packets themselves are not changed.
#[test]
fn a_burst_to_two_remotes_leaves_with_one_sendmmsg() {
    let port = 22000 + (std::process::id() % 20000) as u16;
    let (a, r1, r2) = ([127, 0, 0, 12], [127, 0, 0, 13], [127, 0, 0, 14]);
    let flow = TunnelPort::open(TunnelConfig {
        kind: TunnelKind::Geneve,
        remote: None,
        local: a.into(),
        local_flow: false,
        vni: None,
        dst_port: port,
        csum: false,
        tos: None,
        ttl: None,
        df: true,
    })
    .unwrap();
    let peers = [r1, r2].map(|r| {
        let s = UdpSocket::bind((Ipv4Addr::from(r), port)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        s
    });
    let n = 30;
    let mut batch = Batch::new();
    for i in 0..n {
        let mut p = Packet::from_slice(&vec![i as u8; 64 + i]);
        p.meta.tun = packet::TunMeta {
            id: 1000 + i as u32,
            src: 0,
            dst: u32::from_be_bytes(if i % 2 == 0 { r1 } else { r2 }),
        };
        batch.push(p).unwrap();
    }
    assert_eq!(flow.tx_burst(0, &mut batch), n);
    assert_eq!(flow.status()["tx_batches"], 1, "one sendmmsg for the burst");
    assert_eq!(flow.stats().tx_packets, n as u64);
    for (i, p) in batch.as_slice().iter().enumerate() {
        assert_eq!(p.data(), &vec![i as u8; 64 + i][..], "packet {i} unchanged");
    }
    for (k, peer) in peers.iter().enumerate() {
        let mut buf = [0u8; 2048];
        for i in (k..n).step_by(2) {
            let (len, from) = peer.recv_from(&mut buf).unwrap();
            assert_eq!(from.ip(), IpAddr::from(a));
            let mut want = encap_header(TunnelKind::Geneve, 1000 + i as u32).to_vec();
            want.extend(vec![i as u8; 64 + i]);
            assert_eq!(&buf[..len], &want[..], "remote {k}: datagram {i} in order");
        }
    }
}

/// `df_default`: parsed (default true), and on the socket path the socket's
/// `IP_MTU_DISCOVER` is `IP_PMTUDISC_DO` (DF) or `IP_PMTUDISC_INTERFACE` (no DF, still never
/// fragmented locally); two ports on one socket must agree.
#[test]
fn df_default_sets_the_socket_s_dont_fragment_mode() {
    let c = TunnelConfig::parse(TunnelKind::Vxlan, opts(&[("remote_ip", "10.0.0.1")])).unwrap();
    assert!(c.df);
    let c = TunnelConfig::parse(
        TunnelKind::Vxlan,
        opts(&[("remote_ip", "10.0.0.1"), ("df_default", "false")]),
    )
    .unwrap();
    assert!(!c.df);
    assert!(TunnelConfig::parse(
        TunnelKind::Vxlan,
        opts(&[("remote_ip", "10.0.0.1"), ("df_default", "no")]),
    )
    .is_err());
    let pid = std::process::id();
    let port = 30000 + (pid % 20000) as u16;
    let mk = |r: [u8; 4], df: bool| {
        TunnelPort::open(TunnelConfig {
            kind: TunnelKind::Vxlan,
            remote: Some(r.into()),
            local: [127, 0, 0, 5].into(),
            local_flow: false,
            vni: Some(7),
            dst_port: port,
            csum: false,
            tos: None,
            ttl: None,
            df,
        })
    };
    let mode = |p: &TunnelPort| {
        let fd = p.dup_fd().unwrap();
        ksys::sys::pmtudisc(std::os::fd::AsFd::as_fd(&fd)).unwrap()
    };
    let a = mk([127, 0, 0, 6], false).unwrap();
    assert_eq!(mode(&a), libc::IP_PMTUDISC_INTERFACE);
    assert!(
        mk([127, 0, 0, 7], true).is_err(),
        "ports on one socket must agree on df_default"
    );
    assert_eq!(a.status()["df_default"], false);
    drop(a);
    let b = mk([127, 0, 0, 6], true).unwrap();
    assert_eq!(mode(&b), libc::IP_PMTUDISC_DO);
}
