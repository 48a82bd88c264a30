//! The housekeeping thread: every 50 ms it revalidates the datapath if the pipeline changed by
//! itself (MAC learning, aging) and hands queued packet-ins to their bridges' controllers;
//! every second it credits the traffic the datapath's megaflows carried to the OpenFlow rules
//! they came from (counters, idle timeouts), then expires flows (idle/hard timeouts) and
//! reports them as FLOW_REMOVED; every 500 ms it lets each port do its upkeep
//! (`Port::maintain`: kernel ports notice a deleted interface and re-open it when it is back)
//! and sends PORT_STATUS (modify) for every port whose link went up or down since the last
//! look (which also updates fast-failover groups' liveness); at the same pace it brings the
//! XDP steering maps up to date (`steering.rs`: learned MACs, ports and operator entries) and
//! the XDP flow-mark maps (`marks.rs`: the hottest megaflows of each `xdp-mark=on` port), and
//! native tunneling's connected routes and neighbour aging (`underlay.rs`).
//!
//! Threads: its own; shares [`Shared`] with the control thread, never takes the `Switch` mutex.
use super::runtime::Shared;
use ofswitch::PortReason;
use ports::Link;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(50);
const EXPIRE_EVERY: Duration = Duration::from_secs(1);
const MAINTAIN_EVERY: Duration = Duration::from_millis(500);

/// Stops the thread when asked.
pub struct Handle {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Handle {
    /// Stops the thread and waits for it.
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

/// Starts the thread.
pub fn start(shared: Arc<Shared>) -> Result<Handle, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let thread = std::thread::Builder::new()
        .name("housekeeping".into())
        .spawn(move || run(&shared, &stop2))
        .map_err(|e| format!("cannot start the housekeeping thread: {e}"))?;
    Ok(Handle { stop, thread })
}

fn run(shared: &Shared, stop: &AtomicBool) {
    let mut last_expire = Instant::now();
    let mut last_maintain = Instant::now();
    let mut links = BTreeMap::new();
    while !stop.load(Ordering::SeqCst) {
        std::thread::park_timeout(TICK);
        shared.revalidate_if_changed();
        deliver_packet_ins(shared);
        if last_maintain.elapsed() >= MAINTAIN_EVERY {
            last_maintain = Instant::now();
            maintain_ports(shared);
            shared.steering.sync(shared);
            shared.marks.sync(shared);
            report_link_changes(shared, &mut links);
            super::underlay::upkeep(shared);
        }
        if last_expire.elapsed() >= EXPIRE_EVERY {
            last_expire = Instant::now();
            for (key, _mask, packets, bytes) in shared.dp.take_flow_stats() {
                shared.pipeline.credit(&key, packets, bytes, last_expire);
            }
            let removed = shared.pipeline.expire(last_expire);
            if !removed.is_empty() {
                // The pipeline recorded which rules went: only what they may affect.
                shared.revalidate_if_changed();
                shared.flows_removed(&removed);
            }
        }
    }
}

/// Port upkeep (kernel ports re-open vanished interfaces), outside the ports lock.
fn maintain_ports(shared: &Shared) {
    let ports: Vec<_> = shared
        .ports
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .map(|p| p.port.clone())
        .collect();
    for p in ports {
        p.maintain();
    }
}

/// PORT_STATUS (modify) for each port whose link state differs from `links` (the state at
/// the previous call; a port seen for the first time is only recorded: its PORT_STATUS (add)
/// was sent when it was added).
fn report_link_changes(shared: &Shared, links: &mut BTreeMap<String, Link>) {
    let bridges: Vec<(String, Arc<ofswitch::BridgeOf>)> = shared
        .bridges
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(n, b)| (n.clone(), b.clone()))
        .collect();
    let mut seen = BTreeMap::new();
    for (br, of) in bridges {
        let Ok(ofports) = shared.pipeline.ports(&br) else {
            continue;
        };
        for pc in ofports {
            let port = {
                let ports = shared.ports.lock().unwrap_or_else(|e| e.into_inner());
                match ports.get(&pc.name) {
                    Some(p) => (p.no, p.port.clone()),
                    None => continue,
                }
            };
            let link = port.1.link();
            if links.get(&pc.name).is_some_and(|l| *l != link) {
                tracing::info!(port = %pc.name, ?link, "link changed");
                let report = super::hooks::report(pc.ofport, &pc.name, port.0, port.1.as_ref());
                of.port_status(PortReason::Modify, &report);
            }
            seen.insert(pc.name.clone(), link);
        }
    }
    *links = seen;
}

fn deliver_packet_ins(shared: &Shared) {
    let pins = shared.pipeline.take_packet_ins(1024);
    if pins.is_empty() {
        return;
    }
    let bridges = shared.bridges.lock().unwrap_or_else(|e| e.into_inner());
    let mut by_bridge: std::collections::BTreeMap<String, Vec<_>> = Default::default();
    for p in pins {
        by_bridge.entry(p.bridge.clone()).or_default().push(p);
    }
    for (br, pins) in by_bridge {
        if let Some(of) = bridges.get(&br) {
            of.deliver_packet_ins(pins);
        }
    }
}
