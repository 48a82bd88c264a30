//! OpenFlow 1.0, 1.3, 1.4 and 1.5 for Vireo (see [`version`]; the [`msg::Message`] model
//! follows 1.3 and each version is translated to and from it): a typed, panic-free wire codec ([`msg`], [`oxm`], [`action`]) and
//! connections ([`conn`]): passive listeners (`unix:PATH`, `ptcp:PORT[:IP]`), active
//! connectors (`tcp:IP:PORT`, `unix:PATH`) with backoff and echo keepalive, and the
//! [`conn::SwitchHandler`] trait the daemon implements.
//!
//! Decoding never panics: malformed or unsupported input yields an [`OfError`] carrying the
//! `OFPT_ERROR` type and code the specification names, which the connection layer sends back
//! with the offending message's first 64 bytes.

//! # Daemon use
//!
//! ```no_run
//! use std::sync::Arc;
//! use openflow::conn::{ConnConfig, ConnId, OfSwitch, SwitchHandler};
//! use openflow::msg::*;
//! use openflow::{errors, OfError};
//!
//! struct Bridge; // the daemon's per-bridge state (ofproto tables, ports, ...)
//!
//! impl SwitchHandler for Bridge {
//!     fn features(&self) -> FeaturesReply {
//!         FeaturesReply { datapath_id: 1, n_tables: 254, capabilities: 0x4f, ..Default::default() }
//!     }
//!     fn handle(&self, _c: ConnId, _xid: u32, msg: Message) -> Result<Vec<Message>, OfError> {
//!         match msg {
//!             Message::FlowMod(_fm) => Ok(vec![]), // apply to the pipeline
//!             Message::MultipartRequest(_r) => Ok(vec![/* MultipartReply; split for you */]),
//!             _ => Err(errors::BAD_REQUEST_BAD_TYPE),
//!         }
//!     }
//! }
//!
//! let of = OfSwitch::new(Arc::new(Bridge), ConnConfig::default());
//! let _mgmt = of.listen("unix:/run/vireo/br0.mgmt")?; // keep the handle: drop = stop
//! let _ctl = of.connect("tcp:192.0.2.1:6653")?; // reconnects with backoff until dropped
//! // From the upcall path: async messages to every controller (never blocks).
//! of.broadcast(&Message::PortStatus(PortStatus { reason: 0, desc: Port::default() }));
//! # Ok::<(), std::io::Error>(())
//! ```

pub mod action;
pub mod buf;
pub mod conn;
pub mod error;
pub mod msg;
pub mod nx;
pub mod oxm;
pub mod version;

pub use action::{Action, Instruction};
pub use error::{errors, OfError};
pub use msg::*;
pub use oxm::{Match, OxmField};
pub use version::Protocols;
