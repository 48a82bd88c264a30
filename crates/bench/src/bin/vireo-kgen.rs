//! vireo-kgen: the kernel-port benchmark's many-flow generator (`tx`: UDP frames of N
//! distinct 5-tuples on an interface through an `AF_PACKET` socket, run inside the sending
//! namespace) and its vhost-user sink (`sink`: counts what the switch delivers to a
//! vhost-user port), and `copy-cost` (a frame copied from L1 and from DRAM). The first two
//! print `Tx-pps:`/`Rx-pps:` once a second and run until killed or
//! `--secs` have passed.
//!
//! Threads: one, pinned to `--core`.
use bench::kgen::{copy_cost, sink, transmit, TxConfig};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "vireo-kgen",
    about = "kernel-side many-flow UDP generator and vhost-user sink"
)]
struct Args {
    /// Core to pin to (-1: do not pin).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    core: i32,
    /// Seconds to run (0: until killed).
    #[arg(long, default_value_t = 0.0)]
    secs: f64,
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Send UDP frames of `--flows` distinct 5-tuples on `--iface`.
    Tx {
        /// Interface to send on.
        #[arg(long)]
        iface: String,
        /// Frame length without FCS (60..=1514).
        #[arg(long, default_value_t = 60)]
        len: usize,
        /// Distinct flows (IPv4 source x UDP destination port).
        #[arg(long, default_value_t = 1)]
        flows: u32,
        /// UDP destination ports the flows spread over (the rest varies the IPv4 source).
        #[arg(long, default_value_t = 1)]
        rules: u32,
    },
    /// Time copying a frame from L1 and from DRAM (what a PMD on the wrong NUMA node pays,
    /// less the remote part a one-node machine cannot show).
    CopyCost {
        /// Frame lengths.
        #[arg(long, value_delimiter = ',', default_value = "64,1518")]
        lens: Vec<usize>,
    },
    /// Listen on a vhost-user socket and count what arrives.
    Sink {
        /// Socket path (vireo-kgen is the server).
        #[arg(long)]
        sock: PathBuf,
    },
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

fn main() {
    let a = Args::parse();
    let mut out = std::io::stdout();
    let r = pin(a.core).and_then(|()| match a.mode {
        Mode::Tx {
            iface,
            len,
            flows,
            rules,
        } => {
            let cfg = TxConfig {
                iface,
                len,
                flows,
                rules,
                secs: a.secs,
            };
            transmit(&cfg, &mut out).map(|r| {
                println!(
                    "sent {} in {:.2} s ({:.0} pps), {} busy calls",
                    r.sent,
                    r.secs,
                    r.sent as f64 / r.secs.max(1e-9),
                    r.busy
                )
            })
        }
        Mode::CopyCost { lens } => {
            for (len, hot, cold) in copy_cost(&lens) {
                println!(
                    "len {len:4}: hot {hot:.1} ns, cold {cold:.1} ns, from DRAM +{:.1} ns ({:.3} ns/byte)",
                    cold - hot,
                    (cold - hot) / len as f64
                );
            }
            Ok(())
        }
        Mode::Sink { sock } => sink(&sock, a.secs, &mut out).map(|n| println!("received {n}")),
    });
    if let Err(e) = r {
        eprintln!("vireo-kgen: {e}");
        std::process::exit(1);
    }
}
