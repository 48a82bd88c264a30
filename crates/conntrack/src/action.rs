//! The types a `ct` action and its verdict are made of: [`CtAction`], [`Nat`], [`CtResult`],
//! [`Outcome`], the timeout policy [`Timeouts`] and the invalid-packet reasons [`Invalid`].
//!
//! Threads: plain data, built by the control thread (from a flow's actions) and read by PMDs.

use crate::nat::NatSpec;
use crate::parse::Tuple;

/// Timeouts, seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP SYN_SENT / SYN_RECV.
    pub tcp_syn: u32,
    /// TCP ESTABLISHED.
    pub tcp_est: u32,
    /// TCP FIN_WAIT.
    pub tcp_fin: u32,
    /// TCP TIME_WAIT.
    pub tcp_time_wait: u32,
    /// TCP after a RST.
    pub tcp_closed: u32,
    /// UDP, one direction seen.
    pub udp_first: u32,
    /// UDP, both directions seen.
    pub udp_multiple: u32,
    /// ICMP echo, request only.
    pub icmp_first: u32,
    /// ICMP echo, replied.
    pub icmp_reply: u32,
    /// Other protocols, one direction.
    pub other_first: u32,
    /// Other protocols, both directions.
    pub other_multiple: u32,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp_syn: 30,
            tcp_est: 24 * 3600,
            tcp_fin: 15 * 60,
            tcp_time_wait: 45,
            tcp_closed: 30,
            udp_first: 60,
            udp_multiple: 30,
            icmp_first: 60,
            icmp_reply: 30,
            other_first: 60,
            other_multiple: 30,
        }
    }
}

/// NAT requested by a `ct` action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Nat {
    /// No NAT.
    #[default]
    Off,
    /// `nat` without arguments: apply the connection's existing translation.
    Existing,
    /// `nat(src=...)` / `nat(dst=...)`: set up translation when committing, apply it after.
    Set(NatSpec),
}

/// One `ct` action's parameters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CtAction {
    /// Zone.
    pub zone: u16,
    /// Create the connection if new.
    pub commit: bool,
    /// A committed connection seen in the reply direction is deleted and started over.
    pub force: bool,
    /// NAT.
    pub nat: Nat,
    /// Set the mark (value, mask) on a committed connection.
    pub mark: Option<(u32, u32)>,
    /// Set the label (value, mask) on a committed connection.
    pub label: Option<(u128, u128)>,
}

/// What conntrack says about one packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtResult {
    /// `ct_state` bits ([`crate::state`]).
    pub state: u32,
    /// Zone.
    pub zone: u16,
    /// Connection mark.
    pub mark: u32,
    /// Connection label.
    pub label: u128,
    /// The connection's original-direction tuple (`ct_nw_src` and friends), if any.
    pub orig: Option<Tuple>,
}

/// What to do with the packet given to [`crate::Conntrack::execute`].
#[derive(Debug)]
pub enum Outcome {
    /// Continue with this verdict (the frame may have been rewritten by NAT).
    Done(CtResult),
    /// A fragment: copied and held; drop this buffer.
    Held,
    /// A fragment completed (or poisoned) its datagram: forward `held` (earlier fragments, in
    /// arrival order) and this frame, all with `result`.
    Released {
        /// The verdict.
        result: CtResult,
        /// Earlier fragments of the datagram.
        held: Vec<Vec<u8>>,
    },
}

/// Why a packet was marked invalid (index into [`crate::Stats::invalid`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Invalid {
    /// Not IPv4/IPv6.
    NotIp = 0,
    /// A header truncated or inconsistent with its length fields.
    Truncated,
    /// TCP flags impossible in this state, or a non-SYN starting a connection.
    TcpFlags,
    /// TCP segment outside the sequence window.
    TcpWindow,
    /// ICMP error quoting no known connection.
    IcmpUnknown,
    /// ICMP type not tracked, or an echo reply without request.
    IcmpOther,
    /// Overlapping fragment.
    FragOverlap,
    /// Tiny first fragment or bad fragment length.
    FragTiny,
    /// Fragment refused: reassembly memory full.
    FragFull,
    /// Fragmented datagram over 65,535 bytes or too many fragments.
    FragTooBig,
    /// Datagram timed out before all fragments arrived.
    FragTimeout,
    /// A fragmented ICMP error that needs NAT (not supported).
    FragNat,
    /// An IPv4 header checksum that does not verify.
    L3Checksum,
}

/// Number of [`Invalid`] reasons.
pub const INVALID_REASONS: usize = 13;

/// Names of the [`Invalid`] reasons, by index.
pub const INVALID_NAMES: [&str; INVALID_REASONS] = [
    "not_ip",
    "truncated",
    "tcp_flags",
    "tcp_window",
    "icmp_unknown",
    "icmp_other",
    "frag_overlap",
    "frag_tiny",
    "frag_full",
    "frag_too_big",
    "frag_timeout",
    "frag_nat",
    "l3_checksum",
];
