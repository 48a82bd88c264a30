//! OpenFlow-level failures of the pipeline's control operations (flow, group and meter
//! mods), each with the OpenFlow 1.3 `(type, code)` it is sent as (1.5's bucket codes where
//! 1.3 has none). Plain data; no locks, no threads.

use std::fmt;

use crate::types::OfPort;

/// OpenFlow-level failures of a flow-mod, with the OF1.3 (type, code) they map to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OfError {
    /// Table id above 254 (or 255 where not allowed).
    BadTableId(u8),
    /// Add would overlap an existing rule (CHECK_OVERLAP).
    Overlap,
    /// The table holds too many rules.
    TableFull,
    /// goto_table to a table not after the current one.
    BadGotoTable(u8),
    /// Instructions repeated or unsupported.
    BadInstruction(&'static str),
    /// Match prerequisite missing.
    BadPrereq(&'static str),
    /// Output to an invalid port.
    BadOutPort(OfPort),
    /// Bad action argument.
    BadArgument(&'static str),
    /// Unsupported flag combination.
    BadFlags,
    /// A rule's `group:N` names a group that does not exist.
    BadOutGroup(u32),
    /// GROUP_MOD add of an existing group.
    GroupExists(u32),
    /// Group number out of range.
    InvalidGroup(u32),
    /// GROUP_MOD modify/chaining names a group that does not exist.
    UnknownGroup(u32),
    /// A bucket is malformed (count, indirect with other than one bucket).
    BadBucket(&'static str),
    /// Fast-failover bucket without a watch port or group, or a watch port that is a
    /// reserved port other than LOCAL, or a watch group out of range.
    BadWatch,
    /// The group would (transitively) output to itself.
    GroupLoop,
    /// Deleting a group that another group's bucket uses.
    ChainedGroup(u32),
    /// Too many groups.
    OutOfGroups,
    /// More buckets in one group than [`crate::group::MAX_BUCKETS`].
    OutOfBuckets,
    /// An OpenFlow 1.5 bucket command names a bucket id the group does not have.
    UnknownBucket(u32),
    /// A bucket id given twice, or one the group already has (OpenFlow 1.5).
    BucketExists(u32),
    /// METER_MOD add of an existing meter.
    MeterExists(u32),
    /// Meter id out of range, a meter with no bands, or a rule naming a missing meter.
    InvalidMeter(u32),
    /// METER_MOD modify of a meter that does not exist.
    UnknownMeter(u32),
    /// METER_MOD command not known.
    BadMeterCommand,
    /// Unknown meter flags, or both KBPS and PKTPS.
    BadMeterFlags,
    /// A band with rate 0.
    BadRate,
    /// Too many meters.
    OutOfMeters,
    /// Too many bands.
    OutOfBands,
    /// An action Vireo decodes but cannot execute yet (OFPBAC_BAD_TYPE).
    Unsupported(&'static str),
    /// An action's field needs a match the rule does not have (OFPBAC_MATCH_INCONSISTENT).
    MatchInconsistent(&'static str),
    /// A set-field / load / move destination that cannot be written (OFPBAC_BAD_SET_TYPE).
    BadSetType(&'static str),
    /// A match field the pipeline does not hold (OFPBMC_BAD_FIELD).
    BadField(&'static str),
}

impl OfError {
    /// OpenFlow 1.3 `(ofp_error_type, code)`.
    pub fn type_code(&self) -> (u16, u16) {
        match self {
            OfError::BadTableId(_) => (5, 2),
            OfError::Overlap => (5, 3),
            OfError::TableFull => (5, 1),
            OfError::BadFlags => (5, 7),
            OfError::BadGotoTable(_) => (3, 2),
            OfError::BadInstruction(_) => (3, 1),
            OfError::BadPrereq(_) => (4, 9),
            OfError::BadOutPort(_) => (2, 4),
            OfError::BadArgument(_) => (2, 5),
            OfError::BadOutGroup(_) => (2, 9),
            OfError::GroupExists(_) => (6, 0),
            OfError::InvalidGroup(_) => (6, 1),
            OfError::OutOfGroups => (6, 3),
            OfError::OutOfBuckets => (6, 4),
            OfError::GroupLoop => (6, 7),
            OfError::UnknownGroup(_) => (6, 8),
            OfError::ChainedGroup(_) => (6, 9),
            OfError::BadBucket(_) => (6, 12),
            OfError::BadWatch => (6, 13),
            // OpenFlow 1.5's codes (1.3 has no bucket ids).
            OfError::UnknownBucket(_) => (6, 15),
            OfError::BucketExists(_) => (6, 16),
            OfError::MeterExists(_) => (12, 1),
            OfError::InvalidMeter(_) => (12, 2),
            OfError::UnknownMeter(_) => (12, 3),
            OfError::BadMeterCommand => (12, 4),
            OfError::BadMeterFlags => (12, 5),
            OfError::BadRate => (12, 6),
            OfError::OutOfMeters => (12, 10),
            OfError::OutOfBands => (12, 11),
            OfError::Unsupported(_) => (2, 0),
            OfError::MatchInconsistent(_) => (2, 10),
            OfError::BadSetType(_) => (2, 13),
            OfError::BadField(_) => (4, 6),
        }
    }
}

impl fmt::Display for OfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OfError::BadTableId(t) => write!(f, "bad table id {t}"),
            OfError::Overlap => write!(f, "rule overlaps an existing rule of the same priority"),
            OfError::TableFull => write!(f, "table full"),
            OfError::BadGotoTable(t) => write!(f, "goto_table:{t} must name a later table"),
            OfError::BadInstruction(s) => write!(f, "bad instructions: {s}"),
            OfError::BadPrereq(s) => write!(f, "missing prerequisite: {s}"),
            OfError::BadOutPort(p) => write!(f, "bad output port {p:#x}"),
            OfError::BadArgument(s) => write!(f, "bad action argument: {s}"),
            OfError::BadFlags => write!(f, "bad flags"),
            OfError::BadOutGroup(g) => write!(f, "group {g} does not exist"),
            OfError::GroupExists(g) => write!(f, "group {g} already exists"),
            OfError::InvalidGroup(g) => write!(f, "invalid group number {g:#x}"),
            OfError::UnknownGroup(g) => write!(f, "no group {g}"),
            OfError::BadBucket(s) => write!(f, "bad bucket: {s}"),
            OfError::BadWatch => write!(f, "fast-failover bucket needs a watch port or group"),
            OfError::GroupLoop => write!(f, "group chain would loop"),
            OfError::ChainedGroup(g) => write!(f, "group {g} is used by another group"),
            OfError::OutOfGroups => write!(f, "too many groups"),
            OfError::OutOfBuckets => write!(f, "too many buckets in one group"),
            OfError::UnknownBucket(b) => write!(f, "no bucket {b}"),
            OfError::BucketExists(b) => write!(f, "bucket {b} already exists"),
            OfError::MeterExists(m) => write!(f, "meter {m} already exists"),
            OfError::InvalidMeter(m) => {
                write!(
                    f,
                    "invalid meter {m:#x} (out of range, no bands, or does not exist)"
                )
            }
            OfError::UnknownMeter(m) => write!(f, "no meter {m}"),
            OfError::BadMeterCommand => write!(f, "bad meter command"),
            OfError::BadMeterFlags => write!(f, "bad meter flags (kbps and pktps are exclusive)"),
            OfError::BadRate => write!(f, "meter band rate must not be 0"),
            OfError::OutOfMeters => write!(f, "too many meters"),
            OfError::OutOfBands => write!(f, "too many meter bands (at most 8)"),
            OfError::Unsupported(s) => write!(f, "unsupported action: {s}"),
            OfError::MatchInconsistent(s) => write!(f, "action inconsistent with match: {s}"),
            OfError::BadSetType(s) => write!(f, "cannot write field: {s}"),
            OfError::BadField(s) => write!(f, "unsupported match field: {s}"),
        }
    }
}

impl std::error::Error for OfError {}
