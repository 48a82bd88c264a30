//! XDP-side steering: the MAC→queue hash map, the per-queue counter array and the longer
//! XDP program that uses them (hand-assembled eBPF, like the plain redirect program in
//! `bpf.rs`), plus the control-plane calls that fill the map and read the counters.
//!
//! The program, per frame:
//! 1. counts the frame as *arrived* on its rx queue (`stats[q]`);
//! 2. if the frame holds at least 6 bytes (checked against `data_end`, or the verifier
//!    refuses the load), copies its destination MAC to the stack and looks it up in the
//!    steering map (`MAC → target`);
//! 3. on a hit (a steering target `t`), `bpf_redirect_map(xsks, slot, 0)` where `slot` is
//!    steering socket `t` *of the receiving queue*: the kernel delivers a redirected frame only
//!    to a socket bound to the queue it arrived on (`xsk_rcv_check`), so steering sockets are
//!    extra sockets on each queue sharing its UMEM (`XDP_SHARED_UMEM`), polled by PMDs on other
//!    NUMA nodes. When the slot holds a socket, counts the frame as *steered* there and returns
//!    `XDP_REDIRECT`;
//! 4. otherwise (no 6 bytes, no entry, no socket) it does what the plain program does: redirect
//!    to the receiving queue's socket, `XDP_PASS` when it has none.
//!
//! Only vireod writes the maps (their fds are never pinned or passed on); a frame can only
//! choose which key is looked up, and every packet read is bounds-checked.
//!
//! Threads: control thread only (map updates and counter reads are `bpf()` calls).
use crate::bpf::MapShape;
use crate::sys::{bpf, bpf_fd, Attr};
use crate::Error;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};

const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_LOOKUP_ELEM: u32 = 1;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_MAP_DELETE_ELEM: u32 = 3;
const BPF_MAP_GET_NEXT_KEY: u32 = 4;
pub(crate) const BPF_MAP_TYPE_HASH: u32 = 1;
pub(crate) const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = 1;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;
const XDP_REDIRECT: i32 = 4;

/// Most MAC entries the steering map holds.
pub const STEER_MAP_ENTRIES: u32 = 4096;

/// A tiny assembler: instructions plus forward jumps to named labels.
#[derive(Default)]
pub(crate) struct Asm {
    code: Vec<u64>,
    jumps: Vec<(usize, &'static str)>,
    labels: HashMap<&'static str, usize>,
}

/// One eBPF instruction (`struct bpf_insn`) as its 8 bytes.
pub(crate) fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(code)
        | u64::from(dst & 0xf | (src & 0xf) << 4) << 8
        | u64::from(off as u16) << 16
        | u64::from(imm as u32) << 32
}

impl Asm {
    pub(crate) fn op(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) -> &mut Self {
        self.code.push(insn(code, dst, src, off, imm));
        self
    }
    /// `dst = src` (64-bit).
    pub(crate) fn mov(&mut self, dst: u8, src: u8) -> &mut Self {
        self.op(0xbf, dst, src, 0, 0)
    }
    /// `dst = imm` (64-bit, sign-extended).
    pub(crate) fn movi(&mut self, dst: u8, imm: i32) -> &mut Self {
        self.op(0xb7, dst, 0, 0, imm)
    }
    /// `dst += imm`.
    pub(crate) fn addi(&mut self, dst: u8, imm: i32) -> &mut Self {
        self.op(0x07, dst, 0, 0, imm)
    }
    /// `dst = map` (a 64-bit immediate over two slots, the map named by its fd).
    pub(crate) fn ld_map(&mut self, dst: u8, map_fd: i32) -> &mut Self {
        self.op(0x18, dst, BPF_PSEUDO_MAP_FD, 0, map_fd);
        self.op(0, 0, 0, 0, 0)
    }
    pub(crate) fn call(&mut self, helper: i32) -> &mut Self {
        self.op(0x85, 0, 0, 0, helper)
    }
    pub(crate) fn exit(&mut self) -> &mut Self {
        self.op(0x95, 0, 0, 0, 0)
    }
    /// A jump instruction whose offset is set when `label` is placed.
    pub(crate) fn jump(
        &mut self,
        code: u8,
        dst: u8,
        src: u8,
        imm: i32,
        label: &'static str,
    ) -> &mut Self {
        self.jumps.push((self.code.len(), label));
        self.op(code, dst, src, 0, imm)
    }
    pub(crate) fn label(&mut self, name: &'static str) -> &mut Self {
        self.labels.insert(name, self.code.len());
        self
    }
    /// The instructions with every jump resolved.
    pub(crate) fn finish(mut self) -> Vec<u64> {
        for &(at, label) in &self.jumps {
            let to = self.labels[label];
            let off = (to as i64 - at as i64 - 1) as i16;
            let w = self.code[at];
            self.code[at] = w & !(0xffff << 16) | u64::from(off as u16) << 16;
        }
        self.code
    }

    /// `stats[r1] += 1` for the key in r1 (clobbers r0-r5). An out-of-range key is a miss.
    pub(crate) fn count(&mut self, stats_fd: i32, skip: &'static str) -> &mut Self {
        self.op(0x63, 10, 1, -16, 0) // *(u32 *)(r10 - 16) = r1: the key on the stack
            .mov(2, 10)
            .addi(2, -16) // r2 = &key
            .ld_map(1, stats_fd)
            .call(BPF_FUNC_MAP_LOOKUP_ELEM)
            .jump(0x15, 0, 0, 0, skip) // if r0 == NULL skip
            .movi(1, 1)
            .op(0xdb, 0, 1, 0, 0) // lock *(u64 *)(r0 + 0) += r1
            .label(skip)
    }
}

/// What the steering section of the program uses.
pub(crate) struct SteerArgs {
    /// The MAC → target hash map.
    pub(crate) steer: i32,
    /// The counter array.
    pub(crate) stats: i32,
    /// Interface queues.
    pub(crate) queues: u32,
    /// Steering sockets per queue.
    pub(crate) targets: u32,
}

/// Vireo's XDP program with steering and/or metadata marks, over the XSKMAP `xsks` whose slot
/// `q·per_queue` is queue `q`'s own socket and `q·per_queue + 1 + t` its steering socket `t`.
/// With `steer`: the maps `steer` (MAC → target) and `stats` (`stats[q]` frames arrived on
/// queue `q`, `stats[queues + slot]` frames steered to a slot). With `mark`: the metadata
/// section of `mark.rs` first. Registers: r6 = ctx, r7 = rx queue, r8 = target, then slot.
pub(crate) fn program(
    xsks: i32,
    per_queue: u32,
    steer: Option<&SteerArgs>,
    mark: Option<i32>,
) -> Vec<u64> {
    let per_queue = per_queue as i32;
    let mut a = Asm::default();
    // Save the context and read the receiving queue (struct xdp_md: rx_queue_index at 16).
    a.mov(6, 1).op(0x61, 7, 6, 16, 0);
    if let Some(m) = mark {
        crate::mark::emit(&mut a, m);
    }
    if let Some(st) = steer {
        steering(&mut a, xsks, per_queue, st);
    }
    // Fallback, as the plain program: bpf_redirect_map(xsks, rxq * per_queue, XDP_PASS).
    a.label("fallback")
        .ld_map(1, xsks)
        .mov(2, 7)
        .op(0x27, 2, 0, 0, per_queue) // r2 *= per_queue
        .movi(3, XDP_PASS)
        .call(BPF_FUNC_REDIRECT_MAP)
        .exit();
    a.finish()
}

/// The steering section: returns `XDP_REDIRECT` for a steered frame, else goes to
/// `fallback`.
fn steering(a: &mut Asm, xsks: i32, per_queue: i32, st: &SteerArgs) {
    let (steer, stats, queues, targets) = (st.steer, st.stats, st.queues, st.targets);
    // stats[rxq] += 1: arrived here.
    a.mov(1, 7).count(stats, "arrived_done");
    // r2 = data, r3 = data_end; fall back unless data + 6 <= data_end (the verifier refuses
    // the packet reads below without this check).
    a.op(0x61, 2, 6, 0, 0)
        .op(0x61, 3, 6, 4, 0)
        .mov(4, 2)
        .addi(4, 6)
        .jump(0x2d, 4, 3, 0, "fallback"); // if r4 > r3 goto fallback

    // Key on the stack at r10 - 8: the 6 destination MAC bytes, then two zero bytes.
    a.op(0x61, 4, 2, 0, 0) // r4 = *(u32 *)(data + 0)
        .op(0x63, 10, 4, -8, 0) // *(u32 *)(r10 - 8) = r4
        .op(0x69, 4, 2, 4, 0) // r4 = *(u16 *)(data + 4)
        .op(0x6b, 10, 4, -4, 0) // *(u16 *)(r10 - 4) = r4
        .op(0x6a, 10, 0, -2, 0); // *(u16 *)(r10 - 2) = 0

    // r0 = steer[key]; no entry: fall back.
    a.mov(2, 10)
        .addi(2, -8)
        .ld_map(1, steer)
        .call(BPF_FUNC_MAP_LOOKUP_ELEM)
        .jump(0x15, 0, 0, 0, "fallback")
        .op(0x61, 8, 0, 0, 0) // r8 = *(u32 *)r0: the target
        .jump(0x35, 8, 0, targets as i32, "fallback"); // if r8 >= targets goto fallback

    // r8 = rxq * per_queue + 1 + target: the slot of this queue's steering socket.
    a.mov(1, 7)
        .op(0x27, 1, 0, 0, per_queue)
        .op(0x0f, 8, 1, 0, 0)
        .addi(8, 1);
    // bpf_redirect_map(xsks, r8, 0): XDP_REDIRECT only if the slot holds a socket.
    a.ld_map(1, xsks)
        .mov(2, 8)
        .movi(3, 0)
        .call(BPF_FUNC_REDIRECT_MAP)
        .jump(0x55, 0, 0, XDP_REDIRECT, "fallback"); // if r0 != XDP_REDIRECT goto fallback

    // stats[queues + slot] += 1: steered there; return XDP_REDIRECT.
    a.mov(1, 8)
        .addi(1, queues as i32)
        .count(stats, "steered_done");
    a.movi(0, XDP_REDIRECT).exit();
}

/// A map of `kind` with the given key/value sizes and entries, named `name` (≤ 15 bytes).
pub(crate) fn create_map(
    kind: u32,
    key: u32,
    value: u32,
    entries: u32,
    name: &str,
) -> Result<OwnedFd, Error> {
    let mut n = [0u8; 16];
    n[..name.len()].copy_from_slice(name.as_bytes());
    let mut a = Attr::new()
        .u32(0, kind)
        .u32(4, key)
        .u32(8, value)
        .u32(12, entries)
        .bytes(28, &n);
    bpf_fd(BPF_MAP_CREATE, &mut a).map_err(|e| Error::os(format!("create map {name}"), e))
}

/// One map entry: key and value bytes.
pub(crate) type Entry = (Vec<u8>, Vec<u8>);

/// Every `(key, value)` of the hash map `fd` (`key`- and `value`-byte entries), read with
/// `BPF_MAP_GET_NEXT_KEY` and lookups: at most `max` entries (a map changed meanwhile may
/// skip or repeat one; only vireod writes these maps, on the thread that reads them).
pub(crate) fn map_entries(
    fd: &OwnedFd,
    key: usize,
    value: usize,
    max: usize,
) -> Result<Vec<Entry>, Error> {
    let mut out = Vec::new();
    let mut prev: Option<Vec<u8>> = None;
    while out.len() < max {
        let mut next = vec![0u8; key];
        let mut a = Attr::new()
            .u32(0, fd.as_raw_fd() as u32)
            .u64(8, prev.as_ref().map_or(0, |p| p.as_ptr() as u64))
            .u64(16, next.as_mut_ptr() as u64);
        match bpf(BPF_MAP_GET_NEXT_KEY, &mut a) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => break,
            Err(e) => return Err(Error::os("read a map's keys", e)),
        }
        let mut v = vec![0u8; value];
        let mut a = Attr::new()
            .u32(0, fd.as_raw_fd() as u32)
            .u64(8, next.as_ptr() as u64)
            .u64(16, v.as_mut_ptr() as u64);
        // An entry deleted between the two calls is skipped.
        if bpf(BPF_MAP_LOOKUP_ELEM, &mut a).is_ok() {
            out.push((next.clone(), v));
        }
        prev = Some(next);
    }
    Ok(out)
}

/// The two maps of steering.
#[derive(Debug)]
pub(crate) struct SteerMaps {
    pub(crate) steer: OwnedFd,
    pub(crate) stats: OwnedFd,
    queues: u32,
    targets: u32,
}

fn mac_key(mac: [u8; 6]) -> [u8; 8] {
    let mut k = [0u8; 8];
    k[..6].copy_from_slice(&mac);
    k
}

impl SteerMaps {
    /// The shapes of the steering map and the counter array of a device with `queues`
    /// queues and `targets` steering sockets per queue.
    pub(crate) fn shapes(queues: u32, targets: u32) -> [MapShape; 2] {
        let slots = queues * (targets + 1);
        [
            MapShape {
                what: "steering map",
                kind: BPF_MAP_TYPE_HASH,
                key: 8,
                value: 4,
                entries: STEER_MAP_ENTRIES,
            },
            MapShape {
                what: "steering counters",
                kind: BPF_MAP_TYPE_ARRAY,
                key: 4,
                value: 8,
                entries: queues + slots,
            },
        ]
    }

    /// The maps handed over by another vireod (checked by the caller against [`Self::shapes`]).
    pub(crate) fn adopt(steer: OwnedFd, stats: OwnedFd, queues: u32, targets: u32) -> SteerMaps {
        SteerMaps {
            steer,
            stats,
            queues,
            targets,
        }
    }

    /// Every entry of the steering map: MAC → target.
    pub(crate) fn entries(&self) -> Result<Vec<([u8; 6], u32)>, Error> {
        Ok(map_entries(&self.steer, 8, 4, STEER_MAP_ENTRIES as usize)?
            .into_iter()
            .map(|(k, v)| {
                let mut mac = [0u8; 6];
                mac.copy_from_slice(&k[..6]);
                (mac, u32::from_ne_bytes([v[0], v[1], v[2], v[3]]))
            })
            .collect())
    }

    pub(crate) fn create(queues: u32, targets: u32) -> Result<SteerMaps, Error> {
        let slots = queues * (targets + 1);
        Ok(SteerMaps {
            steer: create_map(BPF_MAP_TYPE_HASH, 8, 4, STEER_MAP_ENTRIES, "vireo_steer")?,
            stats: create_map(BPF_MAP_TYPE_ARRAY, 4, 8, queues + slots, "vireo_steer_st")?,
            queues,
            targets,
        })
    }

    /// Steers frames to `mac` to steering socket `target` of their queue.
    pub(crate) fn set(&self, mac: [u8; 6], target: u32) -> Result<(), Error> {
        if target >= self.targets {
            return Err(Error(format!(
                "steering target {target} out of range (the port has {})",
                self.targets
            )));
        }
        let key = mac_key(mac);
        let mut a = Attr::new()
            .u32(0, self.steer.as_raw_fd() as u32)
            .u64(8, key.as_ptr() as u64)
            .u64(16, &target as *const u32 as u64)
            .u64(24, 0);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a)
            .map(|_| ())
            .map_err(|e| Error::os("update the steering map", e))
    }

    /// Removes `mac`; true if it was there.
    pub(crate) fn del(&self, mac: [u8; 6]) -> bool {
        let key = mac_key(mac);
        let mut a = Attr::new()
            .u32(0, self.steer.as_raw_fd() as u32)
            .u64(8, key.as_ptr() as u64);
        bpf(BPF_MAP_DELETE_ELEM, &mut a).is_ok()
    }

    fn get(&self, k: u32) -> u64 {
        let mut v = 0u64;
        let mut a = Attr::new()
            .u32(0, self.stats.as_raw_fd() as u32)
            .u64(8, &k as *const u32 as u64)
            .u64(16, &mut v as *mut u64 as u64);
        bpf(BPF_MAP_LOOKUP_ELEM, &mut a).map_or(0, |_| v)
    }

    /// Per queue: frames arrived, and frames steered to each of its steering sockets.
    pub(crate) fn stats(&self) -> Vec<(u64, Vec<u64>)> {
        let per = self.targets + 1;
        (0..self.queues)
            .map(|q| {
                let steered = (0..self.targets)
                    .map(|t| self.get(self.queues + q * per + 1 + t))
                    .collect();
                (self.get(q), steered)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_resolve_forward() {
        let st = SteerArgs {
            steer: 4,
            stats: 5,
            queues: 2,
            targets: 2,
        };
        let p = program(3, 3, Some(&st), Some(6));
        // Every jump lands inside the program and after itself.
        for (i, w) in p.iter().enumerate() {
            let code = (*w & 0xff) as u8;
            if matches!(code, 0x15 | 0x55 | 0x2d | 0x35) {
                let off = ((*w >> 16) & 0xffff) as u16 as i16;
                assert!(off >= 0, "backward jump at {i}");
                assert!(i + 1 + (off as usize) < p.len(), "jump past the end at {i}");
            }
        }
        assert_eq!(p.last().copied(), Some(insn(0x95, 0, 0, 0, 0)));
    }
}
