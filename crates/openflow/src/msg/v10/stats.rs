//! OpenFlow 1.0 statistics (`OFPT_STATS_REQUEST` / `OFPT_STATS_REPLY`): desc, flow,
//! aggregate, table and port, as the model's multipart messages. 1.0's stats header has no
//! padding after the flags; flow entries carry the fixed match and 1.0 actions; table
//! entries carry a name, wildcards and a size; port entries a 16-bit port number. Queue and
//! vendor statistics are refused (`OFPBRC_BAD_STAT`, `OFPBRC_BAD_VENDOR`). Pure codec.

use super::apply_actions;
use super::fields::{self, port_from10, port_to10};
use crate::action::Instruction;
use crate::buf::{len_u16, Reader, Writer};
use crate::error::{errors, OfError};
use crate::msg::{finish, FlowStatsRequest, MultipartReply, MultipartReplyBody, GROUP_ANY};
use crate::msg::{AggregateStats, Desc, FlowStats, PortStats, TableStats};
use crate::msg::{MultipartRequest, MultipartRequestBody};

/// `ofp_stats_types` of 1.0.
pub mod stats_type {
    pub const DESC: u16 = 0;
    pub const FLOW: u16 = 1;
    pub const AGGREGATE: u16 = 2;
    pub const TABLE: u16 = 3;
    pub const PORT: u16 = 4;
    pub const QUEUE: u16 = 5;
    pub const VENDOR: u16 = 0xffff;
}

/// Size of a 1.0 `ofp_table_stats`.
pub const TABLE_STATS_LEN: usize = 64;
/// Size of a 1.0 `ofp_port_stats`.
pub const PORT_STATS_LEN: usize = 104;
/// Rules a table holds at most, as reported in table stats.
const MAX_ENTRIES: u32 = 1_000_000;

fn decode_flow_request(r: &mut Reader<'_>) -> Result<FlowStatsRequest, OfError> {
    let matches = fields::decode_match(r)?;
    let table_id = r.u8()?;
    r.skip(1)?;
    let out_port = port_from10(r.u16()?);
    finish(
        r,
        FlowStatsRequest {
            table_id,
            out_port,
            out_group: GROUP_ANY,
            cookie: 0,
            cookie_mask: 0,
            matches,
        },
    )
}

pub(crate) fn decode_request(r: &mut Reader<'_>) -> Result<MultipartRequest, OfError> {
    use stats_type as t;
    use MultipartRequestBody as B;
    let stype = r.u16()?;
    let flags = r.u16()?;
    let body = match stype {
        t::DESC => finish(r, B::Desc)?,
        t::FLOW => B::Flow(decode_flow_request(r)?),
        t::AGGREGATE => B::Aggregate(decode_flow_request(r)?),
        t::TABLE => finish(r, B::Table)?,
        t::PORT => {
            let p = port_from10(r.u16()?);
            r.skip(6)?;
            finish(r, B::PortStats(p))?
        }
        t::VENDOR => return Err(errors::BAD_REQUEST_BAD_EXPERIMENTER),
        // QUEUE and unknown types: OFPBRC_BAD_STAT.
        _ => return Err(errors::BAD_REQUEST_BAD_MULTIPART),
    };
    Ok(MultipartRequest { flags, body })
}

pub(crate) fn encode_request(m: &MultipartRequest, out: &mut Vec<u8>) -> Result<(), OfError> {
    use stats_type as t;
    use MultipartRequestBody as B;
    let flow = |f: &FlowStatsRequest, out: &mut Vec<u8>| {
        fields::encode_match(&f.matches, out);
        out.put_u8(f.table_id);
        out.pad(1);
        out.put_u16(port_to10(f.out_port));
    };
    match &m.body {
        B::Desc => {
            out.put_u16(t::DESC);
            out.put_u16(m.flags);
        }
        B::Flow(f) | B::Aggregate(f) => {
            let ty = if matches!(m.body, B::Flow(_)) {
                t::FLOW
            } else {
                t::AGGREGATE
            };
            out.put_u16(ty);
            out.put_u16(m.flags);
            flow(f, out);
        }
        B::Table => {
            out.put_u16(t::TABLE);
            out.put_u16(m.flags);
        }
        B::PortStats(p) => {
            out.put_u16(t::PORT);
            out.put_u16(m.flags);
            out.put_u16(port_to10(*p));
            out.pad(6);
        }
        _ => return Err(errors::BAD_REQUEST_BAD_TYPE),
    }
    Ok(())
}

pub(crate) fn encode_reply(m: &MultipartReply, out: &mut Vec<u8>) -> Result<(), OfError> {
    use stats_type as t;
    use MultipartReplyBody as B;
    let stype = match &m.body {
        B::Desc(_) => t::DESC,
        B::Flow(_) => t::FLOW,
        B::Aggregate(_) => t::AGGREGATE,
        B::Table(_) => t::TABLE,
        B::PortStats(_) => t::PORT,
        _ => return Err(errors::BAD_REQUEST_BAD_TYPE),
    };
    out.put_u16(stype);
    out.put_u16(m.flags);
    match &m.body {
        B::Desc(d) => d.encode(out),
        B::Flow(v) => {
            for f in v {
                let start = out.len();
                out.put_u16(0);
                out.put_u8(f.table_id);
                out.pad(1);
                fields::encode_match(&f.matches, out);
                out.put_u32(f.duration_sec);
                out.put_u32(f.duration_nsec);
                out.put_u16(f.priority);
                out.put_u16(f.idle_timeout);
                out.put_u16(f.hard_timeout);
                out.pad(6);
                out.put_u64(f.cookie);
                out.put_u64(f.packet_count);
                out.put_u64(f.byte_count);
                fields::encode_actions(apply_actions(&f.instructions), out);
                let len = len_u16(out, start);
                out.set_u16(start, len);
            }
        }
        B::Aggregate(a) => {
            out.put_u64(a.packet_count);
            out.put_u64(a.byte_count);
            out.put_u32(a.flow_count);
            out.pad(4);
        }
        B::Table(v) => {
            for e in v {
                out.put_u8(e.table_id);
                out.pad(3);
                out.put_string("", 32);
                out.put_u32(fields::wildcards::ALL);
                out.put_u32(MAX_ENTRIES);
                out.put_u32(e.active_count);
                out.put_u64(e.lookup_count);
                out.put_u64(e.matched_count);
            }
        }
        B::PortStats(v) => {
            for p in v {
                out.put_u16(port_to10(p.port_no));
                out.pad(6);
                for c in [
                    p.rx_packets,
                    p.tx_packets,
                    p.rx_bytes,
                    p.tx_bytes,
                    p.rx_dropped,
                    p.tx_dropped,
                    p.rx_errors,
                    p.tx_errors,
                    p.rx_frame_err,
                    p.rx_over_err,
                    p.rx_crc_err,
                    p.collisions,
                ] {
                    out.put_u64(c);
                }
            }
        }
        _ => return Err(errors::BAD_REQUEST_BAD_TYPE),
    }
    Ok(())
}

fn all<T>(
    r: &mut Reader<'_>,
    fixed: Option<usize>,
    f: impl Fn(&mut Reader<'_>) -> Result<T, OfError>,
) -> Result<Vec<T>, OfError> {
    if fixed.is_some_and(|n| !r.remaining().is_multiple_of(n)) {
        return Err(errors::BAD_REQUEST_BAD_LEN);
    }
    let mut v = Vec::new();
    while !r.is_empty() {
        v.push(f(r)?);
    }
    Ok(v)
}

fn decode_flow_stats(r: &mut Reader<'_>) -> Result<FlowStats, OfError> {
    let len = usize::from(r.peek_u16()?);
    let mut e = r.sub(len, errors::BAD_REQUEST_BAD_LEN)?;
    e.skip(2)?;
    let table_id = e.u8()?;
    e.skip(1)?;
    let matches = fields::decode_match(&mut e)?;
    let duration_sec = e.u32()?;
    let duration_nsec = e.u32()?;
    let priority = e.u16()?;
    let idle_timeout = e.u16()?;
    let hard_timeout = e.u16()?;
    e.skip(6)?;
    let cookie = e.u64()?;
    let packet_count = e.u64()?;
    let byte_count = e.u64()?;
    let actions = fields::decode_actions(&mut e, Some(&matches))?;
    Ok(FlowStats {
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
        matches,
        instructions: if actions.is_empty() {
            vec![]
        } else {
            vec![Instruction::ApplyActions(actions)]
        },
    })
}

fn decode_table_stats(r: &mut Reader<'_>) -> Result<TableStats, OfError> {
    let table_id = r.u8()?;
    r.skip(3 + 32 + 4 + 4)?;
    Ok(TableStats {
        table_id,
        active_count: r.u32()?,
        lookup_count: r.u64()?,
        matched_count: r.u64()?,
    })
}

fn decode_port_stats(r: &mut Reader<'_>) -> Result<PortStats, OfError> {
    let port_no = port_from10(r.u16()?);
    r.skip(6)?;
    let mut c = [0u64; 12];
    for v in &mut c {
        *v = r.u64()?;
    }
    Ok(PortStats {
        port_no,
        rx_packets: c[0],
        tx_packets: c[1],
        rx_bytes: c[2],
        tx_bytes: c[3],
        rx_dropped: c[4],
        tx_dropped: c[5],
        rx_errors: c[6],
        tx_errors: c[7],
        rx_frame_err: c[8],
        rx_over_err: c[9],
        rx_crc_err: c[10],
        collisions: c[11],
        duration_sec: 0,
        duration_nsec: 0,
    })
}

/// Decodes a 1.0 STATS_REPLY (for peers and tests; a switch never receives one).
pub(crate) fn decode_reply(r: &mut Reader<'_>) -> Result<MultipartReply, OfError> {
    use stats_type as t;
    use MultipartReplyBody as B;
    let stype = r.u16()?;
    let flags = r.u16()?;
    let body = match stype {
        t::DESC => B::Desc(Desc::decode(r)?),
        t::FLOW => B::Flow(all(r, None, decode_flow_stats)?),
        t::AGGREGATE => {
            let a = AggregateStats {
                packet_count: r.u64()?,
                byte_count: r.u64()?,
                flow_count: r.u32()?,
            };
            r.skip(4)?;
            finish(r, B::Aggregate(a))?
        }
        t::TABLE => B::Table(all(r, Some(TABLE_STATS_LEN), decode_table_stats)?),
        t::PORT => B::PortStats(all(r, Some(PORT_STATS_LEN), decode_port_stats)?),
        _ => return Err(errors::BAD_REQUEST_BAD_MULTIPART),
    };
    Ok(MultipartReply { flags, body })
}
