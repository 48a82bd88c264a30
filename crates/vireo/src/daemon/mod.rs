//! `vireod`: command-line flags, logging, the run directory and its lock, startup from the
//! store, the control server, and a clean stop on SIGTERM/SIGINT.
//!
//! Threads: the main thread runs the control accept loop; a signal thread waits for
//! SIGTERM/SIGINT; control connections get threads of their own (see [`control`]).
mod control;
mod flows;
mod format;
mod hooks;
mod housekeeping;
mod live;
pub mod options;
mod runtime;
mod switch;

pub use switch::Switch;

use crate::proto::CTL_SOCKET;
use crate::store::Store;
use clap::Parser;
use nix::fcntl::{Flock, FlockArg};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// vireod: the Vireo virtual switch daemon.
#[derive(Parser, Debug)]
#[command(version, about)]
pub struct Args {
    /// Run directory: control socket, OpenFlow sockets, default vhost-user sockets
    /// [default: $VIREO_RUN_DIR, else /run/vireo as root, else ./run]
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Configuration store [default: RUN_DIR/conf.db]
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// PMD thread cores, e.g. `0` or `0,2-3` (saved in the store)
    #[arg(long)]
    pub pmd_cores: Option<String>,
    /// Log level: error, warn, info, debug or trace
    #[arg(long, default_value = "info")]
    pub log_level: tracing::Level,
}

/// Runs the daemon; returns the process exit status.
pub fn main() -> i32 {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_max_level(args.log_level)
        .init();
    match run(args) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("vireod: {e}");
            1
        }
    }
}

/// Holds the run directory's and the store's locks for the daemon's life.
struct Locks {
    _run: Flock<File>,
    _db: Flock<File>,
}

fn lock_file(path: &Path, what: &str) -> Result<Flock<File>, String> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| format!("cannot open lock file {}: {e}", path.display()))?;
    Flock::lock(f, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
        format!(
            "{what} is in use by another vireod (lock {} held: {e})",
            path.display()
        )
    })
}

fn run(args: Args) -> Result<(), String> {
    let run_dir = crate::proto::default_run_dir(args.run_dir.as_deref());
    std::fs::create_dir_all(&run_dir)
        .map_err(|e| format!("cannot create run directory {}: {e}", run_dir.display()))?;
    let db = args.db.clone().unwrap_or_else(|| run_dir.join("conf.db"));
    let mut run_lock = lock_file(&run_dir.join("vireod.pid"), "the run directory")?;
    let db_lock = lock_file(
        &db.with_extension("lock"),
        &format!("store {}", db.display()),
    )?;
    let _ = run_lock.set_len(0);
    let _ = writeln!(*run_lock, "{}", std::process::id());
    let _locks = Locks {
        _run: run_lock,
        _db: db_lock,
    };

    let mut store = Store::open(&db).map_err(|e| format!("{e}; refusing to start"))?;
    if let Some(cores) = &args.pmd_cores {
        options::parse_cpu_list(cores).map_err(|e| format!("--pmd-cores: {e}"))?;
        store
            .update(|c| {
                c.pmd_cores = Some(cores.clone());
                Ok::<_, crate::store::StoreError>(())
            })
            .map_err(|e| e.to_string())?;
    }
    tracing::info!(run_dir = %run_dir.display(), db = %db.display(), "vireod starting");
    let switch = Arc::new(Mutex::new(Switch::new(store, run_dir.clone())?));

    let sock = run_dir.join(CTL_SOCKET);
    // We hold the run directory's lock, so a socket file left here is stale.
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock)
        .map_err(|e| format!("cannot listen on {}: {e}", sock.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    spawn_signal_thread(stop.clone(), sock.clone())?;
    tracing::info!(socket = %sock.display(), "vireod ready");

    control::serve(listener, switch.clone(), stop);

    tracing::info!("vireod stopping");
    switch.lock().unwrap_or_else(|e| e.into_inner()).shutdown();
    let _ = std::fs::remove_file(&sock);
    tracing::info!("vireod stopped");
    Ok(())
}

fn spawn_signal_thread(stop: Arc<AtomicBool>, sock: PathBuf) -> Result<(), String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                tracing::info!(signal = sig, "stop requested");
                stop.store(true, Ordering::SeqCst);
                // Wake the accept loop.
                let _ = UnixStream::connect(&sock);
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(())
}
