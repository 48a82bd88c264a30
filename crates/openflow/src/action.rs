//! Actions (`ofp_action_*`, OpenFlow 1.3 §7.2.5) and instructions (`ofp_instruction_*`,
//! §7.2.4): typed enums with checked decode and canonical encode. Runs on the decoding
//! thread.

use crate::buf::{len_u16, Reader, Writer};
use crate::error::{errors, OfError};
use crate::nx::NxAction;
use crate::oxm::OxmField;

/// `ofp_action_type` values.
pub mod action_type {
    pub const OUTPUT: u16 = 0;
    pub const COPY_TTL_OUT: u16 = 11;
    pub const COPY_TTL_IN: u16 = 12;
    pub const SET_MPLS_TTL: u16 = 15;
    pub const DEC_MPLS_TTL: u16 = 16;
    pub const PUSH_VLAN: u16 = 17;
    pub const POP_VLAN: u16 = 18;
    pub const PUSH_MPLS: u16 = 19;
    pub const POP_MPLS: u16 = 20;
    pub const SET_QUEUE: u16 = 21;
    pub const GROUP: u16 = 22;
    pub const SET_NW_TTL: u16 = 23;
    pub const DEC_NW_TTL: u16 = 24;
    pub const SET_FIELD: u16 = 25;
    pub const PUSH_PBB: u16 = 26;
    pub const POP_PBB: u16 = 27;
    /// OpenFlow 1.5 `OFPAT_COPY_FIELD` (ovs-ofctl's `move` in 1.5).
    pub const COPY_FIELD: u16 = 28;
    /// OpenFlow 1.5 `OFPAT_METER` (the meter instruction of 1.3 and 1.4 became an action).
    pub const METER: u16 = 29;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// One action.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// Output to a port; `max_len` bytes go to the controller for `OFPP_CONTROLLER`.
    Output {
        port: u32,
        max_len: u16,
    },
    CopyTtlOut,
    CopyTtlIn,
    SetMplsTtl(u8),
    DecMplsTtl,
    PushVlan(u16),
    PopVlan,
    PushMpls(u16),
    PopMpls(u16),
    SetQueue(u32),
    Group(u32),
    SetNwTtl(u8),
    DecNwTtl,
    /// Set a header field (never masked in 1.3).
    SetField(OxmField),
    PushPbb(u16),
    PopPbb,
    /// OpenFlow 1.5 `OFPAT_METER`. The model keeps meters as [`Instruction::Meter`]: the 1.5
    /// codec moves a leading meter action of an apply-actions list into that instruction and
    /// back ([`meter_action_to_instruction`], [`meter_instruction_to_action`]); anywhere else the
    /// pipeline refuses it as an action it does not know.
    Meter(u32),
    /// A Nicira experimenter action (see [`crate::nx`]).
    Nx(NxAction),
    /// OpenFlow 1.5 `OFPAT_COPY_FIELD`: `n_bits` bits from `src` at `src_ofs` to `dst` at
    /// `dst_ofs` (32-bit OXM/NXM headers), what `NXAST_REG_MOVE` is in 1.0-1.4.
    CopyField {
        n_bits: u16,
        src_ofs: u16,
        dst_ofs: u16,
        src: u32,
        dst: u32,
    },
}

impl Action {
    /// Decodes one action.
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let head = r.peek(4).map_err(|_| errors::BAD_ACTION_BAD_LEN)?;
        let atype = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        if len < 8 || len % 8 != 0 {
            return Err(errors::BAD_ACTION_BAD_LEN);
        }
        let mut a = r.sub(len, errors::BAD_ACTION_BAD_LEN)?;
        a.skip(4)?;
        let fixed = |want: usize| {
            if len == want {
                Ok(())
            } else {
                Err(errors::BAD_ACTION_BAD_LEN)
            }
        };
        use action_type as t;
        let act = match atype {
            t::OUTPUT => {
                fixed(16)?;
                let port = a.u32()?;
                Action::Output {
                    port,
                    max_len: a.u16()?,
                }
            }
            t::SET_FIELD => return decode_set_field(&mut a),
            t::COPY_FIELD => {
                fixed(24)?;
                let n_bits = a.u16()?;
                let src_ofs = a.u16()?;
                let dst_ofs = a.u16()?;
                a.skip(2)?;
                Action::CopyField {
                    n_bits,
                    src_ofs,
                    dst_ofs,
                    src: a.u32()?,
                    dst: a.u32()?,
                }
            }
            t::EXPERIMENTER => Action::Nx(NxAction::decode(&mut a, len)?),
            _ => {
                fixed(8)?;
                decode_short(atype, &mut a)?
            }
        };
        Ok(act)
    }

    /// Appends the action.
    pub fn encode(&self, out: &mut Vec<u8>) {
        use action_type as t;
        let start = out.len();
        let (atype, arg) = match *self {
            Action::Nx(ref nx) => {
                nx.encode(out);
                return;
            }
            Action::CopyField {
                n_bits,
                src_ofs,
                dst_ofs,
                src,
                dst,
            } => {
                out.put_u16(t::COPY_FIELD);
                out.put_u16(24);
                out.put_u16(n_bits);
                out.put_u16(src_ofs);
                out.put_u16(dst_ofs);
                out.pad(2);
                out.put_u32(src);
                out.put_u32(dst);
                out.pad(4);
                return;
            }
            Action::Output { port, max_len } => {
                out.put_u16(t::OUTPUT);
                out.put_u16(16);
                out.put_u32(port);
                out.put_u16(max_len);
                out.pad(6);
                return;
            }
            Action::SetField(f) => {
                out.put_u16(t::SET_FIELD);
                out.put_u16(0);
                f.encode(out);
                out.pad8_from(start);
                let len = len_u16(out, start);
                out.set_u16(start + 2, len);
                return;
            }
            Action::CopyTtlOut => (t::COPY_TTL_OUT, Arg::None),
            Action::CopyTtlIn => (t::COPY_TTL_IN, Arg::None),
            Action::SetMplsTtl(v) => (t::SET_MPLS_TTL, Arg::U8(v)),
            Action::DecMplsTtl => (t::DEC_MPLS_TTL, Arg::None),
            Action::PushVlan(v) => (t::PUSH_VLAN, Arg::U16(v)),
            Action::PopVlan => (t::POP_VLAN, Arg::None),
            Action::PushMpls(v) => (t::PUSH_MPLS, Arg::U16(v)),
            Action::PopMpls(v) => (t::POP_MPLS, Arg::U16(v)),
            Action::SetQueue(v) => (t::SET_QUEUE, Arg::U32(v)),
            Action::Group(v) => (t::GROUP, Arg::U32(v)),
            Action::SetNwTtl(v) => (t::SET_NW_TTL, Arg::U8(v)),
            Action::DecNwTtl => (t::DEC_NW_TTL, Arg::None),
            Action::PushPbb(v) => (t::PUSH_PBB, Arg::U16(v)),
            Action::PopPbb => (t::POP_PBB, Arg::None),
            Action::Meter(v) => (t::METER, Arg::U32(v)),
        };
        out.put_u16(atype);
        out.put_u16(8);
        match arg {
            Arg::None => out.pad(4),
            Arg::U8(v) => {
                out.put_u8(v);
                out.pad(3);
            }
            Arg::U16(v) => {
                out.put_u16(v);
                out.pad(2);
            }
            Arg::U32(v) => out.put_u32(v),
        }
    }
}

enum Arg {
    None,
    U8(u8),
    U16(u16),
    U32(u32),
}

/// The 8-byte actions: `a` is positioned after the 4-byte header.
fn decode_short(atype: u16, a: &mut Reader<'_>) -> Result<Action, OfError> {
    use action_type as t;
    Ok(match atype {
        t::COPY_TTL_OUT => Action::CopyTtlOut,
        t::COPY_TTL_IN => Action::CopyTtlIn,
        t::METER => Action::Meter(a.u32()?),
        t::SET_MPLS_TTL => Action::SetMplsTtl(a.u8()?),
        t::DEC_MPLS_TTL => Action::DecMplsTtl,
        t::PUSH_VLAN => Action::PushVlan(push_ethertype(a.u16()?, &[0x8100, 0x88a8])?),
        t::POP_VLAN => Action::PopVlan,
        t::PUSH_MPLS => Action::PushMpls(push_ethertype(a.u16()?, &[0x8847, 0x8848])?),
        t::POP_MPLS => Action::PopMpls(a.u16()?),
        t::SET_QUEUE => Action::SetQueue(a.u32()?),
        t::GROUP => Action::Group(a.u32()?),
        t::SET_NW_TTL => Action::SetNwTtl(a.u8()?),
        t::DEC_NW_TTL => Action::DecNwTtl,
        t::PUSH_PBB => Action::PushPbb(push_ethertype(a.u16()?, &[0x88e7])?),
        t::POP_PBB => Action::PopPbb,
        _ => return Err(errors::BAD_ACTION_BAD_TYPE),
    })
}

fn push_ethertype(v: u16, allowed: &[u16]) -> Result<u16, OfError> {
    if allowed.contains(&v) {
        Ok(v)
    } else {
        Err(errors::BAD_ACTION_BAD_ARGUMENT)
    }
}

fn decode_set_field(a: &mut Reader<'_>) -> Result<Action, OfError> {
    let f = OxmField::decode(a).map_err(|e| match e {
        errors::BAD_MATCH_BAD_FIELD => errors::BAD_ACTION_BAD_SET_TYPE,
        errors::BAD_MATCH_BAD_LEN => errors::BAD_ACTION_BAD_SET_LEN,
        _ => errors::BAD_ACTION_BAD_SET_ARGUMENT,
    })?;
    // Masks: only on Nicira-class fields (registers), as OpenFlow 1.5 and ovs-ofctl write
    // `load` there; a basic field's set-field takes no mask in 1.3.
    if f.has_mask() && !matches!(f, OxmField::Nx(_)) {
        return Err(errors::BAD_ACTION_BAD_SET_ARGUMENT);
    }
    // What remains is padding; it must be shorter than 8 bytes.
    if a.remaining() >= 8 {
        return Err(errors::BAD_ACTION_BAD_SET_LEN);
    }
    Ok(Action::SetField(f))
}

/// Decodes a list of actions filling all of `r`.
pub fn decode_actions(r: &mut Reader<'_>) -> Result<Vec<Action>, OfError> {
    let mut v = Vec::new();
    while !r.is_empty() {
        v.push(Action::decode(r)?);
    }
    Ok(v)
}

/// Appends a list of actions.
pub fn encode_actions(actions: &[Action], out: &mut Vec<u8>) {
    for a in actions {
        a.encode(out);
    }
}

/// OpenFlow 1.5 → model: the meter action that starts an apply-actions list becomes the
/// meter instruction (OVS writes `meter:N` there). A meter action anywhere else stays, and the
/// pipeline refuses it.
pub fn meter_action_to_instruction(insts: &mut Vec<Instruction>) {
    let mut meter = None;
    for inst in insts.iter_mut() {
        if let Instruction::ApplyActions(acts) = inst {
            if let Some(Action::Meter(m)) = acts.first() {
                meter = Some(*m);
                acts.remove(0);
            }
        }
    }
    if let Some(m) = meter {
        if !insts.iter().any(|i| matches!(i, Instruction::Meter(_))) {
            insts.insert(0, Instruction::Meter(m));
        }
    }
}

/// Model → OpenFlow 1.5: the meter instruction becomes a meter action at the start of the
/// apply-actions list (one is made if the rule has none).
pub fn meter_instruction_to_action(insts: &[Instruction]) -> Vec<Instruction> {
    let Some(m) = insts.iter().find_map(|i| match i {
        Instruction::Meter(m) => Some(*m),
        _ => None,
    }) else {
        return insts.to_vec();
    };
    let mut out: Vec<Instruction> = insts
        .iter()
        .filter(|i| !matches!(i, Instruction::Meter(_)))
        .cloned()
        .collect();
    match out
        .iter_mut()
        .find(|i| matches!(i, Instruction::ApplyActions(_)))
    {
        Some(Instruction::ApplyActions(acts)) => acts.insert(0, Action::Meter(m)),
        _ => out.insert(0, Instruction::ApplyActions(vec![Action::Meter(m)])),
    }
    out
}

/// `ofp_instruction_type` values.
pub mod instruction_type {
    pub const GOTO_TABLE: u16 = 1;
    pub const WRITE_METADATA: u16 = 2;
    pub const WRITE_ACTIONS: u16 = 3;
    pub const APPLY_ACTIONS: u16 = 4;
    pub const CLEAR_ACTIONS: u16 = 5;
    pub const METER: u16 = 6;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// One instruction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Instruction {
    GotoTable(u8),
    WriteMetadata { metadata: u64, mask: u64 },
    WriteActions(Vec<Action>),
    ApplyActions(Vec<Action>),
    ClearActions,
    Meter(u32),
}

impl Instruction {
    fn kind(&self) -> u16 {
        use instruction_type as t;
        match self {
            Instruction::GotoTable(_) => t::GOTO_TABLE,
            Instruction::WriteMetadata { .. } => t::WRITE_METADATA,
            Instruction::WriteActions(_) => t::WRITE_ACTIONS,
            Instruction::ApplyActions(_) => t::APPLY_ACTIONS,
            Instruction::ClearActions => t::CLEAR_ACTIONS,
            Instruction::Meter(_) => t::METER,
        }
    }

    /// The actions of an apply / write instruction (empty for the others).
    pub fn actions_ref(&self) -> &[Action] {
        match self {
            Instruction::ApplyActions(a) | Instruction::WriteActions(a) => a,
            _ => &[],
        }
    }

    /// Decodes one instruction.
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        use instruction_type as t;
        let head = r.peek(4).map_err(|_| errors::BAD_INSTRUCTION_BAD_LEN)?;
        let itype = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        if len < 8 || len % 8 != 0 {
            return Err(errors::BAD_INSTRUCTION_BAD_LEN);
        }
        let mut i = r.sub(len, errors::BAD_INSTRUCTION_BAD_LEN)?;
        i.skip(4)?;
        let want = match itype {
            t::WRITE_METADATA => Some(24),
            t::GOTO_TABLE | t::CLEAR_ACTIONS | t::METER => Some(8),
            _ => None,
        };
        if want.is_some_and(|w| w != len) {
            return Err(errors::BAD_INSTRUCTION_BAD_LEN);
        }
        Ok(match itype {
            t::GOTO_TABLE => Instruction::GotoTable(i.u8()?),
            t::WRITE_METADATA => {
                i.skip(4)?;
                let metadata = i.u64()?;
                Instruction::WriteMetadata {
                    metadata,
                    mask: i.u64()?,
                }
            }
            t::WRITE_ACTIONS | t::APPLY_ACTIONS => {
                i.skip(4)?;
                let acts = decode_actions(&mut i)?;
                if itype == t::WRITE_ACTIONS {
                    Instruction::WriteActions(acts)
                } else {
                    Instruction::ApplyActions(acts)
                }
            }
            t::CLEAR_ACTIONS => Instruction::ClearActions,
            t::METER => Instruction::Meter(i.u32()?),
            t::EXPERIMENTER => return Err(errors::BAD_INSTRUCTION_BAD_EXPERIMENTER),
            _ => return Err(errors::BAD_INSTRUCTION_UNKNOWN_INST),
        })
    }

    /// Appends the instruction.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u16(self.kind());
        out.put_u16(0);
        match self {
            Instruction::GotoTable(t) => {
                out.put_u8(*t);
                out.pad(3);
            }
            Instruction::WriteMetadata { metadata, mask } => {
                out.pad(4);
                out.put_u64(*metadata);
                out.put_u64(*mask);
            }
            Instruction::WriteActions(a) | Instruction::ApplyActions(a) => {
                out.pad(4);
                encode_actions(a, out);
            }
            Instruction::ClearActions => out.pad(4),
            Instruction::Meter(m) => out.put_u32(*m),
        }
        let len = len_u16(out, start);
        out.set_u16(start + 2, len);
    }
}

/// Decodes the instructions filling all of `r`; an instruction type may appear once.
pub fn decode_instructions(r: &mut Reader<'_>) -> Result<Vec<Instruction>, OfError> {
    let mut v: Vec<Instruction> = Vec::new();
    while !r.is_empty() {
        let i = Instruction::decode(r)?;
        if v.iter().any(|o| o.kind() == i.kind()) {
            return Err(errors::BAD_INSTRUCTION_UNSUP_INST);
        }
        v.push(i);
    }
    Ok(v)
}

/// Appends instructions.
pub fn encode_instructions(insts: &[Instruction], out: &mut Vec<u8>) {
    for i in insts {
        i.encode(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn rt_actions(a: &[Action]) -> Vec<Action> {
        let mut v = Vec::new();
        encode_actions(a, &mut v);
        assert_eq!(v.len() % 8, 0);
        decode_actions(&mut Reader::new(&v, errors::BAD_ACTION_BAD_LEN)).unwrap()
    }

    #[test]
    fn all_actions_roundtrip() {
        let acts = vec![
            Action::Output {
                port: 2,
                max_len: 0xffe5,
            },
            Action::Group(9),
            Action::SetField(OxmField::Ipv4Dst(Ipv4Addr::new(1, 2, 3, 4), None)),
            Action::SetField(OxmField::EthSrc([1, 2, 3, 4, 5, 6], None)),
            Action::PushVlan(0x8100),
            Action::PopVlan,
            Action::SetQueue(3),
            Action::DecNwTtl,
            Action::CopyTtlIn,
            Action::CopyTtlOut,
            Action::SetNwTtl(9),
            Action::SetMplsTtl(3),
            Action::DecMplsTtl,
            Action::PushMpls(0x8847),
            Action::PopMpls(0x0800),
            Action::PushPbb(0x88e7),
            Action::PopPbb,
        ];
        assert_eq!(rt_actions(&acts), acts);
    }

    #[test]
    fn all_instructions_roundtrip() {
        let insts = vec![
            Instruction::ApplyActions(vec![Action::Output {
                port: 1,
                max_len: 0,
            }]),
            Instruction::ClearActions,
            Instruction::WriteActions(vec![Action::Group(1)]),
            Instruction::WriteMetadata {
                metadata: 1,
                mask: 3,
            },
            Instruction::GotoTable(4),
            Instruction::Meter(2),
        ];
        let mut v = Vec::new();
        encode_instructions(&insts, &mut v);
        let back = decode_instructions(&mut Reader::new(&v, errors::BAD_REQUEST_BAD_LEN));
        assert_eq!(back.unwrap(), insts);
    }

    fn decode_one(b: &[u8]) -> Result<Action, OfError> {
        Action::decode(&mut Reader::new(b, errors::BAD_REQUEST_BAD_LEN))
    }

    #[test]
    fn action_errors() {
        assert_eq!(
            decode_one(&[0, 99, 0, 8, 0, 0, 0, 0]),
            Err(errors::BAD_ACTION_BAD_TYPE)
        );
        assert_eq!(
            decode_one(&[0, 0, 0, 8, 0, 0, 0, 0]),
            Err(errors::BAD_ACTION_BAD_LEN)
        );
        assert_eq!(
            decode_one(&[0, 18, 0, 12, 0, 0, 0, 0]),
            Err(errors::BAD_ACTION_BAD_LEN)
        );
        assert_eq!(
            decode_one(&[0, 18, 0, 16, 0, 0, 0, 0]),
            Err(errors::BAD_ACTION_BAD_LEN)
        );
        assert_eq!(
            decode_one(&[0xff, 0xff, 0, 16, 0, 0, 0x23, 0x21, 0, 1, 0, 0, 0, 0, 0, 0]),
            Err(errors::BAD_ACTION_BAD_EXPERIMENTER)
        );
        assert_eq!(
            decode_one(&[0xff, 0xff, 0, 16, 0, 0, 0x23, 0x20, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(errors::BAD_ACTION_BAD_EXP_TYPE)
        );
        assert_eq!(
            decode_one(&[0, 17, 0, 8, 0x08, 0x00, 0, 0]),
            Err(errors::BAD_ACTION_BAD_ARGUMENT)
        );
        // set_field with a masked in_port-like field (metadata masked).
        let mut sf = vec![0, 25, 0, 24];
        OxmField::Metadata(1, Some(1)).encode(&mut sf);
        sf.pad8_from(0);
        assert_eq!(decode_one(&sf), Err(errors::BAD_ACTION_BAD_SET_ARGUMENT));
        assert_eq!(
            decode_one(&[0, 25, 0, 8, 0x80, 0, 200, 0]),
            Err(errors::BAD_ACTION_BAD_SET_TYPE)
        );
    }

    #[test]
    fn instruction_errors() {
        let d = |b: &[u8]| Instruction::decode(&mut Reader::new(b, errors::BAD_REQUEST_BAD_LEN));
        assert_eq!(
            d(&[0, 9, 0, 8, 0, 0, 0, 0]),
            Err(errors::BAD_INSTRUCTION_UNKNOWN_INST)
        );
        assert_eq!(
            d(&[0, 1, 0, 16, 0, 0, 0, 0]),
            Err(errors::BAD_INSTRUCTION_BAD_LEN)
        );
        assert_eq!(
            d(&[0xff, 0xff, 0, 8, 0, 0, 0, 0]),
            Err(errors::BAD_INSTRUCTION_BAD_EXPERIMENTER)
        );
        let twice = [0, 5, 0, 8, 0, 0, 0, 0, 0, 5, 0, 8, 0, 0, 0, 0];
        let r = decode_instructions(&mut Reader::new(&twice, errors::BAD_REQUEST_BAD_LEN));
        assert_eq!(r, Err(errors::BAD_INSTRUCTION_UNSUP_INST));
    }
}
