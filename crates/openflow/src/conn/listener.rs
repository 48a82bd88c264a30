//! Passive OpenFlow endpoint: binds `unix:PATH` or `ptcp:PORT[:IP]` and serves each accepted
//! peer on its own thread (`of-conn-N`). The accept loop runs on its own thread (`of-listen`);
//! dropping the [`Listener`] wakes and joins it and removes the unix socket file.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

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
}

/// A listening socket; stops accepting when dropped.
pub struct Listener {
    target: Target,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn bind_unix(path: &PathBuf) -> io::Result<UnixListener> {
    if path.exists() {
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

impl Listener {
    pub(crate) fn start(shared: Arc<Shared>, target: Target) -> io::Result<Listener> {
        let (sock, target) = match target {
            Target::Tcp(addr) => {
                let l = TcpListener::bind(addr)?;
                let local = l.local_addr()?;
                (Sock::Tcp(l), Target::Tcp(local))
            }
            Target::Unix(path) => (Sock::Unix(bind_unix(&path)?), Target::Unix(path)),
        };
        info!(?target, "OpenFlow listening");
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = thread::Builder::new()
            .name("of-listen".into())
            .spawn(move || accept_loop(shared, sock, stop2))?;
        Ok(Listener { target, stop, thread: Some(thread) })
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

fn accept_loop(shared: Arc<Shared>, sock: Sock, stop: Arc<AtomicBool>) {
    loop {
        let accepted = sock.accept();
        if stop.load(Ordering::Acquire) {
            return;
        }
        match accepted {
            Ok(stream) => {
                let sh = shared.clone();
                let spawned = thread::Builder::new()
                    .name("of-conn".into())
                    .spawn(move || {
                        session::run(sh, stream);
                    });
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
        // Wake the blocked accept with a throwaway connection.
        match &self.target {
            Target::Tcp(a) => {
                let ip = match a.ip() {
                    IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
                    ip => ip,
                };
                let _ = TcpStream::connect(SocketAddr::new(ip, a.port()));
            }
            Target::Unix(p) => {
                let _ = UnixStream::connect(p);
            }
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Target::Unix(p) = &self.target {
            let _ = std::fs::remove_file(p);
        }
    }
}
