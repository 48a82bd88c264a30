//! Reading and writing vhost-user messages on a unix stream socket, with fds passed as
//! SCM_RIGHTS ancillary data.
//!
//! Threads: the port's control thread (and the test frontend). Blocking I/O.
use crate::msg::{Header, Msg, MsgError, HDR_SIZE, MAX_FDS};
use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use std::io::{self, IoSlice, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Why reading a message failed.
#[derive(Debug)]
pub enum RecvError {
    /// The peer closed the connection.
    Closed,
    /// Socket error.
    Io(io::Error),
    /// A message we cannot parse; the stream cannot be trusted after it.
    Protocol(MsgError),
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

/// Reads one message: the header with its fds, then the payload.
pub fn recv_msg(sock: &UnixStream) -> Result<Msg, RecvError> {
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
    if r.bytes < HDR_SIZE {
        (&*sock).read_exact(&mut hdr[r.bytes..])?;
    }
    let hdr = Header::decode(&hdr).map_err(RecvError::Protocol)?;
    let mut payload = vec![0u8; hdr.size as usize];
    (&*sock).read_exact(&mut payload)?;
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
