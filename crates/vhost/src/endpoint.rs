//! A vhost-user endpoint: the socket (server: we listen, client: we connect and retry) and the
//! control thread that serves one frontend connection at a time.
//!
//! Threads: each endpoint runs ONE control thread, `vhost:<socket name>`, doing blocking I/O on
//! its socket (polled every 100 ms for shutdown). PMDs never touch the socket; they meet this
//! thread only in the [`Device`] slots. A frontend going away resets the device (rings stopped,
//! memory unmapped once the PMDs let go) and the thread waits for the next connection.
//! Guest memory found lost (the frontend shrank its memory file; see `guestmem::lost`) ends the
//! connection the same way, within one poll tick, with a warning naming the region.
use crate::backend::Backend;
use crate::shared::{ConnState, Device};
use crate::sock::{recv_msg, send_msg, RecvError};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileTypeExt;
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
    owns_socket: bool,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("path", &self.path)
            .finish()
    }
}

fn bind(path: &Path) -> io::Result<UnixListener> {
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if !md.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        // A stale socket from an earlier run.
        std::fs::remove_file(path)?;
    }
    let l = UnixListener::bind(path)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

impl Endpoint {
    /// Starts an endpoint with `pairs` queue pairs on `path`.
    pub fn start(path: &Path, pairs: usize, mode: Mode) -> io::Result<Endpoint> {
        if pairs == 0 || pairs > 32 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "queue pairs must be 1..=32",
            ));
        }
        let dev = Arc::new(Device::new(pairs));
        let stop = Arc::new(AtomicBool::new(false));
        let name = format!(
            "vhost:{}",
            path.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        );
        let (d, s, p) = (Arc::clone(&dev), Arc::clone(&stop), path.to_path_buf());
        let builder = std::thread::Builder::new().name(name);
        let (thread, owns_socket) = match mode {
            Mode::Server => {
                let l = bind(path)?;
                dev.set_conn_state(ConnState::Listening);
                (builder.spawn(move || run_server(l, &p, d, s))?, true)
            }
            Mode::Client { reconnect_ms } => {
                dev.set_conn_state(ConnState::Connecting);
                (
                    builder.spawn(move || run_client(&p, reconnect_ms, d, s))?,
                    false,
                )
            }
        };
        Ok(Endpoint {
            dev,
            stop,
            thread: Mutex::new(Some(thread)),
            path: path.to_path_buf(),
            owns_socket,
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

    /// Stops the control thread, closes the connection, removes the socket file we created.
    /// Idempotent.
    pub fn shutdown(&self) {
        self.stop.store(true, Relaxed);
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = t {
            let _ = t.join();
            if self.owns_socket {
                let _ = std::fs::remove_file(&self.path);
            }
        }
        self.dev.set_conn_state(ConnState::Stopped);
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
        match UnixStream::connect(path) {
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
        match recv_msg(s) {
            Ok(m) => {
                let reply = backend.handle(m);
                // A message that touched lost memory (a ring activated in it) gets no reply.
                if let Some(why) = lost(backend) {
                    return why;
                }
                if let Some(reply) = reply {
                    if let Err(e) = send_msg(s, &reply, &[]) {
                        return format!("reply not sent: {e}");
                    }
                }
            }
            Err(RecvError::Protocol(e)) => {
                // The stream cannot be resynchronized: drop the connection.
                dev.stats.protocol_errors.fetch_add(1, Relaxed);
                return format!("unreadable message: {e:?}");
            }
            Err(RecvError::Closed) => return "closed by the frontend".into(),
            Err(RecvError::Io(e)) => return format!("socket error: {e}"),
        }
    }
    "port stopped".into()
}
