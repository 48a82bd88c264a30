//! OpenFlow connections for one bridge ([`OfSwitch`]): passive [`Listener`]s
//! (`unix:PATH`, `ptcp:PORT[:IP]`), active [`Connector`]s (`tcp:IP:PORT`, `unix:PATH`, with
//! 1 s → 8 s exponential backoff and echo keepalive), and the [`SwitchHandler`] trait the
//! daemon implements.
//!
//! Threads: each listener has an accept thread; each connector has a connect thread that also
//! reads its connection; each accepted connection has a reader thread. Every connection has
//! its own writer thread draining a bounded queue, so a slow or dead peer only ever blocks
//! itself. Replies to a peer's own requests wait for room in its queue (back-pressure on that
//! peer); asynchronous messages pushed with [`OfSwitch::broadcast`] never wait: a connection
//! whose queue is full is dropped.
//!
//! Versions: each connection negotiates the highest version both ends allow (the switch's
//! [`Protocols`], set with [`OfSwitch::set_protocols`]: 1.0, 1.3, 1.4, 1.5 by default) and
//! from then on every message it sends or receives is encoded in that version; a message of
//! another version draws BAD_REQUEST/BAD_VERSION. The handler sees only the 1.3-shaped model.
//!
//! The connection layer answers HELLO, ECHO, FEATURES_REQUEST (from
//! [`SwitchHandler::features`], with [`SwitchHandler::ports`] in 1.0), BARRIER and
//! ROLE_REQUEST and GET_ASYNC / SET_ASYNC (per-connection [`AsyncConfig`], spec defaults at
//! connect) itself, refuses state changes from
//! slave controllers, and turns decode errors into `OFPT_ERROR` replies carrying the first 64
//! bytes of the offending message. Everything else goes to [`SwitchHandler::handle`], called
//! on the connection's reader thread, one message at a time per connection.
//!
//! Lock order: one mutex (`Shared::state`); it is never held while calling the handler or
//! while blocking on a queue.

mod connector;
mod framing;
mod listener;
mod session;
mod snoop;
mod stream;

pub use connector::Connector;
pub use framing::{FrameError, FrameReader};
pub use listener::Listener;
pub use snoop::Snoop;
pub use stream::{Stream, Target, DEFAULT_PORT};

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::{errors, OfError};
use crate::msg::{AsyncConfig, FeaturesReply, Message, Port, Role, RoleMsg};
use crate::version::Protocols;
use session::Outbox;

/// Identifies one connection for the lifetime of the process.
pub type ConnId = u64;

/// What the daemon implements for each bridge.
pub trait SwitchHandler: Send + Sync + 'static {
    /// Contents of FEATURES_REPLY (datapath id, tables, capabilities).
    fn features(&self) -> FeaturesReply;

    /// The ports, for an OpenFlow 1.0 FEATURES_REPLY (1.3+ peers ask with PORT_DESC).
    fn ports(&self) -> Vec<Port> {
        Vec::new()
    }

    /// A decoded message from controller `conn` (not HELLO, ECHO, FEATURES_REQUEST,
    /// BARRIER or ROLE_REQUEST, which the connection layer answers). The returned messages
    /// are sent with the request's `xid` (multipart replies are split as needed); an error
    /// is sent as `OFPT_ERROR` with the request's first 64 bytes. Runs on the connection's
    /// reader thread; a barrier is answered only after every earlier `handle` returned.
    fn handle(&self, conn: ConnId, xid: u32, msg: Message) -> Result<Vec<Message>, OfError>;

    /// A BARRIER_REQUEST arrived on `conn`; its reply is sent when this returns. A switch that
    /// defers work (e.g. pushing flow changes into its datapath) finishes it here, so the
    /// barrier reply means every earlier message has taken full effect.
    fn barrier(&self, _conn: ConnId) {}

    /// A connection finished version negotiation.
    fn connected(&self, _conn: ConnId, _peer: &str) {}

    /// A connection ended.
    fn disconnected(&self, _conn: ConnId) {}
}

/// Tunables for every connection of an [`OfSwitch`].
#[derive(Debug, Clone)]
pub struct ConnConfig {
    /// Send ECHO_REQUEST after this long without input; drop the connection if nothing
    /// arrives for as long again. `None` disables keepalive.
    pub inactivity_probe: Option<Duration>,
    /// Messages queued per connection before async pushes drop it.
    pub tx_queue_len: usize,
    /// A write blocked this long means the peer is dead.
    pub write_timeout: Duration,
    /// First reconnect delay of an active connection (doubles on each failure).
    pub backoff_initial: Duration,
    /// Cap on the reconnect delay.
    pub backoff_max: Duration,
    /// Timeout of one TCP connect attempt.
    pub connect_timeout: Duration,
    /// After each message, the reader thread polls the socket without blocking (yielding the
    /// core in between) for this long before it sleeps in a blocking read. A peer that waits
    /// for each reply and then sends its next request (`ovs-ofctl add-flows`: FLOW_MOD +
    /// BARRIER per rule) finds the thread awake, and neither side pays a wake-up per request.
    /// Zero: always block.
    pub read_spin: Duration,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            inactivity_probe: Some(Duration::from_secs(5)),
            tx_queue_len: 1024,
            write_timeout: Duration::from_secs(30),
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(8),
            connect_timeout: Duration::from_secs(5),
            read_spin: Duration::from_micros(50),
        }
    }
}

/// A live connection as seen from [`OfSwitch::connections`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    pub id: ConnId,
    pub peer: String,
    pub role: Role,
    /// Version negotiation finished.
    pub ready: bool,
    /// The negotiated wire version (0 before negotiation).
    pub version: u8,
}

struct ConnEntry {
    outbox: Outbox,
    peer: String,
    role: Role,
    /// Which asynchronous messages this connection receives, per role (SET_ASYNC).
    async_config: AsyncConfig,
    ready: bool,
    version: u8,
    /// 1.0 session in Nicira's NXM flow format (FLOW_REMOVED as NXT_FLOW_REMOVED).
    nxm: bool,
}

#[derive(Default)]
struct State {
    conns: HashMap<ConnId, ConnEntry>,
    /// Last generation id seen in a master/slave role request.
    generation: Option<u64>,
}

pub(crate) struct Shared {
    handler: Arc<dyn SwitchHandler>,
    config: ConnConfig,
    state: Mutex<State>,
    next_id: AtomicU64,
    /// Allowed versions (a [`Protocols`] bitmap), read at each HELLO.
    protocols: AtomicU32,
    /// Clients of `ovs-ofctl snoop`, who get a copy of every frame of every connection.
    snoop: Arc<Snoop>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn new_id(&self) -> ConnId {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn register(&self, id: ConnId, peer: String, outbox: Outbox) {
        let e = ConnEntry {
            outbox,
            peer,
            role: Role::Equal,
            async_config: AsyncConfig::default(),
            ready: false,
            version: 0,
            nxm: false,
        };
        self.lock().conns.insert(id, e);
    }

    fn set_ready(&self, id: ConnId, version: u8) {
        if let Some(e) = self.lock().conns.get_mut(&id) {
            e.ready = true;
            e.version = version;
        }
    }

    fn set_nxm(&self, id: ConnId, on: bool) {
        if let Some(e) = self.lock().conns.get_mut(&id) {
            e.nxm = on;
        }
    }

    fn protocols(&self) -> Protocols {
        Protocols::from_bits(self.protocols.load(Ordering::Relaxed))
    }

    fn unregister(&self, id: ConnId) {
        self.lock().conns.remove(&id);
    }

    fn role(&self, id: ConnId) -> Role {
        self.lock().conns.get(&id).map_or(Role::Equal, |e| e.role)
    }

    fn async_config(&self, id: ConnId) -> AsyncConfig {
        self.lock()
            .conns
            .get(&id)
            .map_or_else(AsyncConfig::default, |e| e.async_config)
    }

    fn set_async_config(&self, id: ConnId, c: AsyncConfig) {
        if let Some(e) = self.lock().conns.get_mut(&id) {
            e.async_config = c;
        }
    }

    /// ROLE_REQUEST semantics of OpenFlow 1.3 §6.3.5.
    fn change_role(&self, id: ConnId, req: RoleMsg) -> Result<RoleMsg, OfError> {
        let mut st = self.lock();
        let current = st.conns.get(&id).map_or(Role::Equal, |e| e.role);
        if matches!(req.role, Role::Master | Role::Slave) {
            if let Some(g) = st.generation {
                if (req.generation_id.wrapping_sub(g) as i64) < 0 {
                    return Err(errors::ROLE_REQUEST_FAILED_STALE);
                }
            }
            st.generation = Some(req.generation_id);
        }
        let role = if req.role == Role::NoChange {
            current
        } else {
            req.role
        };
        if role == Role::Master {
            for (other, e) in st.conns.iter_mut() {
                if *other != id && e.role == Role::Master {
                    e.role = Role::Slave;
                }
            }
        }
        if let Some(e) = st.conns.get_mut(&id) {
            e.role = role;
        }
        Ok(RoleMsg {
            role,
            generation_id: st.generation.unwrap_or(0),
        })
    }
}

/// The OpenFlow side of one bridge: its connections and how to reach them.
#[derive(Clone)]
pub struct OfSwitch {
    shared: Arc<Shared>,
}

impl OfSwitch {
    /// A switch endpoint whose connections are served by `handler`.
    pub fn new(handler: Arc<dyn SwitchHandler>, config: ConnConfig) -> Self {
        let shared = Shared {
            handler,
            config,
            state: Mutex::new(State::default()),
            next_id: AtomicU64::new(0),
            protocols: AtomicU32::new(Protocols::ALL.bits()),
            snoop: Arc::new(Snoop::default()),
        };
        OfSwitch {
            shared: Arc::new(shared),
        }
    }

    /// Listens on `unix:PATH` (or `punix:PATH`) or `ptcp:PORT[:IP]`; each accepted peer is
    /// served on its own thread. Dropping the [`Listener`] stops accepting (live
    /// connections stay up).
    pub fn listen(&self, target: &str) -> io::Result<Listener> {
        Listener::start(self.shared.clone(), Target::parse_passive(target)?)
    }

    /// Listens on `unix:PATH` for `ovs-ofctl snoop` clients: each gets a copy of every message
    /// this switch's connections send and receive (see [`Snoop`]).
    pub fn snoop_listen(&self, target: &str) -> io::Result<Listener> {
        let snoop = self.shared.snoop.clone();
        let shared = self.shared.clone();
        let serve = Arc::new(move |stream: Stream| snoop.serve(stream, shared.protocols()));
        Listener::start_with(serve, Target::parse_passive(target)?, "of-snoop")
    }

    /// The snoop clients and their counters.
    pub fn snoop(&self) -> &Snoop {
        &self.shared.snoop
    }

    /// Serves `l`, a unix listening socket handed over by a previous process, whose file is
    /// `path` (as [`OfSwitch::listen`] does for a socket it binds).
    pub fn listen_on(
        &self,
        l: std::os::unix::net::UnixListener,
        path: &std::path::Path,
    ) -> io::Result<Listener> {
        Listener::adopt_unix(self.shared.clone(), l, path.to_path_buf())
    }

    /// Keeps a connection to controller `tcp:IP[:PORT]` or `unix:PATH`, reconnecting with
    /// backoff. Dropping the [`Connector`] closes it.
    pub fn connect(&self, target: &str) -> io::Result<Connector> {
        Ok(Connector::start(
            self.shared.clone(),
            Target::parse_active(target)?,
        ))
    }

    /// Sets the versions new connections may negotiate (live connections keep theirs).
    pub fn set_protocols(&self, p: Protocols) {
        self.shared.protocols.store(p.bits(), Ordering::Relaxed);
    }

    /// The versions new connections may negotiate.
    pub fn protocols(&self) -> Protocols {
        self.shared.protocols()
    }

    /// Pushes an asynchronous message (PACKET_IN, PORT_STATUS, FLOW_REMOVED, …, xid 0) to
    /// every ready connection whose asynchronous configuration wants it for its current role
    /// (by default slaves get only PORT_STATUS; SET_ASYNC changes that per connection). Never
    /// blocks; a connection whose queue is full is dropped. Returns how many were sent.
    pub fn broadcast(&self, msg: &Message) -> usize {
        // (version, NXM flow format): what decides a frame's encoding.
        type Format = (u8, bool);
        let targets: Vec<(Format, Outbox)> = {
            let st = self.shared.lock();
            st.conns
                .values()
                .filter(|e| e.ready)
                .filter(|e| e.async_config.wants(e.role, msg))
                .map(|e| ((e.version, e.nxm), e.outbox.clone()))
                .collect()
        };
        // Encoded once per version (and 1.0 flow format) in use.
        let mut encoded: Vec<(Format, Vec<Vec<u8>>)> = Vec::new();
        let mut sent = 0;
        for (v, o) in &targets {
            let frames = match encoded.iter().find(|(ev, _)| ev == v) {
                Some((_, f)) => f,
                None => {
                    encoded.push((*v, session::encode_frames(v.0, v.1, 0, msg)));
                    &encoded[encoded.len() - 1].1
                }
            };
            if !frames.is_empty() && frames.iter().all(|f| o.push(f.clone())) {
                sent += 1;
            }
        }
        sent
    }

    /// Sends `msg` with `xid` to one connection without blocking. False if it is gone or
    /// its queue was full (it is then dropped).
    pub fn send_to(&self, conn: ConnId, xid: u32, msg: &Message) -> bool {
        let outbox = self
            .shared
            .lock()
            .conns
            .get(&conn)
            .filter(|e| e.ready)
            .map(|e| (e.version, e.nxm, e.outbox.clone()));
        match outbox {
            Some((v, nxm, o)) => session::encode_frames(v, nxm, xid, msg)
                .into_iter()
                .all(|f| o.push(f)),
            None => false,
        }
    }

    /// Pushes an asynchronous message (xid 0) to one connection, if its asynchronous
    /// configuration wants it for its current role. False only if the connection is gone or
    /// its queue was full (it is then dropped); a message filtered out counts as delivered.
    pub fn send_async_to(&self, conn: ConnId, msg: &Message) -> bool {
        let wanted = self
            .shared
            .lock()
            .conns
            .get(&conn)
            .map(|e| e.async_config.wants(e.role, msg));
        match wanted {
            Some(true) => self.send_to(conn, 0, msg),
            Some(false) => true,
            None => false,
        }
    }

    /// The live connections.
    pub fn connections(&self) -> Vec<ConnInfo> {
        let st = self.shared.lock();
        let mut v: Vec<ConnInfo> = st
            .conns
            .iter()
            .map(|(id, e)| ConnInfo {
                id: *id,
                peer: e.peer.clone(),
                role: e.role,
                ready: e.ready,
                version: e.version,
            })
            .collect();
        v.sort_by_key(|c| c.id);
        v
    }

    /// Closes one connection (an active one will reconnect).
    pub fn disconnect(&self, conn: ConnId) {
        if let Some(e) = self.shared.lock().conns.get(&conn) {
            e.outbox.close();
        }
    }

    /// Closes every connection.
    pub fn disconnect_all(&self) {
        for e in self.shared.lock().conns.values() {
            e.outbox.close();
        }
    }
}
