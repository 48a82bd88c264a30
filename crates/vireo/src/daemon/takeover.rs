//! The new process of `vireoctl upgrade` (`vireod ... --takeover PATH`): receives the old
//! process's offer (see [`super::handover`]), builds its switch from the store with the
//! handed-over sockets, locks and vhost-user connections (memory mapped, no ring running),
//! answers ready, and at the switch-over installs each ring at the index the old process
//! stopped it at. `tap`, `internal` and `af-packet` ports are taken over through their
//! handed-over fds once the old process has exited (the interfaces and sockets live on; frames
//! wait in their queues), and so are `af-xdp` ports (program, XSKMAP, sockets and UMEM memfds,
//! steering sockets, steering and mark maps, with the frame books of the final message; one
//! that cannot be adopted is opened afresh) and tunnel sockets; all of these are held (not
//! read) until every one is attached. vhost-user ports see no outage.
//!
//! Any failure before the switch-over answers `Refused` and exits at once with status 1,
//! running no destructor: the sockets and files it took over still belong to the old process,
//! which keeps serving.
//!
//! Threads: the daemon's main thread, before the control server starts.
use super::handover::{self, Offer, Reply};
use super::live::LivePort;
use super::switch::Switch;
use crate::store::PortConfig;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

/// How long the old process may take to send its offer, and its final ring indices.
const OFFER_DEADLINE: Duration = Duration::from_secs(30);
/// How long to wait for the old process to exit before opening kernel ports anyway.
const EXIT_DEADLINE: Duration = Duration::from_secs(5);
/// How long a kernel port may keep failing to open after the old process exited.
const REOPEN_DEADLINE: Duration = Duration::from_secs(2);

/// For tests: `VIREO_TAKEOVER_ATTACH_DELAY_MS=N` waits N ms after each adopted kernel port is
/// attached, widening the window in which a port that were read at once could meet one not
/// attached yet (`upgrade_ports.rs`). Not set: no wait.
fn attach_delay() -> Option<Duration> {
    std::env::var("VIREO_TAKEOVER_ATTACH_DELAY_MS")
        .ok()?
        .parse()
        .ok()
        .map(Duration::from_millis)
}

/// Port kinds whose kernel object the old process holds until it exits: opened afterwards.
const DEFERRED_KINDS: &[&str] = &["af-xdp", "af-packet", "tap", "internal", "vxlan", "geneve"];

/// An `af-xdp` port handed over: bridge, name, configuration, the mode it ran in, its fds.
pub struct DeferredXsk {
    br: String,
    name: String,
    pc: PortConfig,
    mode: String,
    fds: ports::af_xdp::DeviceFds,
}

/// What the old process handed over, being taken apart while the switch is built.
pub struct Taken {
    stream: UnixStream,
    offer: Offer,
    fds: Vec<Option<OwnedFd>>,
    /// The control socket.
    pub control: Option<UnixListener>,
    /// The lock files (their flocks came along).
    pub locks: Vec<File>,
}

impl Taken {
    /// Connects to the old process and reads its offer; refuses (and exits) on a version or
    /// state this build cannot read.
    pub fn receive(path: &Path) -> Result<Taken, String> {
        let stream =
            UnixStream::connect(path).map_err(|e| format!("--takeover {}: {e}", path.display()))?;
        let (body, fds) = handover::recv(&stream, OFFER_DEADLINE)
            .map_err(|e| format!("--takeover: no state from the old vireod: {e}"))?;
        let offer = match handover::parse_offer(&body) {
            Ok(o) => o,
            Err(why) => refuse(&stream, &why),
        };
        let mut t = Taken {
            stream,
            offer,
            fds: fds.into_iter().map(Some).collect(),
            control: None,
            locks: Vec::new(),
        };
        let control = t.fd(t.offer.control, "control socket");
        let control = t.or_refuse(control);
        t.control = Some(UnixListener::from(control));
        for i in t.offer.locks.clone() {
            let f = t.fd(i, "lock file");
            let f = t.or_refuse(f);
            t.locks.push(File::from(f));
        }
        tracing::info!(
            old_pid = t.offer.pid,
            version = t.offer.version,
            "takeover: state received"
        );
        Ok(t)
    }

    fn fd(&mut self, i: usize, what: &str) -> Result<OwnedFd, String> {
        self.fds
            .get_mut(i)
            .and_then(Option::take)
            .ok_or_else(|| format!("the state names {what} fd {i}, which did not come"))
    }

    /// The value, or `Refused` to the old process and exit.
    pub fn or_refuse<T>(&self, r: Result<T, String>) -> T {
        match r {
            Ok(v) => v,
            Err(why) => refuse(&self.stream, &why),
        }
    }

    /// The bridge's management socket, if handed over.
    pub fn mgmt(&mut self, bridge: &str) -> Option<UnixListener> {
        let i = *self.offer.mgmt.get(bridge)?;
        self.fd(i, "management socket").ok().map(UnixListener::from)
    }

    /// Tells the old process everything is ready and waits for the final ring indices and
    /// live state.
    pub fn ready(&self) -> Switchover {
        let r = handover::send_reply(&self.stream, &Reply::Ready)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                handover::recv_reply(&self.stream, OFFER_DEADLINE).map_err(|e| e.to_string())
            });
        let r = r.and_then(|reply| match reply {
            Reply::Final {
                bases,
                macs,
                conntrack,
                xsk,
                counters,
                stopped_ns,
            } => {
                let conntrack = match conntrack {
                    true => Some(
                        handover::recv(&self.stream, OFFER_DEADLINE)
                            .map_err(|e| format!("no connection table: {e}"))?
                            .0,
                    ),
                    false => None,
                };
                Ok(Switchover {
                    bases,
                    macs,
                    conntrack,
                    xsk,
                    counters,
                    stopped_ns,
                })
            }
            other => Err(format!("{other:?}")),
        });
        match r {
            Ok(so) => so,
            Err(other) => {
                // The old process gave up (and resumed) or died: nothing here is ours.
                tracing::error!(answer = ?other, "takeover: no switch-over; exiting");
                eprintln!("vireod: takeover abandoned by the old vireod ({other:?})");
                std::process::exit(1);
            }
        }
    }

    /// Confirms the switch-over (`resumed_ns`: when the PMDs were let at the rings here), then
    /// waits (bounded) for the old process to exit. It is our parent: once it has exited we
    /// have another one.
    pub fn started(&self, resumed_ns: u64) {
        let pid = std::process::id();
        if let Err(e) = handover::send_reply(&self.stream, &Reply::Started { pid, resumed_ns }) {
            tracing::warn!(error = %e, "takeover: cannot confirm the switch-over");
        }
        let deadline = std::time::Instant::now() + EXIT_DEADLINE;
        while std::os::unix::process::parent_id() == self.offer.pid {
            if std::time::Instant::now() > deadline {
                tracing::warn!(
                    old_pid = self.offer.pid,
                    "takeover: the old vireod has not exited"
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// What the old process sends at the switch-over, its rings stopped.
pub struct Switchover {
    /// `(ring, base)` per vhost-user port.
    pub bases: BTreeMap<String, Vec<(usize, u16)>>,
    /// Learned MACs per bridge.
    pub macs: BTreeMap<String, Vec<handover::MacLine>>,
    /// The connection table (`conntrack::snapshot`), from a version-2 sender.
    pub conntrack: Option<Vec<u8>>,
    /// Each handed-over `af-xdp` port's frame books, from a version-3 sender.
    pub xsk: BTreeMap<String, Vec<handover::XskBooks>>,
    /// Every port's counters at the switch-over, from a version-3 sender.
    pub counters: BTreeMap<String, ports::PortStats>,
    /// When the old process's PMDs had stopped (CLOCK_MONOTONIC ns; 0 from a sender before
    /// version 4).
    pub stopped_ns: u64,
}

/// Answers `Refused` and exits with status 1 (no destructor: nothing taken is released).
fn refuse(s: &UnixStream, why: &str) -> ! {
    tracing::error!(reason = %why, "takeover refused");
    eprintln!("vireod: takeover refused: {why}");
    let _ = handover::send_reply(s, &Reply::Refused { why: why.into() });
    std::process::exit(1);
}

/// A dumped flow without its statistics (`duration=`, `n_packets=`, `n_bytes=`), as
/// `add-flows` reads it.
fn strip_stats(line: &str) -> String {
    let mut s = line.to_string();
    for key in ["duration=", "n_packets=", "n_bytes="] {
        if let Some(a) = s.find(key) {
            let end = s[a..].find(", ").map_or(s.len(), |e| a + e + 2);
            s.replace_range(a..end, "");
        }
    }
    s
}

impl Switch {
    /// Creates a port of the store during a takeover: a handed-over vhost-user connection is
    /// adopted (refusing the takeover if it cannot be), a kernel port waits for the old
    /// process to exit, anything else starts as usual.
    pub(super) fn take_port(
        &mut self,
        t: &mut Taken,
        br: &str,
        name: &str,
        pc: &PortConfig,
    ) -> Result<(), String> {
        let handed = t.offer.taps.remove(name).map(|i| (i, "tap"));
        let handed =
            handed.or_else(|| t.offer.af_packet.remove(name).map(|i| (i, "packet socket")));
        let handed = handed.or_else(|| t.offer.tunnels.remove(name).map(|i| (i, "tunnel socket")));
        if let Some((i, what)) = handed {
            let fd = t.fd(i, what);
            let fd = t.or_refuse(fd);
            self.deferred_fds
                .push((br.to_string(), name.to_string(), pc.clone(), fd));
            return Ok(());
        }
        if let Some(x) = t.offer.af_xdp.remove(name) {
            let mut take = |i: usize, what: &str| {
                let f = t.fd(i, what);
                t.or_refuse(f)
            };
            let (link, prog, map) = (
                take(x.link, "XDP link"),
                take(x.prog, "XDP program"),
                take(x.map, "XSKMAP"),
            );
            let steer = x
                .steer
                .map(|(s, st)| (take(s, "steering map"), take(st, "steering counters")));
            let marks = x.marks.map(|m| take(m, "mark map"));
            let queues = x
                .queues
                .iter()
                .enumerate()
                .map(|(q, &(s, u))| ports::af_xdp::QueueFds {
                    sock: take(s, "AF_XDP socket"),
                    umem: take(u, "UMEM memfd"),
                    steered: x.steered.get(q).map_or_else(Vec::new, |v| {
                        v.iter().map(|&i| take(i, "steering socket")).collect()
                    }),
                })
                .collect();
            self.deferred_xsk.push(DeferredXsk {
                br: br.to_string(),
                name: name.to_string(),
                pc: pc.clone(),
                mode: x.mode,
                fds: ports::af_xdp::DeviceFds {
                    link,
                    prog,
                    map,
                    queues,
                    steer,
                    marks,
                },
            });
            return Ok(());
        }
        if DEFERRED_KINDS.contains(&pc.kind.as_str()) {
            self.deferred
                .push((br.to_string(), name.to_string(), pc.clone()));
            return Ok(());
        }
        let Some(h) = t.offer.vhost.remove(name) else {
            return self.start_port(br, name, pc).map_err(|e| e.0);
        };
        let lp = LivePort::adopt(name, pc, self.run_dir(), &h, &mut t.fds)
            .map_err(|e| format!("port {name}: {e}"));
        let lp = t.or_refuse(lp);
        self.attach_live(br, name, pc, lp).map_err(|e| e.0)
    }

    /// The switch-over in the new process: every adopted vhost-user port installs its rings at
    /// the final bases and its control thread starts. Returns when the PMDs were let at the
    /// rings (CLOCK_MONOTONIC ns), also kept for `show` (`switch_over`).
    pub(super) fn take_rings(&mut self, bases: &BTreeMap<String, Vec<(usize, u16)>>) -> u64 {
        // Every port's rings first, with PMDs held off the guests' tx rings: a packet taken
        // from one guest then always finds its destination running.
        for (name, lp) in &self.live {
            if let LivePort::Vhost(v) = lp {
                let b = bases.get(name).map_or(&[][..], Vec::as_slice);
                if let Err(e) = v.endpoint().start_rings(b) {
                    tracing::error!(port = %name, error = %e, "takeover: rings did not start");
                }
            }
        }
        for (name, lp) in &self.live {
            if let LivePort::Vhost(v) = lp {
                let b = bases.get(name).map_or(&[][..], Vec::as_slice);
                if let Err(e) = v.endpoint().resume(b) {
                    tracing::error!(port = %name, error = %e, "takeover: port did not start");
                }
            }
        }
        // From here the PMDs poll the rings: the new process's side of the switch-over.
        let resumed = handover::mono_ns();
        if let Some(so) = self.switch_over.as_mut() {
            so["rings_resumed_ns"] = resumed.into();
            if let Some(stopped) = so["stopped_ns"].as_u64().filter(|&s| s > 0) {
                so["rings_gap_us"] = (resumed.saturating_sub(stopped) / 1000).into();
            }
        }
        resumed
    }

    /// At the switch-over, before any ring runs here: the MACs the old process had learned
    /// and its connections (so established connections stay established, NAT mappings stay).
    /// What cannot be entered is logged and counted in the log line; the switch-over goes on.
    pub(super) fn take_live_state(&mut self, so: &Switchover) {
        self.xsk_books = so.xsk.clone();
        self.switch_over = Some(serde_json::json!({ "stopped_ns": so.stopped_ns }));
        self.take_macs(so);
        if let Some(bytes) = &so.conntrack {
            let t = std::time::Instant::now();
            match self.rt.dp.conntrack().import(bytes, conntrack::clock_ms()) {
                Ok(r) => tracing::info!(
                    connections = r.added,
                    skipped = r.skipped,
                    us = t.elapsed().as_micros() as u64,
                    "takeover: connections restored"
                ),
                Err(e) => tracing::error!(error = %e, "takeover: connection table refused"),
            }
        }
    }

    /// Once every port is here (after [`Switch::start_deferred`]): each port's counters go on
    /// from the old process's (a port that is not here, or failed, has none to take).
    pub(super) fn take_counters(&self, so: &Switchover) {
        let mut n = 0;
        for (name, st) in &so.counters {
            if let Some(lp) = self.live.get(name) {
                lp.port().preload_stats(st);
                n += 1;
            }
        }
        tracing::info!(
            ports = n,
            of = so.counters.len(),
            "takeover: port counters restored"
        );
    }

    /// Learns the MACs the old process had, on the ports that exist here now. Called again once
    /// the kernel ports are back (they are attached after the old process exits): an entry
    /// already restored is only refreshed with the same age.
    pub(super) fn take_macs(&mut self, so: &Switchover) {
        for (br, entries) in &so.macs {
            match self.rt.pipeline.restore_macs(br, entries) {
                Ok(n) => {
                    tracing::info!(bridge = %br, macs = n, of = entries.len(), "takeover: MACs restored")
                }
                Err(e) => tracing::warn!(bridge = %br, error = %e, "takeover: MACs not restored"),
            }
        }
    }

    /// Before the switch-over: the rules the old process had replace the default ones (a
    /// rule that does not parse refuses the takeover: the old process keeps them).
    pub(super) fn take_flows(&mut self, t: &Taken) {
        use ofproto::meter::{parse_meter, MeterCommand};
        for (br, lines) in &t.offer.meters {
            if !self.config().bridges.contains_key(br) {
                continue;
            }
            for line in lines {
                // The spec, without the counters `dump-meters` appends after a space.
                let spec = line.split(' ').next().unwrap_or_default();
                let r = parse_meter(MeterCommand::Add, spec).and_then(|mm| {
                    self.rt
                        .pipeline
                        .meter_mod(br, mm)
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                });
                t.or_refuse(r.map_err(|e| format!("bridge {br}: meter {spec}: {e}")));
            }
        }
        for (br, msgs) in &t.offer.groups {
            if !self.config().bridges.contains_key(br) {
                continue;
            }
            let bytes: Result<Vec<Vec<u8>>, String> =
                msgs.iter().map(|h| super::format::parse_hex(h)).collect();
            let r = bytes
                .and_then(|b| ofswitch::group_handover::import_groups(&self.rt.pipeline, br, &b));
            let n = t.or_refuse(r.map_err(|e| format!("bridge {br}: groups: {e}")));
            tracing::info!(bridge = %br, groups = n, "takeover: groups restored");
        }
        for (br, lines) in &t.offer.flows {
            if !self.config().bridges.contains_key(br) {
                continue;
            }
            let text: String = lines.iter().map(|l| strip_stats(l) + "\n").collect();
            let pl = self.rt.pipeline.clone();
            let r = pl
                .del_flows(br, None, false)
                .and_then(|_| pl.add_flows(br, &text));
            let n = t.or_refuse(r.map_err(|e| format!("bridge {br}: rules: {e}")));
            tracing::info!(bridge = %br, rules = n, "takeover: rules restored");
        }
        self.rt.revalidate();
    }

    /// After the old process exited: opens the kernel ports (retrying for a moment: the
    /// kernel may still be tearing down the old process's interface).
    pub(super) fn start_deferred(&mut self) {
        // Taps, packet sockets and tunnel sockets handed over: the same interfaces and sockets
        // (frames they received meanwhile wait in their queues). Every port adopted here is
        // held (attached, not read) until all of them are attached: read earlier, a frame for
        // a port not attached yet would be lost.
        let mut held: Vec<LivePort> = Vec::new();
        let delay = attach_delay();
        for (br, name, pc, fd) in std::mem::take(&mut self.deferred_fds) {
            let r = LivePort::adopt_kernel(&name, &pc, fd)
                .map_err(super::switch::CmdError)
                .and_then(|lp| {
                    lp.hold_rx(true);
                    let again = lp.clone();
                    self.attach_live(&br, &name, &pc, lp).map(|()| again)
                });
            if let Some(d) = delay {
                std::thread::sleep(d);
            }
            match r {
                Ok(again) => held.push(again),
                Err(e) => {
                    tracing::error!(port = %name, error = %e.0, "cannot take over the handed-over port");
                    self.failed.insert(name, e.0);
                }
            }
        }
        // af-xdp ports handed over: the same program, sockets and UMEMs (with their steering
        // sockets and maps), carrying on with the frame books the old process kept (frames
        // received meanwhile wait in the rx rings). One that cannot be adopted is opened anew
        // (its fds closed first), counted in the port's status (`upgrade`) and logged.
        for x in std::mem::take(&mut self.deferred_xsk) {
            let books = self.xsk_books.remove(&x.name);
            let r = match books {
                Some(b) => LivePort::adopt_af_xdp(&x.name, &x.pc, &x.mode, x.fds, &b)
                    .map_err(super::switch::CmdError)
                    .and_then(|lp| {
                        lp.hold_rx(true);
                        let again = lp.clone();
                        self.attach_live(&x.br, &x.name, &x.pc, lp).map(|()| again)
                    }),
                None => Err(super::switch::CmdError(
                    "no frame books in the final message".into(),
                )),
            };
            match r {
                Ok(again) => held.push(again),
                Err(e) => {
                    tracing::error!(port = %x.name, error = %e.0, "cannot take over the handed-over af-xdp port; opening it anew");
                    self.deferred.push((x.br, x.name.clone(), x.pc));
                    self.xsk_reopened.insert(x.name, e.0);
                }
            }
        }
        for lp in held {
            lp.hold_rx(false);
        }
        let kernel_ns = handover::mono_ns();
        if let Some(so) = self.switch_over.as_mut() {
            so["kernel_ports_resumed_ns"] = kernel_ns.into();
            if let Some(stopped) = so["stopped_ns"].as_u64().filter(|&s| s > 0) {
                so["kernel_ports_gap_us"] = (kernel_ns.saturating_sub(stopped) / 1000).into();
            }
        }
        for (br, name, pc) in std::mem::take(&mut self.deferred) {
            let deadline = std::time::Instant::now() + REOPEN_DEADLINE;
            loop {
                match self.start_port(&br, &name, &pc) {
                    Ok(()) => {
                        if let Some(why) = self.xsk_reopened.remove(&name) {
                            if let Some(x) = self.live.get(&name).and_then(LivePort::af_xdp) {
                                x.note_upgrade(format!("reopened: {why}"));
                            }
                        }
                        break;
                    }
                    Err(_) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        tracing::error!(port = %name, error = %e.0, "cannot restore port");
                        self.failed.insert(name, e.0);
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::strip_stats;

    #[test]
    fn dumped_flows_lose_their_statistics() {
        assert_eq!(
            strip_stats(
                "cookie=0x5, duration=1.250s, table=0, n_packets=7, n_bytes=420, \
                 idle_timeout=60, priority=10,in_port=vm1 actions=output:vm2"
            ),
            "cookie=0x5, table=0, idle_timeout=60, priority=10,in_port=vm1 actions=output:vm2"
        );
    }
}
