//! A raw OpenFlow peer for tests: sends arbitrary bytes and reads decoded messages.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use openflow::conn::{FrameReader, Stream};
use openflow::msg::*;

pub struct Client {
    pub stream: Stream,
    framer: FrameReader,
    /// Wire version `send` encodes in (1.3 unless a test changes it).
    pub version: u8,
    /// Wire version of the last message received.
    pub last_version: u8,
}

impl Client {
    pub fn unix(path: &Path) -> Client {
        let s = UnixStream::connect(path).expect("connect unix");
        Self::from(Stream::Unix(s))
    }

    pub fn tcp(addr: std::net::SocketAddr) -> Client {
        Self::from(Stream::Tcp(TcpStream::connect(addr).expect("connect tcp")))
    }

    pub fn from(stream: Stream) -> Client {
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        Client {
            stream,
            framer: FrameReader::new(),
            version: OFP_VERSION,
            last_version: 0,
        }
    }

    /// Connects and completes the HELLO exchange.
    pub fn connected(path: &Path) -> Client {
        let mut c = Self::unix(path);
        c.hello();
        c
    }

    pub fn hello(&mut self) {
        self.send(1, &Message::Hello(Hello::default()));
        match self.recv() {
            Some((_, Message::Hello(h))) => assert_eq!(h.negotiate(), Ok(OFP_VERSION)),
            other => panic!("expected HELLO, got {other:?}"),
        }
    }

    pub fn send(&mut self, xid: u32, m: &Message) {
        self.send_raw(&m.encode_version(self.version, xid).unwrap());
    }

    pub fn send_raw(&mut self, b: &[u8]) {
        self.stream.write_all(b).expect("write");
    }

    /// Next message within 5 s; None on EOF or timeout.
    pub fn recv(&mut self) -> Option<(u32, Message)> {
        self.recv_within(Duration::from_secs(5))
    }

    /// The next frame as sent (not decoded), within 5 s.
    pub fn recv_frame(&mut self) -> Option<Vec<u8>> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.framer.read_frame(&mut self.stream) {
                Ok(f) => return Some(f),
                Err(e) if e.is_timeout() && Instant::now() < deadline => {}
                Err(_) => return None,
            }
        }
    }

    pub fn recv_within(&mut self, d: Duration) -> Option<(u32, Message)> {
        let deadline = Instant::now() + d;
        loop {
            match self.framer.read_frame(&mut self.stream) {
                Ok(f) => {
                    let (v, x, m) = decode_versioned(&f).expect("switch sent a valid message");
                    self.last_version = v;
                    return Some((x, m));
                }
                Err(e) if e.is_timeout() && Instant::now() < deadline => {}
                Err(_) => return None,
            }
        }
    }

    /// Whether the peer closed the stream within `d` (discarding anything it sends first).
    pub fn closed_within(&mut self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut buf = [0u8; 4096];
        while Instant::now() < deadline {
            match self.stream.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return true,
            }
        }
        false
    }

    /// Sends an ECHO_REQUEST and checks the reply (the connection is served).
    /// Keepalive probes from the switch that arrive first are answered and skipped.
    pub fn ping(&mut self, xid: u32) {
        self.send(xid, &Message::EchoRequest(xid.to_be_bytes().to_vec()));
        loop {
            match self.recv() {
                Some((x, Message::EchoReply(d))) if x == xid => {
                    assert_eq!(d, xid.to_be_bytes());
                    return;
                }
                Some((x, Message::EchoRequest(d))) => self.send(x, &Message::EchoReply(d)),
                other => panic!("expected ECHO_REPLY {xid}, got {other:?}"),
            }
        }
    }

    /// Sends raw bytes and expects an ERROR reply with `xid`.
    pub fn expect_error(&mut self, raw: &[u8], xid: u32) -> ErrorMsg {
        self.send_raw(raw);
        match self.recv() {
            Some((x, Message::Error(e))) if x == xid => e,
            other => panic!("expected ERROR for xid {xid}, got {other:?}"),
        }
    }
}
