//! A frontend never holds an endpoint's control thread: a header without its payload, a
//! payload dripped a byte at a time, replies never read, and (client mode) a listener that
//! never accepts are all cut at the deadline, counted, and the endpoint stops promptly.
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};
use vhost::sock::MSG_DEADLINE;
use vhost::{ConnState, Endpoint, Mode};

const SET_OWNER: u32 = 3;
const GET_FEATURES: u32 = 1;

fn header(req: u32, size: u32) -> Vec<u8> {
    let mut m = req.to_le_bytes().to_vec();
    m.extend_from_slice(&1u32.to_le_bytes());
    m.extend_from_slice(&size.to_le_bytes());
    m
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

fn connected(ep: &Endpoint) -> UnixStream {
    let s = UnixStream::connect(ep.path()).unwrap();
    assert!(wait_until(Duration::from_secs(2), || ep
        .device()
        .conn_state()
        == ConnState::Connected));
    s
}

/// Waits for the endpoint to close `s`; returns how long that took from `t0`.
fn closed_after(s: &mut UnixStream, t0: Instant) -> Duration {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return t0.elapsed(),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return t0.elapsed(),
            Err(e) => panic!("connection not closed after {:?}: {e}", t0.elapsed()),
        }
    }
}

fn errors(ep: &Endpoint) -> u64 {
    ep.device()
        .stats
        .protocol_errors
        .load(std::sync::atomic::Ordering::Relaxed)
}

fn server(dir: &Path) -> Endpoint {
    Endpoint::start(&dir.join("vu.sock"), 1, Mode::Server).unwrap()
}

#[test]
fn header_without_payload_is_cut_at_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let ep = server(dir.path());
    let mut s = connected(&ep);
    let t0 = Instant::now();
    s.write_all(&header(SET_OWNER, 8)).unwrap();
    let took = closed_after(&mut s, t0);
    assert!(
        took >= MSG_DEADLINE - Duration::from_millis(50) && took < MSG_DEADLINE * 2,
        "closed after {took:?}"
    );
    assert_eq!(errors(&ep), 1);
    // The port serves the next frontend.
    assert!(wait_until(Duration::from_secs(2), || ep
        .device()
        .conn_state()
        == ConnState::Listening));
    let mut s = connected(&ep);
    s.write_all(&header(GET_FEATURES, 0)).unwrap();
    let mut reply = [0u8; 20];
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.read_exact(&mut reply).unwrap();
    assert_eq!(
        u32::from_le_bytes(reply[0..4].try_into().unwrap()),
        GET_FEATURES
    );
}

#[test]
fn payload_dripped_a_byte_every_500ms_is_cut_at_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let ep = server(dir.path());
    let mut s = connected(&ep);
    let t0 = Instant::now();
    s.write_all(&header(SET_OWNER, 8)).unwrap();
    let mut w = s.try_clone().unwrap();
    let dripper = std::thread::spawn(move || {
        for _ in 0..8 {
            std::thread::sleep(Duration::from_millis(500));
            if w.write_all(&[0]).is_err() {
                return;
            }
        }
    });
    let took = closed_after(&mut s, t0);
    assert!(took < MSG_DEADLINE * 2, "closed after {took:?}");
    assert!(took >= MSG_DEADLINE - Duration::from_millis(50), "{took:?}");
    assert_eq!(errors(&ep), 1);
    dripper.join().unwrap();
}

#[test]
fn stop_is_prompt_in_the_middle_of_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let ep = server(dir.path());
    let mut s = connected(&ep);
    s.write_all(&header(SET_OWNER, 8)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    ep.stop();
    assert!(!ep.path().exists(), "socket file removed at stop");
    ep.join();
    let took = t0.elapsed();
    assert!(took < Duration::from_millis(500), "join took {took:?}");
    assert_eq!(ep.device().conn_state(), ConnState::Stopped);
    // Stopping is not a protocol error.
    assert_eq!(errors(&ep), 0);
    let _ = closed_after(&mut s, t0);
}

#[test]
fn replies_never_read_close_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let ep = server(dir.path());
    let s = connected(&ep);
    s.set_nonblocking(true).unwrap();
    // Ask and never read: the replies fill our receive buffer, then the endpoint's send
    // times out and it closes the connection.
    let ask = header(GET_FEATURES, 0).repeat(256);
    let t0 = Instant::now();
    let mut closed = false;
    while t0.elapsed() < Duration::from_secs(20) {
        match (&s).write(&ask) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => {
                closed = true;
                break;
            }
        }
        if ep.device().conn_state() == ConnState::Listening {
            closed = true;
            break;
        }
    }
    assert!(closed, "connection still open after {:?}", t0.elapsed());
    assert!(wait_until(Duration::from_secs(3), || errors(&ep) == 1));
    let t1 = Instant::now();
    ep.shutdown();
    assert!(t1.elapsed() < Duration::from_millis(500));
}

#[test]
fn client_mode_never_waits_on_a_listener_that_does_not_accept() {
    use rustix::net::{bind, listen, socket, AddressFamily, SocketAddrUnix, SocketType};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("frontend.sock");
    let fd = socket(AddressFamily::UNIX, SocketType::STREAM, None).unwrap();
    bind(&fd, &SocketAddrUnix::new(&path).unwrap()).unwrap();
    listen(&fd, 0).unwrap();
    let l = UnixListener::from(fd);
    // Fill the accept queue (backlog 0 holds one) so that a blocking connect would wait.
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let p = path.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(UnixStream::connect(p));
        });
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(s) => fillers.push(s),
            Err(_) => break, // this connect blocks: the queue is full
        }
    }
    let ep = Endpoint::start(&path, 1, Mode::Client { reconnect_ms: 50 }).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ep.device().conn_state(), ConnState::Connecting);
    let t0 = Instant::now();
    ep.shutdown();
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "{:?}",
        t0.elapsed()
    );
    // The peer's socket file is not ours: left in place.
    assert!(path.exists());
    drop(l);
}
