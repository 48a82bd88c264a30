//! TABLE_FEATURES as the pipeline really is: the codec's full list
//! ([`TableFeatures::standard`]) narrowed to the instructions, actions, match fields and
//! set-field targets that the conversion into the pipeline (`convert`) accepts, found by
//! offering each one to the converter. What a controller reads is then exactly what a
//! FLOW_MOD may use, and stays so as the converter learns more.
//!
//! Pure functions; run on the connection thread answering the multipart request.
use openflow::action::{action_type as a, instruction_type as i};
use openflow::buf::Reader;
use openflow::msg::{table_prop as p, TableFeatureProp, TableFeatures};
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

/// The features of table `table_id` of an `n_tables` pipeline.
pub(crate) fn table_features(table_id: u8, n_tables: u8, max_entries: u32) -> TableFeatures {
    let insts: Vec<u16> = [
        (
            i::GOTO_TABLE,
            Instruction::GotoTable(table_id.saturating_add(1)),
        ),
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
    let settable: Vec<u8> = (0..64u8)
        .filter(|n| {
            sample_field(*n)
                .is_some_and(|f| convert::action_to_pipeline(&Action::SetField(f)).is_ok())
        })
        .collect();
    let acts: Vec<u16> = sample_actions()
        .into_iter()
        .filter(|(t, act)| match act {
            Action::SetField(_) => !settable.is_empty(),
            _ => convert::action_to_pipeline(act).is_ok() && *t != a::SET_FIELD,
        })
        .map(|(t, _)| t)
        .collect();
    let fields: Vec<u8> = (0..64u8)
        .filter(|n| {
            sample_field(*n)
                .is_some_and(|f| convert::match_to_pipeline(&openflow::Match::new(vec![f])).is_ok())
        })
        .collect();
    let masked: Vec<u8> = fields
        .iter()
        .copied()
        .filter(|n| field_shape(*n).is_some_and(|s| s.1))
        .collect();
    let mut t = TableFeatures::standard(table_id, n_tables, max_entries);
    for prop in &mut t.properties {
        let ty = prop.prop_type;
        *prop = match ty {
            p::INSTRUCTIONS | p::INSTRUCTIONS_MISS => TableFeatureProp::ids(ty, &insts),
            p::WRITE_ACTIONS | p::WRITE_ACTIONS_MISS | p::APPLY_ACTIONS | p::APPLY_ACTIONS_MISS => {
                TableFeatureProp::ids(ty, &acts)
            }
            p::MATCH => TableFeatureProp::oxm_ids(ty, &fields),
            p::WILDCARDS => TableFeatureProp::oxm_ids(ty, &masked),
            p::WRITE_SETFIELD
            | p::WRITE_SETFIELD_MISS
            | p::APPLY_SETFIELD
            | p::APPLY_SETFIELD_MISS => TableFeatureProp::oxm_ids(ty, &settable),
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

    fn oxms(t: &TableFeatures, ty: u16) -> Vec<u8> {
        let prop = t.properties.iter().find(|p| p.prop_type == ty).unwrap();
        prop.data.chunks(4).map(|c| c[2] >> 1).collect()
    }

    #[test]
    fn features_name_only_what_a_flow_mod_may_use() {
        let t = table_features(0, 254, 1000);
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
        ] {
            assert!(m.contains(&want), "{want} missing from {m:?}");
        }
        // metadata is matchable since the Nicira extensions (a register-file field).
        for never in [f::MplsLabel, f::TunnelId, f::Ipv6Flabel] {
            assert!(!m.contains(&never), "{never} in {m:?}");
        }
        let set = oxms(&t, p::APPLY_SETFIELD);
        assert!(set.contains(&f::EthSrc) && set.contains(&f::Ipv4Dst));
        assert!(
            !set.contains(&f::InPort) && !set.contains(&f::Ipv6Src),
            "{set:?}"
        );
        // And the promise holds for every field advertised: a FLOW_MOD matching it converts.
        for n in m {
            let field = sample_field(n).unwrap();
            assert!(convert::match_to_pipeline(&openflow::Match::new(vec![field])).is_ok());
        }
    }
}
