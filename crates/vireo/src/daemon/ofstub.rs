//! TEMPORARY stand-in for the `ofswitch` crate while it is written (same API); deleted when
//! the crate lands. Controllers are refused with a clear error.
#![allow(dead_code, missing_docs)]
use std::path::Path;
use std::sync::Arc;

pub trait DatapathHooks: Send + Sync + 'static {
    fn packet_out(&self, in_port: Option<u32>, actions: &[dp::Action], frame: &[u8]) -> Result<(), String>;
    fn port_stats(&self, bridge: &str) -> Vec<PortReport>;
    fn revalidate(&self);
}

#[derive(Default, Clone, Debug)]
pub struct PortReport {
    pub ofport: u32,
    pub name: String,
    pub dp_port: u32,
    pub link_up: bool,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
}

pub enum FailMode {
    Standalone,
    Secure,
}

pub struct BridgeOf;

impl BridgeOf {
    pub fn new(_b: &str, _p: Arc<ofproto::Pipeline>, _h: Arc<dyn DatapathHooks>, _m: &Path) -> Result<BridgeOf, String> {
        Ok(BridgeOf)
    }
    pub fn set_controllers(&self, t: &[String]) -> Result<(), String> {
        if t.is_empty() { Ok(()) } else { Err("OpenFlow controllers are not available in this build yet".into()) }
    }
    pub fn set_fail_mode(&self, _m: FailMode) {}
    pub fn flow_removed(&self, _r: &[ofproto::RemovedFlow]) {}
    pub fn deliver_packet_ins(&self, _p: Vec<ofproto::PacketIn>) {}
    pub fn controllers(&self) -> Vec<String> {
        Vec::new()
    }
    pub fn shutdown(&self) {}
}
