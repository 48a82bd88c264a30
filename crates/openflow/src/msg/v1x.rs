//! Where OpenFlow 1.4 and 1.5 differ from 1.3 on the wire, for the messages Vireo handles:
//! `ofp_port` with an Ethernet property (PORT_STATUS, PORT_DESC; 1.4+), port statistics with
//! an Ethernet property (1.4+), PORT_MOD with an Ethernet property (1.4+), the PORT_DESC
//! and GROUP_DESC requests' filters (1.5), flow statistics as `ofp_flow_desc` with OXS statistics and
//! aggregate statistics as OXS (1.5), FLOW_REMOVED with OXS statistics (1.5), PACKET_OUT
//! whose input port is a match (1.5), and 1.5 groups ([`super::group15`]).
//! Everything else is shared with the 1.3 codec. Pure codec; runs on the decoding thread.

use super::basic::{decode_async_props, encode_async_props};
use super::multipart::multipart_type as mp;
use super::{finish, msg_type, AsyncConfig, Header, Message, MultipartReply, MultipartReplyBody};
use super::{FlowRemoved, PortStats, PortStatus};
use super::{FlowStats, MultipartRequest, MultipartRequestBody, PacketOut, Port, PortMod};
use crate::action::{decode_actions, decode_instructions, encode_actions, encode_instructions};
use crate::buf::{len_u16, Reader, Writer};
use crate::error::{errors, OfError};
use crate::oxm::{Match, OxmField};
use crate::version::OFP15;

/// `ofp_port` of 1.4+ with its Ethernet property: 40 + 32 bytes.
pub const PORT14_LEN: usize = 72;
/// Port statistics of 1.4+ with the Ethernet property: 80 + 40 bytes.
pub const PORT_STATS14_LEN: usize = 120;

/// Decodes a 1.4/1.5 body that differs from 1.3; `None` = same as 1.3.
pub(crate) fn decode_body(h: Header, r: &mut Reader<'_>) -> Result<Option<Message>, OfError> {
    let v15 = h.version == OFP15;
    Ok(Some(match h.msg_type {
        msg_type::PORT_STATUS => {
            let reason = r.u8()?;
            r.skip(7)?;
            let desc = decode_port(r)?;
            finish(r, Message::PortStatus(PortStatus { reason, desc }))?
        }
        msg_type::PORT_MOD => Message::PortMod(decode_port_mod(r)?),
        msg_type::FLOW_MOD if v15 => {
            let mut f = super::FlowMod::decode(r)?;
            crate::action::meter_action_to_instruction(&mut f.instructions);
            Message::FlowMod(f)
        }
        msg_type::PACKET_OUT if v15 => Message::PacketOut(decode_packet_out15(r)?),
        msg_type::FLOW_REMOVED if v15 => Message::FlowRemoved(decode_flow_removed15(r)?),
        msg_type::MULTIPART_REQUEST if v15 => {
            // PORT_DESC and GROUP_DESC requests gained a port / group filter in 1.5; Vireo
            // answers with every port / group whatever the filter.
            let body = match r.peek_u16()? {
                mp::PORT_DESC => MultipartRequestBody::PortDesc,
                mp::GROUP_DESC => MultipartRequestBody::GroupDesc,
                _ => return Ok(None),
            };
            r.skip(2)?;
            let flags = r.u16()?;
            r.skip(4)?;
            let _filter = r.u32()?;
            r.skip(4)?;
            finish(
                r,
                Message::MultipartRequest(MultipartRequest { flags, body }),
            )?
        }
        msg_type::GROUP_MOD if v15 => Message::GroupMod(super::group15::decode_group_mod(r)?),
        msg_type::MULTIPART_REPLY => return decode_reply(h, r),
        // 1.4 turned the async configuration into properties: a reply carries all of them,
        // a SET_ASYNC only those it changes.
        msg_type::GET_ASYNC_REPLY => {
            let mut c = AsyncConfig::default();
            c.apply(&decode_async_props(r)?);
            Message::GetAsyncReply(c)
        }
        // Every property present is the whole configuration (how 1.3's SET_ASYNC reads).
        msg_type::SET_ASYNC => match decode_async_props(r)? {
            p if p.len() == usize::from(super::basic::ASYNC_PROP_TYPES) => {
                let mut c = AsyncConfig::default();
                c.apply(&p);
                Message::SetAsync(c)
            }
            p => Message::SetAsyncProps(p),
        },
        // QUEUE_GET_CONFIG is gone from 1.4 (QUEUE_DESC replaced it).
        msg_type::QUEUE_GET_CONFIG_REQUEST | msg_type::QUEUE_GET_CONFIG_REPLY => {
            return Err(errors::BAD_REQUEST_BAD_TYPE)
        }
        _ => return Ok(None),
    }))
}

/// Encodes a 1.4/1.5 body that differs from 1.3; false = encode as 1.3.
pub(crate) fn encode_body(m: &Message, version: u8, out: &mut Vec<u8>) -> Result<bool, OfError> {
    let v15 = version == OFP15;
    match m {
        Message::PortStatus(p) => {
            out.put_u8(p.reason);
            out.pad(7);
            encode_port(&p.desc, out);
        }
        Message::PortMod(p) => {
            out.put_u32(p.port_no);
            out.pad(4);
            out.extend_from_slice(&p.hw_addr);
            out.pad(2);
            out.put_u32(p.config);
            out.put_u32(p.mask);
            out.put_u16(0); // OFPPMPT_ETHERNET
            out.put_u16(8);
            out.put_u32(p.advertise);
        }
        Message::PacketOut(p) if v15 => encode_packet_out15(p, out),
        Message::FlowMod(f) if v15 => {
            let mut f = f.clone();
            f.instructions = crate::action::meter_instruction_to_action(&f.instructions);
            f.encode(out);
        }
        Message::FlowRemoved(f) if v15 => encode_flow_removed15(f, out),
        Message::MultipartRequest(r)
            if v15
                && matches!(
                    r.body,
                    MultipartRequestBody::PortDesc | MultipartRequestBody::GroupDesc
                ) =>
        {
            let (mtype, all) = if r.body == MultipartRequestBody::PortDesc {
                (mp::PORT_DESC, super::port_no::ANY)
            } else {
                (mp::GROUP_DESC, super::GROUP_ALL)
            };
            out.put_u16(mtype);
            out.put_u16(r.flags);
            out.pad(4);
            out.put_u32(all);
            out.pad(4);
        }
        Message::GroupMod(g) if v15 => super::group15::encode_group_mod(g, out),
        Message::MultipartReply(r) => return encode_reply(r, v15, out),
        Message::GetAsyncReply(c) => encode_async_props(&c.props(), out),
        Message::SetAsync(c) => encode_async_props(&c.props(), out),
        Message::SetAsyncProps(p) => encode_async_props(p, out),
        Message::QueueGetConfigRequest(_) | Message::QueueGetConfigReply(_) => {
            return Err(errors::BAD_REQUEST_BAD_TYPE)
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// 1.4+ `ofp_port` with one Ethernet property.
pub fn encode_port(p: &Port, out: &mut Vec<u8>) {
    out.put_u32(p.port_no);
    out.put_u16(PORT14_LEN as u16);
    out.pad(2);
    out.extend_from_slice(&p.hw_addr);
    out.pad(2);
    out.put_string(&p.name, 16);
    out.put_u32(p.config);
    out.put_u32(p.state);
    out.put_u16(0); // OFPPDPT_ETHERNET
    out.put_u16(32);
    out.pad(4);
    for v in [
        p.curr,
        p.advertised,
        p.supported,
        p.peer,
        p.curr_speed,
        p.max_speed,
    ] {
        out.put_u32(v);
    }
}

/// Walks 1.4-style properties (type, length, body padded to 8), calling `f` with each.
fn props<'a>(
    r: &mut Reader<'a>,
    mut f: impl FnMut(u16, &mut Reader<'a>) -> Result<(), OfError>,
) -> Result<(), OfError> {
    while !r.is_empty() {
        let ptype = r.u16()?;
        let len = usize::from(r.u16()?);
        if len < 4 {
            return Err(errors::BAD_REQUEST_BAD_LEN);
        }
        let mut body = r.sub(len - 4, errors::BAD_REQUEST_BAD_LEN)?;
        r.skip(((8 - len % 8) % 8).min(r.remaining()))?;
        f(ptype, &mut body)?;
    }
    Ok(())
}

fn decode_port(r: &mut Reader<'_>) -> Result<Port, OfError> {
    let port_no = r.u32()?;
    let len = usize::from(r.u16()?);
    if len < 40 {
        return Err(errors::BAD_REQUEST_BAD_LEN);
    }
    let mut e = r.sub(len - 6, errors::BAD_REQUEST_BAD_LEN)?;
    e.skip(2)?;
    let hw_addr = e.array()?;
    e.skip(2)?;
    let mut p = Port {
        port_no,
        hw_addr,
        name: e.string(16)?,
        config: e.u32()?,
        state: e.u32()?,
        ..Default::default()
    };
    props(&mut e, |t, b| {
        if t == 0 && b.remaining() >= 28 {
            b.skip(4)?;
            p.curr = b.u32()?;
            p.advertised = b.u32()?;
            p.supported = b.u32()?;
            p.peer = b.u32()?;
            p.curr_speed = b.u32()?;
            p.max_speed = b.u32()?;
        }
        Ok(())
    })?;
    Ok(p)
}

fn decode_port_mod(r: &mut Reader<'_>) -> Result<PortMod, OfError> {
    let port_no = r.u32()?;
    r.skip(4)?;
    let hw_addr = r.array()?;
    r.skip(2)?;
    let config = r.u32()?;
    let mask = r.u32()?;
    let mut advertise = 0;
    props(r, |t, b| {
        if t == 0 {
            advertise = b.u32()?;
        }
        Ok(())
    })?;
    Ok(PortMod {
        port_no,
        hw_addr,
        config,
        mask,
        advertise,
    })
}

fn encode_port_stats(s: &PortStats, out: &mut Vec<u8>) {
    out.put_u16(PORT_STATS14_LEN as u16);
    out.pad(2);
    out.put_u32(s.port_no);
    out.put_u32(s.duration_sec);
    out.put_u32(s.duration_nsec);
    for v in [
        s.rx_packets,
        s.tx_packets,
        s.rx_bytes,
        s.tx_bytes,
        s.rx_dropped,
        s.tx_dropped,
        s.rx_errors,
        s.tx_errors,
    ] {
        out.put_u64(v);
    }
    out.put_u16(0); // OFPPSPT_ETHERNET
    out.put_u16(40);
    out.pad(4);
    for v in [s.rx_frame_err, s.rx_over_err, s.rx_crc_err, s.collisions] {
        out.put_u64(v);
    }
}

fn decode_port_stats(r: &mut Reader<'_>) -> Result<PortStats, OfError> {
    let len = usize::from(r.u16()?);
    if len < 80 {
        return Err(errors::BAD_REQUEST_BAD_LEN);
    }
    let mut e = r.sub(len - 2, errors::BAD_REQUEST_BAD_LEN)?;
    e.skip(2)?;
    let mut s = PortStats {
        port_no: e.u32()?,
        duration_sec: e.u32()?,
        duration_nsec: e.u32()?,
        rx_packets: e.u64()?,
        tx_packets: e.u64()?,
        rx_bytes: e.u64()?,
        tx_bytes: e.u64()?,
        rx_dropped: e.u64()?,
        tx_dropped: e.u64()?,
        rx_errors: e.u64()?,
        tx_errors: e.u64()?,
        ..Default::default()
    };
    props(&mut e, |t, b| {
        if t == 0 && b.remaining() >= 36 {
            b.skip(4)?;
            s.rx_frame_err = b.u64()?;
            s.rx_over_err = b.u64()?;
            s.rx_crc_err = b.u64()?;
            s.collisions = b.u64()?;
        }
        Ok(())
    })?;
    Ok(s)
}

/// OXS (1.5 `ofp_stats`) field numbers of the basic class.
mod oxs {
    pub const CLASS: u16 = 0x8002;
    pub const DURATION: u8 = 0;
    pub const FLOW_COUNT: u8 = 3;
    pub const PACKET_COUNT: u8 = 4;
    pub const BYTE_COUNT: u8 = 5;
}

/// Writes an `ofp_stats` of (field, value, width) entries, padded to 8.
fn encode_oxs(fields: &[(u8, u64, u8)], out: &mut Vec<u8>) {
    let start = out.len();
    out.put_u16(0);
    out.put_u16(0);
    for &(f, v, w) in fields {
        out.put_u16(oxs::CLASS);
        out.put_u8(f << 1);
        out.put_u8(w);
        if w == 4 {
            out.put_u32(v as u32);
        } else {
            out.put_u64(v);
        }
    }
    let len = len_u16(out, start);
    out.set_u16(start + 2, len);
    out.pad8_from(start);
}

/// Reads an `ofp_stats`: (field, value) pairs.
fn decode_oxs(r: &mut Reader<'_>) -> Result<Vec<(u8, u64)>, OfError> {
    r.skip(2)?;
    let len = usize::from(r.u16()?);
    if len < 4 {
        return Err(errors::BAD_REQUEST_BAD_LEN);
    }
    let mut b = r.sub(len - 4, errors::BAD_REQUEST_BAD_LEN)?;
    r.skip(((8 - len % 8) % 8).min(r.remaining()))?;
    let mut v = Vec::new();
    while !b.is_empty() {
        let class = b.u16()?;
        let f = b.u8()?;
        let w = b.u8()?;
        let val = match w {
            4 => u64::from(b.u32()?),
            8 => b.u64()?,
            _ => return Err(errors::BAD_REQUEST_BAD_LEN),
        };
        if class == oxs::CLASS && f & 1 == 0 {
            v.push((f >> 1, val));
        }
    }
    Ok(v)
}

fn encode_flow_desc(f: &FlowStats, out: &mut Vec<u8>) {
    let start = out.len();
    out.put_u16(0);
    out.pad(2);
    out.put_u8(f.table_id);
    out.pad(1);
    out.put_u16(f.priority);
    out.put_u16(f.idle_timeout);
    out.put_u16(f.hard_timeout);
    out.put_u16(f.flags);
    out.put_u16(0); // importance
    out.put_u64(f.cookie);
    f.matches.encode(out);
    let duration = (u64::from(f.duration_sec) << 32) | u64::from(f.duration_nsec);
    encode_oxs(
        &[
            (oxs::DURATION, duration, 8),
            (oxs::PACKET_COUNT, f.packet_count, 8),
            (oxs::BYTE_COUNT, f.byte_count, 8),
        ],
        out,
    );
    encode_instructions(
        &crate::action::meter_instruction_to_action(&f.instructions),
        out,
    );
    let len = len_u16(out, start);
    out.set_u16(start, len);
}

fn decode_flow_desc(r: &mut Reader<'_>) -> Result<FlowStats, OfError> {
    let len = usize::from(r.peek_u16()?);
    let mut e = r.sub(len, errors::BAD_REQUEST_BAD_LEN)?;
    e.skip(4)?;
    let table_id = e.u8()?;
    e.skip(1)?;
    let priority = e.u16()?;
    let idle_timeout = e.u16()?;
    let hard_timeout = e.u16()?;
    let flags = e.u16()?;
    e.skip(2)?;
    let cookie = e.u64()?;
    let matches = Match::decode(&mut e)?;
    let mut f = FlowStats {
        table_id,
        duration_sec: 0,
        duration_nsec: 0,
        priority,
        idle_timeout,
        hard_timeout,
        flags,
        cookie,
        packet_count: 0,
        byte_count: 0,
        matches,
        instructions: Vec::new(),
    };
    for (k, v) in decode_oxs(&mut e)? {
        match k {
            oxs::DURATION => {
                f.duration_sec = (v >> 32) as u32;
                f.duration_nsec = v as u32;
            }
            oxs::PACKET_COUNT => f.packet_count = v,
            oxs::BYTE_COUNT => f.byte_count = v,
            _ => {}
        }
    }
    f.instructions = decode_instructions(&mut e)?;
    crate::action::meter_action_to_instruction(&mut f.instructions);
    Ok(f)
}

fn encode_reply(m: &MultipartReply, v15: bool, out: &mut Vec<u8>) -> Result<bool, OfError> {
    use MultipartReplyBody as B;
    type Body<'a> = &'a dyn Fn(&mut Vec<u8>);
    let (mtype, f): (u16, Body<'_>) = match &m.body {
        B::PortDesc(v) => (mp::PORT_DESC, &|o| v.iter().for_each(|p| encode_port(p, o))),
        B::PortStats(v) => (mp::PORT_STATS, &|o| {
            v.iter().for_each(|p| encode_port_stats(p, o))
        }),
        B::Flow(v) if v15 => (mp::FLOW, &|o| v.iter().for_each(|e| encode_flow_desc(e, o))),
        B::Aggregate(a) if v15 => (mp::AGGREGATE, &|o| {
            encode_oxs(
                &[
                    (oxs::FLOW_COUNT, u64::from(a.flow_count), 4),
                    (oxs::PACKET_COUNT, a.packet_count, 8),
                    (oxs::BYTE_COUNT, a.byte_count, 8),
                ],
                o,
            )
        }),
        B::GroupDesc(v) if v15 => (mp::GROUP_DESC, &|o| {
            v.iter()
                .for_each(|g| super::group15::encode_group_desc(g, o))
        }),
        _ => return Ok(false),
    };
    out.put_u16(mtype);
    out.put_u16(m.flags);
    out.pad(4);
    f(out);
    Ok(true)
}

fn decode_reply(h: Header, r: &mut Reader<'_>) -> Result<Option<Message>, OfError> {
    use MultipartReplyBody as B;
    let v15 = h.version == OFP15;
    let mtype = r.peek_u16()?;
    let body = |r: &mut Reader<'_>| -> Result<Option<B>, OfError> {
        Ok(Some(match mtype {
            mp::PORT_DESC => B::PortDesc(all(r, decode_port)?),
            mp::PORT_STATS => B::PortStats(all(r, decode_port_stats)?),
            mp::FLOW if v15 => B::Flow(all(r, decode_flow_desc)?),
            mp::AGGREGATE if v15 => {
                let mut a = super::AggregateStats::default();
                for (k, v) in decode_oxs(r)? {
                    match k {
                        oxs::FLOW_COUNT => a.flow_count = v as u32,
                        oxs::PACKET_COUNT => a.packet_count = v,
                        oxs::BYTE_COUNT => a.byte_count = v,
                        _ => {}
                    }
                }
                finish(r, B::Aggregate(a))?
            }
            mp::GROUP_DESC if v15 => B::GroupDesc(all(r, super::group15::decode_group_desc)?),
            _ => return Ok(None),
        }))
    };
    let mut peek = r.clone();
    peek.skip(2)?;
    let flags = peek.u16()?;
    peek.skip(4)?;
    match body(&mut peek)? {
        Some(body) => {
            *r = peek;
            Ok(Some(Message::MultipartReply(MultipartReply {
                flags,
                body,
            })))
        }
        None => Ok(None),
    }
}

fn all<T>(
    r: &mut Reader<'_>,
    f: impl Fn(&mut Reader<'_>) -> Result<T, OfError>,
) -> Result<Vec<T>, OfError> {
    let mut v = Vec::new();
    while !r.is_empty() {
        v.push(f(r)?);
    }
    Ok(v)
}

fn decode_packet_out15(r: &mut Reader<'_>) -> Result<PacketOut, OfError> {
    let buffer_id = r.u32()?;
    let actions_len = usize::from(r.u16()?);
    r.skip(2)?;
    let m = Match::decode(r)?;
    let mut in_port = super::port_no::CONTROLLER;
    for f in &m.fields {
        match f {
            OxmField::InPort(p) => in_port = *p,
            // Other pipeline fields (metadata, tunnel id) are not supported here.
            _ => return Err(errors::BAD_MATCH_BAD_FIELD),
        }
    }
    let mut ar = r.sub(actions_len, errors::BAD_REQUEST_BAD_LEN)?;
    let actions = decode_actions(&mut ar)?;
    let data = r.rest().to_vec();
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

fn encode_packet_out15(p: &PacketOut, out: &mut Vec<u8>) {
    out.put_u32(p.buffer_id);
    let len_at = out.len();
    out.put_u16(0);
    out.pad(2);
    Match::new(vec![OxmField::InPort(p.in_port)]).encode(out);
    let start = out.len();
    encode_actions(&p.actions, out);
    let alen = len_u16(out, start);
    out.set_u16(len_at, alen);
    out.extend_from_slice(&p.data);
}

fn encode_flow_removed15(f: &FlowRemoved, out: &mut Vec<u8>) {
    out.put_u8(f.table_id);
    out.put_u8(f.reason);
    out.put_u16(f.priority);
    out.put_u16(f.idle_timeout);
    out.put_u16(f.hard_timeout);
    out.put_u64(f.cookie);
    f.matches.encode(out);
    let duration = (u64::from(f.duration_sec) << 32) | u64::from(f.duration_nsec);
    encode_oxs(
        &[
            (oxs::DURATION, duration, 8),
            (oxs::PACKET_COUNT, f.packet_count, 8),
            (oxs::BYTE_COUNT, f.byte_count, 8),
        ],
        out,
    );
}

fn decode_flow_removed15(r: &mut Reader<'_>) -> Result<FlowRemoved, OfError> {
    let table_id = r.u8()?;
    let reason = r.u8()?;
    let priority = r.u16()?;
    let idle_timeout = r.u16()?;
    let hard_timeout = r.u16()?;
    let cookie = r.u64()?;
    let matches = Match::decode(r)?;
    let mut f = FlowRemoved {
        cookie,
        priority,
        reason,
        table_id,
        duration_sec: 0,
        duration_nsec: 0,
        idle_timeout,
        hard_timeout,
        packet_count: 0,
        byte_count: 0,
        matches,
    };
    for (k, v) in decode_oxs(r)? {
        match k {
            oxs::DURATION => {
                f.duration_sec = (v >> 32) as u32;
                f.duration_nsec = v as u32;
            }
            oxs::PACKET_COUNT => f.packet_count = v,
            oxs::BYTE_COUNT => f.byte_count = v,
            _ => {}
        }
    }
    finish(r, f)
}
