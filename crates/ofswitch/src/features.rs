//! TABLE_FEATURES as the pipeline really is: the codec's full list
//! ([`TableFeatures::standard`]) narrowed to the instructions, actions, match fields and
//! set-field targets that the conversion into the pipeline (`convert`) accepts, found by
//! offering each one to the converter. The match fields include the Nicira ones a FLOW_MOD
//! may carry, under the headers Open vSwitch lists them with in 1.3+ (`NXM_NX_REG0`..15,
//! `OXM_OF_PKT_REG0`..7 for `xreg`, `NXM_NX_XXREG0`..3, `NXM_NX_CT_*`, `NXM_NX_TUN_ID`,
//! `NXM_NX_TUN_IPV4_SRC/DST` and `NXM_NX_TUN_IPV6_SRC/DST`). What a controller reads is then
//! exactly what a
//! FLOW_MOD may use, and stays so as the converter learns more.
//!
//! Pure functions; run on the connection thread answering the multipart request, which
//! probes the converter once ([`Probe::new`]) for all its tables.
use openflow::action::{action_type as a, instruction_type as i};
use openflow::buf::Reader;
use openflow::msg::{table_prop as p, TableFeatureProp, TableFeatures};
use openflow::nx::{class, header, nxm_shape, NxmField};
use openflow::oxm::{field_shape, OxmField};
use openflow::{errors, Action, Instruction};

use crate::convert;

/// A value of basic OXM field `num` (all-zero payload), if the codec knows the field.
fn sample_field(num: u8) -> Option<OxmField> {
    let (len, _) = field_shape(num)?;
    let mut tlv = vec![0x80, 0x00, num << 1, len as u8];
    tlv.resize(4 + len, 0);
    OxmField::decode(&mut Reader::new(&tlv, errors::BAD_MATCH_BAD_LEN)).ok()
}

/// Every match field the codec decodes, as (OXM id header, maskable, a sample value): the
/// basic class, then the NXM / `PKT_REG` fields.
pub(crate) fn codec_fields() -> Vec<(u32, bool, OxmField)> {
    let mut v: Vec<(u32, bool, OxmField)> = (0..128u8)
        .filter_map(|n| {
            let (len, mask) = field_shape(n)?;
            Some((
                header(class::OXM_BASIC, n, len as u8),
                mask,
                sample_field(n)?,
            ))
        })
        .collect();
    for (cls, range) in [(class::NXM1, 0..128u8), (class::PKT_REG, 0..8u8)] {
        for n in range {
            if let Some((len, mask)) = nxm_shape(cls, n) {
                let f = NxmField {
                    class: cls,
                    field: n,
                    value: 0,
                    mask: None,
                };
                v.push((header(cls, n, len as u8), mask, OxmField::Nx(f)));
            }
        }
    }
    v
}

/// The fields a match on `f` needs before it (OpenFlow 1.3 §7.2.3.6): the FLOW_MOD a
/// controller would send for `f` carries them, so the probe offers them too.
pub(crate) fn with_prereqs(f: OxmField) -> Vec<OxmField> {
    use openflow::oxm::field as n;
    let num = match f {
        // The conntrack address fields are checked by the pipeline against the packet's
        // own type (as OVS does): ct_nw_* need ip, ct_ipv6_* ipv6.
        OxmField::Nx(n) if n.class == class::NXM1 && matches!(n.field, 120 | 121) => {
            return vec![OxmField::EthType(0x0800), f];
        }
        OxmField::Nx(n) if n.class == class::NXM1 && matches!(n.field, 122 | 123) => {
            return vec![OxmField::EthType(0x86dd), f];
        }
        OxmField::Nx(_) => u8::MAX,
        _ => f.field_num(),
    };
    let (eth, proto, icmp6): (Option<u16>, Option<u8>, Option<u8>) = match num {
        n::VlanPcp => {
            return vec![OxmField::VlanVid(0x1001, None), f];
        }
        n::IpDscp | n::IpEcn | n::IpProto | n::Ipv4Src | n::Ipv4Dst => (Some(0x0800), None, None),
        n::TcpSrc | n::TcpDst => (Some(0x0800), Some(6), None),
        n::UdpSrc | n::UdpDst => (Some(0x0800), Some(17), None),
        n::SctpSrc | n::SctpDst => (Some(0x0800), Some(132), None),
        n::Icmpv4Type | n::Icmpv4Code => (Some(0x0800), Some(1), None),
        n::ArpOp | n::ArpSpa | n::ArpTpa | n::ArpSha | n::ArpTha => (Some(0x0806), None, None),
        n::Ipv6Src | n::Ipv6Dst | n::Ipv6Flabel | n::Ipv6Exthdr => (Some(0x86dd), None, None),
        n::Icmpv6Type | n::Icmpv6Code => (Some(0x86dd), Some(58), None),
        n::Ipv6NdTarget | n::Ipv6NdSll => (Some(0x86dd), Some(58), Some(135)),
        n::Ipv6NdTll => (Some(0x86dd), Some(58), Some(136)),
        n::MplsLabel | n::MplsTc | n::MplsBos => (Some(0x8847), None, None),
        _ => (None, None, None),
    };
    let mut v: Vec<OxmField> = eth.map(OxmField::EthType).into_iter().collect();
    v.extend(proto.map(OxmField::IpProto));
    v.extend(icmp6.map(OxmField::Icmpv6Type));
    if !v.contains(&f) {
        v.push(f);
    }
    v
}

/// One action of each type the codec knows, by type.
fn sample_actions() -> Vec<(u16, Action)> {
    let any_field = (0..64u8).find_map(sample_field);
    let mut v = vec![
        (
            a::OUTPUT,
            Action::Output {
                port: 1,
                max_len: 0,
            },
        ),
        (a::COPY_TTL_OUT, Action::CopyTtlOut),
        (a::COPY_TTL_IN, Action::CopyTtlIn),
        (a::SET_MPLS_TTL, Action::SetMplsTtl(64)),
        (a::DEC_MPLS_TTL, Action::DecMplsTtl),
        (a::PUSH_VLAN, Action::PushVlan(0x8100)),
        (a::POP_VLAN, Action::PopVlan),
        (a::PUSH_MPLS, Action::PushMpls(0x8847)),
        (a::POP_MPLS, Action::PopMpls(0x0800)),
        (a::SET_QUEUE, Action::SetQueue(1)),
        (a::GROUP, Action::Group(1)),
        (a::SET_NW_TTL, Action::SetNwTtl(64)),
        (a::DEC_NW_TTL, Action::DecNwTtl),
        (a::PUSH_PBB, Action::PushPbb(0x88e7)),
        (a::POP_PBB, Action::PopPbb),
    ];
    v.extend(any_field.map(|f| (a::SET_FIELD, Action::SetField(f))));
    v
}

/// What the converter accepts, probed once per TABLE_FEATURES request (every table shares
/// it; only `goto_table` depends on the table).
pub(crate) struct Probe {
    /// Instructions other than goto-table.
    insts: Vec<u16>,
    acts: Vec<u16>,
    /// OXM id headers of the match fields (the maskable ones with the has-mask bit), of
    /// the fields a rule may leave out, of the set-field targets.
    fields: Vec<u32>,
    wildcards: Vec<u32>,
    settable: Vec<u32>,
}

impl Probe {
    pub(crate) fn new() -> Probe {
        let insts = [
            (
                i::WRITE_METADATA,
                Instruction::WriteMetadata {
                    metadata: 0,
                    mask: u64::MAX,
                },
            ),
            (i::WRITE_ACTIONS, Instruction::WriteActions(vec![])),
            (i::APPLY_ACTIONS, Instruction::ApplyActions(vec![])),
            (i::CLEAR_ACTIONS, Instruction::ClearActions),
            (i::METER, Instruction::Meter(1)),
        ]
        .into_iter()
        .filter(|(_, inst)| convert::instructions_to_pipeline(std::slice::from_ref(inst)).is_ok())
        .map(|(t, _)| t)
        .collect();
        let all = codec_fields();
        let settable: Vec<u32> = all
            .iter()
            .filter(|(_, _, f)| convert::action_to_pipeline_multi(&Action::SetField(*f)).is_ok())
            .map(|(h, ..)| *h)
            .collect();
        let acts = sample_actions()
            .into_iter()
            .filter(|(t, act)| match act {
                Action::SetField(_) => !settable.is_empty(),
                _ => convert::action_to_pipeline(act).is_ok() && *t != a::SET_FIELD,
            })
            .map(|(t, _)| t)
            .collect();
        let matchable: Vec<&(u32, bool, OxmField)> = all
            .iter()
            .filter(|(_, _, f)| {
                convert::match_to_pipeline(&openflow::Match::new(with_prereqs(*f))).is_ok()
            })
            .collect();
        // OpenFlow 1.3 §7.3.5.5.2, as OVS writes it: MATCH lists every field, with the
        // has-mask bit (and the doubled length) on those that take a mask; WILDCARDS lists
        // the fields a rule may leave out, which is every one of them here.
        let masked = |h: u32| ((h & !0xff) | 0x100) + 2 * (h & 0xff);
        Probe {
            insts,
            acts,
            fields: matchable
                .iter()
                .map(|&&(h, m, _)| if m { masked(h) } else { h })
                .collect(),
            wildcards: matchable.iter().map(|(h, ..)| *h).collect(),
            settable,
        }
    }
}

/// The features of table `table_id` of an `n_tables` pipeline.
pub(crate) fn table_features(
    probe: &Probe,
    table_id: u8,
    n_tables: u8,
    max_entries: u32,
) -> TableFeatures {
    let goto = Instruction::GotoTable(table_id.saturating_add(1));
    let mut insts = probe.insts.clone();
    if convert::instructions_to_pipeline(std::slice::from_ref(&goto)).is_ok() {
        insts.insert(0, i::GOTO_TABLE);
    }
    let mut t = TableFeatures::standard(table_id, n_tables, max_entries);
    for prop in &mut t.properties {
        let ty = prop.prop_type;
        *prop = match ty {
            p::INSTRUCTIONS | p::INSTRUCTIONS_MISS => TableFeatureProp::ids(ty, &insts),
            p::WRITE_ACTIONS | p::WRITE_ACTIONS_MISS | p::APPLY_ACTIONS | p::APPLY_ACTIONS_MISS => {
                TableFeatureProp::ids(ty, &probe.acts)
            }
            p::MATCH => TableFeatureProp::oxm_headers(ty, &probe.fields),
            p::WILDCARDS => TableFeatureProp::oxm_headers(ty, &probe.wildcards),
            p::WRITE_SETFIELD
            | p::WRITE_SETFIELD_MISS
            | p::APPLY_SETFIELD
            | p::APPLY_SETFIELD_MISS => TableFeatureProp::oxm_headers(ty, &probe.settable),
            _ => continue,
        };
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use openflow::oxm::field as f;

    fn ids(t: &TableFeatures, ty: u16) -> Vec<u16> {
        let prop = t.properties.iter().find(|p| p.prop_type == ty).unwrap();
        prop.data
            .chunks(4)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect()
    }

    /// Basic-class field numbers of an OXM id list.
    fn oxms(t: &TableFeatures, ty: u16) -> Vec<u8> {
        headers(t, ty)
            .into_iter()
            .filter(|h| h >> 16 == 0x8000)
            .map(|h| (h >> 9) as u8 & 0x7f)
            .collect()
    }

    /// (class, field) of each OXM id of a list, and whether it has the has-mask bit.
    fn ids_masked(t: &TableFeatures, ty: u16) -> Vec<(u32, bool)> {
        headers(t, ty)
            .into_iter()
            .map(|h| (h >> 9, h & 0x100 != 0))
            .collect()
    }

    fn headers(t: &TableFeatures, ty: u16) -> Vec<u32> {
        let prop = t.properties.iter().find(|p| p.prop_type == ty).unwrap();
        prop.data
            .chunks(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn features_name_only_what_a_flow_mod_may_use() {
        let t = table_features(&Probe::new(), 0, 254, 1000);
        let insts = ids(&t, p::INSTRUCTIONS);
        assert!(insts.contains(&i::GOTO_TABLE) && insts.contains(&i::METER));
        assert!(!insts.contains(&i::WRITE_METADATA), "{insts:?}");
        let acts = ids(&t, p::APPLY_ACTIONS);
        for want in [a::OUTPUT, a::PUSH_VLAN, a::POP_VLAN, a::GROUP, a::SET_FIELD] {
            assert!(acts.contains(&want), "{want} missing from {acts:?}");
        }
        for never in [a::PUSH_MPLS, a::SET_QUEUE, a::COPY_TTL_OUT, a::PUSH_PBB] {
            assert!(!acts.contains(&never), "{never} in {acts:?}");
        }
        let m = oxms(&t, p::MATCH);
        for want in [
            f::InPort,
            f::EthDst,
            f::VlanVid,
            f::Ipv4Src,
            f::TcpDst,
            f::Ipv6Dst,
            f::TunnelId,
        ] {
            assert!(m.contains(&want), "{want} missing from {m:?}");
        }
        // metadata is matchable since the Nicira extensions (a register-file field), tunnel_id
        // since flow-based tunnels.
        for never in [f::MplsLabel, f::Ipv6Flabel] {
            assert!(!m.contains(&never), "{never} in {m:?}");
        }
        let set = oxms(&t, p::APPLY_SETFIELD);
        assert!(set.contains(&f::EthSrc) && set.contains(&f::Ipv4Dst));
        assert!(set.contains(&f::TunnelId), "{set:?}");
        assert!(
            !set.contains(&f::InPort) && !set.contains(&f::Ipv6Src),
            "{set:?}"
        );
        // The Nicira fields, under the headers OVS lists: reg0..15, xreg0..7 (PKT_REG),
        // xxreg0..3, the conntrack fields, the tunnel fields.
        let h = ids_masked(&t, p::MATCH);
        let w = ids_masked(&t, p::WILDCARDS);
        for want in [
            0x0001_0004u32,
            0x0001_1e04,
            0x8001_0008,
            0x8001_0e08,
            0x0001_de10,
        ] {
            assert!(h.contains(&(want >> 9, true)), "{want:#x} in {h:x?}");
            assert!(w.contains(&(want >> 9, false)), "{want:#x} in {w:x?}");
        }
        for ct in [105u32, 106, 107, 108, 119, 120, 121, 122, 123, 124, 125] {
            assert!(
                h.iter().any(|x| x.0 == (1 << 7) | ct),
                "ct field {ct}: {h:x?}"
            );
        }
        assert!(
            h.contains(&((1 << 7) | 106, false)),
            "ct_zone is exact: {h:x?}"
        );
        // The tunnel fields (flow-based tunnels), maskable as in OVS.
        for tunnel in [0x0001_2008u32, 0x0001_3e04, 0x0001_4004, 0x8000_4c08] {
            assert!(h.contains(&(tunnel >> 9, true)), "{tunnel:#x} in {h:x?}");
        }
        let set = headers(&t, p::APPLY_SETFIELD);
        assert!(
            set.contains(&0x0001_0004) && set.contains(&0x8001_0008),
            "{set:x?}"
        );
    }

    /// Every match field the codec decodes, basic and Nicira: TABLE_FEATURES lists it
    /// exactly when a FLOW_MOD matching it (with its prerequisites), encoded and decoded on
    /// the wire, is accepted by the converter and added to a real pipeline; listed as
    /// maskable exactly when the codec takes a mask for it.
    #[test]
    fn advertised_fields_are_exactly_those_a_flow_mod_takes() {
        use openflow::msg::{decode, FlowMod, FlowModCommand, Message};
        let probe = Probe::new();
        let t = table_features(&probe, 0, 254, 1000);
        let listed = ids_masked(&t, p::MATCH);
        let wildcards = ids_masked(&t, p::WILDCARDS);
        let pl = ofproto::Pipeline::default();
        pl.add_bridge("br0").unwrap();
        let mut n_listed = 0;
        for (h, mask, f) in codec_fields() {
            let fm = FlowMod {
                cookie: 0,
                cookie_mask: 0,
                table_id: 0,
                command: FlowModCommand::Add,
                idle_timeout: 0,
                hard_timeout: 0,
                priority: 7,
                buffer_id: u32::MAX,
                out_port: u32::MAX,
                out_group: u32::MAX,
                flags: 0,
                matches: openflow::Match::new(with_prereqs(f)),
                instructions: vec![],
            };
            let wire = Message::FlowMod(fm).encode(1).unwrap();
            let accepted = match decode(&wire) {
                Ok((_, Message::FlowMod(fm))) => convert::flow_mod_to_pipeline(&fm)
                    .ok()
                    .is_some_and(|p| pl.flow_mod("br0", p).is_ok()),
                _ => false,
            };
            let why = convert::flow_mod_to_pipeline(&match decode(&wire) {
                Ok((_, Message::FlowMod(fm))) => fm,
                other => panic!("{other:?}"),
            })
            .map(|p| pl.flow_mod("br0", p));
            let id = h >> 9;
            let entry = listed.iter().find(|x| x.0 == id);
            assert_eq!(
                entry.is_some(),
                accepted,
                "field {h:#010x} ({f:?}): {why:?}"
            );
            if accepted {
                n_listed += 1;
                assert_eq!(entry.unwrap().1, mask, "mask of {h:#010x}");
                assert!(
                    wildcards.contains(&(id, false)),
                    "{h:#010x} may be left out"
                );
            }
        }
        assert_eq!(
            n_listed,
            listed.len(),
            "nothing listed twice or from nowhere"
        );
        assert_eq!(wildcards.len(), listed.len());
        assert!(n_listed > 60, "{n_listed} fields");
    }
}
