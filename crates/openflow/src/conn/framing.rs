//! Framing: turns a byte stream into whole OpenFlow messages. Handles partial reads (a
//! frame may arrive a byte at a time, across read timeouts) and rejects header lengths
//! below 8 (the 16-bit field cannot exceed 65535). Runs on a connection's reader thread.

use std::io::{self, Read};
use std::time::{Duration, Instant};

use crate::msg::HEADER_LEN;

/// Why no frame could be read.
#[derive(Debug)]
pub enum FrameError {
    /// The peer closed the stream; `partial` bytes of an unfinished frame were pending.
    Eof { partial: usize },
    /// A header announced a length below 8; the stream cannot be resynchronised.
    BadLength { header: [u8; HEADER_LEN] },
    /// A read failed; `WouldBlock` / `TimedOut` mean "nothing yet" and the partial frame
    /// stays buffered.
    Io(io::Error),
}

impl FrameError {
    /// Whether this is a read timeout (keep going).
    pub fn is_timeout(&self) -> bool {
        matches!(self, FrameError::Io(e)
            if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

/// Reassembles frames from reads.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
}

impl FrameReader {
    /// An empty reader.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes buffered but not yet returned as a frame.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Appends bytes (for callers that read themselves).
    pub fn push(&mut self, data: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Takes the next complete frame from what is buffered.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        let avail = &self.buf[self.start..];
        if avail.len() < HEADER_LEN {
            return Ok(None);
        }
        let len = usize::from(u16::from_be_bytes([avail[2], avail[3]]));
        if len < HEADER_LEN {
            let mut header = [0u8; HEADER_LEN];
            header.copy_from_slice(&avail[..HEADER_LEN]);
            return Err(FrameError::BadLength { header });
        }
        if avail.len() < len {
            return Ok(None);
        }
        let frame = avail[..len].to_vec();
        self.start += len;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 64 * 1024 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        Ok(Some(frame))
    }

    /// Reads until one whole frame is available and returns it.
    pub fn read_frame<R: Read>(&mut self, r: &mut R) -> Result<Vec<u8>, FrameError> {
        self.read_frame_spinning(
            r,
            |_, _| Err(io::ErrorKind::WouldBlock.into()),
            Duration::ZERO,
        )
    }

    /// As [`FrameReader::read_frame`], but first polls `nowait` (a read of `r` that never
    /// blocks: `WouldBlock` when nothing is there) for up to `spin`, yielding the core
    /// between polls, before the blocking read: a peer that sends its next request right
    /// after our reply then finds this thread awake, and neither side pays a wake-up.
    pub fn read_frame_spinning<R: Read>(
        &mut self,
        r: &mut R,
        mut nowait: impl FnMut(&mut R, &mut [u8]) -> io::Result<usize>,
        spin: Duration,
    ) -> Result<Vec<u8>, FrameError> {
        let mut tmp = [0u8; 16 * 1024];
        let start = Instant::now();
        let mut spinning = !spin.is_zero();
        loop {
            if let Some(f) = self.next_frame()? {
                return Ok(f);
            }
            let got = if spinning {
                nowait(r, &mut tmp)
            } else {
                r.read(&mut tmp)
            };
            match got {
                Ok(0) => {
                    return Err(FrameError::Eof {
                        partial: self.pending(),
                    })
                }
                Ok(n) => self.push(&tmp[..n]),
                Err(e) if spinning && e.kind() == io::ErrorKind::WouldBlock => {
                    if start.elapsed() >= spin {
                        spinning = false;
                    } else {
                        // Yield, not pause: on a small machine the peer may need this core.
                        std::thread::yield_now();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(FrameError::Io(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that yields its data one byte per call, with a timeout between bytes.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        tick: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.tick = !self.tick;
            if self.tick {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            match self.data.get(self.pos) {
                Some(&b) => {
                    buf[0] = b;
                    self.pos += 1;
                    Ok(1)
                }
                None => Ok(0),
            }
        }
    }

    #[test]
    fn partial_reads_across_timeouts() {
        let mut data = vec![4, 20, 0, 8, 0, 0, 0, 1];
        data.extend_from_slice(&[4, 2, 0, 10, 0, 0, 0, 2, 0xaa, 0xbb]);
        data.extend_from_slice(&[4, 2, 0]);
        let mut t = Trickle {
            data,
            pos: 0,
            tick: false,
        };
        let mut fr = FrameReader::new();
        let mut frames = Vec::new();
        let mut timeouts = 0;
        loop {
            match fr.read_frame(&mut t) {
                Ok(f) => frames.push(f),
                Err(e) if e.is_timeout() => timeouts += 1,
                Err(FrameError::Eof { partial }) => {
                    assert_eq!(partial, 3);
                    break;
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        assert!(timeouts > 10);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1], vec![4, 2, 0, 10, 0, 0, 0, 2, 0xaa, 0xbb]);
    }

    #[test]
    fn short_length_is_rejected() {
        let mut fr = FrameReader::new();
        fr.push(&[4, 0, 0, 4, 0, 0, 0, 0]);
        assert!(matches!(fr.next_frame(), Err(FrameError::BadLength { .. })));
    }

    #[test]
    fn max_length_frame() {
        let mut fr = FrameReader::new();
        let mut f = vec![4u8, 2, 0xff, 0xff, 0, 0, 0, 0];
        f.resize(65535, 7);
        f.extend_from_slice(&[4, 20, 0, 8, 0, 0, 0, 9]);
        let mut r = &f[..];
        assert_eq!(fr.read_frame(&mut r).unwrap().len(), 65535);
        assert_eq!(fr.read_frame(&mut r).unwrap().len(), 8);
        assert!(matches!(
            fr.read_frame(&mut r),
            Err(FrameError::Eof { partial: 0 })
        ));
    }

    /// A socket stand-in: what arrives without waiting (after `misses` empty polls), and
    /// what a blocking read returns, counting the calls of each.
    struct TwoSpeed {
        misses: usize,
        soon: Vec<u8>,
        later: Vec<u8>,
        polls: usize,
        blocking_reads: usize,
    }

    impl Read for TwoSpeed {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.blocking_reads += 1;
            let n = self.later.len().min(buf.len());
            buf[..n].copy_from_slice(&self.later[..n]);
            self.later.drain(..n);
            Ok(n)
        }
    }

    fn poll(t: &mut TwoSpeed, buf: &mut [u8]) -> io::Result<usize> {
        t.polls += 1;
        if t.misses > 0 || t.soon.is_empty() {
            t.misses = t.misses.saturating_sub(1);
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = t.soon.len().min(buf.len());
        buf[..n].copy_from_slice(&t.soon[..n]);
        t.soon.drain(..n);
        Ok(n)
    }

    #[test]
    fn a_frame_that_arrives_while_spinning_needs_no_blocking_read() {
        let mut t = TwoSpeed {
            misses: 5,
            soon: vec![4, 20, 0, 8, 0, 0, 0, 1, 4, 21, 0, 8, 0, 0, 0, 1],
            later: Vec::new(),
            polls: 0,
            blocking_reads: 0,
        };
        let mut fr = FrameReader::new();
        let spin = Duration::from_secs(5);
        let a = fr.read_frame_spinning(&mut t, poll, spin).unwrap();
        let b = fr.read_frame_spinning(&mut t, poll, spin).unwrap();
        assert_eq!((a[1], b[1]), (20, 21));
        assert_eq!(t.polls, 6, "five empty polls, then both frames in one read");
        assert_eq!(t.blocking_reads, 0);
    }

    #[test]
    fn spinning_gives_up_after_its_time_and_blocks() {
        let mut t = TwoSpeed {
            misses: 0,
            soon: Vec::new(),
            later: vec![4, 2, 0, 9, 0, 0, 0, 3, 0xee],
            polls: 0,
            blocking_reads: 0,
        };
        let mut fr = FrameReader::new();
        let spin = Duration::from_millis(2);
        let start = Instant::now();
        let f = fr.read_frame_spinning(&mut t, poll, spin).unwrap();
        assert!(start.elapsed() >= spin);
        assert_eq!(f, vec![4, 2, 0, 9, 0, 0, 0, 3, 0xee]);
        assert!(t.polls > 1);
        assert_eq!(t.blocking_reads, 1);
        // No spin: straight to the blocking read.
        t.later = vec![4, 2, 0, 8, 0, 0, 0, 4];
        let polls = t.polls;
        fr.read_frame_spinning(&mut t, poll, Duration::ZERO)
            .unwrap();
        assert_eq!((t.polls, t.blocking_reads), (polls, 2));
    }

    #[test]
    fn a_peer_closing_while_we_spin_is_end_of_stream() {
        let mut t = TwoSpeed {
            misses: 0,
            soon: vec![4, 2, 0, 12],
            later: Vec::new(),
            polls: 0,
            blocking_reads: 0,
        };
        let mut fr = FrameReader::new();
        let closed = |t: &mut TwoSpeed, b: &mut [u8]| match poll(t, b) {
            Err(_) if t.polls > 1 => Ok(0),
            r => r,
        };
        let r = fr.read_frame_spinning(&mut t, closed, Duration::from_secs(5));
        assert!(matches!(r, Err(FrameError::Eof { partial: 4 })), "{r:?}");
        assert_eq!(t.blocking_reads, 0);
    }
}
