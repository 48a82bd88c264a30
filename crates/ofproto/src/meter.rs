//! One bridge's OpenFlow meters: the meter table, METER_MOD semantics (add, modify, delete,
//! `OFPM_ALL`) and the per-meter configuration and statistics the multipart replies need.
//! The token buckets themselves are `dpif::Meter`s: a rule's meter instruction translates to a
//! `dpif::Action::Meter` carrying the bucket, so metered megaflows stay in the datapath.
//!
//! Owns: [`MeterTable`]. Threads: the control thread mutates it under the bridge's table
//! write lock (it lives in `FlowTables`, beside the rules that name meters, so a flow-mod and
//! a meter delete cannot race); PMD threads read it under the read lock during upcalls and
//! packet-ins.

use crate::types::OfError;
use dpif::meter::Meter;
use dpif::{BandConfig, BandKind, MeterConfig};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// Largest meter id a rule or meter-mod may name (`OFPM_MAX`).
pub const METER_MAX: u32 = 0xffff_0000;
/// The meter applied to packets sent to the slow path (`OFPM_SLOWPATH`): upcalls, see
/// [`crate::Pipeline::slowpath_allows`].
pub const METER_SLOWPATH: u32 = 0xffff_fffd;
/// The meter applied to packet-ins (`OFPM_CONTROLLER`).
pub const METER_CONTROLLER: u32 = 0xffff_fffe;
/// Every meter (`OFPM_ALL`).
pub const METER_ALL: u32 = 0xffff_ffff;
/// Meters per bridge.
pub const MAX_METERS: usize = 65_536;
/// Bands per meter.
pub const MAX_BANDS: usize = 8;

/// `ofp_meter_flags` bits.
pub mod meter_flags {
    #![allow(missing_docs)]
    pub const KBPS: u16 = 1;
    pub const PKTPS: u16 = 2;
    pub const BURST: u16 = 4;
    pub const STATS: u16 = 8;
}

/// METER_MOD command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MeterCommand {
    /// OFPMC_ADD.
    Add,
    /// OFPMC_MODIFY.
    Modify,
    /// OFPMC_DELETE.
    Delete,
}

/// One band as OpenFlow states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MeterBand {
    /// Drop or DSCP remark.
    pub kind: BandKind,
    /// kbps, or packets per second with the PKTPS flag.
    pub rate: u32,
    /// kilobits or packets; ignored without the BURST flag.
    pub burst: u32,
}

/// A METER_MOD as the pipeline takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeterMod {
    /// What to do.
    pub command: MeterCommand,
    /// Meter id (or `OFPM_ALL` for a delete).
    pub meter_id: u32,
    /// `ofp_meter_flags`.
    pub flags: u16,
    /// Bands (empty for a delete).
    pub bands: Vec<MeterBand>,
}

/// A meter in the table.
pub struct MeterEntry {
    /// `ofp_meter_flags` as configured.
    pub flags: u16,
    /// Bands as configured.
    pub bands: Vec<MeterBand>,
    /// The datapath's buckets and counters.
    pub meter: Arc<Meter>,
    /// When it was added.
    pub created: Instant,
}

/// A METER multipart entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeterStatsEntry {
    /// Meter id.
    pub meter_id: u32,
    /// Rules whose instructions name the meter.
    pub flow_count: u32,
    /// Packets in.
    pub packets: u64,
    /// Bytes in.
    pub bytes: u64,
    /// Since the meter was added.
    pub duration: std::time::Duration,
    /// (packets, bytes) per band.
    pub bands: Vec<(u64, u64)>,
}

/// A bridge's meters by id.
#[derive(Default)]
pub struct MeterTable {
    meters: BTreeMap<u32, MeterEntry>,
}

fn id_valid(id: u32) -> bool {
    (1..=METER_MAX).contains(&id) || id == METER_CONTROLLER || id == METER_SLOWPATH
}

fn dp_config(flags: u16, bands: &[MeterBand]) -> MeterConfig {
    let burst = flags & meter_flags::BURST != 0;
    MeterConfig {
        pktps: flags & meter_flags::PKTPS != 0,
        bands: bands
            .iter()
            .map(|b| BandConfig {
                kind: b.kind,
                rate: b.rate,
                burst: if burst { b.burst } else { 0 },
            })
            .collect(),
    }
}

impl MeterTable {
    /// The meter `id`, if it exists.
    pub fn get(&self, id: u32) -> Option<&MeterEntry> {
        self.meters.get(&id)
    }

    /// Number of meters.
    pub fn len(&self) -> usize {
        self.meters.len()
    }

    /// True if there is no meter.
    pub fn is_empty(&self) -> bool {
        self.meters.is_empty()
    }

    /// Every meter, by id.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &MeterEntry)> {
        self.meters.iter().map(|(k, v)| (*k, v))
    }

    /// Checks an add or modify without applying it.
    pub(crate) fn check(mm: &MeterMod) -> Result<(), OfError> {
        if !id_valid(mm.meter_id) {
            return Err(OfError::InvalidMeter(mm.meter_id));
        }
        if mm.bands.is_empty() {
            return Err(OfError::InvalidMeter(mm.meter_id));
        }
        if mm.bands.len() > MAX_BANDS {
            return Err(OfError::OutOfBands);
        }
        if mm.flags & (meter_flags::KBPS | meter_flags::PKTPS)
            == meter_flags::KBPS | meter_flags::PKTPS
            || mm.flags & !0xf != 0
        {
            return Err(OfError::BadMeterFlags);
        }
        if mm.bands.iter().any(|b| b.rate == 0) {
            return Err(OfError::BadRate);
        }
        Ok(())
    }

    /// Applies an add or modify (a delete goes through [`MeterTable::remove`], which the
    /// caller pairs with removing the rules that use the meters). Nothing changes on error.
    pub fn apply(&mut self, mm: MeterMod, now: Instant) -> Result<(), OfError> {
        Self::check(&mm)?;
        let config = dp_config(mm.flags, &mm.bands);
        match mm.command {
            MeterCommand::Add => {
                if self.meters.contains_key(&mm.meter_id) {
                    return Err(OfError::MeterExists(mm.meter_id));
                }
                if self.meters.len() >= MAX_METERS {
                    return Err(OfError::OutOfMeters);
                }
                self.meters.insert(
                    mm.meter_id,
                    MeterEntry {
                        flags: mm.flags,
                        bands: mm.bands,
                        meter: Arc::new(Meter::new(mm.meter_id, config)),
                        created: now,
                    },
                );
            }
            MeterCommand::Modify => {
                let Some(e) = self.meters.get_mut(&mm.meter_id) else {
                    return Err(OfError::UnknownMeter(mm.meter_id));
                };
                e.meter = Arc::new(Meter::replacing(&e.meter, config));
                e.flags = mm.flags;
                e.bands = mm.bands;
            }
            MeterCommand::Delete => return Err(OfError::BadMeterCommand),
        }
        Ok(())
    }

    /// Removes meter `id` (or every meter with [`METER_ALL`]); returns the ids removed. A
    /// missing meter is not an error (OpenFlow: delete of an unknown meter succeeds).
    pub fn remove(&mut self, id: u32) -> Result<Vec<u32>, OfError> {
        if id == METER_ALL {
            let ids = self.meters.keys().copied().collect();
            self.meters.clear();
            return Ok(ids);
        }
        if !id_valid(id) {
            return Err(OfError::InvalidMeter(id));
        }
        Ok(self.meters.remove(&id).map(|_| id).into_iter().collect())
    }

    /// METER statistics of meter `id` or of every meter; `refs` counts a meter's rules.
    pub fn stats(
        &self,
        id: u32,
        refs: &dyn Fn(u32) -> usize,
        now: Instant,
    ) -> Vec<MeterStatsEntry> {
        self.meters
            .iter()
            .filter(|(k, _)| id == METER_ALL || **k == id)
            .map(|(k, e)| {
                let s = e.meter.stats();
                MeterStatsEntry {
                    meter_id: *k,
                    flow_count: u32::try_from(refs(*k)).unwrap_or(u32::MAX),
                    packets: s.packets,
                    bytes: s.bytes,
                    duration: now.saturating_duration_since(e.created),
                    bands: s.bands,
                }
            })
            .collect()
    }
}

/// Parses a meter in `ovs-ofctl` syntax for `command`:
/// `meter=N,kbps|pktps[,burst][,stats],bands=type=drop|dscp_remark,rate=R[,burst_size=B]
/// [,prec_level=P][,type=...]`; for a delete, `meter=N` or nothing (every meter). Errors are
/// one line naming what is wrong.
pub fn parse_meter(command: MeterCommand, spec: &str) -> Result<MeterMod, String> {
    let mut mm = MeterMod {
        command,
        meter_id: METER_ALL,
        flags: 0,
        bands: Vec::new(),
    };
    let (head, bands) = match spec.split_once("bands=") {
        Some((h, b)) => (h, Some(b)),
        None => (spec, None),
    };
    let num = |k: &str, v: &str| -> Result<u32, String> {
        v.trim()
            .parse::<u32>()
            .map_err(|_| format!("{k}={v}: not a number"))
    };
    let mut have_id = false;
    for tok in head.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        match tok.split_once('=') {
            Some(("meter", "all")) => have_id = true,
            Some(("meter", v)) => {
                mm.meter_id = match v {
                    "controller" => METER_CONTROLLER,
                    "slowpath" => METER_SLOWPATH,
                    _ => num("meter", v)?,
                };
                have_id = true;
            }
            None if tok == "kbps" => mm.flags |= meter_flags::KBPS,
            None if tok == "pktps" => mm.flags |= meter_flags::PKTPS,
            None if tok == "burst" => mm.flags |= meter_flags::BURST,
            None if tok == "stats" => mm.flags |= meter_flags::STATS,
            _ => return Err(format!("unknown meter field {tok:?}")),
        }
    }
    if command == MeterCommand::Delete {
        return match bands {
            Some(_) => Err("a meter delete takes only meter=N".into()),
            None => Ok(mm),
        };
    }
    if !have_id || mm.meter_id == METER_ALL {
        return Err("meter=N is required (1..=4294901760, controller or slowpath)".into());
    }
    if mm.flags & (meter_flags::KBPS | meter_flags::PKTPS) == 0 {
        mm.flags |= meter_flags::KBPS;
    }
    let Some(bands) = bands else {
        return Err("bands=type=drop,rate=N is required".into());
    };
    for tok in bands.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let Some((k, v)) = tok.split_once('=') else {
            return Err(format!("band field {tok:?} needs a value"));
        };
        if k == "type" {
            mm.bands.push(MeterBand {
                kind: match v {
                    "drop" => BandKind::Drop,
                    "dscp_remark" => BandKind::DscpRemark(0),
                    _ => return Err(format!("unknown band type {v:?} (drop, dscp_remark)")),
                },
                rate: 0,
                burst: 0,
            });
            continue;
        }
        let Some(b) = mm.bands.last_mut() else {
            return Err(format!("{tok}: a band starts with type="));
        };
        match k {
            "rate" => b.rate = num(k, v)?,
            "burst_size" => b.burst = num(k, v)?,
            "prec_level" => match &mut b.kind {
                BandKind::DscpRemark(p) => {
                    *p = u8::try_from(num(k, v)?).map_err(|_| format!("{tok}: out of range"))?
                }
                BandKind::Drop => return Err("prec_level belongs to a dscp_remark band".into()),
            },
            _ => return Err(format!("unknown band field {k:?}")),
        }
    }
    MeterTable::check(&mm).map_err(|e| e.to_string())?;
    Ok(mm)
}

fn id_text(id: u32) -> String {
    match id {
        METER_CONTROLLER => "controller".into(),
        METER_SLOWPATH => "slowpath".into(),
        _ => id.to_string(),
    }
}

/// One meter as `dump-meters` prints it, in `ovs-ofctl` syntax (what `add-meter` takes back),
/// with its counters.
pub fn format_meter(id: u32, e: &MeterEntry, flow_count: usize) -> String {
    let mut s = format!("meter={}", id_text(id));
    for (bit, name) in [
        (meter_flags::KBPS, "kbps"),
        (meter_flags::PKTPS, "pktps"),
        (meter_flags::BURST, "burst"),
        (meter_flags::STATS, "stats"),
    ] {
        if e.flags & bit != 0 {
            s.push(',');
            s.push_str(name);
        }
    }
    s.push_str(",bands=");
    let bands: Vec<String> = e
        .bands
        .iter()
        .map(|b| {
            let mut t = match b.kind {
                BandKind::Drop => format!("type=drop,rate={}", b.rate),
                BandKind::DscpRemark(p) => {
                    format!("type=dscp_remark,rate={},prec_level={p}", b.rate)
                }
            };
            if e.flags & meter_flags::BURST != 0 {
                t.push_str(&format!(",burst_size={}", b.burst));
            }
            t
        })
        .collect();
    s.push_str(&bands.join(","));
    let st = e.meter.stats();
    s.push_str(&format!(
        " flow_count:{flow_count} packet_in_count:{} byte_in_count:{}",
        st.packets, st.bytes
    ));
    for (i, (p, b)) in st.bands.iter().enumerate() {
        s.push_str(&format!(" band{i}:packet_count:{p},byte_count:{b}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mm(command: MeterCommand, id: u32, rate: u32) -> MeterMod {
        MeterMod {
            command,
            meter_id: id,
            flags: meter_flags::PKTPS,
            bands: vec![MeterBand {
                kind: BandKind::Drop,
                rate,
                burst: 0,
            }],
        }
    }

    #[test]
    fn add_modify_delete_and_their_errors() {
        let now = Instant::now();
        let mut t = MeterTable::default();
        t.apply(mm(MeterCommand::Add, 1, 100), now).unwrap();
        assert_eq!(
            t.apply(mm(MeterCommand::Add, 1, 100), now),
            Err(OfError::MeterExists(1))
        );
        assert_eq!(
            t.apply(mm(MeterCommand::Modify, 2, 100), now),
            Err(OfError::UnknownMeter(2))
        );
        assert_eq!(
            t.apply(mm(MeterCommand::Add, 3, 0), now),
            Err(OfError::BadRate)
        );
        assert_eq!(
            t.apply(mm(MeterCommand::Add, METER_MAX + 1, 5), now),
            Err(OfError::InvalidMeter(METER_MAX + 1))
        );
        let mut none = mm(MeterCommand::Add, 4, 5);
        none.bands.clear();
        assert_eq!(t.apply(none, now), Err(OfError::InvalidMeter(4)));
        let mut many = mm(MeterCommand::Add, 4, 5);
        many.bands = vec![many.bands[0]; MAX_BANDS + 1];
        assert_eq!(t.apply(many, now), Err(OfError::OutOfBands));
        let mut both = mm(MeterCommand::Add, 4, 5);
        both.flags = meter_flags::PKTPS | meter_flags::KBPS;
        assert_eq!(t.apply(both, now), Err(OfError::BadMeterFlags));
        assert_eq!(t.len(), 1, "no failed mod left anything behind");
        let before = Arc::clone(&t.get(1).unwrap().meter);
        t.apply(mm(MeterCommand::Modify, 1, 200), now).unwrap();
        assert!(!Arc::ptr_eq(&before, &t.get(1).unwrap().meter));
        assert_eq!(t.get(1).unwrap().bands[0].rate, 200);
        t.apply(mm(MeterCommand::Add, METER_CONTROLLER, 10), now)
            .unwrap();
        assert_eq!(t.remove(7), Ok(vec![]));
        assert_eq!(t.remove(METER_ALL), Ok(vec![1, METER_CONTROLLER]));
        assert!(t.is_empty());
    }

    #[test]
    fn ovs_ofctl_syntax_round_trips() {
        let spec = "meter=3,pktps,burst,stats,bands=type=drop,rate=1000,burst_size=100,\
                    type=dscp_remark,rate=500,prec_level=1,burst_size=10";
        let mm = parse_meter(MeterCommand::Add, spec).unwrap();
        assert_eq!(mm.meter_id, 3);
        assert_eq!(mm.bands.len(), 2);
        assert_eq!(mm.bands[1].kind, BandKind::DscpRemark(1));
        let mut t = MeterTable::default();
        t.apply(mm.clone(), Instant::now()).unwrap();
        let line = format_meter(3, t.get(3).unwrap(), 0);
        let again = parse_meter(MeterCommand::Add, line.split(' ').next().unwrap()).unwrap();
        assert_eq!(again, mm, "{line}");
        let kbps = parse_meter(MeterCommand::Add, "meter=1,bands=type=drop,rate=10").unwrap();
        assert_eq!(kbps.flags, meter_flags::KBPS, "kbps is the default");
        let del = parse_meter(MeterCommand::Delete, "").unwrap();
        assert_eq!(del.meter_id, METER_ALL);
        for bad in [
            "meter=1,pktps",
            "meter=1,pktps,bands=type=drop,rate=0",
            "meter=1,pktps,bands=type=police,rate=5",
            "meter=1,pktps,bands=rate=5",
            "meter=0,pktps,bands=type=drop,rate=5",
            "pktps,bands=type=drop,rate=5",
            "meter=1,kbps,pktps,bands=type=drop,rate=5",
            "meter=1,fast,bands=type=drop,rate=5",
            "meter=1,bands=type=drop,rate=x",
        ] {
            assert!(parse_meter(MeterCommand::Add, bad).is_err(), "{bad}");
        }
    }
}
