//! A vhost-user connection's live state, exported by one vireod and imported by the next
//! (`vireoctl upgrade`): what the frontend negotiated (features, protocol features, owner),
//! its memory table (region layout and one fd per region), and per ring its size, addresses,
//! base, enable and start state and its kick/call/err eventfds. Fds travel beside the state
//! (SCM_RIGHTS); the state names them by index in that list.
//!
//! Threads: the endpoint's control thread is parked (see `endpoint`) whenever these run, so
//! nothing else touches the [`Backend`]: the old process's upgrade command exports it, the new
//! process's take-over imports it before its control thread starts. PMDs keep polling the old
//! process's rings until [`Backend::stop_for_handover`] takes them off the device; only then
//! are the final ring indices known, and the new process installs its rings at exactly those.
use super::{Backend, Vring};
use crate::msg::{MsgError, VringAddr};
use guestmem::{GuestMemory, RegionSpec};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// One memory region and the index of its fd in the handed-over fd list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionState {
    /// Guest-physical start.
    pub guest_phys_addr: u64,
    /// Size in bytes.
    pub memory_size: u64,
    /// Start in the frontend's address space.
    pub userspace_addr: u64,
    /// Offset in the fd.
    pub mmap_offset: u64,
    /// Index of the region's fd.
    pub fd: usize,
}

/// One ring's addresses as `SET_VRING_ADDR` gave them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingAddrState {
    /// Flags (bit 0: logging).
    pub flags: u32,
    /// Descriptor table (frontend address).
    pub desc: u64,
    /// Used ring or device event area.
    pub used: u64,
    /// Avail ring or driver event area.
    pub avail: u64,
    /// Log address.
    pub log: u64,
}

/// One ring's control state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VringState {
    /// Size (0: not set).
    pub num: u16,
    /// Addresses, once set.
    pub addr: Option<RingAddrState>,
    /// Ring base (split: avail index; packed: index with the wrap counter in bit 15). For a
    /// ring that was running when exported, the final value comes with the switch-over.
    pub base: u16,
    /// Kicked (started) and not stopped by `GET_VRING_BASE`.
    pub started: bool,
    /// Enabled by `SET_VRING_ENABLE`.
    pub enabled: bool,
    /// Activation failed and is not retried until a message touches the ring.
    pub failed: bool,
    /// Running in the exporting process (its base is final only after the switch-over).
    pub running: bool,
    /// Index of the kick eventfd.
    pub kick: Option<usize>,
    /// Index of the call eventfd.
    pub call: Option<usize>,
    /// Index of the error eventfd.
    pub err: Option<usize>,
}

/// The whole negotiated state of one connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendState {
    /// Virtio features the frontend acknowledged.
    pub acked: u64,
    /// `SET_FEATURES` was received.
    pub features_set: bool,
    /// Protocol features the frontend set.
    pub protocol: u64,
    /// `SET_OWNER` was received.
    pub owner: bool,
    /// The memory table (empty: none yet).
    pub regions: Vec<RegionState>,
    /// Every ring of the device.
    pub vrings: Vec<VringState>,
}

fn dup(fd: impl AsFd, fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    fds.push(fd.as_fd().try_clone_to_owned()?);
    Ok(fds.len() - 1)
}

fn take(fds: &mut [Option<OwnedFd>], i: usize, what: &str) -> Result<OwnedFd, String> {
    fds.get_mut(i)
        .and_then(Option::take)
        .ok_or_else(|| format!("handover names {what} fd {i}, which did not come (or came twice)"))
}

impl Backend {
    /// Exports the connection's state; the fds it names are duplicated into `fds` (the caller
    /// sends them and closes its copies).
    pub fn export(&self, fds: &mut Vec<OwnedFd>) -> io::Result<BackendState> {
        let mut regions = Vec::new();
        if let Some(mem) = &self.mem {
            for (spec, fd) in mem.regions().zip(&self.mem_fds) {
                regions.push(RegionState {
                    guest_phys_addr: spec.guest_phys_addr,
                    memory_size: spec.memory_size,
                    userspace_addr: spec.userspace_addr,
                    mmap_offset: spec.mmap_offset,
                    fd: dup(fd, fds)?,
                });
            }
        }
        let mut vrings = Vec::with_capacity(self.vrings.len());
        for v in &self.vrings {
            vrings.push(VringState {
                num: v.num,
                addr: v.addr.map(|a| RingAddrState {
                    flags: a.flags,
                    desc: a.desc,
                    used: a.used,
                    avail: a.avail,
                    log: a.log,
                }),
                base: v.base,
                started: v.started,
                enabled: v.enabled,
                failed: v.failed,
                running: v.running,
                kick: v.kick.as_ref().map(|f| dup(f, fds)).transpose()?,
                call: v.call.as_ref().map(|f| dup(&**f, fds)).transpose()?,
                err: v.err.as_ref().map(|f| dup(f, fds)).transpose()?,
            });
        }
        Ok(BackendState {
            acked: self.acked,
            features_set: self.features_set,
            protocol: self.protocol,
            owner: self.owner,
            regions,
            vrings,
        })
    }

    /// The switch-over, in the exporting process: takes every running ring `which` selects
    /// off the device (each PMD finishes the burst it is in and publishes its used entries
    /// first: the slot lock) and returns `(ring, base)` for each, the indices the new process
    /// resumes at. From here on this process never touches those rings again.
    pub fn stop_for_handover(&mut self, which: &dyn Fn(usize) -> bool) -> Vec<(usize, u16)> {
        let mut out = Vec::new();
        for i in 0..self.vrings.len() {
            if self.vrings[i].running && which(i) {
                self.stop(i);
                out.push((i, self.vrings[i].base));
            }
        }
        out
    }

    /// The importing side: a backend for `dev` in the state `st`, taking the fds it names out
    /// of `fds`. Maps the memory table; installs no ring (see [`Backend::start_handed_over`]).
    /// Refuses a state this build cannot serve (a feature it does not offer, another number
    /// of rings, a bad memory table).
    pub fn import(
        dev: Arc<crate::shared::Device>,
        st: &BackendState,
        fds: &mut [Option<OwnedFd>],
    ) -> Result<Backend, String> {
        let mut b = Backend::new(dev);
        if st.acked & !b.offered != 0 {
            return Err(format!(
                "the frontend negotiated features {:#x} this vireod does not offer",
                st.acked & !b.offered
            ));
        }
        if st.protocol & !super::PROTOCOL_FEATURES != 0 {
            return Err(format!(
                "the frontend negotiated protocol features {:#x} this vireod does not offer",
                st.protocol & !super::PROTOCOL_FEATURES
            ));
        }
        if st.vrings.len() != b.vrings.len() {
            return Err(format!(
                "{} rings handed over, this port has {}",
                st.vrings.len(),
                b.vrings.len()
            ));
        }
        b.acked = st.acked;
        b.features_set = st.features_set;
        b.protocol = st.protocol;
        b.owner = st.owner;
        if !st.regions.is_empty() {
            let specs: Vec<RegionSpec> = st
                .regions
                .iter()
                .map(|r| RegionSpec {
                    guest_phys_addr: r.guest_phys_addr,
                    memory_size: r.memory_size,
                    userspace_addr: r.userspace_addr,
                    mmap_offset: r.mmap_offset,
                })
                .collect();
            let mut owned = Vec::with_capacity(st.regions.len());
            for r in &st.regions {
                owned.push(take(fds, r.fd, "memory region")?);
            }
            let borrowed: Vec<_> = owned.iter().map(|f| f.as_fd()).collect();
            let mem = GuestMemory::from_fds(&specs, &borrowed)
                .map_err(|e| format!("memory table: {e:?}"))?;
            b.dev.set_numa_node(mem.numa_node());
            b.mem = Some(Arc::new(mem));
            b.mem_fds = owned;
        }
        let packed = b.packed();
        for (v, s) in b.vrings.iter_mut().zip(&st.vrings) {
            let size_ok = s.num == 0
                || if packed {
                    virtq::packed::valid_size(u32::from(s.num))
                } else {
                    virtq::ring::valid_size(u32::from(s.num))
                };
            if !size_ok {
                return Err(format!("ring size {} handed over", s.num));
            }
            *v = Vring {
                num: s.num,
                addr: s.addr.map(|a| VringAddr {
                    index: 0,
                    flags: a.flags,
                    desc: a.desc,
                    used: a.used,
                    avail: a.avail,
                    log: a.log,
                }),
                base: s.base,
                started: s.started,
                enabled: s.enabled,
                running: false,
                failed: s.failed,
                kick: s.kick.map(|i| take(fds, i, "kick")).transpose()?,
                call: s
                    .call
                    .map(|i| take(fds, i, "call").map(|f| Arc::new(File::from(f))))
                    .transpose()?,
                err: s.err.map(|i| take(fds, i, "error")).transpose()?,
            };
        }
        b.dev.set_features(b.acked, b.protocol);
        Ok(b)
    }

    /// The switch-over, in the importing process: sets each ring's final base (from
    /// [`Backend::stop_for_handover`] in the old process) and starts every ring `which`
    /// selects that is complete, as a message would have.
    pub fn start_handed_over(
        &mut self,
        bases: &[(usize, u16)],
        which: &dyn Fn(usize) -> bool,
    ) -> Result<(), String> {
        for &(i, base) in bases {
            let v = self
                .vrings
                .get_mut(i)
                .ok_or_else(|| format!("final base for ring {i}, which does not exist"))?;
            v.base = base;
        }
        self.reconcile_where(which)
            .map_err(|e: MsgError| format!("{e:?}"))
    }
}
