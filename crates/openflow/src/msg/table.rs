//! TABLE_FEATURES multipart bodies (`ofp_table_features`, OpenFlow 1.3 §7.3.5.5): per-table
//! name, metadata masks, size and property TLVs (kept as raw property payloads, with
//! constructors for the common ones). Pure codec; runs on the decoding thread.

use crate::buf::{len_u16, Reader, Writer};
use crate::error::{errors, OfError};

/// `ofp_table_feature_prop_type` values.
pub mod table_prop {
    pub const INSTRUCTIONS: u16 = 0;
    pub const INSTRUCTIONS_MISS: u16 = 1;
    pub const NEXT_TABLES: u16 = 2;
    pub const NEXT_TABLES_MISS: u16 = 3;
    pub const WRITE_ACTIONS: u16 = 4;
    pub const WRITE_ACTIONS_MISS: u16 = 5;
    pub const APPLY_ACTIONS: u16 = 6;
    pub const APPLY_ACTIONS_MISS: u16 = 7;
    pub const MATCH: u16 = 8;
    pub const WILDCARDS: u16 = 10;
    pub const WRITE_SETFIELD: u16 = 12;
    pub const WRITE_SETFIELD_MISS: u16 = 13;
    pub const APPLY_SETFIELD: u16 = 14;
    pub const APPLY_SETFIELD_MISS: u16 = 15;
}

/// One table feature property: its type and payload (without header or padding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFeatureProp {
    pub prop_type: u16,
    pub data: Vec<u8>,
}

impl TableFeatureProp {
    /// A list of instruction or action ids (each a 4-byte type/length header).
    pub fn ids(prop_type: u16, types: &[u16]) -> Self {
        let mut data = Vec::new();
        for t in types {
            data.put_u16(*t);
            data.put_u16(4);
        }
        TableFeatureProp { prop_type, data }
    }

    /// A list of next-table ids.
    pub fn next_tables(prop_type: u16, tables: impl Iterator<Item = u8>) -> Self {
        TableFeatureProp {
            prop_type,
            data: tables.collect(),
        }
    }

    /// A list of OXM ids given as 32-bit headers (no mask bit; the length is the field's):
    /// basic, NXM (`NXM_NX_REG0`, `NXM_NX_CT_STATE`, ...) or `OXM_OF_PKT_REG` fields.
    pub fn oxm_headers(prop_type: u16, headers: &[u32]) -> Self {
        let mut data = Vec::new();
        for &h in headers {
            data.put_u32(h);
        }
        TableFeatureProp { prop_type, data }
    }

    /// A list of OXM headers (basic class, no mask) for the given field numbers.
    pub fn oxm_ids(prop_type: u16, fields: &[u8]) -> Self {
        let mut data = Vec::new();
        for &f in fields {
            let width = crate::oxm::field_shape(f).map_or(0, |s| s.0) as u32;
            data.put_u32(0x8000_0000 | (u32::from(f) << 9) | width);
        }
        TableFeatureProp { prop_type, data }
    }
}

/// `ofp_table_features`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableFeatures {
    pub table_id: u8,
    pub name: String,
    pub metadata_match: u64,
    pub metadata_write: u64,
    pub config: u32,
    pub max_entries: u32,
    pub properties: Vec<TableFeatureProp>,
}

impl TableFeatures {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let len = usize::from(r.peek_u16()?);
        if len < 64 {
            return Err(errors::BAD_REQUEST_BAD_LEN);
        }
        let mut e = r.sub(len, errors::BAD_REQUEST_BAD_LEN)?;
        e.skip(2)?;
        let table_id = e.u8()?;
        e.skip(5)?;
        let mut t = TableFeatures {
            table_id,
            name: e.string(32)?,
            metadata_match: e.u64()?,
            metadata_write: e.u64()?,
            config: e.u32()?,
            max_entries: e.u32()?,
            properties: Vec::new(),
        };
        while !e.is_empty() {
            let prop_type = e.u16()?;
            let plen = usize::from(e.u16()?);
            if plen < 4 {
                return Err(errors::BAD_REQUEST_BAD_LEN);
            }
            let data = e.bytes(plen - 4)?.to_vec();
            let pad = (8 - plen % 8) % 8;
            e.skip(pad.min(e.remaining()))?;
            t.properties.push(TableFeatureProp { prop_type, data });
        }
        Ok(t)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u16(0);
        out.put_u8(self.table_id);
        out.pad(5);
        out.put_string(&self.name, 32);
        out.put_u64(self.metadata_match);
        out.put_u64(self.metadata_write);
        out.put_u32(self.config);
        out.put_u32(self.max_entries);
        for p in &self.properties {
            let pstart = out.len();
            out.put_u16(p.prop_type);
            out.put_u16(0);
            out.extend_from_slice(&p.data);
            let plen = len_u16(out, pstart);
            out.set_u16(pstart + 2, plen);
            out.pad8_from(pstart);
        }
        let len = len_u16(out, start);
        out.set_u16(start, len);
    }
}

/// Every OXM field number this crate decodes.
fn supported_fields() -> Vec<u8> {
    (0u8..64)
        .filter(|f| crate::oxm::field_shape(*f).is_some())
        .collect()
}

impl TableFeatures {
    /// The features of table `table_id` of an `n_tables` pipeline that supports everything
    /// this crate decodes: all instructions but meter, the core actions, every basic OXM
    /// field for match and set-field, maskable fields as wildcards, and goto to any later
    /// table.
    pub fn standard(table_id: u8, n_tables: u8, max_entries: u32) -> Self {
        use crate::action::{action_type as a, instruction_type as i};
        use table_prop as p;
        let insts = [
            i::GOTO_TABLE,
            i::WRITE_METADATA,
            i::WRITE_ACTIONS,
            i::APPLY_ACTIONS,
            i::CLEAR_ACTIONS,
        ];
        let acts = [
            a::OUTPUT,
            a::COPY_TTL_OUT,
            a::COPY_TTL_IN,
            a::PUSH_VLAN,
            a::POP_VLAN,
            a::SET_QUEUE,
            a::GROUP,
            a::SET_NW_TTL,
            a::DEC_NW_TTL,
            a::SET_FIELD,
        ];
        let fields = supported_fields();
        let masked: Vec<u8> = fields
            .iter()
            .copied()
            .filter(|f| crate::oxm::field_shape(*f).is_some_and(|s| s.1))
            .collect();
        let settable: Vec<u8> = fields.iter().copied().filter(|f| *f > 1).collect();
        let next = || (table_id.saturating_add(1)..n_tables).filter(move |t| *t > table_id);
        TableFeatures {
            table_id,
            name: format!("table{table_id}"),
            metadata_match: u64::MAX,
            metadata_write: u64::MAX,
            config: 0,
            max_entries,
            properties: vec![
                TableFeatureProp::ids(p::INSTRUCTIONS, &insts),
                TableFeatureProp::ids(p::INSTRUCTIONS_MISS, &insts),
                TableFeatureProp::next_tables(p::NEXT_TABLES, next()),
                TableFeatureProp::next_tables(p::NEXT_TABLES_MISS, next()),
                TableFeatureProp::ids(p::WRITE_ACTIONS, &acts),
                TableFeatureProp::ids(p::WRITE_ACTIONS_MISS, &acts),
                TableFeatureProp::ids(p::APPLY_ACTIONS, &acts),
                TableFeatureProp::ids(p::APPLY_ACTIONS_MISS, &acts),
                TableFeatureProp::oxm_ids(p::MATCH, &fields),
                TableFeatureProp::oxm_ids(p::WILDCARDS, &masked),
                TableFeatureProp::oxm_ids(p::WRITE_SETFIELD, &settable),
                TableFeatureProp::oxm_ids(p::WRITE_SETFIELD_MISS, &settable),
                TableFeatureProp::oxm_ids(p::APPLY_SETFIELD, &settable),
                TableFeatureProp::oxm_ids(p::APPLY_SETFIELD_MISS, &settable),
            ],
        }
    }
}
