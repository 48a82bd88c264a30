//! Meters (OpenFlow 1.3 §7.3.4.4, §7.3.5.12-14): METER_MOD with its bands, and the entries of
//! the METER, METER_CONFIG and METER_FEATURES multipart replies. 1.4 and 1.5 use the same
//! layouts (OVS 3.1's decoder reads 1.5's features entry as the 16-byte 1.3 one too). Pure codec; runs on the decoding thread.
//! Syntax is checked here (command, flags, ids, band types and lengths, zero rates);
//! whether a meter exists is the pipeline's business.

use crate::buf::{len_u16, Reader, Writer};
use crate::error::{errors, OfError};

/// METER_MOD message type (1.3, 1.4, 1.5).
pub const METER_MOD_TYPE: u8 = 29;
/// Largest meter id a flow or meter-mod may name (`OFPM_MAX`).
pub const METER_MAX: u32 = 0xffff_0000;
/// `OFPM_SLOWPATH`: the meter for packets sent to the slow path.
pub const METER_SLOWPATH: u32 = 0xffff_fffd;
/// `OFPM_CONTROLLER`: the meter for packet-ins.
pub const METER_CONTROLLER: u32 = 0xffff_fffe;
/// `OFPM_ALL`: every meter (delete, statistics).
pub const METER_ALL: u32 = 0xffff_ffff;

/// `ofp_meter_flags`.
pub mod meter_flags {
    pub const KBPS: u16 = 1;
    pub const PKTPS: u16 = 2;
    pub const BURST: u16 = 4;
    pub const STATS: u16 = 8;
    pub const ALL: u16 = KBPS | PKTPS | BURST | STATS;
}

/// `ofp_meter_band_type` values.
pub mod band_type {
    pub const DROP: u16 = 1;
    pub const DSCP_REMARK: u16 = 2;
    pub const EXPERIMENTER: u16 = 0xffff;
}

/// `ofp_meter_mod_command`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MeterModCommand {
    Add,
    Modify,
    Delete,
}

/// What a band does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BandAction {
    Drop,
    /// Raise the DSCP drop precedence by this many levels.
    DscpRemark(u8),
}

/// `ofp_meter_band_header` with its type's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MeterBand {
    pub action: BandAction,
    /// kbps or packets per second, per the meter's flags.
    pub rate: u32,
    /// kilobits or packets; used when the meter has the BURST flag.
    pub burst_size: u32,
}

/// Size of every band Vireo speaks.
const BAND_LEN: usize = 16;

impl MeterBand {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let btype = r.u16().map_err(|_| errors::METER_MOD_FAILED_BAD_BAND)?;
        let len = usize::from(r.u16().map_err(|_| errors::METER_MOD_FAILED_BAD_BAND)?);
        if len < BAND_LEN || len % 8 != 0 || len - 4 > r.remaining() {
            return Err(errors::BAD_REQUEST_BAD_LEN);
        }
        let mut b = r.sub(len - 4, errors::BAD_REQUEST_BAD_LEN)?;
        let rate = b.u32()?;
        let burst_size = b.u32()?;
        let action = match btype {
            band_type::DROP => BandAction::Drop,
            band_type::DSCP_REMARK => BandAction::DscpRemark(b.u8()?),
            _ => return Err(errors::METER_MOD_FAILED_BAD_BAND),
        };
        if len != BAND_LEN {
            return Err(errors::BAD_REQUEST_BAD_LEN);
        }
        if rate == 0 {
            return Err(errors::METER_MOD_FAILED_BAD_RATE);
        }
        Ok(MeterBand {
            action,
            rate,
            burst_size,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let (t, prec) = match self.action {
            BandAction::Drop => (band_type::DROP, 0),
            BandAction::DscpRemark(p) => (band_type::DSCP_REMARK, p),
        };
        out.put_u16(t);
        out.put_u16(BAND_LEN as u16);
        out.put_u32(self.rate);
        out.put_u32(self.burst_size);
        out.put_u8(prec);
        out.pad(3);
    }
}

fn decode_bands(r: &mut Reader<'_>) -> Result<Vec<MeterBand>, OfError> {
    let mut v = Vec::new();
    while !r.is_empty() {
        v.push(MeterBand::decode(r)?);
    }
    Ok(v)
}

/// Checks a meter's flags: only known bits, and not both KBPS and PKTPS.
fn check_flags(flags: u16) -> Result<(), OfError> {
    use meter_flags as f;
    if flags & !f::ALL != 0 || flags & (f::KBPS | f::PKTPS) == f::KBPS | f::PKTPS {
        return Err(errors::METER_MOD_FAILED_BAD_FLAGS);
    }
    Ok(())
}

/// Whether `id` names one meter a meter-mod may add or modify (1..=OFPM_MAX, or the
/// controller and slow-path meters).
pub fn meter_id_valid(id: u32) -> bool {
    (1..=METER_MAX).contains(&id) || id == METER_CONTROLLER || id == METER_SLOWPATH
}

/// METER_MOD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterMod {
    pub command: MeterModCommand,
    pub flags: u16,
    pub meter_id: u32,
    pub bands: Vec<MeterBand>,
}

impl MeterMod {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let command = match r.u16()? {
            0 => MeterModCommand::Add,
            1 => MeterModCommand::Modify,
            2 => MeterModCommand::Delete,
            _ => return Err(errors::METER_MOD_FAILED_BAD_COMMAND),
        };
        let flags = r.u16()?;
        let meter_id = r.u32()?;
        let bands = decode_bands(r)?;
        if command == MeterModCommand::Delete {
            if meter_id != METER_ALL && !meter_id_valid(meter_id) {
                return Err(errors::METER_MOD_FAILED_INVALID_METER);
            }
        } else {
            check_flags(flags)?;
            if !meter_id_valid(meter_id) {
                return Err(errors::METER_MOD_FAILED_INVALID_METER);
            }
            if bands.is_empty() {
                return Err(errors::METER_MOD_FAILED_INVALID_METER);
            }
        }
        Ok(MeterMod {
            command,
            flags,
            meter_id,
            bands,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(match self.command {
            MeterModCommand::Add => 0,
            MeterModCommand::Modify => 1,
            MeterModCommand::Delete => 2,
        });
        out.put_u16(self.flags);
        out.put_u32(self.meter_id);
        self.bands.iter().for_each(|b| b.encode(out));
    }
}

/// `ofp_meter_config`: one entry of a METER_CONFIG reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterConfigEntry {
    pub flags: u16,
    pub meter_id: u32,
    pub bands: Vec<MeterBand>,
}

impl MeterConfigEntry {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let len = usize::from(r.peek_u16()?);
        if len < 8 {
            return Err(errors::BAD_REQUEST_BAD_LEN);
        }
        let mut e = r.sub(len, errors::BAD_REQUEST_BAD_LEN)?;
        e.skip(2)?;
        let flags = e.u16()?;
        let meter_id = e.u32()?;
        let bands = decode_bands(&mut e)?;
        Ok(MeterConfigEntry {
            flags,
            meter_id,
            bands,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.put_u16(0);
        out.put_u16(self.flags);
        out.put_u32(self.meter_id);
        self.bands.iter().for_each(|b| b.encode(out));
        let len = len_u16(out, start);
        out.set_u16(start, len);
    }
}

/// `ofp_meter_stats`: one entry of a METER reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MeterStatsEntry {
    pub meter_id: u32,
    pub flow_count: u32,
    pub packet_in_count: u64,
    pub byte_in_count: u64,
    pub duration_sec: u32,
    pub duration_nsec: u32,
    /// (packet_band_count, byte_band_count) per band.
    pub bands: Vec<(u64, u64)>,
}

impl MeterStatsEntry {
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let meter_id = r.u32()?;
        let len = usize::from(r.u16()?);
        if len < 40 || (len - 40) % 16 != 0 || len - 6 > r.remaining() {
            return Err(errors::BAD_REQUEST_BAD_LEN);
        }
        let mut e = r.sub(len - 6, errors::BAD_REQUEST_BAD_LEN)?;
        e.skip(6)?;
        let flow_count = e.u32()?;
        let packet_in_count = e.u64()?;
        let byte_in_count = e.u64()?;
        let duration_sec = e.u32()?;
        let duration_nsec = e.u32()?;
        let mut bands = Vec::new();
        while !e.is_empty() {
            bands.push((e.u64()?, e.u64()?));
        }
        Ok(MeterStatsEntry {
            meter_id,
            flow_count,
            packet_in_count,
            byte_in_count,
            duration_sec,
            duration_nsec,
            bands,
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.meter_id);
        out.put_u16((40 + 16 * self.bands.len()).min(0xfff0) as u16);
        out.pad(6);
        out.put_u32(self.flow_count);
        out.put_u64(self.packet_in_count);
        out.put_u64(self.byte_in_count);
        out.put_u32(self.duration_sec);
        out.put_u32(self.duration_nsec);
        for (p, b) in &self.bands {
            out.put_u64(*p);
            out.put_u64(*b);
        }
    }
}

/// `ofp_meter_features`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MeterFeatures {
    pub max_meter: u32,
    /// Bitmap of `1 << band_type`.
    pub band_types: u32,
    /// Bitmap of `ofp_meter_flags`.
    pub capabilities: u32,
    pub max_bands: u8,
    pub max_color: u8,
}

impl MeterFeatures {
    /// Size on the wire.
    pub const LEN: usize = 16;

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, OfError> {
        let f = MeterFeatures {
            max_meter: r.u32()?,
            band_types: r.u32()?,
            capabilities: r.u32()?,
            max_bands: r.u8()?,
            max_color: r.u8()?,
        };
        r.skip(2)?;
        Ok(f)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.max_meter);
        out.put_u32(self.band_types);
        out.put_u32(self.capabilities);
        out.put_u8(self.max_bands);
        out.put_u8(self.max_color);
        out.pad(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mm(command: u16, flags: u16, id: u32, bands: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.put_u16(command);
        v.put_u16(flags);
        v.put_u32(id);
        v.extend_from_slice(bands);
        v
    }

    fn band(t: u16, len: u16, rate: u32, burst: u32) -> Vec<u8> {
        let mut v = Vec::new();
        v.put_u16(t);
        v.put_u16(len);
        v.put_u32(rate);
        v.put_u32(burst);
        v.resize(usize::from(len.max(12)), 0);
        v
    }

    fn dec(b: &[u8]) -> Result<MeterMod, OfError> {
        MeterMod::decode(&mut Reader::new(b, errors::BAD_REQUEST_BAD_LEN))
    }

    #[test]
    fn round_trip() {
        let m = MeterMod {
            command: MeterModCommand::Modify,
            flags: meter_flags::PKTPS | meter_flags::BURST | meter_flags::STATS,
            meter_id: 7,
            bands: vec![
                MeterBand {
                    action: BandAction::Drop,
                    rate: 1000,
                    burst_size: 10,
                },
                MeterBand {
                    action: BandAction::DscpRemark(2),
                    rate: 500,
                    burst_size: 0,
                },
            ],
        };
        let mut out = Vec::new();
        m.encode(&mut out);
        assert_eq!(dec(&out), Ok(m));
    }

    #[test]
    fn bad_meter_mods_get_the_spec_errors() {
        let drop = band(band_type::DROP, 16, 100, 0);
        let e = errors::METER_MOD_FAILED_INVALID_METER;
        assert_eq!(dec(&mm(0, 2, 1, &[])), Err(e), "no bands");
        assert_eq!(dec(&mm(0, 2, 0, &drop)), Err(e), "id 0");
        assert_eq!(
            dec(&mm(0, 2, METER_MAX + 1, &drop)),
            Err(e),
            "id out of range"
        );
        assert_eq!(dec(&mm(0, 2, METER_ALL, &drop)), Err(e), "add ALL");
        assert!(dec(&mm(0, 2, METER_CONTROLLER, &drop)).is_ok());
        assert!(dec(&mm(2, 0, METER_ALL, &[])).is_ok(), "delete all");
        assert_eq!(
            dec(&mm(3, 2, 1, &drop)),
            Err(errors::METER_MOD_FAILED_BAD_COMMAND)
        );
        assert_eq!(
            dec(&mm(0, 3, 1, &drop)),
            Err(errors::METER_MOD_FAILED_BAD_FLAGS)
        );
        assert_eq!(
            dec(&mm(0, 0x12, 1, &drop)),
            Err(errors::METER_MOD_FAILED_BAD_FLAGS)
        );
        assert_eq!(
            dec(&mm(0, 2, 1, &band(band_type::DROP, 16, 0, 0))),
            Err(errors::METER_MOD_FAILED_BAD_RATE)
        );
        assert_eq!(
            dec(&mm(0, 2, 1, &band(3, 16, 10, 0))),
            Err(errors::METER_MOD_FAILED_BAD_BAND)
        );
        assert_eq!(
            dec(&mm(0, 2, 1, &band(band_type::EXPERIMENTER, 16, 10, 0))),
            Err(errors::METER_MOD_FAILED_BAD_BAND)
        );
        assert_eq!(
            dec(&mm(0, 2, 1, &band(band_type::DROP, 12, 10, 0))),
            Err(errors::BAD_REQUEST_BAD_LEN)
        );
        assert_eq!(
            dec(&mm(0, 2, 1, &drop[..10])),
            Err(errors::BAD_REQUEST_BAD_LEN)
        );
    }

    #[test]
    fn stats_and_config_round_trip() {
        let s = MeterStatsEntry {
            meter_id: 3,
            flow_count: 2,
            packet_in_count: 100,
            byte_in_count: 6400,
            duration_sec: 5,
            duration_nsec: 6,
            bands: vec![(10, 640)],
        };
        let mut out = Vec::new();
        s.encode(&mut out);
        assert_eq!(out.len(), 56);
        let mut r = Reader::new(&out, errors::BAD_REQUEST_BAD_LEN);
        assert_eq!(MeterStatsEntry::decode(&mut r), Ok(s));
        let c = MeterConfigEntry {
            flags: meter_flags::KBPS,
            meter_id: 9,
            bands: vec![MeterBand {
                action: BandAction::Drop,
                rate: 10_000,
                burst_size: 0,
            }],
        };
        let mut out = Vec::new();
        c.encode(&mut out);
        assert_eq!(out.len(), 24);
        let mut r = Reader::new(&out, errors::BAD_REQUEST_BAD_LEN);
        assert_eq!(MeterConfigEntry::decode(&mut r), Ok(c));
    }
}
