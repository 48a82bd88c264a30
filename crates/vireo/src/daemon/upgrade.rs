//! `vireoctl upgrade [--binary PATH]` in the running vireod: starts the new binary with this
//! process's arguments plus `--takeover RUN_DIR/vireod.upgrade`, hands it every socket, lock
//! and vhost-user connection with their live state (see [`super::handover`]), and exits once
//! the new process runs the rings. Until the switch-over nothing here changes what the
//! switch does: the vhost-user control threads are only paused (PMDs keep forwarding), and any
//! failure (binary missing, new process exits or refuses the state, a deadline passes) resumes
//! them and answers the command with the reason. After the switch-over (rings stopped here)
//! a new process that does not confirm within [`STARTED_DEADLINE`] is killed and the rings are
//! taken back at the indices they stopped at.
//!
//! Threads: the control connection thread that took the command, with the `Switch` mutex held
//! for the whole upgrade (no other command changes the switch meanwhile).
use super::handover::{self, Offer, Reply, STATE_VERSION};
use super::live::LivePort;
use super::switch::{CmdError, CmdResult, Switch};
use crate::proto::Response;
use serde_json::json;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long the new process may take to connect to the handover socket. (With the deadlines
/// below, an upgrade answers within vireoctl's default 30 s timeout.)
const CONNECT_DEADLINE: Duration = Duration::from_secs(10);
/// How long it may take to build everything and answer the offer.
const READY_DEADLINE: Duration = Duration::from_secs(10);
/// How long it may take to confirm that its rings run, after the switch-over.
pub const STARTED_DEADLINE: Duration = Duration::from_secs(5);
/// How long one vhost-user control thread may take to pause (it finishes the message it is
/// reading, which has a 1 s deadline).
const PARK_DEADLINE: Duration = Duration::from_millis(2500);

/// Set once the upgrade succeeded: the control connection exits the process after writing the
/// answer (no destructor runs: socket files stay for the new process).
pub static EXIT_AFTER_REPLY: AtomicBool = AtomicBool::new(false);

/// What the daemon kept from its start for an upgrade.
pub struct Ctx {
    /// The binary it was started from (`/proc/self/exe` at start).
    pub exe: PathBuf,
    /// Its arguments (without `--takeover`).
    pub args: Vec<OsString>,
    /// The control socket (a duplicate).
    pub control: UnixListener,
    /// The run directory's and the store's lock files (duplicates: the flock comes along).
    pub locks: Vec<File>,
}

impl Ctx {
    /// The daemon's own start: binary and arguments as given, minus any `--takeover`.
    pub fn new(control: UnixListener, locks: Vec<File>) -> Ctx {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
        Ctx {
            exe,
            args: strip_takeover(std::env::args_os().skip(1)),
            control,
            locks,
        }
    }
}

/// Arguments without `--takeover X` / `--takeover=X`.
pub fn strip_takeover(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
            continue;
        }
        let s = a.to_string_lossy();
        if s == "--takeover" {
            skip = true;
        } else if !s.starts_with("--takeover=") {
            out.push(a);
        }
    }
    out
}

/// The upgrade's options.
struct Opts {
    binary: Option<PathBuf>,
    version: u32,
    /// Send the af-xdp frame books (off only for tests: the new process must then reopen).
    xsk_books: bool,
}

fn parse(args: &[String]) -> Result<Opts, CmdError> {
    let mut o = Opts {
        binary: None,
        version: STATE_VERSION,
        xsk_books: true,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| CmdError(format!("{name} needs a value")))
        };
        match a.as_str() {
            "--binary" => o.binary = Some(val("--binary")?.into()),
            // For tests: hand af-xdp ports over without their frame books (the new process
            // must reopen them).
            "--no-xsk-books" => o.xsk_books = false,
            // For tests: offer the state under another version number.
            "--state-version" => {
                o.version = val("--state-version")?
                    .parse()
                    .map_err(|_| CmdError("--state-version needs a number".into()))?
            }
            other => {
                return Err(CmdError(format!(
                    "usage: upgrade [--binary PATH] (unknown argument {other:?})"
                )))
            }
        }
    }
    Ok(o)
}

fn check_binary(p: &Path) -> Result<(), String> {
    let md = std::fs::metadata(p).map_err(|e| format!("binary {}: {e}", p.display()))?;
    if !md.is_file() || md.permissions().mode() & 0o111 == 0 {
        return Err(format!("{} is not an executable file", p.display()));
    }
    Ok(())
}

/// The answer to a failed upgrade.
fn failed(why: &str) -> CmdError {
    tracing::warn!(reason = %why, "upgrade failed; this vireod keeps serving");
    CmdError(format!(
        "upgrade failed, vireod {} keeps serving: {why}",
        std::process::id()
    ))
}

/// The new process and the handover socket, cleaned up on failure.
struct Attempt {
    child: Child,
    sock: PathBuf,
    sock_id: Option<vhost::sockfile::FileId>,
}

impl Attempt {
    /// Why the new process is gone, if it is.
    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(st)) => Some(format!(
                "the new vireod exited ({st}) before the switch-over"
            )),
            _ => None,
        }
    }

    /// Kills the new process (ours, by pid) and removes the handover socket.
    fn abandon(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        vhost::sockfile::remove_if_ours(&self.sock, self.sock_id.take());
    }
}

/// Waits for the new process to connect (or die); checks the peer is that process.
fn accept(l: &UnixListener, a: &mut Attempt) -> Result<UnixStream, String> {
    let deadline = Instant::now() + CONNECT_DEADLINE;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                let cred =
                    nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::PeerCredentials)
                        .map_err(|e| format!("handover socket: {e}"))?;
                if cred.pid() as u32 != a.child.id() {
                    tracing::warn!(
                        pid = cred.pid(),
                        "upgrade: refused a handover connection from another process"
                    );
                    continue;
                }
                s.set_nonblocking(false).map_err(|e| e.to_string())?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(format!("handover socket: {e}")),
        }
        if let Some(why) = a.exited() {
            return Err(why);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the new vireod did not connect within {} s",
                CONNECT_DEADLINE.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn dup(f: impl AsFd, fds: &mut Vec<OwnedFd>) -> Result<usize, String> {
    fds.push(f.as_fd().try_clone_to_owned().map_err(|e| e.to_string())?);
    Ok(fds.len() - 1)
}

impl Switch {
    /// `upgrade [--binary PATH]`.
    pub(super) fn upgrade(&mut self, args: &[String]) -> CmdResult {
        let opts = parse(args)?;
        let (binary, start_args) = {
            let ctx = self
                .upgrade_ctx
                .as_ref()
                .ok_or_else(|| CmdError("this vireod cannot upgrade".into()))?;
            (
                opts.binary.clone().unwrap_or_else(|| ctx.exe.clone()),
                ctx.args.clone(),
            )
        };
        check_binary(&binary).map_err(|e| failed(&e))?;
        let sock = self.run_dir().join(handover::SOCKET);
        let access = vhost::sockfile::Access {
            mode: 0o600,
            gid: None,
        };
        let (listener, sock_id) = vhost::sockfile::bind_listener(&sock, access)
            .map_err(|e| failed(&format!("{}: {e}", sock.display())))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| CmdError(e.to_string()))?;
        let child = Command::new(&binary)
            .args(&start_args)
            .arg("--takeover")
            .arg(&sock)
            .stdin(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                vhost::sockfile::remove_if_ours(&sock, Some(sock_id));
                return Err(failed(&format!("cannot start {}: {e}", binary.display())));
            }
        };
        let mut a = Attempt {
            child,
            sock,
            sock_id: Some(sock_id),
        };
        tracing::info!(binary = %binary.display(), pid = a.child.id(), "upgrade: new vireod started");
        match self.hand_over(&listener, &mut a, &opts) {
            Ok((pid, gap_us)) => {
                vhost::sockfile::remove_if_ours(&a.sock, a.sock_id.take());
                EXIT_AFTER_REPLY.store(true, Ordering::SeqCst);
                tracing::info!(new_pid = pid, "upgrade: done, this vireod exits");
                let old = std::process::id();
                let gap = gap_us.map_or_else(String::new, |g| {
                    format!(
                        "; switch-over gap {g} us (PMDs stopped here -> let at the rings there)"
                    )
                });
                Ok(Response::ok(
                    format!(
                        "vireod upgraded: pid {old} -> {pid} ({}){gap}",
                        binary.display()
                    ),
                    json!({ "old_pid": old, "pid": pid, "binary": binary, "switch_over_us": gap_us }),
                ))
            }
            Err(why) => {
                a.abandon();
                Err(failed(&why))
            }
        }
    }

    fn vhost_ports(&self) -> Vec<(String, std::sync::Arc<ports::vhost_user::VhostUserPort>)> {
        self.live
            .iter()
            .filter_map(|(n, lp)| match lp {
                LivePort::Vhost(v) => Some((n.clone(), v.clone())),
                _ => None,
            })
            .collect()
    }

    /// Everything between the new process's start and its confirmation; returns its pid and
    /// the switch-over gap in µs (from this process's PMDs stopping to the new one's being
    /// let at the rings; `None` from a new process that does not say when).
    fn hand_over(
        &mut self,
        l: &UnixListener,
        a: &mut Attempt,
        opts: &Opts,
    ) -> Result<(u32, Option<u64>), String> {
        let version = opts.version;
        let s = accept(l, a)?;
        let ports = self.vhost_ports();
        let mut parked = Vec::new();
        let resume = |parked: &[std::sync::Arc<ports::vhost_user::VhostUserPort>]| {
            for p in parked {
                if let Err(e) = p.endpoint().resume(&[]) {
                    tracing::error!(error = %e, "upgrade: cannot resume a vhost-user port");
                }
            }
        };
        for (name, p) in &ports {
            if let Err(e) = p.endpoint().park(PARK_DEADLINE) {
                resume(&parked);
                return Err(format!("port {name}: {e}"));
            }
            parked.push(p.clone());
        }
        let offer = self.offer(&ports, version);
        let (offer, fds) = match offer {
            Ok(o) => o,
            Err(e) => {
                resume(&parked);
                return Err(e);
            }
        };
        let body = serde_json::to_vec(&offer).map_err(|e| e.to_string())?;
        let step = handover::send(&s, &body, &fds)
            .map_err(|e| format!("cannot send the state: {e}"))
            .and_then(|()| {
                handover::recv_reply(&s, READY_DEADLINE).map_err(|e| {
                    a.exited()
                        .unwrap_or_else(|| format!("no answer from the new vireod: {e}"))
                })
            });
        drop(fds);
        match step {
            Ok(Reply::Ready) => {}
            Ok(Reply::Refused { why }) => {
                resume(&parked);
                return Err(format!("the new vireod refused the state: {why}"));
            }
            Ok(other) => {
                resume(&parked);
                return Err(format!("unexpected answer from the new vireod: {other:?}"));
            }
            Err(e) => {
                resume(&parked);
                return Err(e);
            }
        }
        // The switch-over: from here the rings stop in this process.
        let t0 = Instant::now();
        // Nothing more is taken from the guests; once every PMD has sent what it had taken
        // (sends still go through), the rings stop.
        for (_, p) in &ports {
            p.endpoint().hold_rx(true);
        }
        // Nor from the handed-over taps and packet sockets: what arrives waits in the kernel
        // for the new process, which holds the same fds.
        let xsk_names: Vec<String> = offer.af_xdp.keys().cloned().collect();
        self.hold_kernel_rx(true, &xsk_names);
        if let Err(e) = self.rt.dp.quiesce() {
            tracing::warn!(error = %e, "upgrade: PMDs did not quiesce; packets in flight may be lost");
        }
        // The PMDs' last poll here is over.
        let stopped_ns = handover::mono_ns();
        let bases: BTreeMap<String, Vec<(usize, u16)>> = ports
            .iter()
            .map(|(n, p)| (n.clone(), p.endpoint().hand_over_rings()))
            .collect();
        // Live state the PMDs changed until they stopped: learned MACs and connections.
        let with_live = version >= 2;
        let macs = if with_live {
            self.macs_to_hand_over()
        } else {
            BTreeMap::new()
        };
        let ct = with_live.then(|| self.rt.dp.conntrack().export(conntrack::clock_ms()));
        // The af-xdp ports handed over: held, so their books stay as read here.
        let mut xsk = self.xsk_books(&xsk_names);
        if !opts.xsk_books {
            xsk.clear();
        }
        // Port counters, once nothing moves here any more (every port held, PMDs quiesced).
        let counters = if version >= 3 {
            self.live
                .iter()
                .map(|(n, lp)| (n.clone(), lp.port().stats()))
                .collect()
        } else {
            BTreeMap::new()
        };
        let final_msg = Reply::Final {
            bases,
            macs,
            conntrack: ct.is_some(),
            xsk,
            counters,
            stopped_ns,
        };
        let step = handover::send_reply(&s, &final_msg)
            .and_then(|()| ct.map_or(Ok(()), |b| handover::send(&s, &b, &[])))
            .map_err(|e| e.to_string())
            .and_then(|()| handover::recv_reply(&s, STARTED_DEADLINE).map_err(|e| e.to_string()));
        match step {
            Ok(Reply::Started { pid, resumed_ns }) => {
                for (_, p) in &ports {
                    p.endpoint().keep_socket_file();
                }
                let gap_us = (resumed_ns > 0).then(|| resumed_ns.saturating_sub(stopped_ns) / 1000);
                tracing::info!(
                    us = t0.elapsed().as_micros() as u64,
                    gap_us = ?gap_us,
                    "upgrade: rings handed over"
                );
                Ok((pid, gap_us))
            }
            other => {
                // Kill the new process before this one touches the rings again.
                a.abandon();
                self.hold_kernel_rx(false, &xsk_names);
                resume(&parked);
                Err(format!(
                    "the new vireod did not confirm the switch-over ({other:?}); this vireod took \
                     its rings back"
                ))
            }
        }
    }

    /// Holds (or releases) reading from every tap, `af-packet` and tunnel port (their fds are
    /// handed over), and every ring of the `af-xdp` ports named in `xsk` (handed over too).
    fn hold_kernel_rx(&self, on: bool, xsk: &[String]) {
        for (name, lp) in &self.live {
            match lp {
                LivePort::Tap(t) => t.hold_rx(on),
                LivePort::AfPacket(a) => a.hold_rx(on),
                LivePort::Tunnel(t) => t.hold_rx(on),
                LivePort::AfXdp(x) if xsk.contains(name) => x.hold_rx(on),
                _ => {}
            }
        }
    }

    /// The frame books of the `af-xdp` ports named (held: no PMD changes them any more).
    fn xsk_books(&self, names: &[String]) -> BTreeMap<String, Vec<handover::XskBooks>> {
        names
            .iter()
            .filter_map(|n| {
                let x = self.live.get(n)?.af_xdp()?;
                let books = x
                    .books()
                    .into_iter()
                    .map(|b| handover::XskBooks {
                        rx_free: b.rx_free,
                        tx_free: b.tx_free,
                    })
                    .collect();
                Some((n.clone(), books))
            })
            .collect()
    }

    /// Every bridge's learned MACs, by port name, with their age.
    fn macs_to_hand_over(&self) -> BTreeMap<String, Vec<handover::MacLine>> {
        let mut out = BTreeMap::new();
        for br in self.config().bridges.keys() {
            match self.rt.pipeline.mac_entries_named(br) {
                Ok(v) => {
                    out.insert(br.clone(), v);
                }
                Err(e) => tracing::warn!(bridge = %br, error = %e, "upgrade: MACs not handed over"),
            }
        }
        out
    }

    /// The offer and its fds.
    fn offer(
        &self,
        ports: &[(String, std::sync::Arc<ports::vhost_user::VhostUserPort>)],
        version: u32,
    ) -> Result<(Offer, Vec<OwnedFd>), String> {
        let ctx = self.upgrade_ctx.as_ref().ok_or("no upgrade context")?;
        let mut fds = Vec::new();
        let control = dup(&ctx.control, &mut fds)?;
        let mut locks = Vec::new();
        for f in &ctx.locks {
            locks.push(dup(f, &mut fds)?);
        }
        let mut mgmt = BTreeMap::new();
        let bridges: Vec<(String, std::sync::Arc<ofswitch::BridgeOf>)> = self
            .rt
            .bridges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(n, b)| (n.clone(), b.clone()))
            .collect();
        for (name, b) in &bridges {
            if let Some(fd) = b.mgmt_socket() {
                fds.push(fd);
                mgmt.insert(name.clone(), fds.len() - 1);
            }
        }
        let (mut taps, mut af_packet, mut tunnels) =
            (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        for (name, lp) in &self.live {
            let (fd, map) = match lp {
                LivePort::Tap(t) => (t.dup_fd(), &mut taps),
                // Only from version 2 on: a version-1 build would not know to take it.
                LivePort::AfPacket(a) if version >= 2 => (a.dup_fd(), &mut af_packet),
                // A build that does not know `tunnels` ignores it and binds anew once this
                // process has exited (the socket closes with it).
                LivePort::Tunnel(t) if version >= 2 => (t.dup_fd(), &mut tunnels),
                _ => continue,
            };
            if let Some(fd) = fd {
                fds.push(fd);
                map.insert(name.clone(), fds.len() - 1);
            }
        }
        let mut af_xdp = BTreeMap::new();
        for (name, lp) in &self.live {
            // Only from version 3 on: an older build would not take them; with steering or
            // marks only from version 4 on (version 3 reopens those).
            let LivePort::AfXdp(x) = lp else { continue };
            if version < 3 {
                continue;
            }
            if version < 4 && (x.steer_nodes() > 0 || x.marks()) {
                tracing::info!(
                    port = %name,
                    version,
                    "upgrade: state version 3 does not carry xdp-steering or xdp-mark; the new vireod opens the port anew"
                );
                continue;
            }
            match x.dup_fds() {
                Ok((d, mode)) => {
                    let mut idx = |f: OwnedFd| {
                        fds.push(f);
                        fds.len() - 1
                    };
                    let (link, prog, map) = (idx(d.link), idx(d.prog), idx(d.map));
                    let steer = d.steer.map(|(s, st)| (idx(s), idx(st)));
                    let marks = d.marks.map(&mut idx);
                    let (mut queues, mut steered) = (Vec::new(), Vec::new());
                    for q in d.queues {
                        queues.push((idx(q.sock), idx(q.umem)));
                        steered.push(q.steered.into_iter().map(&mut idx).collect::<Vec<_>>());
                    }
                    if steered.iter().all(Vec::is_empty) {
                        steered.clear();
                    }
                    af_xdp.insert(
                        name.clone(),
                        handover::XskOffer {
                            mode: mode.to_string(),
                            link,
                            prog,
                            map,
                            queues,
                            steered,
                            steer,
                            marks,
                        },
                    );
                }
                Err(e) => tracing::warn!(
                    port = %name,
                    error = %e.0,
                    "upgrade: af-xdp port not handed over; the new vireod opens it anew"
                ),
            }
        }
        let mut vhost = BTreeMap::new();
        for (name, p) in ports {
            let h = p
                .endpoint()
                .handover(&mut fds)
                .ok_or_else(|| format!("port {name} is not paused"))?
                .map_err(|e| format!("port {name}: {e}"))?;
            vhost.insert(name.clone(), h);
        }
        let (mut flows, mut meters, mut groups) =
            (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        for br in self.config().bridges.keys() {
            let pl = &self.rt.pipeline;
            let g = ofswitch::group_handover::export_groups(pl, br)
                .map_err(|e| format!("bridge {br}: groups: {e}"))?;
            groups.insert(
                br.clone(),
                g.iter().map(|m| super::format::to_hex(m)).collect(),
            );
            let lines = pl
                .dump_flows_text(br, None)
                .map_err(|e| format!("bridge {br}: {e}"))?;
            flows.insert(br.clone(), lines);
            let lines = pl
                .dump_meters_text(br)
                .map_err(|e| format!("bridge {br}: {e}"))?;
            meters.insert(br.clone(), lines);
        }
        Ok((
            Offer {
                version,
                pid: std::process::id(),
                control,
                locks,
                mgmt,
                vhost,
                flows,
                meters,
                taps,
                af_packet,
                tunnels,
                af_xdp,
                groups,
            },
            fds,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takeover_argument_is_not_passed_on() {
        let a = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            strip_takeover(
                a(&[
                    "--run-dir",
                    "r",
                    "--takeover",
                    "x",
                    "--takeover=y",
                    "--pmd-cores",
                    "0"
                ])
                .into_iter()
            ),
            a(&["--run-dir", "r", "--pmd-cores", "0"])
        );
    }
}
