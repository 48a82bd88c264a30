//! Conversions of the Nicira extensions between the wire (`openflow::nx`) and the pipeline
//! (`ofproto::nx`): NXM/OXM field headers ↔ [`NxField`], experimenter actions ↔
//! [`OfAction`] variants, register match fields ↔ the match's register file.
//!
//! Pure functions on whichever thread handles the message. What the pipeline cannot hold is
//! refused with the error OpenFlow names: a field header that is unknown or has the wrong
//! length `OFPBAC_BAD_ARGUMENT`, bits outside the field `OFPBAC_BAD_ARGUMENT`, other NXM
//! match fields `OFPBMC_BAD_FIELD`, `nat` outside `ct` or `dec_ttl` with controller ids
//! `OFPBAC_BAD_ARGUMENT`. Tunnel fields (`tun_id`, `tun_src`, `tun_dst`, `tun_ipv6_src`,
//! `tun_ipv6_dst`: NXM_NX_TUN_IPV6_SRC/DST, class 0x0001, fields 109/110) are key fields: their
//! matches go into the match's key, their set-fields stay `SetField::Nx`.

use ofproto::nx::{ones, CtAction, CtZone, NatKind, NatSpec, NxField, PktField};
use ofproto::{Match as PMatch, OfAction, SetField};
use openflow::nx::{class, header, nxm1, split_header, NxAction, NxCt, NxNat, NxmField};
use openflow::oxm::OxmField as X;
use openflow::{errors, Action as WAction, OfError};
use std::net::IpAddr;

pub use ofproto::nx::with_tlv;

/// `tun_metadata<idx>` as the current map places it; unmapped: `NXFMFC_INVALID_TLV_FIELD`
/// (as OVS).
fn tun_metadata(idx: u8) -> Result<NxField, OfError> {
    ofproto::nx::tun_metadata_field(idx).ok_or(errors::NX_INVALID_TLV_FIELD)
}

/// OXM basic field numbers of the packet fields `move`/`load` may name by OXM header.
fn oxm_basic_packet(field: u8) -> Option<PktField> {
    use PktField as P;
    Some(match field {
        3 => P::EthDst,
        4 => P::EthSrc,
        5 => P::EthType,
        10 => P::IpProto,
        11 => P::Ipv4Src,
        12 => P::Ipv4Dst,
        13 => P::TcpSrc,
        14 => P::TcpDst,
        15 => P::UdpSrc,
        16 => P::UdpDst,
        19 => P::IcmpType,
        20 => P::IcmpCode,
        21 => P::ArpOp,
        22 => P::ArpSpa,
        23 => P::ArpTpa,
        24 => P::ArpSha,
        25 => P::ArpTha,
        26 => P::Ipv6Src,
        27 => P::Ipv6Dst,
        _ => return None,
    })
}

/// The field a `move`/`load`/`ct(zone=)` header names; its length must be the field's.
pub fn field_of_header(h: u32) -> Result<NxField, OfError> {
    let (cls, field, has_mask, len) = split_header(h);
    let f = match (cls, field) {
        (class::NXM1, 0..=15) => NxField::Reg(field),
        (class::NXM1, nxm1::TUN_ID) => NxField::TunId,
        (class::NXM1, nxm1::TUN_IPV4_SRC) => NxField::TunSrc,
        (class::NXM1, nxm1::TUN_IPV4_DST) => NxField::TunDst,
        (class::NXM1, nxm1::TUN_IPV6_SRC) => NxField::TunIpv6Src,
        (class::NXM1, nxm1::TUN_IPV6_DST) => NxField::TunIpv6Dst,
        (c, f) if openflow::nx::is_tun_metadata(c, f) => {
            let tf = tun_metadata(f - nxm1::TUN_METADATA0)?;
            // Any length up to the option's (ovs-ofctl writes as few bytes as it needs).
            if has_mask || len == 0 || u32::from(len) * 8 > tf.width() {
                return Err(errors::BAD_ACTION_BAD_ARGUMENT);
            }
            return Ok(tf);
        }
        (class::NXM1, nxm1::CT_MARK) => NxField::CtMark,
        (class::NXM1, nxm1::CT_LABEL) => NxField::CtLabel,
        (class::NXM1, 111..=114) => NxField::XXReg(field - nxm1::XXREG0),
        (class::PKT_REG, 0..=7) => NxField::XReg(field),
        (class::OXM_BASIC, 2) => NxField::Metadata,
        (class::OXM_BASIC, 38) => NxField::TunId,
        (class::OXM_BASIC, f) => {
            NxField::Packet(oxm_basic_packet(f).ok_or(errors::BAD_ACTION_BAD_ARGUMENT)?)
        }
        (c, f) => NxField::Packet(
            PktField::ALL
                .into_iter()
                .find(|p| p.info().0 == c && p.info().1 == f)
                .ok_or(errors::BAD_ACTION_BAD_ARGUMENT)?,
        ),
    };
    if has_mask || u32::from(len) * 8 != f.width() {
        return Err(errors::BAD_ACTION_BAD_ARGUMENT);
    }
    Ok(f)
}

/// The header ovs-ofctl writes for a field.
pub fn header_of_field(f: NxField) -> u32 {
    let bytes = (f.width() / 8) as u8;
    match f {
        NxField::Reg(i) => header(class::NXM1, nxm1::REG0 + i, bytes),
        NxField::XReg(i) => header(class::PKT_REG, i, bytes),
        NxField::XXReg(i) => header(class::NXM1, nxm1::XXREG0 + i, bytes),
        NxField::Metadata => header(class::OXM_BASIC, 2, bytes),
        NxField::CtMark => header(class::NXM1, nxm1::CT_MARK, bytes),
        NxField::CtLabel => header(class::NXM1, nxm1::CT_LABEL, bytes),
        NxField::TunId => header(class::NXM1, nxm1::TUN_ID, bytes),
        NxField::TunSrc => header(class::NXM1, nxm1::TUN_IPV4_SRC, bytes),
        NxField::TunDst => header(class::NXM1, nxm1::TUN_IPV4_DST, bytes),
        NxField::TunIpv6Src => header(class::NXM1, nxm1::TUN_IPV6_SRC, bytes),
        NxField::TunIpv6Dst => header(class::NXM1, nxm1::TUN_IPV6_DST, bytes),
        NxField::TunMetadata { idx, .. } => header(class::NXM1, nxm1::TUN_METADATA0 + idx, bytes),
        NxField::Packet(p) => {
            let (c, n, ..) = p.info();
            header(c, n, bytes)
        }
    }
}

/// The register (or tunnel / ct) field an NXM match or set-field TLV names (an unmapped
/// `tun_metadataN` is `NXFMFC_INVALID_TLV_FIELD`, a value longer than its option
/// `OFPBMC_BAD_VALUE`).
fn field_of_nxm(f: &NxmField) -> Result<Option<NxField>, OfError> {
    if openflow::nx::is_tun_metadata(f.class, f.field) {
        let tf = tun_metadata(f.field - nxm1::TUN_METADATA0)?;
        if (f.value | f.mask.unwrap_or(0)) & !ones(tf.width()) != 0 {
            return Err(errors::BAD_MATCH_BAD_VALUE);
        }
        return Ok(Some(tf));
    }
    Ok(field_of_header(header(f.class, f.field, f.width() as u8)).ok())
}

/// An NXM match TLV into the match's register file, or its key for tunnel fields (ct fields
/// go through `convert_ct` first).
pub fn nxm_match_field(out: &mut PMatch, f: &NxmField) -> Result<(), OfError> {
    match field_of_nxm(f)? {
        Some(NxField::TunMetadata { off, len, .. }) => {
            let (o, l) = (usize::from(off), usize::from(len));
            let m = f.mask.unwrap_or(ones(u32::from(len) * 8));
            wire::tunmd::set(&mut out.key, o, l, f.value & m);
            wire::tunmd::set(&mut out.mask, o, l, m);
            Ok(())
        }
        Some(nf) if nf.is_register() => {
            out.set_reg(nf, f.value, f.mask.unwrap_or(ones(nf.width())));
            Ok(())
        }
        Some(nf) if nf.is_tunnel() => {
            let full = ones(nf.width());
            let (mut k, mut m) = (out.key, out.mask);
            let mask = f.mask.unwrap_or(full);
            nf.set_tunnel(&mut k, f.value, mask);
            nf.set_tunnel(&mut m, u128::MAX, mask);
            for kf in nf.tunnel_key_fields() {
                out.set_masked(*kf, k.get(*kf), m.get(*kf));
            }
            Ok(())
        }
        Some(_) => Err(errors::BAD_MATCH_BAD_FIELD),
        None => Err(errors::BAD_MATCH_BAD_FIELD),
    }
}

/// Tunnel match fields as TLVs: `tun_id` as the OXM `tunnel_id` (as ovs-ofctl writes it for
/// OpenFlow 1.3), `tun_src` / `tun_dst` as NXM fields.
pub fn tun_to_wire(m: &PMatch, f: &mut Vec<X>) {
    use wire::Field;
    if let Some((v, mk)) = m.get(Field::TunId) {
        f.push(X::TunnelId(v, (mk != u64::MAX).then_some(mk)));
    }
    for (kf, n) in [
        (Field::TunSrc, nxm1::TUN_IPV4_SRC),
        (Field::TunDst, nxm1::TUN_IPV4_DST),
    ] {
        if let Some((v, mk)) = m.get(kf) {
            f.push(X::Nx(NxmField {
                class: class::NXM1,
                field: n,
                value: v.into(),
                mask: (mk != u64::from(u32::MAX)).then_some(mk.into()),
            }));
        }
    }
    for (nf, n) in [
        (NxField::TunIpv6Src, nxm1::TUN_IPV6_SRC),
        (NxField::TunIpv6Dst, nxm1::TUN_IPV6_DST),
    ] {
        let mk = nf.get_tunnel(&m.mask);
        if mk != 0 {
            f.push(X::Nx(NxmField {
                class: class::NXM1,
                field: n,
                value: nf.get_tunnel(&m.key) & mk,
                mask: (mk != u128::MAX).then_some(mk),
            }));
        }
    }
    for (i, v, mk) in ofproto::nx::tun_metadata_matches(m) {
        f.push(X::Nx(NxmField {
            class: class::NXM1,
            field: nxm1::TUN_METADATA0 + i,
            value: v,
            mask: mk,
        }));
    }
}

/// Register match fields as TLVs (per 32-bit register, as ovs-ofctl writes `xreg` matches),
/// then `metadata`.
pub fn regs_to_wire(m: &PMatch, f: &mut Vec<X>) {
    for (i, (&v, &mk)) in m.regs.reg.iter().zip(&m.regs_mask.reg).enumerate() {
        if mk != 0 {
            f.push(X::Nx(NxmField::reg(
                i as u8,
                v,
                (mk != u32::MAX).then_some(mk),
            )));
        }
    }
    let (v, mk) = (m.regs.metadata, m.regs_mask.metadata);
    if mk != 0 {
        f.push(X::Metadata(v, (mk != u64::MAX).then_some(mk)));
    }
}

fn sub_check(f: NxField, ofs: u32, nbits: u32) -> Result<(u8, u8), OfError> {
    if nbits == 0 || ofs + nbits > f.width() {
        return Err(errors::BAD_ACTION_BAD_ARGUMENT);
    }
    Ok((ofs as u8, nbits as u8))
}

fn load_from_wire(ofs_nbits: u16, dst: u32, value: u64) -> Result<OfAction, OfError> {
    let dst = field_of_header(dst)?;
    let (ofs, nbits) = sub_check(
        dst,
        u32::from(ofs_nbits >> 6),
        u32::from(ofs_nbits & 0x3f) + 1,
    )?;
    if nbits < 64 && value >> nbits != 0 {
        return Err(errors::BAD_ACTION_BAD_ARGUMENT);
    }
    Ok(OfAction::RegLoad {
        dst,
        ofs,
        nbits,
        value: value.into(),
    })
}

/// A masked set-field (`reg_load2`) as loads of its contiguous runs.
fn masked_loads(dst: NxField, value: u128, mask: u128) -> Vec<OfAction> {
    let mut out = Vec::new();
    let mut bit = 0u32;
    while bit < dst.width() {
        if mask >> bit & 1 == 0 {
            bit += 1;
            continue;
        }
        let start = bit;
        while bit < dst.width() && mask >> bit & 1 == 1 {
            bit += 1;
        }
        out.push(OfAction::RegLoad {
            dst,
            ofs: start as u8,
            nbits: (bit - start) as u8,
            value: (value >> start) & ones(bit - start),
        });
    }
    out
}

/// A set-field on an NXM TLV (registers, tunnel fields; ct_mark/ct_label, which only
/// `ct(exec())` allows).
pub fn nxm_set_field(f: &NxmField) -> Result<Vec<OfAction>, OfError> {
    let nf = field_of_nxm(f)
        .map_err(|e| match e {
            errors::NX_INVALID_TLV_FIELD => e,
            _ => errors::BAD_ACTION_BAD_SET_ARGUMENT,
        })?
        .ok_or(errors::BAD_ACTION_BAD_SET_TYPE)?;
    Ok(match f.mask {
        None => vec![OfAction::SetField(SetField::Nx(nf, f.value))],
        Some(m) => masked_loads(nf, f.value & m, m),
    })
}

fn port16_to_of(p: u16) -> u32 {
    if p >= 0xff00 {
        u32::from(p) | 0xffff_0000
    } else {
        u32::from(p)
    }
}

fn nat_from_wire(n: &NxNat) -> Result<NatSpec, OfError> {
    use openflow::nx::nat_flags as f;
    let kind = match n.flags & (f::SRC | f::DST) {
        0 => None,
        f::SRC => Some(NatKind::Src),
        f::DST => Some(NatKind::Dst),
        _ => return Err(errors::BAD_ACTION_BAD_ARGUMENT),
    };
    let (addr_min, addr_max) = match (n.ipv4_min, n.ipv6_min) {
        (Some(_), Some(_)) => return Err(errors::BAD_ACTION_BAD_ARGUMENT),
        (Some(a), None) => (Some(IpAddr::V4(a)), n.ipv4_max.map(IpAddr::V4)),
        (None, Some(a)) => (Some(IpAddr::V6(a)), n.ipv6_max.map(IpAddr::V6)),
        (None, None) => (None, None),
    };
    let spec = NatSpec {
        kind,
        addr_min,
        addr_max,
        port_min: n.proto_min,
        port_max: n.proto_max,
        persistent: n.flags & f::PERSISTENT != 0,
        hash: n.flags & f::PROTO_HASH != 0,
        random: n.flags & f::PROTO_RANDOM != 0,
    };
    if (spec.hash && spec.random) || (kind.is_none() && n.flags != 0) {
        return Err(errors::BAD_ACTION_BAD_ARGUMENT);
    }
    Ok(spec)
}

fn nat_to_wire(n: &NatSpec) -> NxNat {
    use openflow::nx::nat_flags as f;
    let mut flags = match n.kind {
        Some(NatKind::Src) => f::SRC,
        Some(NatKind::Dst) => f::DST,
        None => 0,
    };
    for (on, b) in [
        (n.persistent, f::PERSISTENT),
        (n.hash, f::PROTO_HASH),
        (n.random, f::PROTO_RANDOM),
    ] {
        if on {
            flags |= b;
        }
    }
    let v4 = |a: Option<IpAddr>| match a {
        Some(IpAddr::V4(a)) => Some(a),
        _ => None,
    };
    let v6 = |a: Option<IpAddr>| match a {
        Some(IpAddr::V6(a)) => Some(a),
        _ => None,
    };
    NxNat {
        flags,
        ipv4_min: v4(n.addr_min),
        ipv4_max: v4(n.addr_max),
        ipv6_min: v6(n.addr_min),
        ipv6_max: v6(n.addr_max),
        proto_min: n.port_min,
        proto_max: n.port_max,
    }
}

fn ct_from_wire(ct: &NxCt) -> Result<CtAction, OfError> {
    let zone = if ct.zone_src == 0 {
        CtZone::Imm(ct.zone)
    } else {
        let field = field_of_header(ct.zone_src)?;
        let (ofs, nbits) = sub_check(
            field,
            u32::from(ct.zone >> 6),
            u32::from(ct.zone & 0x3f) + 1,
        )?;
        if nbits > 16 {
            return Err(errors::BAD_ACTION_BAD_ARGUMENT);
        }
        CtZone::Field { field, ofs, nbits }
    };
    let mut out = CtAction {
        commit: ct.flags & 1 != 0,
        force: ct.flags & 2 != 0,
        zone,
        table: (ct.recirc_table != 0xff).then_some(ct.recirc_table),
        alg: (ct.alg != 0).then_some(ct.alg),
        exec: Vec::new(),
        nat: None,
    };
    for a in &ct.actions {
        match a {
            WAction::Nx(NxAction::Nat(n)) if out.nat.is_none() => out.nat = Some(nat_from_wire(n)?),
            WAction::Nx(NxAction::RegLoad {
                ofs_nbits,
                dst,
                value,
            }) => out.exec.push(load_from_wire(*ofs_nbits, *dst, *value)?),
            WAction::SetField(X::Nx(f)) => out.exec.extend(nxm_set_field(f)?),
            _ => return Err(errors::BAD_ACTION_BAD_ARGUMENT),
        }
    }
    let ct_only = out.exec.iter().all(|a| {
        matches!(
            a,
            OfAction::RegLoad {
                dst: NxField::CtMark | NxField::CtLabel,
                ..
            } | OfAction::SetField(SetField::Nx(NxField::CtMark | NxField::CtLabel, _))
        )
    });
    if !ct_only {
        return Err(errors::BAD_ACTION_BAD_ARGUMENT);
    }
    Ok(out)
}

/// A Nicira action → pipeline actions (a masked `reg_load2` may give several).
pub fn nx_to_pipeline(a: &NxAction) -> Result<Vec<OfAction>, OfError> {
    Ok(vec![match a {
        NxAction::Resubmit { in_port, table } => OfAction::Resubmit {
            port: (*in_port != 0xfff8).then(|| port16_to_of(*in_port)),
            table: *table,
        },
        NxAction::RegLoad {
            ofs_nbits,
            dst,
            value,
        } => load_from_wire(*ofs_nbits, *dst, *value)?,
        NxAction::RegLoad2(f) => return nxm_set_field(f),
        NxAction::RegMove {
            n_bits,
            src_ofs,
            dst_ofs,
            src,
            dst,
        } => {
            let (s, d) = (field_of_header(*src)?, field_of_header(*dst)?);
            let n = u32::from(*n_bits);
            let (src_ofs, nbits) = sub_check(s, u32::from(*src_ofs), n)?;
            let (dst_ofs, _) = sub_check(d, u32::from(*dst_ofs), n)?;
            OfAction::RegMove {
                src: s,
                src_ofs,
                dst: d,
                dst_ofs,
                nbits,
            }
        }
        NxAction::Note(b) => OfAction::Note(b.clone()),
        NxAction::DecTtlCntIds(_) => return Err(errors::BAD_ACTION_BAD_ARGUMENT),
        NxAction::Ct(ct) => OfAction::Ct(ct_from_wire(ct)?),
        NxAction::Nat(_) => return Err(errors::BAD_ACTION_BAD_ARGUMENT),
        NxAction::CtClear => OfAction::CtClear,
        NxAction::DecTtl => OfAction::DecTtl,
    }])
}

/// `set_field:V->FIELD` on a register, metadata or ct field → the wire set-field.
pub fn set_nx_to_wire(f: NxField, v: u128) -> WAction {
    WAction::SetField(match f {
        NxField::Metadata => X::Metadata(v as u64, None),
        // As ovs-ofctl writes `set_field:..->tun_id` for OpenFlow 1.2+.
        NxField::TunId => X::TunnelId(v as u64, None),
        f => {
            let (c, n, _, _) = split_header(header_of_field(f));
            X::Nx(NxmField {
                class: c,
                field: n,
                value: v,
                mask: None,
            })
        }
    })
}

/// `ct(...)` → `NXAST_CT` with its nested `nat` and exec actions.
pub fn ct_to_wire(ct: &CtAction) -> WAction {
    let (zone_src, zone) = match ct.zone {
        CtZone::Imm(z) => (0, z),
        CtZone::Field { field, ofs, nbits } => (
            header_of_field(field),
            u16::from(ofs) << 6 | u16::from(nbits.saturating_sub(1)),
        ),
    };
    let mut actions: Vec<WAction> = ct
        .nat
        .iter()
        .map(|n| WAction::Nx(NxAction::Nat(nat_to_wire(n))))
        .collect();
    for a in &ct.exec {
        match a {
            OfAction::RegLoad {
                dst,
                ofs,
                nbits,
                value,
            } => actions.push(load_to_wire(*dst, *ofs, *nbits, *value)),
            OfAction::SetField(SetField::Nx(f, v)) => actions.push(set_nx_to_wire(*f, *v)),
            _ => {} // ct_from_wire and the text parser admit nothing else
        }
    }
    WAction::Nx(NxAction::Ct(NxCt {
        flags: u16::from(ct.commit) | u16::from(ct.force) << 1,
        zone_src,
        zone,
        recirc_table: ct.table.unwrap_or(0xff),
        alg: ct.alg.unwrap_or(0),
        actions,
    }))
}

/// `load:` → `NXAST_REG_LOAD`.
pub fn load_to_wire(dst: NxField, ofs: u8, nbits: u8, value: u128) -> WAction {
    WAction::Nx(NxAction::RegLoad {
        ofs_nbits: u16::from(ofs) << 6 | u16::from(nbits.saturating_sub(1)),
        dst: header_of_field(dst),
        value: value as u64,
    })
}

/// `move:` → `NXAST_REG_MOVE`.
pub fn move_to_wire(src: NxField, src_ofs: u8, dst: NxField, dst_ofs: u8, nbits: u8) -> WAction {
    WAction::Nx(NxAction::RegMove {
        n_bits: u16::from(nbits),
        src_ofs: u16::from(src_ofs),
        dst_ofs: u16::from(dst_ofs),
        src: header_of_field(src),
        dst: header_of_field(dst),
    })
}

/// `resubmit` → `NXAST_RESUBMIT_TABLE` (as ovs-ofctl writes it in 1.3; `0xfff8` = own port).
pub fn resubmit_to_wire(port: Option<u32>, table: Option<u8>) -> WAction {
    WAction::Nx(NxAction::Resubmit {
        in_port: port.map_or(0xfff8, |p| p as u16),
        table,
    })
}
