//! Helpers shared by the integration tests of several crates: `ovs-ofctl` run against a
//! switch's OpenFlow socket, and controller processes (Faucet, os-ken) from the project's
//! Python environment. Test code only; runs on the calling test's thread.
pub mod veth;

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// True when `VIREO_REQUIRE_PEERS=1`: a missing real peer is then a test failure, not a skip
/// (`scripts/test.sh`, and so CI, sets it).
pub fn peers_required() -> bool {
    std::env::var("VIREO_REQUIRE_PEERS").is_ok_and(|v| v == "1")
}

/// Reports a real peer that is missing and returns false: a panic naming what to install
/// when [`peers_required`], else `SKIPPED: ...` on stderr (the caller then skips).
pub fn missing_peer(what: &str, package: &str) -> bool {
    let msg = format!("{what} missing (Debian package {package}; scripts/setup.sh installs it)");
    assert!(!peers_required(), "VIREO_REQUIRE_PEERS=1: {msg}");
    // Straight to fd 2, not `eprintln!`: the test harness captures the macros' output of a
    // passing test, and a skip must be seen.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {msg}");
    false
}

/// True if the program `binary` can be started here. Otherwise [`missing_peer`]: a failure
/// under `VIREO_REQUIRE_PEERS=1` naming `package`, else a printed skip and false.
pub fn require_peer(binary: &str, package: &str) -> bool {
    let started = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    started || missing_peer(binary, package)
}

/// True if `ovs-ofctl` runs here (see [`require_peer`]).
pub fn have_ofctl() -> bool {
    require_peer("ovs-ofctl", "openvswitch-common")
}

/// What one `ovs-ofctl` run gave.
pub struct Out {
    /// Exit status 0.
    pub ok: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `ovs-ofctl -O OpenFlow13 OPTS CMD unix:SOCK ARGS...`, killed after 30 s.
pub fn ofctl(sock: &Path, opts: &[&str], cmd: &str, args: &[&str]) -> Out {
    let target = format!("unix:{}", sock.display());
    let out = Command::new("timeout")
        .args(["30", "ovs-ofctl", "-O", "OpenFlow13"])
        .args(opts)
        .args([cmd, &target])
        .args(args)
        .output()
        .expect("run ovs-ofctl");
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `ovs-ofctl [-O VERSION] OPTS CMD unix:SOCK ARGS...`; `version` None = no `-O`
/// (ovs-ofctl's default, OpenFlow 1.0), as an OVS how-to types it.
pub fn ofctl_version(
    sock: &Path,
    version: Option<&str>,
    opts: &[&str],
    cmd: &str,
    args: &[&str],
) -> Out {
    let target = format!("unix:{}", sock.display());
    let mut c = Command::new("timeout");
    c.args(["30", "ovs-ofctl"]);
    if let Some(v) = version {
        c.args(["-O", v]);
    }
    let out = c
        .args(opts)
        .args([cmd, &target])
        .args(args)
        .output()
        .expect("run ovs-ofctl");
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// [`ofctl`] that must succeed; its standard output.
pub fn ofctl_must(sock: &Path, cmd: &str, args: &[&str]) -> String {
    let o = ofctl(sock, &[], cmd, args);
    assert!(o.ok, "ovs-ofctl {cmd} {args:?} failed: {}", o.stderr);
    o.stdout
}

/// `rel` inside the Python virtual environment `scripts/setup.sh` makes for the controllers
/// (`VIREO_VENV`, default `/opt/vireo-venv`); None, said on stderr, when missing (the caller
/// skips).
pub fn venv_file(rel: &str) -> Option<PathBuf> {
    let venv = std::env::var("VIREO_VENV").unwrap_or_else(|_| "/opt/vireo-venv".into());
    let p = PathBuf::from(venv).join(rel);
    if p.exists() {
        Some(p)
    } else {
        missing_peer(
            &p.display().to_string(),
            "python3-venv + PyPI faucet/os-ken",
        );
        None
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago, for a listener another process opens.
///
/// Taken below the kernel's ephemeral range (`ip_local_port_range`, 32768-60999 by default),
/// not from `bind(0)`: an ephemeral port freed here can be handed straight to another test's
/// outgoing connection as its local port before our listener binds it ("Address already in
/// use"). Each test process walks its own stride of 10000-32000 from its pid, and a port is
/// only returned after a bind to it succeeded.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 10_000;
    const SPAN: u32 = 22_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = (std::process::id().wrapping_mul(2_654_435_761)) % SPAN;
    for _ in 0..SPAN {
        let i = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (LOW + (base + i * 7) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free TCP port in {LOW}..{}", LOW + SPAN);
}

/// Runs `listen` with a [`free_port`] until it does not fail with "Address already in use"
/// (at most 5 ports): for a listener the code under test opens itself, where a port that was
/// free a moment ago can be taken in between (seen twice in clean-clone CI runs of the snoop
/// test). Any other error is returned at once.
pub fn listen_on_free_port<T, E: std::fmt::Display>(
    mut listen: impl FnMut(u16) -> Result<T, E>,
) -> Result<(u16, T), E> {
    let mut tries = 0;
    loop {
        let port = free_port();
        match listen(port) {
            Ok(t) => return Ok((port, t)),
            Err(e) if tries < 4 && e.to_string().contains("Address already in use") => {
                let _ = writeln!(std::io::stderr(), "port {port}: {e}; another port");
                tries += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A helper process (a controller) with its output in a log file, killed on drop.
pub struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    /// Starts `cmd` with stdout and stderr going to `log`.
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Proc {
        let f = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdout(Stdio::from(f.try_clone().unwrap()))
            .stderr(Stdio::from(f))
            .spawn()
            .expect("start controller");
        Proc { child, log }
    }

    /// What it wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
