//! Live port objects built from the stored port configuration: which constructor each type
//! uses, the defaults of its options, and how it is stopped. Control thread only.
use crate::store::PortConfig;
use ports::af_packet::AfPacketPort;
use ports::af_xdp::AfXdpPort;
use ports::dummy::DummyPort;
use ports::tap::TapPort;
use ports::tunnel::{TunnelConfig, TunnelPort};
use ports::vhost_user::VhostUserPort;
use ports::Port;
use std::path::Path;
use std::sync::Arc;

/// Default vhost-user-client reconnect interval.
pub const DEFAULT_RECONNECT_MS: u64 = 1000;

/// An `af-xdp` port's steering sockets per queue (one per NUMA node with `xdp-steering=on`,
/// else 0) and whether it marks (`xdp-mark=on`).
fn xdp_extras(pc: &PortConfig) -> (u32, bool) {
    let opt = |k: &str| pc.options.get(k).map(String::as_str);
    let nodes = if opt("xdp-steering") == Some("on") {
        dp::topology::Topology::detect()
            .nodes()
            .max()
            .map_or(1, |n| n + 1)
    } else {
        0
    };
    (nodes as u32, opt("xdp-mark") == Some("on"))
}

/// A port that exists at run time (a clone is another handle on the same port).
#[derive(Clone)]
pub enum LivePort {
    /// No device; injection and capture through the control socket.
    Dummy(Arc<DummyPort>),
    /// vhost-user, server or client mode.
    Vhost(Arc<VhostUserPort>),
    /// AF_XDP sockets on a kernel interface.
    AfXdp(Arc<AfXdpPort>),
    /// A kernel interface through a packet socket.
    AfPacket(Arc<AfPacketPort>),
    /// A tap Vireo created (`tap`, or a bridge's `internal` port).
    Tap(Arc<TapPort>),
    /// A `vxlan` or `geneve` tunnel endpoint (kernel UDP socket underlay).
    Tunnel(Arc<TunnelPort>),
}

impl LivePort {
    /// Creates the port described by `pc` (named `name`, default sockets in `run_dir`).
    pub fn create(name: &str, pc: &PortConfig, run_dir: &Path) -> Result<LivePort, String> {
        let opt = |k: &str| pc.options.get(k).map(String::as_str);
        let queues = opt("queues").map_or(Ok(1), str::parse::<usize>);
        let queues = queues.map_err(|_| "bad queues".to_string())?;
        let offloads = super::options::parse_offloads(opt("offloads"))
            .map_err(|e| format!("port {name}: {e}"))?;
        match pc.kind.as_str() {
            "dummy" => Ok(LivePort::Dummy(Arc::new(DummyPort::new()))),
            "vhost-user" => {
                let path =
                    opt("path").map_or_else(|| run_dir.join(format!("{name}.sock")), Into::into);
                let access = super::options::socket_access(opt("socket-mode"), opt("socket-group"))
                    .map_err(|e| format!("port {name}: {e}"))?;
                VhostUserPort::server_opts(&path, queues, access, offloads)
                    .map(LivePort::Vhost)
                    .map_err(|e| format!("port {name}: {e}"))
            }
            "vhost-user-client" => {
                let path = opt("path").ok_or_else(|| {
                    format!("port {name}: type vhost-user-client needs path=SOCKET")
                })?;
                let ms = opt("reconnect-ms").map_or(Ok(DEFAULT_RECONNECT_MS), str::parse::<u64>);
                let ms = ms.map_err(|_| "bad reconnect-ms".to_string())?;
                VhostUserPort::client_opts(Path::new(path), queues, ms, offloads)
                    .map(LivePort::Vhost)
                    .map_err(|e| format!("port {name}: {e}"))
            }
            "af-xdp" => {
                let ifname = opt("ifname")
                    .ok_or_else(|| format!("port {name}: type af-xdp needs ifname=INTERFACE"))?;
                let mode = opt("xdp-mode").unwrap_or("best-effort");
                let (nodes, marks) = xdp_extras(pc);
                AfXdpPort::open_with(ifname, queues, mode, nodes, marks)
                    .map(|p| LivePort::AfXdp(Arc::new(p)))
                    .map_err(|e| format!("port {name}: {e}"))
            }
            "af-packet" => {
                let ifname = opt("ifname")
                    .ok_or_else(|| format!("port {name}: type af-packet needs ifname=IF"))?;
                AfPacketPort::open_opts(ifname, offloads)
                    .map(LivePort::AfPacket)
                    .map_err(|e| format!("port {name}: {e}"))
            }
            "tap" | "internal" => {
                let kind = if pc.kind == "tap" { "tap" } else { "internal" };
                if name.len() > 15 {
                    return Err(format!(
                        "port {name}: a {kind} port names a network interface: 15 characters at most"
                    ));
                }
                let mtu = opt("mtu").map(str::parse::<u32>).transpose();
                let mtu = mtu.map_err(|_| format!("port {name}: bad mtu"))?;
                TapPort::create_opts(name, kind, mtu, offloads)
                    .map(LivePort::Tap)
                    .map_err(|e| format!("port {name}: {e}"))
            }
            "vxlan" | "geneve" => LivePort::tunnel(name, pc, None),
            other => Err(format!(
                "port type {other:?} is not implemented yet in this build of vireod"
            )),
        }
    }

    /// Takes over a vhost-user port (type `vhost-user` or `vhost-user-client`) whose
    /// connection the previous vireod handed over (`vireoctl upgrade`); its control thread
    /// and rings start at the switch-over (`Endpoint::resume`).
    pub fn adopt(
        name: &str,
        pc: &PortConfig,
        run_dir: &Path,
        h: &vhost::Handover,
        fds: &mut [Option<std::os::fd::OwnedFd>],
    ) -> Result<LivePort, String> {
        let opt = |k: &str| pc.options.get(k).map(String::as_str);
        let queues = opt("queues").map_or(Ok(1), str::parse::<usize>);
        let queues = queues.map_err(|_| "bad queues".to_string())?;
        let (path, mode) = match pc.kind.as_str() {
            "vhost-user" => (
                opt("path").map_or_else(|| run_dir.join(format!("{name}.sock")), Into::into),
                vhost::Mode::Server,
            ),
            "vhost-user-client" => {
                let path = opt("path").ok_or("type vhost-user-client needs path=SOCKET")?;
                let ms = opt("reconnect-ms").map_or(Ok(DEFAULT_RECONNECT_MS), str::parse::<u64>);
                let reconnect_ms = ms.map_err(|_| "bad reconnect-ms".to_string())?;
                (
                    Path::new(path).to_path_buf(),
                    vhost::Mode::Client { reconnect_ms },
                )
            }
            other => {
                return Err(format!(
                    "a {other} port cannot take over a vhost-user connection"
                ))
            }
        };
        let offloads = super::options::parse_offloads(opt("offloads"))?;
        let ep = vhost::Endpoint::adopt(&path, queues, mode, offloads, h, fds)?;
        Ok(LivePort::Vhost(VhostUserPort::adopted(ep, mode)))
    }

    /// Takes over a `tap` or `internal` port's interface through the fd the previous vireod
    /// handed over (the interface is never re-created: its addresses stay).
    pub fn adopt_tap(
        name: &str,
        pc: &PortConfig,
        fd: std::os::fd::OwnedFd,
    ) -> Result<LivePort, String> {
        let kind = if pc.kind == "tap" { "tap" } else { "internal" };
        let mtu = pc.options.get("mtu").map(|m| m.parse::<u32>()).transpose();
        let mtu = mtu.map_err(|_| format!("port {name}: bad mtu"))?;
        let offloads =
            super::options::parse_offloads(pc.options.get("offloads").map(String::as_str))
                .map_err(|e| format!("port {name}: {e}"))?;
        TapPort::adopt(name, kind, mtu, offloads, fd)
            .map(LivePort::Tap)
            .map_err(|e| format!("port {name}: {e}"))
    }

    /// A `vxlan` or `geneve` port: a new underlay socket, or the one handed over (`fd`).
    fn tunnel(
        name: &str,
        pc: &PortConfig,
        fd: Option<std::os::fd::OwnedFd>,
    ) -> Result<LivePort, String> {
        let kind = if pc.kind == "vxlan" {
            ports::tunnel::TunnelKind::Vxlan
        } else {
            ports::tunnel::TunnelKind::Geneve
        };
        let opt = |k: &str| pc.options.get(k).map(String::as_str);
        TunnelConfig::parse(kind, opt)
            .and_then(|cfg| match fd {
                Some(fd) => TunnelPort::adopt(cfg, fd),
                None => TunnelPort::open(cfg),
            })
            .map(LivePort::Tunnel)
            .map_err(|e| format!("port {name}: {e}"))
    }

    /// A handed-over `tap`, `internal`, `af-packet`, `vxlan` or `geneve` port (see
    /// [`LivePort::adopt_tap`], `AfPacketPort::adopt` and `TunnelPort::adopt`).
    pub fn adopt_kernel(
        name: &str,
        pc: &PortConfig,
        fd: std::os::fd::OwnedFd,
    ) -> Result<LivePort, String> {
        if pc.kind == "vxlan" || pc.kind == "geneve" {
            return LivePort::tunnel(name, pc, Some(fd));
        }
        if pc.kind != "af-packet" {
            return LivePort::adopt_tap(name, pc, fd);
        }
        let offloads =
            super::options::parse_offloads(pc.options.get("offloads").map(String::as_str))
                .map_err(|e| format!("port {name}: {e}"))?;
        let ifname = pc
            .options
            .get("ifname")
            .ok_or_else(|| format!("port {name}: type af-packet needs ifname=IF"))?;
        AfPacketPort::adopt(ifname, offloads, fd)
            .map(LivePort::AfPacket)
            .map_err(|e| format!("port {name}: {e}"))
    }

    /// Takes over an `af-xdp` port handed over by the vireod this one replaces: its device
    /// fds, the mode it ran in and each queue's frame books (`AfXdpPort::adopt`).
    pub fn adopt_af_xdp(
        name: &str,
        pc: &PortConfig,
        mode_in_use: &str,
        fds: ports::af_xdp::DeviceFds,
        books: &[super::handover::XskBooks],
    ) -> Result<LivePort, String> {
        let opt = |k: &str| pc.options.get(k).map(String::as_str);
        let queues = opt("queues").map_or(Ok(1), str::parse::<usize>);
        let queues = queues.map_err(|_| "bad queues".to_string())?;
        let ifname = opt("ifname")
            .ok_or_else(|| format!("port {name}: type af-xdp needs ifname=INTERFACE"))?;
        let mode = opt("xdp-mode").unwrap_or("best-effort");
        let books: Vec<ports::af_xdp::Books> = books
            .iter()
            .map(|b| ports::af_xdp::Books {
                rx_free: b.rx_free.clone(),
                tx_free: b.tx_free.clone(),
            })
            .collect();
        AfXdpPort::adopt(
            ifname,
            queues,
            mode,
            mode_in_use,
            xdp_extras(pc),
            fds,
            &books,
        )
        .map(|p| LivePort::AfXdp(Arc::new(p)))
        .map_err(|e| format!("port {name}: {e}"))
    }

    /// The port as the datapath sees it.
    pub fn port(&self) -> Arc<dyn Port> {
        match self {
            LivePort::Dummy(d) => d.clone(),
            LivePort::Vhost(v) => v.clone(),
            LivePort::AfXdp(x) => x.clone(),
            LivePort::AfPacket(a) => a.clone(),
            LivePort::Tap(t) => t.clone(),
            LivePort::Tunnel(t) => t.clone(),
        }
    }

    /// Holds (or releases) reading from a kernel port (`tap`, `internal`, `af-packet`,
    /// tunnel, `af-xdp`): what arrives waits in the kernel. Other kinds are not held.
    pub fn hold_rx(&self, on: bool) {
        match self {
            LivePort::Tap(t) => t.hold_rx(on),
            LivePort::AfPacket(a) => a.hold_rx(on),
            LivePort::Tunnel(t) => t.hold_rx(on),
            LivePort::AfXdp(x) => x.hold_rx(on),
            LivePort::Dummy(_) | LivePort::Vhost(_) => {}
        }
    }

    /// The `af-xdp` port, for its steering map.
    pub fn af_xdp(&self) -> Option<&Arc<AfXdpPort>> {
        match self {
            LivePort::AfXdp(x) => Some(x),
            _ => None,
        }
    }

    /// The dummy port, for injection and capture.
    pub fn dummy(&self) -> Option<&Arc<DummyPort>> {
        match self {
            LivePort::Dummy(d) => Some(d),
            _ => None,
        }
    }

    /// Stops the device (closes sockets, removes socket files the port created) and waits
    /// for its thread: [`LivePort::stop`] then [`LivePort::join`].
    pub fn shutdown(&self) {
        self.stop();
        self.join();
    }

    /// Asks the device to stop and removes its socket file; never waits (safe under the
    /// `Switch` lock).
    pub fn stop(&self) {
        match self {
            LivePort::Vhost(v) => v.stop(),
            LivePort::AfXdp(x) => x.shutdown(),
            LivePort::AfPacket(a) => a.shutdown(),
            LivePort::Tap(t) => t.shutdown(),
            LivePort::Tunnel(t) => t.shutdown(),
            LivePort::Dummy(_) => {}
        }
    }

    /// Waits for the device's thread to end (bounded: see `vhost::endpoint`). Called only
    /// with no lock held. (`af-xdp` and dummy ports have no thread.)
    pub fn join(&self) {
        if let LivePort::Vhost(v) = self {
            v.join();
        }
    }
}
