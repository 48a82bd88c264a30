//! Zero-copy typed views over `&[u8]` packet bytes and flow-key extraction.
//!
//! Owns: the [`FlowKey`] layout every cache and the OpenFlow pipeline agree on, and (in
//! submodules) header views in the smoltcp style (`new_checked`, a `field` module of byte ranges,
//! accessors that cannot panic after the length check).
//!
//! Threads: pure functions and plain data; used on PMD threads (extraction) and the control
//! thread (rule parsing), never shared mutably.
#![deny(unsafe_code)]

pub mod flow;

pub use flow::{Field, FlowKey, KEY_WORDS};
