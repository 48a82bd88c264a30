//! Device side of virtio virtqueues for virtio-net, batched: split rings (virtio 1.1 §2.6)
//! and packed rings (§2.8).
//!
//! Owns: split-ring layout and index arithmetic ([`ring`]), the device-side split queue
//! ([`Queue`]: dequeue guest tx chains into packets, enqueue packets into guest rx buffers with
//! mergeable rx, indirect and chained descriptors, event-idx), the packed queue
//! ([`PackedQueue`], same API and guarantees), [`VirtQueue`] (either, what vhost runs), and a
//! mock driver (`mock`, feature `mock`; split and packed) for tests in this and other crates.
//!
//! Threads: a `Queue` is built by a control thread and driven by one PMD at a time; see
//! [`queue`]. No unsafe code: guest memory is reached only through `guestmem`.
#![deny(unsafe_code)]

pub mod copy;
#[cfg(any(test, feature = "mock"))]
pub mod mock;
#[cfg(any(test, feature = "mock"))]
pub mod mock_packed;
pub mod packed;
pub mod queue;
pub mod ring;
mod vq;

pub use packed::PackedQueue;
pub use queue::{Broken, Burst, Queue, QueueError, BURST_BUDGET, MAX_CHAIN, MAX_SEGS};
pub use ring::{NetFeatures, RingAddrs};
pub use vq::VirtQueue;

#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod offload_tests;
#[cfg(test)]
mod one_copy_tests;
#[cfg(test)]
mod packed_tests;
#[cfg(test)]
mod tests;
