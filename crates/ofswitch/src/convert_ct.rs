//! The conntrack match fields between the wire (`NXM_NX_CT_STATE`, `_ZONE`, `_MARK`, `_LABEL`,
//! `_NW_PROTO`, `_NW_SRC/DST`, `_IPV6_SRC/DST`, `_TP_SRC/DST`, as ovs-ofctl encodes them in
//! OpenFlow 1.3: class 0x0001, fields 105-108 and 119-125) and the pipeline's [`PMatch`].
//!
//! Threads: the OpenFlow connection threads (decoding FLOW_MODs, encoding flow stats).

use ofproto::Match as PMatch;
use openflow::nx::{class, nxm1, NxmField};
use openflow::OxmField as X;
use wire::{Field, FlowKey};

/// Key fields of the ct NXM field `field` (most significant first).
fn key_fields(field: u8) -> Option<&'static [Field]> {
    Some(match field {
        nxm1::CT_STATE => &[Field::CtState],
        nxm1::CT_ZONE => &[Field::CtZone],
        nxm1::CT_MARK => &[Field::CtMark],
        nxm1::CT_LABEL => &[Field::CtLabelHi, Field::CtLabelLo],
        nxm1::CT_NW_PROTO => &[Field::CtNwProto],
        nxm1::CT_NW_SRC => &[Field::CtNwSrc],
        nxm1::CT_NW_DST => &[Field::CtNwDst],
        nxm1::CT_IPV6_SRC => &[Field::CtIpv6SrcHi, Field::CtIpv6SrcLo],
        nxm1::CT_IPV6_DST => &[Field::CtIpv6DstHi, Field::CtIpv6DstLo],
        nxm1::CT_TP_SRC => &[Field::CtTpSrc],
        nxm1::CT_TP_DST => &[Field::CtTpDst],
        _ => return None,
    })
}

const ALL: [u8; 11] = [
    nxm1::CT_STATE,
    nxm1::CT_ZONE,
    nxm1::CT_MARK,
    nxm1::CT_LABEL,
    nxm1::CT_NW_PROTO,
    nxm1::CT_NW_SRC,
    nxm1::CT_NW_DST,
    nxm1::CT_IPV6_SRC,
    nxm1::CT_IPV6_DST,
    nxm1::CT_TP_SRC,
    nxm1::CT_TP_DST,
];

/// Width in bits of the key fields (ct_state is 8 bits in the key, 32 on the wire: bits above
/// 8 must be zero).
fn width(fields: &[Field]) -> u32 {
    fields.iter().map(|f| f.layout().2).sum()
}

fn set(m: &mut PMatch, fields: &[Field], value: u128, mask: u128) {
    let mut shift = width(fields);
    for f in fields {
        let w = f.layout().2;
        shift -= w;
        let part = |v: u128| ((v >> shift) as u64) & f.full();
        m.set_masked(*f, part(value), part(mask));
    }
}

fn get(k: &FlowKey, fields: &[Field]) -> u128 {
    fields
        .iter()
        .fold(0u128, |acc, f| acc << f.layout().2 | u128::from(k.get(*f)))
}

/// A ct NXM match TLV into `out`. `None` if the TLV is not a ct field; `Some(false)` if its
/// value does not fit the field (the caller answers `OFPBMC_BAD_VALUE`).
pub fn ct_match_field(out: &mut PMatch, f: &NxmField) -> Option<bool> {
    if f.class != class::NXM1 {
        return None;
    }
    let fields = key_fields(f.field)?;
    let full = ofproto::nx::ones(width(fields));
    let mask = f.mask.unwrap_or(full);
    if f.value & !full != 0 || mask & !full != 0 {
        return Some(false);
    }
    set(out, fields, f.value & mask, mask);
    Some(true)
}

/// The match's ct fields as NXM TLVs (after the basic-class fields, as ovs-ofctl orders them).
pub fn ct_to_wire(m: &PMatch, f: &mut Vec<X>) {
    let ip6 = m.exact(Field::EthType) == Some(0x86dd);
    for field in ALL {
        let fields = key_fields(field).expect("listed");
        let v6_field = matches!(field, nxm1::CT_IPV6_SRC | nxm1::CT_IPV6_DST);
        let v4_field = matches!(field, nxm1::CT_NW_SRC | nxm1::CT_NW_DST);
        if (v6_field && !ip6) || (v4_field && ip6) {
            continue;
        }
        let mask = get(&m.mask, fields);
        if mask == 0 {
            continue;
        }
        let full = ofproto::nx::ones(width(fields));
        let maskable = !matches!(field, nxm1::CT_ZONE | nxm1::CT_NW_PROTO);
        f.push(X::Nx(NxmField {
            class: class::NXM1,
            field,
            value: get(&m.key, fields),
            mask: (mask != full && maskable).then_some(mask),
        }));
    }
}
