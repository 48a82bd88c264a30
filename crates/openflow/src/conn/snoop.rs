//! `ovs-ofctl snoop`: copies of every OpenFlow message a switch exchanges with its
//! controllers, sent to each client of the bridge's snoop socket (`unix:RUN_DIR/BR.snoop`).
//!
//! A snoop client gets our HELLO, answers with its own (the usual negotiation), then receives
//! every frame each controller connection sends or receives, as it was on the wire (in the
//! controller connection's version, as with Open vSwitch: a client must ask for the version the
//! controller speaks, e.g. `ovs-ofctl -O OpenFlow13 snoop`). Anything the client sends after
//! its HELLO is read and ignored.
//!
//! Threads: the snoop listener's accept thread (`of-snoop`) starts, per client, a writer
//! thread that drains the client's bounded queue and reads nothing else; the controller
//! connections' reader and writer threads call [`Snoop::copy`], which never blocks: one relaxed
//! load while nobody snoops, else a `try_send` per client, and a copy that does not fit a full
//! queue is dropped and counted.
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::framing::FrameReader;
use super::stream::Stream;
use crate::msg::{decode_versioned, Message};
use crate::version::Protocols;

/// Frames queued per snoop client before copies are dropped.
const QUEUE: usize = 4096;
/// How long a snoop client has to send its HELLO.
const HELLO_WAIT: Duration = Duration::from_secs(5);

/// The snoop clients of one switch.
#[derive(Default)]
pub struct Snoop {
    clients: Mutex<Vec<SyncSender<Arc<[u8]>>>>,
    active: AtomicUsize,
    dropped: AtomicU64,
}

impl Snoop {
    /// Hands a copy of `frame` to every snoop client (never blocks).
    pub(crate) fn copy(&self, frame: &[u8]) {
        if self.active.load(Relaxed) == 0 {
            return;
        }
        let frame: Arc<[u8]> = Arc::from(frame);
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.retain(|c| match c.try_send(frame.clone()) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Relaxed);
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        });
        self.active.store(clients.len(), Relaxed);
    }

    /// Copies dropped because a snoop client's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }

    /// Snoop clients connected now.
    pub fn clients(&self) -> usize {
        self.active.load(Relaxed)
    }

    /// Serves one snoop client: HELLO both ways, then the copies until it goes away.
    pub(crate) fn serve(self: &Arc<Self>, stream: Stream, protocols: Protocols) {
        let peer = stream.peer_name();
        let version = match handshake(&stream, protocols) {
            Ok(v) => v,
            Err(e) => {
                debug!(%peer, error = %e, "snoop client left before its HELLO");
                stream.close();
                return;
            }
        };
        let (tx, rx) = sync_channel::<Arc<[u8]>>(QUEUE);
        {
            let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
            clients.push(tx);
            self.active.store(clients.len(), Relaxed);
        }
        info!(%peer, version, "OpenFlow snoop client connected");
        // Notice the client leaving even when no copy is being written.
        let reader = stream.try_clone().ok().map(|mut r| {
            thread::spawn(move || {
                let _ = r.set_read_timeout(None);
                let mut f = FrameReader::new();
                while f.read_frame(&mut r).is_ok() {}
                r.close();
            })
        });
        let mut out = stream;
        for frame in rx {
            if out.write_all(&frame).is_err() {
                break;
            }
        }
        out.close();
        if let Some(r) = reader {
            let _ = r.join();
        }
        info!(%peer, "OpenFlow snoop client gone");
    }
}

/// Sends our HELLO, reads the client's and negotiates a version.
fn handshake(stream: &Stream, protocols: Protocols) -> io::Result<u8> {
    let hello = protocols.hello();
    let bytes = Message::Hello(hello.clone())
        .encode_version(hello.version, 0)
        .map_err(|e| io::Error::other(e.to_string()))?;
    let mut w = stream.try_clone()?;
    w.write_all(&bytes)?;
    let mut r = stream.try_clone()?;
    r.set_read_timeout(Some(HELLO_WAIT))?;
    let frame = FrameReader::new()
        .read_frame(&mut r)
        .map_err(|e| io::Error::other(format!("{e:?}")))?;
    match decode_versioned(&frame) {
        Ok((_, _, Message::Hello(h))) => protocols
            .negotiate(&h)
            .map_err(|e| io::Error::other(e.to_string())),
        Ok(_) => Err(io::Error::other("first message is not HELLO")),
        Err(e) => {
            warn!(error = %e, "bad HELLO from a snoop client");
            Err(io::Error::other(e.to_string()))
        }
    }
}
