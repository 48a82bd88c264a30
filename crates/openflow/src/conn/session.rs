//! One OpenFlow connection: HELLO negotiation, the read–dispatch loop, echo keepalive, and
//! the bounded outgoing queue with its writer thread. `run` executes on the connection's
//! reader thread (an accept-spawned thread or the connector's thread); the writer thread is
//! spawned here and joined before `run` returns. The reader thread writes its own replies
//! directly when nothing is queued (a controller waiting on each BARRIER then pays no thread
//! hand-off per request); everything else goes through the queue.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::framing::{FrameError, FrameReader};
use super::stream::Stream;
use super::{ConnId, Shared, Snoop};
use crate::error::{errors, OfError};
use crate::msg::{decode_versioned, msg_type, v10, ErrorMsg, Header, Message, Role, MAX_MSG_LEN};
use crate::version::{version_name, OFP10, OFP13, SUPPORTED};

/// The socket's writing end, shared by the writer thread and the reader thread, and the
/// number of frames queued but not yet written. Whoever writes holds the lock; a frame is
/// counted from before it is queued until after it is written, so a writer that holds the
/// lock and sees zero knows every earlier frame is on the wire.
struct Wire {
    out: Mutex<Stream>,
    queued: AtomicUsize,
    /// Gets a copy of every frame written (`ovs-ofctl snoop`).
    snoop: Arc<Snoop>,
}

impl Wire {
    fn lock(&self) -> MutexGuard<'_, Stream> {
        self.out.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The sending side of a connection: a bounded queue of encoded frames.
#[derive(Clone)]
pub(crate) struct Outbox {
    tx: SyncSender<Vec<u8>>,
    stream: Arc<Stream>,
    wire: Arc<Wire>,
}

impl Outbox {
    /// Queues without waiting; on a full queue the connection is closed.
    pub(crate) fn push(&self, frame: Vec<u8>) -> bool {
        self.wire.queued.fetch_add(1, SeqCst);
        match self.tx.try_send(frame) {
            Ok(()) => true,
            Err(e) => {
                self.wire.queued.fetch_sub(1, SeqCst);
                if let TrySendError::Full(_) = e {
                    warn!(peer = %self.stream.peer_name(), "OpenFlow send queue full, dropping connection");
                    self.close();
                }
                false
            }
        }
    }

    /// Sends a reply of the reader thread: written at once when nothing is queued before
    /// it, else queued, waiting for room (back-pressure on the peer's own requests).
    fn push_wait(&self, frame: Vec<u8>) -> bool {
        {
            let mut out = self.wire.lock();
            if self.wire.queued.load(SeqCst) == 0 {
                if let Err(e) = out.write_all(&frame) {
                    debug!(error = %e, "OpenFlow write failed");
                    out.close();
                    return false;
                }
                self.wire.snoop.copy(&frame);
                return true;
            }
        }
        self.wire.queued.fetch_add(1, SeqCst);
        if self.tx.send(frame).is_ok() {
            true
        } else {
            self.wire.queued.fetch_sub(1, SeqCst);
            false
        }
    }

    pub(crate) fn close(&self) {
        self.stream.close();
    }
}

/// Encodes a message in wire version `version`, splitting multipart replies to fit;
/// unencodable messages are logged and dropped. `nx` (1.0 only): write flow statistics
/// replies and FLOW_REMOVED in their Nicira form (`NXST_FLOW`, `NXST_AGGREGATE`,
/// `NXT_FLOW_REMOVED`), for a request that came as one or a session in the NXM format.
pub(crate) fn encode_frames(version: u8, nx: bool, xid: u32, msg: &Message) -> Vec<Vec<u8>> {
    // Split by 1.3 sizes; other versions' entries can be up to about 1.5 times larger.
    let max = if version == OFP13 {
        MAX_MSG_LEN
    } else {
        MAX_MSG_LEN * 5 / 8
    };
    let parts = match msg {
        Message::MultipartReply(r) => r
            .clone()
            .split(max)
            .into_iter()
            .map(Message::MultipartReply)
            .collect(),
        other => vec![other.clone()],
    };
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        let nicira = match &p {
            Message::MultipartReply(r) if nx && version == OFP10 => {
                v10::nicira::encode_stats_reply(xid, r)
            }
            Message::FlowRemoved(f) if nx && version == OFP10 => {
                Some(v10::nicira::encode_flow_removed(xid, f))
            }
            _ => None,
        };
        match nicira.unwrap_or_else(|| p.encode_version(version, xid)) {
            Ok(b) => out.push(b),
            Err(e) => {
                warn!(msg_type = p.msg_type(), version, error = %e, "OpenFlow message cannot be encoded, dropped");
                return Vec::new();
            }
        }
    }
    out
}

fn writer_loop(wire: Arc<Wire>, rx: Receiver<Vec<u8>>) {
    for frame in rx {
        let mut out = wire.lock();
        let r = out.write_all(&frame);
        wire.queued.fetch_sub(1, SeqCst);
        if let Err(e) = r {
            debug!(error = %e, "OpenFlow write failed");
            out.close();
            return;
        }
        wire.snoop.copy(&frame);
    }
}

enum Flow {
    Continue,
    Close,
}

struct Session {
    id: ConnId,
    shared: Arc<Shared>,
    outbox: Outbox,
    hello_done: bool,
    /// The negotiated version (before negotiation: our highest, for our HELLO and errors).
    version: u8,
    /// 1.0 only: the peer turned on Nicira's NXT_FLOW_MOD_TABLE_ID (a FLOW_MOD's command
    /// carries a table id in its high byte).
    nx_table_id: bool,
    /// 1.0 only: the peer chose the NXM flow format (NXT_SET_FLOW_FORMAT): FLOW_REMOVED
    /// goes out as NXT_FLOW_REMOVED.
    nxm: bool,
    last_rx: Instant,
    echo_sent: Option<Instant>,
    echo_xid: u32,
}

/// Serves one connection until it ends. Returns whether version negotiation succeeded.
pub(crate) fn run(shared: Arc<Shared>, stream: Stream) -> bool {
    let id = shared.new_id();
    let peer = stream.peer_name();
    let cfg = shared.config.clone();
    let (Ok(wstream), Ok(cstream)) = (stream.try_clone(), stream.try_clone()) else {
        warn!(%peer, "cannot clone OpenFlow stream");
        return false;
    };
    let tick = cfg
        .inactivity_probe
        .map_or(Duration::from_secs(1), |p| p / 4);
    let tick = tick.clamp(Duration::from_millis(20), Duration::from_secs(1));
    let _ = stream.set_read_timeout(Some(tick));
    let _ = wstream.set_write_timeout(Some(cfg.write_timeout));
    let (tx, rx) = sync_channel(cfg.tx_queue_len.max(1));
    let wire = Arc::new(Wire {
        out: Mutex::new(wstream),
        queued: AtomicUsize::new(0),
        snoop: shared.snoop.clone(),
    });
    let w = wire.clone();
    let writer = thread::Builder::new()
        .name(format!("of-tx-{id}"))
        .spawn(move || writer_loop(w, rx));
    let Ok(writer) = writer else {
        warn!(%peer, "cannot spawn OpenFlow writer thread");
        return false;
    };
    let outbox = Outbox {
        tx,
        stream: Arc::new(cstream),
        wire,
    };
    shared.register(id, peer.clone(), outbox.clone());
    info!(conn = id, %peer, "OpenFlow connection opened");
    let hello = shared.protocols().hello();
    let mut s = Session {
        id,
        shared: shared.clone(),
        outbox,
        hello_done: false,
        nx_table_id: false,
        nxm: false,
        version: hello.version,
        last_rx: Instant::now(),
        echo_sent: None,
        echo_xid: 0,
    };
    s.send(0, &Message::Hello(hello));
    s.read_loop(stream, &peer);
    let hello_done = s.hello_done;
    shared.unregister(id);
    if hello_done {
        shared.handler.disconnected(id);
    }
    let closer = s.outbox.stream.clone();
    drop(s);
    // Let the writer flush what is queued (e.g. a final ERROR), but not wait on a dead peer.
    let flush_deadline = Instant::now() + Duration::from_secs(2);
    while !writer.is_finished() && Instant::now() < flush_deadline {
        thread::sleep(Duration::from_millis(5));
    }
    closer.close();
    let _ = writer.join();
    info!(conn = id, %peer, "OpenFlow connection closed");
    hello_done
}

impl Session {
    fn read_loop(&mut self, mut stream: Stream, peer: &str) {
        let mut framer = FrameReader::new();
        let spin = self.shared.config.read_spin;
        loop {
            let read = framer.read_frame_spinning(&mut stream, |s, b| s.read_nowait(b), spin);
            let flow = match read {
                Ok(frame) => {
                    self.last_rx = Instant::now();
                    self.echo_sent = None;
                    self.shared.snoop.copy(&frame);
                    self.on_frame(&frame)
                }
                Err(e) if e.is_timeout() => self.on_idle(),
                Err(FrameError::BadLength { header }) => {
                    warn!(conn = self.id, %peer, "OpenFlow frame length below 8");
                    let xid = Header::parse(&header).map_or(0, |h| h.xid);
                    self.send_error(xid, errors::BAD_REQUEST_BAD_LEN, &header);
                    Flow::Close
                }
                Err(FrameError::Eof { partial }) => {
                    if partial > 0 {
                        debug!(conn = self.id, partial, "peer closed mid-message");
                    }
                    Flow::Close
                }
                Err(FrameError::Io(e)) => {
                    debug!(conn = self.id, error = %e, "OpenFlow read failed");
                    Flow::Close
                }
            };
            if matches!(flow, Flow::Close) {
                return;
            }
        }
    }

    fn send(&self, xid: u32, msg: &Message) -> bool {
        encode_frames(self.version, false, xid, msg)
            .into_iter()
            .all(|f| self.outbox.push_wait(f))
    }

    /// Sends `err` (a 1.3 code) as this connection's version writes it.
    fn send_error(&self, xid: u32, err: OfError, request: &[u8]) {
        let err = err.for_version(self.version);
        self.send(xid, &Message::Error(ErrorMsg::for_request(err, request)));
    }

    fn on_idle(&mut self) -> Flow {
        let Some(probe) = self.shared.config.inactivity_probe else {
            return Flow::Continue;
        };
        match self.echo_sent {
            Some(sent) if sent.elapsed() >= probe => {
                warn!(
                    conn = self.id,
                    "no reply to echo request, dropping OpenFlow connection"
                );
                Flow::Close
            }
            Some(_) => Flow::Continue,
            None if self.last_rx.elapsed() >= probe => {
                self.echo_xid = self.echo_xid.wrapping_add(1);
                self.send(self.echo_xid, &Message::EchoRequest(Vec::new()));
                self.echo_sent = Some(Instant::now());
                Flow::Continue
            }
            None => Flow::Continue,
        }
    }

    fn on_frame(&mut self, frame: &[u8]) -> Flow {
        let (xid, fversion, ftype) =
            Header::parse(frame).map_or((0, 0, 0), |h| (h.xid, h.version, h.msg_type));
        if self.hello_done && fversion != self.version && ftype != msg_type::HELLO {
            debug!(
                conn = self.id,
                fversion, "OpenFlow message of another version"
            );
            self.send_error(xid, errors::BAD_REQUEST_BAD_VERSION, frame);
            return Flow::Continue;
        }
        if !self.hello_done && SUPPORTED.contains(&fversion) && ftype != msg_type::HELLO {
            // Answer in the peer's version so it can read the refusal.
            self.version = fversion;
        }
        let mut nx_reply = false;
        let decoded = if self.hello_done && self.version == OFP10 && v10::nicira::is_nicira(frame) {
            use v10::nicira::NxMsg;
            // Session state changes are acknowledged by the absence of an error, as Open
            // vSwitch does.
            match v10::nicira::decode(frame, self.nx_table_id) {
                Ok((_, NxMsg::FlowModTableId(on))) => {
                    self.nx_table_id = on;
                    return Flow::Continue;
                }
                Ok((_, NxMsg::SetFlowFormat(on))) => {
                    self.nxm = on;
                    self.shared.set_nxm(self.id, on);
                    return Flow::Continue;
                }
                Ok((x, NxMsg::Request(m))) => {
                    nx_reply = matches!(m, Message::MultipartRequest(_));
                    Ok((OFP10, x, m))
                }
                Err(e) => Err(e),
            }
        } else if self.nx_table_id && ftype == v10::msg_type::FLOW_MOD {
            v10::decode_flow_mod_table_id(frame).map(|(x, m)| (OFP10, x, m))
        } else {
            decode_versioned(frame)
        };
        let msg = match decoded {
            Ok((_, _, msg)) => msg,
            Err(e) => {
                debug!(conn = self.id, error = %e, "bad OpenFlow message");
                self.send_error(xid, e, frame);
                return if e.keeps_connection() && self.hello_done {
                    Flow::Continue
                } else {
                    Flow::Close
                };
            }
        };
        if !self.hello_done {
            return self.on_hello(xid, msg, frame);
        }
        self.dispatch(xid, msg, frame, nx_reply)
    }

    fn on_hello(&mut self, xid: u32, msg: Message, frame: &[u8]) -> Flow {
        let protocols = self.shared.protocols();
        let result = match &msg {
            Message::Hello(h) => protocols.negotiate(h),
            _ => Err(errors::HELLO_FAILED_INCOMPATIBLE),
        };
        match result {
            Ok(v) => {
                self.hello_done = true;
                self.version = v;
                debug!(conn = self.id, version = %version_name(v), "OpenFlow version negotiated");
                self.shared.set_ready(self.id, v);
                let peer = self.outbox.stream.peer_name();
                self.shared.handler.connected(self.id, &peer);
                Flow::Continue
            }
            Err(e) => {
                let text = match msg {
                    Message::Hello(h) => {
                        if SUPPORTED.contains(&h.version) {
                            self.version = h.version;
                        }
                        format!(
                            "we support {protocols}; peer sent version {:#04x}{}",
                            h.version,
                            h.bitmap
                                .as_ref()
                                .and_then(|b| b.first())
                                .map_or(String::new(), |b| format!(" with version bitmap {b:#x}"))
                        )
                    }
                    _ => "expected HELLO".to_string(),
                };
                warn!(conn = self.id, %text, "OpenFlow version negotiation failed");
                let mut data = text.into_bytes();
                if !matches!(frame.get(1), Some(0)) {
                    data = frame[..frame.len().min(64)].to_vec();
                }
                self.send(
                    xid,
                    &Message::Error(ErrorMsg {
                        etype: e.etype,
                        code: e.code,
                        data,
                    }),
                );
                Flow::Close
            }
        }
    }

    /// `nx_reply`: the request was a Nicira statistics request; its reply is one too.
    fn dispatch(&mut self, xid: u32, msg: Message, frame: &[u8], nx_reply: bool) -> Flow {
        let reply = match msg {
            Message::Hello(_) | Message::EchoReply(_) => return Flow::Continue,
            Message::EchoRequest(d) => Message::EchoReply(d),
            Message::FeaturesRequest if self.version == OFP10 => {
                let f = self.shared.handler.features();
                let ports = self.shared.handler.ports();
                match v10::features_reply(xid, &f, &ports) {
                    Ok(b) => {
                        self.outbox.push_wait(b);
                    }
                    Err(e) => warn!(conn = self.id, error = %e, "1.0 FEATURES_REPLY too large"),
                }
                return Flow::Continue;
            }
            Message::FeaturesRequest => Message::FeaturesReply(self.shared.handler.features()),
            Message::BarrierRequest => {
                self.shared.handler.barrier(self.id);
                Message::BarrierReply
            }
            Message::RoleRequest(r) => match self.shared.change_role(self.id, r) {
                Ok(r) => Message::RoleReply(r),
                Err(e) => {
                    self.send_error(xid, e, frame);
                    return Flow::Continue;
                }
            },
            Message::GetAsyncRequest => Message::GetAsyncReply(self.shared.async_config(self.id)),
            // Allowed from slaves too (OpenFlow 1.3.1 §6.1.1): it only changes what this
            // connection receives. No reply on success.
            Message::SetAsync(c) => {
                self.shared.set_async_config(self.id, c);
                return Flow::Continue;
            }
            // 1.4+: only the properties the message carries change.
            Message::SetAsyncProps(props) => {
                let mut c = self.shared.async_config(self.id);
                c.apply(&props);
                self.shared.set_async_config(self.id, c);
                return Flow::Continue;
            }
            m if m.modifies_state() && self.shared.role(self.id) == Role::Slave => {
                self.send_error(xid, errors::BAD_REQUEST_IS_SLAVE, frame);
                return Flow::Continue;
            }
            m => {
                match self.shared.handler.handle(self.id, xid, m) {
                    Ok(replies) => {
                        for r in &replies {
                            let frames = encode_frames(self.version, nx_reply, xid, r);
                            if frames.is_empty() {
                                // A reply this version cannot express (e.g. 1.5 group
                                // descriptions): the request gets an error, not silence.
                                self.send_error(xid, errors::BAD_REQUEST_BAD_TYPE, frame);
                                break;
                            }
                            if !frames.into_iter().all(|f| self.outbox.push_wait(f)) {
                                break;
                            }
                        }
                    }
                    Err(e) => self.send_error(xid, e, frame),
                }
                return Flow::Continue;
            }
        };
        self.send(xid, &reply);
        Flow::Continue
    }
}
