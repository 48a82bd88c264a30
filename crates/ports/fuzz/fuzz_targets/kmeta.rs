//! Fuzz target: the kernel metadata parsers (virtio-net header from `PACKET_VNET_HDR` /
//! `IFF_VNET_HDR`, `PACKET_AUXDATA` control messages) and what the kernel ports do with what
//! they accept (software checksum completion, TCP segmentation) never panic, and a header the
//! check accepts never leads an offload past the frame; the `PACKET_RX_RING` slot header parser
//! (`tpacket2_hdr` offsets from the kernel) never accepts a frame or virtio-net header outside
//! the slot or over the header.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ports::kmeta::{parse_auxdata, parse_tpacket2, VnetHdr, TPACKET2_HDRLEN};

fuzz_target!(|data: &[u8]| {
    let _ = parse_auxdata(data);
    // The whole input as one ring slot, with and without a virtio-net header.
    for vnet in [0, 10] {
        if let Ok(t) = parse_tpacket2(data, vnet) {
            assert!(t.data.start >= TPACKET2_HDRLEN + vnet && t.data.end <= data.len());
            assert!(t.data.len() <= t.len);
            if let Some(v) = &t.vnet {
                assert!(v.start >= TPACKET2_HDRLEN && v.end == t.data.start && v.len() == vnet);
                let _ = &data[v.clone()];
            }
            let _ = &data[t.data.clone()];
        }
    }
    let (hdr, frame) = data.split_at(data.len().min(10));
    let Ok(h) = VnetHdr::parse(hdr) else { return };
    if h.check(frame.len()).is_err() {
        return;
    }
    let mut f = frame.to_vec();
    if h.needs_csum() {
        let r = wire::offload::complete_partial(
            &mut f,
            usize::from(h.csum_start),
            usize::from(h.csum_offset),
        );
        assert!(r.is_ok(), "checked header refused by completion");
        assert_eq!(f.len(), frame.len());
    }
    if h.is_gso() {
        let mut buf = Vec::new();
        let mut total = 0usize;
        let _ = wire::offload::segment_tcp(&f, usize::from(h.gso_size), 9212, &mut buf, |s| {
            assert!(s.len() <= 9212);
            total += 1;
        });
    }
});
