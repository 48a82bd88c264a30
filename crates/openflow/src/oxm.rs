//! OXM TLVs of the OpenFlow basic class (OpenFlow 1.3 §7.2.3) and `ofp_match`: typed
//! fields with optional masks, structural checks (length, mask, value, duplicates) at decode
//! time, and prerequisite checks ([`Match::check_prereqs`]). Runs on the decoding thread.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::buf::{len_u16, Reader, Writer};
use crate::error::{errors, OfError};

/// `OFPXMC_OPENFLOW_BASIC`.
pub const OXM_CLASS_BASIC: u16 = 0x8000;
/// `OFPMT_OXM`.
pub const MATCH_TYPE_OXM: u16 = 1;
/// `OFPVID_PRESENT`: set in `vlan_vid` when a VLAN tag is present.
pub const VID_PRESENT: u16 = 0x1000;

/// An Ethernet address.
pub type Mac = [u8; 6];

/// A value that can sit in an OXM TLV.
pub trait OxmValue: Sized + Copy {
    /// Width on the wire.
    const LEN: usize;
    /// Reads from a slice of exactly `LEN` bytes.
    fn from_wire(b: &[u8]) -> Self;
    /// Appends the wire form.
    fn to_wire(&self, out: &mut Vec<u8>);
}

macro_rules! int_value {
    ($t:ty) => {
        impl OxmValue for $t {
            const LEN: usize = std::mem::size_of::<$t>();
            fn from_wire(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::LEN]);
                <$t>::from_be_bytes(a)
            }
            fn to_wire(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes());
            }
        }
    };
}
int_value!(u8);
int_value!(u16);
int_value!(u32);
int_value!(u64);

impl OxmValue for Mac {
    const LEN: usize = 6;
    fn from_wire(b: &[u8]) -> Self {
        let mut a = [0u8; 6];
        a.copy_from_slice(&b[..6]);
        a
    }
    fn to_wire(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
}

impl OxmValue for Ipv4Addr {
    const LEN: usize = 4;
    fn from_wire(b: &[u8]) -> Self {
        Ipv4Addr::from(u32::from_wire(b))
    }
    fn to_wire(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.octets());
    }
}

impl OxmValue for Ipv6Addr {
    const LEN: usize = 16;
    fn from_wire(b: &[u8]) -> Self {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[..16]);
        Ipv6Addr::from(a)
    }
    fn to_wire(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.octets());
    }
}

macro_rules! oxm_fields {
    (exact { $($ev:ident = $en:literal => $et:ty),* $(,)? }
     masked { $($mv:ident = $mn:literal => $mt:ty),* $(,)? }) => {
        /// One OXM TLV of the basic class (maskable fields carry `Option<mask>`), or of a
        /// Nicira class ([`OxmField::Nx`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum OxmField {
            $($ev($et),)*
            $($mv($mt, Option<$mt>),)*
            /// An NXM / experimenter-class field (`reg0`, `xreg1`, `tun_src`, `ct_mark`...).
            Nx(crate::nx::NxmField),
        }

        /// OXM field numbers (`oxm_ofb_match_fields`).
        #[allow(non_upper_case_globals)]
        pub mod field {
            $(pub const $ev: u8 = $en;)*
            $(pub const $mv: u8 = $mn;)*
        }

        impl OxmField {
            /// The OXM field number.
            /// (For [`OxmField::Nx`]: its field number within its own class.)
            pub fn field_num(&self) -> u8 {
                match self {
                    $(OxmField::$ev(..) => $en,)*
                    $(OxmField::$mv(..) => $mn,)*
                    OxmField::Nx(f) => f.field,
                }
            }

            /// Whether a mask is present.
            pub fn has_mask(&self) -> bool {
                match self {
                    $(OxmField::$mv(_, m) => m.is_some(),)*
                    OxmField::Nx(f) => f.mask.is_some(),
                    _ => false,
                }
            }

            fn put_payload(&self, out: &mut Vec<u8>) {
                match self {
                    $(OxmField::$ev(v) => v.to_wire(out),)*
                    $(OxmField::$mv(v, m) => {
                        v.to_wire(out);
                        if let Some(m) = m {
                            m.to_wire(out);
                        }
                    })*
                    OxmField::Nx(_) => {}
                }
            }

            /// Builds a field from its number and checked-length value/mask bytes.
            fn from_parts(num: u8, v: &[u8], m: Option<&[u8]>) -> Result<Self, OfError> {
                Ok(match num {
                    $($en => OxmField::$ev(<$et>::from_wire(v)),)*
                    $($mn => OxmField::$mv(<$mt>::from_wire(v), m.map(<$mt>::from_wire)),)*
                    _ => return Err(errors::BAD_MATCH_BAD_FIELD),
                })
            }
        }

        /// (value width, maskable) of a supported field number.
        pub fn field_shape(num: u8) -> Option<(usize, bool)> {
            match num {
                $($en => Some((<$et as OxmValue>::LEN, false)),)*
                $($mn => Some((<$mt as OxmValue>::LEN, true)),)*
                _ => None,
            }
        }
    };
}

oxm_fields! {
    exact {
        InPort = 0 => u32,
        InPhyPort = 1 => u32,
        EthType = 5 => u16,
        VlanPcp = 7 => u8,
        IpDscp = 8 => u8,
        IpEcn = 9 => u8,
        IpProto = 10 => u8,
        TcpSrc = 13 => u16,
        TcpDst = 14 => u16,
        UdpSrc = 15 => u16,
        UdpDst = 16 => u16,
        SctpSrc = 17 => u16,
        SctpDst = 18 => u16,
        Icmpv4Type = 19 => u8,
        Icmpv4Code = 20 => u8,
        ArpOp = 21 => u16,
        Icmpv6Type = 29 => u8,
        Icmpv6Code = 30 => u8,
        Ipv6NdTarget = 31 => Ipv6Addr,
        Ipv6NdSll = 32 => Mac,
        Ipv6NdTll = 33 => Mac,
        MplsLabel = 34 => u32,
        MplsTc = 35 => u8,
        MplsBos = 36 => u8,
    }
    masked {
        Metadata = 2 => u64,
        EthDst = 3 => Mac,
        EthSrc = 4 => Mac,
        VlanVid = 6 => u16,
        Ipv4Src = 11 => Ipv4Addr,
        Ipv4Dst = 12 => Ipv4Addr,
        ArpSpa = 22 => Ipv4Addr,
        ArpTpa = 23 => Ipv4Addr,
        ArpSha = 24 => Mac,
        ArpTha = 25 => Mac,
        Ipv6Src = 26 => Ipv6Addr,
        Ipv6Dst = 27 => Ipv6Addr,
        Ipv6Flabel = 28 => u32,
        TunnelId = 38 => u64,
        Ipv6Exthdr = 39 => u16,
    }
}

/// Largest value each small field may hold (OFPBMC_BAD_VALUE beyond it).
fn value_limit(num: u8) -> Option<u64> {
    Some(match num {
        field::VlanVid => 0x1fff,
        field::VlanPcp | field::MplsTc => 7,
        field::IpDscp => 63,
        field::IpEcn => 3,
        field::MplsBos => 1,
        field::Ipv6Flabel | field::MplsLabel => 0xf_ffff,
        _ => return None,
    })
}

fn be_value(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

impl OxmField {
    /// Decodes one TLV. Errors use BAD_MATCH codes (callers in other contexts remap).
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let hdr = r.u32().map_err(|_| errors::BAD_MATCH_BAD_LEN)?;
        let class = (hdr >> 16) as u16;
        let num = ((hdr >> 9) & 0x7f) as u8;
        let has_mask = hdr & 0x100 != 0;
        let len = (hdr & 0xff) as usize;
        let payload = r.bytes(len).map_err(|_| errors::BAD_MATCH_BAD_LEN)?;
        if class != OXM_CLASS_BASIC {
            return crate::nx::NxmField::decode_payload(class, num, has_mask, payload)
                .map(OxmField::Nx);
        }
        let (width, maskable) = field_shape(num).ok_or(errors::BAD_MATCH_BAD_FIELD)?;
        if len != width * if has_mask { 2 } else { 1 } {
            return Err(errors::BAD_MATCH_BAD_LEN);
        }
        if has_mask && !maskable {
            return Err(errors::BAD_MATCH_BAD_MASK);
        }
        let (v, m) = payload.split_at(width);
        if has_mask && v.iter().zip(m).any(|(v, m)| v & !m != 0) {
            return Err(errors::BAD_MATCH_BAD_WILDCARDS);
        }
        if let Some(limit) = value_limit(num) {
            if be_value(v) > limit || (has_mask && be_value(m) > limit) {
                return Err(errors::BAD_MATCH_BAD_VALUE);
            }
        }
        Self::from_parts(num, v, has_mask.then_some(m))
    }

    /// Appends the TLV (header and payload).
    pub fn encode(&self, out: &mut Vec<u8>) {
        if let OxmField::Nx(f) = self {
            f.encode(out);
            return;
        }
        let num = self.field_num();
        let width = field_shape(num).map_or(0, |s| s.0);
        let len = if self.has_mask() { 2 * width } else { width };
        let hdr = (u32::from(OXM_CLASS_BASIC) << 16)
            | (u32::from(num) << 9)
            | (u32::from(self.has_mask()) << 8)
            | len as u32;
        out.put_u32(hdr);
        self.put_payload(out);
    }

    /// Exact (unmasked or all-ones-masked) value of a u8/u16 field, if it is one.
    fn exact_small(&self) -> Option<u16> {
        match *self {
            OxmField::EthType(v) | OxmField::ArpOp(v) => Some(v),
            OxmField::IpProto(v) | OxmField::Icmpv6Type(v) => Some(u16::from(v)),
            _ => None,
        }
    }
}

/// An `ofp_match` of type OXM: the list of fields in wire order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Match {
    pub fields: Vec<OxmField>,
}

/// Ethernet types named by prerequisites.
pub mod eth_type {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const IPV6: u16 = 0x86dd;
    pub const MPLS: u16 = 0x8847;
    pub const MPLS_MC: u16 = 0x8848;
    pub const VLAN: u16 = 0x8100;
}

impl Match {
    /// A match on the given fields.
    pub fn new(fields: Vec<OxmField>) -> Self {
        Self { fields }
    }

    /// The basic-class field with number `num`, if present.
    pub fn get(&self, num: u8) -> Option<&OxmField> {
        self.fields
            .iter()
            .find(|f| !matches!(f, OxmField::Nx(_)) && f.field_num() == num)
    }

    /// Decodes an `ofp_match` including its trailing padding. Structural errors
    /// (length, type, field, mask, value, duplicates) are reported here; prerequisites are
    /// checked separately by [`Match::check_prereqs`].
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let head = r.peek(4).map_err(|_| errors::BAD_MATCH_BAD_LEN)?;
        let mtype = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        if mtype != MATCH_TYPE_OXM {
            return Err(errors::BAD_MATCH_BAD_TYPE);
        }
        if len < 4 {
            return Err(errors::BAD_MATCH_BAD_LEN);
        }
        let padded = len.div_ceil(8) * 8;
        let mut body = r.sub(padded, errors::BAD_MATCH_BAD_LEN)?;
        body.skip(4)?;
        let mut oxms = body.sub(len - 4, errors::BAD_MATCH_BAD_LEN)?;
        let mut fields: Vec<OxmField> = Vec::new();
        let mut seen = 0u128;
        let mut seen_nx: Vec<(u16, u8)> = Vec::new();
        while !oxms.is_empty() {
            let f = OxmField::decode(&mut oxms)?;
            if let OxmField::Nx(nx) = f {
                if seen_nx.contains(&(nx.class, nx.field)) {
                    return Err(errors::BAD_MATCH_DUP_FIELD);
                }
                seen_nx.push((nx.class, nx.field));
                fields.push(f);
                continue;
            }
            let bit = 1u128 << f.field_num();
            if seen & bit != 0 {
                return Err(errors::BAD_MATCH_DUP_FIELD);
            }
            seen |= bit;
            fields.push(f);
        }
        Ok(Self { fields })
    }

    /// Appends the `ofp_match` with its padding to a multiple of 8.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u16(MATCH_TYPE_OXM);
        out.put_u16(0);
        for f in &self.fields {
            f.encode(out);
        }
        let len = len_u16(out, start);
        out.set_u16(start + 2, len);
        out.pad8_from(start);
    }

    fn exact(&self, num: u8) -> Option<u16> {
        self.get(num).and_then(OxmField::exact_small)
    }

    fn vlan_present(&self) -> bool {
        match self.get(field::VlanVid) {
            Some(OxmField::VlanVid(v, m)) => {
                v & VID_PRESENT != 0 && m.is_none_or(|m| m & VID_PRESENT != 0)
            }
            _ => false,
        }
    }

    /// Checks every field's prerequisites (OpenFlow 1.3 §7.2.3.6, table 11):
    /// OFPBMC_BAD_PREREQ if one is missing or does not have the required exact value.
    pub fn check_prereqs(&self) -> Result<(), OfError> {
        for f in &self.fields {
            if !matches!(f, OxmField::Nx(_)) && !self.prereq_met(f.field_num()) {
                return Err(errors::BAD_MATCH_BAD_PREREQ);
            }
        }
        Ok(())
    }

    fn prereq_met(&self, num: u8) -> bool {
        use eth_type::*;
        let et = self.exact(field::EthType);
        let ip = matches!(et, Some(IPV4) | Some(IPV6));
        let proto = self.exact(field::IpProto);
        let icmp6 = self.exact(field::Icmpv6Type);
        match num {
            field::VlanPcp => self.vlan_present(),
            field::IpDscp | field::IpEcn | field::IpProto => ip,
            field::Ipv4Src | field::Ipv4Dst => et == Some(IPV4),
            field::TcpSrc | field::TcpDst => ip && proto == Some(6),
            field::UdpSrc | field::UdpDst => ip && proto == Some(17),
            field::SctpSrc | field::SctpDst => ip && proto == Some(132),
            field::Icmpv4Type | field::Icmpv4Code => et == Some(IPV4) && proto == Some(1),
            field::ArpOp | field::ArpSpa | field::ArpTpa | field::ArpSha | field::ArpTha => {
                et == Some(ARP)
            }
            field::Ipv6Src | field::Ipv6Dst | field::Ipv6Flabel | field::Ipv6Exthdr => {
                et == Some(IPV6)
            }
            field::Icmpv6Type | field::Icmpv6Code => et == Some(IPV6) && proto == Some(58),
            field::Ipv6NdTarget => {
                et == Some(IPV6) && proto == Some(58) && matches!(icmp6, Some(135) | Some(136))
            }
            field::Ipv6NdSll => et == Some(IPV6) && proto == Some(58) && icmp6 == Some(135),
            field::Ipv6NdTll => et == Some(IPV6) && proto == Some(58) && icmp6 == Some(136),
            field::MplsLabel | field::MplsTc | field::MplsBos => {
                matches!(et, Some(MPLS) | Some(MPLS_MC))
            }
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(m: &Match) -> Match {
        let mut v = Vec::new();
        m.encode(&mut v);
        assert_eq!(v.len() % 8, 0);
        let mut r = Reader::new(&v, errors::BAD_REQUEST_BAD_LEN);
        let back = Match::decode(&mut r).unwrap();
        assert!(r.is_empty());
        back
    }

    #[test]
    fn every_field_roundtrips() {
        let mac = [1, 2, 3, 4, 5, 6];
        let v6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let m = Match::new(vec![
            OxmField::InPort(7),
            OxmField::Metadata(0xf0, Some(0xff)),
            OxmField::EthDst(mac, Some([0xff; 6])),
            OxmField::EthSrc(mac, None),
            OxmField::EthType(0x86dd),
            OxmField::VlanVid(0x1005, None),
            OxmField::VlanPcp(3),
            OxmField::IpDscp(46),
            OxmField::IpEcn(1),
            OxmField::IpProto(58),
            OxmField::Ipv6Src(
                "2001:db8::".parse().unwrap(),
                Some("ffff:ffff::".parse().unwrap()),
            ),
            OxmField::Ipv6Dst(v6, None),
            OxmField::Icmpv6Type(135),
            OxmField::Icmpv6Code(0),
            OxmField::Ipv6NdTarget(v6),
            OxmField::Ipv6NdSll(mac),
            OxmField::TunnelId(5, None),
        ]);
        assert_eq!(roundtrip(&m), m);
        assert_eq!(m.check_prereqs(), Ok(()));
    }

    #[test]
    fn ipv4_tcp_prereqs() {
        let ok = Match::new(vec![
            OxmField::EthType(0x0800),
            OxmField::IpProto(6),
            OxmField::Ipv4Dst(
                Ipv4Addr::new(10, 0, 0, 0),
                Some(Ipv4Addr::new(255, 255, 255, 0)),
            ),
            OxmField::TcpDst(80),
        ]);
        assert_eq!(roundtrip(&ok), ok);
        assert_eq!(ok.check_prereqs(), Ok(()));
        let no_proto = Match::new(vec![OxmField::EthType(0x0800), OxmField::TcpDst(80)]);
        assert_eq!(no_proto.check_prereqs(), Err(errors::BAD_MATCH_BAD_PREREQ));
        let udp = Match::new(vec![
            OxmField::EthType(0x0800),
            OxmField::IpProto(17),
            OxmField::TcpDst(80),
        ]);
        assert_eq!(udp.check_prereqs(), Err(errors::BAD_MATCH_BAD_PREREQ));
        let arp = Match::new(vec![OxmField::ArpOp(1)]);
        assert_eq!(arp.check_prereqs(), Err(errors::BAD_MATCH_BAD_PREREQ));
        let pcp = Match::new(vec![OxmField::VlanVid(0, None), OxmField::VlanPcp(1)]);
        assert_eq!(pcp.check_prereqs(), Err(errors::BAD_MATCH_BAD_PREREQ));
    }

    fn decode_raw(oxms: &[u8]) -> Result<Match, OfError> {
        let mut v = vec![0, 1, 0, (4 + oxms.len()) as u8];
        v.extend_from_slice(oxms);
        v.pad8_from(0);
        Match::decode(&mut Reader::new(&v, errors::BAD_REQUEST_BAD_LEN))
    }

    #[test]
    fn structural_errors() {
        // in_port with length 5.
        assert_eq!(
            decode_raw(&[0x80, 0, 0, 5, 0, 0, 0, 1, 0]),
            Err(errors::BAD_MATCH_BAD_LEN)
        );
        // TLV running past the match.
        assert_eq!(
            decode_raw(&[0x80, 0, 0, 8, 0, 0, 0, 1]),
            Err(errors::BAD_MATCH_BAD_LEN)
        );
        // unknown field 100.
        assert_eq!(
            decode_raw(&[0x80, 0, 200, 0]),
            Err(errors::BAD_MATCH_BAD_FIELD)
        );
        // NXM_OF class (not a match field Vireo takes in OXM).
        assert_eq!(
            decode_raw(&[0, 0, 0, 4, 0, 0, 0, 1]),
            Err(errors::BAD_MATCH_BAD_FIELD)
        );
        // reg0 with a 5-byte payload.
        assert_eq!(
            decode_raw(&[0, 1, 0, 5, 0, 0, 0, 1, 0]),
            Err(errors::BAD_MATCH_BAD_LEN)
        );
        // duplicate reg0.
        assert_eq!(
            decode_raw(&[0, 1, 0, 4, 0, 0, 0, 1, 0, 1, 0, 4, 0, 0, 0, 2]),
            Err(errors::BAD_MATCH_DUP_FIELD)
        );
        // masked in_port.
        assert_eq!(
            decode_raw(&[0x80, 0, 1, 8, 0, 0, 0, 1, 0, 0, 0, 1]),
            Err(errors::BAD_MATCH_BAD_MASK)
        );
        // duplicate in_port.
        assert_eq!(
            decode_raw(&[0x80, 0, 0, 4, 0, 0, 0, 1, 0x80, 0, 0, 4, 0, 0, 0, 2]),
            Err(errors::BAD_MATCH_DUP_FIELD)
        );
        // value bit outside mask (ipv4_src 10.0.0.1/255.255.255.0).
        assert_eq!(
            decode_raw(&[0x80, 0, 23, 8, 10, 0, 0, 1, 255, 255, 255, 0]),
            Err(errors::BAD_MATCH_BAD_WILDCARDS)
        );
        // vlan_pcp 9.
        assert_eq!(
            decode_raw(&[0x80, 0, 14, 1, 9]),
            Err(errors::BAD_MATCH_BAD_VALUE)
        );
        // standard (non-OXM) match type.
        let std = [0u8, 0, 0, 4, 0, 0, 0, 0];
        assert_eq!(
            Match::decode(&mut Reader::new(&std, errors::BAD_REQUEST_BAD_LEN)),
            Err(errors::BAD_MATCH_BAD_TYPE)
        );
    }
}
