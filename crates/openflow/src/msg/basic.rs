//! Small fixed-layout messages: HELLO (with version-bitmap negotiation), ERROR,
//! FEATURES_REPLY, GET/SET_CONFIG, PORT_MOD, TABLE_MOD, ROLE_REQUEST/REPLY.
//! Pure codec; runs on the decoding thread.

use super::{finish, Message, HEADER_LEN, OFP_VERSION};
use crate::buf::{Reader, Writer};
use crate::error::{errors, OfError};
use crate::oxm::Mac;

/// `OFPHET_VERSIONBITMAP`.
pub const HELLO_ELEM_VERSIONBITMAP: u16 = 1;

/// HELLO: the header version and the optional version bitmap element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Highest version the sender speaks (header version).
    pub version: u8,
    /// Version bitmap words (bit n of word 0 = version n), if the element was sent.
    pub bitmap: Option<Vec<u32>>,
}

impl Default for Hello {
    /// Our HELLO: version 1.3 only.
    fn default() -> Self {
        Hello {
            version: OFP_VERSION,
            bitmap: Some(vec![1 << OFP_VERSION]),
        }
    }
}

impl Hello {
    pub(crate) fn decode(version: u8, r: &mut Reader<'_>) -> Result<Self, OfError> {
        let mut bitmap = None;
        while r.remaining() >= 4 {
            let etype = r.u16()?;
            let len = usize::from(r.u16()?);
            if len < 4 {
                return Err(errors::BAD_REQUEST_BAD_LEN);
            }
            let mut body = r.sub(len - 4, errors::BAD_REQUEST_BAD_LEN)?;
            let pad = (8 - len % 8) % 8;
            r.skip(pad.min(r.remaining()))?;
            if etype == HELLO_ELEM_VERSIONBITMAP && bitmap.is_none() {
                let mut words = Vec::new();
                while body.remaining() >= 4 {
                    words.push(body.u32()?);
                }
                bitmap = Some(words);
            }
        }
        Ok(Hello { version, bitmap })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        if let Some(words) = &self.bitmap {
            let start = out.len();
            out.put_u16(HELLO_ELEM_VERSIONBITMAP);
            out.put_u16((4 + 4 * words.len()).min(0xffff) as u16);
            for w in words {
                out.put_u32(*w);
            }
            out.pad8_from(start);
        }
    }

    /// Negotiates with a peer's HELLO as a 1.3-only endpoint: `Ok(OFP_VERSION)` if the
    /// peer speaks 1.3, else HELLO_FAILED/INCOMPATIBLE. (Switches negotiate with
    /// [`crate::Protocols::negotiate`].)
    pub fn negotiate(&self) -> Result<u8, OfError> {
        crate::Protocols::OF13.negotiate(self)
    }
}

/// ERROR: type, code and data (for requests: at least the first 64 bytes of the request;
/// for experimenter errors, the experimenter id is the first 4 data bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorMsg {
    pub etype: u16,
    pub code: u16,
    pub data: Vec<u8>,
}

impl ErrorMsg {
    /// The error reply to a failed request: `err` with the request's first 64 bytes.
    /// Nicira's errors carry the vendor id first: 1.2+ as an experimenter error
    /// (`type 0xffff`, the code, experimenter `0x2320`), 1.0 as `NXET_VENDOR` (code 0, then
    /// vendor, type and code), as OVS writes them.
    pub fn for_request(err: OfError, request: &[u8]) -> Self {
        use crate::error::error_type as t;
        let req = &request[..request.len().min(64)];
        let mut data = Vec::with_capacity(req.len() + 8);
        let code = match err.etype {
            t::EXPERIMENTER => {
                data.put_u32(crate::msg::tlv::NX_VENDOR);
                err.code
            }
            t::NX_VENDOR => {
                data.put_u32(crate::msg::tlv::NX_VENDOR);
                data.put_u16(t::BAD_REQUEST);
                data.put_u16(err.code);
                0
            }
            _ => err.code,
        };
        data.extend_from_slice(req);
        ErrorMsg {
            etype: err.etype,
            code,
            data,
        }
    }

    /// The (type, code) pair.
    pub fn error(&self) -> OfError {
        OfError::new(self.etype, self.code)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        Ok(ErrorMsg {
            etype: r.u16()?,
            code: r.u16()?,
            data: r.rest().to_vec(),
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(self.etype);
        out.put_u16(self.code);
        out.extend_from_slice(&self.data);
    }
}

/// FEATURES_REPLY (1.3: no port list; ports come from the PORT_DESC multipart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FeaturesReply {
    pub datapath_id: u64,
    pub n_buffers: u32,
    pub n_tables: u8,
    pub auxiliary_id: u8,
    /// `ofp_capabilities` bits.
    pub capabilities: u32,
}

/// `ofp_capabilities`.
pub mod capabilities {
    pub const FLOW_STATS: u32 = 1 << 0;
    pub const TABLE_STATS: u32 = 1 << 1;
    pub const PORT_STATS: u32 = 1 << 2;
    pub const GROUP_STATS: u32 = 1 << 3;
    pub const IP_REASM: u32 = 1 << 5;
    pub const QUEUE_STATS: u32 = 1 << 6;
    pub const PORT_BLOCKED: u32 = 1 << 8;
}

impl FeaturesReply {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let datapath_id = r.u64()?;
        let n_buffers = r.u32()?;
        let n_tables = r.u8()?;
        let auxiliary_id = r.u8()?;
        r.skip(2)?;
        let capabilities = r.u32()?;
        r.skip(4)?;
        finish(
            r,
            FeaturesReply {
                datapath_id,
                n_buffers,
                n_tables,
                auxiliary_id,
                capabilities,
            },
        )
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u64(self.datapath_id);
        out.put_u32(self.n_buffers);
        out.put_u8(self.n_tables);
        out.put_u8(self.auxiliary_id);
        out.pad(2);
        out.put_u32(self.capabilities);
        out.pad(4);
    }
}

/// GET_CONFIG_REPLY / SET_CONFIG body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchConfig {
    /// `ofp_config_flags` (fragment handling).
    pub flags: u16,
    /// Bytes of a table-miss packet sent to the controller.
    pub miss_send_len: u16,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            flags: 0,
            miss_send_len: 128,
        }
    }
}

impl SwitchConfig {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let c = SwitchConfig {
            flags: r.u16()?,
            miss_send_len: r.u16()?,
        };
        if c.flags & !0x3 != 0 {
            return Err(errors::SWITCH_CONFIG_FAILED_BAD_FLAGS);
        }
        finish(r, c)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(self.flags);
        out.put_u16(self.miss_send_len);
    }
}

/// PORT_MOD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortMod {
    pub port_no: u32,
    pub hw_addr: Mac,
    pub config: u32,
    pub mask: u32,
    pub advertise: u32,
}

impl PortMod {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let port_no = r.u32()?;
        r.skip(4)?;
        let hw_addr = r.array()?;
        r.skip(2)?;
        let config = r.u32()?;
        let mask = r.u32()?;
        let advertise = r.u32()?;
        r.skip(4)?;
        finish(
            r,
            PortMod {
                port_no,
                hw_addr,
                config,
                mask,
                advertise,
            },
        )
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.port_no);
        out.pad(4);
        out.extend_from_slice(&self.hw_addr);
        out.pad(2);
        out.put_u32(self.config);
        out.put_u32(self.mask);
        out.put_u32(self.advertise);
        out.pad(4);
    }
}

/// TABLE_MOD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableMod {
    pub table_id: u8,
    pub config: u32,
}

impl TableMod {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let table_id = r.u8()?;
        r.skip(3)?;
        let config = r.u32()?;
        if config & !0x3 != 0 {
            return Err(errors::TABLE_MOD_FAILED_BAD_CONFIG);
        }
        finish(r, TableMod { table_id, config })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u8(self.table_id);
        out.pad(3);
        out.put_u32(self.config);
    }
}

/// Controller roles (`ofp_controller_role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Role {
    NoChange,
    #[default]
    Equal,
    Master,
    Slave,
}

impl Role {
    fn from_u32(v: u32) -> Result<Self, OfError> {
        Ok(match v {
            0 => Role::NoChange,
            1 => Role::Equal,
            2 => Role::Master,
            3 => Role::Slave,
            _ => return Err(errors::ROLE_REQUEST_FAILED_BAD_ROLE),
        })
    }

    fn to_u32(self) -> u32 {
        match self {
            Role::NoChange => 0,
            Role::Equal => 1,
            Role::Master => 2,
            Role::Slave => 3,
        }
    }
}

/// ROLE_REQUEST / ROLE_REPLY body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RoleMsg {
    pub role: Role,
    pub generation_id: u64,
}

impl RoleMsg {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let role = Role::from_u32(r.u32()?)?;
        r.skip(4)?;
        let generation_id = r.u64()?;
        finish(
            r,
            RoleMsg {
                role,
                generation_id,
            },
        )
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.role.to_u32());
        out.pad(4);
        out.put_u64(self.generation_id);
    }
}

/// GET_ASYNC_REPLY / SET_ASYNC body: which asynchronous messages a connection receives, as
/// bitmaps of reasons (bit N = reason N). Index 0 applies while the connection is master or
/// equal, index 1 while it is slave. OpenFlow 1.3 (`ofp_async_config`) carries the first
/// three pairs as six fixed words; 1.4 and 1.5 carry every pair as properties
/// (`ofp_async_config_prop_reasons`, see [`AsyncProp`]), and add role status, table status and
/// request-forward, which Vireo keeps and reports but never sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncConfig {
    /// `ofp_packet_in_reason` bits.
    pub packet_in: [u32; 2],
    /// `ofp_port_reason` bits.
    pub port_status: [u32; 2],
    /// `ofp_flow_removed_reason` bits.
    pub flow_removed: [u32; 2],
    /// `ofp_controller_role_reason` bits (1.4+).
    pub role_status: [u32; 2],
    /// `ofp_table_reason` bits (1.4+).
    pub table_status: [u32; 2],
    /// `ofp_requestforward_reason` bits (1.4+).
    pub requestforward: [u32; 2],
}

impl Default for AsyncConfig {
    /// The spec's defaults (OpenFlow 1.3.1 §6.1.1, as Open vSwitch applies them): master and
    /// equal get packet-ins for no-match and action (not invalid-TTL), every port status and
    /// every flow-removed; slaves get port status only. For the 1.4 additions: role status
    /// for both (a demoted controller is the one that needs it), table vacancy events and
    /// request-forward for master and equal.
    fn default() -> Self {
        AsyncConfig {
            packet_in: [0b011, 0],
            port_status: [0b111, 0b111],
            flow_removed: [0b1111, 0],
            role_status: [0b111, 0b111],
            table_status: [0b11000, 0],
            requestforward: [0b11, 0],
        }
    }
}

/// One 1.4+ async-config property: `(type, mask)`. Types 0..=11 name a reason set and a role
/// (even: slave, odd: master/equal) in the order packet-in, port status, flow removed, role
/// status, table status, request-forward.
pub type AsyncProp = (u16, u32);

/// Number of reason-set property types (`OFPACPT_PACKET_IN_SLAVE` ..=
/// `OFPACPT_REQUESTFORWARD_MASTER`).
pub(crate) const ASYNC_PROP_TYPES: u16 = 12;

impl AsyncConfig {
    /// Whether a connection in role `role` wants `msg` (true for every message that is not
    /// PACKET_IN, PORT_STATUS or FLOW_REMOVED).
    pub fn wants(&self, role: Role, msg: &Message) -> bool {
        let i = usize::from(role == Role::Slave);
        let (mask, reason) = match msg {
            Message::PacketIn(p) => (self.packet_in[i], p.reason),
            Message::PortStatus(p) => (self.port_status[i], p.reason),
            Message::FlowRemoved(f) => (self.flow_removed[i], f.reason),
            _ => return true,
        };
        reason < 32 && mask & (1 << reason) != 0
    }

    fn slot(&mut self, prop_type: u16) -> Option<&mut u32> {
        let role = usize::from(prop_type.is_multiple_of(2));
        let set = match prop_type / 2 {
            0 => &mut self.packet_in,
            1 => &mut self.port_status,
            2 => &mut self.flow_removed,
            3 => &mut self.role_status,
            4 => &mut self.table_status,
            5 => &mut self.requestforward,
            _ => return None,
        };
        Some(&mut set[role])
    }

    /// Applies 1.4+ properties (a SET_ASYNC changes only the properties it carries).
    pub fn apply(&mut self, props: &[AsyncProp]) {
        for &(t, mask) in props {
            if let Some(m) = self.slot(t) {
                *m = mask;
            }
        }
    }

    /// Every property, in type order (a GET_ASYNC_REPLY carries all of them).
    pub fn props(&self) -> Vec<AsyncProp> {
        let mut c = *self;
        (0..ASYNC_PROP_TYPES)
            .map(|t| (t, c.slot(t).map_or(0, |m| *m)))
            .collect()
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let mut c = AsyncConfig {
            packet_in: [r.u32()?, r.u32()?],
            ..AsyncConfig::default()
        };
        c.port_status = [r.u32()?, r.u32()?];
        c.flow_removed = [r.u32()?, r.u32()?];
        finish(r, c)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        for m in self
            .packet_in
            .iter()
            .chain(&self.port_status)
            .chain(&self.flow_removed)
        {
            out.put_u32(*m);
        }
    }
}

/// Decodes 1.4+ async-config properties (the whole body). A property of another length is
/// `OFPBPC_BAD_LEN`, an experimenter property `OFPBPC_BAD_EXPERIMENTER` (Vireo knows none),
/// any other unknown type `OFPBPC_BAD_TYPE`, a type given twice `OFPBPC_DUP_TYPE`.
pub(crate) fn decode_async_props(r: &mut Reader<'_>) -> Result<Vec<AsyncProp>, OfError> {
    let mut props: Vec<AsyncProp> = Vec::new();
    while r.remaining() > 0 {
        let t = r.u16()?;
        let len = r.u16()?;
        if len != 8 {
            return Err(errors::BAD_PROPERTY_BAD_LEN);
        }
        let mask = r.u32()?;
        if t >= 0xfffe {
            return Err(errors::BAD_PROPERTY_BAD_EXPERIMENTER);
        }
        if t >= ASYNC_PROP_TYPES {
            return Err(errors::BAD_PROPERTY_BAD_TYPE);
        }
        if props.iter().any(|p| p.0 == t) {
            return Err(errors::BAD_PROPERTY_DUP_TYPE);
        }
        props.push((t, mask));
    }
    Ok(props)
}

/// Encodes 1.4+ async-config properties.
pub(crate) fn encode_async_props(props: &[AsyncProp], out: &mut Vec<u8>) {
    for &(t, mask) in props {
        out.put_u16(t);
        out.put_u16(8);
        out.put_u32(mask);
    }
}

/// The ERROR message to send for a request that failed with `err`.
pub fn error_reply(err: OfError, request: &[u8]) -> Message {
    Message::Error(ErrorMsg::for_request(err, request))
}

/// Size of an encoded HELLO with our bitmap (header + 8-byte element).
pub const OUR_HELLO_LEN: usize = HEADER_LEN + 8;
