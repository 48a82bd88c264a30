//! A bridge's OpenFlow groups as bytes, for `vireoctl upgrade`: the old vireod writes each group
//! (type, buckets with their 1.5 bucket ids, watch ports and actions) as an OpenFlow 1.5
//! GROUP_MOD ADD; the new one reads them with the same codec and conversion a controller's
//! GROUP_MOD goes through, and adds them before the rules that name them. Group counters start
//! again at zero (as rule counters do).
//!
//! Threads: the control thread of either vireod, during the handover.
use crate::convert::{group_desc_to_wire, group_mod_to_pipeline};
use ofproto::Pipeline;
use openflow::{bucket_id, GroupMod, GroupModCommand, Message};

/// OpenFlow 1.5's wire version: the one that carries bucket ids.
const OFP15: u8 = 6;

/// Every group of `bridge`, one GROUP_MOD ADD message each.
pub fn export_groups(pl: &Pipeline, bridge: &str) -> Result<Vec<Vec<u8>>, String> {
    let descs = pl.group_descs(bridge).map_err(|e| e.to_string())?;
    descs
        .iter()
        .map(|d| {
            let w = group_desc_to_wire(d);
            let gm = GroupMod {
                command: GroupModCommand::Add,
                group_type: w.group_type,
                group_id: w.group_id,
                buckets: w.buckets,
                command_bucket_id: bucket_id::ALL,
            };
            Message::GroupMod(gm)
                .encode_version(OFP15, 0)
                .map_err(|e| format!("group {}: {e:?}", d.group_id))
        })
        .collect()
}

/// Adds the groups [`export_groups`] wrote to `bridge`; returns how many. A message that does
/// not decode to a GROUP_MOD ADD is refused before any group is added. A bucket may name
/// another group, so groups are added in rounds until none is left; a round that adds none
/// fails with the pipeline's reason.
pub fn import_groups(pl: &Pipeline, bridge: &str, msgs: &[Vec<u8>]) -> Result<usize, String> {
    let mut pending = Vec::with_capacity(msgs.len());
    for m in msgs {
        let (_, _, msg) =
            openflow::decode_versioned(m).map_err(|e| format!("a group does not decode: {e:?}"))?;
        let Message::GroupMod(gm) = msg else {
            return Err("a handed-over group is not a GROUP_MOD".into());
        };
        if gm.command != GroupModCommand::Add {
            return Err(format!("group {}: not an ADD", gm.group_id));
        }
        let pm = group_mod_to_pipeline(&gm).map_err(|e| format!("group {}: {e:?}", gm.group_id))?;
        pending.push(pm);
    }
    let mut added = 0;
    while !pending.is_empty() {
        let before = pending.len();
        let mut why = String::new();
        pending.retain(|gm| match pl.group_mod(bridge, gm.clone()) {
            Ok(_) => {
                added += 1;
                false
            }
            Err(e) => {
                why = format!("group {}: {e}", gm.group_id);
                true
            }
        });
        if pending.len() == before {
            return Err(why);
        }
    }
    Ok(added)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ofproto::{Bucket, GroupCommand, GroupType, OfAction, PipelineConfig};

    fn out(port: u32) -> OfAction {
        OfAction::Output { port, max_len: 0 }
    }

    fn pipeline() -> Pipeline {
        let pl = Pipeline::new(PipelineConfig::default());
        pl.add_bridge("br0").unwrap();
        pl
    }

    fn group(id: u32, t: GroupType, buckets: Vec<(u32, Vec<OfAction>)>) -> ofproto::GroupMod {
        ofproto::GroupMod {
            command: GroupCommand::Add,
            group_type: t,
            group_id: id,
            buckets: buckets
                .into_iter()
                .map(|(bid, actions)| Bucket {
                    weight: if t == GroupType::Select { 10 } else { 0 },
                    watch_port: ofproto::types::ofpp::ANY,
                    watch_group: ofproto::group::GROUP_ANY,
                    actions,
                    bucket_id: Some(bid),
                })
                .collect(),
            command_bucket_id: bucket_id::ALL,
        }
    }

    #[test]
    fn groups_with_bucket_ids_and_chains_move_to_another_pipeline() {
        let old = pipeline();
        // Group 1 names group 9, which is exported after it (id order).
        old.group_mod(
            "br0",
            group(9, GroupType::Indirect, vec![(0, vec![out(3)])]),
        )
        .unwrap();
        old.group_mod(
            "br0",
            group(1, GroupType::All, vec![(4, vec![OfAction::Group(9)])]),
        )
        .unwrap();
        old.group_mod(
            "br0",
            group(
                2,
                GroupType::Select,
                vec![(5, vec![out(1)]), (8, vec![out(2)])],
            ),
        )
        .unwrap();
        let msgs = export_groups(&old, "br0").unwrap();
        assert_eq!(msgs.len(), 3);
        let new = pipeline();
        assert_eq!(import_groups(&new, "br0", &msgs).unwrap(), 3);
        assert_eq!(
            new.group_descs("br0").unwrap(),
            old.group_descs("br0").unwrap()
        );
        // Refused whole, before anything is added: a message that is not a GROUP_MOD.
        let fresh = pipeline();
        let mut bad = msgs.clone();
        bad[1][1] = 4; // OFPT_EXPERIMENTER instead of GROUP_MOD
        assert!(import_groups(&fresh, "br0", &bad).is_err());
        assert!(fresh.group_descs("br0").unwrap().is_empty());
    }
}
