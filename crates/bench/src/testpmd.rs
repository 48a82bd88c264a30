//! DPDK testpmd in the two roles it plays here: the reference generator (virtio-user, io or
//! mac forwarding with `--tx-first`, or open-loop `flowgen` for scenarios that drop;
//! forwarding lcore on the generator core) and the raw upper-bound "switch" (vhost PMD in io
//! mode, forwarding lcore on the switch core).
//!
//! Threads: vireo-bench's main thread (testpmd runs as a child process).
use crate::contender::Contender;
use crate::gen::mac;
use crate::parse::{testpmd_aggregate_rx_pps, testpmd_aggregate_tx_pps, PmdCycles};
use crate::proc::{command, CpuShare, Proc};
use crate::scenario::{Kind, Scenario};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The testpmd binary.
pub const TESTPMD: &str = "dpdk-testpmd";

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// EAL arguments common to both roles: no PCI, no hugepages, the lcore layout.
fn eal(lcores: &str, prefix: &str) -> Vec<String> {
    [
        "--lcores",
        lcores,
        "-n",
        "1",
        "--no-pci",
        "--no-huge",
        "-m",
        "1024",
        "--file-prefix",
        prefix,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn fwd_args(mode: &str, queues: u16) -> Vec<String> {
    let q = queues.to_string();
    [
        "--nb-cores=1",
        &format!("--forward-mode={mode}"),
        "--txd=1024",
        "--rxd=1024",
        "--total-num-mbufs=16384",
        "--stats-period=1",
        &format!("--rxq={q}"),
        &format!("--txq={q}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Arguments for the generator: ports on `socks`, main lcore idle on `switch_core`,
/// forwarding lcore on `gen_core`; `server` when the switch is a vhost-user client.
pub fn generator_args(
    socks: &[PathBuf; 2],
    server: bool,
    sc: &Scenario,
    gen_core: usize,
    switch_core: usize,
) -> Vec<String> {
    let mut a = eal(&format!("0@{switch_core},1@{gen_core}"), "vbgen");
    for (i, s) in socks.iter().enumerate() {
        let srv = if server { ",server=1" } else { "" };
        let packed = if sc.packed { ",packed_vq=1" } else { "" };
        a.push("--vdev".into());
        a.push(format!(
            "net_virtio_user{i},mac={},path={},queues={}{srv}{packed}",
            mac_str(mac(i)),
            s.display(),
            sc.queues
        ));
    }
    a.push("--".into());
    let mode = match (sc.open, sc.kind) {
        (true, _) => "flowgen",
        (false, Kind::Normal) => "mac",
        (false, _) => "io",
    };
    a.extend(fwd_args(mode, sc.queues));
    if sc.open {
        // One flow, sent continuously on both ports; what comes back is counted and freed.
        a.push("--flowgen-flows=1".into());
    } else {
        a.push("--tx-first".into());
    }
    a.push(format!("--txpkts={}", sc.size));
    if sc.kind == Kind::Normal {
        a.push(format!("--eth-peer=0,{}", mac_str(mac(1))));
        a.push(format!("--eth-peer=1,{}", mac_str(mac(0))));
    }
    a
}

/// Arguments for testpmd as the switch: vhost PMD servers at `socks`, both lcores on
/// `switch_core` (the main one sleeps between stats reports).
pub fn switch_args(socks: &[PathBuf; 2], queues: u16, switch_core: usize) -> Vec<String> {
    let mut a = eal(&format!("0@{switch_core},1@{switch_core}"), "vbsw");
    for (i, s) in socks.iter().enumerate() {
        a.push("--vdev".into());
        a.push(format!(
            "net_vhost{i},iface={},queues={queues}",
            s.display()
        ));
    }
    a.push("--".into());
    a.extend(fwd_args("io", queues));
    a
}

/// With `--rt`, gives the switch's busy-polling threads SCHED_RR now that traffic flows
/// (some switches only spin once their ports are up).
pub fn realtime_switch(sw: &dyn Contender) {
    if let (true, Some(pid)) = (crate::proc::realtime(), sw.pid()) {
        let t = crate::proc::realtime_pollers(pid);
        eprintln!(
            "vireo-bench: {}: SCHED_RR for polling threads {t:?}",
            sw.name()
        );
    }
}

/// The testpmd generator's measurement: aggregate Rx-pps per reporting period.
pub struct GenMeasure {
    /// Aggregate packets/s, one value per second of the window.
    pub samples: Vec<f64>,
    /// Share of a core the switch process got during the window.
    pub switch_cpu: Option<f64>,
    /// Share of a core the generator got during the window.
    pub gen_cpu: Option<f64>,
    /// Aggregate Tx-pps per reporting period: what the generator put into the switch's
    /// rings (the offered load of an open-loop run).
    pub tx_samples: Vec<f64>,
}

impl GenMeasure {
    /// The median of the samples, packets/s.
    pub fn median(&self) -> Option<f64> {
        crate::stats::summarize(&self.samples).map(|s| s.median)
    }

    /// The median of the Tx samples, packets/s.
    pub fn tx_median(&self) -> Option<f64> {
        crate::stats::summarize(&self.tx_samples).map(|s| s.median)
    }
}

/// The generator's arguments for a start held until the switch's links are up: interactive
/// (`-i`), without `--tx-first` (sent as `start tx_first` later) and `--stats-period` (only
/// for non-interactive runs: statistics are asked for with `show port stats all`).
pub fn interactive_args(args: &[String]) -> Vec<String> {
    let mut out: Vec<String> = args
        .iter()
        .filter(|a| *a != "--tx-first" && !a.starts_with("--stats-period"))
        .cloned()
        .collect();
    if let Some(i) = out.iter().position(|a| a == "--") {
        out.insert(i + 1, "-i".into());
    }
    out
}

/// The generator's process and, when its start is held, the thread asking for statistics.
struct Gen {
    p: Proc,
    stats: Option<(
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        std::thread::JoinHandle<()>,
    )>,
}

impl Gen {
    /// Non-interactive: traffic starts as soon as testpmd's ports are up.
    fn start_now(args: &[String], dir: &Path) -> Result<Gen, String> {
        let p = Proc::spawn(
            "testpmd generator",
            command(TESTPMD).args(args),
            &dir.join("gen.log"),
        )?;
        Ok(Gen { p, stats: None })
    }

    /// Interactive: waits for testpmd's prompt and then for both of the switch's links to be
    /// up (testpmd's own link check only sees its side of the vhost-user connection; a first
    /// burst sent to a port the switch has not marked up yet is dropped there, and that
    /// closed loop never restarts), then `start tx_first`, and asks for statistics every
    /// second (the same `NIC statistics` blocks `--stats-period` prints).
    fn start_when_links_up(
        args: &[String],
        dir: &Path,
        sw: &mut dyn Contender,
    ) -> Result<Gen, String> {
        use std::io::Write;
        let (mut p, mut stdin) = Proc::spawn_piped(
            "testpmd generator",
            command(TESTPMD).args(interactive_args(args)),
            &dir.join("gen.log"),
        )?;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !p.log_text().contains("testpmd>") {
            if !p.running() || std::time::Instant::now() > deadline {
                return Err(format!("testpmd generator: no prompt: {}", p.log_tail(8)));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        while sw.links_up() != Some(true) {
            if !p.running() || std::time::Instant::now() > deadline {
                return Err(format!(
                    "the switch's vu0/vu1 links are not both up: {}",
                    p.log_tail(8)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        stdin
            .write_all(b"start tx_first\n")
            .map_err(|e| format!("testpmd generator: {e}"))?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let t = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if stdin.write_all(b"show port stats all\n").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            let _ = stdin.write_all(b"stop\nquit\n");
        });
        Ok(Gen {
            p,
            stats: Some((stop, t)),
        })
    }

    fn stop(mut self) -> Proc {
        if let Some((flag, t)) = self.stats.take() {
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = t.join();
        }
        self.p.stop(Duration::from_secs(5));
        self.p
    }
}

/// Starts the generator, waits `warmup`, clears the switch's PMD statistics, measures for
/// `secs`, reads them, stops the generator and returns the window's samples and the switch's
/// figures. `wait_links`: hold the traffic until the switch says both links are up (see
/// [`Gen::start_when_links_up`]; only for a switch that can tell, [`Contender::links_up`]).
pub fn run_generator(
    args: &[String],
    dir: &Path,
    warmup: Duration,
    secs: f64,
    sw: &mut dyn Contender,
    wait_links: bool,
) -> Result<(GenMeasure, Option<PmdCycles>), String> {
    let mut p = if wait_links && sw.links_up().is_some() {
        Gen::start_when_links_up(args, dir, sw)?
    } else {
        Gen::start_now(args, dir)?
    };
    // Start-up (EAL, mempool, vhost-user handshake) takes seconds on a loaded machine: wait
    // for the first statistics report before the warm-up starts.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while p.p.running()
        && std::time::Instant::now() < deadline
        && !p.p.log_text().contains("NIC statistics")
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(warmup);
    if !p.p.running() {
        return Err(format!("testpmd generator exited: {}", p.p.log_tail(8)));
    }
    realtime_switch(sw);
    sw.clear_stats();
    let sw_share = sw.pid().and_then(CpuShare::start);
    let gen_share = CpuShare::start(p.p.pid());
    let from = p.p.log_len() as usize;
    // At least two reporting periods, so that one falls wholly inside the window.
    std::thread::sleep(Duration::from_secs_f64(secs.max(2.0)));
    let switch_cpu = sw_share.and_then(|s| s.end());
    let gen_cpu = gen_share.and_then(|s| s.end());
    let pmd = sw.pmd_cycles();
    let to = p.p.log_len() as usize;
    let p = p.stop();
    let log = p.log_text();
    let window = log
        .get(from.min(log.len())..to.min(log.len()))
        .unwrap_or("");
    let mut samples = testpmd_aggregate_rx_pps(window);
    let mut tx_samples = testpmd_aggregate_tx_pps(window);
    if samples.is_empty() {
        samples = testpmd_aggregate_rx_pps(&log);
        tx_samples = testpmd_aggregate_tx_pps(&log);
    }
    if samples.is_empty() {
        return Err(format!(
            "no statistics from the testpmd generator: {}",
            p.log_tail(8)
        ));
    }
    let m = GenMeasure {
        samples,
        switch_cpu,
        gen_cpu,
        tx_samples,
    };
    Ok((m, pmd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interactive_generator_holds_tx_first_and_asks_for_statistics() {
        let socks = [PathBuf::from("/r/vu0.sock"), PathBuf::from("/r/vu1.sock")];
        let sc = Scenario::parse("nvxlan:64").unwrap();
        let a = generator_args(&socks, true, &sc, 1, 0);
        assert!(a.iter().any(|x| x == "--tx-first"));
        let i = interactive_args(&a);
        assert!(!i
            .iter()
            .any(|x| x == "--tx-first" || x.starts_with("--stats-period")));
        let dash = i.iter().position(|x| x == "--").unwrap();
        assert_eq!(i[dash + 1], "-i");
        assert_eq!(i.len(), a.len() - 1);
        let show =
            r#"{"bridges":[{"ports":[{"name":"vu0","link":"up"},{"name":"vu1","link":"down"}]}]}"#;
        assert!(!crate::contender::vireo_links_up(show));
        assert!(crate::contender::vireo_links_up(
            &show.replace("down", "up")
        ));
    }

    #[test]
    fn generator_and_switch_command_lines() {
        let socks = [PathBuf::from("/r/vu0.sock"), PathBuf::from("/r/vu1.sock")];
        let sc = Scenario::parse("normal:256:2q").unwrap();
        let a = generator_args(&socks, true, &sc, 1, 0).join(" ");
        assert!(
            a.starts_with("--lcores 0@0,1@1 -n 1 --no-pci --no-huge"),
            "{a}"
        );
        assert!(
            a.contains("net_virtio_user1,mac=02:00:00:00:00:02,path=/r/vu1.sock,queues=2,server=1"),
            "{a}"
        );
        assert!(
            a.contains("--forward-mode=mac") && a.contains("--eth-peer=0,02:00:00:00:00:02"),
            "{a}"
        );
        assert!(
            a.contains("--txpkts=256") && a.contains("--rxq=2") && a.contains("--tx-first"),
            "{a}"
        );
        assert!(!a.contains("packed_vq"), "{a}");
        let p = Scenario::parse("p2p:64:packed").unwrap();
        let a = generator_args(&socks, false, &p, 1, 0).join(" ");
        assert!(
            a.contains(
                "net_virtio_user0,mac=02:00:00:00:00:01,path=/r/vu0.sock,queues=1,packed_vq=1"
            ),
            "{a}"
        );
        let s = switch_args(&socks, 1, 0).join(" ");
        assert!(s.starts_with("--lcores 0@0,1@0"), "{s}");
        assert!(
            s.contains("net_vhost0,iface=/r/vu0.sock,queues=1") && s.contains("--forward-mode=io"),
            "{s}"
        );
        assert!(!s.contains("server=1"));
        let open = Scenario::parse("meter5m:64:open").unwrap();
        let g = generator_args(&socks, true, &open, 1, 0).join(" ");
        assert!(
            g.contains("--forward-mode=flowgen") && g.contains("--flowgen-flows=1"),
            "{g}"
        );
        assert!(!g.contains("--tx-first"), "{g}");
        let closed = generator_args(&socks, true, &Scenario::parse("meter:64").unwrap(), 1, 0);
        assert!(closed.iter().any(|x| x == "--forward-mode=io"));
        assert!(closed.iter().any(|x| x == "--tx-first"));
    }
}
