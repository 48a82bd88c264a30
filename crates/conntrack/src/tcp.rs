//! TCP connection state and sequence-window tracking.
//!
//! Owns: [`TcpConn`], the per-connection TCP state (a state machine over SYN, SYN-ACK, data,
//! FIN and RST) and, per direction, the highest sequence sent, the highest sequence the peer
//! allows (its ack plus scaled window) and the largest window seen. The window rule follows the
//! idea of Guido van Rooij's "Real Stateful TCP Packet Filtering" as OpenBSD pf applies it:
//! a segment must fit in what the receiver allowed, must not be older than one window, and may
//! not acknowledge data never sent. Written for Vireo; no code from pf or OVS.
//!
//! Threads: PMD threads, under the connection's own mutex (see `table`).

use crate::parse::{tcp_flags as F, TcpInfo};

/// TCP connection states (the tracker's own, coarser than RFC 793).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TcpState {
    /// SYN seen from the originator.
    SynSent,
    /// SYN-ACK seen from the responder.
    SynRecv,
    /// Handshake done (or data both ways).
    Established,
    /// One side sent FIN.
    FinWait,
    /// Both sides sent FIN (waiting for stray segments).
    TimeWait,
    /// Reset.
    Closed,
}

/// One direction's sequence window.
#[derive(Clone, Copy, Debug, Default)]
struct Peer {
    /// Set once this side sent its SYN (or first segment).
    seen: bool,
    /// Highest sequence end sent.
    end: u32,
    /// Highest sequence end allowed by the other side (its ack + scaled window).
    maxend: u32,
    /// Largest (scaled) window this side advertised.
    maxwin: u32,
    /// Window scale this side uses.
    wscale: u8,
    /// Sent a FIN.
    fin: bool,
}

/// TCP state of one connection. Index 0 is the originator, 1 the responder.
#[derive(Clone, Copy, Debug)]
pub struct TcpConn {
    /// The state machine's state.
    pub state: TcpState,
    peer: [Peer; 2],
}

/// Result of checking one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted.
    Ok,
    /// Outside the sequence window.
    OutOfWindow,
    /// Flags that cannot appear in this state (e.g. SYN+RST, no flags).
    BadFlags,
    /// A new SYN on a closed or time-wait connection: start over.
    Reopen,
}

fn seq_ge(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}
fn seq_max(a: u32, b: u32) -> u32 {
    if seq_ge(a, b) {
        a
    } else {
        b
    }
}

/// Slack allowed for acknowledgements of data never seen (pf's MAXACKWINDOW idea).
const ACK_SLACK: u32 = 66_000;

/// Flags a valid first segment has: SYN without ACK, RST or FIN.
pub fn valid_new(t: &TcpInfo) -> bool {
    t.flags & (F::SYN | F::ACK | F::RST | F::FIN) == F::SYN
}

fn bad_flags(f: u8) -> bool {
    let f = f & 0x3f;
    f & (F::SYN | F::RST) == F::SYN | F::RST
        || f & (F::SYN | F::FIN) == F::SYN | F::FIN
        || f & (F::SYN | F::ACK | F::RST | F::FIN) == 0
}

impl TcpConn {
    /// Bytes in [`TcpConn::to_bytes`]'s form.
    pub const BYTES: usize = 1 + 2 * 15;

    /// The whole state as bytes (state, then each direction's seen, end, maxend, maxwin,
    /// wscale, fin), for handing a connection to another process (`crate::snapshot`).
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0] = self.state as u8;
        for (i, p) in self.peer.iter().enumerate() {
            let o = 1 + i * 15;
            b[o] = u8::from(p.seen);
            b[o + 1..o + 5].copy_from_slice(&p.end.to_le_bytes());
            b[o + 5..o + 9].copy_from_slice(&p.maxend.to_le_bytes());
            b[o + 9..o + 13].copy_from_slice(&p.maxwin.to_le_bytes());
            b[o + 13] = p.wscale;
            b[o + 14] = u8::from(p.fin);
        }
        b
    }

    /// The state [`TcpConn::to_bytes`] wrote; `None` for an unknown state or a flag byte
    /// other than 0 or 1.
    pub fn from_bytes(b: &[u8; Self::BYTES]) -> Option<TcpConn> {
        const STATES: [TcpState; 6] = [
            TcpState::SynSent,
            TcpState::SynRecv,
            TcpState::Established,
            TcpState::FinWait,
            TcpState::TimeWait,
            TcpState::Closed,
        ];
        let state = *STATES.get(usize::from(b[0]))?;
        let flag = |x: u8| match x {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        };
        let word = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let mut peer = [Peer::default(); 2];
        for (i, p) in peer.iter_mut().enumerate() {
            let o = 1 + i * 15;
            *p = Peer {
                seen: flag(b[o])?,
                end: word(o + 1),
                maxend: word(o + 5),
                maxwin: word(o + 9),
                wscale: b[o + 13],
                fin: flag(b[o + 14])?,
            };
        }
        Some(TcpConn { state, peer })
    }

    /// State after the originator's SYN `t`.
    pub fn new(t: &TcpInfo) -> TcpConn {
        let ws = t.wscale.unwrap_or(0);
        let end = t.seq.wrapping_add(t.len).wrapping_add(1);
        let win = u32::from(t.win).max(1);
        TcpConn {
            state: TcpState::SynSent,
            peer: [
                Peer {
                    seen: true,
                    end,
                    maxend: end.wrapping_add(1),
                    maxwin: win,
                    wscale: if t.wscale.is_some() { ws } else { 0xff },
                    fin: false,
                },
                Peer::default(),
            ],
        }
    }

    /// Checks segment `t` travelling in direction `dir` (0 = originator → responder) and, if
    /// it is accepted, updates the windows and the state. `check_window` off (a zone setting)
    /// keeps the state machine but accepts any sequence numbers.
    pub fn update(&mut self, dir: usize, t: &TcpInfo, check_window: bool) -> Verdict {
        let f = t.flags;
        if bad_flags(f) {
            return Verdict::BadFlags;
        }
        if f & F::SYN != 0
            && f & F::ACK == 0
            && dir == 0
            && matches!(self.state, TcpState::TimeWait | TcpState::Closed)
        {
            return Verdict::Reopen;
        }
        let (src, dst) = if dir == 0 { (0, 1) } else { (1, 0) };
        // The responder's SYN-ACK initialises its side.
        if dir == 1 && f & F::SYN != 0 && !self.peer[1].seen {
            if f & F::ACK == 0 {
                return Verdict::BadFlags;
            }
            let both = t.wscale.is_some() && self.peer[0].wscale != 0xff;
            if !both {
                self.peer[0].wscale = 0;
            }
            let end = t.seq.wrapping_add(t.len).wrapping_add(1);
            self.peer[1] = Peer {
                seen: true,
                end,
                maxend: end.wrapping_add(1),
                maxwin: u32::from(t.win).max(1),
                wscale: if both { t.wscale.unwrap_or(0) } else { 0 },
                fin: false,
            };
            // The SYN's own window is never scaled; the originator may send up to what the
            // SYN-ACK allows.
            self.peer[0].maxend = seq_max(
                self.peer[0].maxend,
                t.ack.wrapping_add(u32::from(t.win).max(1)),
            );
            if check_window && t.ack != self.peer[0].end {
                self.peer[1] = Peer::default();
                return Verdict::OutOfWindow;
            }
            if self.state == TcpState::SynSent {
                self.state = TcpState::SynRecv;
            }
            return Verdict::Ok;
        }
        if self.peer[0].wscale == 0xff {
            self.peer[0].wscale = 0;
        }
        let s = self.peer[src];
        let d = self.peer[dst];
        let syn_fin = u32::from(f & F::SYN != 0) + u32::from(f & F::FIN != 0);
        let end = t.seq.wrapping_add(t.len).wrapping_add(syn_fin);
        let win = u32::from(t.win) << if f & F::SYN != 0 { 0 } else { s.wscale };
        if check_window && d.seen {
            // A side's first segment without SYN (a RST refusing the SYN) has no window yet:
            // only its acknowledgement is checked.
            let in_win = !s.seen
                || (seq_ge(s.maxend, end) && seq_ge(t.seq, s.end.wrapping_sub(d.maxwin.max(1))));
            let ack_ok = f & F::ACK == 0
                || (seq_ge(d.end, t.ack) && seq_ge(t.ack, d.end.wrapping_sub(ACK_SLACK)));
            // A RST must land in the window too (RFC 5961 spirit), which the check above covers.
            if !(in_win && ack_ok) {
                return Verdict::OutOfWindow;
            }
        }
        let p = &mut self.peer[src];
        if !p.seen {
            p.seen = true;
            p.end = end;
            p.maxend = end;
        }
        p.end = seq_max(p.end, end);
        p.maxwin = p.maxwin.max(win.max(1));
        if f & F::FIN != 0 {
            p.fin = true;
        }
        if f & F::ACK != 0 {
            let allow = t.ack.wrapping_add(win.max(1));
            let q = &mut self.peer[dst];
            q.maxend = seq_max(q.maxend, allow);
        }
        self.advance(dir, f);
        Verdict::Ok
    }

    fn advance(&mut self, dir: usize, f: u8) {
        use TcpState::*;
        if f & F::RST != 0 {
            self.state = Closed;
            return;
        }
        let both_fin = self.peer[0].fin && self.peer[1].fin;
        self.state = match self.state {
            SynRecv if dir == 0 && f & F::ACK != 0 => Established,
            SynSent | SynRecv if self.peer[1].seen && self.peer[0].seen && f & F::SYN == 0 => {
                Established
            }
            _ if both_fin => TimeWait,
            Established if f & F::FIN != 0 => FinWait,
            s => s,
        };
    }

    /// The state's name (for dumps).
    pub fn name(&self) -> &'static str {
        match self.state {
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynRecv => "SYN_RECV",
            TcpState::Established => "ESTABLISHED",
            TcpState::FinWait => "FIN_WAIT",
            TcpState::TimeWait => "TIME_WAIT",
            TcpState::Closed => "CLOSED",
        }
    }
}
