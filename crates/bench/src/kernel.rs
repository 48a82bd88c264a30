//! Kernel-port benchmark: namespace → switch → namespace over veth pairs (or taps the switch
//! makes), for each port kind. Owns the scenario names (`kp:KIND:SIZE`, `kp:KIND:tcp`,
//! `kp:af-xdp:SIZE[:mark]:vu:FLOWS`), the namespaces and veths (`kb-` prefix, removed on
//! drop), the UDP generators (DPDK testpmd, `txonly` through a `net_af_xdp` vdev on the
//! sending namespace's veth end, counted at the receiving namespace's interface; for the
//! `:vu:` rows vireo-kgen's many-flow sender in the namespace and its vhost-user sink) and
//! the TCP one (`iperf3`), and the table of the separate BENCHMARKS.md section.
//!
//! Threads: vireo-bench's main thread; switches and generators are child processes.
use crate::parse::PmdCycles;
use crate::proc::{command, run, CpuShare, Proc};
use crate::report::{Record, Results};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The port kind both switches put on the veths (or make as taps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortKind {
    /// Vireo `af-packet`, OVS `system`.
    AfPacket,
    /// Vireo `af-xdp`, OVS `afxdp`.
    AfXdp,
    /// Vireo `tap`, OVS `tap`: the switch makes the interface; it is moved into the namespace.
    Tap,
}

impl PortKind {
    /// The name in scenarios (Vireo's port type).
    pub fn name(self) -> &'static str {
        match self {
            PortKind::AfPacket => "af-packet",
            PortKind::AfXdp => "af-xdp",
            PortKind::Tap => "tap",
        }
    }
}

/// What is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traffic {
    /// UDP frames of this Ethernet size (with FCS, as RFC 2544 counts; 4 bytes less on the
    /// veth), one direction, packets per second.
    Udp(usize),
    /// One iperf3 TCP stream, Gbit/s.
    Tcp,
}

/// One kernel-port scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KScenario {
    /// Port kind.
    pub kind: PortKind,
    /// Traffic.
    pub traffic: Traffic,
    /// `:mark`: Vireo's af-xdp ports with `xdp-mark=on` (Vireo only).
    pub marks: bool,
    /// `:flows`: the generator varies the IPv4 source (testpmd `--txonly-multi-flow`) and the
    /// rules make one megaflow per source (UDP only).
    pub flows: bool,
    /// `:vu:N` (af-xdp, UDP): namespace → af-xdp port → switch → vhost-user port, with N
    /// distinct 5-tuples from vireo-kgen (`tx`, an `AF_PACKET` sender in namespace a) and
    /// vireo-kgen's `sink` on the vhost-user socket counting what arrives; the rules make
    /// one megaflow per 5-tuple ([`VU_RULES`]).
    pub vu: Option<u32>,
}

/// UDP destination ports the `:vu:N` flows spread over: one, so the flows differ in the IPv4
/// source only (`10.H.M.L`), which a drop rule on one other source makes every megaflow
/// match exactly (a destination-port rule would not: OVS's classifier always tracks port
/// prefixes and un-wildcards only the bits that tell them apart).
pub const VU_RULES: u32 = 1;

impl KScenario {
    /// `kp:af-packet:64`, `kp:tap:tcp`, `kp:af-xdp:64:mark`, `kp:af-xdp:64:flows`,
    /// `kp:af-xdp:64:mark:flows`, `kp:af-xdp:64:vu:1m`, `kp:af-xdp:64:mark:vu:100k`.
    pub fn name(&self) -> String {
        let t = match self.traffic {
            Traffic::Udp(s) => s.to_string(),
            Traffic::Tcp => "tcp".into(),
        };
        let mut n = format!("kp:{}:{t}", self.kind.name());
        if self.marks {
            n.push_str(":mark");
        }
        if self.flows {
            n.push_str(":flows");
        }
        if let Some(f) = self.vu {
            n.push_str(":vu:");
            n.push_str(&crate::scenario::flow_label(f));
        }
        n
    }

    fn plain(kind: PortKind, traffic: Traffic) -> KScenario {
        KScenario {
            kind,
            traffic,
            marks: false,
            flows: false,
            vu: None,
        }
    }

    /// Parses a name written by [`KScenario::name`].
    pub fn parse(s: &str) -> Result<KScenario, String> {
        let bad = || {
            format!("bad kernel scenario {s:?} (e.g. kp:af-packet:64, kp:tap:tcp, kp:af-xdp:64:mark:flows)")
        };
        let mut it = s.split(':');
        if it.next() != Some("kp") {
            return Err(bad());
        }
        let kind = match it.next() {
            Some("af-packet") => PortKind::AfPacket,
            Some("af-xdp") => PortKind::AfXdp,
            Some("tap") => PortKind::Tap,
            _ => return Err(bad()),
        };
        let traffic = match it.next() {
            Some("tcp") => Traffic::Tcp,
            Some(n) => match n.parse::<usize>() {
                Ok(n) if (64..=1518).contains(&n) => Traffic::Udp(n),
                _ => return Err(bad()),
            },
            None => return Err(bad()),
        };
        let mut sc = KScenario::plain(kind, traffic);
        while let Some(m) = it.next() {
            match m {
                "mark" if kind == PortKind::AfXdp && !sc.marks && !sc.flows && sc.vu.is_none() => {
                    sc.marks = true
                }
                "flows" if traffic != Traffic::Tcp && !sc.flows && sc.vu.is_none() => {
                    sc.flows = true
                }
                "vu" if kind == PortKind::AfXdp
                    && traffic != Traffic::Tcp
                    && !sc.flows
                    && sc.vu.is_none() =>
                {
                    match it.next().and_then(crate::scenario::parse_count) {
                        Some(n) if n >= 1 => sc.vu = Some(n),
                        _ => return Err(bad()),
                    }
                }
                _ => return Err(bad()),
            }
        }
        Ok(sc)
    }

    /// Frame size (with FCS) for UDP, 0 for TCP.
    pub fn size(&self) -> usize {
        match self.traffic {
            Traffic::Udp(s) => s,
            Traffic::Tcp => 0,
        }
    }
}

/// `kernel`: every kind at 64 B, 1518 B and TCP.
pub fn all() -> Vec<KScenario> {
    let mut v = Vec::new();
    for kind in [PortKind::AfPacket, PortKind::AfXdp, PortKind::Tap] {
        for traffic in [Traffic::Udp(64), Traffic::Udp(1518), Traffic::Tcp] {
            v.push(KScenario::plain(kind, traffic));
        }
    }
    v
}

/// Splits a `--scenarios` list into the kernel-port ones (`kernel`, `kp:...`) and the rest.
pub fn split_list(s: &str) -> Result<(Vec<KScenario>, String), String> {
    let (mut k, mut rest) = (Vec::new(), Vec::new());
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part {
            "kernel" => k.extend(all()),
            p if p.starts_with("kp:") => k.push(KScenario::parse(p)?),
            p => rest.push(p),
        }
    }
    Ok((k, rest.join(",")))
}

/// Runs `ip ARGS`.
pub fn ip(args: &[&str]) -> Result<String, String> {
    run(Command::new("ip").args(args))
}

/// Two namespaces `kb-a-PID` and `kb-b-PID` (10.231.0.1/24 and .2), and either one veth pair
/// into each (`kbPIDA` inside, `kbPIDa` on the host for the switch), or for the generator-only
/// ceiling one veth pair joining them directly. Removed on drop.
pub struct Topo {
    /// Namespaces, sender first.
    pub ns: [String; 2],
    /// Interfaces inside the namespaces (the generator's ends).
    pub inner: [String; 2],
    /// Host-side ends the switch takes (veth kinds), or the names of the taps it makes.
    pub host: [String; 2],
}

const ADDRS: [&str; 2] = ["10.231.0.1/24", "10.231.0.2/24"];
/// The receiver's address (iperf3 server).
pub const SERVER_IP: &str = "10.231.0.2";

impl Topo {
    /// Namespaces only; then [`Topo::veths`], [`Topo::direct`] or [`Topo::adopt`].
    pub fn new(tag: &str) -> Result<Topo, String> {
        let pid = std::process::id();
        let t = Topo {
            ns: [format!("kb-a-{tag}{pid}"), format!("kb-b-{tag}{pid}")],
            inner: [format!("kb{tag}{pid}A"), format!("kb{tag}{pid}B")],
            host: [format!("kb{tag}{pid}a"), format!("kb{tag}{pid}b")],
        };
        for i in 0..2 {
            let _ = ip(&["netns", "del", &t.ns[i]]);
            let _ = ip(&["link", "del", &t.host[i]]);
            ip(&["netns", "add", &t.ns[i]])?;
            ip(&["-n", &t.ns[i], "link", "set", "lo", "up"])?;
        }
        Ok(t)
    }

    /// One veth pair per namespace; host ends up.
    pub fn veths(&self) -> Result<(), String> {
        for i in 0..2 {
            ip(&[
                "link",
                "add",
                &self.host[i],
                "type",
                "veth",
                "peer",
                "name",
                &self.inner[i],
                "netns",
                &self.ns[i],
            ])?;
            ip(&["link", "set", &self.host[i], "up"])?;
        }
        self.inner_up()
    }

    /// One veth pair from namespace a straight into namespace b: no switch.
    pub fn direct(&self) -> Result<(), String> {
        ip(&[
            "-n",
            &self.ns[0],
            "link",
            "add",
            &self.inner[0],
            "type",
            "veth",
            "peer",
            "name",
            &self.inner[1],
            "netns",
            &self.ns[1],
        ])?;
        self.inner_up()
    }

    /// The switch made `host` (taps) in the root namespace: they move in as the inner ends.
    pub fn adopt(&mut self) -> Result<(), String> {
        for i in 0..2 {
            ip(&["link", "set", &self.host[i], "netns", &self.ns[i]])?;
        }
        self.inner = self.host.clone();
        self.inner_up()
    }

    fn inner_up(&self) -> Result<(), String> {
        for ((n, d), addr) in self.ns.iter().zip(&self.inner).zip(ADDRS) {
            ip(&["-n", n, "addr", "add", addr, "dev", d])?;
            ip(&["-n", n, "link", "set", d, "up"])?;
        }
        Ok(())
    }

    /// Turns transmit checksum offload (and with it TSO) off inside.
    pub fn csum_off(&self) -> Result<(), String> {
        for i in 0..2 {
            run(Command::new("ip").args([
                "netns",
                "exec",
                &self.ns[i],
                "ethtool",
                "-K",
                &self.inner[i],
                "tx",
                "off",
            ]))?;
        }
        Ok(())
    }

    /// Packets received by the receiving namespace's interface.
    pub fn rx_packets(&self) -> Result<u64, String> {
        let out = ip(&[
            "-n",
            &self.ns[1],
            "-s",
            "-j",
            "link",
            "show",
            "dev",
            &self.inner[1],
        ])?;
        let v: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
        v[0]["stats64"]["rx"]["packets"]
            .as_u64()
            .ok_or_else(|| format!("no rx counter in {out}"))
    }

    /// MAC address of the receiving interface.
    pub fn rx_mac(&self) -> Result<String, String> {
        let out = ip(&[
            "-n",
            &self.ns[1],
            "-j",
            "link",
            "show",
            "dev",
            &self.inner[1],
        ])?;
        let v: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
        v[0]["address"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("no address in {out}"))
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for i in 0..2 {
            let _ = ip(&["netns", "del", &self.ns[i]]);
            let _ = ip(&["link", "del", &self.host[i]]);
        }
    }
}

/// A switch with kernel ports.
pub trait KSwitch {
    /// `vireo`, `ovs-netdev`, `linux-bridge`, `none`.
    fn name(&self) -> &'static str;
    /// Why it cannot run `kind` here, if it cannot.
    fn check(&self, sc: &KScenario) -> Result<(), String>;
    /// The generator alone: the namespaces are joined directly.
    fn direct(&self) -> bool {
        false
    }
    /// Starts it in `dir` switching between `host[0]` and `host[1]` (veth ends, or the taps
    /// it must make with those names).
    fn start(&mut self, dir: &Path, sc: &KScenario, host: &[String; 2]) -> Result<(), String>;
    /// Zeroes its per-thread statistics.
    fn clear_stats(&mut self) {}
    /// Busy cycles per packet since `clear_stats`, if it keeps them.
    fn pmd_cycles(&mut self) -> Option<PmdCycles> {
        None
    }
    /// The process whose CPU share tells whether it was preempted.
    fn pid(&self) -> Option<u32> {
        None
    }
    /// Stops everything it started.
    fn stop(&mut self);
}

/// Timing of one measurement.
#[derive(Clone, Copy, Debug)]
pub struct KPlan {
    /// Warm-up before the window.
    pub warmup: Duration,
    /// Window.
    pub secs: f64,
    /// Switch core (the generator's idle main lcore goes there too).
    pub switch_core: usize,
    /// Generator core.
    pub gen_core: usize,
}

pub(crate) fn pinned(core: usize, ns: &str, prog: &str) -> Command {
    let mut c = command("taskset");
    c.args(["-c", &core.to_string(), "ip", "netns", "exec", ns, prog]);
    c
}

/// Sets the topology up for `sw`, starts it, measures, stops it; fills `rec`.
pub fn measure(
    sw: &mut dyn KSwitch,
    sc: &KScenario,
    p: &KPlan,
    dir: &Path,
    rec: &mut Record,
) -> Result<(), String> {
    if let Some(flows) = sc.vu {
        return crate::kvu::measure(sw, sc, flows, p, dir, rec);
    }
    let mut topo = Topo::new("")?;
    if sw.direct() {
        topo.direct()?;
    } else if sc.kind != PortKind::Tap {
        topo.veths()?;
    }
    let r = (|| {
        if !sw.direct() {
            sw.start(dir, sc, &topo.host)?;
            if sc.kind == PortKind::Tap {
                topo.adopt()?;
            }
        }
        // XDP carries no checksum metadata, and OVS's `system` and `tap` ports pass partial
        // checksums on unfinished (TCP never connects through them with the defaults): the
        // af-xdp rows and every TCP row run with transmit checksum offload off inside, for
        // every switch alike.
        if sc.kind == PortKind::AfXdp || sc.traffic == Traffic::Tcp {
            topo.csum_off()?;
        }
        match sc.traffic {
            Traffic::Udp(size) => udp(sw, &topo, size, sc.flows, p, dir, rec),
            Traffic::Tcp => tcp(sw, &topo, p, dir, rec),
        }
    })();
    sw.stop();
    drop(topo);
    r
}

pub(crate) fn median(v: &[f64]) -> Option<f64> {
    crate::stats::summarize(v).map(|s| s.median)
}

/// The `KEY N` rates (`Tx-pps:`, `Rx-pps:`) a generator printed after byte `from` of its log.
pub(crate) fn rates(log: &str, from: usize, key: &str) -> Vec<f64> {
    log.get(from.min(log.len())..)
        .unwrap_or("")
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix(key)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// testpmd `txonly` in namespace a through `net_af_xdp` (copy mode on a veth), frames of
/// `size - 4` bytes to b's MAC; the rate is what b's interface received, per second.
fn udp(
    sw: &mut dyn KSwitch,
    topo: &Topo,
    size: usize,
    flows: bool,
    p: &KPlan,
    dir: &Path,
    rec: &mut Record,
) -> Result<(), String> {
    let mac = topo.rx_mac()?;
    let prefix = format!("kbgen{}", std::process::id());
    let mut c = pinned(p.gen_core, &topo.ns[0], crate::testpmd::TESTPMD);
    c.args([
        "--lcores",
        &format!("0@{},1@{}", p.switch_core, p.gen_core),
        "-n",
        "1",
        "--no-pci",
        "--no-huge",
        "-m",
        "1024",
        "--file-prefix",
        &prefix,
        "--vdev",
        &format!(
            "net_af_xdp0,iface={},start_queue=0,queue_count=1",
            topo.inner[0]
        ),
        "--",
        "--nb-cores=1",
        "--forward-mode=txonly",
        &format!("--txpkts={}", size - 4),
        "--stats-period=1",
        "--txd=1024",
        "--rxd=1024",
        "--total-num-mbufs=16384",
        &format!("--eth-peer=0,{mac}"),
    ]);
    if flows {
        c.arg("--txonly-multi-flow");
    }
    let mut g = Proc::spawn("testpmd af_xdp generator", &mut c, &dir.join("gen.log"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while g.running() && Instant::now() < deadline && !g.log_text().contains("NIC statistics") {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(p.warmup);
    if !g.running() {
        return Err(format!("testpmd generator exited: {}", g.log_tail(8)));
    }
    sw.clear_stats();
    let sw_share = sw.pid().and_then(CpuShare::start);
    let gen_share = CpuShare::start(g.pid());
    let from = g.log_len() as usize;
    let mut samples = Vec::new();
    let (mut last, mut t) = (topo.rx_packets()?, Instant::now());
    let end = t + Duration::from_secs_f64(p.secs.max(2.0));
    while Instant::now() < end {
        std::thread::sleep(Duration::from_secs(1));
        let (n, now) = (topo.rx_packets()?, Instant::now());
        samples.push((n - last) as f64 / (now - t).as_secs_f64());
        (last, t) = (n, now);
    }
    rec.switch_cpu = sw_share.and_then(|s| s.end());
    rec.gen_cpu = gen_share.and_then(|s| s.end());
    rec.pmd = sw.pmd_cycles();
    let log = g.log_text();
    g.stop(Duration::from_secs(5));
    // EAL leaves its runtime directory behind; the prefix is this run's own.
    let _ = std::fs::remove_dir_all(Path::new("/run/dpdk").join(&prefix));
    let offered = rates(&log, from, "Tx-pps:");
    rec.offered_mpps = median(&offered).map(|x| x / 1e6);
    rec.mpps = median(&samples).map(|x| x / 1e6);
    rec.gbps = rec.mpps.map(|m| m * size as f64 * 8.0 / 1e3);
    if rec.mpps.unwrap_or(0.0) <= 0.0 {
        return Err(format!(
            "nothing arrived in {} (generator offered {:?} Mpps)",
            topo.ns[1], rec.offered_mpps
        ));
    }
    Ok(())
}

/// One iperf3 TCP stream from a to b, client and server on the generator core.
fn tcp(
    sw: &mut dyn KSwitch,
    topo: &Topo,
    p: &KPlan,
    dir: &Path,
    rec: &mut Record,
) -> Result<(), String> {
    let core = p.gen_core.to_string();
    let mut s = pinned(p.gen_core, &topo.ns[1], "iperf3");
    s.args(["-s", "-1", "-A", &core]);
    let mut srv = Proc::spawn("iperf3 server", &mut s, &dir.join("iperf3-server.log"))?;
    // ARP and learning before the window: a few pings.
    let ping_end = Instant::now() + Duration::from_secs(10);
    while run(Command::new("ip").args([
        "netns",
        "exec",
        &topo.ns[0],
        "ping",
        "-c",
        "1",
        "-W",
        "1",
        SERVER_IP,
    ]))
    .is_err()
    {
        if Instant::now() > ping_end {
            return Err(format!("no ping from {} to {SERVER_IP}", topo.ns[0]));
        }
    }
    sw.clear_stats();
    let sw_share = sw.pid().and_then(CpuShare::start);
    let secs = p.secs.max(2.0).round() as u64;
    let warm = p.warmup.as_secs().max(1);
    let mut c = pinned(p.gen_core, &topo.ns[0], "iperf3");
    c.args([
        "-c",
        SERVER_IP,
        "-A",
        &core,
        "-J",
        "-t",
        &(secs + warm).to_string(),
        "-O",
        &warm.to_string(),
    ]);
    let out = run(&mut c);
    rec.switch_cpu = sw_share.and_then(|s| s.end());
    rec.pmd = sw.pmd_cycles();
    let _ = srv.wait(Duration::from_secs(5));
    let out = out?;
    let _ = std::fs::write(dir.join("iperf3.json"), &out);
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("iperf3 output: {e}"))?;
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .filter(|b| *b > 0.0)
        .ok_or_else(|| format!("iperf3 received nothing: {}", v["error"]))?;
    rec.gbps = Some(bps / 1e9);
    Ok(())
}

/// The marked section's table: one row per scenario and switch.
pub fn markdown(res: &Results) -> String {
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in res.records.iter().filter(|r| r.scenario.starts_with("kp:")) {
        let k = (r.scenario.clone(), r.contender.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut t = String::from(
        "| scenario | switch | Mpps | Gbit/s | cycles/pkt | offered Mpps | CPU sw/gen |\n\
         |---|---|---:|---:|---:|---:|---:|\n",
    );
    for (s, c) in &keys {
        let g = res
            .records
            .iter()
            .find(|r| &r.scenario == s && &r.contender == c)
            .map_or(String::new(), |r| r.generator.clone());
        let cell = |m: &str, prec: usize| match res.get(c, s, &g, m) {
            Some(x) if x.n > 1 => format!("{:.prec$} ±{:.0}%", x.median, x.spread_pct / 2.0),
            Some(x) => format!("{:.prec$}", x.median),
            None => "–".into(),
        };
        let first = |m: &str| cell(m, 2).split(' ').next().unwrap_or("–").to_string();
        let _ = writeln!(
            t,
            "| {s} | {c} | {} | {} | {} | {} | {}/{} |",
            cell("mpps", 3),
            cell("gbps", 2),
            cell("cycles_per_packet", 0),
            cell("offered_mpps", 3),
            first("switch_cpu"),
            first("gen_cpu"),
        );
    }
    let errors: Vec<String> = res
        .records
        .iter()
        .filter(|r| r.scenario.starts_with("kp:"))
        .filter_map(|r| {
            Some(format!(
                "- {} {} round {}: {}",
                r.contender,
                r.scenario,
                r.round,
                r.error.as_ref()?
            ))
        })
        .collect();
    if !errors.is_empty() {
        t.push_str("\nFailed measurements:\n\n");
        t.push_str(&errors.join("\n"));
        t.push('\n');
    }
    t
}

/// The vhost-user records and the kernel-port records of a run, each with its metadata and
/// summary: each goes to its own section of BENCHMARKS.md.
pub fn split(res: &Results) -> (Results, Results) {
    let (k, v): (Vec<Record>, Vec<Record>) = res
        .records
        .iter()
        .cloned()
        .partition(|r| r.scenario.starts_with("kp:"));
    let part = |records| {
        let mut r = Results {
            meta: res.meta.clone(),
            records,
            ..Results::default()
        };
        r.summarize();
        r
    };
    (part(v), part(k))
}

/// Begin marker of the kernel-port section of BENCHMARKS.md.
pub const BEGIN: &str = "<!-- BEGIN vireo-bench kernel-port results -->";
/// End marker.
pub const END: &str = "<!-- END vireo-bench kernel-port results -->";

/// The kernel-port section for BENCHMARKS.md.
pub fn section(res: &Results) -> String {
    let m = &res.meta;
    format!(
        "Run {} on {}; {}. Load average at the start: {}.\n\nCommand: `{}`\n\n\
         Pinning: switch on core {}, generator on core {}; {} round(s), {} s windows; median \
         ±half the spread (max−min) over rounds. UDP: testpmd `txonly` through `net_af_xdp` \
         in namespace a, one direction, counted at namespace b's interface; sizes are \
         Ethernet frames with FCS (4 bytes less on the veth). `:vu:N` rows: vireo-kgen `tx` \
         (`AF_PACKET` sendmmsg, N 5-tuples) in namespace a → af-xdp → switch → vhost-user, \
         counted by vireo-kgen's sink on the vhost-user socket (OVS: ovs-vswitchd-dpdk, \
         `afxdp` + `dpdkvhostuserclient`). TCP: one iperf3 stream a → b. \
         `none` is the generator alone over one veth pair joining the namespaces (its \
         ceiling); cycles/pkt is the switch's own figure (Vireo `pmd-stats-show`, OVS \
         `dpif-netdev/pmd-stats-show`, PMD or main thread, whichever polled the ports).\n\n{}",
        m.date,
        m.machine,
        m.versions
            .iter()
            .filter(|(_, v)| v.as_str() != "unknown")
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        m.load.as_deref().unwrap_or("unknown"),
        m.command,
        m.cores.0,
        m.cores.1,
        m.rounds,
        m.trial_secs,
        markdown(res)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{replace_marked, replace_section};

    fn rec(scenario: &str, contender: &str, round: usize, mpps: f64) -> Record {
        Record {
            round,
            contender: contender.into(),
            scenario: scenario.into(),
            generator: "testpmd-af_xdp".into(),
            mpps: Some(mpps),
            offered_mpps: Some(0.8),
            ..Record::default()
        }
    }

    #[test]
    fn kernel_rows_go_to_their_own_section_and_leave_the_vhost_one() {
        let res = Results {
            records: vec![
                rec("p2p:64", "vireo", 0, 13.0),
                rec("kp:af-xdp:64", "vireo", 0, 0.5),
                rec("kp:af-xdp:64", "vireo", 1, 0.7),
                rec("kp:af-xdp:64", "ovs-netdev", 0, 0.6),
            ],
            ..Results::default()
        };
        let (v, k) = split(&res);
        assert_eq!((v.records.len(), k.records.len()), (1, 3));
        let table = markdown(&k);
        assert!(
            table.contains("| kp:af-xdp:64 | vireo | 0.600 ±17% |"),
            "{table}"
        );
        assert!(
            table.contains("| kp:af-xdp:64 | ovs-netdev | 0.600 |"),
            "{table}"
        );
        assert!(!table.contains("p2p:64"), "{table}");
        let doc = replace_section("# B\n", "vhost table\n");
        let doc = replace_marked(&doc, BEGIN, END, "old kernel\n");
        let doc = replace_marked(&doc, BEGIN, END, &section(&k));
        assert!(
            doc.contains("vhost table") && !doc.contains("old kernel"),
            "{doc}"
        );
        assert_eq!(doc.matches(BEGIN).count(), 1);
        assert!(doc.contains("| kp:af-xdp:64 | vireo |"));
    }

    #[test]
    fn kernel_scenario_names() {
        for sc in all() {
            assert_eq!(KScenario::parse(&sc.name()).unwrap(), sc);
        }
        assert_eq!(all().len(), 9);
        let (k, rest) = split_list("p2p:64, kernel,kp:tap:tcp").unwrap();
        assert_eq!((k.len(), rest.as_str()), (10, "p2p:64"));
        for bad in [
            "kp:af-packet",
            "kp:xdp:64",
            "kp:tap:63",
            "kp:tap:tcp:1",
            "p2p:kp",
        ] {
            assert!(KScenario::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(KScenario::parse("kp:af-xdp:1518").unwrap().size(), 1518);
        for good in [
            "kp:af-xdp:64:mark",
            "kp:af-xdp:64:flows",
            "kp:af-xdp:64:mark:flows",
            "kp:af-packet:64:flows",
        ] {
            let sc = KScenario::parse(good).unwrap();
            assert_eq!(sc.name(), good);
        }
        let sc = KScenario::parse("kp:af-xdp:64:mark:flows").unwrap();
        assert!(sc.marks && sc.flows);
        for (good, marks, flows) in [
            ("kp:af-xdp:64:vu:1", false, 1),
            ("kp:af-xdp:64:vu:100k", false, 100_000),
            ("kp:af-xdp:64:mark:vu:1m", true, 1_000_000),
            ("kp:af-xdp:1518:vu:7", false, 7),
        ] {
            let sc = KScenario::parse(good).unwrap();
            assert_eq!((sc.marks, sc.vu, sc.flows), (marks, Some(flows), false));
            assert_eq!(sc.name(), good);
        }
        for bad in [
            "kp:af-xdp:64:vu",
            "kp:af-xdp:64:vu:0",
            "kp:af-xdp:64:vu:x",
            "kp:af-xdp:64:vu:1m:mark",
            "kp:af-xdp:64:flows:vu:1",
            "kp:af-xdp:64:vu:1:vu:2",
            "kp:af-packet:64:vu:1",
            "kp:af-xdp:tcp:vu:1",
        ] {
            assert!(KScenario::parse(bad).is_err(), "{bad}");
        }
        assert!(rates("x\n  Tx-pps: 5\nTx-pps: 7 \n", 2, "Tx-pps:") == vec![5.0, 7.0]);
        for bad in [
            "kp:af-packet:64:mark",
            "kp:af-xdp:64:flows:mark",
            "kp:af-xdp:64:mark:mark",
            "kp:af-xdp:tcp:flows",
            "kp:af-xdp:64:x",
        ] {
            assert!(KScenario::parse(bad).is_err(), "{bad}");
        }
    }
}
