//! OpenFlow messages: the 8-byte header, the [`Message`] enum (shaped after OpenFlow 1.3,
//! the model every version is translated to and from) and the top-level [`decode`] /
//! [`Message::encode_version`] dispatch by wire version. 1.3 bodies live in submodules by
//! family; 1.0 in [`v10`]; where 1.4 and 1.5 differ from 1.3, in [`v1x`]. Decoding is a pure
//! function on one complete frame; it runs on a connection's reader thread and never panics:
//! bad input becomes the [`OfError`] the spec names.

mod basic;
mod flow;
mod group;
mod group15;
mod meter;
mod multipart;
mod table;
pub mod tlv;
pub mod v10;
pub mod v1x;

pub use basic::*;
pub use flow::*;
pub use group::*;
pub use meter::*;
pub use multipart::*;
pub use table::*;
pub use tlv::{TlvCommand, TlvMap, TlvTableMod, TlvTableReply};

use crate::buf::{Reader, Writer};
use crate::error::{errors, OfError};

/// The version of [`Message::encode`] and of the model (OpenFlow 1.3).
pub const OFP_VERSION: u8 = 0x04;
/// Size of `ofp_header`.
pub const HEADER_LEN: usize = 8;
/// Largest message the 16-bit length field can describe.
pub const MAX_MSG_LEN: usize = 65535;

/// `ofp_type` values.
pub mod msg_type {
    pub const HELLO: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const ECHO_REQUEST: u8 = 2;
    pub const ECHO_REPLY: u8 = 3;
    pub const EXPERIMENTER: u8 = 4;
    pub const FEATURES_REQUEST: u8 = 5;
    pub const FEATURES_REPLY: u8 = 6;
    pub const GET_CONFIG_REQUEST: u8 = 7;
    pub const GET_CONFIG_REPLY: u8 = 8;
    pub const SET_CONFIG: u8 = 9;
    pub const PACKET_IN: u8 = 10;
    pub const FLOW_REMOVED: u8 = 11;
    pub const PORT_STATUS: u8 = 12;
    pub const PACKET_OUT: u8 = 13;
    pub const FLOW_MOD: u8 = 14;
    pub const GROUP_MOD: u8 = 15;
    pub const PORT_MOD: u8 = 16;
    pub const TABLE_MOD: u8 = 17;
    pub const MULTIPART_REQUEST: u8 = 18;
    pub const MULTIPART_REPLY: u8 = 19;
    pub const BARRIER_REQUEST: u8 = 20;
    pub const BARRIER_REPLY: u8 = 21;
    pub const QUEUE_GET_CONFIG_REQUEST: u8 = 22;
    pub const QUEUE_GET_CONFIG_REPLY: u8 = 23;
    pub const ROLE_REQUEST: u8 = 24;
    pub const ROLE_REPLY: u8 = 25;
    pub const GET_ASYNC_REQUEST: u8 = 26;
    pub const GET_ASYNC_REPLY: u8 = 27;
    pub const SET_ASYNC: u8 = 28;
    pub const METER_MOD: u8 = 29;
}

/// `ofp_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub msg_type: u8,
    pub length: u16,
    pub xid: u32,
}

impl Header {
    /// Parses the first 8 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, OfError> {
        let mut r = Reader::new(buf, errors::BAD_REQUEST_BAD_LEN);
        Ok(Header {
            version: r.u8()?,
            msg_type: r.u8()?,
            length: r.u16()?,
            xid: r.u32()?,
        })
    }
}

/// Every message this crate understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Hello(Hello),
    Error(ErrorMsg),
    EchoRequest(Vec<u8>),
    EchoReply(Vec<u8>),
    FeaturesRequest,
    FeaturesReply(FeaturesReply),
    GetConfigRequest,
    GetConfigReply(SwitchConfig),
    SetConfig(SwitchConfig),
    PacketIn(PacketIn),
    FlowRemoved(FlowRemoved),
    PortStatus(PortStatus),
    PacketOut(PacketOut),
    FlowMod(FlowMod),
    GroupMod(GroupMod),
    PortMod(PortMod),
    TableMod(TableMod),
    MultipartRequest(MultipartRequest),
    MultipartReply(MultipartReply),
    BarrierRequest,
    BarrierReply,
    RoleRequest(RoleMsg),
    RoleReply(RoleMsg),
    /// QUEUE_GET_CONFIG_REQUEST for a port (or `OFPP_ANY`); 1.0 and 1.3 only.
    QueueGetConfigRequest(u32),
    /// QUEUE_GET_CONFIG_REPLY for a port, listing no queues (Vireo has none; a reply that
    /// lists queues does not decode).
    QueueGetConfigReply(u32),
    GetAsyncRequest,
    GetAsyncReply(AsyncConfig),
    /// SET_ASYNC as 1.3 writes it: the whole configuration.
    SetAsync(AsyncConfig),
    /// SET_ASYNC as 1.4 and 1.5 write it: only the properties it changes.
    SetAsyncProps(Vec<AsyncProp>),
    MeterMod(MeterMod),
    /// `NXT_TLV_TABLE_MOD` (Nicira experimenter; see [`tlv`]).
    TlvTableMod(TlvTableMod),
    /// `NXT_TLV_TABLE_REQUEST`.
    TlvTableRequest,
    /// `NXT_TLV_TABLE_REPLY`.
    TlvTableReply(TlvTableReply),
}

/// Decodes one complete frame (header included; `buf.len()` must equal the header's
/// length) at the version its header names (1.0, 1.3, 1.4 or 1.5; a HELLO of any version).
/// Returns the transaction id and the message, or the error to send back (in the model's
/// 1.3 terms: see [`OfError::for_version`]).
pub fn decode(buf: &[u8]) -> Result<(u32, Message), OfError> {
    decode_versioned(buf).map(|(_, xid, m)| (xid, m))
}

/// [`decode`], also returning the frame's wire version.
pub fn decode_versioned(buf: &[u8]) -> Result<(u8, u32, Message), OfError> {
    use crate::version::{OFP10, OFP14, OFP15};
    let h = Header::parse(buf)?;
    if usize::from(h.length) != buf.len() {
        return Err(errors::BAD_REQUEST_BAD_LEN);
    }
    let mut r = Reader::new(&buf[HEADER_LEN..], errors::BAD_REQUEST_BAD_LEN);
    let msg = match h.version {
        _ if h.msg_type == msg_type::HELLO => Message::Hello(Hello::decode(h.version, &mut r)?),
        // NXT_FLOW_MOD, NXST_FLOW, NXST_AGGREGATE (the session-state messages
        // NXT_SET_FLOW_FORMAT and NXT_FLOW_MOD_TABLE_ID are the connection's: see
        // `v10::nicira::decode`; here they are refused as vendor messages).
        OFP10 if v10::nicira::is_nicira(buf) => match v10::nicira::decode(buf, false)? {
            (_, v10::nicira::NxMsg::Request(m)) => m,
            _ => return Err(errors::BAD_REQUEST_BAD_EXPERIMENTER),
        },
        OFP10 => v10::decode_body(h, &mut r)?,
        OFP_VERSION | OFP14 | OFP15 => decode_body(h, &mut r)?,
        _ => return Err(errors::BAD_REQUEST_BAD_VERSION),
    };
    Ok((h.version, h.xid, msg))
}

/// Fails with BAD_LEN unless the body was consumed exactly.
pub(crate) fn finish<T>(r: &Reader<'_>, v: T) -> Result<T, OfError> {
    if r.is_empty() {
        Ok(v)
    } else {
        Err(errors::BAD_REQUEST_BAD_LEN)
    }
}

fn decode_body(h: Header, r: &mut Reader<'_>) -> Result<Message, OfError> {
    use msg_type as t;
    if h.version != OFP_VERSION {
        if let Some(m) = v1x::decode_body(h, r)? {
            return Ok(m);
        }
    }
    Ok(match h.msg_type {
        t::HELLO => Message::Hello(Hello::decode(h.version, r)?),
        t::ERROR => Message::Error(ErrorMsg::decode(r)?),
        t::ECHO_REQUEST => Message::EchoRequest(r.rest().to_vec()),
        t::ECHO_REPLY => Message::EchoReply(r.rest().to_vec()),
        t::EXPERIMENTER => tlv::decode_experimenter(r)?,
        t::FEATURES_REQUEST => finish(r, Message::FeaturesRequest)?,
        t::FEATURES_REPLY => Message::FeaturesReply(FeaturesReply::decode(r)?),
        t::GET_CONFIG_REQUEST => finish(r, Message::GetConfigRequest)?,
        t::GET_CONFIG_REPLY => Message::GetConfigReply(SwitchConfig::decode(r)?),
        t::SET_CONFIG => Message::SetConfig(SwitchConfig::decode(r)?),
        t::PACKET_IN => Message::PacketIn(PacketIn::decode(r)?),
        t::FLOW_REMOVED => Message::FlowRemoved(FlowRemoved::decode(r)?),
        t::PORT_STATUS => Message::PortStatus(PortStatus::decode(r)?),
        t::PACKET_OUT => Message::PacketOut(PacketOut::decode(r)?),
        t::FLOW_MOD => Message::FlowMod(FlowMod::decode(r)?),
        t::GROUP_MOD => Message::GroupMod(GroupMod::decode(r)?),
        t::PORT_MOD => Message::PortMod(PortMod::decode(r)?),
        t::TABLE_MOD => Message::TableMod(TableMod::decode(r)?),
        t::MULTIPART_REQUEST => Message::MultipartRequest(MultipartRequest::decode(r)?),
        t::MULTIPART_REPLY => Message::MultipartReply(MultipartReply::decode(r)?),
        t::BARRIER_REQUEST => finish(r, Message::BarrierRequest)?,
        t::BARRIER_REPLY => finish(r, Message::BarrierReply)?,
        t::ROLE_REQUEST => Message::RoleRequest(RoleMsg::decode(r)?),
        t::ROLE_REPLY => Message::RoleReply(RoleMsg::decode(r)?),
        t::QUEUE_GET_CONFIG_REQUEST | t::QUEUE_GET_CONFIG_REPLY => {
            let port = r.u32()?;
            r.skip(4)?;
            finish(
                r,
                if h.msg_type == t::QUEUE_GET_CONFIG_REQUEST {
                    Message::QueueGetConfigRequest(port)
                } else {
                    Message::QueueGetConfigReply(port)
                },
            )?
        }
        t::GET_ASYNC_REQUEST => finish(r, Message::GetAsyncRequest)?,
        t::GET_ASYNC_REPLY => Message::GetAsyncReply(AsyncConfig::decode(r)?),
        t::SET_ASYNC => Message::SetAsync(AsyncConfig::decode(r)?),
        t::METER_MOD => Message::MeterMod(MeterMod::decode(r)?),
        _ => return Err(errors::BAD_REQUEST_BAD_TYPE),
    })
}

impl Message {
    /// The `ofp_type` of this message.
    pub fn msg_type(&self) -> u8 {
        use msg_type as t;
        match self {
            Message::Hello(_) => t::HELLO,
            Message::Error(_) => t::ERROR,
            Message::EchoRequest(_) => t::ECHO_REQUEST,
            Message::EchoReply(_) => t::ECHO_REPLY,
            Message::FeaturesRequest => t::FEATURES_REQUEST,
            Message::FeaturesReply(_) => t::FEATURES_REPLY,
            Message::GetConfigRequest => t::GET_CONFIG_REQUEST,
            Message::GetConfigReply(_) => t::GET_CONFIG_REPLY,
            Message::SetConfig(_) => t::SET_CONFIG,
            Message::PacketIn(_) => t::PACKET_IN,
            Message::FlowRemoved(_) => t::FLOW_REMOVED,
            Message::PortStatus(_) => t::PORT_STATUS,
            Message::PacketOut(_) => t::PACKET_OUT,
            Message::FlowMod(_) => t::FLOW_MOD,
            Message::GroupMod(_) => t::GROUP_MOD,
            Message::PortMod(_) => t::PORT_MOD,
            Message::TableMod(_) => t::TABLE_MOD,
            Message::MultipartRequest(_) => t::MULTIPART_REQUEST,
            Message::MultipartReply(_) => t::MULTIPART_REPLY,
            Message::BarrierRequest => t::BARRIER_REQUEST,
            Message::BarrierReply => t::BARRIER_REPLY,
            Message::RoleRequest(_) => t::ROLE_REQUEST,
            Message::RoleReply(_) => t::ROLE_REPLY,
            Message::QueueGetConfigRequest(_) => t::QUEUE_GET_CONFIG_REQUEST,
            Message::QueueGetConfigReply(_) => t::QUEUE_GET_CONFIG_REPLY,
            Message::GetAsyncRequest => t::GET_ASYNC_REQUEST,
            Message::GetAsyncReply(_) => t::GET_ASYNC_REPLY,
            Message::SetAsync(_) | Message::SetAsyncProps(_) => t::SET_ASYNC,
            Message::MeterMod(_) => t::METER_MOD,
            Message::TlvTableMod(_) | Message::TlvTableRequest | Message::TlvTableReply(_) => {
                t::EXPERIMENTER
            }
        }
    }

    /// Encodes the message with transaction id `xid`. Fails with BAD_REQUEST/BAD_LEN if the
    /// result would exceed 65535 bytes (split multipart replies first, see
    /// [`MultipartReply::split`]).
    pub fn encode(&self, xid: u32) -> Result<Vec<u8>, OfError> {
        self.encode_version(OFP_VERSION, xid)
    }

    /// Encodes the message in wire version `version` (1.0, 1.3, 1.4 or 1.5; a HELLO keeps
    /// its own version). Fails with BAD_REQUEST/BAD_TYPE for a message that version cannot
    /// express (e.g. a GROUP_MOD in 1.0), BAD_REQUEST/BAD_VERSION for an unsupported version.
    pub fn encode_version(&self, version: u8, xid: u32) -> Result<Vec<u8>, OfError> {
        use crate::version::{OFP10, OFP14, OFP15};
        let mut out = Vec::with_capacity(64);
        let version = match self {
            Message::Hello(h) => h.version,
            _ => version,
        };
        if let Message::GroupMod(g) = self {
            if g.command.edits_buckets() && version != OFP15 {
                return Err(errors::BAD_REQUEST_BAD_TYPE);
            }
        }
        out.put_u8(version);
        out.put_u8(self.msg_type());
        out.put_u16(0);
        out.put_u32(xid);
        match version {
            _ if matches!(self, Message::Hello(_)) => self.encode_body(&mut out),
            OFP10 => v10::encode_body(self, &mut out)?,
            OFP15 => {
                // Nicira loads / moves as 1.5 writes them (masked set-field, copy-field).
                let m15 = crate::nx::message_for_openflow15(self);
                let m = m15.as_ref().unwrap_or(self);
                if !v1x::encode_body(m, version, &mut out)? {
                    m.encode_body(&mut out);
                }
            }
            OFP14 => {
                if !v1x::encode_body(self, version, &mut out)? {
                    self.encode_body(&mut out);
                }
            }
            OFP_VERSION if matches!(self, Message::SetAsyncProps(_)) => {
                return Err(errors::BAD_REQUEST_BAD_TYPE)
            }
            OFP_VERSION => self.encode_body(&mut out),
            _ => return Err(errors::BAD_REQUEST_BAD_VERSION),
        }
        let len = u16::try_from(out.len()).map_err(|_| errors::BAD_REQUEST_BAD_LEN)?;
        out.set_u16(2, len);
        Ok(out)
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        match self {
            Message::Hello(h) => h.encode(out),
            Message::Error(e) => e.encode(out),
            Message::EchoRequest(d) | Message::EchoReply(d) => out.extend_from_slice(d),
            Message::FeaturesRequest
            | Message::GetConfigRequest
            | Message::BarrierRequest
            | Message::BarrierReply
            | Message::GetAsyncRequest => {}
            Message::FeaturesReply(f) => f.encode(out),
            Message::GetConfigReply(c) | Message::SetConfig(c) => c.encode(out),
            Message::PacketIn(p) => p.encode(out),
            Message::FlowRemoved(f) => f.encode(out),
            Message::PortStatus(p) => p.encode(out),
            Message::PacketOut(p) => p.encode(out),
            Message::FlowMod(f) => f.encode(out),
            Message::GroupMod(g) => g.encode(out),
            Message::PortMod(p) => p.encode(out),
            Message::TableMod(t) => t.encode(out),
            Message::MultipartRequest(m) => m.encode(out),
            Message::MultipartReply(m) => m.encode(out),
            Message::RoleRequest(r) | Message::RoleReply(r) => r.encode(out),
            Message::GetAsyncReply(c) | Message::SetAsync(c) => c.encode(out),
            // Only 1.4+ can say "change these properties only" (refused in `encode_version`).
            Message::SetAsyncProps(_) => {}
            Message::QueueGetConfigRequest(p) | Message::QueueGetConfigReply(p) => {
                out.put_u32(*p);
                out.pad(4);
            }
            Message::MeterMod(m) => m.encode(out),
            Message::TlvTableMod(_) | Message::TlvTableRequest | Message::TlvTableReply(_) => {
                tlv::encode(self, out);
            }
        }
    }

    /// Whether this message changes switch state (refused from a slave controller).
    pub fn modifies_state(&self) -> bool {
        matches!(
            self,
            Message::PacketOut(_)
                | Message::FlowMod(_)
                | Message::GroupMod(_)
                | Message::PortMod(_)
                | Message::TableMod(_)
                | Message::MeterMod(_)
                | Message::TlvTableMod(_)
        )
    }
}

mod examples;
pub use examples::examples;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod version_tests;
