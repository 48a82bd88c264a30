//! A vhost-user endpoint: the socket (server: we listen, client: we connect and retry) and the
//! control thread that serves one frontend connection at a time.
//!
//! Threads: each endpoint runs ONE control thread, `vhost:<socket name>`, doing blocking I/O on
//! its socket (polled every 100 ms for shutdown). PMDs never touch the socket; they meet this
//! thread only in the [`Device`] slots. A frontend going away resets the device (rings stopped,
//! memory unmapped once the PMDs let go) and the thread waits for the next connection.
//!
//! Deadlines: a frontend can idle between messages for as long as it likes, but a message
//! must be complete within [`MSG_DEADLINE`] of its first byte and a reply taken within the
//! same time, or the connection is closed (logged, counted in `protocol_errors`); a client-mode
//! connect never waits on a peer that does not accept. Every other wait of this thread is a
//! ring slot lock a PMD holds for one burst. So [`Endpoint::stop`] is seen within about
//! 100 ms and [`Endpoint::join`] returns promptly whatever the frontend does. Callers that hold
//! a lock call [`Endpoint::stop`] under it and [`Endpoint::join`] after releasing it.
//!
//! Guest memory found lost (the frontend shrank its memory file; see `guestmem::lost`) ends the
//! connection the same way, within one poll tick, with a warning naming the region.
//!
//! Handover (`vireoctl upgrade`): [`Endpoint::park`] asks the control thread to stop between
//! two messages and leave its state (protocol state, listening socket, connection) in the
//! endpoint's parking place; PMDs keep polling meanwhile. The old process exports it
//! ([`Endpoint::handover`]), holds PMDs off the guest's tx rings ([`Endpoint::hold_rx`]) and
//! takes the rings off ([`Endpoint::hand_over_rings`]); the new one builds a parked endpoint
//! from it ([`Endpoint::adopt`]), installs the rings at the final indices
//! ([`Endpoint::start_rings`]) and starts the thread ([`Endpoint::resume`]). A failed upgrade
//! resumes the old endpoint as it was. Lock order: the parking place's mutex, then a ring slot.
use crate::backend::handover::BackendState;
use crate::backend::Backend;
use crate::shared::{ConnState, Device};
use crate::sock::{recv_msg, send_msg, set_send_timeout, RecvError, MSG_DEADLINE};
use crate::sockfile::{self, Access, FileId};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::net::{connect, socket_with, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const POLL_MS: u64 = 100;

/// Who opens the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// We listen on the socket path; the frontend connects.
    Server,
    /// The frontend listens; we connect, retrying every `reconnect_ms`.
    Client {
        /// Delay between connection attempts.
        reconnect_ms: u64,
    },
}

/// A running endpoint. Dropping it shuts it down.
pub struct Endpoint {
    dev: Arc<Device>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
    path: PathBuf,
    mode: Mode,
    /// The socket file we created (server mode), removed on stop if still ours.
    socket_file: Mutex<Option<FileId>>,
    /// Where the control thread leaves what it owns when asked to park (handover).
    park: Arc<Park>,
}

/// What the control thread owns: the protocol state, the listening socket (server mode) and
/// the connection, if one is open. Held by [`Park`] while no control thread runs (parked for
/// a handover, or handed over and not started yet).
struct Owned {
    backend: Backend,
    listener: Option<UnixListener>,
    conn: Option<UnixStream>,
    /// A handed-over server socket's file: the endpoint owns it (removes it on stop) only
    /// once resumed, so dropping a refused takeover never removes the old process's file.
    file: Option<FileId>,
}

/// The parking place of a control thread (see [`Endpoint::park`]).
#[derive(Default)]
struct Park {
    /// Someone wants the thread parked; it checks between messages and every poll tick.
    want: AtomicBool,
    /// The parked state. Lock order: after nothing; the thread takes it only to park.
    slot: Mutex<Option<Owned>>,
    parked: Condvar,
}

impl Park {
    /// Control thread: parks `o` if still wanted (checked under the lock, so a caller that
    /// gave up waiting never leaves a parked state behind with no thread); gives it back if not.
    fn put(&self, o: Owned) -> Option<Owned> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if !self.want.load(Relaxed) {
            return Some(o);
        }
        *slot = Some(o);
        self.parked.notify_all();
        None
    }
}

/// One handed-over endpoint: the connection state and the fd indices of its sockets (in the
/// fd list sent beside it).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Handover {
    /// Index of the listening socket (server mode).
    pub listener: Option<usize>,
    /// Index of the connected socket, if a frontend is connected.
    pub conn: Option<usize>,
    /// Connections made so far (kept across the handover: it made none).
    pub connections: u64,
    /// The connection's protocol state (features, memory table, rings).
    pub backend: BackendState,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("path", &self.path)
            .finish()
    }
}

/// Listens on `path`: only a stale socket there is replaced (a symlink, a regular file or a
/// live socket is refused and left alone); the file gets `access` with no moment where
/// others could connect (see [`sockfile`]).
fn bind(path: &Path, access: Access) -> io::Result<(UnixListener, FileId)> {
    let (l, id) = sockfile::bind_listener(path, access)?;
    l.set_nonblocking(true)?;
    Ok((l, id))
}

/// Connects to a frontend's socket without waiting: a peer whose accept queue is full answers
/// `EAGAIN` and the next attempt comes after the reconnect delay.
fn connect_now(path: &Path) -> io::Result<UnixStream> {
    let fd = socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    connect(&fd, &SocketAddrUnix::new(path)?)?;
    let s = UnixStream::from(fd);
    s.set_nonblocking(false)?;
    Ok(s)
}

impl Endpoint {
    /// Starts an endpoint with `pairs` queue pairs on `path`; a server socket gets the
    /// default [`Access`] (0660, the process's group).
    pub fn start(path: &Path, pairs: usize, mode: Mode) -> io::Result<Endpoint> {
        Self::start_with(path, pairs, mode, Access::default())
    }

    /// [`Endpoint::start`] with the server socket's mode and group (`access` is unused in
    /// client mode: the frontend owns that socket).
    pub fn start_with(
        path: &Path,
        pairs: usize,
        mode: Mode,
        access: Access,
    ) -> io::Result<Endpoint> {
        Endpoint::start_opts(path, pairs, mode, access, true)
    }

    /// [`Endpoint::start_with`], offering checksum and TSO offloads only if `offloads`.
    pub fn start_opts(
        path: &Path,
        pairs: usize,
        mode: Mode,
        access: Access,
        offloads: bool,
    ) -> io::Result<Endpoint> {
        if pairs == 0 || pairs > 32 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "queue pairs must be 1..=32",
            ));
        }
        let dev = Arc::new(Device::with_offloads(pairs, offloads));
        let (listener, socket_file) = match mode {
            Mode::Server => {
                let (l, id) = bind(path, access)?;
                dev.set_conn_state(ConnState::Listening);
                (Some(l), Some(id))
            }
            Mode::Client { .. } => {
                dev.set_conn_state(ConnState::Connecting);
                (None, None)
            }
        };
        let ep = Endpoint {
            dev: Arc::clone(&dev),
            stop: Arc::new(AtomicBool::new(false)),
            thread: Mutex::new(None),
            path: path.to_path_buf(),
            mode,
            socket_file: Mutex::new(socket_file),
            park: Arc::new(Park::default()),
        };
        let owned = Owned {
            backend: Backend::new(dev),
            listener,
            conn: None,
            file: None,
        };
        if let Err(e) = ep.spawn(owned, false) {
            if let Some(id) = ep
                .socket_file
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                sockfile::remove_if_ours(path, Some(id));
            }
            return Err(e);
        }
        Ok(ep)
    }

    /// Starts the control thread on `owned` (`adopted`: its connection was made by another
    /// process or before a park, and is not counted or logged as new).
    fn spawn(&self, owned: Owned, adopted: bool) -> io::Result<()> {
        let name = format!(
            "vhost:{}",
            self.path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        );
        let (d, s, p, park, mode) = (
            Arc::clone(&self.dev),
            Arc::clone(&self.stop),
            self.path.clone(),
            Arc::clone(&self.park),
            self.mode,
        );
        let t = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(mode, &p, owned, adopted, d, s, park))?;
        *self.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
        Ok(())
    }

    /// Takes over a handed-over endpoint (the new process of `vireoctl upgrade`): maps the
    /// memory table, keeps the sockets and eventfds (taken out of `fds` by the indices in
    /// `h`), installs no ring and starts no thread: [`Endpoint::resume`] does, with the
    /// final ring bases, at the switch-over. Dropping it before that closes what it took.
    pub fn adopt(
        path: &Path,
        pairs: usize,
        mode: Mode,
        offloads: bool,
        h: &Handover,
        fds: &mut [Option<OwnedFd>],
    ) -> Result<Endpoint, String> {
        if pairs == 0 || pairs > 32 {
            return Err("queue pairs must be 1..=32".into());
        }
        let mut take = |i: Option<usize>, what: &str| -> Result<Option<OwnedFd>, String> {
            i.map(|i| {
                fds.get_mut(i)
                    .and_then(Option::take)
                    .ok_or_else(|| format!("handover names {what} fd {i}, which did not come"))
            })
            .transpose()
        };
        let listener = take(h.listener, "listening socket")?.map(UnixListener::from);
        let conn = take(h.conn, "connection")?.map(UnixStream::from);
        match (mode, &listener) {
            (Mode::Server, None) => return Err("server port handed over without its socket".into()),
            (Mode::Client { .. }, Some(_)) => {
                return Err("client port handed over with a listening socket".into())
            }
            _ => {}
        }
        if let Some(l) = &listener {
            l.set_nonblocking(true).map_err(|e| e.to_string())?;
        }
        if let Some(c) = &conn {
            c.set_nonblocking(false).map_err(|e| e.to_string())?;
        }
        let dev = Arc::new(Device::with_offloads(pairs, offloads));
        let backend = if conn.is_some() {
            Backend::import(Arc::clone(&dev), &h.backend, fds)?
        } else {
            Backend::new(Arc::clone(&dev))
        };
        dev.stats.connections.store(h.connections, Relaxed);
        dev.set_conn_state(match (&conn, mode) {
            (Some(_), _) => ConnState::Connected,
            (None, Mode::Server) => ConnState::Listening,
            (None, Mode::Client { .. }) => ConnState::Connecting,
        });
        // The socket file stays; this process removes it when the port is deleted (once
        // resumed: see `Owned::file`).
        let file = match mode {
            Mode::Server => Some(
                sockfile::identity(path).map_err(|e| format!("socket {}: {e}", path.display()))?,
            ),
            Mode::Client { .. } => None,
        };
        let park = Arc::new(Park::default());
        park.want.store(true, Relaxed);
        *park.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Owned {
            backend,
            listener,
            conn,
            file,
        });
        Ok(Endpoint {
            dev,
            stop: Arc::new(AtomicBool::new(false)),
            thread: Mutex::new(None),
            path: path.to_path_buf(),
            mode,
            socket_file: Mutex::new(None),
            park,
        })
    }

    /// Asks the control thread to stop serving and leave what it owns here (between two
    /// messages: a message being read or answered is finished first). PMDs go on polling the
    /// running rings. Waits up to `timeout`; on a timeout the request is withdrawn and the
    /// thread goes on as before.
    pub fn park(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut slot = self.park.slot.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return Ok(());
        }
        self.park.want.store(true, Relaxed);
        while slot.is_none() {
            let now = Instant::now();
            let alive = self
                .thread
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_some_and(|t| !t.is_finished());
            if now >= deadline || !alive || self.stop.load(Relaxed) {
                self.park.want.store(false, Relaxed);
                return Err(format!(
                    "vhost-user {}: the control thread did not pause within {} ms",
                    self.path.display(),
                    timeout.as_millis()
                ));
            }
            slot = self
                .park
                .parked
                .wait_timeout(slot, (deadline - now).min(Duration::from_millis(50)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(())
    }

    /// The parked connection's state, with duplicates of its fds appended to `fds`. `None`
    /// if the endpoint is not parked.
    pub fn handover(&self, fds: &mut Vec<OwnedFd>) -> Option<io::Result<Handover>> {
        let slot = self.park.slot.lock().unwrap_or_else(|e| e.into_inner());
        let o = slot.as_ref()?;
        fn dup(f: &dyn AsFd, fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
            fds.push(f.as_fd().try_clone_to_owned()?);
            Ok(fds.len() - 1)
        }
        let r = (|| {
            let listener = o.listener.as_ref().map(|l| dup(l, fds)).transpose()?;
            let conn = o.conn.as_ref().map(|c| dup(c, fds)).transpose()?;
            Ok(Handover {
                listener,
                conn,
                connections: self.dev.stats.connections.load(Relaxed),
                backend: o.backend.export(fds)?,
            })
        })();
        Some(r)
    }

    /// The switch-over, both processes: keeps PMDs from taking packets from the guest (`on`),
    /// or lets them again. Sends to the guest go on, so what a PMD took from another port
    /// before the hold is delivered. The old process holds every port, waits for every PMD to
    /// finish its iteration, then hands over the rings; the new one installs every port's
    /// rings held, and [`Endpoint::resume`] lifts the hold.
    pub fn hold_rx(&self, on: bool) {
        self.dev.hold_rx(on);
    }

    /// The switch-over in the old process: takes the parked connection's rings off the
    /// device (each PMD finishes its burst first) and returns `(ring, base)` for each.
    pub fn hand_over_rings(&self) -> Vec<(usize, u16)> {
        let mut slot = self.park.slot.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_mut()
            .map(|o| o.backend.stop_for_handover(&|_| true))
            .unwrap_or_default()
    }

    /// The switch-over in the new process, before [`Endpoint::resume`]: installs the parked
    /// connection's rings at their final `bases`, with PMDs held off the guest's tx rings
    /// (see [`Endpoint::hold_rx`]) so that every port's rings are in place before any packet
    /// moves. The control thread stays parked.
    pub fn start_rings(&self, bases: &[(usize, u16)]) -> Result<(), String> {
        let mut slot = self.park.slot.lock().unwrap_or_else(|e| e.into_inner());
        match slot.as_mut() {
            // Only a parked endpoint is held (no control thread runs to race the flags), and
            // its `resume` lifts the hold.
            Some(o) if o.conn.is_some() => {
                self.dev.hold_rx(true);
                o.backend.start_handed_over(bases, &|_| true)
            }
            _ => Ok(()),
        }
    }

    /// After a handover: the socket file belongs to the new process; stopping this endpoint
    /// leaves it in place.
    pub fn keep_socket_file(&self) {
        self.socket_file
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    /// Starts the control thread again on the parked state: after a failed upgrade (old
    /// process, `bases` empty: its rings never stopped), or at the switch-over (new process,
    /// with the final bases from the old one: the rings start at exactly those indices).
    pub fn resume(&self, bases: &[(usize, u16)]) -> Result<(), String> {
        let owned = {
            let mut slot = self.park.slot.lock().unwrap_or_else(|e| e.into_inner());
            self.park.want.store(false, Relaxed);
            slot.take()
        };
        let Some(mut owned) = owned else {
            return Ok(());
        };
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
        if let Some(id) = owned.file.take() {
            *self.socket_file.lock().unwrap_or_else(|e| e.into_inner()) = Some(id);
        }
        let started = if owned.conn.is_some() {
            owned.backend.start_handed_over(bases, &|_| true)
        } else {
            Ok(())
        };
        self.dev.hold_rx(false);
        self.spawn(owned, true)
            .map_err(|e| format!("cannot start the control thread: {e}"))?;
        started
    }

    /// The PMD-facing device.
    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// Socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Asks the control thread to stop and removes the socket file we created (if it is
    /// still ours: a file put in its place is left alone), so nobody new can connect. Does
    /// not wait: safe to call with a lock held. Idempotent.
    pub fn stop(&self) {
        self.stop.store(true, Relaxed);
        let id = self
            .socket_file
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(id) = id {
            sockfile::remove_if_ours(&self.path, Some(id));
        }
    }

    /// Waits for the control thread to end (it sees a stop within about 100 ms, and never
    /// waits on a frontend longer than [`MSG_DEADLINE`]). Call it with no lock held.
    pub fn join(&self) {
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = t {
            let _ = t.join();
        }
        self.dev.set_conn_state(ConnState::Stopped);
    }

    /// [`Endpoint::stop`] then [`Endpoint::join`]. Idempotent.
    pub fn shutdown(&self) {
        self.stop();
        self.join();
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Waits until `fd` is readable (or hung up). False when asked to stop or when `give_up` says
/// so (checked every poll tick).
fn wait_readable(fd: impl AsFd, stop: &AtomicBool, give_up: &dyn Fn() -> bool) -> bool {
    let ts = Timespec {
        tv_sec: 0,
        tv_nsec: (POLL_MS * 1_000_000) as _,
    };
    loop {
        if stop.load(Relaxed) || give_up() {
            return false;
        }
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(n) if n > 0 => return true,
            Ok(_) => {}
            Err(e) if e == rustix::io::Errno::INTR => {}
            Err(_) => return true,
        }
    }
}

fn sleep_unless_stopped(ms: u64, stop: &AtomicBool) {
    let mut left = ms;
    while left > 0 && !stop.load(Relaxed) {
        let n = left.min(POLL_MS);
        std::thread::sleep(Duration::from_millis(n));
        left -= n;
    }
}

/// The control thread: serves the connection it was given (if any), then accepts (server) or
/// connects (client) and serves one connection at a time, until stopped or parked.
fn run(
    mode: Mode,
    path: &Path,
    mut o: Owned,
    mut adopted: bool,
    dev: Arc<Device>,
    stop: Arc<AtomicBool>,
    park: Arc<Park>,
) {
    loop {
        if let Some(s) = o.conn.take() {
            match serve(&s, path, &mut o.backend, &dev, &stop, &park, adopted) {
                End::Parked => {
                    o.conn = Some(s);
                    match park.put(o) {
                        None => return,
                        // The parking was withdrawn meanwhile: go on serving.
                        Some(back) => {
                            o = back;
                            adopted = true;
                            continue;
                        }
                    }
                }
                End::Closed => o.backend.end_connection(),
            }
        }
        adopted = false;
        if stop.load(Relaxed) {
            return;
        }
        if park.want.load(Relaxed) {
            match park.put(o) {
                None => return,
                Some(back) => o = back,
            }
        }
        match mode {
            Mode::Server => {
                dev.set_conn_state(ConnState::Listening);
                let Some(l) = o.listener.as_ref() else {
                    return;
                };
                if !wait_readable(l, &stop, &|| park.want.load(Relaxed)) {
                    continue;
                }
                match l.accept() {
                    Ok((s, _)) => {
                        if s.set_nonblocking(false).is_ok() {
                            o.conn = Some(s);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => sleep_unless_stopped(10, &stop),
                }
            }
            Mode::Client { reconnect_ms } => {
                dev.set_conn_state(ConnState::Connecting);
                match connect_now(path) {
                    Ok(s) => o.conn = Some(s),
                    Err(_) => sleep_unless_stopped(reconnect_ms.max(1), &stop),
                }
            }
        }
    }
}

/// How serving a connection ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// Closed (by the frontend, an error, lost memory or a stop): reset the device.
    Closed,
    /// Parked for a handover: the connection stays open and the rings keep running.
    Parked,
}

/// Serves one connection until the frontend goes away, breaks the stream, we stop, or we are
/// asked to park; logs the connection and why it ended.
fn serve(
    s: &UnixStream,
    path: &Path,
    backend: &mut Backend,
    dev: &Device,
    stop: &AtomicBool,
    park: &Park,
    adopted: bool,
) -> End {
    if adopted {
        dev.set_conn_state(ConnState::Connected);
    } else {
        tracing::info!(socket = %path.display(), "vhost-user: frontend connected");
        dev.set_conn_state(ConnState::Connected);
        dev.stats.connections.fetch_add(1, Relaxed);
    }
    let why = match serve_messages(s, backend, dev, stop, &park.want) {
        Ok(why) => why,
        Err(End::Parked) => {
            tracing::info!(socket = %path.display(), "vhost-user: connection parked for a handover");
            return End::Parked;
        }
        Err(End::Closed) => "closed".into(),
    };
    if dev.memory_lost() {
        tracing::warn!(socket = %path.display(), reason = why, "vhost-user: connection closed");
    } else {
        tracing::info!(socket = %path.display(), reason = why, "vhost-user: connection closed");
    }
    End::Closed
}

/// The message loop of [`serve`]; returns why the connection ended, or `Err(End::Parked)`
/// when asked to park (between two messages).
fn serve_messages(
    s: &UnixStream,
    backend: &mut Backend,
    dev: &Device,
    stop: &AtomicBool,
    park: &AtomicBool,
) -> Result<String, End> {
    if let Err(e) = set_send_timeout(s, MSG_DEADLINE) {
        return Ok(format!("socket error: {e}"));
    }
    let lost = |backend: &Backend| {
        let why = backend.memory_lost()?;
        dev.stats.memory_lost.fetch_add(1, Relaxed);
        Some(why)
    };
    loop {
        if let Some(why) = lost(backend) {
            return Ok(why);
        }
        if !wait_readable(s, stop, &|| dev.memory_lost() || park.load(Relaxed)) {
            if let Some(why) = lost(backend) {
                return Ok(why);
            }
            if !stop.load(Relaxed) && park.load(Relaxed) {
                return Err(End::Parked);
            }
            break;
        }
        match recv_msg(s, stop) {
            Ok(m) => {
                let reply = backend.handle(m);
                // A message that touched lost memory (a ring activated in it) gets no reply.
                if let Some(why) = lost(backend) {
                    return Ok(why);
                }
                if let Some(reply) = reply {
                    if let Err(e) = send_msg(s, &reply, &[]) {
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) {
                            dev.stats.protocol_errors.fetch_add(1, Relaxed);
                            return Ok(format!(
                                "reply not taken within {} ms",
                                MSG_DEADLINE.as_millis()
                            ));
                        }
                        return Ok(format!("reply not sent: {e}"));
                    }
                }
            }
            Err(RecvError::Protocol(e)) => {
                // The stream cannot be resynchronized: drop the connection.
                dev.stats.protocol_errors.fetch_add(1, Relaxed);
                return Ok(format!("unreadable message: {e:?}"));
            }
            Err(RecvError::Timeout { got, want }) => {
                dev.stats.protocol_errors.fetch_add(1, Relaxed);
                return Ok(format!(
                    "message incomplete after {} ms ({got} of {want} bytes)",
                    MSG_DEADLINE.as_millis()
                ));
            }
            Err(RecvError::Stopped) => return Ok("port stopped".into()),
            Err(RecvError::Closed) => return Ok("closed by the frontend".into()),
            Err(RecvError::Io(e)) => return Ok(format!("socket error: {e}")),
        }
    }
    Ok("port stopped".into())
}
