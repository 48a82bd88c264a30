//! Passive OpenFlow endpoint: binds `unix:PATH` or `ptcp:PORT[:IP]` and serves each accepted
//! peer on its own thread (`of-conn`): an OpenFlow session, or a snoop client. The accept loop runs on its own thread (`of-listen`),
//! polling the socket with a short timeout so that dropping the [`Listener`] stops it
//! promptly (it is joined, and the unix socket file removed).

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use tracing::{info, warn};

use super::session;
use super::stream::{Stream, Target};
use super::Shared;

enum Sock {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Sock {
    fn accept(&self) -> io::Result<Stream> {
        match self {
            Sock::Tcp(l) => {
                let (s, _) = l.accept()?;
                let _ = s.set_nodelay(true);
                Ok(Stream::Tcp(s))
            }
            Sock::Unix(l) => Ok(Stream::Unix(l.accept()?.0)),
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Sock::Tcp(l) => l.as_fd(),
            Sock::Unix(l) => l.as_fd(),
        }
    }

    /// Waits up to 200 ms for a pending connection.
    fn ready(&self) -> bool {
        let mut fds = [PollFd::new(self.fd(), PollFlags::POLLIN)];
        matches!(poll(&mut fds, PollTimeout::from(200u16)), Ok(n) if n > 0)
    }
}

/// A listening socket; stops accepting when dropped.
pub struct Listener {
    target: Target,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// A duplicate of the listening socket, for handing it to another process.
    fd: Option<OwnedFd>,
}

/// Binds a unix socket, replacing a stale socket file (one nobody listens on) but never
/// another kind of file.
fn bind_unix(path: &PathBuf) -> io::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{} is in use", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    UnixListener::bind(path)
}

/// What a listener does with each accepted peer (on that peer's own thread).
pub(crate) type Serve = Arc<dyn Fn(Stream) + Send + Sync>;

impl Listener {
    pub(crate) fn start(shared: Arc<Shared>, target: Target) -> io::Result<Listener> {
        let serve: Serve = Arc::new(move |stream| {
            session::run(shared.clone(), stream);
        });
        Listener::start_with(serve, target, "of-listen")
    }

    pub(crate) fn start_with(serve: Serve, target: Target, name: &str) -> io::Result<Listener> {
        let (sock, target) = match target {
            Target::Tcp(addr) => {
                let l = TcpListener::bind(addr)?;
                let local = l.local_addr()?;
                (Sock::Tcp(l), Target::Tcp(local))
            }
            Target::Unix(path) => (Sock::Unix(bind_unix(&path)?), Target::Unix(path)),
        };
        Self::serve(serve, sock, target, name)
    }

    /// Serves a unix listening socket bound elsewhere (handed over by a previous process)
    /// whose file is `path`.
    pub(crate) fn adopt_unix(
        shared: Arc<Shared>,
        l: UnixListener,
        path: PathBuf,
    ) -> io::Result<Listener> {
        l.set_nonblocking(false)?;
        let serve: Serve = Arc::new(move |stream| {
            session::run(shared.clone(), stream);
        });
        Self::serve(serve, Sock::Unix(l), Target::Unix(path), "of-listen")
    }

    fn serve(serve: Serve, sock: Sock, target: Target, name: &str) -> io::Result<Listener> {
        let fd = Some(sock.fd().try_clone_to_owned()?);
        info!(?target, "OpenFlow listening");
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = thread::Builder::new()
            .name(name.into())
            .spawn(move || accept_loop(serve, sock, stop2))?;
        Ok(Listener {
            target,
            stop,
            thread: Some(thread),
            fd,
        })
    }

    /// The listening socket (a duplicate), for handing it to another process.
    pub fn socket(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    /// The bound address (with the real port for `ptcp:0`).
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The bound TCP address, if TCP.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self.target {
            Target::Tcp(a) => Some(a),
            Target::Unix(_) => None,
        }
    }
}

fn accept_loop(serve: Serve, sock: Sock, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        if !sock.ready() {
            continue;
        }
        match sock.accept() {
            Ok(stream) => {
                let serve = serve.clone();
                let spawned = thread::Builder::new()
                    .name("of-conn".into())
                    .spawn(move || serve(stream));
                if let Err(e) = spawned {
                    warn!(error = %e, "cannot spawn OpenFlow connection thread");
                }
            }
            Err(e) => {
                warn!(error = %e, "OpenFlow accept failed");
                thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Target::Unix(p) = &self.target {
            // Only a socket: never a file or symlink someone put in its place.
            if std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket()) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}
