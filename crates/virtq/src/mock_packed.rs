//! A mock packed-ring driver (virtio 1.1 §2.8): the driver side of a packed virtqueue in plain
//! (anonymous) memory, to test [`crate::PackedQueue`] here and in other crates without a VM.
//! It trusts the device; hostile tests write raw descriptors with
//! [`PackedDriver::write_raw`].
//!
//! Threads: single-threaded test code.
use crate::mock::{TxLayout, MOCK_BASE, MOCK_BUF, MOCK_MAX_IND};
use crate::packed::*;
use crate::ring::{RingAddrs, DESC_SIZE};
use guestmem::{GuestMemory, GuestRange};
use std::collections::HashMap;
use std::sync::Arc;

fn round_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// The driver side of one packed virtqueue.
pub struct PackedDriver {
    mem: Arc<GuestMemory>,
    addrs: RingAddrs,
    desc: GuestRange,
    drv: GuestRange,
    dev: GuestRange,
    ind_base: u64,
    data_base: u64,
    /// Next position to make available, and the driver's wrap counter.
    avail: (u16, bool),
    /// Next position to read a used descriptor at, and its wrap counter.
    used: (u16, bool),
    /// Outstanding buffers: id → (ring positions, buffers `(gpa, len)`).
    inflight: HashMap<u16, (u16, Vec<(u64, u32)>)>,
    /// Ring positions held by outstanding buffers.
    held: u16,
    hdr_len: usize,
    /// Header bytes the next `send` puts over its zeroed virtio-net header.
    tx_hdr: Vec<u8>,
}

impl PackedDriver {
    /// Bytes of guest memory a mock packed ring of `size` entries needs.
    pub fn memory_size(size: u16) -> u64 {
        let s = u64::from(size);
        round_up(DESC_SIZE * s, 4096) + 2 * 4096 + s * DESC_SIZE * MOCK_MAX_IND + s * MOCK_BUF
    }

    /// A ring of `size` entries in fresh anonymous memory, both sides starting at ring
    /// position `start` with wrap counter `wrap` (to test wraparound).
    pub fn new(size: u16, start: u16, wrap: bool, hdr_len: usize) -> PackedDriver {
        let mem = GuestMemory::anonymous(&[(MOCK_BASE, Self::memory_size(size))])
            .expect("anonymous mapping for the mock driver");
        PackedDriver::with_memory(Arc::new(mem), MOCK_BASE, size, start, wrap, hdr_len)
    }

    /// A ring laid out at `base` in `mem` (which must hold [`PackedDriver::memory_size`] bytes).
    pub fn with_memory(
        mem: Arc<GuestMemory>,
        base: u64,
        size: u16,
        start: u16,
        wrap: bool,
        hdr_len: usize,
    ) -> PackedDriver {
        let s = u64::from(size);
        let drv = base + round_up(DESC_SIZE * s, 4096);
        let dev = drv + 4096;
        let ind_base = dev + 4096;
        let data_base = ind_base + s * DESC_SIZE * MOCK_MAX_IND;
        let desc_r = mem.range(base, DESC_SIZE * s, 16).expect("desc");
        // Every descriptor starts out used in the previous lap of `wrap`, so none is available.
        for i in 0..usize::from(size) {
            desc_r.write_u16(i * 16 + 14, used_flags(!wrap, false));
        }
        PackedDriver {
            addrs: RingAddrs {
                size,
                desc: base,
                avail: drv,
                used: dev,
            },
            desc: desc_r,
            drv: mem.range(drv, 4, 4).expect("drv"),
            dev: mem.range(dev, 4, 4).expect("dev"),
            mem,
            ind_base,
            data_base,
            avail: (start, wrap),
            used: (start, wrap),
            inflight: HashMap::new(),
            held: 0,
            hdr_len,
            tx_hdr: Vec::new(),
        }
    }

    /// The ring addresses to give the device (`avail`: driver area, `used`: device area).
    pub fn addrs(&self) -> RingAddrs {
        self.addrs
    }

    /// The memory the ring lives in.
    pub fn mem(&self) -> Arc<GuestMemory> {
        Arc::clone(&self.mem)
    }

    /// The driver's next avail position with its wrap counter in bit 15.
    pub fn avail_base(&self) -> u16 {
        join_base(self.avail.0, self.avail.1)
    }

    /// Ring positions free for new buffers.
    pub fn free(&self) -> u16 {
        self.addrs.size - self.held
    }

    /// Guest-physical address of ring position `i`'s data buffer.
    pub fn buf_addr(&self, i: u16) -> u64 {
        self.data_base + u64::from(i) * MOCK_BUF
    }

    fn step(&self, p: (u16, bool)) -> (u16, bool) {
        if p.0 + 1 == self.addrs.size {
            (0, !p.1)
        } else {
            (p.0 + 1, p.1)
        }
    }

    /// Writes a raw descriptor at ring position `pos`; its flags go last, with release.
    pub fn write_raw(&self, pos: u16, addr: u64, len: u32, id: u16, flags: u16) {
        let off = usize::from(pos) * 16;
        let a = self.addrs.desc + off as u64;
        self.mem.write(a, &addr.to_le_bytes()).expect("desc");
        self.mem.write(a + 8, &len.to_le_bytes()).expect("desc");
        self.mem.write(a + 12, &id.to_le_bytes()).expect("desc");
        self.desc.store_u16_release(off + 14, flags);
    }

    /// Avail flags for a descriptor written in driver lap `wrap`.
    pub fn avail_flags(wrap: bool) -> u16 {
        if wrap {
            DESC_F_AVAIL
        } else {
            DESC_F_USED
        }
    }

    /// Makes a chain of `descs` `(addr, len, flags)` available at the driver's position, the
    /// head's flags written last; the id is the head's position. Returns the id.
    pub fn post_chain(&mut self, descs: &[(u64, u32, u16)]) -> u16 {
        assert!(descs.len() as u16 <= self.free(), "mock ring full");
        let head = self.avail;
        let id = head.0;
        let mut p = head;
        let mut bufs = Vec::new();
        for (i, &(addr, len, fl)) in descs.iter().enumerate() {
            let last = i + 1 == descs.len();
            let flags = fl | if last { 0 } else { DESC_F_NEXT } | Self::avail_flags(p.1);
            if i > 0 {
                self.write_raw(p.0, addr, len, id, flags);
            }
            bufs.push((addr, len));
            p = self.step(p);
        }
        let (addr, len, fl) = descs[0];
        let flags = fl | if descs.len() > 1 { DESC_F_NEXT } else { 0 } | Self::avail_flags(head.1);
        self.write_raw(head.0, addr, len, id, flags);
        self.avail = p;
        self.held += descs.len() as u16;
        self.inflight.insert(id, (descs.len() as u16, bufs));
        id
    }

    /// Re-publishes the chain of one descriptor at the driver's position that a previous lap
    /// left there (benchmarks): only its flags change.
    pub fn repost_single(&mut self) {
        let (pos, wrap) = self.avail;
        let off = usize::from(pos) * 16;
        let flags = self.desc.read_u16(off + 14).unwrap_or(0) & (DESC_F_WRITE | DESC_F_NEXT);
        self.desc
            .store_u16_release(off + 14, flags | Self::avail_flags(wrap));
        self.avail = self.step(self.avail);
    }

    /// [`Self::send`] with `hdr` (up to the header's length) as the frame's virtio-net header.
    pub fn send_with_hdr(&mut self, hdr: &[u8], frame: &[u8], layout: TxLayout) -> u16 {
        self.tx_hdr = hdr.to_vec();
        let r = self.send(frame, layout);
        self.tx_hdr.clear();
        r
    }

    /// Makes `frame` (behind a zeroed virtio-net header) available for the device to read.
    pub fn send(&mut self, frame: &[u8], layout: TxLayout) -> u16 {
        let mut all = vec![0u8; self.hdr_len];
        let n = self.tx_hdr.len().min(self.hdr_len);
        all[..n].copy_from_slice(&self.tx_hdr[..n]);
        all.extend_from_slice(frame);
        let base = self.buf_addr(self.avail.0);
        self.mem.write(base, &all).expect("buf");
        let h = self.hdr_len;
        let pieces = |n: usize| -> Vec<(u64, u32, u16)> {
            let body = all.len() - h;
            let step = body.div_ceil(n.max(1)).max(1);
            let mut v = vec![(base, h as u32, 0)];
            let mut off = 0;
            while off < body {
                let k = step.min(body - off);
                v.push((base + (h + off) as u64, k as u32, 0));
                off += k;
            }
            v
        };
        match layout {
            TxLayout::Single => self.post_chain(&[(base, all.len() as u32, 0)]),
            TxLayout::Chained(n) => self.post_chain(&pieces(n)),
            TxLayout::Indirect(n) => {
                let v = pieces(n);
                assert!(v.len() as u64 <= MOCK_MAX_IND);
                let table = self.ind_base + u64::from(self.avail.0) * DESC_SIZE * MOCK_MAX_IND;
                self.write_table(table, &v);
                let len = (v.len() as u64 * DESC_SIZE) as u32;
                self.post_chain(&[(table, len, DESC_F_INDIRECT)])
            }
        }
    }

    /// Writes an indirect table of `(addr, len, flags)` entries at `gpa`.
    pub fn write_table(&self, gpa: u64, v: &[(u64, u32, u16)]) {
        for (i, &(a, l, f)) in v.iter().enumerate() {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&a.to_le_bytes());
            b[8..12].copy_from_slice(&l.to_le_bytes());
            b[14..].copy_from_slice(&f.to_le_bytes());
            self.mem
                .write(gpa + i as u64 * DESC_SIZE, &b)
                .expect("table");
        }
    }

    /// Address of ring position `pos`'s indirect table.
    pub fn table_addr(&self, pos: u16) -> u64 {
        self.ind_base + u64::from(pos) * DESC_SIZE * MOCK_MAX_IND
    }

    /// Makes `n` device-writable buffers of `len` bytes available (one descriptor each).
    pub fn post_rx(&mut self, n: usize, len: u32) {
        for _ in 0..n {
            let a = self.buf_addr(self.avail.0);
            self.post_chain(&[(a, len, DESC_F_WRITE)]);
        }
    }

    /// Makes one writable chain with descriptors of the given lengths available.
    pub fn post_rx_chain(&mut self, lens: &[u32]) {
        let mut p = self.avail;
        let mut v = Vec::new();
        for &l in lens {
            v.push((self.buf_addr(p.0), l, DESC_F_WRITE));
            p = self.step(p);
        }
        self.post_chain(&v);
    }

    /// Sets the driver event suppression area: `flags` (`EVENT_F_*`) and `off_wrap`.
    pub fn set_event(&self, flags: u16, off_wrap: u16) {
        self.drv.write_u16(0, off_wrap);
        self.drv.write_u16(2, flags);
    }

    /// The device's event suppression flags (what it asks of our kicks).
    pub fn device_event_flags(&self) -> u16 {
        self.dev.read_u16(2).unwrap_or(0xffff)
    }

    /// The driver's next used position, with its wrap counter in bit 15.
    pub fn used_base(&self) -> u16 {
        join_base(self.used.0, self.used.1)
    }

    /// Used descriptors `(id, len, flags)` the device returned since the last call. Panics on
    /// an id the driver has not made available (a device bug).
    pub fn take_used_flags(&mut self) -> Vec<(u16, u32, u16)> {
        let mut v = Vec::new();
        loop {
            let off = usize::from(self.used.0) * 16;
            let f = self.desc.load_u16_acquire(off + 14).expect("flags");
            let w = self.used.1;
            if (f & DESC_F_AVAIL != 0) != w || (f & DESC_F_USED != 0) != w || self.held == 0 {
                return v;
            }
            let gpa = self.addrs.desc + off as u64;
            let len = self.mem.read_obj::<u32>(gpa + 8).expect("len");
            let id = self.mem.read_obj::<u16>(gpa + 12).expect("id");
            let (n, _) = *self
                .inflight
                .get(&id)
                .unwrap_or_else(|| panic!("device used unknown id {id}"));
            for _ in 0..n {
                self.used = self.step(self.used);
            }
            self.held -= n;
            v.push((id, len, f));
        }
    }

    /// Used descriptors `(id, len)` since the last call.
    pub fn take_used(&mut self) -> Vec<(u16, u32)> {
        self.take_used_flags()
            .into_iter()
            .map(|(i, l, _)| (i, l))
            .collect()
    }

    fn chain_bytes(&mut self, id: u16, len: u32) -> Vec<u8> {
        let (_, bufs) = self.inflight.remove(&id).expect("known id");
        let mut out = Vec::new();
        let mut left = len as usize;
        for (a, l) in bufs {
            let n = (l as usize).min(left);
            let mut b = vec![0u8; n];
            self.mem.read(a, &mut b).expect("rx buf");
            out.extend_from_slice(&b);
            left -= n;
        }
        out
    }

    /// [`Self::recv`] keeping each frame's virtio-net header in front of it.
    pub fn recv_with_hdr(&mut self, mrg: bool) -> Vec<(u16, Vec<u8>)> {
        let h = self.hdr_len;
        self.hdr_len = 0;
        let r = self.recv(mrg);
        self.hdr_len = h;
        r
    }

    /// Received frames: joins mergeable buffers by `num_buffers` when `mrg`, strips headers.
    /// Each item is `(num_buffers, frame)`.
    pub fn recv(&mut self, mrg: bool) -> Vec<(u16, Vec<u8>)> {
        let used = self.take_used();
        let mut out = Vec::new();
        let mut i = 0;
        while i < used.len() {
            let (id, len) = used[i];
            let first = self.chain_bytes(id, len);
            let nbuf = if first.len() >= 12 {
                u16::from_le_bytes([first[10], first[11]])
            } else {
                0
            };
            let mut frame = first.get(self.hdr_len..).unwrap_or(&[]).to_vec();
            i += 1;
            if mrg {
                for _ in 1..nbuf {
                    if let Some(&(id, len)) = used.get(i) {
                        frame.extend(self.chain_bytes(id, len));
                        i += 1;
                    }
                }
            }
            out.push((nbuf, frame));
        }
        out
    }

    /// Forgets outstanding ids whose buffers the device returned (tx side after take_used).
    pub fn forget(&mut self, ids: &[(u16, u32)]) {
        for (id, _) in ids {
            self.inflight.remove(id);
        }
    }
}
