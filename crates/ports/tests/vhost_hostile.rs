//! A hostile frontend and guest against a vhost-user port, through a real unix socket: bad
//! messages, bad fds, bad rings and descriptors. Errors are counted; the port, its other
//! connections-to-be and a neighbouring port keep working.
use packet::{Batch, Packet, Pool};
use ports::vhost_user::VhostUserPort;
use ports::{DropReason, Link, Port};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vhost::frontend::{Frontend, MockGuest};
use vhost::msg::{self, req};
use virtq::mock::TxLayout;
use virtq::ring::{Desc, VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT};

fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

fn errors(p: &VhostUserPort) -> u64 {
    p.status()["protocol_errors"].as_u64().unwrap()
}

fn drops(p: &VhostUserPort, why: DropReason) -> u64 {
    p.stats()
        .drops
        .iter()
        .find(|(r, _)| *r == why)
        .map_or(0, |(_, n)| *n)
}

/// The port still does its job: a fresh guest connects and a packet goes through.
fn still_works(p: &VhostUserPort) {
    assert!(
        wait_until(|| p.status()["state"] == "listening"),
        "{}",
        p.status()
    );
    let mut g = MockGuest::connect(p.path(), 1, 64, u64::MAX).expect("fresh handshake");
    g.rings[1].send(&[0x5a; 80], TxLayout::Single);
    let mut pool = Pool::new(0, 32);
    let mut b = Batch::new();
    assert_eq!(p.rx_burst(0, &mut pool, &mut b), 1);
    assert_eq!(b.as_slice()[0].data(), &[0x5a; 80][..]);
}

#[test]
fn bad_messages_through_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let port = VhostUserPort::server(&dir.path().join("h.sock"), 1).unwrap();
    let neighbour = VhostUserPort::server(&dir.path().join("n.sock"), 1).unwrap();
    let g = MockGuest::connect(port.path(), 1, 64, u64::MAX).unwrap();
    let fe = &g.fe;
    let fd = g.mem_fd.as_fd();
    let e0 = errors(&port);
    let refused = |r: u32, p: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]| {
        assert_eq!(
            fe.request_ack(r, p, fds).unwrap(),
            1,
            "request {r} {p:?} accepted"
        );
    };
    // Bad sizes.
    refused(req::SET_FEATURES, &[0; 4], &[]);
    refused(req::SET_VRING_ADDR, &[0; 39], &[]);
    refused(req::SET_MEM_TABLE, &[1, 0, 0, 0, 0, 0, 0, 0], &[fd]);
    // Bad fd counts.
    refused(req::SET_VRING_KICK, &0u64.to_le_bytes(), &[]);
    refused(req::SET_VRING_CALL, &0x100u64.to_le_bytes(), &[fd]);
    refused(req::GET_FEATURES, &[], &[fd]);
    // Bad queue index, ring sizes.
    refused(req::SET_VRING_NUM, &msg::state_bytes(2, 64), &[]);
    refused(req::SET_VRING_KICK, &(5u64 | 0x100).to_le_bytes(), &[]);
    refused(req::SET_VRING_NUM, &msg::state_bytes(0, 100), &[]);
    refused(req::SET_VRING_NUM, &msg::state_bytes(0, 0), &[]);
    // Region beyond the fd's size; overlapping regions.
    let mut r = g.region;
    r.mmap_offset = 4096;
    refused(req::SET_MEM_TABLE, &msg::mem_bytes(&[r]), &[fd]);
    refused(
        req::SET_MEM_TABLE,
        &msg::mem_bytes(&[g.region, g.region]),
        &[fd, fd],
    );
    // Ring addresses outside guest memory.
    let bad = msg::VringAddr {
        index: 1,
        desc: 0x1000,
        used: 0x2000,
        avail: 0x3000,
        ..Default::default()
    };
    refused(req::SET_VRING_ADDR, &msg::addr_bytes(&bad), &[]);
    assert_eq!(errors(&port) - e0, 13);
    // The connection is still served and the neighbour never noticed.
    assert_eq!(fe.get_u64(req::GET_QUEUE_NUM, &[]).unwrap(), 1);
    assert_eq!(neighbour.status()["protocol_errors"], 0);
    // Too many fds (9 > 8): the connection is dropped, the port survives.
    let fds: Vec<_> = (0..9).map(|_| fd).collect();
    let _ = fe.send_raw(&msg::encode(req::SET_OWNER, 0, &[]), &fds);
    assert!(wait_until(|| port.link() == Link::Down));
    drop(g);
    still_works(&port);
    // Truncated header then hang-up; oversized payload claim.
    for raw in [
        vec![1u8, 0, 0],
        msg::encode(req::SET_OWNER, 0, &[0; 8])[..12].to_vec(),
    ] {
        let mut h = raw.clone();
        if h.len() == 12 {
            h[8..12].copy_from_slice(&(1u32 << 30).to_le_bytes());
        }
        let f = Frontend::connect(port.path()).unwrap();
        f.send_raw(&h, &[]).unwrap();
        drop(f);
    }
    still_works(&port);
}

#[test]
fn hostile_descriptors_and_rings() {
    let dir = tempfile::tempdir().unwrap();
    let port = VhostUserPort::server(&dir.path().join("d.sock"), 1).unwrap();
    let mut g = MockGuest::connect(port.path(), 1, 64, u64::MAX).unwrap();
    let tx = &mut g.rings[1];
    let b0 = tx.buf_addr(0);
    let descs = [
        // Outside guest memory, and wrapping past 2^64.
        Desc {
            addr: 0x4000_0000_0000,
            len: 100,
            flags: 0,
            next: 0,
        },
        Desc {
            addr: u64::MAX - 50,
            len: 100,
            flags: 0,
            next: 0,
        },
        // A loop 2 -> 3 -> 2.
        Desc {
            addr: b0,
            len: 20,
            flags: VIRTQ_DESC_F_NEXT,
            next: 3,
        },
        Desc {
            addr: b0,
            len: 20,
            flags: VIRTQ_DESC_F_NEXT,
            next: 2,
        },
        // An indirect table outside memory, and one of absurd size.
        Desc {
            addr: 0x10,
            len: 32,
            flags: VIRTQ_DESC_F_INDIRECT,
            next: 0,
        },
        Desc {
            addr: b0,
            len: 0xffff_fff0,
            flags: VIRTQ_DESC_F_INDIRECT,
            next: 0,
        },
    ];
    for (i, d) in descs.iter().enumerate() {
        tx.write_desc(i as u16, *d);
    }
    for head in [0, 1, 2, 4, 5] {
        tx.push_avail(head);
    }
    let mut pool = Pool::new(0, 32);
    let mut b = Batch::new();
    assert_eq!(port.rx_burst(0, &mut pool, &mut b), 0);
    assert_eq!(drops(&port, DropReason::Malformed), 5);
    assert_eq!(port.stats().rx_errors, 5);
    assert_eq!(tx.take_used().len(), 5, "bad chains are still returned");
    // An avail index jumping past the ring breaks that queue only.
    tx.set_avail_idx(tx.used_idx().wrapping_add(1000));
    assert_eq!(port.rx_burst(0, &mut pool, &mut b), 0);
    assert_eq!(port.status()["broken_queues"], 1);
    assert_eq!(port.status()["broken_queues_now"], 1);
    // The other direction keeps working.
    g.rings[0].post_rx(4, 2048);
    let mut out = Batch::new();
    out.push(Packet::from_slice(&[7; 64])).unwrap();
    assert_eq!(port.tx_burst(0, &mut out), 1);
    assert_eq!(g.rings[0].recv(true), vec![(1, vec![7; 64])]);
    // A broken guest rx ring: tx drops counted as queue-broken.
    g.rings[0].set_avail_idx(40000);
    assert_eq!(port.tx_burst(0, &mut out), 0);
    assert_eq!(port.tx_burst(0, &mut out), 0);
    assert_eq!(drops(&port, DropReason::QueueBroken), 2);
    assert_eq!(drops(&port, DropReason::QueueFull), 0);
    assert_eq!(port.status()["broken_queues"], 2);
    // The frontend resets the rings: they run again.
    drop(g);
    let port = Arc::new(port);
    still_works(&port);
    assert_eq!(port.status()["broken_queues_now"], 0);
}

/// A guest that posts budget-heavy chains: each burst ends at the descriptor budget, the port
/// counts it (`budget_cuts`, and `burst-cut` drops for packets it could not send), and the
/// guest's costly buffers cost only its own traffic.
#[test]
fn budget_cuts_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let port = VhostUserPort::server(&dir.path().join("b.sock"), 1).unwrap();
    let mut g = MockGuest::connect(port.path(), 1, 1024, u64::MAX).unwrap();
    // Guest tx: one ring-long loop of zero-length descriptors, named by 32 avail entries.
    let tx = &mut g.rings[1];
    for i in 0..1024u16 {
        let d = Desc {
            addr: tx.buf_addr(0),
            len: 0,
            flags: VIRTQ_DESC_F_NEXT,
            next: (i + 1) % 1024,
        };
        tx.write_desc(i, d);
    }
    for _ in 0..32 {
        tx.push_avail(0);
    }
    let mut pool = Pool::new(0, 32);
    let mut b = Batch::new();
    assert_eq!(port.rx_burst(0, &mut pool, &mut b), 0);
    let per_burst = (virtq::BURST_BUDGET / virtq::MAX_CHAIN) as u64;
    assert_eq!(drops(&port, DropReason::Malformed), per_burst);
    assert_eq!(port.stats().budget_cuts, 1);
    assert_eq!(
        tx.take_used().len() as u64,
        per_burst,
        "the rest stays whole"
    );
    // Guest rx: mergeable heads of 5 zero-length descriptors; the budget ends the burst.
    for _ in 0..250 {
        g.rings[0].post_rx_chain(&[0; 5]);
    }
    let mut out = Batch::new();
    for i in 0..32u8 {
        out.push(Packet::from_slice(&[i; 64])).unwrap();
    }
    assert_eq!(port.tx_burst(0, &mut out), 0);
    assert_eq!(drops(&port, DropReason::BurstCut), 32);
    assert_eq!(port.stats().budget_cuts, 2);
    assert!(port.status()["broken_queues"] == 0);
}

#[test]
fn tx_with_no_frontend_is_link_down() {
    let dir = tempfile::tempdir().unwrap();
    let port = VhostUserPort::server(&dir.path().join("x.sock"), 2).unwrap();
    assert_eq!(port.n_rxq(), 2);
    let mut out = Batch::new();
    out.push(Packet::from_slice(&[1; 60])).unwrap();
    assert_eq!(port.tx_burst(3, &mut out), 0);
    assert_eq!(drops(&port, DropReason::LinkDown), 1);
    let mut pool = Pool::new(0, 4);
    assert_eq!(port.rx_burst(1, &mut pool, &mut out), 0);
    assert_eq!(port.rx_burst(99, &mut pool, &mut out), 0);
    assert_eq!(port.rx_burst(usize::MAX, &mut pool, &mut out), 0);
    port.shutdown();
    port.shutdown();
    assert!(!dir.path().join("x.sock").exists());
}

#[test]
fn a_frontend_that_shrinks_its_memory_costs_only_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let port = VhostUserPort::server(&dir.path().join("m.sock"), 1).unwrap();
    let neighbour = VhostUserPort::server(&dir.path().join("mn.sock"), 1).unwrap();
    let mut n = MockGuest::connect(neighbour.path(), 1, 64, u64::MAX).unwrap();
    let mut g = MockGuest::connect(port.path(), 1, 64, u64::MAX).unwrap();
    assert!(wait_until(|| port.link() == Link::Up));
    // Packets posted in the guest's tx ring, then its memory file cut to one page: the rings
    // of ring 1 (guest tx) and every buffer are gone.
    for _ in 0..3 {
        g.rings[1].send(&[3; 90], TxLayout::Single);
    }
    g.rings[0].post_rx(4, 2048);
    rustix::fs::ftruncate(&g.mem_fd, 4096).unwrap();
    // Sending writes into the cut-off rx buffers: that burst finds the loss, its packets are
    // counted as memory-lost drops.
    let mut out = Batch::new();
    out.push(Packet::from_slice(&[7; 64])).unwrap();
    out.push(Packet::from_slice(&[8; 64])).unwrap();
    assert_eq!(port.tx_burst(0, &mut out), 0);
    assert_eq!(
        drops(&port, DropReason::MemoryLost),
        2,
        "{:?}",
        port.stats()
    );
    // Receiving skips the device now (its packets are in lost memory).
    let mut pool = Pool::new(0, 32);
    let mut b = Batch::new();
    assert_eq!(port.rx_burst(0, &mut pool, &mut b), 0);
    assert_eq!(drops(&port, DropReason::LinkDown), 0);
    // The connection is closed and counted; the neighbour never noticed.
    assert!(
        wait_until(|| port.status()["state"] == "listening"),
        "{}",
        port.status()
    );
    assert_eq!(port.stats().memory_lost, 1);
    assert_eq!(port.status()["memory_lost"], 1);
    n.rings[1].send(&[4; 70], TxLayout::Single);
    assert_eq!(neighbour.rx_burst(0, &mut pool, &mut b), 1);
    assert_eq!(neighbour.stats().memory_lost, 0);
    drop(g);
    let port = Arc::new(port);
    still_works(&port);
    assert_eq!(port.stats().memory_lost, 1);
}
