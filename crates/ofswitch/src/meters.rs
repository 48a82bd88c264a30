//! Meters on a bridge's OpenFlow endpoint: METER_MOD → the pipeline's meter table, and the
//! METER / METER_CONFIG / METER_FEATURES multipart replies.
//!
//! Threads: a connection's reader thread (through `handler` and `stats`). No lock of its own;
//! the pipeline takes the bridge's table lock.

use openflow::msg::{
    BandAction, MeterBand, MeterConfigEntry, MeterFeatures, MeterMod, MeterModCommand,
    MeterStatsEntry,
};
use openflow::OfError;

use crate::convert::of_error;
use crate::handler::Inner;

/// A decoded METER_MOD → the pipeline's.
pub fn meter_mod_to_pipeline(mm: &MeterMod) -> ofproto::MeterMod {
    ofproto::MeterMod {
        command: match mm.command {
            MeterModCommand::Add => ofproto::MeterCommand::Add,
            MeterModCommand::Modify => ofproto::MeterCommand::Modify,
            MeterModCommand::Delete => ofproto::MeterCommand::Delete,
        },
        meter_id: mm.meter_id,
        flags: mm.flags,
        bands: mm
            .bands
            .iter()
            .map(|b| ofproto::MeterBand {
                kind: match b.action {
                    BandAction::Drop => dpif::BandKind::Drop,
                    BandAction::DscpRemark(p) => dpif::BandKind::DscpRemark(p),
                },
                rate: b.rate,
                burst: b.burst_size,
            })
            .collect(),
    }
}

fn band_to_wire(b: &ofproto::MeterBand) -> MeterBand {
    MeterBand {
        action: match b.kind {
            dpif::BandKind::Drop => BandAction::Drop,
            dpif::BandKind::DscpRemark(p) => BandAction::DscpRemark(p),
        },
        rate: b.rate,
        burst_size: b.burst,
    }
}

/// METER statistics of meter `id` (or `OFPM_ALL`).
pub fn stats(inner: &Inner, id: u32) -> Result<Vec<MeterStatsEntry>, OfError> {
    let v = inner
        .pipeline
        .meter_stats(&inner.bridge, id)
        .map_err(|e| of_error(&e))?;
    Ok(v.into_iter()
        .map(|s| MeterStatsEntry {
            meter_id: s.meter_id,
            flow_count: s.flow_count,
            packet_in_count: s.packets,
            byte_in_count: s.bytes,
            duration_sec: s.duration.as_secs().min(u64::from(u32::MAX)) as u32,
            duration_nsec: s.duration.subsec_nanos(),
            bands: s.bands,
        })
        .collect())
}

/// METER_CONFIG entries of meter `id` (or `OFPM_ALL`).
pub fn configs(inner: &Inner, id: u32) -> Result<Vec<MeterConfigEntry>, OfError> {
    let v = inner
        .pipeline
        .meter_configs(&inner.bridge, id)
        .map_err(|e| of_error(&e))?;
    Ok(v.into_iter()
        .map(|(meter_id, flags, bands)| MeterConfigEntry {
            flags,
            meter_id,
            bands: bands.iter().map(band_to_wire).collect(),
        })
        .collect())
}

/// What the bridge's meters can do.
pub fn features() -> MeterFeatures {
    use openflow::msg::{band_type, meter_flags};
    MeterFeatures {
        max_meter: ofproto::meter::MAX_METERS as u32,
        band_types: 1 << band_type::DROP | 1 << band_type::DSCP_REMARK,
        capabilities: u32::from(meter_flags::ALL),
        max_bands: ofproto::meter::MAX_BANDS as u8,
        max_color: 0,
    }
}
