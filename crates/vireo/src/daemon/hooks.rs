//! What a bridge's OpenFlow endpoint needs from the rest of the switch: executing PACKET_OUT
//! actions on the datapath, port counters for PORT_STATS / PORT_DESC, revalidation after
//! flow changes, and taking a port's interface down for PORT_MOD.
//!
//! Threads: called on OpenFlow connection threads. Holds only a weak reference to the runtime,
//! so a bridge endpoint never keeps a stopped switch alive.
use super::runtime::Shared;
use ofswitch::{DatapathHooks, PortReport};
use ports::{Link, Port};
use std::sync::{Arc, Weak};

/// The daemon's side of [`DatapathHooks`].
pub struct Hooks {
    shared: Weak<Shared>,
}

impl Hooks {
    /// Hooks into `shared`.
    pub fn new(shared: Weak<Shared>) -> Hooks {
        Hooks { shared }
    }

    fn shared(&self) -> Result<Arc<Shared>, String> {
        self.shared
            .upgrade()
            .ok_or_else(|| "the switch is stopping".to_string())
    }
}

impl DatapathHooks for Hooks {
    fn packet_out(
        &self,
        in_port: Option<u32>,
        actions: &[dp::Action],
        frame: &[u8],
    ) -> Result<(), String> {
        let shared = self.shared()?;
        shared
            .dp
            .execute(in_port, actions, frame)
            .map_err(|e| e.to_string())
    }

    fn port_stats(&self, bridge: &str) -> Vec<PortReport> {
        let Ok(shared) = self.shared() else {
            return Vec::new();
        };
        let Ok(ofports) = shared.pipeline.ports(bridge) else {
            return Vec::new();
        };
        let ports = shared.ports.lock().unwrap_or_else(|e| e.into_inner());
        ofports
            .iter()
            .filter_map(|pc| {
                let p = ports.get(&pc.name)?;
                Some(report(pc.ofport, &pc.name, p.no, p.port.as_ref()))
            })
            .collect()
    }

    fn revalidate(&self) {
        if let Ok(shared) = self.shared() {
            shared.revalidate();
        }
    }

    fn revalidate_changes(&self) {
        if let Ok(shared) = self.shared() {
            shared.revalidate_if_changed();
        }
    }

    fn set_port_admin(&self, bridge: &str, ofport: u32, up: bool) -> Result<(), String> {
        let shared = self.shared()?;
        let ofports = shared.pipeline.ports(bridge).map_err(|e| e.to_string())?;
        let Some(pc) = ofports.iter().find(|p| p.ofport == ofport) else {
            return Err(format!("no OpenFlow port {ofport} on {bridge}"));
        };
        let port = {
            let ports = shared.ports.lock().unwrap_or_else(|e| e.into_inner());
            match ports.get(&pc.name) {
                Some(p) => p.port.clone(),
                None => return Err(format!("port {} is not in the datapath", pc.name)),
            }
        };
        port.set_admin_up(up).map_err(|e| e.0)?;
        tracing::info!(port = %pc.name, up, "PORT_MOD: interface administratively {}",
            if up { "up" } else { "down" });
        Ok(())
    }
}

/// A port's OpenFlow description and counters.
pub fn report(ofport: u32, name: &str, dp_port: u32, port: &dyn Port) -> PortReport {
    let s = port.stats();
    PortReport {
        ofport,
        name: name.to_string(),
        dp_port,
        link_up: port.link() == Link::Up,
        rx_packets: s.rx_packets,
        tx_packets: s.tx_packets,
        rx_bytes: s.rx_bytes,
        tx_bytes: s.tx_bytes,
        rx_dropped: 0,
        tx_dropped: s.total_drops(),
        rx_errors: s.rx_errors,
        tx_errors: s.tx_errors,
        ..PortReport::default()
    }
}
