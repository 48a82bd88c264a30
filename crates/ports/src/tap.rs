//! The `tap` and `internal` port kinds: a tap interface Vireo creates (named after the port;
//! for `internal`, after the bridge) and brings up, read and written through its fd with a
//! virtio-net header before each frame (`IFF_VNET_HDR`).
//!
//! Offloads: Vireo declares none (`TUNSETOFFLOAD` 0), so the kernel completes checksums and
//! segments before a frame reaches us, and we never hand the kernel a partial checksum.
//! A header that claims a partial checksum anyway is honoured if its offsets lie inside the
//! frame (completed in software) and dropped as malformed otherwise; a GSO header is dropped.
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
use packet::{Batch, Pool, MAX_FRAME};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

/// A `tap` or `internal` port.
pub struct TapPort {
    name: String,
    kind: &'static str,
    mtu: Option<u32>,
    fd: RwLock<Option<Arc<OwnedFd>>>,
    /// Set by `shutdown`: `maintain` must not re-create a deleted port's tap.
    closed: AtomicBool,
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

fn create(name: &str, mtu: Option<u32>) -> Result<OwnedFd, PortError> {
    let fd =
        sys::tap_create(name).map_err(|e| PortError(format!("cannot create tap {name}: {e}")))?;
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
        if let Some(m) = mtu {
            check_mtu(m)?;
        }
        if sys::if_index(name).is_ok() {
            return Err(PortError(format!(
                "a network interface named {name} already exists"
            )));
        }
        let fd = create(name, mtu)?;
        Ok(Arc::new(TapPort {
            name: name.to_string(),
            kind,
            mtu,
            fd: RwLock::new(Some(Arc::new(fd))),
            closed: AtomicBool::new(false),
            counters: PortCounters::default(),
            kc: KernelCounters::default(),
        }))
    }

    /// Takes over tap `name` through `fd`, handed over by the vireod this one replaces
    /// (`vireoctl upgrade`): the interface, its addresses and its queue stay as they are.
    pub fn adopt(
        name: &str,
        kind: &'static str,
        mtu: Option<u32>,
        fd: OwnedFd,
    ) -> Result<Arc<TapPort>, PortError> {
        let got = sys::tap_name(fd.as_fd())
            .map_err(|e| PortError(format!("handed-over tap {name}: {e}")))?;
        if got != name {
            return Err(PortError(format!(
                "the handed-over fd is tap {got}, not {name}"
            )));
        }
        Ok(Arc::new(TapPort {
            name: name.to_string(),
            kind,
            mtu,
            fd: RwLock::new(Some(Arc::new(fd))),
            closed: AtomicBool::new(false),
            counters: PortCounters::default(),
            kc: KernelCounters::default(),
        }))
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

impl Port for TapPort {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn n_rxq(&self) -> usize {
        1
    }

    fn rx_burst(&self, _q: usize, pool: &mut Pool, out: &mut Batch) -> usize {
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
        let vnet = [0u8; VNET_HDR_LEN];
        let (mut sent, mut bytes) = (0, 0u64);
        for p in pkts.as_slice() {
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

    fn link(&self) -> Link {
        match self.fd() {
            Some(fd)
                if sys::tap_attached(fd.as_fd())
                    && sys::if_flags(&self.name).is_ok_and(|f| f & libc::IFF_UP as u32 != 0) =>
            {
                Link::Up
            }
            _ => Link::Down,
        }
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
        match create(&self.name, self.mtu) {
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
        v["offloads"] = "none".into();
        v["mtu"] = self.mtu.into();
        v
    }
}
