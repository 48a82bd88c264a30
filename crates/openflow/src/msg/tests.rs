//! Round-trip and error-code tests for whole messages.

use super::*;
use crate::oxm::{Match, OxmField};

#[test]
fn every_example_roundtrips() {
    for (i, m) in examples().into_iter().enumerate() {
        // 1.4's partial SET_ASYNC has no 1.3 form (tested in `version_tests`).
        let Ok(bytes) = m.encode(i as u32) else {
            assert!(matches!(m, Message::SetAsyncProps(_)), "{m:?}");
            continue;
        };
        assert_eq!(
            usize::from(Header::parse(&bytes).unwrap().length),
            bytes.len()
        );
        let (xid, back) = decode(&bytes).unwrap_or_else(|e| panic!("{m:?}: {e}"));
        assert_eq!(xid, i as u32);
        assert_eq!(back, m);
        assert_eq!(
            back.encode(i as u32).unwrap(),
            bytes,
            "canonical re-encode of {m:?}"
        );
    }
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    for m in examples() {
        let Ok(bytes) = m.encode(1) else { continue };
        for cut in 0..bytes.len() {
            let mut b = bytes[..cut].to_vec();
            if b.len() >= 4 {
                b[2..4].copy_from_slice(&(cut as u16).to_be_bytes());
            }
            if let Ok((_, back)) = decode(&b) {
                // Only messages with trailing free-form data may decode shorter.
                assert!(matches!(
                    back,
                    Message::EchoRequest(_)
                        | Message::EchoReply(_)
                        | Message::Error(_)
                        | Message::Hello(_)
                        | Message::PacketIn(_)
                        | Message::PacketOut(_)
                        | Message::FlowMod(_)
                        | Message::GroupMod(_)
                        | Message::MeterMod(_)
                        | Message::MultipartReply(_)
                        | Message::MultipartRequest(MultipartRequest {
                            body: MultipartRequestBody::TableFeatures(_),
                            ..
                        })
                ));
            }
        }
    }
}

fn frame(version: u8, mtype: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![version, mtype, 0, 0, 0, 0, 0, 9];
    v.extend_from_slice(body);
    let len = v.len() as u16;
    v[2..4].copy_from_slice(&len.to_be_bytes());
    v
}

#[test]
fn header_errors() {
    assert_eq!(decode(&[4, 0, 0]), Err(errors::BAD_REQUEST_BAD_LEN));
    let mut b = frame(4, msg_type::BARRIER_REQUEST, &[]);
    b[3] = 9;
    assert_eq!(decode(&b), Err(errors::BAD_REQUEST_BAD_LEN));
    // 1.1 and 1.2 are not spoken; 1.0 has no type 22.
    for v in [2, 3, 7] {
        assert_eq!(
            decode(&frame(v, msg_type::BARRIER_REQUEST, &[])),
            Err(errors::BAD_REQUEST_BAD_VERSION)
        );
    }
    assert_eq!(
        decode(&frame(1, msg_type::QUEUE_GET_CONFIG_REQUEST, &[])),
        Err(errors::BAD_REQUEST_BAD_TYPE)
    );
    assert_eq!(
        decode(&frame(4, 200, &[])),
        Err(errors::BAD_REQUEST_BAD_TYPE)
    );
    assert_eq!(
        decode(&frame(4, msg_type::EXPERIMENTER, &[0; 8])),
        Err(errors::BAD_REQUEST_BAD_EXPERIMENTER)
    );
    assert_eq!(
        decode(&frame(4, msg_type::BARRIER_REQUEST, &[0])),
        Err(errors::BAD_REQUEST_BAD_LEN)
    );
    // A HELLO of another version decodes, and negotiation refuses it.
    let (_, h) = decode(&frame(1, msg_type::HELLO, &[])).unwrap();
    match h {
        Message::Hello(h) => assert_eq!(h.negotiate(), Err(errors::HELLO_FAILED_INCOMPATIBLE)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn hello_negotiation() {
    let ours = Hello::default();
    assert_eq!(ours.negotiate(), Ok(OFP_VERSION));
    assert_eq!(
        Hello {
            version: 6,
            bitmap: None
        }
        .negotiate(),
        Ok(OFP_VERSION)
    );
    assert_eq!(
        Hello {
            version: 6,
            bitmap: Some(vec![0b10_0010])
        }
        .negotiate(),
        Err(errors::HELLO_FAILED_INCOMPATIBLE)
    );
    assert_eq!(
        Hello {
            version: 6,
            bitmap: Some(vec![0b11_0010])
        }
        .negotiate(),
        Ok(OFP_VERSION)
    );
}

fn flow_mod_bytes(f: impl FnOnce(&mut FlowMod)) -> Vec<u8> {
    let mut fm = FlowMod::add(1, Match::default(), Vec::new());
    f(&mut fm);
    Message::FlowMod(fm).encode(5).unwrap()
}

#[test]
fn flow_mod_errors() {
    let bad_cmd = {
        let mut b = flow_mod_bytes(|_| {});
        b[8 + 17] = 9;
        b
    };
    assert_eq!(decode(&bad_cmd), Err(errors::FLOW_MOD_FAILED_BAD_COMMAND));
    let b = flow_mod_bytes(|f| f.flags = 0x100);
    assert_eq!(decode(&b), Err(errors::FLOW_MOD_FAILED_BAD_FLAGS));
    let b = flow_mod_bytes(|f| f.table_id = 0xff);
    assert_eq!(decode(&b), Err(errors::FLOW_MOD_FAILED_BAD_TABLE_ID));
    let b = flow_mod_bytes(|f| f.matches = Match::new(vec![OxmField::TcpDst(80)]));
    assert_eq!(decode(&b), Err(errors::BAD_MATCH_BAD_PREREQ));
    let b =
        flow_mod_bytes(|f| f.matches = Match::new(vec![OxmField::InPort(1), OxmField::InPort(2)]));
    assert_eq!(decode(&b), Err(errors::BAD_MATCH_DUP_FIELD));
}

#[test]
fn unsupported_multipart_is_bad_multipart() {
    // 14 is 1.4's TABLE_DESC, 15 QUEUE_DESC: not 1.3 types.
    for t in [14u8, 15, 0xfe] {
        let b = frame(4, msg_type::MULTIPART_REQUEST, &[0, t, 0, 0, 0, 0, 0, 0]);
        assert_eq!(decode(&b), Err(errors::BAD_REQUEST_BAD_MULTIPART), "{t}");
    }
}

#[test]
fn large_replies_split_with_more_flag() {
    let ports: Vec<Port> = (0..2000)
        .map(|n| Port {
            port_no: n,
            ..Default::default()
        })
        .collect();
    let reply = MultipartReply::new(MultipartReplyBody::PortDesc(ports.clone()));
    assert!(Message::MultipartReply(reply.clone()).encode(1).is_err());
    let parts = reply.split(MAX_MSG_LEN);
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0].flags, MULTIPART_MORE);
    assert_eq!(parts[1].flags, 0);
    let mut back = Vec::new();
    for p in parts {
        let bytes = Message::MultipartReply(p).encode(1).unwrap();
        assert!(bytes.len() <= MAX_MSG_LEN);
        match decode(&bytes).unwrap().1 {
            Message::MultipartReply(MultipartReply {
                body: MultipartReplyBody::PortDesc(v),
                ..
            }) => back.extend(v),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(back, ports);
}

#[test]
fn error_reply_carries_64_bytes() {
    let req = vec![7u8; 100];
    let e = ErrorMsg::for_request(errors::BAD_MATCH_BAD_FIELD, &req);
    assert_eq!(e.data.len(), 64);
    assert_eq!(e.error(), errors::BAD_MATCH_BAD_FIELD);
}

/// The fuzz target's property, run over every single-byte mutation of every example: no
/// panic, and anything that decodes re-encodes stably.
#[test]
fn byte_mutations_never_panic_and_roundtrip() {
    for m in examples() {
        let Ok(bytes) = m.encode(3) else { continue };
        for i in 0..bytes.len() {
            for v in [0u8, 1, 0x7f, 0x80, 0xff, bytes[i] ^ 0x08] {
                let mut b = bytes.clone();
                b[i] = v;
                if let Ok((xid, msg)) = decode(&b) {
                    let b1 = msg.encode(xid).unwrap();
                    let (_, msg2) = decode(&b1).unwrap();
                    assert_eq!(msg2.encode(xid).unwrap(), b1);
                }
            }
        }
    }
}

#[test]
fn async_config_wire_layout_defaults_and_filtering() {
    // 1.3 `ofp_async_config`: six u32 masks after the header, 32 bytes in all.
    let c = AsyncConfig {
        packet_in: [1, 2],
        port_status: [3, 4],
        flow_removed: [5, 6],
        ..AsyncConfig::default()
    };
    let b = Message::SetAsync(c).encode(9).unwrap();
    assert_eq!(&b[..8], &[4, 28, 0, 32, 0, 0, 0, 9]);
    let words: Vec<u32> = b[8..]
        .chunks(4)
        .map(|w| u32::from_be_bytes(w.try_into().unwrap()))
        .collect();
    assert_eq!(words, [1, 2, 3, 4, 5, 6]);
    assert_eq!(decode(&b).unwrap(), (9, Message::SetAsync(c)));
    let req = Message::GetAsyncRequest.encode(3).unwrap();
    assert_eq!(req, [4, 26, 0, 8, 0, 0, 0, 3]);
    // A GET_ASYNC_REQUEST with a body, a short SET_ASYNC: BAD_LEN.
    let mut long = req.clone();
    long.extend_from_slice(&[0; 4]);
    long[3] = 12;
    assert_eq!(decode(&long), Err(errors::BAD_REQUEST_BAD_LEN));
    let mut short = b[..28].to_vec();
    short[3] = 28;
    assert_eq!(decode(&short), Err(errors::BAD_REQUEST_BAD_LEN));
    // 1.0 has no such message.
    let mut x = req.clone();
    x[0] = 1;
    assert_eq!(decode(&x), Err(errors::BAD_REQUEST_BAD_TYPE));
    assert!(Message::GetAsyncReply(c).encode_version(1, 1).is_err());
    // Defaults (1.3.1 §6.1.1): master/equal get no-match and action packet-ins, every port
    // status and flow-removed; slaves get port status only.
    let d = AsyncConfig::default();
    let pi = |reason| {
        Message::PacketIn(PacketIn {
            buffer_id: NO_BUFFER,
            total_len: 0,
            reason,
            table_id: 0,
            cookie: 0,
            matches: Match::default(),
            data: Vec::new(),
        })
    };
    let ps = |reason| {
        Message::PortStatus(PortStatus {
            reason,
            desc: Port::default(),
        })
    };
    let fr = |reason| {
        Message::FlowRemoved(FlowRemoved {
            cookie: 0,
            priority: 0,
            reason,
            table_id: 0,
            duration_sec: 0,
            duration_nsec: 0,
            idle_timeout: 0,
            hard_timeout: 0,
            packet_count: 0,
            byte_count: 0,
            matches: Match::default(),
        })
    };
    for role in [Role::Master, Role::Equal] {
        assert!(d.wants(role, &pi(0)) && d.wants(role, &pi(1)) && !d.wants(role, &pi(2)));
        assert!((0..3).all(|r| d.wants(role, &ps(r))));
        assert!((0..4).all(|r| d.wants(role, &fr(r))));
    }
    assert!((0..3).all(|r| !d.wants(Role::Slave, &pi(r))));
    assert!((0..3).all(|r| d.wants(Role::Slave, &ps(r))));
    assert!((0..4).all(|r| !d.wants(Role::Slave, &fr(r))));
    // Per-role masks apply; a reason beyond 31 is never wanted (no shift overflow).
    let c = AsyncConfig {
        packet_in: [0, 0b100],
        port_status: [0b010, 0],
        flow_removed: [0b1000, 0b0001],
        ..AsyncConfig::default()
    };
    assert!(c.wants(Role::Slave, &pi(2)) && !c.wants(Role::Master, &pi(2)));
    assert!(c.wants(Role::Equal, &ps(1)) && !c.wants(Role::Equal, &ps(0)));
    assert!(!c.wants(Role::Slave, &ps(1)));
    assert!(c.wants(Role::Master, &fr(3)) && c.wants(Role::Slave, &fr(0)));
    assert!(!c.wants(Role::Master, &fr(200)));
    assert!(c.wants(Role::Slave, &Message::BarrierReply));
}

#[test]
fn async_config_as_1_4_and_1_5_properties() {
    // OpenFlow 1.4 §7.3.10: GET_ASYNC_REPLY / SET_ASYNC bodies are lists of
    // `ofp_async_config_prop_reasons` (type, length 8, mask); types 0..=11 alternate slave
    // (even) and master (odd) for packet-in, port status, flow removed, role status, table
    // status and request-forward.
    let c = AsyncConfig {
        packet_in: [0x11, 0x22],
        port_status: [0x33, 0x44],
        flow_removed: [0x55, 0x66],
        role_status: [0x77, 0x88],
        table_status: [0x99, 0xaa],
        requestforward: [0xbb, 0xcc],
    };
    for v in [5u8, 6] {
        let b = Message::GetAsyncReply(c).encode_version(v, 7).unwrap();
        assert_eq!(&b[..8], &[v, 27, 0, 8 + 12 * 8, 0, 0, 0, 7]);
        let props: Vec<(u16, u16, u32)> = b[8..]
            .chunks(8)
            .map(|p| {
                (
                    u16::from_be_bytes([p[0], p[1]]),
                    u16::from_be_bytes([p[2], p[3]]),
                    u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
                )
            })
            .collect();
        let want: Vec<(u16, u16, u32)> = [0x22, 0x11, 0x44, 0x33, 0x66, 0x55, 0x88, 0x77]
            .into_iter()
            .chain([0xaa, 0x99, 0xcc, 0xbb])
            .enumerate()
            .map(|(t, m)| (t as u16, 8, m))
            .collect();
        assert_eq!(props, want, "v{v}");
        assert_eq!(decode(&b).unwrap(), (7, Message::GetAsyncReply(c)));
        // GET_ASYNC_REQUEST has no body in any version.
        let req = Message::GetAsyncRequest.encode_version(v, 3).unwrap();
        assert_eq!(req, [v, 26, 0, 8, 0, 0, 0, 3]);
        assert_eq!(decode(&req).unwrap(), (3, Message::GetAsyncRequest));
        // A SET_ASYNC carries only what it changes; applied on top of the current config.
        let set = Message::SetAsyncProps(vec![(1, 0b101), (2, 0b001)]);
        let b = set.encode_version(v, 4).unwrap();
        assert_eq!(b.len(), 8 + 16);
        let (_, m) = decode(&b).unwrap();
        assert_eq!(m, set);
        let Message::SetAsyncProps(p) = m else {
            unreachable!()
        };
        let mut cur = AsyncConfig::default();
        cur.apply(&p);
        assert_eq!(cur.packet_in, [0b101, 0]);
        assert_eq!(cur.port_status, [0b111, 0b001]);
        assert_eq!(cur.flow_removed, AsyncConfig::default().flow_removed);
        // Bad properties: wrong length, unknown type, experimenter, duplicate, truncated.
        let bad = |props: &[u8]| {
            let mut f = vec![v, 28, 0, 0, 0, 0, 0, 1];
            f.extend_from_slice(props);
            f[3] = f.len() as u8;
            decode(&f)
        };
        assert_eq!(
            bad(&[0, 1, 0, 12, 0, 0, 0, 1, 0, 0, 0, 0]),
            Err(errors::BAD_PROPERTY_BAD_LEN)
        );
        assert_eq!(
            bad(&[0, 12, 0, 8, 0, 0, 0, 1]),
            Err(errors::BAD_PROPERTY_BAD_TYPE)
        );
        assert_eq!(
            bad(&[0xff, 0xff, 0, 8, 0, 0, 0, 1]),
            Err(errors::BAD_PROPERTY_BAD_EXPERIMENTER)
        );
        assert_eq!(
            bad(&[0, 3, 0, 8, 0, 0, 0, 1, 0, 3, 0, 8, 0, 0, 0, 2]),
            Err(errors::BAD_PROPERTY_DUP_TYPE)
        );
        assert!(bad(&[0, 3, 0, 8, 0, 0]).is_err());
    }
    // 1.3 cannot say "only these properties"; 1.0 has no async configuration at all.
    let set = Message::SetAsyncProps(vec![(1, 1)]);
    assert_eq!(set.encode_version(4, 1), Err(errors::BAD_REQUEST_BAD_TYPE));
    assert_eq!(set.encode_version(1, 1), Err(errors::BAD_REQUEST_BAD_TYPE));
}

#[test]
fn group_mod_shape_errors_in_1_3_1_4_and_1_5() {
    use crate::action::Action;
    let bucket = |weight| Bucket {
        weight,
        ..Bucket::new(vec![Action::Output {
            port: 1,
            max_len: 0,
        }])
    };
    let gm = |command, group_type, buckets| {
        Message::GroupMod(GroupMod {
            command,
            group_type,
            group_id: 3,
            buckets,
            command_bucket_id: bucket_id::ALL,
        })
    };
    use GroupModCommand as C;
    use GroupType as T;
    let cases = [
        // Weight only on select buckets.
        (
            gm(C::Add, T::All, vec![bucket(0), bucket(2)]),
            Some(errors::GROUP_MOD_FAILED_BAD_BUCKET),
        ),
        (
            gm(C::Modify, T::Indirect, vec![bucket(1)]),
            Some(errors::GROUP_MOD_FAILED_BAD_BUCKET),
        ),
        (
            gm(C::Add, T::FastFailover, vec![bucket(5)]),
            Some(errors::GROUP_MOD_FAILED_BAD_BUCKET),
        ),
        (gm(C::Add, T::Select, vec![bucket(5), bucket(0)]), None),
        (gm(C::Add, T::All, vec![bucket(0), bucket(0)]), None),
        // Indirect: exactly one bucket.
        (
            gm(C::Add, T::Indirect, vec![]),
            Some(errors::GROUP_MOD_FAILED_INVALID_GROUP),
        ),
        (
            gm(C::Add, T::Indirect, vec![bucket(0), bucket(0)]),
            Some(errors::GROUP_MOD_FAILED_INVALID_GROUP),
        ),
        (gm(C::Add, T::Indirect, vec![bucket(0)]), None),
        // DELETE carries no bucket (1.3.5).
        (
            gm(C::Delete, T::All, vec![bucket(0)]),
            Some(errors::GROUP_MOD_FAILED_INVALID_GROUP),
        ),
        (gm(C::Delete, T::Indirect, vec![]), None),
    ];
    for v in [4u8, 5, 6] {
        for (m, want) in &cases {
            let b = m.encode_version(v, 1).unwrap();
            match want {
                Some(e) => assert_eq!(decode(&b).map(|_| ()), Err(*e), "v{v} {m:?}"),
                None => {
                    let mut got = decode(&b).unwrap().1;
                    // 1.5 numbers the buckets (0, 1, ... when the model had none).
                    if let Message::GroupMod(g) = &mut got {
                        for (i, b) in g.buckets.iter_mut().enumerate() {
                            let id = b.bucket_id.take();
                            assert_eq!(id, (v == 6).then_some(i as u32), "v{v}");
                        }
                    }
                    assert_eq!(got, *m, "v{v}")
                }
            }
        }
    }
}

/// OpenFlow 1.5's INSERT_BUCKET / REMOVE_BUCKET as `ovs-ofctl -O OpenFlow15 insert-buckets`
/// / `remove-buckets` write them (captured from ovs-ofctl 3.1): decoded with their command
/// bucket id and bucket ids, re-encoded to the same bytes; no other version can say them;
/// malformed command bucket ids are `OFPGMFC_BAD_COMMAND`.
#[test]
fn openflow15_bucket_commands() {
    let unhex = |s: &str| -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    };
    let cases = [
        // insert-buckets group_id=1,command_bucket_id=last,bucket=bucket_id:9,output:3
        ("060f003000000002000300000000000100180000fffffffe001800100000000900000010000000030000000000000000",
         GroupModCommand::InsertBucket, bucket_id::LAST, vec![9]),
        // insert-buckets group_id=1,command_bucket_id=5,bucket=bucket_id:6,output:3
        ("060f00300000000200030000000000010018000000000005001800100000000600000010000000030000000000000000",
         GroupModCommand::InsertBucket, 5, vec![6]),
        // remove-buckets group_id=1,command_bucket_id=first
        ("060f001800000002000500000000000100000000fffffffd", GroupModCommand::RemoveBucket, bucket_id::FIRST, vec![]),
        // remove-buckets group_id=1 (all)
        ("060f001800000002000500000000000100000000ffffffff", GroupModCommand::RemoveBucket, bucket_id::ALL, vec![]),
        // add-group group_id=1,type=all,bucket=bucket_id:5,output:1,bucket=bucket_id:7,output:2
        ("060f004800000002000000000000000100300000ffffffff001800100000000500000010000000010000000000000000001800100000000700000010000000020000000000000000",
         GroupModCommand::Add, bucket_id::ALL, vec![5, 7]),
    ];
    for (hex, cmd, at, ids) in cases {
        let b = unhex(hex);
        let (xid, m) = decode(&b).unwrap();
        let Message::GroupMod(g) = &m else {
            panic!("{m:?}")
        };
        assert_eq!(
            (g.command, g.group_id, g.command_bucket_id),
            (cmd, 1, at),
            "{hex}"
        );
        let got: Vec<u32> = g.buckets.iter().map(|b| b.bucket_id.unwrap()).collect();
        assert_eq!(got, ids, "{hex}");
        assert_eq!(m.encode_version(6, xid).unwrap(), b, "{hex}");
        if cmd.edits_buckets() {
            for v in [1u8, 4, 5] {
                assert_eq!(m.encode_version(v, xid), Err(errors::BAD_REQUEST_BAD_TYPE));
            }
        }
    }
    // Insert with ALL, remove with an id in the reserved range, command 4: BAD_COMMAND.
    for hex in [
        "060f003000000002000300000000000100180000ffffffff001800100000000900000010000000030000000000000000",
        "060f001800000002000500000000000100000000fffffff0",
        "060f001800000002000400000000000100000000ffffffff",
    ] {
        assert_eq!(decode(&unhex(hex)).map(|_| ()), Err(errors::GROUP_MOD_FAILED_BAD_COMMAND), "{hex}");
    }
    // A bucket id in the reserved range.
    let bad = "060f003000000002000300000000000100180000fffffffe00180010ffffff0100000010000000030000000000000000";
    assert_eq!(
        decode(&unhex(bad)).map(|_| ()),
        Err(errors::GROUP_MOD_FAILED_BAD_BUCKET)
    );
}
