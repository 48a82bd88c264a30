//! OpenFlow 1.0 wire format, translated to and from the 1.3-shaped [`Message`] model:
//! message types, FEATURES_REPLY with its port list, `ofp_phy_port`, PACKET_IN/OUT,
//! FLOW_MOD/FLOW_REMOVED with the fixed match ([`fields`]), PORT_MOD, the statistics
//! messages ([`stats`]) and BARRIER. The Nicira vendor messages plain `ovs-ofctl` relies on
//! (flow format, table ids, `NXT_FLOW_MOD`, `NXST_FLOW`/`NXST_AGGREGATE`,
//! `NXT_FLOW_REMOVED`) are in [`nicira`], their match format in [`nxm`]; the connection
//! layer keeps the per-session state. Other vendor messages are refused with
//! `OFPBRC_BAD_VENDOR`, which makes `ovs-ofctl` fall back to what 1.0 has. Pure codec; runs
//! on the decoding thread.

pub mod fields;
pub mod nicira;
pub mod nxm;
pub mod stats;

use super::{finish, Header, Message};
use super::{ErrorMsg, FeaturesReply, FlowMod, FlowModCommand, FlowRemoved, PacketIn};
use super::{PacketOut, Port, PortMod, PortStatus, SwitchConfig, GROUP_ANY, TABLE_ALL};
use crate::action::Instruction;
use crate::buf::{Reader, Writer};
use crate::error::{errors, OfError};
use crate::oxm::{Match, OxmField};
use fields::{port_from10, port_to10};

/// `ofp_type` values of OpenFlow 1.0.
pub mod msg_type {
    pub const HELLO: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const ECHO_REQUEST: u8 = 2;
    pub const ECHO_REPLY: u8 = 3;
    pub const VENDOR: u8 = 4;
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
    pub const PORT_MOD: u8 = 15;
    pub const STATS_REQUEST: u8 = 16;
    pub const STATS_REPLY: u8 = 17;
    pub const BARRIER_REQUEST: u8 = 18;
    pub const BARRIER_REPLY: u8 = 19;
    pub const QUEUE_GET_CONFIG_REQUEST: u8 = 20;
    pub const QUEUE_GET_CONFIG_REPLY: u8 = 21;
}

/// Size of `ofp_phy_port`.
pub const PHY_PORT_LEN: usize = 48;

/// `ofp_flow_mod_flags` of 1.0 (`OFPFF_EMERG` is refused).
const FF_SEND_FLOW_REM: u16 = 1;
const FF_CHECK_OVERLAP: u16 = 2;
const FF_EMERG: u16 = 4;

/// Decodes the body of a 1.0 message (header already parsed).
pub(crate) fn decode_body(h: Header, r: &mut Reader<'_>) -> Result<Message, OfError> {
    use msg_type as t;
    Ok(match h.msg_type {
        t::ERROR => Message::Error(ErrorMsg::decode(r)?),
        t::ECHO_REQUEST => Message::EchoRequest(r.rest().to_vec()),
        t::ECHO_REPLY => Message::EchoReply(r.rest().to_vec()),
        t::VENDOR => crate::msg::tlv::decode_experimenter(r)?,
        t::FEATURES_REQUEST => finish(r, Message::FeaturesRequest)?,
        t::FEATURES_REPLY => Message::FeaturesReply(decode_features(r)?),
        t::GET_CONFIG_REQUEST => finish(r, Message::GetConfigRequest)?,
        t::GET_CONFIG_REPLY => Message::GetConfigReply(SwitchConfig::decode(r)?),
        t::SET_CONFIG => Message::SetConfig(SwitchConfig::decode(r)?),
        t::PACKET_IN => Message::PacketIn(decode_packet_in(r)?),
        t::FLOW_REMOVED => Message::FlowRemoved(decode_flow_removed(r)?),
        t::PORT_STATUS => {
            let reason = r.u8()?;
            r.skip(7)?;
            let desc = decode_port(r)?;
            finish(r, Message::PortStatus(PortStatus { reason, desc }))?
        }
        t::PACKET_OUT => Message::PacketOut(decode_packet_out(r)?),
        t::FLOW_MOD => Message::FlowMod(decode_flow_mod(r)?),
        t::PORT_MOD => Message::PortMod(decode_port_mod(r)?),
        t::STATS_REQUEST => Message::MultipartRequest(stats::decode_request(r)?),
        t::STATS_REPLY => Message::MultipartReply(stats::decode_reply(r)?),
        t::BARRIER_REQUEST => finish(r, Message::BarrierRequest)?,
        t::BARRIER_REPLY => finish(r, Message::BarrierReply)?,
        t::QUEUE_GET_CONFIG_REQUEST | t::QUEUE_GET_CONFIG_REPLY => {
            let port = port_from10(r.u16()?);
            r.skip(if h.msg_type == t::QUEUE_GET_CONFIG_REQUEST {
                2
            } else {
                6
            })?;
            finish(
                r,
                if h.msg_type == t::QUEUE_GET_CONFIG_REQUEST {
                    Message::QueueGetConfigRequest(port)
                } else {
                    Message::QueueGetConfigReply(port)
                },
            )?
        }
        _ => return Err(errors::BAD_REQUEST_BAD_TYPE),
    })
}

/// Encodes the body of `m` in 1.0 after the header in `out`, and patches the header's type.
pub(crate) fn encode_body(m: &Message, out: &mut Vec<u8>) -> Result<(), OfError> {
    use msg_type as t;
    let mtype = match m {
        Message::Hello(h) => {
            h.encode(out);
            t::HELLO
        }
        Message::Error(e) => {
            e.encode(out);
            t::ERROR
        }
        Message::EchoRequest(d) => {
            out.extend_from_slice(d);
            t::ECHO_REQUEST
        }
        Message::EchoReply(d) => {
            out.extend_from_slice(d);
            t::ECHO_REPLY
        }
        Message::FeaturesRequest => t::FEATURES_REQUEST,
        Message::FeaturesReply(f) => {
            encode_features(f, &[], out);
            t::FEATURES_REPLY
        }
        Message::GetConfigRequest => t::GET_CONFIG_REQUEST,
        Message::GetConfigReply(c) => {
            c.encode(out);
            t::GET_CONFIG_REPLY
        }
        Message::SetConfig(c) => {
            c.encode(out);
            t::SET_CONFIG
        }
        Message::PacketIn(p) => {
            encode_packet_in(p, out);
            t::PACKET_IN
        }
        Message::FlowRemoved(f) => {
            encode_flow_removed(f, out);
            t::FLOW_REMOVED
        }
        Message::PortStatus(p) => {
            out.put_u8(p.reason);
            out.pad(7);
            encode_port(&p.desc, out);
            t::PORT_STATUS
        }
        Message::PacketOut(p) => {
            encode_packet_out(p, out);
            t::PACKET_OUT
        }
        Message::FlowMod(f) => {
            encode_flow_mod(f, out);
            t::FLOW_MOD
        }
        Message::PortMod(p) => {
            out.put_u16(port_to10(p.port_no));
            out.extend_from_slice(&p.hw_addr);
            out.put_u32(p.config);
            out.put_u32(p.mask);
            out.put_u32(features_to10(p.advertise));
            out.pad(4);
            t::PORT_MOD
        }
        Message::MultipartRequest(r) => {
            stats::encode_request(r, out)?;
            t::STATS_REQUEST
        }
        Message::MultipartReply(r) => {
            stats::encode_reply(r, out)?;
            t::STATS_REPLY
        }
        Message::BarrierRequest => t::BARRIER_REQUEST,
        Message::BarrierReply => t::BARRIER_REPLY,
        Message::QueueGetConfigRequest(p) => {
            out.put_u16(port_to10(*p));
            out.pad(2);
            t::QUEUE_GET_CONFIG_REQUEST
        }
        Message::QueueGetConfigReply(p) => {
            out.put_u16(port_to10(*p));
            out.pad(6);
            t::QUEUE_GET_CONFIG_REPLY
        }
        Message::TlvTableMod(_) | Message::TlvTableRequest | Message::TlvTableReply(_) => {
            crate::msg::tlv::encode(m, out);
            t::VENDOR
        }
        Message::GroupMod(_)
        | Message::MeterMod(_)
        | Message::TableMod(_)
        | Message::RoleRequest(_)
        | Message::RoleReply(_)
        | Message::GetAsyncRequest
        | Message::GetAsyncReply(_)
        | Message::SetAsync(_)
        | Message::SetAsyncProps(_) => return Err(errors::BAD_REQUEST_BAD_TYPE),
    };
    out[1] = mtype;
    Ok(())
}

/// A complete 1.0 FEATURES_REPLY listing `ports` (1.0 has no port-description request;
/// the connection layer answers FEATURES_REQUEST with this).
pub fn features_reply(xid: u32, f: &FeaturesReply, ports: &[Port]) -> Result<Vec<u8>, OfError> {
    let mut out = vec![crate::version::OFP10, msg_type::FEATURES_REPLY, 0, 0];
    out.put_u32(xid);
    encode_features(f, ports, &mut out);
    let len = u16::try_from(out.len()).map_err(|_| errors::BAD_REQUEST_BAD_LEN)?;
    out.set_u16(2, len);
    Ok(out)
}

fn encode_features(f: &FeaturesReply, ports: &[Port], out: &mut Vec<u8>) {
    out.put_u64(f.datapath_id);
    out.put_u32(f.n_buffers);
    out.put_u8(f.n_tables);
    out.pad(3);
    // 1.0 capability bits: FLOW, TABLE, PORT stats (0-2), STP (3, none), IP_REASM (5),
    // QUEUE_STATS (6), ARP_MATCH_IP (7: Vireo matches ARP addresses).
    out.put_u32((f.capabilities & 0x67) | (1 << 7));
    out.put_u32(fields::SUPPORTED_ACTIONS);
    for p in ports {
        encode_port(p, out);
    }
}

fn decode_features(r: &mut Reader<'_>) -> Result<FeaturesReply, OfError> {
    let datapath_id = r.u64()?;
    let n_buffers = r.u32()?;
    let n_tables = r.u8()?;
    r.skip(3)?;
    let capabilities = r.u32()? & 0x67;
    r.skip(4)?;
    if !r.remaining().is_multiple_of(PHY_PORT_LEN) {
        return Err(errors::BAD_REQUEST_BAD_LEN);
    }
    while !r.is_empty() {
        decode_port(r)?;
    }
    Ok(FeaturesReply {
        datapath_id,
        n_buffers,
        n_tables,
        auxiliary_id: 0,
        capabilities,
    })
}

/// 1.3 `ofp_port_features` bits as 1.0 writes them (40G/100G/1T/other have no 1.0 bit).
fn features_to10(f: u32) -> u32 {
    (f & 0x7f) | ((f >> 4) & (0x1f << 7))
}

fn features_from10(f: u32) -> u32 {
    (f & 0x7f) | ((f & (0x1f << 7)) << 4)
}

/// `ofp_phy_port`: no speed fields; state keeps only LINK_DOWN (1.0's other state bits are
/// STP's, which Vireo does not run).
pub fn encode_port(p: &Port, out: &mut Vec<u8>) {
    out.put_u16(port_to10(p.port_no));
    out.extend_from_slice(&p.hw_addr);
    out.put_string(&p.name, 16);
    out.put_u32(p.config & 0x7f);
    out.put_u32(p.state & 1);
    for f in [p.curr, p.advertised, p.supported, p.peer] {
        out.put_u32(features_to10(f));
    }
}

fn decode_port(r: &mut Reader<'_>) -> Result<Port, OfError> {
    Ok(Port {
        port_no: port_from10(r.u16()?),
        hw_addr: r.array()?,
        name: r.string(16)?,
        config: r.u32()? & 0x7f,
        state: r.u32()? & 1,
        curr: features_from10(r.u32()?),
        advertised: features_from10(r.u32()?),
        supported: features_from10(r.u32()?),
        peer: features_from10(r.u32()?),
        curr_speed: 0,
        max_speed: 0,
    })
}

fn in_port_of(m: &Match) -> u32 {
    match m.get(crate::oxm::field::InPort) {
        Some(OxmField::InPort(p)) => *p,
        _ => 0,
    }
}

fn encode_packet_in(p: &PacketIn, out: &mut Vec<u8>) {
    out.put_u32(p.buffer_id);
    out.put_u16(p.total_len);
    out.put_u16(port_to10(in_port_of(&p.matches)));
    // 1.0 reasons: 0 no match, 1 action (1.3's "invalid TTL" has none).
    out.put_u8(p.reason.min(1));
    out.pad(1);
    out.extend_from_slice(&p.data);
}

fn decode_packet_in(r: &mut Reader<'_>) -> Result<PacketIn, OfError> {
    let buffer_id = r.u32()?;
    let total_len = r.u16()?;
    let in_port = port_from10(r.u16()?);
    let reason = r.u8()?.min(1);
    r.skip(1)?;
    Ok(PacketIn {
        buffer_id,
        total_len,
        reason,
        table_id: 0,
        cookie: 0,
        matches: Match::new(vec![OxmField::InPort(in_port)]),
        data: r.rest().to_vec(),
    })
}

fn encode_flow_removed(f: &FlowRemoved, out: &mut Vec<u8>) {
    fields::encode_match(&f.matches, out);
    out.put_u64(f.cookie);
    out.put_u16(f.priority);
    // 1.0 reasons: idle, hard, delete (1.3's group delete counts as a delete).
    out.put_u8(f.reason.min(2));
    out.pad(1);
    out.put_u32(f.duration_sec);
    out.put_u32(f.duration_nsec);
    out.put_u16(f.idle_timeout);
    out.pad(2);
    out.put_u64(f.packet_count);
    out.put_u64(f.byte_count);
}

fn decode_flow_removed(r: &mut Reader<'_>) -> Result<FlowRemoved, OfError> {
    let matches = fields::decode_match(r)?;
    let cookie = r.u64()?;
    let priority = r.u16()?;
    let reason = r.u8()?.min(2);
    r.skip(1)?;
    let duration_sec = r.u32()?;
    let duration_nsec = r.u32()?;
    let idle_timeout = r.u16()?;
    r.skip(2)?;
    let f = FlowRemoved {
        cookie,
        priority,
        reason,
        table_id: 0,
        duration_sec,
        duration_nsec,
        idle_timeout,
        hard_timeout: 0,
        packet_count: r.u64()?,
        byte_count: r.u64()?,
        matches,
    };
    finish(r, f)
}

fn decode_packet_out(r: &mut Reader<'_>) -> Result<PacketOut, OfError> {
    let buffer_id = r.u32()?;
    let in_port = port_from10(r.u16()?);
    let actions_len = usize::from(r.u16()?);
    let mut ar = r.sub(actions_len, errors::BAD_REQUEST_BAD_LEN)?;
    let actions = fields::decode_actions(&mut ar, None)?;
    let data = r.rest().to_vec();
    // 1.0 allows OFPP_NONE (no input port) besides CONTROLLER and LOCAL.
    let in_port = if in_port == super::port_no::ANY {
        super::port_no::CONTROLLER
    } else {
        in_port
    };
    if in_port > super::port_no::MAX
        && in_port != super::port_no::CONTROLLER
        && in_port != super::port_no::LOCAL
    {
        return Err(errors::BAD_REQUEST_BAD_PORT);
    }
    Ok(PacketOut {
        buffer_id,
        in_port,
        actions,
        data,
    })
}

fn encode_packet_out(p: &PacketOut, out: &mut Vec<u8>) {
    out.put_u32(p.buffer_id);
    out.put_u16(port_to10(p.in_port));
    let len_at = out.len();
    out.put_u16(0);
    let start = out.len();
    fields::encode_actions(&p.actions, out);
    let alen = crate::buf::len_u16(out, start);
    out.set_u16(len_at, alen);
    out.extend_from_slice(&p.data);
}

fn decode_flow_mod(r: &mut Reader<'_>) -> Result<FlowMod, OfError> {
    let matches = fields::decode_match(r)?;
    let cookie = r.u64()?;
    let cmd = r.u16()?;
    let command = FlowModCommand::from_wire(cmd)?;
    let idle_timeout = r.u16()?;
    let hard_timeout = r.u16()?;
    let priority = r.u16()?;
    let buffer_id = r.u32()?;
    let out_port = port_from10(r.u16()?);
    let flags = r.u16()?;
    if flags & FF_EMERG != 0 || flags & !(FF_SEND_FLOW_REM | FF_CHECK_OVERLAP | FF_EMERG) != 0 {
        return Err(errors::FLOW_MOD_FAILED_BAD_FLAGS);
    }
    let actions = fields::decode_actions(r, Some(&matches))?;
    // 1.0 names no table: adds and modifies go to table 0, deletes apply to every table.
    let table_id = if command.is_delete() { TABLE_ALL } else { 0 };
    let instructions = if actions.is_empty() {
        vec![]
    } else {
        vec![Instruction::ApplyActions(actions)]
    };
    Ok(FlowMod {
        cookie,
        // Only 1.3 filters modifies and deletes by cookie.
        cookie_mask: 0,
        table_id,
        command,
        idle_timeout,
        hard_timeout,
        priority,
        buffer_id,
        out_port,
        out_group: GROUP_ANY,
        flags,
        matches,
        instructions,
    })
}

/// The apply-actions of an instruction list, for 1.0 (other instructions have no 1.0
/// form and are left out).
pub(crate) fn apply_actions(insts: &[Instruction]) -> &[crate::action::Action] {
    insts
        .iter()
        .find_map(|i| match i {
            Instruction::ApplyActions(a) => Some(a.as_slice()),
            _ => None,
        })
        .unwrap_or(&[])
}

fn encode_flow_mod(f: &FlowMod, out: &mut Vec<u8>) {
    fields::encode_match(&f.matches, out);
    out.put_u64(f.cookie);
    out.put_u16(u16::from(f.command.to_u8()));
    out.put_u16(f.idle_timeout);
    out.put_u16(f.hard_timeout);
    out.put_u16(f.priority);
    out.put_u32(f.buffer_id);
    out.put_u16(port_to10(f.out_port));
    out.put_u16(f.flags & (FF_SEND_FLOW_REM | FF_CHECK_OVERLAP));
    fields::encode_actions(apply_actions(&f.instructions), out);
}

fn decode_port_mod(r: &mut Reader<'_>) -> Result<PortMod, OfError> {
    let port_no = port_from10(r.u16()?);
    let hw_addr = r.array()?;
    let config = r.u32()?;
    let mask = r.u32()?;
    let advertise = features_from10(r.u32()?);
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

/// Nicira's vendor id.
pub const NX_VENDOR_ID: u32 = 0x0000_2320;
/// `NXT_FLOW_MOD_TABLE_ID` subtype.
pub const NXT_FLOW_MOD_TABLE_ID: u32 = 15;

/// `Some(enable)` if `frame` is a well-formed 1.0 `NXT_FLOW_MOD_TABLE_ID` (header, vendor,
/// subtype, `set` byte, 7 bytes of padding).
pub fn nx_flow_mod_table_id(frame: &[u8]) -> Option<bool> {
    if frame.len() != 24 || frame[0] != crate::version::OFP10 || frame[1] != msg_type::VENDOR {
        return None;
    }
    let word = |i: usize| u32::from_be_bytes([frame[i], frame[i + 1], frame[i + 2], frame[i + 3]]);
    (word(8) == NX_VENDOR_ID && word(12) == NXT_FLOW_MOD_TABLE_ID).then_some(frame[16] != 0)
}

/// Decodes a 1.0 FLOW_MOD sent after `NXT_FLOW_MOD_TABLE_ID` turned table ids on: the
/// command's high byte names the table (`0xff` = every table, for deletes).
pub fn decode_flow_mod_table_id(frame: &[u8]) -> Result<(u32, Message), OfError> {
    // Header (8) + ofp_match (40) + cookie (8): the command's high byte.
    const AT: usize = 8 + fields::MATCH_LEN + 8;
    let Some(&table_id) = frame.get(AT) else {
        return Err(errors::BAD_REQUEST_BAD_LEN);
    };
    let mut f = frame.to_vec();
    f[AT] = 0;
    let (xid, msg) = super::decode(&f)?;
    let Message::FlowMod(mut fm) = msg else {
        return Err(errors::BAD_REQUEST_BAD_TYPE);
    };
    if table_id == TABLE_ALL && !fm.command.is_delete() {
        return Err(errors::FLOW_MOD_FAILED_BAD_TABLE_ID);
    }
    if !(fm.command.is_delete() && table_id == TABLE_ALL) {
        fm.table_id = table_id;
    }
    Ok((xid, Message::FlowMod(fm)))
}
