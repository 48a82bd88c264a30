//! The control server: accepts connections on `RUN_DIR/vireod.ctl`, reads one JSON request per
//! line, runs it on the [`Switch`] and writes one JSON response per line.
//!
//! Threads: the accept loop runs on the daemon's main thread; each connection gets a thread of
//! its own (at most [`MAX_CLIENTS`] at once) that takes the `Switch` mutex for one command at a
//! time and joins the ports that command stopped only after releasing it. Lock order: `Switch`
//! only.
//!
//! Deadlines: a client may idle between requests for [`IDLE`]; once the first byte of a request
//! has arrived, the whole line must arrive within [`REQUEST_DEADLINE`], and a response must be
//! taken within [`WRITE_DEADLINE`], or the connection is closed (logged). A slow or stalled
//! client holds only its own thread, never the `Switch` mutex.
use super::switch::Switch;
use crate::proto::{Request, Response, MAX_REQUEST};
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Control clients the daemon cut off, by reason (shown under `control` in `show --json`).
#[derive(Debug, Default)]
pub struct CtlCounters {
    /// Requests not complete within [`REQUEST_DEADLINE`].
    pub incomplete: AtomicU64,
    /// Requests longer than `MAX_REQUEST`.
    pub too_long: AtomicU64,
    /// Requests that were not valid JSON requests.
    pub malformed: AtomicU64,
    /// Connections refused because [`MAX_CLIENTS`] were being served.
    pub refused: AtomicU64,
}

/// The daemon's control-socket counters.
pub static COUNTERS: CtlCounters = CtlCounters {
    incomplete: AtomicU64::new(0),
    too_long: AtomicU64::new(0),
    malformed: AtomicU64::new(0),
    refused: AtomicU64::new(0),
};

impl CtlCounters {
    /// The counters as JSON.
    pub fn json(&self) -> serde_json::Value {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "incomplete_requests": g(&self.incomplete),
            "too_long_requests": g(&self.too_long),
            "malformed_requests": g(&self.malformed),
            "refused_connections": g(&self.refused),
        })
    }
}

/// Connections served at once; more are answered with an error and closed.
pub const MAX_CLIENTS: usize = 64;
/// How long a connection may sit between requests.
pub const IDLE: Duration = Duration::from_secs(300);
/// How long a request may take to arrive once its first byte has.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// How long a client may take to read a response.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(10);

/// Serves until `stop` is set (the signal thread sets it and connects once to wake us).
pub fn serve(listener: UnixListener, switch: Arc<Mutex<Switch>>, stop: Arc<AtomicBool>) {
    let clients = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        match conn {
            Ok(stream) => {
                if clients.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
                    clients.fetch_sub(1, Ordering::SeqCst);
                    COUNTERS.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("control socket: too many clients, refusing one");
                    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
                    let busy = Response::err(format!(
                        "vireod is serving {MAX_CLIENTS} control connections; try again"
                    ));
                    let _ = write_response(&stream, &busy);
                    continue;
                }
                let (sw, n) = (switch.clone(), clients.clone());
                let spawned =
                    std::thread::Builder::new()
                        .name("ctl-conn".into())
                        .spawn(move || {
                            handle(stream, sw);
                            n.fetch_sub(1, Ordering::SeqCst);
                        });
                if let Err(e) = spawned {
                    clients.fetch_sub(1, Ordering::SeqCst);
                    tracing::warn!(error = %e, "cannot start a control connection thread");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "control socket accept failed");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Why no request line came.
#[derive(Debug)]
enum ReadEnd {
    /// The client closed, idled past [`IDLE`], or the socket failed: just close.
    Gone,
    /// Part of a request came but not the rest in time.
    Incomplete(usize),
    /// The line is longer than [`MAX_REQUEST`].
    TooLong,
}

/// Reads the next request line (without the newline) into `line`; bytes after it stay in
/// `pending` for the next call.
fn read_line(s: &UnixStream, pending: &mut Vec<u8>, line: &mut Vec<u8>) -> Result<(), ReadEnd> {
    let mut started: Option<Instant> = (!pending.is_empty()).then(Instant::now);
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(i) = pending.iter().position(|&b| b == b'\n') {
            line.clear();
            line.extend_from_slice(&pending[..i]);
            pending.drain(..=i);
            return Ok(());
        }
        if pending.len() > MAX_REQUEST {
            return Err(ReadEnd::TooLong);
        }
        let wait = match started {
            None => IDLE,
            Some(t) => match REQUEST_DEADLINE.checked_sub(t.elapsed()) {
                Some(d) if !d.is_zero() => d,
                _ => return Err(ReadEnd::Incomplete(pending.len())),
            },
        };
        if s.set_read_timeout(Some(wait)).is_err() {
            return Err(ReadEnd::Gone);
        }
        match (&*s).read(&mut chunk) {
            Ok(0) => return Err(ReadEnd::Gone),
            Ok(n) => {
                started.get_or_insert_with(Instant::now);
                pending.extend_from_slice(&chunk[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) && started.is_some() => {}
            Err(_) => return Err(ReadEnd::Gone),
        }
    }
}

fn write_response(s: &UnixStream, resp: &Response) -> io::Result<()> {
    let mut out = serde_json::to_vec(resp).unwrap_or_else(|_| b"{\"ok\":false}".to_vec());
    out.push(b'\n');
    (&*s).write_all(&out)
}

fn handle(stream: UnixStream, switch: Arc<Mutex<Switch>>) {
    let _ = stream.set_write_timeout(Some(WRITE_DEADLINE));
    let (mut pending, mut line) = (Vec::new(), Vec::new());
    loop {
        let resp = match read_line(&stream, &mut pending, &mut line) {
            Ok(()) => run(&line, &switch),
            Err(ReadEnd::Gone) => return,
            Err(ReadEnd::Incomplete(got)) => {
                COUNTERS.incomplete.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    bytes = got,
                    "control socket: request incomplete after {} s, closing",
                    REQUEST_DEADLINE.as_secs()
                );
                let r = Response::err(format!(
                    "request incomplete after {} s ({got} bytes without a newline)",
                    REQUEST_DEADLINE.as_secs()
                ));
                let _ = write_response(&stream, &r);
                return;
            }
            Err(ReadEnd::TooLong) => {
                COUNTERS.too_long.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("control socket: request longer than {MAX_REQUEST} bytes, closing");
                let r = Response::err(format!("request longer than {MAX_REQUEST} bytes"));
                let _ = write_response(&stream, &r);
                return;
            }
        };
        if write_response(&stream, &resp).is_err() {
            return;
        }
        if super::upgrade::EXIT_AFTER_REPLY.load(Ordering::SeqCst) {
            // Upgraded: the new vireod serves everything now. Exit without destructors, so
            // no socket file it took over is removed.
            tracing::info!("vireod handed over; exiting");
            std::process::exit(0);
        }
    }
}

/// Runs one request line. Ports the command stopped are joined after the mutex is released.
fn run(line: &[u8], switch: &Mutex<Switch>) -> Response {
    let req = match serde_json::from_slice::<Request>(line) {
        Ok(req) => req,
        Err(e) => {
            COUNTERS.malformed.fetch_add(1, Ordering::Relaxed);
            return Response::err(format!("malformed request: {e}"));
        }
    };
    let (resp, retired) = {
        let mut sw = switch.lock().unwrap_or_else(|e| e.into_inner());
        let resp = sw.execute(&req.command, &req.args);
        (resp, sw.take_retired())
    };
    for lp in retired {
        lp.join();
    }
    resp
}
