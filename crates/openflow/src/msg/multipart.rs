//! MULTIPART_REQUEST / MULTIPART_REPLY (OpenFlow 1.3 §7.3.5): desc, flow, aggregate, table,
//! port stats, port desc, group and group desc, and [`MultipartReply::split`] which cuts a
//! large reply into messages chained with the MORE flag. Pure codec; runs on the decoding
//! thread (split runs on whichever thread sends the reply).

use super::{
    finish, GroupDesc, GroupFeatures, GroupStats, MeterConfigEntry, MeterFeatures, MeterStatsEntry,
    Port, TableFeatures, HEADER_LEN, MAX_MSG_LEN, PORT_LEN,
};
use crate::action::{decode_instructions, encode_instructions, Instruction};
use crate::buf::{len_u16, Reader, Writer};
use crate::error::{errors, OfError};
use crate::oxm::Match;

/// `ofp_multipart_type` values.
pub mod multipart_type {
    pub const DESC: u16 = 0;
    pub const FLOW: u16 = 1;
    pub const AGGREGATE: u16 = 2;
    pub const TABLE: u16 = 3;
    pub const PORT_STATS: u16 = 4;
    pub const QUEUE: u16 = 5;
    pub const GROUP: u16 = 6;
    pub const GROUP_DESC: u16 = 7;
    pub const GROUP_FEATURES: u16 = 8;
    pub const METER: u16 = 9;
    pub const METER_CONFIG: u16 = 10;
    pub const METER_FEATURES: u16 = 11;
    pub const TABLE_FEATURES: u16 = 12;
    pub const PORT_DESC: u16 = 13;
}

/// `OFPMPF_REQ_MORE` / `OFPMPF_REPLY_MORE`.
pub const MULTIPART_MORE: u16 = 1;
/// Bytes before a multipart body: the header plus type, flags and padding.
pub const MULTIPART_HEADER_LEN: usize = HEADER_LEN + 8;

/// Body of a FLOW or AGGREGATE request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowStatsRequest {
    /// Table to read, or `OFPTT_ALL`.
    pub table_id: u8,
    pub out_port: u32,
    pub out_group: u32,
    pub cookie: u64,
    pub cookie_mask: u64,
    pub matches: Match,
}

impl Default for FlowStatsRequest {
    fn default() -> Self {
        FlowStatsRequest {
            table_id: 0xff,
            out_port: u32::MAX,
            out_group: u32::MAX,
            cookie: 0,
            cookie_mask: 0,
            matches: Match::default(),
        }
    }
}

impl FlowStatsRequest {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let table_id = r.u8()?;
        r.skip(3)?;
        let out_port = r.u32()?;
        let out_group = r.u32()?;
        r.skip(4)?;
        let cookie = r.u64()?;
        let cookie_mask = r.u64()?;
        let matches = Match::decode(r)?;
        matches.check_prereqs()?;
        finish(
            r,
            FlowStatsRequest {
                table_id,
                out_port,
                out_group,
                cookie,
                cookie_mask,
                matches,
            },
        )
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u8(self.table_id);
        out.pad(3);
        out.put_u32(self.out_port);
        out.put_u32(self.out_group);
        out.pad(4);
        out.put_u64(self.cookie);
        out.put_u64(self.cookie_mask);
        self.matches.encode(out);
    }
}

/// What a MULTIPART_REQUEST asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultipartRequestBody {
    Desc,
    Flow(FlowStatsRequest),
    Aggregate(FlowStatsRequest),
    Table,
    /// Port number or `OFPP_ANY`.
    PortStats(u32),
    PortDesc,
    /// Group id or `OFPG_ALL`.
    Group(u32),
    GroupDesc,
    GroupFeatures,
    /// Queue statistics for (port or `OFPP_ANY`, queue or `OFPQ_ALL`).
    Queue {
        port_no: u32,
        queue_id: u32,
    },
    /// Empty: a query; otherwise the tables' new features.
    TableFeatures(Vec<TableFeatures>),
    /// Meter id or `OFPM_ALL`.
    Meter(u32),
    /// Meter id or `OFPM_ALL`.
    MeterConfig(u32),
    MeterFeatures,
}

/// MULTIPART_REQUEST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartRequest {
    pub flags: u16,
    pub body: MultipartRequestBody,
}

impl MultipartRequest {
    /// A request with no flags.
    pub fn new(body: MultipartRequestBody) -> Self {
        MultipartRequest { flags: 0, body }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        use multipart_type as t;
        use MultipartRequestBody as B;
        let mtype = r.u16()?;
        let flags = r.u16()?;
        r.skip(4)?;
        let body = match mtype {
            t::DESC => finish(r, B::Desc)?,
            t::FLOW => B::Flow(FlowStatsRequest::decode(r)?),
            t::AGGREGATE => B::Aggregate(FlowStatsRequest::decode(r)?),
            t::TABLE => finish(r, B::Table)?,
            t::PORT_STATS | t::GROUP | t::METER | t::METER_CONFIG => {
                let id = r.u32()?;
                r.skip(4)?;
                let b = match mtype {
                    t::GROUP => B::Group(id),
                    t::METER => B::Meter(id),
                    t::METER_CONFIG => B::MeterConfig(id),
                    _ => B::PortStats(id),
                };
                finish(r, b)?
            }
            t::PORT_DESC => finish(r, B::PortDesc)?,
            t::GROUP_DESC => finish(r, B::GroupDesc)?,
            t::GROUP_FEATURES => finish(r, B::GroupFeatures)?,
            t::QUEUE => {
                let port_no = r.u32()?;
                let queue_id = r.u32()?;
                finish(r, B::Queue { port_no, queue_id })?
            }
            t::TABLE_FEATURES => B::TableFeatures(decode_all(r, None, TableFeatures::decode)?),
            t::METER_FEATURES => finish(r, B::MeterFeatures)?,
            _ => return Err(errors::BAD_REQUEST_BAD_MULTIPART),
        };
        Ok(MultipartRequest { flags, body })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        use multipart_type as t;
        use MultipartRequestBody as B;
        let mtype = match &self.body {
            B::Desc => t::DESC,
            B::Flow(_) => t::FLOW,
            B::Aggregate(_) => t::AGGREGATE,
            B::Table => t::TABLE,
            B::PortStats(_) => t::PORT_STATS,
            B::PortDesc => t::PORT_DESC,
            B::Group(_) => t::GROUP,
            B::GroupDesc => t::GROUP_DESC,
            B::GroupFeatures => t::GROUP_FEATURES,
            B::Queue { .. } => t::QUEUE,
            B::TableFeatures(_) => t::TABLE_FEATURES,
            B::Meter(_) => t::METER,
            B::MeterConfig(_) => t::METER_CONFIG,
            B::MeterFeatures => t::METER_FEATURES,
        };
        out.put_u16(mtype);
        out.put_u16(self.flags);
        out.pad(4);
        match &self.body {
            B::Flow(f) | B::Aggregate(f) => f.encode(out),
            B::PortStats(id) | B::Group(id) | B::Meter(id) | B::MeterConfig(id) => {
                out.put_u32(*id);
                out.pad(4);
            }
            B::TableFeatures(v) => v.iter().for_each(|e| e.encode(out)),
            B::Queue { port_no, queue_id } => {
                out.put_u32(*port_no);
                out.put_u32(*queue_id);
            }
            B::Desc
            | B::Table
            | B::PortDesc
            | B::GroupDesc
            | B::GroupFeatures
            | B::MeterFeatures => {}
        }
    }
}

/// `ofp_desc`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Desc {
    pub mfr_desc: String,
    pub hw_desc: String,
    pub sw_desc: String,
    pub serial_num: String,
    pub dp_desc: String,
}

impl Desc {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let d = Desc {
            mfr_desc: r.string(256)?,
            hw_desc: r.string(256)?,
            sw_desc: r.string(256)?,
            serial_num: r.string(32)?,
            dp_desc: r.string(256)?,
        };
        finish(r, d)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_string(&self.mfr_desc, 256);
        out.put_string(&self.hw_desc, 256);
        out.put_string(&self.sw_desc, 256);
        out.put_string(&self.serial_num, 32);
        out.put_string(&self.dp_desc, 256);
    }
}

/// `ofp_flow_stats`: one flow in a FLOW reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowStats {
    pub table_id: u8,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    pub priority: u16,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    pub flags: u16,
    pub cookie: u64,
    pub packet_count: u64,
    pub byte_count: u64,
    pub matches: Match,
    pub instructions: Vec<Instruction>,
}

impl FlowStats {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let len = usize::from(r.peek_u16()?);
        let mut e = r.sub(len, errors::BAD_REQUEST_BAD_LEN)?;
        e.skip(2)?;
        let table_id = e.u8()?;
        e.skip(1)?;
        let duration_sec = e.u32()?;
        let duration_nsec = e.u32()?;
        let priority = e.u16()?;
        let idle_timeout = e.u16()?;
        let hard_timeout = e.u16()?;
        let flags = e.u16()?;
        e.skip(4)?;
        Ok(FlowStats {
            table_id,
            duration_sec,
            duration_nsec,
            priority,
            idle_timeout,
            hard_timeout,
            flags,
            cookie: e.u64()?,
            packet_count: e.u64()?,
            byte_count: e.u64()?,
            matches: Match::decode(&mut e)?,
            instructions: decode_instructions(&mut e)?,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u16(0);
        out.put_u8(self.table_id);
        out.pad(1);
        out.put_u32(self.duration_sec);
        out.put_u32(self.duration_nsec);
        out.put_u16(self.priority);
        out.put_u16(self.idle_timeout);
        out.put_u16(self.hard_timeout);
        out.put_u16(self.flags);
        out.pad(4);
        out.put_u64(self.cookie);
        out.put_u64(self.packet_count);
        out.put_u64(self.byte_count);
        self.matches.encode(out);
        encode_instructions(&self.instructions, out);
        let len = len_u16(out, start);
        out.set_u16(start, len);
    }
}

/// `ofp_aggregate_stats_reply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AggregateStats {
    pub packet_count: u64,
    pub byte_count: u64,
    pub flow_count: u32,
}

/// `ofp_table_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableStats {
    pub table_id: u8,
    pub active_count: u32,
    pub lookup_count: u64,
    pub matched_count: u64,
}

impl TableStats {
    const LEN: usize = 24;

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let table_id = r.u8()?;
        r.skip(3)?;
        Ok(TableStats {
            table_id,
            active_count: r.u32()?,
            lookup_count: r.u64()?,
            matched_count: r.u64()?,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u8(self.table_id);
        out.pad(3);
        out.put_u32(self.active_count);
        out.put_u64(self.lookup_count);
        out.put_u64(self.matched_count);
    }
}

/// `ofp_port_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortStats {
    pub port_no: u32,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    pub rx_frame_err: u64,
    pub rx_over_err: u64,
    pub rx_crc_err: u64,
    pub collisions: u64,
    pub duration_sec: u32,
    pub duration_nsec: u32,
}

impl PortStats {
    const LEN: usize = 112;

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let port_no = r.u32()?;
        r.skip(4)?;
        let mut c = [0u64; 12];
        for v in &mut c {
            *v = r.u64()?;
        }
        let [rx_packets, tx_packets, rx_bytes, tx_bytes, rx_dropped, tx_dropped, rx_errors, tx_errors, rx_frame_err, rx_over_err, rx_crc_err, collisions] =
            c;
        Ok(PortStats {
            port_no,
            rx_packets,
            tx_packets,
            rx_bytes,
            tx_bytes,
            rx_dropped,
            tx_dropped,
            rx_errors,
            tx_errors,
            rx_frame_err,
            rx_over_err,
            rx_crc_err,
            collisions,
            duration_sec: r.u32()?,
            duration_nsec: r.u32()?,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.port_no);
        out.pad(4);
        for v in [
            self.rx_packets,
            self.tx_packets,
            self.rx_bytes,
            self.tx_bytes,
            self.rx_dropped,
            self.tx_dropped,
            self.rx_errors,
            self.tx_errors,
            self.rx_frame_err,
            self.rx_over_err,
            self.rx_crc_err,
            self.collisions,
        ] {
            out.put_u64(v);
        }
        out.put_u32(self.duration_sec);
        out.put_u32(self.duration_nsec);
    }
}

/// What a MULTIPART_REPLY carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultipartReplyBody {
    Desc(Desc),
    Flow(Vec<FlowStats>),
    Aggregate(AggregateStats),
    Table(Vec<TableStats>),
    PortStats(Vec<PortStats>),
    PortDesc(Vec<Port>),
    Group(Vec<GroupStats>),
    GroupDesc(Vec<GroupDesc>),
    GroupFeatures(GroupFeatures),
    /// Queue statistics: always empty (Vireo has no queues; a reply with entries does not
    /// decode).
    Queue,
    TableFeatures(Vec<TableFeatures>),
    Meter(Vec<MeterStatsEntry>),
    MeterConfig(Vec<MeterConfigEntry>),
    MeterFeatures(MeterFeatures),
}

/// MULTIPART_REPLY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartReply {
    /// `MULTIPART_MORE` on every message of a split reply but the last.
    pub flags: u16,
    pub body: MultipartReplyBody,
}

fn decode_all<T>(
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

impl MultipartReply {
    /// A reply with no flags.
    pub fn new(body: MultipartReplyBody) -> Self {
        MultipartReply { flags: 0, body }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        use multipart_type as t;
        use MultipartReplyBody as B;
        let mtype = r.u16()?;
        let flags = r.u16()?;
        r.skip(4)?;
        let body = match mtype {
            t::DESC => B::Desc(Desc::decode(r)?),
            t::FLOW => B::Flow(decode_all(r, None, FlowStats::decode)?),
            t::AGGREGATE => {
                let a = AggregateStats {
                    packet_count: r.u64()?,
                    byte_count: r.u64()?,
                    flow_count: r.u32()?,
                };
                r.skip(4)?;
                finish(r, B::Aggregate(a))?
            }
            t::TABLE => B::Table(decode_all(r, Some(TableStats::LEN), TableStats::decode)?),
            t::PORT_STATS => B::PortStats(decode_all(r, Some(PortStats::LEN), PortStats::decode)?),
            t::PORT_DESC => B::PortDesc(decode_all(r, Some(PORT_LEN), Port::decode)?),
            t::GROUP => B::Group(decode_all(r, None, GroupStats::decode)?),
            t::GROUP_DESC => B::GroupDesc(decode_all(r, None, GroupDesc::decode)?),
            t::GROUP_FEATURES => {
                let f = GroupFeatures::decode(r)?;
                finish(r, B::GroupFeatures(f))?
            }
            t::QUEUE => finish(r, B::Queue)?,
            t::TABLE_FEATURES => B::TableFeatures(decode_all(r, None, TableFeatures::decode)?),
            t::METER => B::Meter(decode_all(r, None, MeterStatsEntry::decode)?),
            t::METER_CONFIG => B::MeterConfig(decode_all(r, None, MeterConfigEntry::decode)?),
            t::METER_FEATURES => {
                let f = MeterFeatures::decode(r)?;
                finish(r, B::MeterFeatures(f))?
            }
            _ => return Err(errors::BAD_REQUEST_BAD_MULTIPART),
        };
        Ok(MultipartReply { flags, body })
    }

    fn mtype(&self) -> u16 {
        use multipart_type as t;
        use MultipartReplyBody as B;
        match &self.body {
            B::Desc(_) => t::DESC,
            B::Flow(_) => t::FLOW,
            B::Aggregate(_) => t::AGGREGATE,
            B::Table(_) => t::TABLE,
            B::PortStats(_) => t::PORT_STATS,
            B::PortDesc(_) => t::PORT_DESC,
            B::Group(_) => t::GROUP,
            B::GroupDesc(_) => t::GROUP_DESC,
            B::GroupFeatures(_) => t::GROUP_FEATURES,
            B::Queue => t::QUEUE,
            B::TableFeatures(_) => t::TABLE_FEATURES,
            B::Meter(_) => t::METER,
            B::MeterConfig(_) => t::METER_CONFIG,
            B::MeterFeatures(_) => t::METER_FEATURES,
        }
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        use MultipartReplyBody as B;
        out.put_u16(self.mtype());
        out.put_u16(self.flags);
        out.pad(4);
        match &self.body {
            B::Desc(d) => d.encode(out),
            B::Flow(v) => v.iter().for_each(|e| e.encode(out)),
            B::Aggregate(a) => {
                out.put_u64(a.packet_count);
                out.put_u64(a.byte_count);
                out.put_u32(a.flow_count);
                out.pad(4);
            }
            B::Table(v) => v.iter().for_each(|e| e.encode(out)),
            B::PortStats(v) => v.iter().for_each(|e| e.encode(out)),
            B::PortDesc(v) => v.iter().for_each(|e| e.encode(out)),
            B::Group(v) => v.iter().for_each(|e| e.encode(out)),
            B::GroupDesc(v) => v.iter().for_each(|e| e.encode(out)),
            B::TableFeatures(v) => v.iter().for_each(|e| e.encode(out)),
            B::Meter(v) => v.iter().for_each(|e| e.encode(out)),
            B::MeterConfig(v) => v.iter().for_each(|e| e.encode(out)),
            B::MeterFeatures(f) => f.encode(out),
            B::GroupFeatures(f) => f.encode(out),
            B::Queue => {}
        }
    }

    /// Cuts this reply into replies whose encoded size is at most `max_len` (at most
    /// 65535), each but the last flagged `MULTIPART_MORE`. Single-object bodies (desc,
    /// aggregate) come back unchanged. An entry too large for any message on its own is
    /// sent alone (its encode then fails, which the sender reports).
    pub fn split(self, max_len: usize) -> Vec<MultipartReply> {
        use MultipartReplyBody as B;
        let budget = max_len.clamp(MULTIPART_HEADER_LEN + 1, MAX_MSG_LEN) - MULTIPART_HEADER_LEN;
        let parts: Vec<B> = match self.body {
            B::Flow(v) => chunk(v, budget, FlowStats::encode)
                .into_iter()
                .map(B::Flow)
                .collect(),
            B::Table(v) => chunk(v, budget, TableStats::encode)
                .into_iter()
                .map(B::Table)
                .collect(),
            B::PortStats(v) => chunk(v, budget, PortStats::encode)
                .into_iter()
                .map(B::PortStats)
                .collect(),
            B::PortDesc(v) => chunk(v, budget, Port::encode)
                .into_iter()
                .map(B::PortDesc)
                .collect(),
            B::Group(v) => chunk(v, budget, GroupStats::encode)
                .into_iter()
                .map(B::Group)
                .collect(),
            B::GroupDesc(v) => chunk(v, budget, GroupDesc::encode)
                .into_iter()
                .map(B::GroupDesc)
                .collect(),
            B::TableFeatures(v) => chunk(v, budget, TableFeatures::encode)
                .into_iter()
                .map(B::TableFeatures)
                .collect(),
            B::Meter(v) => chunk(v, budget, MeterStatsEntry::encode)
                .into_iter()
                .map(B::Meter)
                .collect(),
            B::MeterConfig(v) => chunk(v, budget, MeterConfigEntry::encode)
                .into_iter()
                .map(B::MeterConfig)
                .collect(),
            body @ (B::Desc(_)
            | B::Aggregate(_)
            | B::MeterFeatures(_)
            | B::GroupFeatures(_)
            | B::Queue) => vec![body],
        };
        let n = parts.len();
        parts
            .into_iter()
            .enumerate()
            .map(|(i, body)| {
                let more = if i + 1 < n { MULTIPART_MORE } else { 0 };
                MultipartReply {
                    flags: (self.flags & !MULTIPART_MORE) | more,
                    body,
                }
            })
            .collect()
    }
}

/// Greedily packs entries into groups whose encoded size stays within `budget`.
fn chunk<T>(items: Vec<T>, budget: usize, enc: fn(&T, &mut Vec<u8>)) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = vec![Vec::new()];
    let mut used = 0usize;
    let mut scratch = Vec::new();
    for item in items {
        scratch.clear();
        enc(&item, &mut scratch);
        let size = scratch.len();
        let cur_len = out.last().map_or(0, Vec::len);
        if used + size > budget && cur_len > 0 {
            out.push(Vec::new());
            used = 0;
        }
        used += size;
        if let Some(last) = out.last_mut() {
            last.push(item);
        }
    }
    out
}
