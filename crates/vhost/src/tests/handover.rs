//! Handing a live connection from one endpoint to another (`vireoctl upgrade` within one
//! process), and handover states the new side refuses.
use super::*;

/// A connection handed from one endpoint to another (what `vireoctl upgrade` does between two
/// processes, here within one): the frontend keeps its socket and rings, the new device takes
/// the next descriptor exactly where the old one stopped (none lost, none taken twice), answers
/// the frontend's next message, and a failed handover (resume without handing over) leaves
/// the old endpoint serving.
#[test]
fn connection_handed_to_another_endpoint_resumes_at_the_same_descriptor() {
    use std::os::fd::OwnedFd;
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let mut g = MockGuest::connect(ep.path(), 1, 256, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    for i in 0..3u8 {
        g.rings[1].send(&[i; 60], TxLayout::Chained(1));
    }
    assert_eq!(dev.rx_burst(0, &mut pool, &mut out).packets, 3);

    // A handover that is abandoned: the old endpoint parks, then resumes and still serves.
    ep.park(Duration::from_secs(3)).unwrap();
    assert_eq!(dev.running_pairs(), 1, "parking must not stop the rings");
    ep.resume(&[]).unwrap();
    assert_eq!(g.fe.get_u64(req::GET_QUEUE_NUM, &[]).unwrap(), 1);

    // The real one.
    ep.park(Duration::from_secs(3)).unwrap();
    let mut fds: Vec<OwnedFd> = Vec::new();
    let h = ep.handover(&mut fds).unwrap().unwrap();
    assert!(h.conn.is_some() && h.listener.is_some(), "{h:?}");
    assert_eq!(h.connections, 1);
    // Two more frames arrive while the old process still polls.
    for i in 3..5u8 {
        g.rings[1].send(&[i; 60], TxLayout::Chained(1));
    }
    for p in out.drain() {
        pool.put(p);
    }
    assert_eq!(dev.rx_burst(0, &mut pool, &mut out).packets, 2);
    // The state survives a round trip through its serialized form.
    let h2: crate::Handover = serde_json::from_str(&serde_json::to_string(&h).unwrap()).unwrap();
    assert_eq!(h, h2);
    let mut fds: Vec<Option<OwnedFd>> = fds.into_iter().map(Some).collect();
    let new = Endpoint::adopt(ep.path(), 1, Mode::Server, true, &h2, &mut fds).unwrap();
    let ndev = new.device().clone();
    assert_eq!(ndev.features(), dev.features());
    assert_eq!(ndev.running_pairs(), 0, "no ring before the switch-over");
    // Held: nothing more is taken from the guest, sends still go through.
    ep.hold_rx(true);
    g.rings[1].send(&[9; 60], TxLayout::Chained(1));
    for p in out.drain() {
        pool.put(p);
    }
    assert_eq!(dev.rx_burst(0, &mut pool, &mut out).packets, 0);
    g.rings[0].post_rx(4, 2048);
    let one = {
        let mut b = Batch::new();
        b.push(packet::Packet::from_slice(&[7; 60])).unwrap();
        b
    };
    assert_eq!(dev.tx_burst(0, &one).map(|b| b.packets), Some(1));
    let bases = ep.hand_over_rings();
    assert_eq!(dev.running_pairs(), 0);
    assert_eq!(dev.running_pairs(), 0);
    // Guest tx ring (1) at 5 (the frame sent during the hold is not taken), guest rx ring (0)
    // at 1.
    assert!(
        bases.contains(&(1, 5)) && bases.contains(&(0, 1)),
        "{bases:?}"
    );
    // The old process leaves the socket file to the new one.
    ep.keep_socket_file();
    drop(ep);
    new.start_rings(&bases).unwrap();
    assert_eq!(ndev.running_pairs(), 1);
    assert_eq!(
        ndev.rx_burst(0, &mut pool, &mut out).packets,
        0,
        "held until resumed"
    );
    new.resume(&bases).unwrap();
    for i in 6..7u8 {
        g.rings[1].send(&[i; 60], TxLayout::Chained(1));
    }
    for p in out.drain() {
        pool.put(p);
    }
    let b = ndev.rx_burst(0, &mut pool, &mut out);
    assert_eq!(
        b.packets, 2,
        "exactly the frame sent during the hold and the new one"
    );
    assert_eq!(out.as_slice()[0].data(), &[9u8; 60][..]);
    assert_eq!(out.as_slice()[1].data(), &[6u8; 60][..]);
    assert_eq!(g.rings[1].take_used().len(), 7, "every frame returned once");
    // The frontend's socket now talks to the new endpoint.
    assert_eq!(g.fe.get_u64(req::GET_QUEUE_NUM, &[]).unwrap(), 1);
    assert_eq!(ndev.stats.connections.load(Relaxed), 1);
    assert!(new.path().exists(), "the socket file stays");
}

/// A handed-over state this build cannot serve is refused before anything runs: a feature it
/// does not offer, another number of rings, a region whose fd did not come. The old endpoint
/// is untouched and serves on.
#[test]
fn handover_state_the_new_side_cannot_serve_is_refused() {
    use std::os::fd::OwnedFd;
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let g = MockGuest::connect(ep.path(), 1, 256, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    ep.park(Duration::from_secs(3)).unwrap();
    let mut fds: Vec<OwnedFd> = Vec::new();
    let h = ep.handover(&mut fds).unwrap().unwrap();
    let attempt = |h: &crate::Handover, pairs: usize, fds: &[OwnedFd]| {
        let mut fds: Vec<Option<OwnedFd>> =
            fds.iter().map(|f| Some(f.try_clone().unwrap())).collect();
        Endpoint::adopt(ep.path(), pairs, Mode::Server, true, h, &mut fds).map(|_| ())
    };
    let mut more = h.clone();
    more.backend.acked |= 1 << 62;
    let e = attempt(&more, 1, &fds).unwrap_err();
    assert!(e.contains("does not offer"), "{e}");
    let e = attempt(&h, 2, &fds).unwrap_err();
    assert!(e.contains("rings handed over"), "{e}");
    let mut gone = h.clone();
    gone.backend.regions[0].fd = 999;
    let e = attempt(&gone, 1, &fds).unwrap_err();
    assert!(e.contains("did not come"), "{e}");
    // The real state is accepted; dropped unused, it leaves the old endpoint's socket file.
    attempt(&h, 1, &fds).unwrap();
    assert!(
        ep.path().exists(),
        "a dropped takeover removed the socket file"
    );
    ep.resume(&[]).unwrap();
    assert_eq!(dev.running_pairs(), 1);
    assert_eq!(g.fe.get_u64(req::GET_QUEUE_NUM, &[]).unwrap(), 1);
}
