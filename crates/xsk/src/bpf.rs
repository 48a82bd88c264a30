//! The XDP side, made with raw `bpf()` calls: the XSKMAP (rx queue → socket), the program
//! that redirects each frame to its queue's socket (`XDP_PASS` when the queue has none), and
//! its attachment to the interface through a bpf link.
//!
//! The program is Vireo's own six instructions, assembled here (with `xdp-steering` or
//! `xdp-mark` the longer program of `steer.rs` and `mark.rs` is loaded instead, through
//! [`load`]); every variant is named [`PROG_NAME`], and that name is how Vireo recognises its
//! own program on an interface. Attaching through a
//! bpf link ties the attachment to our fd: when vireod exits, even by `kill -9`, the kernel
//! detaches the program. A link of ours that is still attached when a port is added (another
//! vireod still alive or stopped on the same interface) is detached first; any other program
//! on the interface is left alone and the port is refused.
//!
//! Threads: control thread only.
use crate::sys::{bpf, bpf_fd, Attr};
use crate::{Error, PROG_NAME};
use std::os::fd::{AsRawFd, OwnedFd};

const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_PROG_LOAD: u32 = 5;
const BPF_PROG_GET_FD_BY_ID: u32 = 13;
const BPF_OBJ_GET_INFO_BY_FD: u32 = 15;
const BPF_LINK_CREATE: u32 = 28;
const BPF_LINK_GET_FD_BY_ID: u32 = 30;
const BPF_LINK_GET_NEXT_ID: u32 = 31;
const BPF_LINK_DETACH: u32 = 34;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_LINK_TYPE_XDP: u32 = 6;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const XDP_PASS: i32 = 2;
/// `XDP_FLAGS_SKB_MODE`: generic XDP.
pub(crate) const XDP_FLAGS_SKB_MODE: u32 = 2;
/// `XDP_FLAGS_DRV_MODE`: native (driver) XDP.
pub(crate) const XDP_FLAGS_DRV_MODE: u32 = 4;

use crate::steer::insn;

/// The program: `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);`
pub(crate) fn program(map_fd: i32) -> [u64; 6] {
    [
        insn(0x61, 2, 1, 16, 0), // r2 = *(u32 *)(r1 + 16): rx_queue_index
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd), // r1 = map (64-bit immediate, 2 slots)
        insn(0x00, 0, 0, 0, 0),
        insn(0xb7, 3, 0, 0, XDP_PASS), // r3 = XDP_PASS (action on a miss)
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP), // call bpf_redirect_map
        insn(0x95, 0, 0, 0, 0),        // exit (r0 from the call)
    ]
}

/// An XSKMAP with `entries` slots.
pub(crate) fn create_map(entries: u32) -> Result<OwnedFd, Error> {
    let mut name = [0u8; 16];
    name[..9].copy_from_slice(b"vireo_xsk");
    let mut a = Attr::new()
        .u32(0, BPF_MAP_TYPE_XSKMAP)
        .u32(4, 4)
        .u32(8, 4)
        .u32(12, entries)
        .bytes(28, &name);
    bpf_fd(BPF_MAP_CREATE, &mut a).map_err(|e| Error::os("create XSKMAP", e))
}

/// Points slot `queue` of the map at socket `sock`.
pub(crate) fn map_set(map: &OwnedFd, queue: u32, sock: i32) -> Result<(), Error> {
    let key = queue;
    let value = sock as u32;
    let mut a = Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u64(8, &key as *const u32 as u64)
        .u64(16, &value as *const u32 as u64)
        .u64(24, 0);
    bpf(BPF_MAP_UPDATE_ELEM, &mut a)
        .map(|_| ())
        .map_err(|e| Error::os(format!("put queue {queue}'s socket in the XSKMAP"), e))
}

/// Loads the program for `map`. On a verifier refusal the message carries its log.
pub(crate) fn load_program(map: &OwnedFd) -> Result<OwnedFd, Error> {
    load(&program(map.as_raw_fd()))
}

/// Loads `insns` as Vireo's XDP program. On a verifier refusal the message carries its log.
pub(crate) fn load(insns: &[u64]) -> Result<OwnedFd, Error> {
    let license = b"Dual BSD/GPL\0";
    let mut log = vec![0u8; 65536];
    let mut name = [0u8; 16];
    name[..PROG_NAME.len()].copy_from_slice(PROG_NAME.as_bytes());
    let mut a = Attr::new()
        .u32(0, BPF_PROG_TYPE_XDP)
        .u32(4, insns.len() as u32)
        .u64(8, insns.as_ptr() as u64)
        .u64(16, license.as_ptr() as u64)
        .u32(24, 1)
        .u32(28, log.len() as u32)
        .u64(32, log.as_mut_ptr() as u64)
        .bytes(48, &name)
        .u32(68, BPF_XDP);
    bpf_fd(BPF_PROG_LOAD, &mut a).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let log = String::from_utf8_lossy(&log[..end]).replace('\n', "; ");
        Error(format!("load the XDP program: {e} (verifier: {log})"))
    })
}

/// Attaches `prog` to `ifindex` in `flags` mode through a new bpf link.
pub(crate) fn attach(prog: &OwnedFd, ifindex: u32, flags: u32) -> std::io::Result<OwnedFd> {
    let mut a = Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(4, ifindex)
        .u32(8, BPF_XDP)
        .u32(12, flags);
    bpf_fd(BPF_LINK_CREATE, &mut a)
}

/// `(type, id, prog_id, ifindex-for-XDP)` of a link (the union of `bpf_link_info` starts at
/// byte 16: it holds 64-bit members).
fn link_info(link: &OwnedFd) -> std::io::Result<[u32; 4]> {
    let mut info = [0u8; 64];
    let mut a = Attr::new()
        .u32(0, link.as_raw_fd() as u32)
        .u32(4, info.len() as u32)
        .u64(8, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a)?;
    let w = |o: usize| u32::from_ne_bytes([info[o], info[o + 1], info[o + 2], info[o + 3]]);
    Ok([w(0), w(4), w(8), w(16)])
}

/// The name of program `id`.
fn prog_name(id: u32) -> std::io::Result<String> {
    let mut a = Attr::new().u32(0, id);
    let fd = bpf_fd(BPF_PROG_GET_FD_BY_ID, &mut a)?;
    let mut info = [0u8; 232];
    let mut a = Attr::new()
        .u32(0, fd.as_raw_fd() as u32)
        .u32(4, info.len() as u32)
        .u64(8, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a)?;
    let name = &info[64..80];
    let end = name.iter().position(|&b| b == 0).unwrap_or(16);
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// `(id, name)` of the program behind fd `prog`.
fn prog_info(prog: &OwnedFd) -> std::io::Result<(u32, String)> {
    let mut info = [0u8; 232];
    let mut a = Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(4, info.len() as u32)
        .u64(8, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a)?;
    let id = u32::from_ne_bytes([info[4], info[5], info[6], info[7]]);
    let name = &info[64..80];
    let end = name.iter().position(|&b| b == 0).unwrap_or(16);
    Ok((id, String::from_utf8_lossy(&name[..end]).into_owned()))
}

/// `[type, id, key_size, value_size, max_entries]` of the map behind fd `map`.
fn map_info(map: &OwnedFd) -> std::io::Result<[u32; 5]> {
    let mut info = [0u8; 96];
    let mut a = Attr::new()
        .u32(0, map.as_raw_fd() as u32)
        .u32(4, info.len() as u32)
        .u64(8, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a)?;
    let w = |o: usize| u32::from_ne_bytes([info[o], info[o + 1], info[o + 2], info[o + 3]]);
    Ok([w(0), w(4), w(8), w(12), w(16)])
}

/// The ids of the maps program `prog` uses (at most 8: Vireo's use at most 4).
fn prog_map_ids(prog: &OwnedFd) -> std::io::Result<Vec<u32>> {
    let mut ids = [0u32; 8];
    let mut info = [0u8; 232];
    // struct bpf_prog_info: nr_map_ids at 52, map_ids (a pointer) at 56.
    info[52..56].copy_from_slice(&(ids.len() as u32).to_ne_bytes());
    info[56..64].copy_from_slice(&(ids.as_mut_ptr() as u64).to_ne_bytes());
    let mut a = Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(4, info.len() as u32)
        .u64(8, info.as_mut_ptr() as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a)?;
    let n = u32::from_ne_bytes([info[52], info[53], info[54], info[55]]) as usize;
    let mut v = ids[..n.min(ids.len())].to_vec();
    if n > ids.len() {
        // More maps than Vireo's program has: report them all as unknown.
        v.push(0);
    }
    Ok(v)
}

/// What a handed-over map must be.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MapShape {
    /// For messages: `XSKMAP`, `steering map`, ...
    pub(crate) what: &'static str,
    pub(crate) kind: u32,
    pub(crate) key: u32,
    pub(crate) value: u32,
    pub(crate) entries: u32,
}

impl MapShape {
    /// The XSKMAP of `entries` slots.
    pub(crate) fn xskmap(entries: u32) -> MapShape {
        MapShape {
            what: "XSKMAP",
            kind: BPF_MAP_TYPE_XSKMAP,
            key: 4,
            value: 4,
            entries,
        }
    }
}

/// Checks fds handed over by another vireod (an upgrade): `link` is an XDP link on `ifindex`
/// running `prog`, which is Vireo's program, each map has its shape, and the program uses
/// exactly these maps (the first is the XSKMAP).
pub(crate) fn check_handed(
    link: &OwnedFd,
    prog: &OwnedFd,
    ifindex: u32,
    maps: &[(&OwnedFd, MapShape)],
) -> Result<(), Error> {
    let (id, name) = prog_info(prog).map_err(|e| Error::os("handed-over program", e))?;
    if name != PROG_NAME {
        return Err(Error(format!(
            "handed-over program {id} is {name:?}, not Vireo's"
        )));
    }
    let [kind, _, prog_id, ifi] = link_info(link).map_err(|e| Error::os("handed-over link", e))?;
    if kind != BPF_LINK_TYPE_XDP || ifi != ifindex || prog_id != id {
        return Err(Error(format!(
            "handed-over link is not program {id} on ifindex {ifindex} (type {kind}, program {prog_id}, ifindex {ifi})"
        )));
    }
    let mut ids = Vec::new();
    for (fd, want) in maps {
        let what = want.what;
        let [t, map_id, k, v, n] =
            map_info(fd).map_err(|e| Error::os(format!("handed-over {what}"), e))?;
        if [t, k, v, n] != [want.kind, want.key, want.value, want.entries] {
            return Err(Error(format!(
                "handed-over {what} is not of type {} with {}-byte keys, {}-byte values and {} entries (type {t}, {k}, {v}, {n})",
                want.kind, want.key, want.value, want.entries
            )));
        }
        ids.push(map_id);
    }
    let mut used = prog_map_ids(prog).map_err(|e| Error::os("handed-over program's maps", e))?;
    used.sort_unstable();
    ids.sort_unstable();
    if used != ids {
        return Err(Error(format!(
            "handed-over program {id} uses maps {used:?}, not the {} handed over ({ids:?})",
            maps.len()
        )));
    }
    Ok(())
}

/// XDP links attached to `ifindex`: `(link fd, program id, program name)`.
pub(crate) fn xdp_links_on(ifindex: u32) -> Vec<(OwnedFd, u32, String)> {
    let mut out = Vec::new();
    let mut id = 0u32;
    loop {
        let mut a = Attr::new().u32(0, id);
        if bpf(BPF_LINK_GET_NEXT_ID, &mut a).is_err() {
            break;
        }
        id = a.get_u32(4);
        let mut g = Attr::new().u32(0, id);
        let Ok(fd) = bpf_fd(BPF_LINK_GET_FD_BY_ID, &mut g) else {
            continue;
        };
        let Ok([kind, _, prog, ifi]) = link_info(&fd) else {
            continue;
        };
        if kind == BPF_LINK_TYPE_XDP && ifi == ifindex {
            let name = prog_name(prog).unwrap_or_default();
            out.push((fd, prog, name));
        }
    }
    out
}

/// Detaches a link (whoever holds it).
pub(crate) fn detach_link(link: &OwnedFd) -> std::io::Result<()> {
    let mut a = Attr::new().u32(0, link.as_raw_fd() as u32);
    bpf(BPF_LINK_DETACH, &mut a).map(|_| ())
}

/// Removes Vireo's own program from `ifindex` if a link of ours is still attached there.
/// Returns how many were removed; an XDP link of another program is an error naming it.
pub(crate) fn clear_ours(ifindex: u32, ifname: &str) -> Result<usize, Error> {
    let mut n = 0;
    for (fd, prog, name) in xdp_links_on(ifindex) {
        if name != PROG_NAME {
            return Err(Error(format!(
                "{ifname} already has an XDP program that is not Vireo's (id {prog}, name {name:?})"
            )));
        }
        detach_link(&fd)
            .map_err(|e| Error::os(format!("detach Vireo's old XDP program from {ifname}"), e))?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_encode_as_the_kernel_lays_them_out() {
        // r2 = *(u32 *)(r1 + 16): code 0x61, dst 2 (low nibble), src 1 (high nibble), off 16.
        assert_eq!(
            insn(0x61, 2, 1, 16, 0).to_le_bytes(),
            [0x61, 0x12, 16, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            insn(0x85, 0, 0, 0, 51).to_le_bytes(),
            [0x85, 0, 0, 0, 51, 0, 0, 0]
        );
        assert_eq!(
            insn(0xb7, 3, 0, -1, -2).to_le_bytes(),
            [0xb7, 3, 0xff, 0xff, 0xfe, 0xff, 0xff, 0xff]
        );
        let p = program(7);
        assert_eq!(p[1] >> 32, 7);
        assert_eq!(p.len(), 6);
    }

    #[test]
    fn sys_attr_offsets() {
        let a = Attr::new().u32(4, 9);
        assert_eq!(a.get_u32(4), 9);
    }
}
