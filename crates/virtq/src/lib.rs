//! Device side of virtio split virtqueues for virtio-net (virtio 1.1 §2.6), batched.
//!
//! Owns: ring layout and index arithmetic ([`ring`]), the device-side queue ([`Queue`]:
//! dequeue guest tx chains into packets, enqueue packets into guest rx buffers with mergeable
//! rx, indirect and chained descriptors, event-idx), and a mock driver (`mock`, feature
//! `mock`) for tests in this and other crates.
//!
//! Threads: a `Queue` is built by a control thread and driven by one PMD at a time; see
//! [`queue`]. No unsafe code: guest memory is reached only through `guestmem`.
#![deny(unsafe_code)]

#[cfg(any(test, feature = "mock"))]
pub mod mock;
pub mod queue;
pub mod ring;

pub use queue::{Broken, Burst, Queue, QueueError, BURST_BUDGET, MAX_CHAIN, MAX_SEGS};
pub use ring::{NetFeatures, RingAddrs};

#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod tests;
