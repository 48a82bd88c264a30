//! vireo-bench: installs what it needs, then runs each switch (Vireo, OVS-DPDK, DPDK testpmd
//! vhost io; for kernel ports Vireo, OVS's userspace datapath and the Linux bridge) in turn
//! with the same generator and pinning, interleaved over rounds, and writes results.json,
//! results.md, PNG plots and (optionally) the sections of BENCHMARKS.md.
//!
//! Threads: one; the switches and generators are child processes.
use bench::contender::{Contender, Dpdk, Ovs, Ports, Vireo};
use bench::genproc::{self, GenPlan};
use bench::kernel::{self, KPlan, KScenario, KSwitch};
use bench::kswitch::{LinuxBridge, NoSwitch, OvsNetdev, VireoK};
use bench::proc::core_busy;
use bench::report::{plots, replace_marked, replace_section, Meta, Record, Results};
use bench::scenario::{self, Scenario};
use bench::testpmd::{generator_args, run_generator};
use clap::Parser;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "vireo-bench",
    about = "Vireo vs OVS-DPDK vs raw DPDK, interleaved"
)]
struct Args {
    /// The one-minute subset: p2p 64 B, one round, short trials, zero-loss search only.
    #[arg(long)]
    quick: bool,
    /// Rounds (contenders interleaved within each).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds per measurement (testpmd window, vireo-gen trial).
    #[arg(long)]
    trial_secs: Option<f64>,
    /// Switches: vireo, ovs, dpdk, and vireo@DIR for another build of Vireo (vireod and
    /// vireoctl in DIR) measured in the same rounds.
    #[arg(long, value_delimiter = ',', default_value = "vireo,ovs,dpdk")]
    contenders: Vec<String>,
    /// Scenarios, e.g. p2p:64,normal:64,flows1m:64 (1 M flows over 1K rules),
    /// flows10m-1k:64 and flows1m-10k:64 (flows over that many rules),p2p:64:2q; meter:64 (p2p through an
    /// OpenFlow meter that never drops), meter2m:64 (a 2 Mpps meter), ct:64 (p2p through
    /// ct(table=1) and ct(commit), Vireo and OVS-DPDK only; one connection), ct1k:64,
    /// ct100k:64, ct1m:64 (the same with that many connections, vireo-gen only), ctnew:64
    /// (the connection-setup rate: every packet a new 5-tuple, vireo-gen only); vxlan:64,
    /// geneve:64 (encap + decap in the switch; Vireo over loopback UDP sockets), nvxlan:64,
    /// ngeneve:64 (the same on Vireo's native tunneling, a veth underlay); `:open` at
    /// the end for
    /// testpmd's open-loop flowgen instead of the io loop (needed when the switch drops);
    /// or full, quick, sizes.
    /// Kernel ports: kp:KIND:SIZE or kp:KIND:tcp (KIND af-packet, af-xdp, tap), or kernel
    /// (all nine); UDP ones may end in `:mark` (af-xdp, Vireo only: `xdp-mark=on`) and/or
    /// `:flows` (testpmd `--txonly-multi-flow`, a rule making one megaflow per IPv4 source).
    #[arg(long)]
    scenarios: Option<String>,
    /// Switches for the kernel-port scenarios: vireo, vireo-busy (its PMD never sleeps),
    /// vireo@DIR (another build),
    /// ovs-netdev, linux-bridge, none (the generator alone over one veth pair: its ceiling).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "vireo,ovs-netdev,linux-bridge,none"
    )]
    kernel_contenders: Vec<String>,
    /// Generators: testpmd (saturation), vireo-gen (saturation + RFC 2544 + latency),
    /// vireo-gen-bare (saturation with frames left untouched, like testpmd's io forwarding:
    /// the cross-check against testpmd; single-flow scenarios only).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "testpmd,vireo-gen,vireo-gen-bare"
    )]
    generators: Vec<String>,
    /// Loss thresholds for the RFC 2544 search (ppm); quick mode uses 0 only.
    #[arg(long, value_delimiter = ',')]
    loss_ppm: Option<Vec<f64>>,
    /// Most trials per threshold.
    #[arg(long)]
    max_trials: Option<usize>,
    /// Output directory.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/bench-out"))]
    out: PathBuf,
    /// Rewrite the results section of BENCHMARKS.md.
    #[arg(long)]
    update_benchmarks: bool,
    /// BENCHMARKS.md to update.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../BENCHMARKS.md"))]
    benchmarks_file: PathBuf,
    /// Do not run scripts/setup.sh --bench first.
    #[arg(long)]
    no_setup: bool,
    /// Core of the switch's PMD.
    #[arg(long, default_value_t = 0)]
    switch_core: usize,
    /// Core of the generator.
    #[arg(long, default_value_t = 1)]
    gen_core: usize,
    /// Directory holding vireod and vireoctl (an older build works too: a vireoctl that
    /// rejects `add-br br0 internal=false` gets `add-br br0`).
    #[arg(long)]
    vireo_bin: Option<PathBuf>,
    /// Give Vireo vhost-user server ports (default: vhost-user-client, like OVS).
    #[arg(long)]
    vireo_server_ports: bool,
    /// Burst size of the testpmd generator, which is also what --tx-first injects per port
    /// and so all that circulates: with fewer than its maximum of 512, the switches receive
    /// smaller bursts than an open-loop sender gives them and pay more per packet.
    #[arg(long, default_value_t = 512)]
    testpmd_burst: usize,
    /// Measure nothing: redo the summary, tables, plots (and with --update-benchmarks the
    /// section of BENCHMARKS.md) from the results.json an earlier run left in --out.
    #[arg(long)]
    from_results: bool,
    /// Run switches and generators at SCHED_RR priority 1 so other work on a shared machine
    /// cannot preempt them (it slows that work down while the benchmark runs).
    #[arg(long)]
    rt: bool,
}

fn setup() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/setup.sh");
    let st = std::process::Command::new("bash")
        .arg(&script)
        .arg("--bench")
        .status();
    if !matches!(st, Ok(s) if s.success()) {
        eprintln!(
            "vireo-bench: {} --bench failed; going on with what is installed",
            script.display()
        );
    }
}

fn vireo_bin(a: &Args) -> PathBuf {
    if let Some(d) = &a.vireo_bin {
        return d.clone();
    }
    if let Some(d) = std::env::var_os("VIREO_BIN_DIR") {
        return PathBuf::from(d);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let here = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.to_path_buf()));
    let cands = [
        here,
        Some(root.join("target/release")),
        Some(root.join("target/debug")),
    ];
    cands
        .into_iter()
        .flatten()
        .find(|d| d.join("vireod").is_file())
        .unwrap_or_else(|| root.join("target/release"))
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpu
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    let cores = cpu.lines().filter(|l| l.starts_with("processor")).count();
    let mem = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let gb = mem
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1048576.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{model}, {cores} cores, {gb:.0} GB RAM, Linux {}",
        kernel.trim()
    )
}

fn version(cmd: &str, args: &[&str]) -> String {
    bench::proc::run(std::process::Command::new(cmd).args(args))
        .map(|s| s.lines().next().unwrap_or("").to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn date() -> String {
    version("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
}

/// Settings derived from the flags and `--quick`.
struct Plan {
    rounds: usize,
    trial_secs: f64,
    scenarios: Vec<Scenario>,
    kernel: Vec<KScenario>,
    gen: GenPlan,
    warmup: Duration,
}

fn plan(a: &Args) -> Result<Plan, String> {
    let q = a.quick;
    if let Some(g) = a
        .generators
        .iter()
        .find(|g| !genproc::GENERATORS.contains(&g.as_str()))
    {
        return Err(format!(
            "unknown generator {g:?} ({})",
            genproc::GENERATORS.join(", ")
        ));
    }
    let (scenarios, kernel) = match &a.scenarios {
        Some(s) => {
            let (k, rest) = kernel::split_list(s)?;
            (scenario::parse_list(&rest)?, k)
        }
        None if q => (scenario::quick(), Vec::new()),
        None => (scenario::full(), Vec::new()),
    };
    let trial_secs = a.trial_secs.unwrap_or(if q { 2.0 } else { 10.0 });
    let loss = a.loss_ppm.clone().unwrap_or(if q {
        vec![0.0]
    } else {
        vec![0.0, 1.0, 5.0, 20.0]
    });
    Ok(Plan {
        rounds: a.rounds.unwrap_or(if q { 1 } else { 3 }),
        trial_secs,
        scenarios,
        kernel,
        gen: GenPlan {
            trial_secs: if q { trial_secs.min(0.5) } else { trial_secs },
            loss_ppm: loss,
            max_trials: a.max_trials.unwrap_or(if q { 5 } else { 8 }),
            warmup_secs: if q { 0.5 } else { 1.0 },
            core: a.gen_core,
            bare: false,
        },
        warmup: Duration::from_secs(if q { 1 } else { 2 }),
    })
}

fn measure(
    c: &mut dyn Contender,
    sc: &Scenario,
    gen: &str,
    p: &Plan,
    a: &Args,
    dir: &Path,
    rec: &mut Record,
) -> Result<(), String> {
    let ports: Ports = c.start(dir, sc)?;
    if gen == "testpmd" {
        let mut args = generator_args(
            &ports.socks,
            ports.gen_server,
            sc,
            a.gen_core,
            a.switch_core,
        );
        // More packets in flight (--tx-first sends one burst per port).
        args.push(format!("--burst={}", a.testpmd_burst));
        // The native tunnel scenarios' first packets reach the far port sooner than the
        // switch marks its link up: hold the traffic until both links are up.
        let wait_links = matches!(sc.kind, bench::scenario::Kind::NativeTunnel(_));
        let (m, pmd) = run_generator(&args, dir, p.warmup, p.trial_secs, c, wait_links)?;
        rec.mpps = m.median().map(|x| x / 1e6);
        if sc.open {
            rec.offered_mpps = m.tx_median().map(|x| x / 1e6);
        }
        rec.pmd = pmd;
        rec.switch_cpu = m.switch_cpu;
        rec.gen_cpu = m.gen_cpu;
    } else {
        let bare = gen == genproc::BARE;
        let plan = GenPlan {
            bare,
            loss_ppm: if bare {
                Vec::new()
            } else {
                p.gen.loss_ppm.clone()
            },
            ..p.gen.clone()
        };
        let run = genproc::run(&ports, sc, &plan, dir, c)?;
        let r = run.report;
        rec.pmd = run.pmd;
        rec.switch_cpu = run.switch_cpu;
        rec.gen_cpu = run.gen_cpu;
        if let Some(s) = &r.saturation {
            rec.mpps = Some(s.rx_pps / 1e6);
            rec.saturation_loss_ppm = Some(s.loss_ppm());
        }
        rec.latency = r
            .search
            .first()
            .and_then(|s| s.trial.as_ref())
            .map(|t| t.latency.clone());
        rec.rfc2544 = r.search;
    }
    rec.gbps = rec.mpps.map(|m| m * 1e6 * sc.size as f64 * 8.0 / 1e9);
    Ok(())
}

fn save_logs(from: &Path, to: &Path) {
    let _ = std::fs::create_dir_all(to);
    if let Ok(rd) = std::fs::read_dir(from) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if [".log", ".json", ".txt"].iter().any(|s| n.ends_with(s)) {
                let _ = std::fs::copy(e.path(), to.join(&n));
            }
        }
    }
}

fn one(
    c: &mut dyn Contender,
    sc: &Scenario,
    gen: &str,
    round: usize,
    p: &Plan,
    a: &Args,
) -> Record {
    let mut rec = Record {
        round,
        contender: c.name().into(),
        scenario: sc.name(),
        generator: gen.into(),
        size: sc.size,
        core_busy_before: core_busy(&[a.switch_core, a.gen_core], Duration::from_millis(200)),
        ..Record::default()
    };
    let tag = format!(
        "r{round}-{}-{}-{gen}",
        c.name().replace(['/', '@'], "_"),
        sc.name().replace(':', "-")
    );
    let dir = std::env::temp_dir()
        .join(format!("vireo-bench.{}", std::process::id()))
        .join(&tag);
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        rec.error = Some(e.to_string());
        return rec;
    }
    if let Err(e) = measure(c, sc, gen, p, a, &dir, &mut rec) {
        rec.error = Some(e);
    }
    c.stop();
    save_logs(&dir, &a.out.join("runs").join(&tag));
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(parent) = dir.parent() {
        let _ = std::fs::remove_dir(parent); // only once empty
    }
    rec
}

/// One kernel-port measurement in its own directory; logs kept under `runs/`.
fn one_kernel(sw: &mut dyn KSwitch, sc: &KScenario, round: usize, p: &Plan, a: &Args) -> Record {
    let gen = match sc.traffic {
        kernel::Traffic::Udp(_) if sc.vu.is_some() => "vireo-kgen",
        kernel::Traffic::Udp(_) => "testpmd-af_xdp",
        kernel::Traffic::Tcp => "iperf3",
    };
    let mut rec = Record {
        round,
        contender: sw.name().into(),
        scenario: sc.name(),
        generator: gen.into(),
        size: sc.size(),
        core_busy_before: core_busy(&[a.switch_core, a.gen_core], Duration::from_millis(200)),
        ..Record::default()
    };
    let tag = format!("r{round}-{}-{}", sw.name(), sc.name().replace(':', "-"));
    let dir = std::env::temp_dir()
        .join(format!("vireo-bench.{}", std::process::id()))
        .join(&tag);
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        rec.error = Some(e.to_string());
        return rec;
    }
    let kp = KPlan {
        warmup: p.warmup,
        secs: p.trial_secs,
        switch_core: a.switch_core,
        gen_core: a.gen_core,
    };
    if let Err(e) = kernel::measure(sw, sc, &kp, &dir, &mut rec) {
        rec.error = Some(e);
    }
    save_logs(&dir, &a.out.join("runs").join(&tag));
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(parent) = dir.parent() {
        let _ = std::fs::remove_dir(parent);
    }
    rec
}

fn kernel_switches(a: &Args, meta: &mut Meta) -> Vec<Box<dyn KSwitch>> {
    if let Err(why) = bench::kswitch::generators_ok() {
        eprintln!("vireo-bench: no kernel-port scenarios: {why}");
        meta.skipped.insert("kernel ports".into(), why);
        return Vec::new();
    }
    let mut v: Vec<Box<dyn KSwitch>> = Vec::new();
    for name in &a.kernel_contenders {
        let c: Box<dyn KSwitch> = match name.as_str() {
            "vireo" => Box::new(VireoK::new(a.switch_core, vireo_bin(a))),
            "vireo-busy" => Box::new(VireoK::busy(a.switch_core, vireo_bin(a))),
            // Another build of Vireo in the same rounds (e.g. main's target/release):
            // `vireo@DIR`.
            other if other.starts_with("vireo@") => {
                let mut c = VireoK::new(a.switch_core, PathBuf::from(&other["vireo@".len()..]));
                c.label = Box::leak(other.to_string().into_boxed_str());
                Box::new(c)
            }
            "ovs-netdev" => Box::new(OvsNetdev::new(a.switch_core)),
            "linux-bridge" => Box::new(LinuxBridge::new()),
            "none" => Box::new(NoSwitch),
            other => {
                meta.skipped
                    .insert(other.into(), "unknown kernel-port contender".into());
                continue;
            }
        };
        v.push(c);
    }
    v
}

fn contenders(a: &Args, meta: &mut Meta) -> Vec<Box<dyn Contender>> {
    let mut v: Vec<Box<dyn Contender>> = Vec::new();
    for name in &a.contenders {
        let c: Box<dyn Contender> = match name.as_str() {
            "vireo" => {
                let mut c = Vireo::new(a.switch_core, vireo_bin(a));
                c.server_ports = a.vireo_server_ports;
                Box::new(c)
            }
            "ovs" => Box::new(Ovs::new(a.switch_core)),
            "dpdk" => Box::new(Dpdk::new(a.switch_core)),
            // Another build of Vireo in the same rounds (e.g. an older commit's
            // target/release): `vireo@DIR`.
            other if other.starts_with("vireo@") => {
                let mut c = Vireo::new(a.switch_core, PathBuf::from(&other["vireo@".len()..]));
                c.label = Box::leak(other.to_string().into_boxed_str());
                c.server_ports = a.vireo_server_ports;
                Box::new(c)
            }
            other => {
                meta.skipped
                    .insert(other.into(), "unknown contender".into());
                continue;
            }
        };
        match c.check() {
            Ok(()) => v.push(c),
            Err(why) => {
                eprintln!("vireo-bench: skipping {name}: {why}");
                meta.skipped.insert(name.clone(), why);
            }
        }
    }
    v
}

fn write_outputs(a: &Args, res: &mut Results) -> Result<(), String> {
    res.summarize();
    let json = serde_json::to_string_pretty(res).map_err(|e| e.to_string())?;
    std::fs::write(a.out.join("results.json"), json).map_err(|e| e.to_string())?;
    let (v, k) = kernel::split(res);
    let mut md = String::new();
    if !v.records.is_empty() {
        md.push_str(&v.benchmarks_section());
    }
    if !k.records.is_empty() {
        md.push_str(&kernel::section(&k));
    }
    std::fs::write(a.out.join("results.md"), md).map_err(|e| e.to_string())
}

/// `--from-results`: the outputs of an earlier run, made again from its results.json.
fn report_again(a: &Args) -> Result<(), String> {
    let f = a.out.join("results.json");
    let text = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
    let mut res: Results =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", f.display()))?;
    report(a, &mut res)
}

/// Everything a run hands over: results.json and results.md, the plots, the table on
/// stdout, and with --update-benchmarks the section of BENCHMARKS.md.
fn report(a: &Args, res: &mut Results) -> Result<(), String> {
    write_outputs(a, res)?;
    if let Err(e) = plots(&a.out, res) {
        eprintln!("vireo-bench: no plots: {e}");
    }
    let (v, k) = kernel::split(res);
    if !v.records.is_empty() {
        println!("{}", v.markdown());
    }
    if !k.records.is_empty() {
        println!("{}", kernel::markdown(&k));
    }
    if a.update_benchmarks {
        let mut doc =
            std::fs::read_to_string(&a.benchmarks_file).unwrap_or_else(|_| "# Benchmarks\n".into());
        // Each section is rewritten only by a run that measured it.
        if !v.records.is_empty() {
            doc = replace_section(&doc, &v.benchmarks_section());
        }
        if !k.records.is_empty() {
            doc = replace_marked(&doc, kernel::BEGIN, kernel::END, &kernel::section(&k));
        }
        if let Err(e) = std::fs::write(&a.benchmarks_file, doc) {
            eprintln!("vireo-bench: {}: {e}", a.benchmarks_file.display());
        }
    }
    Ok(())
}

fn main() {
    let a = Args::parse();
    let p = match plan(&a) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("vireo-bench: {e}");
            std::process::exit(2);
        }
    };
    if a.from_results {
        if let Err(e) = report_again(&a) {
            eprintln!("vireo-bench: {e}");
            std::process::exit(1);
        }
        return;
    }
    if !a.no_setup {
        setup();
    }
    bench::proc::set_realtime(a.rt);
    if let Err(e) = std::fs::create_dir_all(&a.out) {
        eprintln!("vireo-bench: {}: {e}", a.out.display());
        std::process::exit(1);
    }
    let meta = Meta {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: date(),
        machine: machine(),
        cores: (a.switch_core, a.gen_core),
        rounds: p.rounds,
        trial_secs: p.trial_secs,
        load: std::fs::read_to_string("/proc/loadavg")
            .ok()
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")),
        ..Meta::default()
    };
    let mut res = Results {
        meta,
        ..Results::default()
    };
    res.meta.versions.insert(
        "testpmd".into(),
        version("dpkg-query", &["-W", "-f=${Version}", "dpdk"]),
    );
    res.meta.versions.insert(
        "ovs".into(),
        version(
            "dpkg-query",
            &["-W", "-f=${Version}", "openvswitch-switch-dpdk"],
        ),
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let git = version(
        "git",
        &[
            "-C",
            &root.display().to_string(),
            "describe",
            "--always",
            "--dirty",
        ],
    );
    res.meta.versions.insert(
        "vireo".into(),
        format!("{git} ({})", vireo_bin(&a).display()),
    );
    res.meta.versions.insert(
        "ovs-netdev".into(),
        version("dpkg-query", &["-W", "-f=${Version}", "openvswitch-switch"]),
    );
    let mut cs = if p.scenarios.is_empty() {
        Vec::new()
    } else {
        contenders(&a, &mut res.meta)
    };
    let mut ks = if p.kernel.is_empty() {
        Vec::new()
    } else {
        kernel_switches(&a, &mut res.meta)
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, std::sync::Arc::clone(&stop));
    }
    'rounds: for round in 0..p.rounds {
        for sc in &p.scenarios {
            let n = cs.len();
            for i in 0..n {
                // Rotate the order each round so no contender always runs first.
                let c = &mut cs[(i + round) % n];
                for gen in &a.generators {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        eprintln!("vireo-bench: interrupted; writing what was measured");
                        break 'rounds;
                    }
                    // testpmd sends one flow; the bare vireo-gen exists only to be compared
                    // with it.
                    if (gen == "testpmd" || gen == genproc::BARE) && !sc.testpmd_can_drive() {
                        continue;
                    }
                    let rec = one(c.as_mut(), sc, gen, round, &p, &a);
                    match (&rec.error, rec.mpps) {
                        (Some(e), _) => eprintln!("vireo-bench: round {round} {} {} {gen}: FAILED: {e}", rec.contender, rec.scenario),
                        (None, m) => eprintln!(
                            "vireo-bench: round {round} {} {} {gen}: {:.3} Mpps{}, {:.0} cycles/pkt, cpu share switch {:.2} gen {:.2}{}",
                            rec.contender,
                            rec.scenario,
                            m.unwrap_or(0.0),
                            rec.offered_mpps.map_or(String::new(), |o| format!(" (offered {o:.3})")),
                            rec.pmd.map_or(0.0, |x| x.busy_cycles_per_packet),
                            rec.switch_cpu.unwrap_or(0.0),
                            rec.gen_cpu.unwrap_or(0.0),
                            rec.rfc2544.first().map_or(String::new(), |s| format!(", 0-loss {:.3} Mpps", s.rate_pps / 1e6))
                        ),
                    }
                    res.records.push(rec);
                    let _ = write_outputs(&a, &mut res);
                }
            }
        }
        for sc in &p.kernel {
            let n = ks.len();
            for i in 0..n {
                let sw = &mut ks[(i + round) % n];
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    eprintln!("vireo-bench: interrupted; writing what was measured");
                    break 'rounds;
                }
                if sw.check(sc).is_err() {
                    continue;
                }
                let rec = one_kernel(sw.as_mut(), sc, round, &p, &a);
                match &rec.error {
                    Some(e) => eprintln!(
                        "vireo-bench: round {round} {} {}: FAILED: {e}",
                        rec.contender, rec.scenario
                    ),
                    None => eprintln!(
                        "vireo-bench: round {round} {} {}: {:.3} Mpps (offered {:.3}), {:.2} Gbit/s, {:.0} cycles/pkt, cpu share switch {:.2} gen {:.2}",
                        rec.contender,
                        rec.scenario,
                        rec.mpps.unwrap_or(0.0),
                        rec.offered_mpps.unwrap_or(0.0),
                        rec.gbps.unwrap_or(0.0),
                        rec.pmd.map_or(0.0, |x| x.busy_cycles_per_packet),
                        rec.switch_cpu.unwrap_or(0.0),
                        rec.gen_cpu.unwrap_or(0.0),
                    ),
                }
                res.records.push(rec);
                let _ = write_outputs(&a, &mut res);
            }
        }
    }
    if let Err(e) = report(&a, &mut res) {
        eprintln!("vireo-bench: writing results: {e}");
        std::process::exit(1);
    }
    eprintln!("vireo-bench: results in {}", a.out.display());
}
