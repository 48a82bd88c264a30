//! Vireo's daemon (`vireod`) and CLI (`vireoctl`) as one package with two binaries, so that
//! integration tests drive both real programs. The CLI ([`ctl`]) depends only on the control
//! protocol ([`proto`]); the daemon ([`daemon`]) owns the config store ([`store`]) and wires
//! ports, the datapath and the OpenFlow pipeline together.
#![deny(unsafe_code)]

pub mod ctl;
pub mod daemon;
pub mod proto;
pub mod store;
