//! Nicira extensions inside OpenFlow 1.3+ messages, as `ovs-ofctl -O OpenFlow13` writes
//! them: experimenter actions (`OFPAT_EXPERIMENTER`, vendor `0x00002320`, an `NXAST_*`
//! subtype) and NXM / OXM experimenter-class match fields ([`NxmField`]: `reg0`-`reg15`,
//! `xreg0`-`xreg7`, `xxreg0`-`xxreg3`, `tun_id`, `tun_src`/`tun_dst`, `ct_mark`, `ct_label`).
//!
//! Decoding is checked like the rest of the codec: an unknown vendor is
//! `OFPBAC_BAD_EXPERIMENTER`, an unknown subtype `OFPBAC_BAD_EXP_TYPE`, a length that does
//! not fit the subtype `OFPBAC_BAD_LEN`; nothing is dropped silently. `ct` nests actions one
//! level (a `ct` inside `ct` is `OFPBAC_BAD_ARGUMENT`, which also bounds decode recursion).
//! Field headers inside `move` / `load` are kept as raw 32-bit NXM/OXM headers; their meaning
//! (and whether a pipeline can use them) is the caller's. Runs on the decoding thread.

use crate::action::{decode_actions, encode_actions, Action};
use crate::buf::{len_u16, Reader, Writer};
use crate::error::{errors, OfError};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Nicira's vendor / experimenter id.
pub const NX_VENDOR: u32 = 0x0000_2320;

/// `NXAST_*` subtypes Vireo decodes.
pub mod subtype {
    pub const RESUBMIT: u16 = 1;
    pub const REG_MOVE: u16 = 6;
    pub const REG_LOAD: u16 = 7;
    pub const NOTE: u16 = 8;
    pub const RESUBMIT_TABLE: u16 = 14;
    pub const DEC_TTL: u16 = 18;
    pub const DEC_TTL_CNT_IDS: u16 = 21;
    pub const REG_LOAD2: u16 = 33;
    pub const CT: u16 = 35;
    pub const NAT: u16 = 36;
    pub const CT_CLEAR: u16 = 43;
}

/// NXM / OXM classes.
pub mod class {
    /// `NXM_OF_*` (OpenFlow 1.0 fields in NXM form).
    pub const NXM0: u16 = 0x0000;
    /// `NXM_NX_*`.
    pub const NXM1: u16 = 0x0001;
    /// OpenFlow basic.
    pub const OXM_BASIC: u16 = 0x8000;
    /// `OXM_OF_PKT_REG*` (the 64-bit `xreg`s).
    pub const PKT_REG: u16 = 0x8001;
}

/// `NXM_NX_*` field numbers used here.
pub mod nxm1 {
    /// `NXM_NX_REG0`; `reg N` is `REG0 + N`.
    pub const REG0: u8 = 0;
    pub const TUN_ID: u8 = 16;
    pub const TUN_IPV4_SRC: u8 = 31;
    pub const TUN_IPV4_DST: u8 = 32;
    pub const TUN_IPV6_SRC: u8 = 109;
    pub const TUN_IPV6_DST: u8 = 110;
    /// `NXM_NX_TUN_METADATA0`; `tun_metadata N` is `TUN_METADATA0 + N` (N < 64): a Geneve
    /// option's value, variable length (the option's, per the switch's TLV map).
    pub const TUN_METADATA0: u8 = 40;
    /// Number of `tun_metadataN` fields.
    pub const TUN_METADATA_N: u8 = 64;
    pub const CT_STATE: u8 = 105;
    pub const CT_ZONE: u8 = 106;
    pub const CT_MARK: u8 = 107;
    pub const CT_LABEL: u8 = 108;
    pub const CT_NW_PROTO: u8 = 119;
    pub const CT_NW_SRC: u8 = 120;
    pub const CT_NW_DST: u8 = 121;
    pub const CT_IPV6_SRC: u8 = 122;
    pub const CT_IPV6_DST: u8 = 123;
    pub const CT_TP_SRC: u8 = 124;
    pub const CT_TP_DST: u8 = 125;
    /// `NXM_NX_XXREG0`; `xxreg N` is `XXREG0 + N`.
    pub const XXREG0: u8 = 111;
}

/// Builds a field header (no mask bit) from class, field and payload length.
pub const fn header(class: u16, field: u8, len: u8) -> u32 {
    (class as u32) << 16 | (field as u32) << 9 | len as u32
}

/// (class, field, has-mask, length) of a header.
pub const fn split_header(h: u32) -> (u16, u8, bool, u8) {
    (
        (h >> 16) as u16,
        ((h >> 9) & 0x7f) as u8,
        h & 0x100 != 0,
        h as u8,
    )
}

/// (value width in bytes, maskable) of an NXM/OXM experimenter-class match field the codec
/// knows; None for others (`OFPBMC_BAD_FIELD`).
pub fn nxm_shape(class: u16, field: u8) -> Option<(usize, bool)> {
    match (class, field) {
        (class::NXM1, 0..=15) => Some((4, true)),
        (class::NXM1, nxm1::TUN_ID) => Some((8, true)),
        (class::NXM1, nxm1::TUN_IPV4_SRC | nxm1::TUN_IPV4_DST) => Some((4, true)),
        (class::NXM1, nxm1::TUN_IPV6_SRC | nxm1::TUN_IPV6_DST) => Some((16, true)),
        // Variable length: the width given is the most Vireo holds (see `is_tun_metadata`).
        (class::NXM1, f) if is_tun_metadata(class::NXM1, f) => Some((16, true)),
        (class::NXM1, nxm1::CT_STATE) => Some((4, true)),
        (class::NXM1, nxm1::CT_ZONE) => Some((2, false)),
        (class::NXM1, nxm1::CT_MARK) => Some((4, true)),
        (class::NXM1, nxm1::CT_LABEL) => Some((16, true)),
        (class::NXM1, nxm1::CT_NW_PROTO) => Some((1, false)),
        (class::NXM1, nxm1::CT_NW_SRC | nxm1::CT_NW_DST) => Some((4, true)),
        (class::NXM1, nxm1::CT_IPV6_SRC | nxm1::CT_IPV6_DST) => Some((16, true)),
        (class::NXM1, nxm1::CT_TP_SRC | nxm1::CT_TP_DST) => Some((2, true)),
        (class::NXM1, 111..=114) => Some((16, true)),
        (class::PKT_REG, 0..=7) => Some((8, true)),
        _ => None,
    }
}

/// Whether (class, field) is `tun_metadataN`: a variable-length field. Its TLVs may carry
/// 1 to 124 value bytes (ovs-ofctl writes as few as the value needs; OVS writes the mapped
/// option's length); Vireo holds values of up to 16 significant bytes (longer ones must
/// start with zeros, else `OFPBMC_BAD_VALUE`) and writes as few bytes as the value (and
/// mask) need, as ovs-ofctl does.
pub fn is_tun_metadata(class: u16, field: u8) -> bool {
    class == class::NXM1
        && (nxm1::TUN_METADATA0..nxm1::TUN_METADATA0 + nxm1::TUN_METADATA_N).contains(&field)
}

/// Bytes needed for `v` (at least 1).
fn min_bytes(v: u128) -> usize {
    (16 - (v.leading_zeros() / 8) as usize).max(1)
}

/// A match or set-field TLV of an NXM / experimenter class (value right-aligned in a u128).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NxmField {
    /// Class (`0x0001` NXM_NX, `0x8001` PKT_REG).
    pub class: u16,
    /// Field number.
    pub field: u8,
    /// Value.
    pub value: u128,
    /// Mask, if the TLV has one.
    pub mask: Option<u128>,
}

fn be_u128(b: &[u8]) -> u128 {
    b.iter().fold(0u128, |acc, &x| (acc << 8) | u128::from(x))
}

fn put_be(out: &mut Vec<u8>, v: u128, width: usize) {
    out.extend_from_slice(&v.to_be_bytes()[16 - width..]);
}

impl NxmField {
    /// `reg N` (0..16).
    pub fn reg(n: u8, value: u32, mask: Option<u32>) -> NxmField {
        NxmField {
            class: class::NXM1,
            field: nxm1::REG0 + n,
            value: value.into(),
            mask: mask.map(u128::from),
        }
    }

    /// Value width in bytes (0 if the field is unknown; for `tun_metadataN` as few bytes as
    /// value and mask need).
    pub fn width(&self) -> usize {
        if is_tun_metadata(self.class, self.field) {
            return min_bytes(self.value | self.mask.unwrap_or(0));
        }
        nxm_shape(self.class, self.field).map_or(0, |s| s.0)
    }

    /// Decodes the payload of a TLV whose header has been read (BAD_MATCH codes).
    pub(crate) fn decode_payload(
        class: u16,
        field: u8,
        has_mask: bool,
        payload: &[u8],
    ) -> Result<NxmField, OfError> {
        let (mut width, maskable) = nxm_shape(class, field).ok_or(errors::BAD_MATCH_BAD_FIELD)?;
        if is_tun_metadata(class, field) {
            width = if has_mask {
                payload.len() / 2
            } else {
                payload.len()
            };
            if width == 0 || width > 124 || (has_mask && !payload.len().is_multiple_of(2)) {
                return Err(errors::BAD_MATCH_BAD_LEN);
            }
            let (v, m) = payload.split_at(width);
            let long = |b: &[u8]| b.len() > 16 && b[..b.len() - 16].iter().any(|&x| x != 0);
            if long(v) || long(m) {
                return Err(errors::BAD_MATCH_BAD_VALUE);
            }
            let tail = |b: &[u8]| be_u128(&b[b.len().saturating_sub(16)..]);
            let (value, mask) = (tail(v), has_mask.then(|| tail(m)));
            if mask.is_some_and(|m| value & !m != 0) {
                return Err(errors::BAD_MATCH_BAD_WILDCARDS);
            }
            return Ok(NxmField {
                class,
                field,
                value,
                mask,
            });
        }
        if payload.len() != width * if has_mask { 2 } else { 1 } {
            return Err(errors::BAD_MATCH_BAD_LEN);
        }
        if has_mask && !maskable {
            return Err(errors::BAD_MATCH_BAD_MASK);
        }
        let (v, m) = payload.split_at(width);
        let value = be_u128(v);
        let mask = has_mask.then(|| be_u128(m));
        if mask.is_some_and(|m| value & !m != 0) {
            return Err(errors::BAD_MATCH_BAD_WILDCARDS);
        }
        Ok(NxmField {
            class,
            field,
            value,
            mask,
        })
    }

    /// Appends header and payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let w = self.width();
        let len = if self.mask.is_some() { 2 * w } else { w };
        let mut h = header(self.class, self.field, len as u8);
        if self.mask.is_some() {
            h |= 0x100;
        }
        out.put_u32(h);
        put_be(out, self.value, w);
        if let Some(m) = self.mask {
            put_be(out, m, w);
        }
    }
}

/// `nat` flags (`NX_NAT_F_*`).
pub mod nat_flags {
    pub const SRC: u16 = 1;
    pub const DST: u16 = 2;
    pub const PERSISTENT: u16 = 4;
    pub const PROTO_HASH: u16 = 8;
    pub const PROTO_RANDOM: u16 = 16;
    pub const ALL: u16 = 31;
}

/// `nat` range bits (`NX_NAT_RANGE_*`).
pub mod nat_range {
    pub const IPV4_MIN: u16 = 1;
    pub const IPV4_MAX: u16 = 2;
    pub const IPV6_MIN: u16 = 4;
    pub const IPV6_MAX: u16 = 8;
    pub const PROTO_MIN: u16 = 16;
    pub const PROTO_MAX: u16 = 32;
    pub const ALL: u16 = 63;
}

/// `NXAST_NAT`'s body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NxNat {
    /// [`nat_flags`].
    pub flags: u16,
    pub ipv4_min: Option<Ipv4Addr>,
    pub ipv4_max: Option<Ipv4Addr>,
    pub ipv6_min: Option<Ipv6Addr>,
    pub ipv6_max: Option<Ipv6Addr>,
    pub proto_min: Option<u16>,
    pub proto_max: Option<u16>,
}

/// `NXAST_CT`'s body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NxCt {
    /// `NX_CT_F_COMMIT` (1), `NX_CT_F_FORCE` (2).
    pub flags: u16,
    /// Header of the field the zone comes from (0: `zone` is an immediate).
    pub zone_src: u32,
    /// The zone, or `ofs << 6 | (nbits - 1)` of `zone_src`.
    pub zone: u16,
    /// Recirculation table (0xff: none).
    pub recirc_table: u8,
    /// ALG port (0: none).
    pub alg: u16,
    /// Nested actions (`nat`, set-field / load to `ct_mark` / `ct_label`).
    pub actions: Vec<Action>,
}

/// A Nicira experimenter action.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NxAction {
    /// `NXAST_RESUBMIT` (`table` none) or `NXAST_RESUBMIT_TABLE`. `in_port` is a 16-bit
    /// OpenFlow 1.0 port (`0xfff8` = the packet's own).
    Resubmit { in_port: u16, table: Option<u8> },
    /// `NXAST_REG_MOVE`.
    RegMove {
        n_bits: u16,
        src_ofs: u16,
        dst_ofs: u16,
        src: u32,
        dst: u32,
    },
    /// `NXAST_REG_LOAD`: `ofs_nbits` = `ofs << 6 | (nbits - 1)`.
    RegLoad {
        ofs_nbits: u16,
        dst: u32,
        value: u64,
    },
    /// `NXAST_REG_LOAD2`: a set-field TLV that may carry a mask.
    RegLoad2(NxmField),
    /// `NXAST_NOTE`: the bytes after the subtype (padding included, as OVS keeps it).
    Note(Vec<u8>),
    /// `NXAST_DEC_TTL`: how ovs-ofctl writes `dec_ttl` in OpenFlow 1.0 (1.3 uses the
    /// standard `OFPAT_DEC_NW_TTL`).
    DecTtl,
    /// `NXAST_DEC_TTL_CNT_IDS`: dec_ttl naming controller ids.
    DecTtlCntIds(Vec<u16>),
    /// `NXAST_CT`.
    Ct(NxCt),
    /// `NXAST_NAT`.
    Nat(NxNat),
    /// `NXAST_CT_CLEAR`.
    CtClear,
}

fn exact(len: usize, want: usize) -> Result<(), OfError> {
    if len == want {
        Ok(())
    } else {
        Err(errors::BAD_ACTION_BAD_LEN)
    }
}

impl NxAction {
    /// Decodes an experimenter action body: `a` is positioned after the 4-byte action
    /// header; `len` is the whole action's length.
    pub(crate) fn decode(a: &mut Reader<'_>, len: usize) -> Result<NxAction, OfError> {
        if len < 16 {
            return Err(errors::BAD_ACTION_BAD_LEN);
        }
        let vendor = a.u32()?;
        if vendor != NX_VENDOR {
            return Err(errors::BAD_ACTION_BAD_EXPERIMENTER);
        }
        let st = a.u16()?;
        use subtype as s;
        Ok(match st {
            s::RESUBMIT | s::RESUBMIT_TABLE => {
                exact(len, 16)?;
                let in_port = a.u16()?;
                let table = a.u8()?;
                NxAction::Resubmit {
                    in_port,
                    table: (st == s::RESUBMIT_TABLE && table != 0xff).then_some(table),
                }
            }
            s::REG_MOVE => {
                exact(len, 24)?;
                NxAction::RegMove {
                    n_bits: a.u16()?,
                    src_ofs: a.u16()?,
                    dst_ofs: a.u16()?,
                    src: a.u32()?,
                    dst: a.u32()?,
                }
            }
            s::REG_LOAD => {
                exact(len, 24)?;
                NxAction::RegLoad {
                    ofs_nbits: a.u16()?,
                    dst: a.u32()?,
                    value: a.u64()?,
                }
            }
            s::REG_LOAD2 => {
                let hdr = a.u32().map_err(|_| errors::BAD_ACTION_BAD_LEN)?;
                let (class, field, has_mask, flen) = split_header(hdr);
                let payload = a
                    .bytes(usize::from(flen))
                    .map_err(|_| errors::BAD_ACTION_BAD_LEN)?;
                if a.remaining() >= 8 {
                    return Err(errors::BAD_ACTION_BAD_LEN);
                }
                let f =
                    NxmField::decode_payload(class, field, has_mask, payload).map_err(
                        |e| match e {
                            errors::BAD_MATCH_BAD_FIELD => errors::BAD_ACTION_BAD_SET_TYPE,
                            errors::BAD_MATCH_BAD_LEN => errors::BAD_ACTION_BAD_SET_LEN,
                            _ => errors::BAD_ACTION_BAD_SET_ARGUMENT,
                        },
                    )?;
                NxAction::RegLoad2(f)
            }
            s::NOTE => NxAction::Note(a.rest().to_vec()),
            s::DEC_TTL_CNT_IDS => {
                let n = usize::from(a.u16()?);
                a.skip(4)?;
                let want = (16 + 2 * n).div_ceil(8) * 8;
                exact(len, want)?;
                let ids = (0..n).map(|_| a.u16()).collect::<Result<Vec<_>, _>>()?;
                NxAction::DecTtlCntIds(ids)
            }
            s::CT => {
                if len < 24 {
                    return Err(errors::BAD_ACTION_BAD_LEN);
                }
                let flags = a.u16()?;
                let zone_src = a.u32()?;
                let zone = a.u16()?;
                let recirc_table = a.u8()?;
                a.skip(3)?;
                let alg = a.u16()?;
                if flags & !3 != 0 {
                    return Err(errors::BAD_ACTION_BAD_ARGUMENT);
                }
                let actions = decode_actions(a)?;
                if actions
                    .iter()
                    .any(|x| matches!(x, Action::Nx(NxAction::Ct(_))))
                {
                    return Err(errors::BAD_ACTION_BAD_ARGUMENT);
                }
                NxAction::Ct(NxCt {
                    flags,
                    zone_src,
                    zone,
                    recirc_table,
                    alg,
                    actions,
                })
            }
            s::NAT => NxAction::Nat(decode_nat(a, len)?),
            s::CT_CLEAR => {
                exact(len, 16)?;
                NxAction::CtClear
            }
            s::DEC_TTL => {
                exact(len, 16)?;
                NxAction::DecTtl
            }
            _ => return Err(errors::BAD_ACTION_BAD_EXP_TYPE),
        })
    }

    /// Appends the whole action (header, vendor, subtype, body, padding).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u16(crate::action::action_type::EXPERIMENTER);
        out.put_u16(0);
        out.put_u32(NX_VENDOR);
        use subtype as s;
        match self {
            NxAction::Resubmit { in_port, table } => {
                out.put_u16(s::RESUBMIT_TABLE);
                out.put_u16(*in_port);
                out.put_u8(table.unwrap_or(0xff));
            }
            NxAction::RegMove {
                n_bits,
                src_ofs,
                dst_ofs,
                src,
                dst,
            } => {
                out.put_u16(s::REG_MOVE);
                out.put_u16(*n_bits);
                out.put_u16(*src_ofs);
                out.put_u16(*dst_ofs);
                out.put_u32(*src);
                out.put_u32(*dst);
            }
            NxAction::RegLoad {
                ofs_nbits,
                dst,
                value,
            } => {
                out.put_u16(s::REG_LOAD);
                out.put_u16(*ofs_nbits);
                out.put_u32(*dst);
                out.put_u64(*value);
            }
            NxAction::RegLoad2(f) => {
                out.put_u16(s::REG_LOAD2);
                f.encode(out);
            }
            NxAction::Note(b) => {
                out.put_u16(s::NOTE);
                out.extend_from_slice(b);
            }
            NxAction::DecTtlCntIds(ids) => {
                out.put_u16(s::DEC_TTL_CNT_IDS);
                out.put_u16(ids.len() as u16);
                out.pad(4);
                for i in ids {
                    out.put_u16(*i);
                }
            }
            NxAction::Ct(ct) => {
                out.put_u16(s::CT);
                out.put_u16(ct.flags);
                out.put_u32(ct.zone_src);
                out.put_u16(ct.zone);
                out.put_u8(ct.recirc_table);
                out.pad(3);
                out.put_u16(ct.alg);
                encode_actions(&ct.actions, out);
            }
            NxAction::Nat(n) => {
                out.put_u16(s::NAT);
                encode_nat(n, out);
            }
            NxAction::CtClear => out.put_u16(s::CT_CLEAR),
            NxAction::DecTtl => out.put_u16(s::DEC_TTL),
        }
        // Every Nicira action is at least 16 bytes and a multiple of 8.
        while out.len() - start < 16 {
            out.push(0);
        }
        out.pad8_from(start);
        let len = len_u16(out, start);
        out.set_u16(start + 2, len);
    }
}

fn decode_nat(a: &mut Reader<'_>, len: usize) -> Result<NxNat, OfError> {
    a.skip(2)?;
    let flags = a.u16()?;
    let range = a.u16()?;
    if flags & !nat_flags::ALL != 0 || range & !nat_range::ALL != 0 {
        return Err(errors::BAD_ACTION_BAD_ARGUMENT);
    }
    let bit = |b: u16| range & b != 0;
    use nat_range as r;
    let need = 16
        + 4 * usize::from(bit(r::IPV4_MIN))
        + 4 * usize::from(bit(r::IPV4_MAX))
        + 16 * usize::from(bit(r::IPV6_MIN))
        + 16 * usize::from(bit(r::IPV6_MAX))
        + 2 * usize::from(bit(r::PROTO_MIN))
        + 2 * usize::from(bit(r::PROTO_MAX));
    exact(len, need.div_ceil(8) * 8)?;
    let v4 = |a: &mut Reader<'_>| a.u32().map(Ipv4Addr::from);
    let v6 = |a: &mut Reader<'_>| a.array::<16>().map(Ipv6Addr::from);
    let mut n = NxNat {
        flags,
        ..Default::default()
    };
    if bit(r::IPV4_MIN) {
        n.ipv4_min = Some(v4(a)?);
    }
    if bit(r::IPV4_MAX) {
        n.ipv4_max = Some(v4(a)?);
    }
    if bit(r::IPV6_MIN) {
        n.ipv6_min = Some(v6(a)?);
    }
    if bit(r::IPV6_MAX) {
        n.ipv6_max = Some(v6(a)?);
    }
    if bit(r::PROTO_MIN) {
        n.proto_min = Some(a.u16()?);
    }
    if bit(r::PROTO_MAX) {
        n.proto_max = Some(a.u16()?);
    }
    Ok(n)
}

fn encode_nat(n: &NxNat, out: &mut Vec<u8>) {
    use nat_range as r;
    let mut range = 0;
    for (present, b) in [
        (n.ipv4_min.is_some(), r::IPV4_MIN),
        (n.ipv4_max.is_some(), r::IPV4_MAX),
        (n.ipv6_min.is_some(), r::IPV6_MIN),
        (n.ipv6_max.is_some(), r::IPV6_MAX),
        (n.proto_min.is_some(), r::PROTO_MIN),
        (n.proto_max.is_some(), r::PROTO_MAX),
    ] {
        if present {
            range |= b;
        }
    }
    out.pad(2);
    out.put_u16(n.flags);
    out.put_u16(range);
    for a in [n.ipv4_min, n.ipv4_max].into_iter().flatten() {
        out.extend_from_slice(&a.octets());
    }
    for a in [n.ipv6_min, n.ipv6_max].into_iter().flatten() {
        out.extend_from_slice(&a.octets());
    }
    for p in [n.proto_min, n.proto_max].into_iter().flatten() {
        out.put_u16(p);
    }
}

/// The actions as OpenFlow 1.5 writes them (OVS refuses `NXAST_REG_LOAD` / `NXAST_REG_MOVE`
/// there): a load into a Nicira-class field becomes a masked set-field, a move becomes
/// `OFPAT_COPY_FIELD`; inside `ct` too. Other actions are unchanged.
pub fn actions_for_openflow15(acts: &[Action]) -> Vec<Action> {
    acts.iter()
        .map(|a| match a {
            Action::Nx(NxAction::RegLoad {
                ofs_nbits,
                dst,
                value,
            }) => {
                let (cls, field, _, _) = split_header(*dst);
                let ofs = u32::from(ofs_nbits >> 6);
                let nbits = u32::from(ofs_nbits & 0x3f) + 1;
                let width = nxm_shape(cls, field).map_or(0, |s| s.0) as u32 * 8;
                if (cls == class::NXM1 || cls == class::PKT_REG) && ofs + nbits <= width {
                    let mask = (u128::MAX >> (128 - nbits)) << ofs;
                    Action::SetField(crate::oxm::OxmField::Nx(NxmField {
                        class: cls,
                        field,
                        value: (u128::from(*value) << ofs) & mask,
                        mask: Some(mask),
                    }))
                } else {
                    a.clone()
                }
            }
            Action::Nx(NxAction::RegMove {
                n_bits,
                src_ofs,
                dst_ofs,
                src,
                dst,
            }) => Action::CopyField {
                n_bits: *n_bits,
                src_ofs: *src_ofs,
                dst_ofs: *dst_ofs,
                src: *src,
                dst: *dst,
            },
            Action::Nx(NxAction::Ct(ct)) => Action::Nx(NxAction::Ct(NxCt {
                actions: actions_for_openflow15(&ct.actions),
                ..ct.clone()
            })),
            a => a.clone(),
        })
        .collect()
}

fn needs_15(acts: &[Action]) -> bool {
    acts.iter().any(|a| match a {
        Action::Nx(NxAction::RegLoad { .. } | NxAction::RegMove { .. }) => true,
        Action::Nx(NxAction::Ct(ct)) => needs_15(&ct.actions),
        _ => false,
    })
}

fn insts_for_openflow15(insts: &mut [crate::action::Instruction]) {
    use crate::action::Instruction as I;
    for i in insts {
        if let I::ApplyActions(a) | I::WriteActions(a) = i {
            if needs_15(a) {
                *a = actions_for_openflow15(a);
            }
        }
    }
}

/// `m` as OpenFlow 1.5 writes its Nicira loads and moves (see [`actions_for_openflow15`]), or
/// None when nothing in it changes (no copy is made then).
pub fn message_for_openflow15(m: &crate::msg::Message) -> Option<crate::msg::Message> {
    use crate::action::Instruction as I;
    use crate::msg::{Message as M, MultipartReplyBody as B};
    let insts_need = |insts: &[I]| insts.iter().any(|i| needs_15(i.actions_ref()));
    let need = match m {
        M::FlowMod(fm) => insts_need(&fm.instructions),
        M::PacketOut(po) => needs_15(&po.actions),
        M::GroupMod(gm) => gm.buckets.iter().any(|b| needs_15(&b.actions)),
        M::MultipartReply(r) => match &r.body {
            B::Flow(flows) => flows.iter().any(|f| insts_need(&f.instructions)),
            B::GroupDesc(ds) => ds
                .iter()
                .any(|d| d.buckets.iter().any(|b| needs_15(&b.actions))),
            _ => false,
        },
        _ => false,
    };
    if !need {
        return None;
    }
    let mut out = m.clone();
    match &mut out {
        M::FlowMod(fm) => insts_for_openflow15(&mut fm.instructions),
        M::PacketOut(po) => po.actions = actions_for_openflow15(&po.actions),
        M::GroupMod(gm) => {
            for b in &mut gm.buckets {
                b.actions = actions_for_openflow15(&b.actions);
            }
        }
        M::MultipartReply(r) => match &mut r.body {
            B::Flow(flows) => {
                for f in flows {
                    insts_for_openflow15(&mut f.instructions);
                }
            }
            B::GroupDesc(ds) => {
                for b in ds.iter_mut().flat_map(|d| d.buckets.iter_mut()) {
                    b.actions = actions_for_openflow15(&b.actions);
                }
            }
            _ => {}
        },
        _ => {}
    }
    Some(out)
}
