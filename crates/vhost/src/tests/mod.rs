//! Unit tests of the vhost-user endpoint against the mock frontend: message syntax and
//! handling, negotiation, multiqueue, client mode, sockets, the control thread under busy PMDs
//! and the packed ring; by subsystem in the submodules.
use crate::frontend::{ack, Frontend, MockGuest};
use crate::msg::{self, feat, req, Header, MsgError};
use crate::{ConnState, Endpoint, Mode};
use packet::{Batch, Pool};
use std::sync::atomic::{AtomicBool, Ordering, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use virtq::mock::TxLayout;

pub(super) fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

pub(super) fn server(pairs: usize) -> (tempfile::TempDir, Endpoint) {
    let dir = tempfile::tempdir().unwrap();
    let ep = Endpoint::start(&dir.path().join("s.sock"), pairs, Mode::Server).unwrap();
    (dir, ep)
}

#[test]
fn header_syntax() {
    let h = Header {
        request: 5,
        flags: 1,
        size: 16,
    };
    assert_eq!(Header::decode(&h.encode()).unwrap(), h);
    let bad_version = Header { flags: 2, ..h };
    assert_eq!(
        Header::decode(&bad_version.encode()),
        Err(MsgError::BadVersion(2))
    );
    let huge = Header { size: 1 << 20, ..h };
    assert_eq!(
        Header::decode(&huge.encode()),
        Err(MsgError::TooLarge(1 << 20))
    );
    assert_eq!(
        feat::names(1 << 32 | 1 << 15 | 1 << 60),
        ["mrg_rxbuf", "version_1", "bit60"]
    );
}

#[test]
fn handshake_then_packets_both_ways() {
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let mut g = MockGuest::connect(ep.path(), 1, 256, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    assert_eq!(dev.conn_state(), ConnState::Connected);
    assert!(dev.numa_node().is_some(), "guest memory NUMA node unknown");
    let f = dev.features();
    for b in [
        feat::VIRTIO_F_VERSION_1,
        feat::VIRTIO_NET_F_MRG_RXBUF,
        feat::VIRTIO_RING_F_EVENT_IDX,
        feat::VIRTIO_RING_F_INDIRECT_DESC,
    ] {
        assert!(f & (1 << b) != 0, "feature {b} not negotiated: {f:#x}");
    }
    // MQ is offered only with more than one pair.
    assert_eq!(f & (1 << feat::VIRTIO_NET_F_MQ), 0);
    // Guest tx (ring 1) → device rx_burst.
    for i in 0..5u8 {
        g.rings[1].send(&[i; 100], TxLayout::Chained(2));
    }
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    assert_eq!(dev.rx_burst(0, &mut pool, &mut out).packets, 5);
    assert_eq!(out.as_slice()[3].data(), &[3u8; 100][..]);
    // device tx_burst → guest rx (ring 0).
    g.rings[0].post_rx(8, 2048);
    let b = dev.tx_burst(0, &out).unwrap();
    assert_eq!(b.packets, 5);
    let got = g.rings[0].recv(true);
    assert_eq!(got.len(), 5);
    assert_eq!(got[4].1, vec![4u8; 100]);
    // Status: both rings running, the guest tx ring taken and used up to 5.
    let rs = dev.ring_states();
    assert_eq!(rs.len(), 2, "{rs:?}");
    let tx = rs.iter().find(|r| r.vring == 1).unwrap();
    assert_eq!(
        (tx.driver_avail, tx.last_avail, tx.used, tx.broken),
        (Some(5), 5, 5, false)
    );
    assert_eq!(rs.iter().find(|r| r.vring == 0).unwrap().used, 5);
    // GET_VRING_BASE stops the ring and reports where the device is.
    g.fe.send(req::GET_VRING_BASE, &msg::state_bytes(1, 0), &[])
        .unwrap();
    let (_, p) = g.fe.recv_reply().unwrap();
    assert_eq!(p, msg::state_bytes(1, 5));
    assert!(wait_until(|| dev.running_pairs() == 0));
    // Disconnect: the device resets and the server listens again.
    drop(g);
    assert!(wait_until(
        || dev.conn_state() == ConnState::Listening && dev.features() == 0
    ));
}

/// Someone reading the status (vireoctl show, every second from a monitoring script) must not
/// make the PMDs drop packets: a status read does not flag the rings as wanted by the
/// control thread, so a PMD's send never finds its ring "down" because of it.
#[test]
fn status_reads_never_turn_sends_into_link_down_drops() {
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let _g = MockGuest::connect(ep.path(), 1, 256, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    let stop = Arc::new(AtomicBool::new(false));
    let (d2, s2) = (dev.clone(), stop.clone());
    let reader = std::thread::spawn(move || {
        let mut reads = 0u64;
        while !s2.load(Ordering::Relaxed) {
            assert_eq!(d2.ring_states().len(), 2);
            assert_eq!(d2.broken_now(), 0);
            reads += 1;
        }
        reads
    });
    let empty = Batch::new();
    let mut down = 0;
    for _ in 0..200_000 {
        if dev.tx_burst(0, &empty).is_none() {
            down += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let reads = reader.join().unwrap();
    assert!(reads > 100, "the status reader barely ran ({reads} reads)");
    assert_eq!(
        down, 0,
        "{down} sends saw the ring down during {reads} status reads"
    );
}

#[test]
fn mem_table_replaced_while_running() {
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let mut g = MockGuest::connect(ep.path(), 1, 64, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    g.rings[1].send(&[1; 60], TxLayout::Single);
    assert_eq!(dev.rx_burst(0, &mut pool, &mut out).packets, 1);
    pool.put_batch(&mut out);
    // Same memory again (as after a hotplug): rings are stopped, remapped and resumed.
    use std::os::fd::AsFd;
    let mb = msg::mem_bytes(&[g.region]);
    ack(&g.fe, req::SET_MEM_TABLE, &mb, &[g.mem_fd.as_fd()]).unwrap();
    assert_eq!(dev.running_pairs(), 1);
    g.rings[1].send(&[2; 60], TxLayout::Single);
    assert_eq!(dev.rx_burst(0, &mut pool, &mut out).packets, 1);
    assert_eq!(out.as_slice()[0].data(), &[2u8; 60][..]);
    // A table that does not cover the rings: refused, the old one stays in use.
    let mut small = g.region;
    small.memory_size = 4096;
    small.userspace_addr += 1 << 30;
    let e = g.fe.request_ack(
        req::SET_MEM_TABLE,
        &msg::mem_bytes(&[small]),
        &[g.mem_fd.as_fd()],
    );
    assert_eq!(e.unwrap(), 1, "rings outside the new table must be refused");
    assert!(dev.stats.protocol_errors.load(Relaxed) >= 1);
}

#[test]
fn multiqueue_offers_mq_and_runs_each_pair() {
    let (_d, ep) = server(2);
    let dev = ep.device().clone();
    let mut g = MockGuest::connect(ep.path(), 2, 64, u64::MAX).unwrap();
    assert!(dev.features() & (1 << feat::VIRTIO_NET_F_MQ) != 0);
    assert_eq!(g.fe.get_u64(req::GET_QUEUE_NUM, &[]).unwrap(), 2);
    assert!(wait_until(|| dev.running_pairs() == 2));
    g.rings[3].send(&[9; 64], TxLayout::Single);
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    assert_eq!(dev.rx_burst(0, &mut pool, &mut out).packets, 0);
    assert_eq!(dev.rx_burst(1, &mut pool, &mut out).packets, 1);
    // Disabling pair 1's rx ring takes the pair down.
    ack(&g.fe, req::SET_VRING_ENABLE, &msg::state_bytes(2, 0), &[]).unwrap();
    assert_eq!(dev.running_pairs(), 1);
}

#[test]
fn bad_messages_are_refused_and_counted_and_the_connection_lives() {
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let g = MockGuest::connect(ep.path(), 1, 64, u64::MAX).unwrap();
    let fe = &g.fe;
    let errs = || dev.stats.protocol_errors.load(Relaxed);
    let before = errs();
    use std::os::fd::AsFd;
    let cases: Vec<(u32, Vec<u8>, bool)> = vec![
        (req::SET_VRING_NUM, msg::state_bytes(0, 3).to_vec(), false), // not a power of two
        (
            req::SET_VRING_NUM,
            msg::state_bytes(0, 65536).to_vec(),
            false,
        ),
        (req::SET_VRING_NUM, msg::state_bytes(7, 64).to_vec(), false), // bad queue index
        (req::SET_VRING_NUM, vec![0; 7], false),                       // bad size
        (
            req::SET_VRING_BASE,
            msg::state_bytes(0, 70000).to_vec(),
            false,
        ),
        (
            req::SET_FEATURES,
            (1u64 << 63).to_le_bytes().to_vec(),
            false,
        ), // not offered
        (req::SET_VRING_KICK, 0u64.to_le_bytes().to_vec(), false), // fd missing
        (req::SET_VRING_CALL, 0x100u64.to_le_bytes().to_vec(), true), // fd but "no fd" flag
        (req::SET_MEM_TABLE, msg::mem_bytes(&[g.region]), false),  // fd missing
        (99, vec![], false),                                       // unknown
        (req::SET_LOG_BASE, vec![0; 16], false),                   // not offered
    ];
    for (i, (r, p, with_fd)) in cases.iter().enumerate() {
        let fds = if *with_fd {
            vec![g.mem_fd.as_fd()]
        } else {
            vec![]
        };
        assert_eq!(fe.request_ack(*r, p, &fds).unwrap(), 1, "case {i} accepted");
    }
    // Region beyond the fd's size, and too many regions.
    let mut big = g.region;
    big.memory_size *= 2;
    assert_eq!(
        fe.request_ack(
            req::SET_MEM_TABLE,
            &msg::mem_bytes(&[big]),
            &[g.mem_fd.as_fd()]
        )
        .unwrap(),
        1
    );
    let nine: Vec<_> = (0..9).map(|_| g.region).collect();
    let fds: Vec<_> = (0..8).map(|_| g.mem_fd.as_fd()).collect();
    assert_eq!(
        fe.request_ack(req::SET_MEM_TABLE, &msg::mem_bytes(&nine), &fds)
            .unwrap(),
        1
    );
    assert_eq!(errs() - before, cases.len() as u64 + 2);
    // Still serving, rings still running.
    assert!(fe.get_u64(req::GET_FEATURES, &[]).unwrap() != 0);
    assert_eq!(dev.running_pairs(), 1);
    // A header we cannot resynchronize after drops the connection; the server accepts again.
    fe.send_raw(&[0xff; 12], &[]).unwrap();
    assert!(wait_until(|| dev.conn_state() == ConnState::Listening));
    let fe2 = Frontend::connect(ep.path()).unwrap();
    assert!(fe2.get_u64(req::GET_FEATURES, &[]).unwrap() != 0);
}

#[test]
fn client_mode_reconnects() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.sock");
    let ep = Endpoint::start(&path, 1, Mode::Client { reconnect_ms: 20 }).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(ep.device().conn_state(), ConnState::Connecting);
    let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    for _ in 0..3 {
        let (s, _) = l.accept().unwrap();
        let g =
            MockGuest::with_frontend(Frontend::from_stream(s).unwrap(), 1, 64, u64::MAX).unwrap();
        assert!(wait_until(|| ep.device().running_pairs() == 1));
        drop(g);
        assert!(wait_until(|| ep.device().running_pairs() == 0));
    }
    // (It may already have reconnected to the still-listening socket.)
    assert!(ep.device().stats.connections.load(Relaxed) >= 3);
    ep.shutdown();
    assert_eq!(ep.device().conn_state(), ConnState::Stopped);
    // A client never removes the frontend's socket.
    assert!(path.exists());
}

#[test]
fn server_replaces_stale_socket_but_not_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let ep = Endpoint::start(&path, 1, Mode::Server).unwrap();
    ep.shutdown();
    assert!(!path.exists());
    std::fs::write(&path, b"x").unwrap();
    assert!(Endpoint::start(&path, 1, Mode::Server).is_err());
    assert!(Endpoint::start(&dir.path().join("z"), 0, Mode::Server).is_err());
}

#[test]
fn control_thread_is_not_starved_by_busy_pmds() {
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let g = MockGuest::connect(ep.path(), 1, 64, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pmds: Vec<_> = (0..2)
        .map(|_| {
            let (dev, stop) = (dev.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut pool = Pool::new(0, 64);
                let mut out = Batch::new();
                let _ = out.push(packet::Packet::from_slice(&[0; 60]));
                while !stop.load(Relaxed) {
                    dev.tx_burst(0, &out);
                    dev.rx_burst(0, &mut pool, &mut Batch::new());
                }
            })
        })
        .collect();
    use std::os::fd::AsFd;
    let mb = msg::mem_bytes(&[g.region]);
    let mut worst = Duration::ZERO;
    for _ in 0..50 {
        let t = Instant::now();
        ack(&g.fe, req::SET_MEM_TABLE, &mb, &[g.mem_fd.as_fd()]).unwrap();
        worst = worst.max(t.elapsed());
    }
    stop.store(true, Relaxed);
    for p in pmds {
        p.join().unwrap();
    }
    assert_eq!(dev.running_pairs(), 1);
    assert!(
        worst < Duration::from_millis(500),
        "memory table update took {worst:?}"
    );
}

/// A packed-ring frontend: negotiates `VIRTIO_F_RING_PACKED`, starts a 100-entry ring (not a
/// power of two) at a base with its wrap counter clear, moves packets both ways across the
/// wrap, and reads the base back (index and wrap counter in bit 15, used half in bits 16..31).
#[test]
fn packed_ring_negotiation_base_and_packets() {
    use crate::msg::{addr_bytes, mem_bytes, state_bytes, VringAddr, VRING_NOFD_MASK};
    use std::os::fd::AsFd;
    use virtq::mock_packed::PackedDriver;
    use virtq::packed::{join_base, split_base};
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let fe = Frontend::connect(ep.path()).unwrap();
    let size = 100u16;
    let per = PackedDriver::memory_size(size);
    let memfd = rustix::fs::memfd_create("vireo-packed", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&memfd, 2 * per).unwrap();
    let region = guestmem::RegionSpec {
        guest_phys_addr: virtq::mock::MOCK_BASE,
        memory_size: 2 * per,
        userspace_addr: 0x7f00_0000_0000,
        mmap_offset: 0,
    };
    let mem = Arc::new(guestmem::GuestMemory::from_fds(&[region], &[memfd.as_fd()]).unwrap());
    let uva = |gpa: u64| gpa - region.guest_phys_addr + region.userspace_addr;
    fe.send(req::SET_OWNER, &[], &[]).unwrap();
    let offered = fe.get_u64(req::GET_FEATURES, &[]).unwrap();
    assert!(
        offered & (1 << feat::VIRTIO_F_RING_PACKED) != 0,
        "{offered:#x}"
    );
    let p = fe.get_u64(req::GET_PROTOCOL_FEATURES, &[]).unwrap();
    fe.send(req::SET_PROTOCOL_FEATURES, &p.to_le_bytes(), &[])
        .unwrap();
    let want = (1u64 << feat::VIRTIO_F_RING_PACKED)
        | (1 << feat::VHOST_USER_F_PROTOCOL_FEATURES)
        | (1 << feat::VIRTIO_F_VERSION_1)
        | (1 << feat::VIRTIO_NET_F_MRG_RXBUF)
        | (1 << feat::VIRTIO_RING_F_INDIRECT_DESC);
    ack(&fe, req::SET_FEATURES, &want.to_le_bytes(), &[]).unwrap();
    ack(
        &fe,
        req::SET_MEM_TABLE,
        &mem_bytes(&[region]),
        &[memfd.as_fd()],
    )
    .unwrap();
    // Both rings resume at position 97 in the driver's second lap (wrap counter 0).
    let start = 97u16;
    let mut rings: Vec<PackedDriver> = (0..2u64)
        .map(|i| {
            PackedDriver::with_memory(
                Arc::clone(&mem),
                virtq::mock::MOCK_BASE + per * i,
                size,
                start,
                false,
                12,
            )
        })
        .collect();
    for (i, r) in rings.iter().enumerate() {
        let idx = i as u32;
        let a = r.addrs();
        ack(
            &fe,
            req::SET_VRING_NUM,
            &state_bytes(idx, u32::from(size)),
            &[],
        )
        .unwrap();
        let base = u32::from(join_base(start, false));
        ack(
            &fe,
            req::SET_VRING_BASE,
            &state_bytes(idx, base | base << 16),
            &[],
        )
        .unwrap();
        let va = VringAddr {
            index: idx,
            flags: 0,
            desc: uva(a.desc),
            used: uva(a.used),
            avail: uva(a.avail),
            log: 0,
        };
        ack(&fe, req::SET_VRING_ADDR, &addr_bytes(&va), &[]).unwrap();
        let nofd = (u64::from(idx) | VRING_NOFD_MASK).to_le_bytes();
        ack(&fe, req::SET_VRING_CALL, &nofd, &[]).unwrap();
        ack(&fe, req::SET_VRING_KICK, &nofd, &[]).unwrap();
        ack(&fe, req::SET_VRING_ENABLE, &state_bytes(idx, 1), &[]).unwrap();
    }
    assert!(wait_until(|| dev.running_pairs() == 1));
    assert!(dev.features() & (1 << feat::VIRTIO_F_RING_PACKED) != 0);
    // Guest tx (ring 1): 5 chains of 2 descriptors from 97 cross the end of the ring.
    for i in 0..5u8 {
        rings[1].send(&[i; 100], TxLayout::Chained(1));
    }
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    assert_eq!(dev.rx_burst(0, &mut pool, &mut out).packets, 5);
    assert_eq!(out.as_slice()[3].data(), &[3u8; 100][..]);
    // Guest rx (ring 0).
    rings[0].post_rx(8, 2048);
    assert_eq!(dev.tx_burst(0, &out).unwrap().packets, 5);
    let got = rings[0].recv(true);
    assert_eq!(got.len(), 5);
    assert_eq!(got[4].1, vec![4u8; 100]);
    let rs = dev.ring_states();
    let tx = rs.iter().find(|r| r.vring == 1).unwrap();
    assert!(tx.packed && tx.driver_avail.is_none());
    // 97 + 10 = 107 = 100 + 7: position 7, wrap counter toggled to 1.
    assert_eq!(split_base(tx.last_avail), (7, true));
    assert_eq!(tx.used, tx.last_avail);
    // GET_VRING_BASE stops the ring and reports avail and used halves.
    fe.send(req::GET_VRING_BASE, &state_bytes(1, 0), &[])
        .unwrap();
    let (_, body) = fe.recv_reply().unwrap();
    let num = u32::from_le_bytes(body[4..8].try_into().unwrap());
    assert_eq!(num, u32::from(join_base(7, true)) * 0x1_0001);
    drop(fe);
}

mod handover;
mod memory_lost;
mod offloads;
