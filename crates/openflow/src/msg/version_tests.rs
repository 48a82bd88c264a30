//! Per-version codec tests: every example in 1.0, 1.4 and 1.5 (round trip; lossless where
//! the version can say everything), byte mutations and truncations of each version's
//! encoding (no panic, stable re-encoding), and malformed 1.0/1.4/1.5 messages drawing
//! the error the spec names, written as that version writes it.

use super::*;
use crate::error::OfError;
use crate::version::{OFP10, OFP14, OFP15};

fn frame(version: u8, mtype: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![version, mtype, 0, 0, 0, 0, 0, 9];
    v.extend_from_slice(body);
    let len = v.len() as u16;
    v[2..4].copy_from_slice(&len.to_be_bytes());
    v
}

fn without_bucket_ids(mut m: Message) -> Message {
    let buckets = match &mut m {
        Message::GroupMod(g) => vec![&mut g.buckets],
        Message::MultipartReply(MultipartReply {
            body: MultipartReplyBody::GroupDesc(d),
            ..
        }) => d.iter_mut().map(|g| &mut g.buckets).collect(),
        _ => vec![],
    };
    for b in buckets.into_iter().flatten() {
        b.bucket_id = None;
    }
    m
}

#[test]
fn examples_roundtrip_in_every_version() {
    for v in [OFP10, OFP14, OFP15] {
        let mut encoded = 0;
        for m in examples() {
            let Ok(b) = m.encode_version(v, 7) else {
                continue;
            };
            encoded += 1;
            let (bv, xid, back) =
                decode_versioned(&b).unwrap_or_else(|e| panic!("v{v} {:?}: {e}", m.msg_type()));
            assert_eq!(
                (bv, xid),
                (
                    if matches!(m, Message::Hello(_)) {
                        bv
                    } else {
                        v
                    },
                    7
                )
            );
            assert_eq!(back.encode_version(v, 7).unwrap(), b, "v{v} {m:?}");
            // 1.4 and 1.5 say everything the model holds (1.5 numbers the buckets the
            // model leaves without an id).
            if v != OFP10 {
                assert_eq!(without_bucket_ids(back), without_bucket_ids(m), "v{v}");
            }
        }
        // 1.0 lacks groups, table mods, roles, table features, port desc, async
        // configuration; 1.4 and 1.5 have no QUEUE_GET_CONFIG (two examples).
        let want = match v {
            OFP10 => 22,
            _ => examples().len() - 2,
        };
        assert!(encoded >= want, "v{v}: {encoded} of {}", examples().len());
    }
}

#[test]
fn mutations_and_truncations_of_every_version_never_panic() {
    for v in [OFP10, OFP14, OFP15] {
        for m in examples() {
            let Ok(bytes) = m.encode_version(v, 3) else {
                continue;
            };
            for i in 0..bytes.len() {
                for x in [0u8, 1, 0x7f, 0x80, 0xff, bytes[i] ^ 0x08] {
                    let mut b = bytes.clone();
                    b[i] = x;
                    if let Ok((bv, xid, msg)) = decode_versioned(&b) {
                        if let Ok(b1) = msg.encode_version(bv, xid) {
                            let (_, _, msg2) = decode_versioned(&b1).unwrap();
                            assert_eq!(msg2.encode_version(bv, xid).unwrap(), b1);
                        }
                    }
                }
            }
            for cut in 0..bytes.len() {
                let mut b = bytes[..cut].to_vec();
                if b.len() >= 4 {
                    b[2..4].copy_from_slice(&(cut as u16).to_be_bytes());
                }
                let _ = decode_versioned(&b);
            }
        }
    }
}

/// A 1.0 FLOW_MOD: match (40 bytes, all wildcarded unless `wc` says), cookie, command,
/// timeouts, priority, buffer, out_port, flags, then `actions`.
fn flow_mod10(wc: u32, nw_proto: u8, command: u16, flags: u16, actions: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&wc.to_be_bytes());
    b.extend_from_slice(&[0; 14]);
    b.extend_from_slice(&[0, 0, 0, 0]);
    b.extend_from_slice(&0x0800u16.to_be_bytes());
    b.extend_from_slice(&[0, nw_proto, 0, 0]);
    b.extend_from_slice(&[0; 12]);
    assert_eq!(b.len(), 40);
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&command.to_be_bytes());
    b.extend_from_slice(&[0, 0, 0, 0, 0x80, 0]);
    b.extend_from_slice(&[0xff; 4]);
    b.extend_from_slice(&[0xff, 0xff]);
    b.extend_from_slice(&flags.to_be_bytes());
    b.extend_from_slice(actions);
    frame(OFP10, v10::msg_type::FLOW_MOD, &b)
}

/// (what, frame, error in the model, (type, code) as the frame's version writes it).
type Case = (&'static str, Vec<u8>, OfError, (u16, u16));

/// Each malformed message's error in the model and as the version writes it.
fn check(cases: Vec<Case>) {
    for (what, b, model, wire) in cases {
        let v = b[0];
        let e = decode(&b).expect_err(what);
        assert_eq!(e, model, "{what}");
        let w = e.for_version(v);
        assert_eq!((w.etype, w.code), wire, "{what}");
    }
}

#[test]
fn malformed_1_0_messages_get_1_0_errors() {
    use v10::msg_type as t;
    let all = v10::fields::wildcards::ALL;
    let no_type = all & !v10::fields::wildcards::DL_TYPE & !v10::fields::wildcards::NW_PROTO;
    let output = [0, 0, 0, 8, 0, 2, 0, 0];
    let mut short_match = flow_mod10(all, 0, 0, 0, &[]);
    short_match.truncate(8 + 30);
    short_match[2..4].copy_from_slice(&38u16.to_be_bytes());
    check(vec![
        // NXT_SET_FLOW_FORMAT changes the session: the connection takes it (see
        // `v10::nicira`); the stateless decoder refuses it as a vendor message.
        (
            "vendor message",
            frame(
                OFP10,
                t::VENDOR,
                &[0, 0, 0x23, 0x20, 0, 0, 0, 12, 0, 0, 0, 2],
            ),
            errors::BAD_REQUEST_BAD_EXPERIMENTER,
            (1, 3),
        ),
        (
            "short match",
            short_match,
            errors::BAD_REQUEST_BAD_LEN,
            (1, 6),
        ),
        (
            "bad command",
            flow_mod10(all, 0, 9, 0, &output),
            errors::FLOW_MOD_FAILED_BAD_COMMAND,
            (3, 4),
        ),
        (
            "emergency flow",
            flow_mod10(all, 0, 0, 4, &output),
            errors::FLOW_MOD_FAILED_BAD_FLAGS,
            (1, 5),
        ),
        (
            "unknown action",
            flow_mod10(all, 0, 0, 0, &[0, 99, 0, 8, 0, 0, 0, 0]),
            errors::BAD_ACTION_BAD_TYPE,
            (2, 0),
        ),
        (
            "action length",
            flow_mod10(
                all,
                0,
                0,
                0,
                &[0, 0, 0, 16, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            ),
            errors::BAD_ACTION_BAD_LEN,
            (2, 1),
        ),
        (
            "Nicira vendor action of 8 bytes",
            flow_mod10(all, 0, 0, 0, &[0xff, 0xff, 0, 8, 0, 0, 0x23, 0x20]),
            errors::BAD_ACTION_BAD_LEN,
            (2, 1),
        ),
        (
            "other vendor's action",
            flow_mod10(
                all,
                0,
                0,
                0,
                &[0xff, 0xff, 0, 16, 0, 0, 0x23, 0x21, 0, 14, 0, 0, 0, 0, 0, 0],
            ),
            errors::BAD_ACTION_BAD_EXPERIMENTER,
            (2, 2),
        ),
        (
            "Nicira action of an unknown subtype",
            flow_mod10(
                all,
                0,
                0,
                0,
                &[
                    0xff, 0xff, 0, 16, 0, 0, 0x23, 0x20, 0x12, 0x34, 0, 0, 0, 0, 0, 0,
                ],
            ),
            errors::BAD_ACTION_BAD_EXP_TYPE,
            (2, 3),
        ),
        (
            "mod_tp_dst without a protocol",
            flow_mod10(all, 0, 0, 0, &[0, 10, 0, 8, 0, 80, 0, 0]),
            errors::BAD_ACTION_MATCH_INCONSISTENT,
            (2, 5),
        ),
        (
            "vlan id out of range",
            flow_mod10(no_type, 6, 0, 0, &[0, 1, 0, 8, 0x10, 0, 0, 0]),
            errors::BAD_ACTION_BAD_ARGUMENT,
            (2, 5),
        ),
        (
            "queue stats",
            frame(
                OFP10,
                t::STATS_REQUEST,
                &[0, 5, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
            ),
            errors::BAD_REQUEST_BAD_MULTIPART,
            (1, 2),
        ),
        (
            "vendor stats of another vendor",
            frame(
                OFP10,
                t::STATS_REQUEST,
                &[0xff, 0xff, 0, 0, 0, 0, 0x12, 0x34],
            ),
            errors::BAD_REQUEST_BAD_EXPERIMENTER,
            (1, 3),
        ),
        (
            "Nicira stats of an unknown subtype",
            frame(
                OFP10,
                t::STATS_REQUEST,
                &[
                    0xff, 0xff, 0, 0, 0, 0, 0x23, 0x20, 0, 0, 0, 9, 0, 0, 0, 0, 0xff, 0xff, 0, 0,
                    0xff, 0, 0, 0,
                ],
            ),
            errors::BAD_REQUEST_BAD_EXPERIMENTER,
            (1, 3),
        ),
        (
            "Nicira stats cut short",
            frame(
                OFP10,
                t::STATS_REQUEST,
                &[0xff, 0xff, 0, 0, 0, 0, 0x23, 0x20],
            ),
            errors::BAD_REQUEST_BAD_LEN,
            (1, 6),
        ),
        (
            "queue config, long",
            frame(OFP10, t::QUEUE_GET_CONFIG_REQUEST, &[0, 1, 0, 0, 0, 0]),
            errors::BAD_REQUEST_BAD_LEN,
            (1, 6),
        ),
        (
            "unknown type 22",
            frame(OFP10, 22, &[]),
            errors::BAD_REQUEST_BAD_TYPE,
            (1, 1),
        ),
        (
            "packet-out from a reserved port",
            frame(
                OFP10,
                t::PACKET_OUT,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xf9, 0, 0, 1, 2],
            ),
            errors::BAD_REQUEST_BAD_PORT,
            (1, 5),
        ),
        (
            "port stats body short",
            frame(OFP10, t::STATS_REQUEST, &[0, 4, 0, 0, 0, 1]),
            errors::BAD_REQUEST_BAD_LEN,
            (1, 6),
        ),
    ]);
    // The valid variant of the last action case decodes: the match names TCP.
    let ok = flow_mod10(no_type, 6, 0, 0, &[0, 10, 0, 8, 0, 80, 0, 0]);
    match decode(&ok) {
        Ok((_, Message::FlowMod(fm))) => assert_eq!(
            fm.instructions,
            vec![crate::Instruction::ApplyActions(vec![
                crate::Action::SetField(crate::OxmField::TcpDst(80))
            ])]
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_1_4_and_1_5_messages_get_their_errors() {
    // 1.4 PORT_STATUS whose port claims 16 bytes (at least 40).
    let mut ps = vec![0u8; 8];
    ps.extend_from_slice(&[0, 0, 0, 1, 0, 16, 0, 0]);
    ps.resize(8 + 40, 0);
    // 1.5 PACKET_OUT whose match holds eth_type (only in_port is a pipeline field here).
    let mut po = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
    po.extend_from_slice(&[0, 1, 0, 10, 0x80, 0, 0x0a, 2, 0x08, 0x00, 0, 0, 0, 0, 0, 0]);
    // 1.5 PORT_DESC request cut short (its body is a port number and padding).
    let pd = [0u8, 13, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    check(vec![
        (
            "1.4 short ofp_port",
            frame(OFP14, msg_type::PORT_STATUS, &ps),
            errors::BAD_REQUEST_BAD_LEN,
            (1, 6),
        ),
        (
            "1.5 packet-out with a header field",
            frame(OFP15, msg_type::PACKET_OUT, &po),
            errors::BAD_MATCH_BAD_FIELD,
            (4, 6),
        ),
        (
            "1.5 port-desc request short",
            frame(OFP15, msg_type::MULTIPART_REQUEST, &pd),
            errors::BAD_REQUEST_BAD_LEN,
            (1, 6),
        ),
        (
            "1.5 insert-bucket (bucket editing not supported)",
            frame(
                OFP15,
                msg_type::GROUP_MOD,
                &[0, 3, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff],
            ),
            errors::GROUP_MOD_FAILED_BAD_COMMAND,
            (6, 11),
        ),
        (
            "1.5 bucket array longer than the message",
            frame(
                OFP15,
                msg_type::GROUP_MOD,
                &[0, 0, 0, 0, 0, 0, 0, 1, 0, 64, 0, 0, 0xff, 0xff, 0xff, 0xff],
            ),
            errors::GROUP_MOD_FAILED_BAD_BUCKET,
            (6, 12),
        ),
        (
            "1.4 experimenter",
            frame(
                OFP14,
                msg_type::EXPERIMENTER,
                &[0, 0, 0x23, 0x20, 0, 0, 0, 1],
            ),
            errors::BAD_REQUEST_BAD_EXPERIMENTER,
            (1, 3),
        ),
    ]);
}

#[test]
fn errors_map_to_1_0_codes() {
    let cases = [
        (errors::HELLO_FAILED_INCOMPATIBLE, (0, 0)),
        (errors::BAD_REQUEST_BAD_LEN, (1, 6)),
        (errors::BAD_REQUEST_IS_SLAVE, (1, 5)),
        (errors::BAD_ACTION_BAD_OUT_PORT, (2, 4)),
        (errors::BAD_ACTION_BAD_SET_TYPE, (2, 0)),
        (errors::BAD_MATCH_BAD_PREREQ, (1, 5)),
        (errors::BAD_INSTRUCTION_UNSUP_INST, (1, 5)),
        (errors::FLOW_MOD_FAILED_TABLE_FULL, (3, 0)),
        (errors::FLOW_MOD_FAILED_OVERLAP, (3, 1)),
        (errors::FLOW_MOD_FAILED_EPERM, (3, 2)),
        (errors::FLOW_MOD_FAILED_BAD_COMMAND, (3, 4)),
        (errors::PORT_MOD_FAILED_BAD_PORT, (4, 0)),
        (errors::GROUP_MOD_FAILED_LOOP, (1, 5)),
    ];
    for (e, (t, c)) in cases {
        let w = e.for_version(OFP10);
        assert_eq!((w.etype, w.code), (t, c), "{e}");
        assert_eq!(e.for_version(OFP14), e);
        assert_eq!(e.for_version(OFP15), e);
    }
}

#[test]
fn nicira_flow_mod_table_id() {
    let mut on = vec![1, 4, 0, 24, 0, 0, 0, 5, 0, 0, 0x23, 0x20, 0, 0, 0, 15, 1];
    on.extend_from_slice(&[0; 7]);
    assert_eq!(v10::nx_flow_mod_table_id(&on), Some(true));
    let mut off = on.clone();
    off[16] = 0;
    assert_eq!(v10::nx_flow_mod_table_id(&off), Some(false));
    let mut other = on.clone();
    other[15] = 12; // NXT_SET_FLOW_FORMAT
    assert_eq!(v10::nx_flow_mod_table_id(&other), None);
    assert_eq!(v10::nx_flow_mod_table_id(&on[..20]), None);
    // The command's high byte is the table.
    let output = [0, 0, 0, 8, 0, 2, 0, 0];
    let all = v10::fields::wildcards::ALL;
    let mut add = flow_mod10(all, 0, 0, 0, &output);
    add[56] = 7;
    match v10::decode_flow_mod_table_id(&add) {
        Ok((_, Message::FlowMod(fm))) => assert_eq!(fm.table_id, 7),
        other => panic!("{other:?}"),
    }
    add[56] = 0xff;
    let e = v10::decode_flow_mod_table_id(&add).unwrap_err();
    assert_eq!(e, errors::FLOW_MOD_FAILED_BAD_TABLE_ID);
    assert_eq!(e.for_version(OFP10), OfError::new(1, 5));
    let mut del = flow_mod10(all, 0, 3, 0, &[]);
    del[56] = 0xff;
    match v10::decode_flow_mod_table_id(&del) {
        Ok((_, Message::FlowMod(fm))) => assert_eq!(fm.table_id, TABLE_ALL),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        v10::decode_flow_mod_table_id(&del[..40]),
        Err(errors::BAD_REQUEST_BAD_LEN)
    );
}

#[test]
fn meter_is_an_action_in_1_5_and_an_instruction_before() {
    use crate::action::{Action, Instruction};
    let fm = FlowMod::add(
        5,
        crate::oxm::Match::default(),
        vec![
            Instruction::Meter(3),
            Instruction::ApplyActions(vec![Action::Output {
                port: 2,
                max_len: 0,
            }]),
        ],
    );
    let m = Message::FlowMod(fm);
    let b15 = m.encode_version(OFP15, 1).unwrap();
    let b13 = m.encode_version(OFP_VERSION, 1).unwrap();
    // 1.3: a METER instruction (type 6, length 8) before APPLY_ACTIONS.
    assert!(b13.windows(8).any(|w| w == [0, 6, 0, 8, 0, 0, 0, 3]));
    // 1.5: no meter instruction; APPLY_ACTIONS starts with OFPAT_METER (type 29, length 8).
    assert!(!b15.windows(8).any(|w| w == [0, 6, 0, 8, 0, 0, 0, 3]));
    assert!(b15.windows(8).any(|w| w == [0, 29, 0, 8, 0, 0, 0, 3]));
    let (_, _, back) = decode_versioned(&b15).unwrap();
    assert_eq!(back, m, "1.5 decodes back to the meter instruction");
    // A 1.5 rule whose meter action is not first keeps it as an action (the pipeline refuses
    // it as one it does not know).
    let Message::FlowMod(mut odd) = m else {
        unreachable!()
    };
    odd.instructions = vec![Instruction::ApplyActions(vec![
        Action::Output {
            port: 2,
            max_len: 0,
        },
        Action::Meter(3),
    ])];
    let b = Message::FlowMod(odd.clone())
        .encode_version(OFP15, 1)
        .unwrap();
    let (_, _, back) = decode_versioned(&b).unwrap();
    assert_eq!(back, Message::FlowMod(odd));
}
