//! Nicira extensions against the bytes real `ovs-ofctl -O OpenFlow13` sends
//! (`tests/data/nx_flow_mods.tsv`): every captured FLOW_MOD decodes, re-encodes to the same
//! bytes, and carries the actions and fields the flow named; malformed lengths, unknown
//! vendors and subtypes get their errors.

use openflow::action::Action;
use openflow::msg::{decode, Message};
use openflow::nx::{NxAction, NxmField};
use openflow::{errors, Instruction, OxmField};

const VECTORS: &str = include_str!("data/nx_flow_mods.tsv");

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn vectors() -> Vec<(&'static str, Vec<u8>)> {
    VECTORS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let mut c = l.split('\t');
            (c.next().unwrap(), unhex(c.next().unwrap()))
        })
        .collect()
}

fn flow_mod(b: &[u8]) -> openflow::FlowMod {
    match decode(b) {
        Ok((_, Message::FlowMod(fm))) => fm,
        other => panic!("not a flow-mod: {other:?}"),
    }
}

fn vector(flow: &str) -> openflow::FlowMod {
    let (_, b) = vectors()
        .into_iter()
        .find(|(f, _)| *f == flow)
        .unwrap_or_else(|| panic!("no vector for {flow}"));
    flow_mod(&b)
}

fn apply(fm: &openflow::FlowMod) -> Vec<Action> {
    match fm.instructions.as_slice() {
        [Instruction::ApplyActions(a)] => a.clone(),
        [] => Vec::new(),
        other => panic!("unexpected instructions {other:?}"),
    }
}

#[test]
fn every_captured_flow_mod_decodes_and_reencodes_to_the_same_bytes() {
    let v = vectors();
    assert!(v.len() >= 30, "{} vectors", v.len());
    for (flow, b) in v {
        let (xid, m) = decode(&b).unwrap_or_else(|e| panic!("{flow}: {e:?}"));
        let again = m.encode_version(4, xid).unwrap();
        assert_eq!(again, b, "{flow}: re-encoding differs");
    }
}

#[test]
fn captured_actions_decode_to_what_the_flow_said() {
    use NxAction as N;
    let nx = |flow: &str| -> Vec<NxAction> {
        apply(&vector(flow))
            .into_iter()
            .map(|a| match a {
                Action::Nx(n) => n,
                other => panic!("{flow}: not a Nicira action: {other:?}"),
            })
            .collect()
    };
    assert_eq!(
        nx("actions=resubmit(,1)"),
        vec![N::Resubmit {
            in_port: 0xfff8,
            table: Some(1)
        }]
    );
    assert_eq!(
        nx("actions=resubmit:3"),
        vec![N::Resubmit {
            in_port: 3,
            table: None
        }]
    );
    assert_eq!(
        nx("actions=load:0x5->NXM_NX_REG0[0..15]"),
        vec![N::RegLoad {
            ofs_nbits: 15,
            dst: 0x0001_0004,
            value: 5
        }]
    );
    // A masked set_field on a register is two loads of its contiguous runs.
    assert_eq!(
        nx("actions=set_field:0x5/0xf0f->reg1"),
        vec![
            N::RegLoad {
                ofs_nbits: 3,
                dst: 0x0001_0204,
                value: 5
            },
            N::RegLoad {
                ofs_nbits: 8 << 6 | 3,
                dst: 0x0001_0204,
                value: 0
            }
        ]
    );
    assert_eq!(
        nx("actions=move:eth_src[0..31]->reg0[]"),
        vec![N::RegMove {
            n_bits: 32,
            src_ofs: 0,
            dst_ofs: 0,
            src: 0x0000_0406,
            dst: 0x0001_0004
        }]
    );
    assert_eq!(
        nx("actions=note:01.02.03"),
        vec![N::Note(vec![1, 2, 3, 0, 0, 0])]
    );
    assert_eq!(
        nx("ip,actions=dec_ttl(1,2)"),
        vec![N::DecTtlCntIds(vec![1, 2])]
    );
    assert_eq!(nx("ip,actions=ct_clear"), vec![N::CtClear]);
    let [N::Ct(ct)] = &nx("ip,actions=ct(commit,zone=NXM_NX_REG0[0..15],table=2)")[..] else {
        panic!("ct")
    };
    assert_eq!(
        (ct.flags, ct.zone_src, ct.zone, ct.recirc_table, ct.alg),
        (1, 0x0001_0004, 15, 2, 0)
    );
    let [N::Ct(ct)] = &nx("ip,actions=ct(commit,zone=5,exec(set_field:1->ct_mark))")[..] else {
        panic!("ct")
    };
    assert_eq!((ct.zone_src, ct.zone, ct.recirc_table), (0, 5, 0xff));
    assert_eq!(
        ct.actions,
        vec![Action::SetField(OxmField::Nx(NxmField {
            class: 1,
            field: 107,
            value: 1,
            mask: None
        }))]
    );
    let [N::Ct(ct)] =
        &nx("ip,actions=ct(commit,nat(src=10.0.0.1-10.0.0.9:1000-2000,persistent,random))")[..]
    else {
        panic!("ct")
    };
    let [Action::Nx(N::Nat(n))] = ct.actions[..] else {
        panic!("nat")
    };
    assert_eq!(n.flags, 1 | 4 | 16);
    assert_eq!(
        (n.ipv4_min, n.ipv4_max, n.proto_min, n.proto_max),
        (
            Some("10.0.0.1".parse().unwrap()),
            Some("10.0.0.9".parse().unwrap()),
            Some(1000),
            Some(2000)
        )
    );
    // dec_ttl without controller ids is the standard OFPAT_DEC_NW_TTL in 1.3.
    assert_eq!(apply(&vector("ip,actions=dec_ttl")), vec![Action::DecNwTtl]);
    // set_field on a register is OFPAT_SET_FIELD with an NXM header.
    assert_eq!(
        apply(&vector("actions=set_field:5->reg0")),
        vec![Action::SetField(OxmField::Nx(NxmField::reg(0, 5, None)))]
    );
}

#[test]
fn captured_matches_decode_registers_and_tunnel_fields() {
    assert_eq!(
        vector("reg1=0x10/0xf0,actions=drop").matches.fields,
        vec![OxmField::Nx(NxmField::reg(1, 0x10, Some(0xf0)))]
    );
    // ovs-ofctl writes xreg2 as reg4 (high half) and reg5.
    assert_eq!(
        vector("xreg2=0x1234567890,actions=drop").matches.fields,
        vec![
            OxmField::Nx(NxmField::reg(4, 0x12, None)),
            OxmField::Nx(NxmField::reg(5, 0x3456_7890, None))
        ]
    );
    assert_eq!(
        vector("tun_id=0x5/0xff,actions=drop").matches.fields,
        vec![OxmField::TunnelId(5, Some(0xff))]
    );
    let tun = vector("tun_src=1.2.3.4,tun_dst=5.6.7.8,actions=drop");
    assert_eq!(
        tun.matches.fields,
        vec![
            OxmField::Nx(NxmField {
                class: 1,
                field: 31,
                value: 0x0102_0304,
                mask: None
            }),
            OxmField::Nx(NxmField {
                class: 1,
                field: 32,
                value: 0x0506_0708,
                mask: None
            })
        ]
    );
}

fn decode_action(b: &[u8]) -> Result<Vec<Action>, openflow::OfError> {
    openflow::action::decode_actions(&mut openflow::buf::Reader::new(
        b,
        errors::BAD_ACTION_BAD_LEN,
    ))
}

#[test]
fn malformed_nicira_actions_get_their_errors() {
    let nx = |len: u16, subtype: u16, body: &[u8]| {
        let mut v = vec![0xff, 0xff];
        v.extend_from_slice(&len.to_be_bytes());
        v.extend_from_slice(&[0, 0, 0x23, 0x20]);
        v.extend_from_slice(&subtype.to_be_bytes());
        v.extend_from_slice(body);
        v
    };
    // resubmit_table of 24 bytes.
    assert_eq!(
        decode_action(&nx(24, 14, &[0; 14])),
        Err(errors::BAD_ACTION_BAD_LEN)
    );
    // reg_load of 16 bytes.
    assert_eq!(
        decode_action(&nx(16, 7, &[0; 6])),
        Err(errors::BAD_ACTION_BAD_LEN)
    );
    // reg_move of 32 bytes.
    assert_eq!(
        decode_action(&nx(32, 6, &[0; 22])),
        Err(errors::BAD_ACTION_BAD_LEN)
    );
    // ct of 16 bytes (its fixed part is 24).
    assert_eq!(
        decode_action(&nx(16, 35, &[0; 6])),
        Err(errors::BAD_ACTION_BAD_LEN)
    );
    // nat claiming an IPv4 range in 16 bytes.
    assert_eq!(
        decode_action(&nx(16, 36, &[0, 0, 0, 1, 0, 3])),
        Err(errors::BAD_ACTION_BAD_LEN)
    );
    // ct_clear of 24 bytes.
    assert_eq!(
        decode_action(&nx(24, 43, &[0; 14])),
        Err(errors::BAD_ACTION_BAD_LEN)
    );
    // a length that runs past the list.
    assert_eq!(
        decode_action(&nx(32, 14, &[0; 6])),
        Err(errors::BAD_ACTION_BAD_LEN)
    );
    // unknown subtype, unknown vendor.
    assert_eq!(
        decode_action(&nx(16, 999, &[0; 6])),
        Err(errors::BAD_ACTION_BAD_EXP_TYPE)
    );
    let mut other = nx(16, 14, &[0; 6]);
    other[7] = 0x21;
    assert_eq!(
        decode_action(&other),
        Err(errors::BAD_ACTION_BAD_EXPERIMENTER)
    );
    // ct with unknown flags; ct nested in ct.
    let mut ct = nx(24, 35, &[0; 14]);
    ct[11] = 4;
    assert_eq!(decode_action(&ct), Err(errors::BAD_ACTION_BAD_ARGUMENT));
    let mut outer = nx(48, 35, &[0; 14]);
    outer.extend_from_slice(&nx(24, 35, &[0; 14]));
    assert_eq!(decode_action(&outer), Err(errors::BAD_ACTION_BAD_ARGUMENT));
    // reg_load2 naming an unknown field.
    let mut l2 = nx(24, 33, &[0x00, 0x01, 0xfe, 0x04, 0, 0, 0, 1]);
    l2.extend_from_slice(&[0; 6]);
    assert_eq!(decode_action(&l2), Err(errors::BAD_ACTION_BAD_SET_TYPE));
}

#[test]
fn every_action_roundtrips() {
    let acts = vec![
        Action::Nx(NxAction::Resubmit {
            in_port: 0xfff8,
            table: Some(9),
        }),
        Action::Nx(NxAction::RegLoad2(NxmField::reg(3, 1, Some(1)))),
        Action::Nx(NxAction::Note(vec![
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
        ])),
        Action::Nx(NxAction::DecTtlCntIds(vec![0, 7, 9])),
        Action::Nx(NxAction::Ct(openflow::nx::NxCt {
            flags: 3,
            zone_src: 0,
            zone: 7,
            recirc_table: 4,
            alg: 21,
            actions: vec![Action::Nx(NxAction::Nat(openflow::nx::NxNat {
                flags: 2 | 8,
                ipv6_min: Some("2001:db8::1".parse().unwrap()),
                proto_min: Some(80),
                ..Default::default()
            }))],
        })),
    ];
    let mut b = Vec::new();
    openflow::action::encode_actions(&acts, &mut b);
    assert_eq!(b.len() % 8, 0);
    assert_eq!(decode_action(&b).unwrap(), acts);
}

#[test]
fn every_vector_is_a_fuzz_seed() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    let v = vectors();
    // `OPENFLOW_WRITE_SEEDS=1` rewrites them (as `fuzz_seeds.rs` does for the examples).
    if std::env::var_os("OPENFLOW_WRITE_SEEDS").is_some() {
        for (i, (_, b)) in v.iter().enumerate() {
            std::fs::write(dir.join(format!("nx-{i:02}-type14")), b).unwrap();
        }
    }
    for (i, (flow, b)) in v.iter().enumerate() {
        let seed = std::fs::read(dir.join(format!("nx-{i:02}-type14")))
            .unwrap_or_else(|e| panic!("seed of {flow}: {e}"));
        assert_eq!(&seed, b, "{flow}");
    }
}

/// `ovs-ofctl add-flow unix:SOCK 'ip,actions=dec_ttl,output:1'` without `-O` (OpenFlow 1.0):
/// a 1.0 FLOW_MOD carrying `NXAST_DEC_TTL` (18). Captured from ovs-ofctl 3.1.
const DEC_TTL_10: &str = "010e006000000002003820ef00000000000000000000000000000000000008000000000000000000000000000000000000000000000000000000000000008000ffffffffffff0000ffff00100000232000120000000000000000000800010000";

#[test]
fn openflow10_dec_ttl_is_nicira_and_round_trips() {
    let b = unhex(DEC_TTL_10);
    let (v, xid, m) = openflow::msg::decode_versioned(&b).unwrap();
    assert_eq!(v, 1);
    let Message::FlowMod(fm) = &m else {
        panic!("{m:?}")
    };
    assert_eq!(
        apply(fm),
        vec![
            Action::Nx(NxAction::DecTtl),
            Action::Output {
                port: 1,
                max_len: 0
            }
        ]
    );
    // The actions (after the 72-byte fixed part) re-encode to the same bytes; the match's
    // wildcard bits are normalised (0x3fffef for ovs-ofctl's equivalent 0x3820ef).
    assert_eq!(m.encode_version(1, xid).unwrap()[72..], b[72..]);
    // The standard action (what the pipeline keeps) is written as Nicira's in 1.0.
    let mut fm13 = fm.clone();
    fm13.instructions = vec![Instruction::ApplyActions(vec![
        Action::DecNwTtl,
        Action::Output {
            port: 1,
            max_len: 0,
        },
    ])];
    assert_eq!(
        Message::FlowMod(fm13).encode_version(1, xid).unwrap()[72..],
        b[72..]
    );
}

/// What Vireo writes (FLOW_MOD, and the FLOW stats reply `dump-flows` reads) with every
/// Nicira action and register field, in 1.0, 1.3, 1.4 and 1.5, is read by OVS's own decoder
/// (`ovs-ofctl ofp-print`) as the text ovs-ofctl uses.
#[test]
fn ovs_decodes_what_vireo_writes_in_every_version() {
    use openflow::msg::{MultipartReply, MultipartReplyBody};
    use openflow::nx::{NxCt, NxNat};
    if !testkit::have_ofctl() {
        return;
    }
    let nx = |a: NxAction| Action::Nx(a);
    let acts = vec![
        nx(NxAction::Resubmit {
            in_port: 0xfff8,
            table: Some(3),
        }),
        nx(NxAction::RegLoad {
            ofs_nbits: 15,
            dst: 0x0001_0004,
            value: 5,
        }),
        nx(NxAction::RegMove {
            n_bits: 32,
            src_ofs: 0,
            dst_ofs: 0,
            src: 0x0000_0406,
            dst: 0x0001_0204,
        }),
        Action::SetField(OxmField::Nx(NxmField::reg(2, 7, None))),
        nx(NxAction::Note(vec![1, 2, 3, 0, 0, 0])),
        nx(NxAction::Ct(NxCt {
            flags: 1,
            zone_src: 0,
            zone: 5,
            recirc_table: 2,
            alg: 0,
            actions: vec![
                nx(NxAction::Nat(NxNat {
                    flags: 1,
                    ipv4_min: Some("10.0.0.1".parse().unwrap()),
                    ..Default::default()
                })),
                Action::SetField(OxmField::Nx(NxmField {
                    class: 1,
                    field: 107,
                    value: 1,
                    mask: None,
                })),
            ],
        })),
        nx(NxAction::CtClear),
    ];
    let matches = openflow::Match::new(vec![
        OxmField::EthType(0x0800),
        OxmField::Nx(NxmField::reg(0, 5, None)),
        OxmField::Nx(NxmField::reg(1, 0x10, Some(0xf0))),
    ]);
    let fm = openflow::FlowMod::add(
        100,
        matches.clone(),
        vec![Instruction::ApplyActions(acts.clone())],
    );
    let stats = openflow::msg::FlowStats {
        table_id: 0,
        duration_sec: 1,
        duration_nsec: 0,
        priority: 100,
        idle_timeout: 0,
        hard_timeout: 0,
        flags: 0,
        cookie: 0,
        packet_count: 0,
        byte_count: 0,
        matches,
        instructions: vec![Instruction::ApplyActions(acts)],
    };
    let reply = Message::MultipartReply(MultipartReply::new(MultipartReplyBody::Flow(vec![stats])));
    let want_actions = "resubmit(,3),load:0x5->NXM_NX_REG0[0..15],\
        move:NXM_OF_ETH_SRC[0..31]->NXM_NX_REG1[],set_field:0x7->reg2,\
        note:01.02.03.00.00.00,ct(commit,table=2,zone=5,nat(src=10.0.0.1),\
        exec(set_field:0x1->ct_mark)),ct_clear";
    for v in [4u8, 5, 6] {
        for m in [Message::FlowMod(fm.clone()), reply.clone()] {
            let b = m.encode_version(v, 5).unwrap();
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            let out = std::process::Command::new("ovs-ofctl")
                .args(["ofp-print", &hex])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "v{v}: {text}");
            assert!(
                !text.contains("***") && !text.contains("WARN"),
                "v{v}: {text}"
            );
            // 1.5 writes `load` as a masked set-field, and ovs-ofctl prints it so.
            let want = if v == 6 {
                want_actions.replace("load:0x5->NXM_NX_REG0[0..15]", "set_field:0x5/0xffff->reg0")
            } else {
                want_actions.to_string()
            };
            assert!(text.contains(&want), "v{v}: {text}");
            assert!(text.contains("reg0=0x5,reg1=0x10/0xf0"), "v{v}: {text}");
        }
    }
    // 1.0 has no OXM match (registers are NXM-only there) but carries the vendor actions.
    let fm10 = openflow::FlowMod::add(
        100,
        openflow::Match::default(),
        vec![Instruction::ApplyActions(vec![
            nx(NxAction::Resubmit {
                in_port: 0xfff8,
                table: Some(3),
            }),
            Action::DecNwTtl,
            nx(NxAction::Note(vec![1, 2, 3, 0, 0, 0])),
        ])],
    );
    let b = Message::FlowMod(fm10).encode_version(1, 5).unwrap();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let out = std::process::Command::new("ovs-ofctl")
        .args(["ofp-print", &hex])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("actions=resubmit(,3),dec_ttl,note:01.02.03.00.00.00"),
        "{text}"
    );
}

/// What `ovs-ofctl -O OpenFlow15` sends (captured from ovs-ofctl 3.1): `load` is a masked
/// set-field, `move` is OFPAT_COPY_FIELD; both decode, and Vireo writes them back the same
/// way in 1.5 from the Nicira form 1.3 uses.
#[test]
fn openflow15_load_and_move_are_set_field_and_copy_field() {
    let cases = [
        (
            "actions=load:0x5->NXM_NX_REG0[0..15]",
            "060e005000000002000000000000000000000000000000000000000000008000ffffffffffffffffffffffff00000000000100040000000000040018000000000019001000010108000000050000ffff",
            Action::Nx(NxAction::RegLoad {
                ofs_nbits: 15,
                dst: 0x0001_0004,
                value: 5,
            }),
        ),
        (
            "actions=move:eth_src[0..31]->reg0[]",
            "060e005800000002000000000000000000000000000000000000000000008000ffffffffffffffffffffffff0000000000010004000000000004002000000000001c00180020000000000000800008060001000400000000",
            Action::Nx(NxAction::RegMove {
                n_bits: 32,
                src_ofs: 0,
                dst_ofs: 0,
                src: 0x8000_0806,
                dst: 0x0001_0004,
            }),
        ),
    ];
    for (flow, hex, nicira) in cases {
        let b = unhex(hex);
        let (v, xid, m) =
            openflow::msg::decode_versioned(&b).unwrap_or_else(|e| panic!("{flow}: {e:?}"));
        assert_eq!(v, 6);
        assert_eq!(m.encode_version(6, xid).unwrap(), b, "{flow}");
        let Message::FlowMod(mut fm) = m else {
            panic!("{flow}")
        };
        fm.instructions = vec![Instruction::ApplyActions(vec![nicira])];
        assert_eq!(
            Message::FlowMod(fm).encode_version(6, xid).unwrap(),
            b,
            "{flow}: the 1.3 form written in 1.5"
        );
    }
}
