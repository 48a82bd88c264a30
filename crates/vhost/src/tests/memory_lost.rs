//! Guest memory that shrinks under a running connection (the frontend truncates its memfd):
//! only that connection is lost, and a fresh guest works afterwards.
use super::*;

/// Offset in the mock guest's memfd of ring `i`'s data buffers (past its rings and indirect
/// tables), for `size` entries.
fn data_offset(i: usize, size: u16) -> u64 {
    let per = virtq::mock::MockDriver::memory_size(size);
    per * i as u64 + 3 * 4096 + u64::from(size) * 16 * virtq::mock::MOCK_MAX_IND
}

/// Waits for the backend to give the connection up after its memory was lost, and checks it
/// was counted, the frontend saw the hang-up, and a fresh frontend forwards again.
fn lost_then_fresh_guest_works(ep: &Endpoint, g: MockGuest, lost_before: u64) {
    let dev = ep.device().clone();
    assert!(
        wait_until(|| dev.conn_state() == ConnState::Listening && !dev.memory_lost()),
        "connection not closed after losing memory: {:?}",
        dev.conn_state()
    );
    assert_eq!(dev.stats.memory_lost.load(Relaxed), lost_before + 1);
    assert_eq!(dev.running_pairs(), 0);
    let mut rest = Vec::new();
    use std::io::Read;
    // EOF, or a reset when the backend closed with a message of ours still unread.
    let n = g.fe.stream().read_to_end(&mut rest);
    assert!(
        n.as_ref().map_or_else(
            |e| e.kind() == std::io::ErrorKind::ConnectionReset,
            |_| true
        ),
        "the frontend's socket was not closed: {n:?}"
    );
    drop(g);
    let mut g = MockGuest::connect(ep.path(), 1, 64, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    g.rings[1].send(&[9u8; 80], TxLayout::Single);
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    assert_eq!(dev.rx_burst(0, &mut pool, &mut out).packets, 1);
    assert_eq!(out.as_slice()[0].data(), &[9u8; 80][..]);
    g.rings[0].post_rx(4, 2048);
    assert_eq!(dev.tx_burst(0, &out).unwrap().packets, 1);
    assert_eq!(g.rings[0].recv(true).len(), 1);
    assert!(!dev.memory_lost());
}

#[test]
fn descriptors_into_a_shrunk_memfd_cost_only_the_connection() {
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let mut g = MockGuest::connect(ep.path(), 1, 64, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    // The frontend cuts its memory file just past ring 1's rings: its data buffers are gone.
    rustix::fs::ftruncate(&g.mem_fd, data_offset(1, 64)).unwrap();
    // A tx descriptor pointing into the cut-off part (the rings are still in the file, so the
    // frontend's own writes do not fault).
    let buf = g.rings[1].buf_addr(0);
    g.rings[1].write_desc(
        0,
        virtq::ring::Desc {
            addr: buf,
            len: 200,
            flags: 0,
            next: 0,
        },
    );
    g.rings[1].push_avail(0);
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    // Without the fault handler this copy kills the test process with SIGBUS.
    let b = dev.rx_burst(0, &mut pool, &mut out);
    assert_eq!((b.packets, out.len()), (0, 0), "{b:?}");
    assert!(dev.memory_lost());
    assert_eq!(dev.stats.memory_lost_drops.load(Relaxed), 1);
    // Every later burst skips the device without touching its memory.
    assert_eq!(dev.rx_burst(0, &mut pool, &mut out).packets, 0);
    let frames = {
        let mut b = Batch::new();
        b.push(packet::Packet::from_slice(&[1u8; 60])).unwrap();
        b
    };
    assert_eq!(dev.tx_burst(0, &frames).map(|b| b.packets), Some(0));
    assert_eq!(dev.stats.memory_lost_drops.load(Relaxed), 2);
    lost_then_fresh_guest_works(&ep, g, 0);
}

#[test]
fn rings_in_a_shrunk_memfd_cost_only_the_connection() {
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let g = MockGuest::connect(ep.path(), 1, 64, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    // Ring 1 (guest tx) lives past the first MockDriver::memory_size bytes: cut it all off.
    rustix::fs::ftruncate(&g.mem_fd, data_offset(0, 64)).unwrap();
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    assert_eq!(dev.rx_burst(0, &mut pool, &mut out).packets, 0);
    assert!(dev.memory_lost());
    lost_then_fresh_guest_works(&ep, g, 0);
}

#[test]
fn rx_buffers_in_a_shrunk_memfd_cost_only_the_connection() {
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let mut g = MockGuest::connect(ep.path(), 1, 64, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    g.rings[0].post_rx(4, 2048);
    // Ring 0's (guest rx) buffers are cut off after they were posted.
    rustix::fs::ftruncate(&g.mem_fd, data_offset(0, 64)).unwrap();
    let mut frames = Batch::new();
    for _ in 0..3 {
        frames
            .push(packet::Packet::from_slice(&[2u8; 100]))
            .unwrap();
    }
    let b = dev.tx_burst(0, &frames).unwrap();
    assert_eq!(b.packets, 0, "{b:?}");
    assert!(dev.memory_lost());
    assert_eq!(dev.stats.memory_lost_drops.load(Relaxed), 3);
    lost_then_fresh_guest_works(&ep, g, 0);
}

#[test]
fn a_status_read_that_finds_memory_lost_closes_the_connection_too() {
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let g = MockGuest::connect(ep.path(), 1, 64, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    rustix::fs::ftruncate(&g.mem_fd, 0).unwrap();
    // No PMD polls here: the status read is the first to touch the lost rings.
    let rs = dev.ring_states();
    assert!(rs.iter().all(|r| r.broken), "{rs:?}");
    lost_then_fresh_guest_works(&ep, g, 0);
}

/// A fresh memfd as big as the mock guest's.
fn fresh_memfd(g: &MockGuest) -> std::os::fd::OwnedFd {
    let fd =
        rustix::fs::memfd_create("vireo-test-new-table", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, g.region.memory_size).unwrap();
    fd
}

#[test]
fn memory_lost_around_a_memory_table_update_costs_only_the_connection() {
    use std::os::fd::AsFd;
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();

    // The old table is lost (a PMD burst faults on it), then an update arrives: the update
    // does not hide the loss.
    let g = MockGuest::connect(ep.path(), 1, 64, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    rustix::fs::ftruncate(&g.mem_fd, 0).unwrap();
    assert_eq!(dev.rx_burst(0, &mut pool, &mut out).packets, 0);
    assert!(dev.memory_lost());
    let f2 = fresh_memfd(&g);
    g.fe.send(
        req::SET_MEM_TABLE,
        &msg::mem_bytes(&[g.region]),
        &[f2.as_fd()],
    )
    .unwrap();
    lost_then_fresh_guest_works(&ep, g, 0);

    // The new table is cut right after the update installed it and the rings moved into it.
    let g = MockGuest::connect(ep.path(), 1, 64, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    let f2 = fresh_memfd(&g);
    ack(
        &g.fe,
        req::SET_MEM_TABLE,
        &msg::mem_bytes(&[g.region]),
        &[f2.as_fd()],
    )
    .unwrap();
    assert_eq!(dev.running_pairs(), 1);
    rustix::fs::ftruncate(&f2, 4096).unwrap();
    assert_eq!(dev.rx_burst(0, &mut pool, &mut out).packets, 0);
    assert!(dev.memory_lost());
    lost_then_fresh_guest_works(&ep, g, 1);
}
