//! Nicira's Geneve option ("TLV") mapping messages, as `ovs-ofctl add-tlv-map`,
//! `del-tlv-map` and `dump-tlv-map` send them (checked byte for byte against OVS 3.1):
//! `NXT_TLV_TABLE_MOD` (subtype 24), `NXT_TLV_TABLE_REQUEST` (25) and `NXT_TLV_TABLE_REPLY`
//! (26), experimenter messages of vendor `0x2320` in every OpenFlow version (1.0's
//! `OFPT_VENDOR` has the same type number and layout).
//!
//! Bodies after the 8-byte experimenter header (vendor, subtype):
//! - mod: `command` u16 (0 add, 1 delete, 2 clear), 6 bytes pad, then maps;
//! - request: nothing;
//! - reply: `max_option_space` u32, `max_fields` u16, 10 bytes reserved, then maps;
//! - a map (8 bytes): option class u16, type u8, length u8, index u16, 2 bytes pad.
//!
//! A command other than those three is `NXTTMFC_BAD_COMMAND`; other Nicira subtypes stay
//! `OFPBRC_BAD_EXPERIMENTER` as before; what a map may say (length a
//! multiple of 4 up to 124, index below 64, room left) is the switch's to check. Pure codec
//! on the decoding thread.

use crate::buf::{Reader, Writer};
use crate::error::{errors, OfError};
use crate::msg::finish;

/// Nicira vendor id.
pub const NX_VENDOR: u32 = 0x0000_2320;
/// `NXT_TLV_TABLE_MOD`.
pub const SUBTYPE_MOD: u32 = 24;
/// `NXT_TLV_TABLE_REQUEST`.
pub const SUBTYPE_REQUEST: u32 = 25;
/// `NXT_TLV_TABLE_REPLY`.
pub const SUBTYPE_REPLY: u32 = 26;

/// `NXTTMC_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlvCommand {
    /// Add the maps (all or none).
    Add,
    /// Delete the maps' indexes.
    Delete,
    /// Delete every map.
    Clear,
}

/// One mapping: Geneve option (class, type, length in bytes) → `tun_metadata<index>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TlvMap {
    pub class: u16,
    pub otype: u8,
    pub len: u8,
    pub index: u16,
}

/// `NXT_TLV_TABLE_MOD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlvTableMod {
    pub command: TlvCommand,
    pub maps: Vec<TlvMap>,
}

/// `NXT_TLV_TABLE_REPLY`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlvTableReply {
    /// Total option bytes the switch can hold.
    pub max_option_space: u32,
    /// Number of `tun_metadataN` fields.
    pub max_fields: u16,
    pub maps: Vec<TlvMap>,
}

fn decode_maps(r: &mut Reader<'_>) -> Result<Vec<TlvMap>, OfError> {
    if !r.remaining().is_multiple_of(8) {
        return Err(errors::BAD_REQUEST_BAD_LEN);
    }
    let mut maps = Vec::with_capacity(r.remaining() / 8);
    while !r.is_empty() {
        let class = r.u16()?;
        let otype = r.u8()?;
        let len = r.u8()?;
        let index = r.u16()?;
        r.skip(2)?;
        maps.push(TlvMap {
            class,
            otype,
            len,
            index,
        });
    }
    Ok(maps)
}

fn encode_maps(maps: &[TlvMap], out: &mut Vec<u8>) {
    for m in maps {
        out.put_u16(m.class);
        out.put_u8(m.otype);
        out.put_u8(m.len);
        out.put_u16(m.index);
        out.pad(2);
    }
}

/// Decodes the body of a Nicira experimenter message after its vendor id, if it is one of
/// the TLV table messages: `Ok(None)` for other subtypes.
pub(crate) fn decode(subtype: u32, r: &mut Reader<'_>) -> Result<Option<super::Message>, OfError> {
    use super::Message as M;
    Ok(Some(match subtype {
        SUBTYPE_MOD => {
            let command = match r.u16()? {
                0 => TlvCommand::Add,
                1 => TlvCommand::Delete,
                2 => TlvCommand::Clear,
                _ => return Err(errors::NX_TLV_BAD_COMMAND),
            };
            r.skip(6)?;
            M::TlvTableMod(TlvTableMod {
                command,
                maps: decode_maps(r)?,
            })
        }
        SUBTYPE_REQUEST => finish(r, M::TlvTableRequest)?,
        SUBTYPE_REPLY => {
            let max_option_space = r.u32()?;
            let max_fields = r.u16()?;
            r.skip(10)?;
            M::TlvTableReply(TlvTableReply {
                max_option_space,
                max_fields,
                maps: decode_maps(r)?,
            })
        }
        _ => return Ok(None),
    }))
}

/// Decodes an experimenter / vendor message body (after the 8-byte OpenFlow header).
pub(crate) fn decode_experimenter(r: &mut Reader<'_>) -> Result<super::Message, OfError> {
    if r.u32()? != NX_VENDOR {
        return Err(errors::BAD_REQUEST_BAD_EXPERIMENTER);
    }
    let st = r.u32()?;
    // Other Nicira messages stay refused as before (ovs-ofctl falls back).
    decode(st, r)?.ok_or(errors::BAD_REQUEST_BAD_EXPERIMENTER)
}

/// Encodes a TLV message's body (vendor and subtype included); false if `m` is not one.
pub(crate) fn encode(m: &super::Message, out: &mut Vec<u8>) -> bool {
    use super::Message as M;
    match m {
        M::TlvTableMod(t) => {
            out.put_u32(NX_VENDOR);
            out.put_u32(SUBTYPE_MOD);
            out.put_u16(match t.command {
                TlvCommand::Add => 0,
                TlvCommand::Delete => 1,
                TlvCommand::Clear => 2,
            });
            out.pad(6);
            encode_maps(&t.maps, out);
        }
        M::TlvTableRequest => {
            out.put_u32(NX_VENDOR);
            out.put_u32(SUBTYPE_REQUEST);
        }
        M::TlvTableReply(t) => {
            out.put_u32(NX_VENDOR);
            out.put_u32(SUBTYPE_REPLY);
            out.put_u32(t.max_option_space);
            out.put_u16(t.max_fields);
            out.pad(10);
            encode_maps(&t.maps, out);
        }
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use crate::msg::{decode, Message};

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Frames captured between ovs-ofctl 3.1 and ovs-vswitchd 3.1 (`add-tlv-map`,
    /// `dump-tlv-map`, `del-tlv-map` with and without maps), in 1.0 and 1.3.
    const CAPTURED: [&str; 7] = [
        "0104002000000004000023200000001800000000000000000102800400000000",
        "040400280000000200002320000000180000000000000000ffff010800010000ffff027c00020000",
        "04040010000000020000232000000019",
        "01040010000000020000232000000019",
        "0404003800000002000023200000001a000001000040000000000000000000000102800400000000ffff010800010000ffff027c00020000",
        "040400200000000200002320000000180001000000000000ffff010800010000",
        "040400180000000200002320000000180002000000000000",
    ];

    #[test]
    fn captured_ovs_frames_decode_and_encode_back_byte_for_byte() {
        use super::*;
        for h in CAPTURED {
            let f = hex(h);
            let (ver, xid, m) = crate::msg::decode_versioned(&f).unwrap();
            assert!(
                matches!(
                    m,
                    Message::TlvTableMod(_) | Message::TlvTableRequest | Message::TlvTableReply(_)
                ),
                "{h}: {m:?}"
            );
            assert_eq!(m.encode_version(ver, xid).unwrap(), f, "{h}");
        }
        let (_, m) = crate::msg::decode(&hex(CAPTURED[1])).unwrap();
        assert_eq!(
            m,
            Message::TlvTableMod(TlvTableMod {
                command: TlvCommand::Add,
                maps: vec![
                    TlvMap {
                        class: 0xffff,
                        otype: 1,
                        len: 8,
                        index: 1
                    },
                    TlvMap {
                        class: 0xffff,
                        otype: 2,
                        len: 124,
                        index: 2
                    }
                ]
            })
        );
        let (_, m) = crate::msg::decode(&hex(CAPTURED[4])).unwrap();
        let Message::TlvTableReply(r) = m else {
            panic!()
        };
        assert_eq!(
            (r.max_option_space, r.max_fields, r.maps.len()),
            (256, 64, 3)
        );
    }

    #[test]
    fn bad_commands_lengths_and_subtypes_are_refused() {
        let mut f = hex(CAPTURED[1]);
        f[17] = 3; // command 3
        assert_eq!(decode(&f).unwrap_err(), crate::errors::NX_TLV_BAD_COMMAND);
        let mut f = hex(CAPTURED[1]);
        f.truncate(f.len() - 4);
        f[3] -= 4;
        assert_eq!(decode(&f).unwrap_err(), crate::errors::BAD_REQUEST_BAD_LEN);
        let mut f = hex(CAPTURED[2]);
        f[15] = 99; // unknown Nicira subtype
        assert_eq!(
            decode(&f).unwrap_err(),
            crate::errors::BAD_REQUEST_BAD_EXPERIMENTER
        );
        let mut f = hex(CAPTURED[2]);
        f[11] = 0x21; // another vendor
        assert_eq!(
            decode(&f).unwrap_err(),
            crate::errors::BAD_REQUEST_BAD_EXPERIMENTER
        );
    }

    #[test]
    fn nicira_errors_are_written_as_ovs_writes_them_in_1_3_and_1_0() {
        use crate::msg::ErrorMsg;
        // ALREADY_MAPPED in 1.3 (experimenter error), BAD_OPT_LEN in 1.0 (NXET_VENDOR).
        let req13 = hex("0404002000000002000023200000001800000000000000000103800400000000");
        let e = crate::errors::NX_TLV_ALREADY_MAPPED.for_version(crate::version::OFP13);
        let f = Message::Error(ErrorMsg::for_request(e, &req13))
            .encode_version(4, 2)
            .unwrap();
        assert_eq!(
            f,
            hex("0401003000000002ffff001400002320\
                 0404002000000002000023200000001800000000000000000103800400000000")
        );
        let req10 = hex("0104002000000004000023200000001800000000000000000102810600060000");
        let e = crate::errors::NX_TLV_BAD_OPT_LEN.for_version(crate::version::OFP10);
        let f = Message::Error(ErrorMsg::for_request(e, &req10))
            .encode_version(1, 4)
            .unwrap();
        assert_eq!(
            f,
            hex("0101003400000004b0c20000000023200001021001040020\
                 00000004000023200000001800000000000000000102810600060000")
        );
        for (e, c10) in [
            (crate::errors::NX_TLV_DUP_ENTRY, 532),
            (crate::errors::NX_INVALID_TLV_FIELD, 536),
            (crate::errors::NX_TLV_INVALID_DEL, 537),
        ] {
            assert_eq!(e.for_version(crate::version::OFP10).code, c10);
        }
    }
}
