//! The kernel interface of Vireo's kernel-facing ports (`af-packet`, `tap`, `internal`,
//! tunnels), kept apart so that `unsafe` has few homes: `guestmem` (guest memory), `xsk`
//! (AF_XDP) and this crate. [`sys`] wraps the system calls the `nix` and `rustix` crates do
//! not (packet-socket options, `recvmmsg`/`sendmmsg` into our own buffers, tun and interface
//! ioctls); [`huge`] the 2 MiB-page tables of the PMD's caches; [`udp`] the tunnel ports' batched UDP datagram calls (`recvmmsg`/`sendmmsg` with
//! addresses); [`ring`] owns the `TPACKET_V2` receive ring an `af-packet` socket shares with the
//! kernel. Every other crate is `#![deny(unsafe_code)]` and sees only safe functions; each
//! `unsafe` block here carries its `SAFETY:` argument.
//!
//! Threads: see each module (PMDs call the batch calls and the ring reader; control and
//! housekeeping threads the rest).
#![deny(unsafe_code)]

pub mod huge;
pub mod ring;
pub mod sys;
pub mod udp;
