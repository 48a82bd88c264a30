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
use crate::backend::Backend;
use crate::shared::{ConnState, Device};
use crate::sock::{recv_msg, send_msg, set_send_timeout, RecvError, MSG_DEADLINE};
use crate::sockfile::{self, Access, FileId};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::net::{connect, socket_with, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

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
    /// The socket file we created (server mode), removed on stop if still ours.
    socket_file: Mutex<Option<FileId>>,
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
        let stop = Arc::new(AtomicBool::new(false));
        let name = format!(
            "vhost:{}",
            path.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        );
        let (d, s, p) = (Arc::clone(&dev), Arc::clone(&stop), path.to_path_buf());
        let builder = std::thread::Builder::new().name(name);
        let (thread, socket_file) = match mode {
            Mode::Server => {
                let (l, id) = bind(path, access)?;
                dev.set_conn_state(ConnState::Listening);
                match builder.spawn(move || run_server(l, &p, d, s)) {
                    Ok(t) => (t, Some(id)),
                    Err(e) => {
                        sockfile::remove_if_ours(path, Some(id));
                        return Err(e);
                    }
                }
            }
            Mode::Client { reconnect_ms } => {
                dev.set_conn_state(ConnState::Connecting);
                (
                    builder.spawn(move || run_client(&p, reconnect_ms, d, s))?,
                    None,
                )
            }
        };
        Ok(Endpoint {
            dev,
            stop,
            thread: Mutex::new(Some(thread)),
            path: path.to_path_buf(),
            socket_file: Mutex::new(socket_file),
        })
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

fn run_server(l: UnixListener, path: &Path, dev: Arc<Device>, stop: Arc<AtomicBool>) {
    let mut backend = Backend::new(Arc::clone(&dev));
    loop {
        dev.set_conn_state(ConnState::Listening);
        if !wait_readable(&l, &stop, &|| false) {
            return;
        }
        match l.accept() {
            Ok((s, _)) => {
                if s.set_nonblocking(false).is_ok() {
                    serve(&s, path, &mut backend, &dev, &stop);
                }
                backend.end_connection();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => sleep_unless_stopped(10, &stop),
        }
    }
}

fn run_client(path: &Path, reconnect_ms: u64, dev: Arc<Device>, stop: Arc<AtomicBool>) {
    let mut backend = Backend::new(Arc::clone(&dev));
    while !stop.load(Relaxed) {
        dev.set_conn_state(ConnState::Connecting);
        match connect_now(path) {
            Ok(s) => {
                serve(&s, path, &mut backend, &dev, &stop);
                backend.end_connection();
            }
            Err(_) => sleep_unless_stopped(reconnect_ms.max(1), &stop),
        }
    }
}

/// Serves one connection until the frontend goes away, breaks the stream, or we stop; logs
/// the connection and why it ended.
fn serve(s: &UnixStream, path: &Path, backend: &mut Backend, dev: &Device, stop: &AtomicBool) {
    tracing::info!(socket = %path.display(), "vhost-user: frontend connected");
    let why = serve_messages(s, backend, dev, stop);
    if dev.memory_lost() {
        tracing::warn!(socket = %path.display(), reason = why, "vhost-user: connection closed");
    } else {
        tracing::info!(socket = %path.display(), reason = why, "vhost-user: connection closed");
    }
}

/// The message loop of [`serve`]; returns why it ended.
fn serve_messages(
    s: &UnixStream,
    backend: &mut Backend,
    dev: &Device,
    stop: &AtomicBool,
) -> String {
    dev.set_conn_state(ConnState::Connected);
    dev.stats.connections.fetch_add(1, Relaxed);
    if let Err(e) = set_send_timeout(s, MSG_DEADLINE) {
        return format!("socket error: {e}");
    }
    let lost = |backend: &Backend| {
        let why = backend.memory_lost()?;
        dev.stats.memory_lost.fetch_add(1, Relaxed);
        Some(why)
    };
    loop {
        if let Some(why) = lost(backend) {
            return why;
        }
        if !wait_readable(s, stop, &|| dev.memory_lost()) {
            if let Some(why) = lost(backend) {
                return why;
            }
            break;
        }
        match recv_msg(s, stop) {
            Ok(m) => {
                let reply = backend.handle(m);
                // A message that touched lost memory (a ring activated in it) gets no reply.
                if let Some(why) = lost(backend) {
                    return why;
                }
                if let Some(reply) = reply {
                    if let Err(e) = send_msg(s, &reply, &[]) {
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) {
                            dev.stats.protocol_errors.fetch_add(1, Relaxed);
                            return format!(
                                "reply not taken within {} ms",
                                MSG_DEADLINE.as_millis()
                            );
                        }
                        return format!("reply not sent: {e}");
                    }
                }
            }
            Err(RecvError::Protocol(e)) => {
                // The stream cannot be resynchronized: drop the connection.
                dev.stats.protocol_errors.fetch_add(1, Relaxed);
                return format!("unreadable message: {e:?}");
            }
            Err(RecvError::Timeout { got, want }) => {
                dev.stats.protocol_errors.fetch_add(1, Relaxed);
                return format!(
                    "message incomplete after {} ms ({got} of {want} bytes)",
                    MSG_DEADLINE.as_millis()
                );
            }
            Err(RecvError::Stopped) => return "port stopped".into(),
            Err(RecvError::Closed) => return "closed by the frontend".into(),
            Err(RecvError::Io(e)) => return format!("socket error: {e}"),
        }
    }
    "port stopped".into()
}
