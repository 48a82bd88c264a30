//! vireo-kgen's engines, for the kernel-port benchmark's many-flow rows (`kp:...:vu:N`):
//! a kernel-side UDP generator (pre-built frames of N distinct 5-tuples sent with
//! `sendmmsg` on an `AF_PACKET` socket bound to one interface, qdisc bypassed: testpmd's
//! `txonly` makes at most 256 flows) and a vhost-user sink (one virtio-net port that only
//! takes back what the switch delivers and counts it, sleeping between polls so it costs
//! the core it shares little). Both print `Tx-pps:`/`Rx-pps:` lines once a second, the
//! form vireo-bench already reads from testpmd.
//!
//! Threads: one each, the caller's (vireo-kgen pins it to its `--core`).
use crate::frontend::{Endpoint, PortConfig, VhostPort};
use crate::gen::{frame_template, FlowWriter};
use ksys::sys::{self as k, PacketOpt, VNET_HDR_LEN};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// What the generator sends.
#[derive(Clone, Debug)]
pub struct TxConfig {
    /// Interface (in the caller's namespace).
    pub iface: String,
    /// Frame length on the wire without FCS (60..=1514).
    pub len: usize,
    /// Distinct 5-tuples, sent round-robin.
    pub flows: u32,
    /// UDP destination ports the flows spread over ([`FlowWriter`]).
    pub rules: u32,
    /// Seconds to send (0: until killed).
    pub secs: f64,
}

/// What the generator did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TxReport {
    /// Frames the kernel took.
    pub sent: u64,
    /// `sendmmsg` calls that took nothing (ring or backlog full).
    pub busy: u64,
    /// Seconds sent.
    pub secs: f64,
}

/// Sends flow frames as fast as the kernel takes them; prints `Tx-pps: N` each second.
pub fn transmit(cfg: &TxConfig, out: &mut dyn std::io::Write) -> Result<TxReport, String> {
    if !(60..=1514).contains(&cfg.len) || cfg.flows == 0 {
        return Err(format!(
            "frame length must be 60..=1514 and flows > 0, not {} / {}",
            cfg.len, cfg.flows
        ));
    }
    let ifindex = k::if_index(&cfg.iface).map_err(|e| format!("{}: {e}", cfg.iface))?;
    let fd = k::packet_socket().map_err(|e| format!("packet socket: {e}"))?;
    k::set_packet_opt(fd.as_fd(), PacketOpt::VnetHdr, true).map_err(|e| e.to_string())?;
    k::set_packet_opt(fd.as_fd(), PacketOpt::QdiscBypass, true).map_err(|e| e.to_string())?;
    k::bind_packet(fd.as_fd(), ifindex).map_err(|e| format!("bind {}: {e}", cfg.iface))?;
    let template = frame_template(0, cfg.len);
    let w = FlowWriter::new(&template, cfg.rules);
    let mut frames = vec![template; k::MAX_BATCH];
    let vnets = [[0u8; VNET_HDR_LEN]; k::MAX_BATCH];
    let mut rep = TxReport::default();
    let (mut flow, mut pending) = (0u32, 0usize);
    let t0 = Instant::now();
    let (mut tick, mut at_tick) = (t0, 0u64);
    loop {
        // Refill the batch's sent head with the next flows; a partly taken batch keeps its
        // untaken tail at the front (its flows are sent next, in order).
        for f in frames.iter_mut().skip(pending) {
            w.write(f, flow);
            flow = if flow + 1 == cfg.flows { 0 } else { flow + 1 };
        }
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let n = match k::send_batch(fd.as_fd(), &vnets, &refs) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAGAIN | libc::ENOBUFS | libc::ENETDOWN)
                ) =>
            {
                0
            }
            Err(e) => return Err(format!("sendmmsg on {}: {e}", cfg.iface)),
        };
        if n == 0 {
            rep.busy += 1;
        }
        rep.sent += n as u64;
        frames.rotate_left(n);
        pending = k::MAX_BATCH - n;
        let now = Instant::now();
        if now - tick >= Duration::from_secs(1) {
            let pps = (rep.sent - at_tick) as f64 / (now - tick).as_secs_f64();
            let _ = writeln!(out, "  Tx-pps: {pps:.0}");
            let _ = out.flush();
            (tick, at_tick) = (now, rep.sent);
        }
        if cfg.secs > 0.0 && (now - t0).as_secs_f64() >= cfg.secs {
            rep.secs = (now - t0).as_secs_f64();
            return Ok(rep);
        }
    }
}

/// Listens on `sock` as a vhost-user server (the switch's port is its client), takes what
/// arrives and reposts the buffers; prints `Rx-pps: N` each second, for `secs` (0: until
/// killed). Returns the frames received.
pub fn sink(sock: &Path, secs: f64, out: &mut dyn std::io::Write) -> Result<u64, String> {
    let ep = Endpoint::new(sock, true).map_err(|e| format!("{}: {e}", sock.display()))?;
    let cfg = PortConfig {
        pairs: 1,
        ring_size: 256,
        // Deep enough for a few milliseconds at a few Mpps: the sink sleeps between polls.
        rx_ring_size: 4096,
        timeout: Duration::from_secs(60),
        mrg_rxbuf: true,
    };
    let mut port = VhostPort::open(ep, cfg).map_err(|e| format!("{}: {e}", sock.display()))?;
    let _ = writeln!(out, "sink: connected");
    let _ = out.flush();
    let mut ids: Vec<u16> = Vec::with_capacity(4096);
    let (mut total, mut at_tick) = (0u64, 0u64);
    let t0 = Instant::now();
    let mut tick = t0;
    loop {
        let shm = &port.shm;
        let qp = &mut port.qps[0];
        ids.clear();
        let n = qp.rx.reap(shm, 4096, |id, _| ids.push(id));
        for &id in &ids {
            qp.rx.push(shm, id);
        }
        if n > 0 && qp.rx.publish(shm) {
            qp.kick_rx();
        }
        total += n as u64;
        // 200 µs is a few hundred frames at the rates here, far from the ring's 4096: the
        // sink wakes a few thousand times a second and leaves its core to the sender.
        if n < 1024 {
            std::thread::sleep(Duration::from_micros(200));
        }
        let now = Instant::now();
        if now - tick >= Duration::from_secs(1) {
            let pps = (total - at_tick) as f64 / (now - tick).as_secs_f64();
            let _ = writeln!(out, "  Rx-pps: {pps:.0}");
            let _ = out.flush();
            (tick, at_tick) = (now, total);
        }
        if secs > 0.0 && (now - t0).as_secs_f64() >= secs {
            return Ok(total);
        }
    }
}

/// What copying one frame costs when it is in L1 and when it must come from DRAM (this
/// node's): `(len, hot ns, cold ns)` per length. A PMD on the wrong NUMA node copies every
/// frame from the other node's memory; this measures the local part of that cost (the cold
/// figure less the hot one), the only part a one-node machine can show. Cold frames are
/// 2 KiB slots of a 1 GiB buffer visited in a scrambled order (an odd multiplier modulo the
/// slot count), so neither the caches nor the prefetcher hold the next one.
pub fn copy_cost(lens: &[usize]) -> Vec<(usize, f64, f64)> {
    const SLOT: usize = 2048;
    let region = 1usize << 30;
    let n = region / SLOT;
    let buf = vec![1u8; region];
    let mut dst = [0u8; SLOT];
    let mut out = Vec::new();
    for &len in lens {
        let len = len.clamp(1, SLOT);
        let mut per = [0.0f64; 2];
        for (cold, slot) in per.iter_mut().enumerate() {
            let iters = if cold == 1 { n } else { 4_000_000 };
            let mut sum = 0u64;
            let t0 = Instant::now();
            for i in 0..iters {
                let k = if cold == 1 {
                    i.wrapping_mul(2_654_435_761) % n
                } else {
                    i & 15
                };
                let src = &buf[k * SLOT..k * SLOT + len];
                dst[..len].copy_from_slice(std::hint::black_box(src));
                sum += u64::from(std::hint::black_box(&dst)[len - 1]);
            }
            *slot = t0.elapsed().as_secs_f64() * 1e9 / iters as f64;
            std::hint::black_box(sum);
        }
        out.push((len, per[0], per[1]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused_before_any_socket() {
        let mut cfg = TxConfig {
            iface: "lo".into(),
            len: 59,
            flows: 1,
            rules: 16,
            secs: 0.1,
        };
        let mut out = Vec::new();
        assert!(transmit(&cfg, &mut out).unwrap_err().contains("60..=1514"));
        cfg.len = 60;
        cfg.flows = 0;
        assert!(transmit(&cfg, &mut out).is_err());
        cfg.flows = 1;
        cfg.iface = "no-such-if0".into();
        assert!(transmit(&cfg, &mut out)
            .unwrap_err()
            .contains("no-such-if0"));
    }
}
