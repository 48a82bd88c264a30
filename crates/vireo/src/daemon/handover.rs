//! The handover protocol between a running vireod and the one replacing it
//! (`vireoctl upgrade`): the messages, their version, and their framing on the handover socket
//! (`RUN_DIR/vireod.upgrade`, 0600), with fds passed as SCM_RIGHTS.
//!
//! ```text
//! old                                         new (vireod ARGS --takeover RUN_DIR/vireod.upgrade)
//!  <- connect (peer pid checked = the child we started)
//!  Offer {version, sockets, locks, ports, flows} + fds ->   (af-xdp: version 3; with
//!                                                          steering and marks: 4)
//!                                             maps memory, builds bridges and ports, no ring runs
//!  <- Ready            (or Refused {why}: unknown version, a state it cannot serve)
//!  stops its rings (final bursts published)
//!  Final {ring bases per port, learned MACs,  (af-xdp rings held, frame books read)
//!         af-xdp frame books, port counters
//!         (version 3)} ->
//!  [connection table, raw bytes] ->           (version 2)
//!                                             enters MACs and connections, installs the rings
//!                                             at those bases, PMDs poll them
//!  <- Started {pid}
//!  answers vireoctl, exits without removing any socket file
//! ```
//!
//! Framing: `len: u32 LE, nfds: u32 LE` then `len` bytes of JSON; the fds ride on the first
//! `sendmsg` (at most [`FDS_PER_MSG`]) and on one-byte messages after it for the rest. Every read
//! has a deadline (the socket's receive timeout).
//!
//! Threads: the old side runs on the control connection thread that took the `upgrade`
//! command (holding the `Switch` mutex); the new side on the new daemon's main thread.
use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The state format this build writes. Version 2 adds learned MACs and the connection table
/// to [`Reply::Final`]; version 3 hands `af-xdp` ports over ([`Offer::af_xdp`] and the frame
/// books in [`Reply::Final`]); version 4 hands over `af-xdp` ports with `xdp-steering` or
/// `xdp-mark` too (their steering sockets, steering map, counters and mark map in
/// [`XskOffer`]; version 3 leaves them out and they are opened anew).
pub const STATE_VERSION: u32 = 4;
/// The state formats this build reads (each version must accept the one before it).
pub const ACCEPTED_VERSIONS: &[u32] = &[1, 2, 3, 4];
/// The handover socket's name in the run directory.
pub const SOCKET: &str = "vireod.upgrade";
/// Fds per `sendmsg` (the kernel takes at most 253).
const FDS_PER_MSG: usize = 200;
/// Longest message accepted: a connection table of 3,000,000 entries (the default limit) in
/// `conntrack::snapshot`'s form is about 430 MB.
const MAX_LEN: u32 = 512 << 20;

/// Everything the old process hands over. Fields are indices into the fds sent with it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Offer {
    /// State format ([`STATE_VERSION`] of the sender).
    pub version: u32,
    /// The old process.
    pub pid: u32,
    /// The control socket `vireod.ctl`.
    pub control: usize,
    /// The run directory's and the store's lock files (flock held).
    pub locks: Vec<usize>,
    /// Each bridge's `BR.mgmt` socket.
    pub mgmt: BTreeMap<String, usize>,
    /// vhost-user ports by name.
    pub vhost: BTreeMap<String, vhost::Handover>,
    /// Each bridge's OpenFlow rules (ovs-ofctl syntax), live state the store does not hold.
    pub flows: BTreeMap<String, Vec<String>>,
    /// Each bridge's meters (`dump-meters` lines), live state too.
    #[serde(default)]
    pub meters: BTreeMap<String, Vec<String>>,
    /// `tap` and `internal` ports by name: their tap fds (the interfaces live on).
    #[serde(default)]
    pub taps: BTreeMap<String, usize>,
    /// `af-packet` ports by name: their packet sockets (bound, options set; version 2).
    #[serde(default)]
    pub af_packet: BTreeMap<String, usize>,
    /// `vxlan` and `geneve` ports by name: their underlay UDP sockets (ports sharing one
    /// `local_ip:dst_port` each carry a duplicate of it; version 2).
    #[serde(default)]
    pub tunnels: BTreeMap<String, usize>,
    /// `af-xdp` ports by name: their program, link, XSKMAP, sockets and UMEM memfds
    /// (version 3; a build without the field reopens them once this process has exited).
    #[serde(default)]
    pub af_xdp: BTreeMap<String, XskOffer>,
    /// Each bridge's OpenFlow groups, one OpenFlow 1.5 GROUP_MOD ADD each, hex
    /// (`ofswitch::group_handover`, `format::to_hex`; version 2).
    #[serde(default)]
    pub groups: BTreeMap<String, Vec<String>>,
}

/// An `af-xdp` port's fds (indices into the offer's fds) and the mode it runs in.
#[derive(Debug, Serialize, Deserialize)]
pub struct XskOffer {
    /// `xsk::ModeInUse::name`.
    pub mode: String,
    /// The bpf link attaching the program.
    pub link: usize,
    /// The program.
    pub prog: usize,
    /// The XSKMAP.
    pub map: usize,
    /// Per queue: `(socket, UMEM memfd)`.
    pub queues: Vec<(usize, usize)>,
    /// With `xdp-steering` (version 4): per queue, its steering sockets (one per NUMA node).
    #[serde(default)]
    pub steered: Vec<Vec<usize>>,
    /// With `xdp-steering` (version 4): the MAC → node map and the steering counters.
    #[serde(default)]
    pub steer: Option<(usize, usize)>,
    /// With `xdp-mark` (version 4): the 5-tuple → mark map.
    #[serde(default)]
    pub marks: Option<usize>,
}

/// One `af-xdp` queue's frame books at the switch-over: the frames the old process holds
/// (frame numbers); the kernel holds every other frame of each half.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct XskBooks {
    /// Rx half (fill and rx rings).
    pub rx_free: Vec<u32>,
    /// Tx half (tx and completion rings).
    pub tx_free: Vec<u32>,
}

/// A learned MAC: VLAN, address, port name, age (as the pipeline reads and restores them).
pub type MacLine = ofproto::mac::NamedMacEntry;

/// The messages after the offer.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "msg", rename_all = "kebab-case")]
pub enum Reply {
    /// New: everything is mapped and built; ready to take the rings.
    Ready,
    /// New: cannot take this state; the old process keeps serving.
    Refused {
        /// One line for the operator.
        why: String,
    },
    /// Old: its rings are stopped; here is where each one stands.
    Final {
        /// `(ring, base)` per vhost-user port.
        bases: BTreeMap<String, Vec<(usize, u16)>>,
        /// Learned MACs per bridge (version 2).
        #[serde(default)]
        macs: BTreeMap<String, Vec<MacLine>>,
        /// A connection-table snapshot (`conntrack::snapshot`) follows as one raw message
        /// (version 2).
        #[serde(default)]
        conntrack: bool,
        /// Per `af-xdp` port handed over, each queue's frame books (version 3).
        #[serde(default)]
        xsk: BTreeMap<String, Vec<XskBooks>>,
        /// Every port's counters at the switch-over, by name (version 3): the new process's
        /// go on from them.
        #[serde(default)]
        counters: BTreeMap<String, ports::PortStats>,
        /// When the old process's PMDs had stopped (CLOCK_MONOTONIC ns, version 4; 0: not
        /// sent).
        #[serde(default)]
        stopped_ns: u64,
    },
    /// New: the rings run here now.
    Started {
        /// The new process.
        pid: u32,
        /// When its PMDs were let at the rings (CLOCK_MONOTONIC ns; 0: not sent).
        #[serde(default)]
        resumed_ns: u64,
    },
}

/// CLOCK_MONOTONIC in ns: one clock for both processes, so the switch-over's instants taken in
/// the old and the new one compare.
pub fn mono_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Sends one message with `fds`.
pub fn send(s: &UnixStream, body: &[u8], fds: &[OwnedFd]) -> io::Result<()> {
    let len = u32::try_from(body.len()).map_err(|_| io::Error::other("message too long"))?;
    let mut hdr = [0u8; 8];
    hdr[..4].copy_from_slice(&len.to_le_bytes());
    hdr[4..].copy_from_slice(&(fds.len() as u32).to_le_bytes());
    let mut chunks = fds.chunks(FDS_PER_MSG);
    let first = chunks.next().unwrap_or(&[]);
    send_with_fds(s, &hdr, first)?;
    for c in chunks {
        send_with_fds(s, &[0u8], c)?;
    }
    (&*s).write_all(body)
}

fn send_with_fds(s: &UnixStream, bytes: &[u8], fds: &[OwnedFd]) -> io::Result<()> {
    let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_MSG))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !borrowed.is_empty() && !cmsg.push(SendAncillaryMessage::ScmRights(&borrowed)) {
        return Err(io::Error::other("too many fds"));
    }
    let n = sendmsg(s, &[IoSlice::new(bytes)], &mut cmsg, SendFlags::NOSIGNAL)?;
    if n < bytes.len() {
        (&*s).write_all(&bytes[n..])?;
    }
    Ok(())
}

/// Receives `buf.len()` bytes, collecting any fds that come with them.
fn recv_with_fds(s: &UnixStream, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_MSG))];
        let mut cmsg = RecvAncillaryBuffer::new(&mut space);
        let r = {
            let mut iov = [IoSliceMut::new(&mut buf[got..])];
            recvmsg(s, &mut iov, &mut cmsg, RecvFlags::CMSG_CLOEXEC)?
        };
        for m in cmsg.drain() {
            if let RecvAncillaryMessage::ScmRights(it) = m {
                fds.extend(it);
            }
        }
        if r.bytes == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += r.bytes;
    }
    Ok(())
}

/// Receives one message within `deadline` (per read); returns its body and fds.
pub fn recv(s: &UnixStream, deadline: Duration) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    s.set_read_timeout(Some(deadline))?;
    let mut fds = Vec::new();
    let mut hdr = [0u8; 8];
    recv_with_fds(s, &mut hdr, &mut fds)?;
    let len = u32::from_le_bytes(hdr[..4].try_into().expect("4 bytes"));
    let nfds = u32::from_le_bytes(hdr[4..].try_into().expect("4 bytes")) as usize;
    if len > MAX_LEN {
        return Err(io::Error::other(format!("handover message of {len} bytes")));
    }
    while fds.len() < nfds {
        let mut one = [0u8; 1];
        recv_with_fds(s, &mut one, &mut fds)?;
    }
    if fds.len() != nfds {
        return Err(io::Error::other(format!(
            "{} fds came, the message announced {nfds}",
            fds.len()
        )));
    }
    let mut body = vec![0u8; len as usize];
    (&*s).read_exact(&mut body)?;
    Ok((body, fds))
}

/// Sends a [`Reply`].
pub fn send_reply(s: &UnixStream, r: &Reply) -> io::Result<()> {
    let body = serde_json::to_vec(r).map_err(io::Error::other)?;
    send(s, &body, &[])
}

/// Receives a [`Reply`].
pub fn recv_reply(s: &UnixStream, deadline: Duration) -> io::Result<Reply> {
    let (body, _) = recv(s, deadline)?;
    serde_json::from_slice(&body).map_err(|e| io::Error::other(format!("bad reply: {e}")))
}

/// Parses an offer: the version first (an unknown one is refused without reading the rest),
/// then the whole of it.
pub fn parse_offer(body: &[u8]) -> Result<Offer, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("unreadable handover state: {e}"))?;
    let version = v.get("version").and_then(serde_json::Value::as_u64);
    match version {
        Some(n) if ACCEPTED_VERSIONS.contains(&(n as u32)) && n <= u64::from(u32::MAX) => {}
        Some(n) => {
            return Err(format!(
                "handover state version {n} is not one this vireod reads ({ACCEPTED_VERSIONS:?})"
            ))
        }
        None => return Err("handover state without a version".into()),
    }
    serde_json::from_value(v).map_err(|e| format!("unreadable handover state: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(version: u32) -> Vec<u8> {
        serde_json::to_vec(&Offer {
            version,
            pid: 1,
            control: 0,
            locks: vec![1, 2],
            mgmt: BTreeMap::new(),
            vhost: BTreeMap::new(),
            flows: BTreeMap::new(),
            meters: BTreeMap::new(),
            taps: BTreeMap::new(),
            af_packet: BTreeMap::new(),
            tunnels: BTreeMap::new(),
            af_xdp: BTreeMap::new(),
            groups: BTreeMap::new(),
        })
        .unwrap()
    }

    #[test]
    fn versions_known_are_read_and_others_refused() {
        assert_eq!(
            parse_offer(&offer(STATE_VERSION)).unwrap().locks,
            vec![1, 2]
        );
        for v in [0, STATE_VERSION + 1, 99] {
            let e = parse_offer(&offer(v)).unwrap_err();
            assert!(e.contains(&format!("version {v} ")), "{e}");
        }
        assert!(parse_offer(b"{}")
            .unwrap_err()
            .contains("without a version"));
        assert!(parse_offer(b"nonsense").is_err());
    }

    #[test]
    fn messages_carry_their_fds() {
        let (a, b) = UnixStream::pair().unwrap();
        // More fds than one sendmsg carries.
        let fds: Vec<OwnedFd> = (0..250)
            .map(|_| std::fs::File::open("/dev/null").unwrap().into())
            .collect();
        let body = b"{\"hello\":1}".to_vec();
        let t = std::thread::spawn(move || send(&a, &body, &fds).unwrap());
        let (got, fds) = recv(&b, Duration::from_secs(5)).unwrap();
        t.join().unwrap();
        assert_eq!(got, b"{\"hello\":1}");
        assert_eq!(fds.len(), 250);
        let r = Reply::Final {
            bases: [("vm1".to_string(), vec![(0, 7), (1, 0x8003)])].into(),
            macs: [(
                "br0".to_string(),
                vec![(
                    5,
                    [2, 0, 0, 0, 0, 1],
                    "vm1".into(),
                    Duration::from_millis(1500),
                )],
            )]
            .into(),
            conntrack: true,
            xsk: [(
                "x".to_string(),
                vec![XskBooks {
                    rx_free: vec![1, 2],
                    tx_free: vec![4096],
                }],
            )]
            .into(),
            counters: [(
                "vm1".to_string(),
                ports::PortStats {
                    rx_packets: 5,
                    drops: vec![(ports::DropReason::QueueFull, 2)],
                    ..Default::default()
                },
            )]
            .into(),
            stopped_ns: 12_345,
        };
        let (a, b) = UnixStream::pair().unwrap();
        send_reply(&a, &r).unwrap();
        assert_eq!(recv_reply(&b, Duration::from_secs(1)).unwrap(), r);
    }

    #[test]
    fn af_xdp_ports_ride_on_version_3_and_an_older_offer_has_none() {
        let mut v: serde_json::Value = serde_json::from_slice(&offer(3)).unwrap();
        v["af_xdp"] = serde_json::json!({"x": {"mode": "native", "link": 3, "prog": 4, "map": 5,
            "queues": [[6, 7]]}});
        let o = parse_offer(&serde_json::to_vec(&v).unwrap()).unwrap();
        assert_eq!(o.af_xdp["x"].queues, vec![(6, 7)]);
        assert_eq!(o.af_xdp["x"].mode, "native");
        // Version 3 has no steering or marks: none read.
        assert!(o.af_xdp["x"].steered.is_empty());
        assert_eq!((o.af_xdp["x"].steer, o.af_xdp["x"].marks), (None, None));
        let mut v: serde_json::Value = serde_json::from_slice(&offer(2)).unwrap();
        v.as_object_mut().unwrap().remove("af_xdp");
        assert!(parse_offer(&serde_json::to_vec(&v).unwrap())
            .unwrap()
            .af_xdp
            .is_empty());
    }

    #[test]
    fn steering_and_marks_ride_on_version_4() {
        let mut v: serde_json::Value = serde_json::from_slice(&offer(4)).unwrap();
        v["af_xdp"] = serde_json::json!({"x": {"mode": "generic", "link": 3, "prog": 4,
            "map": 5, "queues": [[6, 7], [8, 9]], "steered": [[10], [11]], "steer": [12, 13],
            "marks": 14}});
        let o = parse_offer(&serde_json::to_vec(&v).unwrap()).unwrap();
        let x = &o.af_xdp["x"];
        assert_eq!(x.steered, vec![vec![10], vec![11]]);
        assert_eq!((x.steer, x.marks), (Some((12, 13)), Some(14)));
    }

    #[test]
    fn a_version_1_final_reads_with_no_macs_and_no_conntrack() {
        let v1 = br#"{"msg":"final","bases":{"vm1":[[0,7]]}}"#;
        let r: Reply = serde_json::from_slice(v1).unwrap();
        assert_eq!(
            r,
            Reply::Final {
                bases: [("vm1".to_string(), vec![(0, 7)])].into(),
                macs: BTreeMap::new(),
                conntrack: false,
                xsk: BTreeMap::new(),
                counters: BTreeMap::new(),
                stopped_ns: 0,
            }
        );
    }
}
