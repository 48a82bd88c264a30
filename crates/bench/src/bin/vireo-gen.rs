//! vireo-gen: a vhost-user frontend that plays a VM with two virtio-net ports, sends UDP
//! traffic with sequence numbers and timestamps at a set rate, and reports loss, reordering
//! and latency as JSON (one fixed-rate trial, a saturation trial, or an RFC 2544 search).
//!
//! Threads: one; the poll loop is pinned to `--core`.
use bench::frontend::{Endpoint, PortConfig, VhostPort};
use bench::gen::{
    calibrate_tsc, handshake, GenReport, Generator, Kick, TrafficConfig, MIN_FRAME, SAT_ACK,
    SAT_DONE, SAT_GO, SAT_READY, WARMING,
};
use bench::rfc2544::{search, SearchConfig, TrialRunner};
use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "vireo-gen",
    about = "vhost-user traffic generator (plays the VM)"
)]
struct Args {
    /// vhost-user socket of the first port.
    #[arg(long)]
    port0: PathBuf,
    /// vhost-user socket of the second port.
    #[arg(long)]
    port1: PathBuf,
    /// Listen on the sockets (the switch is a vhost-user client).
    #[arg(long)]
    server: bool,
    /// Queue pairs per port.
    #[arg(long, default_value_t = 1)]
    queues: u16,
    /// Tx ring entries (a power of two).
    #[arg(long, default_value_t = 1024)]
    ring_size: u16,
    /// Rx ring entries (a deeper ring absorbs the generator's own stalls on a shared host,
    /// but makes the switch's copies touch more memory than a VM's would).
    #[arg(long, default_value_t = 1024)]
    rx_ring_size: u16,
    /// Frame size in bytes (without FCS).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Distinct flows per direction (the rules match UDP dst port flow % rules).
    #[arg(long, default_value_t = 1)]
    flows: u32,
    /// Rules per direction the switch matches on UDP dst port 0..rules.
    #[arg(long, default_value_t = bench::gen::RULES)]
    rules: u32,
    /// Packets per burst.
    #[arg(long, default_value_t = 32)]
    burst: usize,
    /// Offered aggregate rate in packets/s for one trial (0: as fast as possible).
    #[arg(long)]
    rate: Option<f64>,
    /// Run the RFC 2544 search (after a saturation trial that sets the upper bound).
    #[arg(long)]
    search: bool,
    /// Loss thresholds for the search, packets per million.
    #[arg(long, value_delimiter = ',', default_value = "0,1,5,20")]
    loss_ppm: Vec<f64>,
    /// Upper bound for the search in packets/s (default: the saturation trial's tx rate).
    #[arg(long)]
    max_rate: Option<f64>,
    /// Search resolution as a share of the upper bound.
    #[arg(long, default_value_t = 0.01)]
    resolution: f64,
    /// Most trials per threshold.
    #[arg(long, default_value_t = 8)]
    max_trials: usize,
    /// Seconds per trial.
    #[arg(long, default_value_t = 2.0)]
    trial_secs: f64,
    /// Seconds of warm-up traffic (MAC learning, flow setup) before measuring.
    #[arg(long, default_value_t = 1.0)]
    warmup_secs: f64,
    /// Core to pin to (-1: do not pin).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    core: i32,
    /// Kick policy: auto, always, never.
    #[arg(long, default_value = "auto")]
    kick: String,
    /// Seconds to wait for the switch on each socket.
    #[arg(long, default_value_t = 30.0)]
    connect_timeout: f64,
    /// Do not negotiate mergeable rx buffers.
    #[arg(long)]
    no_mrg_rxbuf: bool,
    /// Send the template frames untouched and only count what returns, without reading it
    /// (like testpmd's io forwarding): no latency, reordering or per-frame checks. For the
    /// cross-check against testpmd.
    #[arg(long)]
    no_stamp: bool,
    /// Directory for the saturation-trial handshake with vireo-bench (files sat-ready,
    /// sat-go, sat-done, sat-ack), so the switch's statistics cover exactly that trial.
    #[arg(long)]
    sync_dir: Option<PathBuf>,
    /// Write the JSON report here (default: stdout).
    #[arg(long)]
    json: Option<PathBuf>,
}

fn pin(core: i32) -> Result<(), String> {
    if core < 0 {
        return Ok(());
    }
    let mut set = nix::sched::CpuSet::new();
    set.set(core as usize).map_err(|e| e.to_string())?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| format!("pin to core {core}: {e}"))
}

fn run(a: &Args) -> Result<GenReport, String> {
    if a.size < MIN_FRAME || a.size > 1522 {
        return Err(format!("--size must be {MIN_FRAME}..=1522"));
    }
    let kick = match a.kick.as_str() {
        "auto" => Kick::Auto,
        "always" => Kick::Always,
        "never" => Kick::Never,
        k => return Err(format!("unknown --kick {k}")),
    };
    for r in [a.ring_size, a.rx_ring_size] {
        if !r.is_power_of_two() || r > 32768 {
            return Err(format!(
                "ring sizes must be powers of two up to 32768, not {r}"
            ));
        }
    }
    pin(a.core)?;
    let pc = PortConfig {
        pairs: a.queues.max(1),
        ring_size: a.ring_size,
        rx_ring_size: a.rx_ring_size,
        timeout: Duration::from_secs_f64(a.connect_timeout),
        mrg_rxbuf: !a.no_mrg_rxbuf,
    };
    let ep = |p: &PathBuf| Endpoint::new(p, a.server).map_err(|e| format!("{}: {e}", p.display()));
    let (e0, e1) = (ep(&a.port0)?, ep(&a.port1)?);
    let open = |e, p: &PathBuf| VhostPort::open(e, pc).map_err(|e| format!("{}: {e}", p.display()));
    let ports = vec![open(e0, &a.port0)?, open(e1, &a.port1)?];
    let features = ports[0].features;
    let tsc_hz = calibrate_tsc(Duration::from_millis(100));
    let cfg = TrafficConfig {
        size: a.size,
        flows: a.flows.max(1),
        rules: a.rules.clamp(1, u32::from(u16::MAX) + 1),
        burst: a.burst.clamp(1, 32),
        trial_secs: a.trial_secs,
        kick,
        stamp: !a.no_stamp,
    };
    let mut g = Generator::new(ports, cfg, tsc_hz);
    // The switch may take a while to start polling new rings: wait until packets come back
    // in both directions, then warm up (MAC learning, megaflows).
    g.wait_ready(Duration::from_secs_f64(a.connect_timeout))?;
    if let Some(d) = &a.sync_dir {
        let _ = std::fs::write(d.join(WARMING), b"");
    }
    if a.warmup_secs > 0.0 {
        let w = g.run(1_000_000.0, a.warmup_secs);
        eprintln!("vireo-gen: warm-up sent {} received {}", w.sent, w.received);
    }
    let mut rep = GenReport {
        size: a.size,
        flows: cfg.flows,
        queues: pc.pairs,
        tsc_hz,
        features,
        saturation: None,
        trial: None,
        search: Vec::new(),
        trials: Vec::new(),
    };
    if let Some(r) = a.rate {
        let Ok(t) = g.trial(r);
        rep.trial = Some(t);
    }
    if a.search || a.rate.is_none() {
        // vireo-bench watches for these lines to read the switch's PMD statistics over the
        // saturation trial alone.
        if let Some(d) = &a.sync_dir {
            handshake(d, SAT_READY, SAT_GO);
        }
        let Ok(sat) = g.trial(0.0);
        if let Some(d) = &a.sync_dir {
            handshake(d, SAT_DONE, SAT_ACK);
        }
        let max = a.max_rate.unwrap_or(sat.sent as f64 / sat.secs.max(1e-9));
        rep.saturation = Some(sat);
        if a.search {
            let sc = SearchConfig {
                max_pps: max,
                resolution: a.resolution,
                max_trials: a.max_trials,
            };
            let Ok(r) = search(&mut g, sc, &a.loss_ppm, &mut rep.trials);
            rep.search = r;
        }
    }
    Ok(rep)
}

fn main() {
    let a = Args::parse();
    match run(&a) {
        Ok(rep) => {
            let s = serde_json::to_string_pretty(&rep).unwrap_or_default();
            match &a.json {
                Some(p) => {
                    if let Err(e) = std::fs::write(p, s) {
                        eprintln!("vireo-gen: write {}: {e}", p.display());
                        std::process::exit(1);
                    }
                }
                None => println!("{s}"),
            }
        }
        Err(e) => {
            eprintln!("vireo-gen: {e}");
            std::process::exit(1);
        }
    }
}
