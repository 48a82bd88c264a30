//! Multipart (statistics) replies of one bridge: DESC, FLOW, AGGREGATE, TABLE, TABLE_FEATURES,
//! PORT_STATS, PORT_DESC, GROUP, GROUP_DESC, GROUP_FEATURES and QUEUE (always empty: no
//! port has queues), all read from the pipeline (flows, groups,
//! ports) and the datapath hooks (port counters and link state) — no state of its own.
//!
//! Threads: the requesting connection's reader thread. Takes no lock of its own.

use std::time::Duration;

use openflow::msg::*;
use openflow::{errors, OfError};

use crate::convert::{self, of_error};
use crate::handler::{Inner, N_TABLES};
use crate::PortReport;

fn reply(body: MultipartReplyBody) -> Result<Vec<Message>, OfError> {
    Ok(vec![Message::MultipartReply(MultipartReply::new(body))])
}

fn secs_nsecs(d: Duration) -> (u32, u32) {
    (
        d.as_secs().min(u64::from(u32::MAX)) as u32,
        d.subsec_nanos(),
    )
}

/// Answers a multipart request.
pub(crate) fn reply_to(inner: &Inner, req: &MultipartRequest) -> Result<Vec<Message>, OfError> {
    use MultipartRequestBody as Q;
    match &req.body {
        Q::Desc => reply(MultipartReplyBody::Desc(Desc {
            mfr_desc: "Vireo project".into(),
            hw_desc: "Vireo userspace switch".into(),
            sw_desc: format!("vireo {}", env!("CARGO_PKG_VERSION")),
            serial_num: "None".into(),
            dp_desc: inner.bridge.clone(),
        })),
        Q::Flow(r) => reply(MultipartReplyBody::Flow(flows(inner, r)?)),
        Q::Aggregate(r) => {
            let f = flows(inner, r)?;
            reply(MultipartReplyBody::Aggregate(AggregateStats {
                packet_count: f.iter().map(|s| s.packet_count).sum(),
                byte_count: f.iter().map(|s| s.byte_count).sum(),
                flow_count: f.len() as u32,
            }))
        }
        Q::Table => reply(MultipartReplyBody::Table(tables(inner)?)),
        Q::TableFeatures(_) => {
            let probe = crate::features::Probe::new();
            reply(MultipartReplyBody::TableFeatures(
                (0..N_TABLES)
                    .map(|t| crate::features::table_features(&probe, t, N_TABLES, 1_000_000))
                    .collect(),
            ))
        }
        Q::PortStats(port) => reply(MultipartReplyBody::PortStats(port_stats(inner, *port)?)),
        Q::PortDesc => reply(MultipartReplyBody::PortDesc(
            ports(inner)?.iter().map(|p| port_desc(inner, p)).collect(),
        )),
        Q::Group(id) => reply(MultipartReplyBody::Group(groups(inner, *id)?)),
        Q::Meter(id) => reply(MultipartReplyBody::Meter(crate::meters::stats(inner, *id)?)),
        Q::MeterConfig(id) => reply(MultipartReplyBody::MeterConfig(crate::meters::configs(
            inner, *id,
        )?)),
        Q::MeterFeatures => reply(MultipartReplyBody::MeterFeatures(crate::meters::features())),
        Q::GroupFeatures => reply(MultipartReplyBody::GroupFeatures(group_features())),
        Q::Queue { port_no, queue_id } => {
            check_queue_port(inner, *port_no)?;
            if *queue_id != QUEUE_ALL {
                // No port has a queue.
                return Err(errors::QUEUE_OP_FAILED_BAD_QUEUE);
            }
            reply(MultipartReplyBody::Queue)
        }
        Q::GroupDesc => {
            let d = inner
                .pipeline
                .group_descs(&inner.bridge)
                .map_err(|e| of_error(&e))?;
            reply(MultipartReplyBody::GroupDesc(
                d.iter().map(convert::group_desc_to_wire).collect(),
            ))
        }
    }
}

/// `OFPQ_ALL`.
pub(crate) const QUEUE_ALL: u32 = 0xffff_ffff;

/// A queue request names `OFPP_ANY` or a port of the bridge; anything else is
/// `OFPQOFC_BAD_PORT`.
pub(crate) fn check_queue_port(inner: &Inner, port_no: u32) -> Result<(), OfError> {
    if port_no == port_no::ANY {
        return Ok(());
    }
    let ports = inner
        .pipeline
        .ports(&inner.bridge)
        .map_err(|e| of_error(&e))?;
    if ports.iter().any(|p| p.ofport == port_no) {
        Ok(())
    } else {
        Err(errors::QUEUE_OP_FAILED_BAD_PORT)
    }
}

/// What the pipeline's groups do (`crates/ofproto/src/group.rs`, `xlate.rs`): the four
/// types; select weighs buckets and skips dead ones; chaining with loop and reference checks;
/// buckets hold output, push/pop VLAN, set-field and group actions. The group limit is per
/// bridge, across all types.
pub fn group_features() -> GroupFeatures {
    use group_capabilities as c;
    let max = ofproto::group::MAX_GROUPS as u32;
    // `1 << ofp_action_type`: OUTPUT 0, PUSH_VLAN 17, POP_VLAN 18, GROUP 22, SET_FIELD 25.
    let actions = 1 | 1 << 17 | 1 << 18 | 1 << 22 | 1 << 25;
    GroupFeatures {
        types: 0b1111,
        capabilities: c::SELECT_WEIGHT | c::SELECT_LIVENESS | c::CHAINING | c::CHAINING_CHECKS,
        max_groups: [max; 4],
        actions: [actions; 4],
    }
}

fn tables(inner: &Inner) -> Result<Vec<TableStats>, OfError> {
    let counts = inner
        .pipeline
        .table_counts(&inner.bridge)
        .map_err(|e| of_error(&e))?;
    Ok(counts
        .iter()
        .enumerate()
        .map(|(i, n)| TableStats {
            table_id: i as u8,
            active_count: *n as u32,
            lookup_count: 0,
            matched_count: 0,
        })
        .collect())
}

fn flows(inner: &Inner, r: &FlowStatsRequest) -> Result<Vec<FlowStats>, OfError> {
    // Every table id is valid: 0..=254 are tables, 255 is OFPTT_ALL.
    let filter = convert::stats_filter(r)?;
    let stats = inner
        .pipeline
        .flow_stats(&inner.bridge, &filter)
        .map_err(|e| of_error(&e))?;
    Ok(stats
        .iter()
        .map(|s| {
            let (duration_sec, duration_nsec) = secs_nsecs(s.duration);
            FlowStats {
                table_id: s.table_id,
                duration_sec,
                duration_nsec,
                priority: s.priority,
                idle_timeout: s.idle_timeout,
                hard_timeout: s.hard_timeout,
                flags: s.flags,
                cookie: s.cookie,
                packet_count: s.packet_count,
                byte_count: s.byte_count,
                matches: convert::match_to_wire(&s.match_),
                instructions: convert::instructions_to_wire(&s.instructions),
            }
        })
        .collect())
}

/// The bridge's ports (from the pipeline), with counters and link state from the hooks where
/// they report the port (matched by OpenFlow number, then by name).
pub(crate) fn ports(inner: &Inner) -> Result<Vec<PortReport>, OfError> {
    let cfg = inner
        .pipeline
        .ports(&inner.bridge)
        .map_err(|e| of_error(&e))?;
    let reports = inner.hooks.port_stats(&inner.bridge);
    Ok(cfg
        .iter()
        .map(|p| {
            reports
                .iter()
                .find(|r| r.ofport == p.ofport || r.name == p.name)
                .cloned()
                .map(|r| PortReport {
                    ofport: p.ofport,
                    name: p.name.clone(),
                    dp_port: p.dp_port,
                    ..r
                })
                .unwrap_or_else(|| PortReport::new(p.ofport, &p.name, p.dp_port))
        })
        .collect())
}

fn port_stats(inner: &Inner, port: u32) -> Result<Vec<PortStats>, OfError> {
    let all = ports(inner)?;
    if port != port_no::ANY && !all.iter().any(|p| p.ofport == port) {
        return Err(errors::BAD_REQUEST_BAD_PORT);
    }
    Ok(all
        .iter()
        .filter(|p| port == port_no::ANY || p.ofport == port)
        .map(|p| PortStats {
            port_no: p.ofport,
            rx_packets: p.rx_packets,
            tx_packets: p.tx_packets,
            rx_bytes: p.rx_bytes,
            tx_bytes: p.tx_bytes,
            rx_dropped: p.rx_dropped,
            tx_dropped: p.tx_dropped,
            rx_errors: p.rx_errors,
            tx_errors: p.tx_errors,
            ..Default::default()
        })
        .collect())
}

/// `ofp_port_state` LINK_DOWN / LIVE.
const STATE_LINK_DOWN: u32 = 1;
const STATE_LIVE: u32 = 4;
/// `ofp_port_features` 10GB_FD | COPPER.
const FEATURES: u32 = (1 << 6) | (1 << 11);

/// A port report as an `ofp_port`.
/// A port's description; `config` carries the PORT_MOD bits the pipeline applies.
pub(crate) fn port_desc(inner: &Inner, p: &PortReport) -> Port {
    let mut hw_addr = p.hw_addr.unwrap_or([0; 6]);
    if p.hw_addr.is_none() {
        // A stable locally administered address derived from the port number.
        hw_addr = [0x02, 0x76, 0x69, 0, (p.ofport >> 8) as u8, p.ofport as u8];
    }
    Port {
        port_no: p.ofport,
        hw_addr,
        name: p.name.chars().take(15).collect(),
        config: inner.pipeline.port_of_config(&inner.bridge, p.ofport),
        state: if p.link_up {
            STATE_LIVE
        } else {
            STATE_LINK_DOWN
        },
        curr: FEATURES,
        advertised: 0,
        supported: 0,
        peer: 0,
        curr_speed: 10_000_000,
        max_speed: 10_000_000,
    }
}

fn groups(inner: &Inner, id: u32) -> Result<Vec<GroupStats>, OfError> {
    let g = inner
        .pipeline
        .group_stats(&inner.bridge, id)
        .map_err(|e| of_error(&e))?;
    Ok(g.iter()
        .map(|s| {
            let (duration_sec, duration_nsec) = secs_nsecs(s.duration);
            GroupStats {
                group_id: s.group_id,
                ref_count: s.ref_count,
                packet_count: s.packet_count,
                byte_count: s.byte_count,
                duration_sec,
                duration_nsec,
                bucket_stats: s.bucket_stats.clone(),
            }
        })
        .collect())
}
