//! OpenFlow 1.3 for Vireo: a typed, panic-free wire codec ([`msg`], [`oxm`], [`action`]) and
//! connections ([`conn`]): passive listeners (`unix:PATH`, `ptcp:PORT[:IP]`), active
//! connectors (`tcp:IP:PORT`, `unix:PATH`) with backoff and echo keepalive, and the
//! [`conn::SwitchHandler`] trait the daemon implements.
//!
//! Decoding never panics: malformed or unsupported input yields an [`OfError`] carrying the
//! `OFPT_ERROR` type and code the specification names, which the connection layer sends back
//! with the offending message's first 64 bytes.

pub mod action;
pub mod buf;
pub mod conn;
pub mod error;
pub mod msg;
pub mod oxm;

pub use action::{Action, Instruction};
pub use error::{errors, OfError};
pub use msg::*;
pub use oxm::{Match, OxmField};
