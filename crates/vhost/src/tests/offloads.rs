//! Checksum and TSO offloads: offered, negotiated, honoured both ways, or turned off.
use super::*;

/// Checksum and TSO offloads are offered and negotiated by default, honoured on guest tx (the
/// checked header becomes the packet's offload) and rx (the header says what the packet still
/// needs); `offloads=false` offers none of them.
#[test]
fn offloads_are_offered_negotiated_and_can_be_turned_off() {
    let (_d, ep) = server(1);
    let dev = ep.device().clone();
    let mut g = MockGuest::connect(ep.path(), 1, 256, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    let f = dev.features();
    assert_eq!(
        f & crate::backend::OFFLOAD_FEATURES,
        crate::backend::OFFLOAD_FEATURES
    );
    let names = feat::names(f);
    for n in [
        "csum",
        "guest_csum",
        "host_tso4",
        "host_tso6",
        "guest_tso4",
        "guest_tso6",
    ] {
        assert!(names.iter().any(|x| x == n), "{n} not in {names:?}");
    }
    assert_eq!(dev.guest_offloads(), packet::vnet::Offloads::ALL);
    // A partial checksum from the guest, then one pointing past the frame.
    let mut frame = vec![0u8; 200];
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    let mut h = [0u8; 12];
    h[0] = packet::vnet::F_NEEDS_CSUM;
    h[6] = 34;
    h[8] = 16;
    g.rings[1].send_with_hdr(&h, &frame, TxLayout::Single);
    h[6] = 190;
    g.rings[1].send_with_hdr(&h, &frame, TxLayout::Chained(2));
    let mut pool = Pool::new(0, 64);
    let mut out = Batch::new();
    let b = dev.rx_burst(0, &mut pool, &mut out);
    assert_eq!(b.packets, 1);
    assert_eq!(b.vnet[packet::vnet::VnetError::BadCsum as usize], 1);
    let csum = packet::Offload::Csum {
        start: 34,
        offset: 16,
    };
    assert_eq!(out.as_slice()[0].meta.offload(), csum);
    // To the guest: the header carries the partial checksum.
    g.rings[0].post_rx(8, 2048);
    assert_eq!(dev.tx_burst(0, &out).unwrap().packets, 1);
    let got = g.rings[0].recv_with_hdr(true);
    assert_eq!(&got[0].1[..10], &[1, 0, 52, 0, 0, 0, 34, 0, 16, 0]);
    drop(g);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("off.sock");
    let ep = Endpoint::start_opts(
        &path,
        1,
        Mode::Server,
        crate::sockfile::Access::default(),
        false,
    )
    .unwrap();
    let dev = ep.device().clone();
    let _g = MockGuest::connect(ep.path(), 1, 256, u64::MAX).unwrap();
    assert!(wait_until(|| dev.running_pairs() == 1));
    assert_eq!(dev.features() & crate::backend::OFFLOAD_FEATURES, 0);
    assert_eq!(dev.guest_offloads(), packet::vnet::Offloads::default());
}
