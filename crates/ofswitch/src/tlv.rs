//! A bridge's Geneve option map (`NXT_TLV_TABLE_MOD` / `NXT_TLV_TABLE_REQUEST`, `ovs-ofctl
//! add-tlv-map`, `del-tlv-map`, `dump-tlv-map`): the checks OVS makes before changing the
//! table (a [`wire::tunmd::TlvTable`] kept by the pipeline per bridge, in memory, gone on
//! restart as in OVS), with OVS's error codes: `NXTTMFC_BAD_OPT_LEN`, `BAD_FIELD_IDX`,
//! `ALREADY_MAPPED`, `DUP_ENTRY`, `TABLE_FULL` (Vireo's key holds 32 option bytes, options up
//! to 16 bytes), and `INVALID_TLV_DEL` for deleting (or clearing) a mapping a flow still
//! matches or sets.
//!
//! Runs on the connection reader thread that handles the message; the change is made under
//! the pipeline's per-bridge lock of the table (`Pipeline::tlv_mod`).
use crate::convert::of_error as pipeline_error;
use crate::handler::Inner;
use openflow::msg::{Message, TlvCommand, TlvMap, TlvTableMod, TlvTableReply};
use openflow::{errors, OfError};
use wire::tunmd::{TlvError, TlvTable, FIELDS, SPACE};

fn of_error(e: TlvError) -> OfError {
    match e {
        TlvError::BadOptLen => errors::NX_TLV_BAD_OPT_LEN,
        TlvError::BadFieldIdx => errors::NX_TLV_BAD_FIELD_IDX,
        TlvError::TableFull => errors::NX_TLV_TABLE_FULL,
        TlvError::AlreadyMapped => errors::NX_TLV_ALREADY_MAPPED,
        TlvError::DupEntry => errors::NX_TLV_DUP_ENTRY,
    }
}

/// The reply to `NXT_TLV_TABLE_REQUEST`.
pub(crate) fn reply(t: &TlvTable) -> Message {
    Message::TlvTableReply(TlvTableReply {
        max_option_space: SPACE as u32,
        max_fields: FIELDS as u16,
        maps: t
            .iter()
            .map(|(i, e)| TlvMap {
                class: e.class,
                otype: e.otype,
                len: e.len,
                index: i as u16,
            })
            .collect(),
    })
}

/// Whether a flow of the bridge matches or writes `tun_metadata<idx>`.
fn in_use(inner: &Inner, t: &TlvTable, idx: usize) -> bool {
    let Some(e) = t.get(idx) else {
        return false;
    };
    let all = ofproto::FlowMod::delete(ofproto::Match::ANY);
    let Ok(flows) = inner.pipeline.flow_stats(&inner.bridge, &all) else {
        return false;
    };
    let needle = format!("TunMetadata {{ idx: {idx},");
    flows.iter().any(|f| {
        !wire::tunmd::is_zero(&f.match_.mask, e.offset.into(), e.len.into())
            // Actions nest (apply/write, ct exec, loads): their debug form names the field.
            || format!("{:?}", f.instructions).contains(&needle)
    })
}

/// Applies a table mod (all or nothing).
pub(crate) fn table_mod(inner: &Inner, m: &TlvTableMod) -> Result<(), OfError> {
    inner
        .pipeline
        .tlv_mod(&inner.bridge, |t| match m.command {
            TlvCommand::Add => {
                let maps: Vec<_> = m
                    .maps
                    .iter()
                    .map(|m| (m.class, m.otype, m.len, m.index))
                    .collect();
                t.add(&maps).map_err(of_error)
            }
            TlvCommand::Delete | TlvCommand::Clear => {
                let idx: Vec<u16> = if m.command == TlvCommand::Clear {
                    t.iter().map(|(i, _)| i as u16).collect()
                } else {
                    m.maps.iter().map(|m| m.index).collect()
                };
                if idx.iter().any(|&i| in_use(inner, t, usize::from(i))) {
                    return Err(errors::NX_TLV_INVALID_DEL);
                }
                t.delete(&idx).map_err(of_error)
            }
        })
        .map_err(|e| pipeline_error(&e))?
}
