//! Fuzzes the OpenFlow decoder of every version Vireo speaks (1.0, 1.3, 1.4, 1.5; the
//! header's version byte picks the decoder): framing over arbitrary bytes, decoding of each
//! frame (and of the input with its length field patched to fit), and the round-trip
//! property that a decoded message re-encodes in its own version to bytes that decode to a
//! message that re-encodes to the same bytes. A message that decodes in 1.0/1.4/1.5 must
//! also encode in the 1.3 model and decode back. 1.0 FLOW_MODs are also decoded as they are
//! after Nicira's NXT_FLOW_MOD_TABLE_ID (table id in the command's high byte), and 1.0
//! Nicira messages (NXT_FLOW_MOD with an NXM, NXST_FLOW/AGGREGATE) with and without table ids,
//! each re-encoded in its Nicira form, decoded again and re-encoded to the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use openflow::action::{decode_actions, encode_actions};
use openflow::buf::Reader;
use openflow::conn::FrameReader;
use openflow::errors;
use openflow::msg::{decode_versioned, v10};

/// An action list on its own (Nicira actions nest `ct` -> `nat`, set-field, load): decodes
/// without panicking, and what decodes re-encodes to bytes that decode to the same list.
fn check_actions(data: &[u8]) {
    let Ok(acts) = decode_actions(&mut Reader::new(data, errors::BAD_ACTION_BAD_LEN)) else {
        return;
    };
    let mut b = Vec::new();
    encode_actions(&acts, &mut b);
    let back = decode_actions(&mut Reader::new(&b, errors::BAD_ACTION_BAD_LEN))
        .expect("re-encoded actions decode");
    assert_eq!(back, acts, "actions round-trip");
}

/// A 1.0 Nicira message: what decodes re-encodes in its Nicira form to bytes that decode and
/// re-encode to the same bytes.
fn check_nicira(frame: &[u8]) {
    use openflow::msg::Message;
    use v10::nicira::{self, NxMsg};
    let _ = nicira::decode_stats_reply(frame);
    if !nicira::is_nicira(frame) {
        return;
    }
    for tid in [false, true] {
        let Ok((xid, NxMsg::Request(m))) = nicira::decode(frame, tid) else {
            continue;
        };
        let enc = |m: &Message| match m {
            Message::FlowMod(f) => nicira::encode_flow_mod(xid, f, tid).ok(),
            Message::MultipartRequest(r) => nicira::encode_stats_request(xid, r).ok(),
            _ => None,
        };
        let Some(b1) = enc(&m) else { continue };
        let (_, m2) = nicira::decode(&b1, tid).expect("a re-encoded Nicira message decodes");
        let NxMsg::Request(m2) = m2 else {
            panic!("a request re-encodes as a request")
        };
        assert_eq!(enc(&m2), Some(b1), "Nicira encoding is stable");
    }
}

fn check(frame: &[u8]) {
    check_nicira(frame);
    // The 1.0 session's Nicira table-id path (NXT_FLOW_MOD_TABLE_ID state) decodes too.
    let _ = v10::nx_flow_mod_table_id(frame);
    if let Ok((xid, m)) = v10::decode_flow_mod_table_id(frame) {
        let _ = m.encode_version(1, xid);
    }
    let Ok((version, xid, msg)) = decode_versioned(frame) else {
        return;
    };
    if let Ok(b1) = msg.encode_version(version, xid) {
        let (v2, xid2, msg2) = decode_versioned(&b1).expect("a re-encoded message decodes");
        assert_eq!((v2, xid2), (b1[0], xid));
        let b2 = msg2.encode_version(version, xid).expect("re-encodes");
        assert_eq!(b1, b2, "encoding is stable");
    }
    if let Ok(b13) = msg.encode(xid) {
        decode_versioned(&b13).expect("the 1.3 form of a decoded message decodes");
    }
}

fuzz_target!(|data: &[u8]| {
    check_actions(data);
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
