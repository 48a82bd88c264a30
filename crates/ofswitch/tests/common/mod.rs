//! Test harness: a real `ofproto::Pipeline` with bridge br0 and ports p1..p4 (OpenFlow 1..4,
//! datapath 11..14), a recording `DatapathHooks`, and a `BridgeOf` listening on a unix socket
//! in a temporary directory. Helpers build frames and flow keys.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ofproto::{Pipeline, PortSpec};
use ofswitch::{BridgeOf, BridgeOfConfig, DatapathHooks, PortReport};

pub const MAC_A: [u8; 6] = [0x00, 0x00, 0x00, 0x00, 0x00, 0x0a];
pub const MAC_B: [u8; 6] = [0x00, 0x00, 0x00, 0x00, 0x00, 0x0b];
pub const MAC_C: [u8; 6] = [0x00, 0x00, 0x00, 0x00, 0x00, 0x0c];
pub const BCAST: [u8; 6] = [0xff; 6];

/// A recorded PACKET_OUT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    pub in_port: Option<u32>,
    pub actions: Vec<dpif::Action>,
    pub frame: Vec<u8>,
}

#[derive(Default)]
pub struct Hooks {
    pub sent: Mutex<Vec<Sent>>,
    pub revalidations: AtomicUsize,
    /// OpenFlow ports reported with link down.
    pub down: Mutex<Vec<u32>>,
}

impl DatapathHooks for Hooks {
    fn packet_out(
        &self,
        in_port: Option<u32>,
        actions: &[dpif::Action],
        frame: &[u8],
    ) -> Result<(), String> {
        self.sent.lock().unwrap().push(Sent {
            in_port,
            actions: actions.to_vec(),
            frame: frame.to_vec(),
        });
        Ok(())
    }

    fn port_stats(&self, _bridge: &str) -> Vec<PortReport> {
        let down = self.down.lock().unwrap().clone();
        (1..=4)
            .map(|n| PortReport {
                link_up: !down.contains(&n),
                rx_packets: 100 * u64::from(n),
                tx_packets: 200 * u64::from(n),
                rx_bytes: 6400 * u64::from(n),
                tx_bytes: 12800 * u64::from(n),
                rx_dropped: u64::from(n),
                hw_addr: Some([0x02, 0, 0, 0, 0, n as u8]),
                ..PortReport::new(n, &format!("p{n}"), 10 + n)
            })
            .collect()
    }

    fn revalidate(&self) {
        self.revalidations.fetch_add(1, Ordering::SeqCst);
    }
}

impl Hooks {
    pub fn take_sent(&self) -> Vec<Sent> {
        std::mem::take(&mut *self.sent.lock().unwrap())
    }
}

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub sock: PathBuf,
    pub pl: Arc<Pipeline>,
    pub hooks: Arc<Hooks>,
    pub br: BridgeOf,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.br.shutdown();
    }
}

/// br0 with p1..p4 on trunk ports (all VLANs).
pub fn start() -> Harness {
    start_with(BridgeOfConfig::default())
}

pub fn start_with(cfg: BridgeOfConfig) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("br0.mgmt");
    let pl = Arc::new(Pipeline::default());
    pl.add_bridge("br0").unwrap();
    for n in 1..=4u32 {
        let spec = PortSpec {
            name: format!("p{n}"),
            dp_port: 10 + n,
            ofport: Some(n),
            tag: None,
            trunks: vec![],
            mac_limit: None,
        };
        pl.add_port("br0", spec).unwrap();
    }
    let hooks = Arc::new(Hooks::default());
    let br = BridgeOf::with_config("br0", pl.clone(), hooks.clone(), &sock, cfg).unwrap();
    Harness {
        dir,
        sock,
        pl,
        hooks,
        br,
    }
}

/// An Ethernet frame (`eth_type`, then `payload` padded to 60 bytes).
pub fn frame(src: [u8; 6], dst: [u8; 6], eth_type: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&eth_type.to_be_bytes());
    f.extend_from_slice(payload);
    f.resize(f.len().max(60), 0);
    f
}

/// A tagged frame.
pub fn tagged(src: [u8; 6], dst: [u8; 6], vid: u16, eth_type: u16) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&0x8100u16.to_be_bytes());
    f.extend_from_slice(&vid.to_be_bytes());
    f.extend_from_slice(&eth_type.to_be_bytes());
    f.resize(60, 0);
    f
}

pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Translates `frame` arriving on OpenFlow port `of` (datapath 10 + of).
pub fn xlate(pl: &Pipeline, of: u32, frame: &[u8]) -> ofproto::Translation {
    let key = wire::extract(frame, 10 + of);
    pl.translate(&key, frame.len(), Instant::now())
}

/// Datapath output ports of a translation, in order.
pub fn outputs(t: &ofproto::Translation) -> Vec<u32> {
    t.actions
        .iter()
        .filter_map(|a| match a {
            dpif::Action::Output(p) => Some(*p),
            _ => None,
        })
        .collect()
}

/// Executes datapath actions on a frame like the datapath: returns (datapath port, frame) per
/// output; `Userspace` hands the packet as modified so far to the pipeline's slow path.
pub fn execute(
    pl: &Pipeline,
    key: &wire::FlowKey,
    actions: &[dpif::Action],
    frame: &[u8],
) -> Vec<(u32, Vec<u8>)> {
    use dpif::Upcall;
    let mut pkt = packet::Packet::from_slice(frame);
    let mut out = Vec::new();
    for a in actions {
        match a {
            dpif::Action::Output(p) => out.push((*p, pkt.data().to_vec())),
            dpif::Action::Userspace(c) => pl.userspace(*c, key, &pkt),
            a => dpif::modify::modify(&mut pkt, a),
        }
    }
    out
}

/// Runs a frame received on OpenFlow port `of` through the pipeline and the (simulated)
/// datapath, then hands the resulting packet-ins to the bridge's controllers. Returns the
/// translation and the frames sent per datapath port.
pub fn inject(h: &Harness, of: u32, frame: &[u8]) -> (ofproto::Translation, Vec<(u32, Vec<u8>)>) {
    let key = wire::extract(frame, 10 + of);
    let t = h.pl.translate(&key, frame.len(), Instant::now());
    let sent = execute(&h.pl, &key, &t.actions, frame);
    h.br.deliver_packet_ins(h.pl.take_packet_ins(64));
    (t, sent)
}

/// Polls `f` until it returns true or `timeout` passes.
pub fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// True if a rule of br0 (as `dump-flows` prints it) contains `needle`.
pub fn has_flow(h: &Harness, needle: &str) -> bool {
    h.pl.dump_flows_text("br0", None)
        .unwrap()
        .iter()
        .any(|l| l.contains(needle))
}

/// The datapath ports of each packet-out the controller sent since the last call (sorted).
pub fn packet_out_ports(h: &Harness) -> Vec<Vec<u32>> {
    h.hooks
        .take_sent()
        .iter()
        .map(|s| {
            let mut v: Vec<u32> = s
                .actions
                .iter()
                .filter_map(|a| match a {
                    dpif::Action::Output(p) => Some(*p),
                    _ => None,
                })
                .collect();
            v.sort();
            v
        })
        .collect()
}
