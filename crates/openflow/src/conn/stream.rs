//! Byte streams (TCP or unix) and the target syntax: active `tcp:IP[:PORT]`, `unix:PATH`;
//! passive `ptcp:PORT[:IP]`, `punix:PATH` / `unix:PATH`. Used by listener, connector and
//! session threads.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// Connects to a unix socket without waiting: a listener whose accept queue is full answers
/// `EAGAIN` (a failed attempt, retried after the backoff) instead of blocking the connector
/// thread, which its owner joins.
fn connect_unix_now(p: &std::path::Path) -> io::Result<UnixStream> {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &UnixAddr::new(p)?)?;
    let s = UnixStream::from(fd);
    s.set_nonblocking(false)?;
    Ok(s)
}

/// The IANA OpenFlow port, used when a target names none.
pub const DEFAULT_PORT: u16 = 6653;

/// Where to connect or listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn parse_ip(s: &str) -> Result<IpAddr, io::Error> {
    let s = s.trim_start_matches('[').trim_end_matches(']');
    s.parse().map_err(|_| bad(format!("bad IP address {s:?}")))
}

fn parse_port(s: &str) -> Result<u16, io::Error> {
    s.parse().map_err(|_| bad(format!("bad port {s:?}")))
}

impl Target {
    /// Parses an active target: `tcp:IP[:PORT]` or `unix:PATH`.
    pub fn parse_active(s: &str) -> io::Result<Self> {
        if let Some(p) = s.strip_prefix("unix:") {
            return Ok(Target::Unix(PathBuf::from(p)));
        }
        let rest = s
            .strip_prefix("tcp:")
            .ok_or_else(|| bad(format!("unknown target {s:?}")))?;
        let (ip, port) = if rest.starts_with('[') {
            match rest.rsplit_once("]:") {
                Some((ip, port)) => (ip, parse_port(port)?),
                None => (rest, DEFAULT_PORT),
            }
        } else {
            match rest.rsplit_once(':') {
                Some((ip, port)) if !ip.contains(':') => (ip, parse_port(port)?),
                _ => (rest, DEFAULT_PORT),
            }
        };
        Ok(Target::Tcp(SocketAddr::new(parse_ip(ip)?, port)))
    }

    /// Parses a passive target: `ptcp:PORT[:IP]`, `punix:PATH` or `unix:PATH`.
    pub fn parse_passive(s: &str) -> io::Result<Self> {
        if let Some(p) = s.strip_prefix("unix:").or_else(|| s.strip_prefix("punix:")) {
            return Ok(Target::Unix(PathBuf::from(p)));
        }
        let rest = s
            .strip_prefix("ptcp:")
            .ok_or_else(|| bad(format!("unknown target {s:?}")))?;
        let (port, ip) = match rest.split_once(':') {
            Some((port, ip)) => (port, parse_ip(ip)?),
            None => (rest, IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        };
        let port = if port.is_empty() {
            DEFAULT_PORT
        } else {
            parse_port(port)?
        };
        Ok(Target::Tcp(SocketAddr::new(ip, port)))
    }
}

/// A connected stream of either kind.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Connects to an active target.
    pub fn connect(t: &Target, timeout: Duration) -> io::Result<Stream> {
        match t {
            Target::Tcp(a) => {
                let s = TcpStream::connect_timeout(a, timeout)?;
                s.set_nodelay(true)?;
                Ok(Stream::Tcp(s))
            }
            Target::Unix(p) => Ok(Stream::Unix(connect_unix_now(p)?)),
        }
    }

    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    /// Shuts both directions down, waking any thread blocked on it; errors are ignored
    /// (the peer may already be gone).
    pub fn close(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    pub fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(d),
            Stream::Unix(s) => s.set_read_timeout(d),
        }
    }

    pub fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(d),
            Stream::Unix(s) => s.set_write_timeout(d),
        }
    }

    /// Reads what is there without waiting (`MSG_DONTWAIT`): `WouldBlock` when nothing is.
    pub fn read_nowait(&self, buf: &mut [u8]) -> io::Result<usize> {
        use nix::sys::socket::{recv, MsgFlags};
        use std::os::fd::AsRawFd;
        let fd = match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        };
        recv(fd, buf, MsgFlags::MSG_DONTWAIT).map_err(io::Error::from)
    }

    /// A printable peer name for logs.
    pub fn peer_name(&self) -> String {
        match self {
            Stream::Tcp(s) => s
                .peer_addr()
                .map_or_else(|_| "tcp:?".into(), |a| format!("tcp:{a}")),
            Stream::Unix(_) => "unix".into(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_targets() {
        let a = |s| Target::parse_active(s).unwrap();
        let p = |s| Target::parse_passive(s).unwrap();
        assert_eq!(
            a("tcp:1.2.3.4:6633"),
            Target::Tcp("1.2.3.4:6633".parse().unwrap())
        );
        assert_eq!(
            a("tcp:1.2.3.4"),
            Target::Tcp("1.2.3.4:6653".parse().unwrap())
        );
        assert_eq!(a("tcp:[::1]:7"), Target::Tcp("[::1]:7".parse().unwrap()));
        assert_eq!(a("unix:/x/y"), Target::Unix("/x/y".into()));
        assert_eq!(p("ptcp:6653"), Target::Tcp("0.0.0.0:6653".parse().unwrap()));
        assert_eq!(
            p("ptcp:0:127.0.0.1"),
            Target::Tcp("127.0.0.1:0".parse().unwrap())
        );
        assert_eq!(
            p("ptcp:6653:[::1]"),
            Target::Tcp("[::1]:6653".parse().unwrap())
        );
        assert_eq!(p("unix:/r/br0.mgmt"), Target::Unix("/r/br0.mgmt".into()));
        assert!(Target::parse_active("ssl:1.2.3.4").is_err());
        assert!(Target::parse_passive("ptcp:x").is_err());
        assert!(Target::parse_active("tcp:1.2.3.4:99999").is_err());
    }

    #[test]
    fn read_nowait_never_waits() {
        let (a, b) = UnixStream::pair().unwrap();
        let (a, mut b) = (Stream::Unix(a), Stream::Unix(b));
        // A blocking socket: the plain read would hang here.
        a.set_read_timeout(None).unwrap();
        let mut buf = [0u8; 16];
        let e = a.read_nowait(&mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        b.write_all(&[1, 2, 3]).unwrap();
        assert_eq!(a.read_nowait(&mut buf).unwrap(), 3);
        assert_eq!(&buf[..3], &[1, 2, 3]);
        b.close();
        assert_eq!(
            a.read_nowait(&mut buf).unwrap(),
            0,
            "peer gone: end of stream"
        );
    }
}
