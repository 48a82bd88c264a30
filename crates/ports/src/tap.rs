//! The `tap` and `internal` port kinds: a tap interface Vireo creates (named after the port;
//! for `internal`, after the bridge) and brings up, read and written through its fd with a
//! virtio-net header before each frame (`IFF_VNET_HDR`).
//!
//! Offloads (option `offloads`, default on): Vireo declares partial checksums and TCP GSO
//! (`TUNSETOFFLOAD` `CSUM|TSO4|TSO6`), reads each frame into a large buffer (up to 64 KB) and
//! checks its virtio-net header like a guest's (`packet::vnet`: refused headers are dropped
//! and counted by reason); the offload travels in the packet's metadata. On tx, the header
//! carries the packet's offload (partial checksum, TSO with its MSS) and the kernel finishes
//! it. With `offloads=false`: `TUNSETOFFLOAD` 0, so the kernel completes checksums and
//! segments before a frame reaches us, the datapath completes them in software before a frame
//! reaches the tap, and a header that claims a partial checksum anyway is honoured if its
//! offsets lie inside the frame (completed in software), dropped as malformed otherwise; a
//! GSO header is dropped.
//!
//! Threads: `rx_burst` on the one PMD polling the port (one `read` per frame until the tap is
//! empty or the batch full); `tx_burst` from any PMD (one `write` per frame; `EIO` while the
//! interface is down is counted as a link-down drop); `maintain` on the housekeeping thread
//! re-creates the tap if someone deleted it (`ip link del`), wherever it had been moved.
use crate::af_packet::{KernelCounters, MAX_MTU};
use crate::kmeta::VnetHdr;
use crate::sys::{self, VNET_HDR_LEN};
use crate::{DropReason, Link, Port, PortCounters, PortError, PortStats};
use nix::errno::Errno;
use packet::vnet::{Hdr, Offloads, VnetError};
use packet::{Batch, Packet, Pool, MAX_FRAME};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

/// A `tap` or `internal` port.
pub struct TapPort {
    name: String,
    kind: &'static str,
    mtu: Option<u32>,
    /// Checksum and TSO offloads on (see the module doc).
    offloads: bool,
    fd: RwLock<Option<Arc<OwnedFd>>>,
    /// Set by `shutdown`: `maintain` must not re-create a deleted port's tap.
    closed: AtomicBool,
    /// Set by [`TapPort::hold_rx`]: nothing is read (frames wait in the tap's queue).
    held: AtomicBool,
    counters: PortCounters,
    kc: KernelCounters,
}

impl std::fmt::Debug for TapPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapPort")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .finish()
    }
}

/// Checks an MTU request against what the packet buffers hold.
pub fn check_mtu(mtu: u32) -> Result<(), PortError> {
    if (68..=MAX_MTU).contains(&mtu) {
        Ok(())
    } else {
        Err(PortError(format!(
            "MTU {mtu} is outside 68..{MAX_MTU} (the largest frame Vireo's packet buffers hold)"
        )))
    }
}

fn create(name: &str, mtu: Option<u32>, offloads: bool) -> Result<OwnedFd, PortError> {
    let fd = sys::tap_create(name, offloads)
        .map_err(|e| PortError(format!("cannot create tap {name}: {e}")))?;
    if let Some(m) = mtu {
        sys::set_if_mtu(name, m).map_err(|e| PortError(format!("{name}: MTU {m}: {e}")))?;
    }
    sys::if_up(name).map_err(|e| PortError(format!("cannot bring {name} up: {e}")))?;
    Ok(fd)
}

impl TapPort {
    /// Creates tap `name` (kind `tap` or `internal`). Fails if an interface of that name
    /// already exists, the MTU is out of range, or the kernel refuses.
    pub fn create(
        name: &str,
        kind: &'static str,
        mtu: Option<u32>,
    ) -> Result<Arc<TapPort>, PortError> {
        TapPort::create_opts(name, kind, mtu, true)
    }

    /// [`TapPort::create`], with checksum and TSO offloads on or off.
    pub fn create_opts(
        name: &str,
        kind: &'static str,
        mtu: Option<u32>,
        offloads: bool,
    ) -> Result<Arc<TapPort>, PortError> {
        if let Some(m) = mtu {
            check_mtu(m)?;
        }
        if sys::if_index(name).is_ok() {
            return Err(PortError(format!(
                "a network interface named {name} already exists"
            )));
        }
        let fd = create(name, mtu, offloads)?;
        Ok(Arc::new(TapPort {
            name: name.to_string(),
            kind,
            mtu,
            offloads,
            fd: RwLock::new(Some(Arc::new(fd))),
            closed: AtomicBool::new(false),
            held: AtomicBool::new(false),
            counters: PortCounters::default(),
            kc: KernelCounters::default(),
        }))
    }

    /// Takes over tap `name` through `fd`, handed over by the vireod this one replaces
    /// (`vireoctl upgrade`): the interface, its addresses and its queue stay as they are; the
    /// offloads it declares are set again as `offloads` says.
    pub fn adopt(
        name: &str,
        kind: &'static str,
        mtu: Option<u32>,
        offloads: bool,
        fd: OwnedFd,
    ) -> Result<Arc<TapPort>, PortError> {
        let got = sys::tap_name(fd.as_fd())
            .map_err(|e| PortError(format!("handed-over tap {name}: {e}")))?;
        if got != name {
            return Err(PortError(format!(
                "the handed-over fd is tap {got}, not {name}"
            )));
        }
        sys::tap_set_offloads(fd.as_fd(), offloads)
            .map_err(|e| PortError(format!("handed-over tap {name}: {e}")))?;
        Ok(Arc::new(TapPort {
            name: name.to_string(),
            kind,
            mtu,
            offloads,
            fd: RwLock::new(Some(Arc::new(fd))),
            closed: AtomicBool::new(false),
            held: AtomicBool::new(false),
            counters: PortCounters::default(),
            kc: KernelCounters::default(),
        }))
    }

    /// Stops (or resumes) reading the tap: at an upgrade's switch-over the old vireod leaves
    /// what arrives queued in the tap for the new one, which holds the same tap.
    pub fn hold_rx(&self, on: bool) {
        self.held.store(on, Relaxed);
    }

    /// A duplicate of the tap's fd, to hand it to the next vireod.
    pub fn dup_fd(&self) -> Option<OwnedFd> {
        self.fd()?.try_clone().ok()
    }

    fn fd(&self) -> Option<Arc<OwnedFd>> {
        self.fd.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Closes the tap fd, which removes the interface.
    pub fn shutdown(&self) {
        self.closed.store(true, Relaxed);
        *self.fd.write().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl TapPort {
    /// `rx_burst` with offloads on: each frame is read into a large buffer (a GSO frame may
    /// be 64 KB), its virtio-net header checked, and a frame that fits a standard buffer
    /// moved into one (the large buffer is reused for the next read).
    fn rx_offloaded(&self, _q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        let Some(fd) = self.fd() else { return 0 };
        let (mut n, mut bytes) = (0, 0u64);
        let mut big: Option<Packet> = None;
        while !out.is_full() {
            let mut p = big.take().unwrap_or_else(|| pool.get_large());
            let mut vnet = [0u8; VNET_HDR_LEN];
            let room = p.room();
            let r = {
                let buf = p.reset_for_fill(room);
                let mut iov = [IoSliceMut::new(&mut vnet), IoSliceMut::new(buf)];
                nix::sys::uio::readv(fd.as_fd(), &mut iov)
            };
            let len = match r {
                Ok(k) => k.saturating_sub(VNET_HDR_LEN),
                Err(e) => {
                    if !matches!(e, Errno::EAGAIN | Errno::EINTR) {
                        // EBADFD once the tap was deleted: housekeeping re-creates it.
                        self.counters.rx_error(1);
                    }
                    big = Some(p);
                    break;
                }
            };
            p.truncate(len);
            let checked = if (14..room).contains(&len) {
                Hdr::parse(&vnet).validate(p.data(), Offloads::ALL)
            } else {
                Err(VnetError::GsoTooBig)
            };
            let offload = match checked {
                Ok(o) => o,
                Err(e) => {
                    self.kc.bad_vnet.fetch_add(1, Relaxed);
                    let why = match e {
                        _ if len < 14 => DropReason::Malformed,
                        _ if len >= room => DropReason::TooBig,
                        e => crate::af_packet::vnet_reason(Some(e)),
                    };
                    self.counters.drop(why, 1);
                    self.counters.rx_error(1);
                    big = Some(p);
                    continue;
                }
            };
            let mut p = if len <= MAX_FRAME {
                let mut small = pool.get();
                small.set_frame(p.data());
                big = Some(p);
                small
            } else {
                p
            };
            p.meta.set_offload(offload);
            bytes += len as u64;
            let _ = out.push(p);
            n += 1;
        }
        if let Some(p) = big {
            pool.put(p);
        }
        if n > 0 {
            self.counters.rx(n as u64, bytes);
        }
        n
    }
}

impl Port for TapPort {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn n_rxq(&self) -> usize {
        1
    }

    fn rx_burst(&self, q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
        if self.held.load(Relaxed) {
            return 0;
        }
        if self.offloads {
            return self.rx_offloaded(q, pool, out);
        }
        let Some(fd) = self.fd() else { return 0 };
        let (mut n, mut bytes) = (0, 0u64);
        while !out.is_full() {
            let mut p = pool.get();
            let mut vnet = [0u8; VNET_HDR_LEN];
            let r = {
                let buf = p.reset_for_fill(MAX_FRAME);
                let mut iov = [IoSliceMut::new(&mut vnet), IoSliceMut::new(buf)];
                nix::sys::uio::readv(fd.as_fd(), &mut iov)
            };
            let len = match r {
                Ok(k) => k.saturating_sub(VNET_HDR_LEN),
                Err(Errno::EAGAIN | Errno::EINTR) => {
                    pool.put(p);
                    break;
                }
                Err(_) => {
                    // EBADFD once the tap was deleted: housekeeping re-creates it.
                    pool.put(p);
                    self.counters.rx_error(1);
                    break;
                }
            };
            let hdr = VnetHdr::parse(&vnet).and_then(|h| {
                h.check(len)?;
                Ok(h)
            });
            let ok = match hdr {
                _ if !(14..MAX_FRAME).contains(&len) => false,
                Ok(h) if h.is_gso() => false,
                Ok(h) if h.needs_csum() => {
                    p.truncate(len);
                    let (s, o) = (usize::from(h.csum_start), usize::from(h.csum_offset));
                    let done = wire::offload::complete_partial(p.data_mut(), s, o).is_ok();
                    if done {
                        self.kc.csum_completed.fetch_add(1, Relaxed);
                    }
                    done
                }
                Ok(_) => true,
                Err(_) => false,
            };
            if !ok {
                if hdr.is_err() {
                    self.kc.bad_vnet.fetch_add(1, Relaxed);
                }
                let why = if len >= MAX_FRAME {
                    DropReason::TooBig
                } else {
                    DropReason::Malformed
                };
                self.counters.drop(why, 1);
                self.counters.rx_error(1);
                pool.put(p);
                continue;
            }
            p.truncate(len);
            bytes += len as u64;
            let _ = out.push(p);
            n += 1;
        }
        if n > 0 {
            self.counters.rx(n as u64, bytes);
        }
        n
    }

    fn tx_burst(&self, _q: usize, pkts: &mut Batch) -> usize {
        if pkts.is_empty() {
            return 0;
        }
        let Some(fd) = self.fd() else {
            self.counters.drop(DropReason::LinkDown, pkts.len() as u64);
            return 0;
        };
        let mut vnet = [0u8; VNET_HDR_LEN];
        let (mut sent, mut bytes) = (0, 0u64);
        for p in pkts.as_slice() {
            if self.offloads {
                // The kernel finishes what the packet still needs (checksum, segmentation).
                packet::vnet::write_hdr(p.meta.offload(), p.data(), &mut vnet);
            }
            let iov = [IoSlice::new(&vnet), IoSlice::new(p.data())];
            match nix::sys::uio::writev(fd.as_fd(), &iov) {
                Ok(_) => {
                    sent += 1;
                    bytes += p.len() as u64;
                }
                Err(Errno::EIO | Errno::EBADFD | Errno::ENODEV) => {
                    self.counters.drop(DropReason::LinkDown, 1);
                }
                Err(Errno::EAGAIN | Errno::ENOBUFS) => {
                    self.counters.drop(DropReason::QueueFull, 1);
                }
                Err(Errno::EMSGSIZE | Errno::EINVAL) => {
                    self.counters.drop(DropReason::TooBig, 1);
                }
                Err(_) => {
                    self.counters.tx_error(1);
                    self.counters.drop(DropReason::Malformed, 1);
                }
            }
        }
        if sent > 0 {
            self.counters.tx(sent as u64, bytes);
        }
        sent
    }

    fn tx_offloads(&self) -> Offloads {
        if self.offloads {
            Offloads::ALL
        } else {
            Offloads::default()
        }
    }

    fn link(&self) -> Link {
        match self.fd() {
            // Administratively down (PORT_MOD, `ip link set down`) is down; a tap moved into
            // another namespace cannot be looked up by name from here and counts as up.
            Some(fd)
                if sys::tap_attached(fd.as_fd())
                    && sys::if_flags(&self.name).map_or(true, |f| f & libc::IFF_UP as u32 != 0) =>
            {
                Link::Up
            }
            _ => Link::Down,
        }
    }

    fn preload_stats(&self, s: &PortStats) {
        self.counters.preload(s);
    }

    fn stats(&self) -> PortStats {
        self.counters.snapshot()
    }

    fn maintain(&self) {
        if self.closed.load(Relaxed) {
            return;
        }
        let attached = self.fd().is_some_and(|fd| sys::tap_attached(fd.as_fd()));
        if attached {
            return;
        }
        if self.fd().is_some() {
            *self.fd.write().unwrap_or_else(|e| e.into_inner()) = None;
            self.kc.link_lost.fetch_add(1, Relaxed);
            tracing::warn!(tap = %self.name, "tap interface deleted: port link down");
        }
        match create(&self.name, self.mtu, self.offloads) {
            Ok(fd) => {
                *self.fd.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(fd));
                self.kc.reopened.fetch_add(1, Relaxed);
                tracing::info!(tap = %self.name, "tap interface re-created");
            }
            Err(e) => tracing::debug!(tap = %self.name, error = %e, "cannot re-create tap yet"),
        }
    }

    fn status(&self) -> serde_json::Value {
        let mut v = self.kc.json();
        v["ifname"] = self.name.clone().into();
        v["offloads"] = if self.offloads {
            "csum,tso4,tso6"
        } else {
            "none"
        }
        .into();
        v["mtu"] = self.mtu.into();
        v
    }
}
