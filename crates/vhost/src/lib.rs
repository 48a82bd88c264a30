//! vhost-user backend (device side): Vireo serves virtio-net devices to VMs (QEMU) and
//! containers (DPDK virtio-user) over a unix socket.
//!
//! Owns: the wire format ([`msg`]), fd passing ([`sock`]), the protocol state machine with its
//! declarative request table ([`backend`]), the PMD-facing device ([`shared`]), the socket
//! endpoint and its control thread in server or client mode ([`endpoint`]), socket files
//! created with a mode and group and removed only if ours ([`sockfile`]), the handover of a
//! live connection to another process for `vireoctl upgrade` (`backend::handover`,
//! [`Endpoint::park`], [`Endpoint::adopt`]), and a test frontend (`frontend`, feature `mock`).
//!
//! Threads: one control thread per endpoint; PMD threads call [`Device::rx_burst`] and
//! [`Device::tx_burst`]. See each module for what it owns.
#![deny(unsafe_code)]

#[cfg(any(test, feature = "mock"))]
pub mod attack;
pub mod backend;
pub mod endpoint;
#[cfg(any(test, feature = "mock"))]
pub mod frontend;
pub mod msg;
pub mod shared;
pub mod sock;
pub mod sockfile;

pub use endpoint::{Endpoint, Handover, Mode};
pub use shared::{broken_count, ConnState, Device, LostRegion, RingState};

#[cfg(test)]
mod tests;
