//! OpenFlow error types and codes (`ofp_error_type` and the per-type code enums of
//! OpenFlow 1.3 §7.4.4), and [`OfError`], the value every decoder returns on bad input.
//! Pure data; used from whichever thread decodes.

use std::fmt;

/// An OpenFlow error (type, code) pair, ready to be sent back as an `OFPT_ERROR`
/// with the offending message's first 64 bytes (see [`crate::ErrorMsg::for_request`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OfError {
    /// `ofp_error_type`.
    pub etype: u16,
    /// Type-specific code.
    pub code: u16,
}

impl OfError {
    /// Builds an error from a raw type and code.
    pub const fn new(etype: u16, code: u16) -> Self {
        Self { etype, code }
    }

    /// Whether the spec lets the connection stay up after this error. Only a failed
    /// version negotiation (HELLO_FAILED) ends the connection.
    pub fn keeps_connection(&self) -> bool {
        self.etype != error_type::HELLO_FAILED
    }

    /// This (OpenFlow 1.3) error as wire version `version` writes it. 1.4 and 1.5 keep the
    /// 1.3 numbers for every code Vireo sends. OpenFlow 1.0 has fewer types and codes: those
    /// with a 1.0 equivalent are renumbered (FLOW_MOD_FAILED is type 3, PORT_MOD_FAILED 4,
    /// QUEUE_OP_FAILED 5; the first nine BAD_REQUEST and BAD_ACTION codes are the same), the
    /// rest (bad match, bad instruction, group, table, role and meter errors, newer codes)
    /// become `OFPET_BAD_REQUEST/OFPBRC_EPERM`, 1.0's catch-all refusal.
    pub fn for_version(self, version: u8) -> OfError {
        if version != crate::version::OFP10 {
            return self;
        }
        use error_type as t;
        const EPERM: OfError = OfError::new(t::BAD_REQUEST, 5);
        match (self.etype, self.code) {
            (t::HELLO_FAILED, 0..=1) | (t::BAD_REQUEST, 0..=8) => self,
            (t::BAD_ACTION, 0..=8) => self,
            (t::BAD_ACTION, 13) => OfError::new(t::BAD_ACTION, 0),
            (t::BAD_ACTION, 14) => OfError::new(t::BAD_ACTION, 1),
            (t::BAD_ACTION, _) => OfError::new(t::BAD_ACTION, 5),
            // OFPFMFC_ALL_TABLES_FULL, OVERLAP, EPERM, BAD_COMMAND.
            (t::FLOW_MOD_FAILED, 1) => OfError::new(3, 0),
            (t::FLOW_MOD_FAILED, 3) => OfError::new(3, 1),
            (t::FLOW_MOD_FAILED, 4) => OfError::new(3, 2),
            (t::FLOW_MOD_FAILED, 6) => OfError::new(3, 4),
            (t::PORT_MOD_FAILED, 0..=1) => OfError::new(4, self.code),
            (t::QUEUE_OP_FAILED, 0..=2) => OfError::new(5, self.code),
            // Nicira's own codes: 1.0 carries them in an `NXET_VENDOR` error (see
            // `ErrorMsg::for_request`) with OVS's 1.0 numbers (type 1, code 527..).
            (t::EXPERIMENTER, 16..=21) => OfError::new(t::NX_VENDOR, 527 + self.code - 16),
            (t::EXPERIMENTER, 37..=38) => OfError::new(t::NX_VENDOR, 536 + self.code - 37),
            _ => EPERM,
        }
    }
}

impl fmt::Display for OfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpenFlow error type {} code {}", self.etype, self.code)
    }
}

impl std::error::Error for OfError {}

/// `ofp_error_type` values.
pub mod error_type {
    pub const HELLO_FAILED: u16 = 0;
    pub const BAD_REQUEST: u16 = 1;
    pub const BAD_ACTION: u16 = 2;
    pub const BAD_INSTRUCTION: u16 = 3;
    pub const BAD_MATCH: u16 = 4;
    pub const FLOW_MOD_FAILED: u16 = 5;
    pub const GROUP_MOD_FAILED: u16 = 6;
    pub const PORT_MOD_FAILED: u16 = 7;
    pub const TABLE_MOD_FAILED: u16 = 8;
    pub const QUEUE_OP_FAILED: u16 = 9;
    pub const SWITCH_CONFIG_FAILED: u16 = 10;
    pub const ROLE_REQUEST_FAILED: u16 = 11;
    pub const METER_MOD_FAILED: u16 = 12;
    pub const TABLE_FEATURES_FAILED: u16 = 13;
    /// 1.4+.
    pub const BAD_PROPERTY: u16 = 14;
    /// 1.4+.
    pub const ASYNC_CONFIG_FAILED: u16 = 15;
    pub const EXPERIMENTER: u16 = 0xffff;
    /// OpenFlow 1.0's Nicira vendor error (`NXET_VENDOR`): the body names vendor `0x2320`,
    /// a type and a code before the request's bytes.
    pub const NX_VENDOR: u16 = 0xb0c2;
}

macro_rules! codes {
    ($ty:ident: $($name:ident = $code:expr),* $(,)?) => {
        $(pub const $name: OfError = OfError::new(error_type::$ty, $code);)*
    };
}

/// Named (type, code) pairs, e.g. `errors::BAD_REQUEST_BAD_LEN`.
#[allow(missing_docs)]
pub mod errors {
    use super::{error_type, OfError};

    codes!(HELLO_FAILED: HELLO_FAILED_INCOMPATIBLE = 0, HELLO_FAILED_EPERM = 1);
    codes!(BAD_REQUEST:
        BAD_REQUEST_BAD_VERSION = 0, BAD_REQUEST_BAD_TYPE = 1, BAD_REQUEST_BAD_MULTIPART = 2,
        BAD_REQUEST_BAD_EXPERIMENTER = 3, BAD_REQUEST_BAD_EXP_TYPE = 4, BAD_REQUEST_EPERM = 5,
        BAD_REQUEST_BAD_LEN = 6, BAD_REQUEST_BUFFER_EMPTY = 7, BAD_REQUEST_BUFFER_UNKNOWN = 8,
        BAD_REQUEST_BAD_TABLE_ID = 9, BAD_REQUEST_IS_SLAVE = 10, BAD_REQUEST_BAD_PORT = 11,
        BAD_REQUEST_BAD_PACKET = 12, BAD_REQUEST_MULTIPART_BUFFER_OVERFLOW = 13);
    codes!(BAD_ACTION:
        BAD_ACTION_BAD_TYPE = 0, BAD_ACTION_BAD_LEN = 1, BAD_ACTION_BAD_EXPERIMENTER = 2,
        BAD_ACTION_BAD_EXP_TYPE = 3, BAD_ACTION_BAD_OUT_PORT = 4, BAD_ACTION_BAD_ARGUMENT = 5,
        BAD_ACTION_EPERM = 6, BAD_ACTION_TOO_MANY = 7, BAD_ACTION_BAD_QUEUE = 8,
        BAD_ACTION_BAD_OUT_GROUP = 9, BAD_ACTION_MATCH_INCONSISTENT = 10,
        BAD_ACTION_UNSUPPORTED_ORDER = 11, BAD_ACTION_BAD_TAG = 12, BAD_ACTION_BAD_SET_TYPE = 13,
        BAD_ACTION_BAD_SET_LEN = 14, BAD_ACTION_BAD_SET_ARGUMENT = 15);
    codes!(BAD_INSTRUCTION:
        BAD_INSTRUCTION_UNKNOWN_INST = 0, BAD_INSTRUCTION_UNSUP_INST = 1,
        BAD_INSTRUCTION_BAD_TABLE_ID = 2, BAD_INSTRUCTION_UNSUP_METADATA = 3,
        BAD_INSTRUCTION_UNSUP_METADATA_MASK = 4, BAD_INSTRUCTION_BAD_EXPERIMENTER = 5,
        BAD_INSTRUCTION_BAD_EXP_TYPE = 6, BAD_INSTRUCTION_BAD_LEN = 7, BAD_INSTRUCTION_EPERM = 8);
    codes!(BAD_MATCH:
        BAD_MATCH_BAD_TYPE = 0, BAD_MATCH_BAD_LEN = 1, BAD_MATCH_BAD_TAG = 2,
        BAD_MATCH_BAD_DL_ADDR_MASK = 3, BAD_MATCH_BAD_NW_ADDR_MASK = 4,
        BAD_MATCH_BAD_WILDCARDS = 5, BAD_MATCH_BAD_FIELD = 6, BAD_MATCH_BAD_VALUE = 7,
        BAD_MATCH_BAD_MASK = 8, BAD_MATCH_BAD_PREREQ = 9, BAD_MATCH_DUP_FIELD = 10,
        BAD_MATCH_EPERM = 11);
    codes!(FLOW_MOD_FAILED:
        FLOW_MOD_FAILED_UNKNOWN = 0, FLOW_MOD_FAILED_TABLE_FULL = 1,
        FLOW_MOD_FAILED_BAD_TABLE_ID = 2, FLOW_MOD_FAILED_OVERLAP = 3, FLOW_MOD_FAILED_EPERM = 4,
        FLOW_MOD_FAILED_BAD_TIMEOUT = 5, FLOW_MOD_FAILED_BAD_COMMAND = 6,
        FLOW_MOD_FAILED_BAD_FLAGS = 7);
    codes!(GROUP_MOD_FAILED:
        GROUP_MOD_FAILED_GROUP_EXISTS = 0, GROUP_MOD_FAILED_INVALID_GROUP = 1,
        GROUP_MOD_FAILED_WEIGHT_UNSUPPORTED = 2, GROUP_MOD_FAILED_OUT_OF_GROUPS = 3,
        GROUP_MOD_FAILED_OUT_OF_BUCKETS = 4, GROUP_MOD_FAILED_CHAINING_UNSUPPORTED = 5,
        GROUP_MOD_FAILED_WATCH_UNSUPPORTED = 6, GROUP_MOD_FAILED_LOOP = 7,
        GROUP_MOD_FAILED_UNKNOWN_GROUP = 8, GROUP_MOD_FAILED_CHAINED_GROUP = 9,
        GROUP_MOD_FAILED_BAD_TYPE = 10, GROUP_MOD_FAILED_BAD_COMMAND = 11,
        GROUP_MOD_FAILED_BAD_BUCKET = 12, GROUP_MOD_FAILED_BAD_WATCH = 13,
        GROUP_MOD_FAILED_EPERM = 14);
    codes!(PORT_MOD_FAILED:
        PORT_MOD_FAILED_BAD_PORT = 0, PORT_MOD_FAILED_BAD_HW_ADDR = 1,
        PORT_MOD_FAILED_BAD_CONFIG = 2, PORT_MOD_FAILED_BAD_ADVERTISE = 3,
        PORT_MOD_FAILED_EPERM = 4);
    codes!(TABLE_MOD_FAILED:
        TABLE_MOD_FAILED_BAD_TABLE = 0, TABLE_MOD_FAILED_BAD_CONFIG = 1,
        TABLE_MOD_FAILED_EPERM = 2);
    codes!(QUEUE_OP_FAILED:
        QUEUE_OP_FAILED_BAD_PORT = 0, QUEUE_OP_FAILED_BAD_QUEUE = 1, QUEUE_OP_FAILED_EPERM = 2);
    codes!(SWITCH_CONFIG_FAILED:
        SWITCH_CONFIG_FAILED_BAD_FLAGS = 0, SWITCH_CONFIG_FAILED_BAD_LEN = 1,
        SWITCH_CONFIG_FAILED_EPERM = 2);
    codes!(BAD_PROPERTY:
        BAD_PROPERTY_BAD_TYPE = 0, BAD_PROPERTY_BAD_LEN = 1, BAD_PROPERTY_BAD_VALUE = 2,
        BAD_PROPERTY_TOO_MANY = 3, BAD_PROPERTY_DUP_TYPE = 4, BAD_PROPERTY_BAD_EXPERIMENTER = 5,
        BAD_PROPERTY_BAD_EXP_TYPE = 6, BAD_PROPERTY_BAD_EXP_VALUE = 7, BAD_PROPERTY_EPERM = 8);
    codes!(METER_MOD_FAILED:
        METER_MOD_FAILED_UNKNOWN = 0, METER_MOD_FAILED_METER_EXISTS = 1,
        METER_MOD_FAILED_INVALID_METER = 2, METER_MOD_FAILED_UNKNOWN_METER = 3,
        METER_MOD_FAILED_BAD_COMMAND = 4, METER_MOD_FAILED_BAD_FLAGS = 5,
        METER_MOD_FAILED_BAD_RATE = 6, METER_MOD_FAILED_BAD_BURST = 7,
        METER_MOD_FAILED_BAD_BAND = 8, METER_MOD_FAILED_BAD_BAND_VALUE = 9,
        METER_MOD_FAILED_OUT_OF_METERS = 10, METER_MOD_FAILED_OUT_OF_BANDS = 11);
    // Nicira experimenter errors (type 0xffff, experimenter 0x2320) as OVS 3.1 sends them
    // in 1.2+: the TLV table's (`NXTTMFC_*`) and the flow mod's use of an unmapped
    // `tun_metadataN` (`NXFMFC_INVALID_TLV_FIELD`).
    codes!(EXPERIMENTER:
        NX_TLV_BAD_COMMAND = 16, NX_TLV_BAD_OPT_LEN = 17, NX_TLV_BAD_FIELD_IDX = 18,
        NX_TLV_TABLE_FULL = 19, NX_TLV_ALREADY_MAPPED = 20, NX_TLV_DUP_ENTRY = 21,
        NX_INVALID_TLV_FIELD = 37, NX_TLV_INVALID_DEL = 38);
    codes!(ROLE_REQUEST_FAILED:
        ROLE_REQUEST_FAILED_STALE = 0, ROLE_REQUEST_FAILED_UNSUP = 1,
        ROLE_REQUEST_FAILED_BAD_ROLE = 2);
}
