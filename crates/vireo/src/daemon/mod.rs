//! `vireod`: command-line flags, logging, the run directory and its lock, startup from the
//! store, the control server, and a clean stop on SIGTERM/SIGINT.
//!
//! Threads: the main thread runs the control accept loop; a signal thread waits for
//! SIGTERM/SIGINT; control connections get threads of their own (see [`control`]).
//!
//! Who can reach the daemon: it runs under umask 077, so every file and socket it creates is
//! private to its user until given its final mode (no window where a socket is open to
//! others). The run directory is 0750 and `vireod.ctl` and each `BR.mgmt` 0660, with the
//! group of `--socket-group` when given. SIGTERM stops the daemon within [`STOP_DEADLINE`]:
//! a clean stop normally takes well under it, and if one ever does not, the process exits
//! anyway with a logged error (the store is always consistent on disk).
mod control;
mod ctops;
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
use std::os::unix::net::UnixStream;
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
    /// Group (name or number) given the run directory, `vireod.ctl` and every `BR.mgmt`
    /// socket: its members may run vireoctl and ovs-ofctl [default: the daemon's group]
    #[arg(long)]
    pub socket_group: Option<String>,
}

/// How long SIGTERM may take to stop the daemon.
pub const STOP_DEADLINE: std::time::Duration = std::time::Duration::from_millis(1900);

/// Creates the run directory 0750 (only its last component; parents as the umask says) and
/// gives it `gid`. An existing directory is left as it is, except that `gid` is applied.
fn make_run_dir(run_dir: &Path, gid: Option<u32>) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let err = |e: std::io::Error| format!("cannot create run directory {}: {e}", run_dir.display());
    if let Some(parent) = run_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(err)?;
    }
    match std::fs::DirBuilder::new().mode(0o750).create(run_dir) {
        Ok(()) => {
            // The umask may have taken bits away; set exactly 0750.
            std::fs::set_permissions(run_dir, std::fs::Permissions::from_mode(0o750))
                .map_err(err)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && run_dir.is_dir() => {
            use std::os::unix::fs::MetadataExt;
            let mode = std::fs::metadata(run_dir).map_or(0, |m| m.mode());
            if mode & 0o007 != 0 {
                tracing::warn!(
                    run_dir = %run_dir.display(),
                    mode = format!("{:04o}", mode & 0o7777),
                    "the run directory is open to other users; its sockets are 0660 all the same"
                );
            }
        }
        Err(e) => return Err(err(e)),
    }
    if let Some(gid) = gid {
        std::os::unix::fs::chown(run_dir, None, Some(gid)).map_err(|e| {
            format!(
                "cannot give run directory {} group {gid}: {e}",
                run_dir.display()
            )
        })?;
    }
    Ok(())
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
    let gid = args
        .socket_group
        .as_deref()
        .map(options::parse_group)
        .transpose()
        .map_err(|e| format!("--socket-group: {e}"))?;
    let access = vhost::sockfile::Access { mode: 0o660, gid };
    let run_dir = crate::proto::default_run_dir(args.run_dir.as_deref());
    // Parents of the run directory with the caller's umask, so they stay reachable.
    make_run_dir(&run_dir, gid)?;
    // Before any thread exists: everything we create from here on is private until chmod'ed.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
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
    let switch = Arc::new(Mutex::new(Switch::new(store, run_dir.clone(), access)?));

    let sock = run_dir.join(CTL_SOCKET);
    // A stale socket left here is replaced; anything else (a symlink, a file) is refused.
    let (listener, sock_id) = vhost::sockfile::bind_listener(&sock, access)
        .map_err(|e| format!("cannot listen on {}: {e}", sock.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    spawn_signal_thread(stop.clone(), sock.clone())?;
    tracing::info!(socket = %sock.display(), "vireod ready");

    control::serve(listener, switch.clone(), stop);

    tracing::info!("vireod stopping");
    vhost::sockfile::remove_if_ours(&sock, Some(sock_id));
    let retired = {
        let mut sw = switch.lock().unwrap_or_else(|e| e.into_inner());
        sw.shutdown();
        sw.take_retired()
    };
    for lp in retired {
        lp.join();
    }
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
                // The main thread normally returns long before this.
                std::thread::sleep(STOP_DEADLINE);
                tracing::error!(
                    "clean stop not finished after {} ms; exiting anyway",
                    STOP_DEADLINE.as_millis()
                );
                std::process::exit(2);
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(())
}
