//! The Nicira vendor messages of OpenFlow 1.0 that plain `ovs-ofctl` sends: the flow format
//! switch (`NXT_SET_FLOW_FORMAT`: standard 1.0 match or [`nxm`](super::nxm)), table ids in
//! FLOW_MODs (`NXT_FLOW_MOD_TABLE_ID`), `NXT_FLOW_MOD` (a FLOW_MOD with an NXM), the flow
//! and aggregate statistics with an NXM (`NXST_FLOW`, `NXST_AGGREGATE`, vendor statistics)
//! and `NXT_FLOW_REMOVED`, which a switch sends instead of `OFPT_FLOW_REMOVED` to a
//! connection in the NXM flow format.
//!
//! Requests decode into the model's [`Message`]s (the handler sees a FLOW_MOD or a flow
//! statistics request as from any version); the replies' Nicira form is chosen by the
//! connection ([`encode_flow_stats_reply`], [`encode_flow_removed`]). The connection keeps
//! the per-session state (flow format, table ids). Pure codec; runs on the decoding thread.

use super::fields::{self, port_from10, port_to10};
use super::{apply_actions, msg_type, nxm, stats::stats_type};
use crate::action::Instruction;
use crate::buf::{len_u16, Reader, Writer};
use crate::error::{errors, OfError};
use crate::msg::{finish, AggregateStats, FlowMod, FlowModCommand, FlowRemoved, FlowStats};
use crate::msg::{FlowStatsRequest, Header, Message, MultipartReply, MultipartReplyBody};
use crate::msg::{MultipartRequest, MultipartRequestBody, GROUP_ANY, HEADER_LEN, TABLE_ALL};
use crate::version::OFP10;

/// Nicira's vendor id.
pub const NX_VENDOR_ID: u32 = 0x0000_2320;

/// `NXT_*` subtypes of vendor messages.
pub mod subtype {
    pub const SET_FLOW_FORMAT: u32 = 12;
    pub const FLOW_MOD: u32 = 13;
    pub const FLOW_REMOVED: u32 = 14;
    pub const FLOW_MOD_TABLE_ID: u32 = 15;
}

/// `NXST_*` subtypes of vendor statistics.
pub mod stats_subtype {
    pub const FLOW: u32 = 0;
    pub const AGGREGATE: u32 = 1;
}

/// `NXFF_*` flow formats.
pub mod flow_format {
    pub const OPENFLOW10: u32 = 0;
    pub const NXM: u32 = 2;
}

/// Bytes of `nx_flow_mod` after the vendor header.
const FLOW_MOD_LEN: usize = 32;
/// Bytes of `nx_flow_stats` before its NXM.
const FLOW_STATS_LEN: usize = 48;

/// A Nicira vendor message of a 1.0 session, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NxMsg {
    /// `NXT_SET_FLOW_FORMAT`: true for NXM, false for the standard 1.0 match.
    SetFlowFormat(bool),
    /// `NXT_FLOW_MOD_TABLE_ID`: whether FLOW_MODs carry a table id.
    FlowModTableId(bool),
    /// `NXT_FLOW_MOD`, `NXST_FLOW` or `NXST_AGGREGATE` request, as the model's message.
    Request(Message),
}

fn vendor_header(frame: &[u8]) -> Option<(u32, u32)> {
    let word = |i: usize| {
        frame
            .get(i..i + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    Some((word(8)?, word(12)?))
}

/// Whether `frame` is a 1.0 Nicira vendor message (`OFPT_VENDOR`, vendor `0x2320`) or
/// vendor statistics request of Nicira; such frames go to [`decode`].
pub fn is_nicira(frame: &[u8]) -> bool {
    if frame.len() < 16 || frame[0] != OFP10 {
        return false;
    }
    match frame[1] {
        msg_type::VENDOR => vendor_header(frame).is_some_and(|(v, _)| v == NX_VENDOR_ID),
        msg_type::STATS_REQUEST => {
            frame[8..10] == stats_type::VENDOR.to_be_bytes()
                && frame.get(12..16) == Some(&NX_VENDOR_ID.to_be_bytes()[..])
        }
        _ => false,
    }
}

/// Decodes a 1.0 Nicira vendor message or statistics request ([`is_nicira`]). `table_ids`:
/// the session turned `NXT_FLOW_MOD_TABLE_ID` on (the FLOW_MOD command's high byte is a
/// table). Subtypes Vireo does not speak are `OFPBRC_BAD_VENDOR` in 1.0 terms (ovs-ofctl
/// then falls back to what 1.0 has), like other vendors.
pub fn decode(frame: &[u8], table_ids: bool) -> Result<(u32, NxMsg), OfError> {
    let h = Header::parse(frame)?;
    if usize::from(h.length) != frame.len() || h.version != OFP10 {
        return Err(errors::BAD_REQUEST_BAD_LEN);
    }
    let mut r = Reader::new(&frame[HEADER_LEN..], errors::BAD_REQUEST_BAD_LEN);
    let msg = if h.msg_type == msg_type::STATS_REQUEST {
        NxMsg::Request(Message::MultipartRequest(decode_stats_request(&mut r)?))
    } else if h.msg_type == msg_type::VENDOR {
        if r.u32()? != NX_VENDOR_ID {
            return Err(errors::BAD_REQUEST_BAD_EXPERIMENTER);
        }
        match r.u32()? {
            subtype::SET_FLOW_FORMAT => {
                let f = r.u32()?;
                finish(&r, ())?;
                match f {
                    flow_format::OPENFLOW10 => NxMsg::SetFlowFormat(false),
                    flow_format::NXM => NxMsg::SetFlowFormat(true),
                    _ => return Err(errors::BAD_REQUEST_EPERM),
                }
            }
            subtype::FLOW_MOD_TABLE_ID => {
                let on = r.u8()? != 0;
                r.skip(7)?;
                finish(&r, NxMsg::FlowModTableId(on))?
            }
            subtype::FLOW_MOD => {
                NxMsg::Request(Message::FlowMod(decode_flow_mod(&mut r, table_ids)?))
            }
            st => match crate::msg::tlv::decode(st, &mut r)? {
                Some(m) => NxMsg::Request(m),
                None => return Err(errors::BAD_REQUEST_BAD_EXPERIMENTER),
            },
        }
    } else {
        return Err(errors::BAD_REQUEST_BAD_TYPE);
    };
    Ok((h.xid, msg))
}

/// Reads `len` bytes of NXM and the padding to a multiple of 8 after it.
fn padded_nxm(r: &mut Reader<'_>, len: usize) -> Result<nxm::NxMatch, OfError> {
    let m = nxm::decode(r, len)?;
    r.skip(len.next_multiple_of(8) - len)
        .map_err(|_| errors::BAD_MATCH_BAD_LEN)?;
    Ok(m)
}

fn decode_flow_mod(r: &mut Reader<'_>, table_ids: bool) -> Result<FlowMod, OfError> {
    let cookie = r.u64()?;
    let cmd = r.u16()?;
    let (table, cmd) = if table_ids {
        ((cmd >> 8) as u8, cmd & 0xff)
    } else {
        (0, cmd)
    };
    let command = FlowModCommand::from_wire(cmd)?;
    let idle_timeout = r.u16()?;
    let hard_timeout = r.u16()?;
    let priority = r.u16()?;
    let buffer_id = r.u32()?;
    let out_port = port_from10(r.u16()?);
    let flags = r.u16()?;
    // SEND_FLOW_REM and CHECK_OVERLAP, as in 1.0 (EMERG refused there too).
    if flags & !3 != 0 {
        return Err(errors::FLOW_MOD_FAILED_BAD_FLAGS);
    }
    let match_len = usize::from(r.u16()?);
    r.skip(6)?;
    let m = padded_nxm(r, match_len)?;
    let actions = fields::decode_actions(r, Some(&m.matches))?;
    let table_id = if !table_ids {
        if command.is_delete() {
            TABLE_ALL
        } else {
            0
        }
    } else {
        if table == TABLE_ALL && !command.is_delete() {
            return Err(errors::FLOW_MOD_FAILED_BAD_TABLE_ID);
        }
        table
    };
    // An add's cookie is the header's; modifies and deletes select by the NXM's cookie
    // (Vireo, as 1.3, does not let a modify change a rule's cookie).
    let (cookie, cookie_mask) = match (command, m.cookie) {
        (FlowModCommand::Add, _) => (cookie, 0),
        (_, c) => c.unwrap_or((0, 0)),
    };
    Ok(FlowMod {
        cookie,
        cookie_mask,
        table_id,
        command,
        idle_timeout,
        hard_timeout,
        priority,
        buffer_id,
        out_port,
        out_group: GROUP_ANY,
        flags,
        matches: m.matches,
        instructions: if actions.is_empty() {
            vec![]
        } else {
            vec![Instruction::ApplyActions(actions)]
        },
    })
}

fn decode_stats_request(r: &mut Reader<'_>) -> Result<MultipartRequest, OfError> {
    if r.u16()? != stats_type::VENDOR {
        return Err(errors::BAD_REQUEST_BAD_TYPE);
    }
    let flags = r.u16()?;
    if r.u32()? != NX_VENDOR_ID {
        return Err(errors::BAD_REQUEST_BAD_EXPERIMENTER);
    }
    let sub = r.u32()?;
    r.skip(4)?;
    if !matches!(sub, stats_subtype::FLOW | stats_subtype::AGGREGATE) {
        return Err(errors::BAD_REQUEST_BAD_EXPERIMENTER);
    }
    let out_port = port_from10(r.u16()?);
    let match_len = usize::from(r.u16()?);
    let table_id = r.u8()?;
    r.skip(3)?;
    let m = padded_nxm(r, match_len)?;
    let (cookie, cookie_mask) = m.cookie.unwrap_or((0, 0));
    let req = finish(
        r,
        FlowStatsRequest {
            table_id,
            out_port,
            out_group: GROUP_ANY,
            cookie,
            cookie_mask,
            matches: m.matches,
        },
    )?;
    let body = if sub == stats_subtype::FLOW {
        MultipartRequestBody::Flow(req)
    } else {
        MultipartRequestBody::Aggregate(req)
    };
    Ok(MultipartRequest { flags, body })
}

fn start(out: &mut Vec<u8>, mtype: u8, xid: u32) {
    out.put_u8(OFP10);
    out.put_u8(mtype);
    out.put_u16(0);
    out.put_u32(xid);
}

fn finish_len(mut out: Vec<u8>) -> Result<Vec<u8>, OfError> {
    let len = u16::try_from(out.len()).map_err(|_| errors::BAD_REQUEST_BAD_LEN)?;
    out.set_u16(2, len);
    Ok(out)
}

/// Writes an NXM after a 16-bit length field at `len_at` and pads it to 8.
fn put_nxm(out: &mut Vec<u8>, len_at: usize, m: &crate::oxm::Match, cookie: Option<(u64, u64)>) {
    let nstart = out.len();
    let n = nxm::encode(m, cookie, out);
    out.set_u16(len_at, n as u16);
    out.pad8_from(nstart);
}

/// `NXT_SET_FLOW_FORMAT` (`nxm`: NXM, else the standard 1.0 match).
pub fn encode_set_flow_format(xid: u32, nxm: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(20);
    start(&mut out, msg_type::VENDOR, xid);
    out.put_u32(NX_VENDOR_ID);
    out.put_u32(subtype::SET_FLOW_FORMAT);
    out.put_u32(if nxm {
        flow_format::NXM
    } else {
        flow_format::OPENFLOW10
    });
    out.set_u16(2, out.len() as u16);
    out
}

/// `NXT_FLOW_MOD` for `f` (with `table_ids`, the table in the command's high byte).
pub fn encode_flow_mod(xid: u32, f: &FlowMod, table_ids: bool) -> Result<Vec<u8>, OfError> {
    let mut out = Vec::with_capacity(64);
    start(&mut out, msg_type::VENDOR, xid);
    out.put_u32(NX_VENDOR_ID);
    out.put_u32(subtype::FLOW_MOD);
    out.put_u64(if f.command == FlowModCommand::Add {
        f.cookie
    } else {
        0
    });
    let cmd = u16::from(f.command.to_u8());
    out.put_u16(if table_ids {
        u16::from(f.table_id) << 8 | cmd
    } else {
        cmd
    });
    out.put_u16(f.idle_timeout);
    out.put_u16(f.hard_timeout);
    out.put_u16(f.priority);
    out.put_u32(f.buffer_id);
    out.put_u16(port_to10(f.out_port));
    out.put_u16(f.flags & 3);
    let len_at = out.len();
    out.put_u16(0);
    out.pad(6);
    let cookie = (f.command != FlowModCommand::Add && f.cookie_mask != 0)
        .then_some((f.cookie, f.cookie_mask));
    put_nxm(&mut out, len_at, &f.matches, cookie);
    fields::encode_actions(apply_actions(&f.instructions), &mut out);
    debug_assert!(out.len() >= HEADER_LEN + 8 + FLOW_MOD_LEN);
    finish_len(out)
}

/// `NXST_FLOW` / `NXST_AGGREGATE` request for a flow or aggregate statistics request.
pub fn encode_stats_request(xid: u32, m: &MultipartRequest) -> Result<Vec<u8>, OfError> {
    let (sub, req) = match &m.body {
        MultipartRequestBody::Flow(r) => (stats_subtype::FLOW, r),
        MultipartRequestBody::Aggregate(r) => (stats_subtype::AGGREGATE, r),
        _ => return Err(errors::BAD_REQUEST_BAD_TYPE),
    };
    let mut out = Vec::with_capacity(64);
    start(&mut out, msg_type::STATS_REQUEST, xid);
    out.put_u16(stats_type::VENDOR);
    out.put_u16(m.flags);
    out.put_u32(NX_VENDOR_ID);
    out.put_u32(sub);
    out.pad(4);
    out.put_u16(port_to10(req.out_port));
    let len_at = out.len();
    out.put_u16(0);
    out.put_u8(req.table_id);
    out.pad(3);
    let cookie = (req.cookie_mask != 0).then_some((req.cookie, req.cookie_mask));
    put_nxm(&mut out, len_at, &req.matches, cookie);
    finish_len(out)
}

/// A flow or aggregate statistics reply (one part: split it first) as `NXST_FLOW` /
/// `NXST_AGGREGATE`; None for other replies (they have no Nicira form).
pub fn encode_stats_reply(xid: u32, m: &MultipartReply) -> Option<Result<Vec<u8>, OfError>> {
    let sub = match &m.body {
        MultipartReplyBody::Flow(_) => stats_subtype::FLOW,
        MultipartReplyBody::Aggregate(_) => stats_subtype::AGGREGATE,
        _ => return None,
    };
    let mut out = Vec::with_capacity(256);
    start(&mut out, msg_type::STATS_REPLY, xid);
    out.put_u16(stats_type::VENDOR);
    out.put_u16(m.flags);
    out.put_u32(NX_VENDOR_ID);
    out.put_u32(sub);
    out.pad(4);
    match &m.body {
        MultipartReplyBody::Flow(v) => v.iter().for_each(|f| encode_flow_stats(f, &mut out)),
        MultipartReplyBody::Aggregate(a) => encode_aggregate(a, &mut out),
        _ => {}
    }
    Some(finish_len(out))
}

fn encode_flow_stats(f: &FlowStats, out: &mut Vec<u8>) {
    let at = out.len();
    out.put_u16(0);
    out.put_u8(f.table_id);
    out.pad(1);
    out.put_u32(f.duration_sec);
    out.put_u32(f.duration_nsec);
    out.put_u16(f.priority);
    out.put_u16(f.idle_timeout);
    out.put_u16(f.hard_timeout);
    let len_at = out.len();
    out.put_u16(0);
    // idle_age, hard_age: 0 = unknown (Vireo keeps no per-rule last-use time).
    out.put_u16(0);
    out.put_u16(0);
    out.put_u64(f.cookie);
    out.put_u64(f.packet_count);
    out.put_u64(f.byte_count);
    debug_assert_eq!(out.len() - at, FLOW_STATS_LEN);
    put_nxm(out, len_at, &f.matches, None);
    fields::encode_actions(apply_actions(&f.instructions), out);
    let len = len_u16(out, at);
    out.set_u16(at, len);
}

fn encode_aggregate(a: &AggregateStats, out: &mut Vec<u8>) {
    out.put_u64(a.packet_count);
    out.put_u64(a.byte_count);
    out.put_u32(a.flow_count);
    out.pad(4);
}

/// Decodes an `NXST_FLOW` / `NXST_AGGREGATE` reply (the client side, for tests).
pub fn decode_stats_reply(frame: &[u8]) -> Result<(u32, MultipartReply), OfError> {
    let h = Header::parse(frame)?;
    if h.version != OFP10 || h.msg_type != msg_type::STATS_REPLY {
        return Err(errors::BAD_REQUEST_BAD_TYPE);
    }
    let mut r = Reader::new(&frame[HEADER_LEN..], errors::BAD_REQUEST_BAD_LEN);
    if r.u16()? != stats_type::VENDOR {
        return Err(errors::BAD_REQUEST_BAD_TYPE);
    }
    let flags = r.u16()?;
    if r.u32()? != NX_VENDOR_ID {
        return Err(errors::BAD_REQUEST_BAD_EXPERIMENTER);
    }
    let sub = r.u32()?;
    r.skip(4)?;
    let body = match sub {
        stats_subtype::FLOW => {
            let mut v = Vec::new();
            while !r.is_empty() {
                let len = usize::from(r.peek_u16()?);
                let mut e = r.sub(len, errors::BAD_REQUEST_BAD_LEN)?;
                e.skip(2)?;
                let table_id = e.u8()?;
                e.skip(1)?;
                let (duration_sec, duration_nsec) = (e.u32()?, e.u32()?);
                let (priority, idle_timeout, hard_timeout) = (e.u16()?, e.u16()?, e.u16()?);
                let match_len = usize::from(e.u16()?);
                e.skip(4)?;
                let (cookie, packet_count, byte_count) = (e.u64()?, e.u64()?, e.u64()?);
                let m = padded_nxm(&mut e, match_len)?;
                let actions = fields::decode_actions(&mut e, Some(&m.matches))?;
                v.push(FlowStats {
                    table_id,
                    duration_sec,
                    duration_nsec,
                    priority,
                    idle_timeout,
                    hard_timeout,
                    flags: 0,
                    cookie,
                    packet_count,
                    byte_count,
                    matches: m.matches,
                    instructions: if actions.is_empty() {
                        vec![]
                    } else {
                        vec![Instruction::ApplyActions(actions)]
                    },
                });
            }
            MultipartReplyBody::Flow(v)
        }
        stats_subtype::AGGREGATE => {
            let a = AggregateStats {
                packet_count: r.u64()?,
                byte_count: r.u64()?,
                flow_count: r.u32()?,
            };
            r.skip(4)?;
            finish(&r, MultipartReplyBody::Aggregate(a))?
        }
        _ => return Err(errors::BAD_REQUEST_BAD_EXPERIMENTER),
    };
    Ok((h.xid, MultipartReply { flags, body }))
}

/// `NXT_FLOW_REMOVED`, what a connection in the NXM flow format gets for a removed rule.
pub fn encode_flow_removed(xid: u32, f: &FlowRemoved) -> Result<Vec<u8>, OfError> {
    let mut out = Vec::with_capacity(96);
    start(&mut out, msg_type::VENDOR, xid);
    out.put_u32(NX_VENDOR_ID);
    out.put_u32(subtype::FLOW_REMOVED);
    out.put_u64(f.cookie);
    out.put_u16(f.priority);
    // 1.0 reasons: idle, hard, delete (a group delete counts as a delete).
    out.put_u8(f.reason.min(2));
    // The table id plus one (0: unknown).
    out.put_u8(f.table_id.wrapping_add(1));
    out.put_u32(f.duration_sec);
    out.put_u32(f.duration_nsec);
    out.put_u16(f.idle_timeout);
    let len_at = out.len();
    out.put_u16(0);
    out.put_u64(f.packet_count);
    out.put_u64(f.byte_count);
    put_nxm(&mut out, len_at, &f.matches, None);
    finish_len(out)
}
