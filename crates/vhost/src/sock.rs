//! Reading and writing vhost-user messages on a unix stream socket, with fds passed as
//! SCM_RIGHTS ancillary data.
//!
//! Threads: the port's control thread (and the test frontend). Blocking I/O, but never
//! unbounded: once the first byte of a message has arrived, the rest of it (header and payload)
//! must arrive before [`MSG_DEADLINE`], however the peer spaces its bytes, or the read fails
//! with [`RecvError::Timeout`]; a reply must be written within the socket's send timeout
//! (set by the endpoint with [`set_send_timeout`]).
use crate::msg::{Header, Msg, MsgError, HDR_SIZE, MAX_FDS};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use std::io::{self, IoSlice, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// How long a peer has to deliver the rest of a message once its first byte arrived, and to
/// take a reply off the socket.
pub const MSG_DEADLINE: Duration = Duration::from_secs(1);

/// Longest single wait, so that a stop request is seen promptly.
const SLICE: Duration = Duration::from_millis(100);

/// Why reading a message failed.
#[derive(Debug)]
pub enum RecvError {
    /// The peer closed the connection.
    Closed,
    /// Socket error.
    Io(io::Error),
    /// A message we cannot parse; the stream cannot be trusted after it.
    Protocol(MsgError),
    /// The message was not complete within the deadline (`got` of `want` bytes).
    Timeout {
        /// Bytes of the message received (header included).
        got: usize,
        /// Bytes the message needed (header, plus the payload once the header was read).
        want: usize,
    },
    /// Asked to stop in the middle of a message.
    Stopped,
}

impl From<io::Error> for RecvError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            RecvError::Closed
        } else {
            RecvError::Io(e)
        }
    }
}

/// Sets the socket's send timeout: a peer that does not read its replies cannot hold the
/// control thread in `send_msg` for longer than `d`.
pub fn set_send_timeout(sock: &UnixStream, d: Duration) -> io::Result<()> {
    sock.set_write_timeout(Some(d))
}

/// Fills `buf` from `sock` by `deadline`, polling in short slices so that `stop` is seen.
/// `done` is what the message already had, for the error.
fn read_by(
    sock: &UnixStream,
    buf: &mut [u8],
    done: usize,
    want: usize,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<(), RecvError> {
    let mut got = 0;
    while got < buf.len() {
        if stop.load(Relaxed) {
            return Err(RecvError::Stopped);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(RecvError::Timeout {
                got: done + got,
                want,
            });
        }
        let wait = (deadline - now).min(SLICE);
        let ts = Timespec {
            tv_sec: 0,
            tv_nsec: wait.as_nanos() as _,
        };
        let mut fds = [PollFd::new(sock, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(e) if e == rustix::io::Errno::INTR => continue,
            Err(e) => return Err(RecvError::Io(e.into())),
        }
        // Readable: this read returns at once (data, or 0 at end of stream).
        match (&*sock).read(&mut buf[got..]) {
            Ok(0) => return Err(RecvError::Closed),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Reads one message: the header with its fds, then the payload. Call it when the socket is
/// readable; the whole message must be in within [`MSG_DEADLINE`] of the first byte, and
/// `stop` aborts the wait for the rest.
pub fn recv_msg(sock: &UnixStream, stop: &AtomicBool) -> Result<Msg, RecvError> {
    recv_msg_within(sock, MSG_DEADLINE, stop)
}

/// [`recv_msg`] with a deadline of `limit` from the first byte.
pub fn recv_msg_within(
    sock: &UnixStream,
    limit: Duration,
    stop: &AtomicBool,
) -> Result<Msg, RecvError> {
    let mut hdr = [0u8; HDR_SIZE];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let r = {
        let mut iov = [IoSliceMut::new(&mut hdr)];
        recvmsg(sock, &mut iov, &mut cmsg, RecvFlags::CMSG_CLOEXEC).map_err(io::Error::from)?
    };
    // Take every fd first so that all of them are closed on any error below.
    let mut fds: Vec<OwnedFd> = Vec::new();
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    if r.bytes == 0 {
        return Err(RecvError::Closed);
    }
    if r.flags.contains(ReturnFlags::CTRUNC) {
        return Err(RecvError::Protocol(MsgError::BadFds {
            request: 0,
            fds: MAX_FDS + 1,
        }));
    }
    let deadline = Instant::now() + limit;
    if r.bytes < HDR_SIZE {
        read_by(sock, &mut hdr[r.bytes..], r.bytes, HDR_SIZE, deadline, stop)?;
    }
    let hdr = Header::decode(&hdr).map_err(RecvError::Protocol)?;
    let want = HDR_SIZE + hdr.size as usize;
    let mut payload = vec![0u8; hdr.size as usize];
    read_by(sock, &mut payload, HDR_SIZE, want, deadline, stop)?;
    Ok(Msg { hdr, payload, fds })
}

/// Sends `bytes` (a whole encoded message) with `fds` attached.
pub fn send_msg(sock: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !cmsg.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many fds"));
    }
    let mut done = sendmsg(sock, &[IoSlice::new(bytes)], &mut cmsg, SendFlags::NOSIGNAL)
        .map_err(io::Error::from)?;
    while done < bytes.len() {
        let mut empty = SendAncillaryBuffer::default();
        let n = sendmsg(
            sock,
            &[IoSlice::new(&bytes[done..])],
            &mut empty,
            SendFlags::NOSIGNAL,
        )
        .map_err(io::Error::from)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        done += n;
    }
    Ok(())
}
