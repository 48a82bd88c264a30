//! Fuzzes the OpenFlow decoder: framing over arbitrary bytes, decoding of each frame (and of
//! the input with its length field patched to fit), and the round-trip property that a
//! decoded message re-encodes to bytes that decode to the same message and re-encode to the
//! same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use openflow::conn::FrameReader;
use openflow::msg::decode;

fn check(frame: &[u8]) {
    let Ok((xid, msg)) = decode(frame) else {
        return;
    };
    let Ok(b1) = msg.encode(xid) else {
        return;
    };
    let (xid2, msg2) = decode(&b1).expect("a re-encoded message decodes");
    assert_eq!(xid2, xid);
    let b2 = msg2.encode(xid).expect("re-encodes");
    assert_eq!(b1, b2, "encoding is stable");
}

fuzz_target!(|data: &[u8]| {
    let mut fr = FrameReader::new();
    fr.push(data);
    while let Ok(Some(frame)) = fr.next_frame() {
        check(&frame);
    }
    if (8..=65535).contains(&data.len()) {
        let mut v = data.to_vec();
        v[2..4].copy_from_slice(&(data.len() as u16).to_be_bytes());
        check(&v);
    }
});
