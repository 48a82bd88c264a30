//! `vireod`: command-line flags, logging, the run directory and its lock, startup from the
//! store, the control server, and a clean stop on SIGTERM/SIGINT. Started with `--takeover
//! PATH` (by `vireoctl upgrade`, see [`upgrade`] and [`takeover`]) it takes the locks, the
//! control socket and the live ports over from the running vireod instead.
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
mod handover;
mod hooks;
mod housekeeping;
mod kroutes;
mod live;
mod marks;
mod native;
pub mod options;
mod runtime;
mod steering;
mod switch;
mod takeover;
mod underlay;
mod upgrade;

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
    /// Internal (`vireoctl upgrade`): take over the vireod listening on this handover socket
    #[arg(long, hide = true)]
    pub takeover: Option<PathBuf>,
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
    // A takeover gets the locks (flock held) and the control socket from the old process.
    let mut taken = match &args.takeover {
        Some(p) => Some(takeover::Taken::receive(p)?),
        None => None,
    };
    // Held for the daemon's life (never unlocked explicitly: the lock goes with the last fd,
    // which after an upgrade is the new process's).
    let mut _flocks: Vec<Flock<File>> = Vec::new();
    let locks: Vec<File> = match &mut taken {
        Some(t) => std::mem::take(&mut t.locks),
        None => {
            _flocks.push(lock_file(&run_dir.join("vireod.pid"), "the run directory")?);
            _flocks.push(lock_file(
                &db.with_extension("lock"),
                &format!("store {}", db.display()),
            )?);
            _flocks
                .iter()
                .map(|f| f.try_clone())
                .collect::<Result<Vec<File>, _>>()
                .map_err(|e| format!("lock files: {e}"))?
        }
    };
    if locks.len() != 2 {
        return Err(format!("{} lock files handed over, not 2", locks.len()));
    }
    if taken.is_none() {
        write_pid(&locks[0]);
    }

    let store = Store::open(&db).map_err(|e| format!("{e}; refusing to start"));
    let mut store = match &taken {
        Some(t) => t.or_refuse(store),
        None => store?,
    };
    if let Some(cores) = &args.pmd_cores {
        options::parse_cpu_list(cores).map_err(|e| format!("--pmd-cores: {e}"))?;
        store
            .update(|c| {
                c.pmd_cores = Some(cores.clone());
                Ok::<_, crate::store::StoreError>(())
            })
            .map_err(|e| e.to_string())?;
    }
    tracing::info!(run_dir = %run_dir.display(), db = %db.display(), takeover = taken.is_some(), "vireod starting");
    let built = Switch::build(store, run_dir.clone(), access, taken.as_mut());
    let mut switch = match &taken {
        Some(t) => t.or_refuse(built),
        None => built?,
    };
    if let Some(t) = &taken {
        switch.take_flows(t);
    }

    let sock = run_dir.join(CTL_SOCKET);
    let (listener, sock_id) = match taken.as_mut().and_then(|t| t.control.take()) {
        Some(l) => {
            let id =
                vhost::sockfile::identity(&sock).map_err(|e| format!("{}: {e}", sock.display()));
            let id = taken.as_ref().expect("taken").or_refuse(id);
            (l, id)
        }
        // A stale socket left here is replaced; anything else (a symlink, a file) is refused.
        None => vhost::sockfile::bind_listener(&sock, access)
            .map_err(|e| format!("cannot listen on {}: {e}", sock.display()))?,
    };
    let dup = |l: &std::os::unix::net::UnixListener| l.try_clone();
    let ctx_listener = dup(&listener).map_err(|e| format!("control socket: {e}"))?;
    let ctx_locks = locks
        .iter()
        .map(File::try_clone)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("lock files: {e}"))?;
    switch.upgrade_ctx = Some(upgrade::Ctx::new(ctx_listener, ctx_locks));
    let switch = Arc::new(Mutex::new(switch));
    if let Some(t) = &taken {
        // The switch-over: the old process stops its rings and says where they stand.
        let so = t.ready();
        let resumed_ns = {
            let mut sw = switch.lock().unwrap_or_else(|e| e.into_inner());
            sw.take_live_state(&so);
            sw.take_rings(&so.bases)
        };
        write_pid(&locks[0]);
        t.started(resumed_ns);
        {
            let mut sw = switch.lock().unwrap_or_else(|e| e.into_inner());
            sw.start_deferred();
            sw.take_macs(&so);
            sw.take_counters(&so);
        }
        tracing::info!("takeover done");
    }
    drop(taken);
    let _locks = locks;
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

/// Writes our pid into the run directory's lock file.
fn write_pid(f: &File) {
    let mut f = f;
    let _ = f.set_len(0);
    let _ = std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0));
    let _ = writeln!(f, "{}", std::process::id());
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
