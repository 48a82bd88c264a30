//! The per-frame cost of Vireo's XDP program variants as the kernel measures it
//! (`BPF_PROG_TEST_RUN` with a repeat count: the average run time in ns over the repeats, on
//! the calling CPU, no driver or socket involved), for benchmarks and tests. The maps are
//! made and filled here: the frame's destination MAC steered to target 0 and its 5-tuple
//! marked, so the measured path is the one of a steered, marked frame (up to the redirect:
//! no socket is bound, so the program ends in its fallback, `XDP_PASS`).
//!
//! Threads: whichever calls it (it blocks for the run).
use crate::mark::{FiveTuple, MarkMap};
use crate::steer::{self, SteerArgs, SteerMaps};
use crate::sys::{bpf, Attr};
use crate::{bpf as progs, Error};
use std::os::fd::AsRawFd;

const BPF_PROG_TEST_RUN: u32 = 10;

/// What one measurement gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramCost {
    /// The program's return value on the frame (2 = `XDP_PASS`).
    pub retval: u32,
    /// Average run time per frame, in ns (the kernel's figure).
    pub ns_per_frame: u32,
}

/// Runs the program variant (`steering`, `marks`; neither = the plain redirect program) on
/// `frame` `repeat` times in the kernel.
pub fn program_cost(
    steering: bool,
    marks: bool,
    frame: &[u8],
    repeat: u32,
) -> Result<ProgramCost, Error> {
    let (queues, targets) = (1u32, u32::from(steering));
    let xsks = progs::create_map(queues * (1 + targets))?;
    let steer = if steering {
        let m = SteerMaps::create(queues, targets)?;
        if let Ok(mac) = <[u8; 6]>::try_from(frame.get(..6).unwrap_or_default()) {
            m.set(mac, 0)?;
        }
        Some(m)
    } else {
        None
    };
    let mark = if marks {
        let m = MarkMap::create()?;
        if let Some(t) = five_tuple(frame) {
            m.set(&t, 5)?;
        }
        Some(m)
    } else {
        None
    };
    let prog = if steering || marks {
        let args = steer.as_ref().map(|m| SteerArgs {
            steer: m.steer.as_raw_fd(),
            stats: m.stats.as_raw_fd(),
            queues,
            targets,
        });
        let insns = steer::program(
            xsks.as_raw_fd(),
            1 + targets,
            args.as_ref(),
            mark.as_ref().map(|m| m.fd.as_raw_fd()),
        );
        progs::load(&insns)?
    } else {
        progs::load_program(&xsks)?
    };
    let mut out = vec![0u8; frame.len() + 256];
    let mut a = Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(8, frame.len() as u32)
        .u32(12, out.len() as u32)
        .u64(16, frame.as_ptr() as u64)
        .u64(24, out.as_mut_ptr() as u64)
        .u32(32, repeat);
    bpf(BPF_PROG_TEST_RUN, &mut a).map_err(|e| Error::os("BPF_PROG_TEST_RUN", e))?;
    Ok(ProgramCost {
        retval: a.get_u32(4),
        ns_per_frame: a.get_u32(36),
    })
}

/// Runs the marks-only program once on `frame` with `marks` in its mark map: its return value
/// and the bytes it hands on (the kernel returns the metadata area followed by the frame).
pub fn program_meta_run(frame: &[u8], marks: &[(FiveTuple, u32)]) -> Result<(u32, Vec<u8>), Error> {
    let xsks = progs::create_map(1)?;
    let map = MarkMap::create()?;
    for (t, m) in marks {
        map.set(t, *m)?;
    }
    let insns = steer::program(xsks.as_raw_fd(), 1, None, Some(map.fd.as_raw_fd()));
    let prog = progs::load(&insns)?;
    let mut out = vec![0u8; frame.len() + 256];
    let mut a = Attr::new()
        .u32(0, prog.as_raw_fd() as u32)
        .u32(8, frame.len() as u32)
        .u32(12, out.len() as u32)
        .u64(16, frame.as_ptr() as u64)
        .u64(24, out.as_mut_ptr() as u64)
        .u32(32, 1);
    bpf(BPF_PROG_TEST_RUN, &mut a).map_err(|e| Error::os("BPF_PROG_TEST_RUN", e))?;
    out.truncate(a.get_u32(12) as usize);
    Ok((a.get_u32(4), out))
}

/// The IPv4 TCP/UDP 5-tuple of a frame (no options), if it has one.
fn five_tuple(f: &[u8]) -> Option<FiveTuple> {
    if f.len() < 38 || f[12..14] != [8, 0] || f[14] != 0x45 || !matches!(f[23], 6 | 17) {
        return None;
    }
    Some(FiveTuple {
        src: [f[26], f[27], f[28], f[29]],
        dst: [f[30], f[31], f[32], f[33]],
        sport: u16::from_be_bytes([f[34], f[35]]),
        dport: u16::from_be_bytes([f[36], f[37]]),
        proto: f[23],
    })
}
