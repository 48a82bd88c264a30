//! A mock virtio driver: the driver side of a split ring in plain (anonymous) memory, to test
//! the device side here and in other crates without a VM. It trusts the device; tests that
//! need a hostile driver write raw descriptors and indices with [`MockDriver::write_desc`],
//! [`MockDriver::push_avail`] and [`MockDriver::set_avail_idx`].
//!
//! Threads: single-threaded test code.
use crate::ring::*;
use guestmem::{GuestMemory, GuestRange};
use std::sync::Arc;

/// Bytes of data buffer the mock reserves per descriptor index.
pub const MOCK_BUF: u64 = 16384;
/// Most entries in a mock indirect table.
pub const MOCK_MAX_IND: u64 = 16;
/// Guest-physical base of the mock's memory.
pub const MOCK_BASE: u64 = 0x10_0000;

/// How the mock lays out a transmitted frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxLayout {
    /// Header and frame in one descriptor.
    Single,
    /// Header in its own descriptor, the frame chained over `n` descriptors.
    Chained(usize),
    /// One indirect descriptor; its table holds the header and `n` frame pieces.
    Indirect(usize),
}

/// The driver side of one split virtqueue.
pub struct MockDriver {
    mem: Arc<GuestMemory>,
    addrs: RingAddrs,
    avail: GuestRange,
    used: GuestRange,
    ind_base: u64,
    data_base: u64,
    avail_idx: u16,
    last_used: u16,
    next_desc: u16,
    hdr_len: usize,
    /// Header bytes the next `send` puts over its zeroed virtio-net header.
    tx_hdr: Vec<u8>,
}

fn round_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl MockDriver {
    /// Bytes of guest memory a mock ring of `size` entries needs.
    pub fn memory_size(size: u16) -> u64 {
        let s = u64::from(size);
        let rings = round_up(desc_table_size(size), 4096)
            + round_up(avail_ring_size(size), 4096)
            + round_up(used_ring_size(size), 4096);
        rings + s * DESC_SIZE * MOCK_MAX_IND + s * MOCK_BUF
    }

    /// A ring of `size` entries in fresh anonymous memory, indices starting at `start_idx`
    /// (to test wraparound), with a `hdr_len`-byte virtio-net header.
    pub fn new(size: u16, start_idx: u16, hdr_len: usize) -> MockDriver {
        let mem = GuestMemory::anonymous(&[(MOCK_BASE, Self::memory_size(size))])
            .expect("anonymous mapping for the mock driver");
        MockDriver::with_memory(Arc::new(mem), MOCK_BASE, size, start_idx, hdr_len)
    }

    /// A ring laid out at `base` in `mem` (which must hold [`MockDriver::memory_size`] bytes).
    pub fn with_memory(
        mem: Arc<GuestMemory>,
        base: u64,
        size: u16,
        start_idx: u16,
        hdr_len: usize,
    ) -> MockDriver {
        let desc = base;
        let avail = desc + round_up(desc_table_size(size), 4096);
        let used = avail + round_up(avail_ring_size(size), 4096);
        let ind_base = used + round_up(used_ring_size(size), 4096);
        let data_base = ind_base + u64::from(size) * DESC_SIZE * MOCK_MAX_IND;
        let a = mem.range(avail, avail_ring_size(size), 2).expect("avail");
        let u = mem.range(used, used_ring_size(size), 4).expect("used");
        a.write_u16(2, start_idx);
        u.write_u16(2, start_idx);
        MockDriver {
            mem,
            addrs: RingAddrs {
                size,
                desc,
                avail,
                used,
            },
            avail: a,
            used: u,
            ind_base,
            data_base,
            avail_idx: start_idx,
            last_used: start_idx,
            next_desc: 0,
            hdr_len,
            tx_hdr: Vec::new(),
        }
    }

    /// The ring addresses to give the device.
    pub fn addrs(&self) -> RingAddrs {
        self.addrs
    }

    /// The memory the ring lives in.
    pub fn mem(&self) -> Arc<GuestMemory> {
        Arc::clone(&self.mem)
    }

    /// Guest-physical address of descriptor `i`'s data buffer.
    pub fn buf_addr(&self, i: u16) -> u64 {
        self.data_base + u64::from(i) * MOCK_BUF
    }

    fn alloc_desc(&mut self) -> u16 {
        let d = self.next_desc;
        self.next_desc = (d + 1) & (self.addrs.size - 1);
        d
    }

    /// Writes descriptor `i` raw.
    pub fn write_desc(&self, i: u16, d: Desc) {
        let gpa = self.addrs.desc + u64::from(i) * DESC_SIZE;
        self.mem.write(gpa, &d.to_bytes()).expect("desc in memory");
    }

    fn read_desc(&self, i: u16) -> Desc {
        let mut b = [0u8; 16];
        let gpa = self.addrs.desc + u64::from(i % self.addrs.size) * DESC_SIZE;
        self.mem.read(gpa, &mut b).expect("desc in memory");
        Desc::from_bytes(&b)
    }

    /// Puts `head` in the avail ring and publishes the new avail index.
    pub fn push_avail(&mut self, head: u16) {
        let slot = usize::from(self.avail_idx & (self.addrs.size - 1));
        self.avail.write_u16(4 + 2 * slot, head);
        self.avail_idx = self.avail_idx.wrapping_add(1);
        self.avail.store_u16_release(2, self.avail_idx);
    }

    /// Sets the published avail index raw (hostile tests).
    pub fn set_avail_idx(&mut self, idx: u16) {
        self.avail_idx = idx;
        self.avail.store_u16_release(2, idx);
    }

    /// Re-publishes the next `n` avail slots unchanged (benchmarks: the ring entries and
    /// descriptors from the previous lap are still valid).
    pub fn advance_avail(&mut self, n: u16) {
        self.avail_idx = self.avail_idx.wrapping_add(n);
        self.avail.store_u16_release(2, self.avail_idx);
    }

    /// Sets or clears VRING_AVAIL_F_NO_INTERRUPT.
    pub fn set_no_interrupt(&self, on: bool) {
        self.avail.write_u16(0, u16::from(on));
    }

    /// Sets the used_event field (event-idx).
    pub fn set_used_event(&self, v: u16) {
        self.avail
            .write_u16(4 + 2 * usize::from(self.addrs.size), v);
    }

    /// The device's used-ring flags.
    pub fn used_flags(&self) -> u16 {
        self.used.read_u16(0).unwrap_or(0)
    }

    /// The device's published used index.
    pub fn used_idx(&self) -> u16 {
        self.used.load_u16_acquire(2).unwrap_or(0)
    }

    fn hdr_and_frame(&self, frame: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; self.hdr_len];
        let n = self.tx_hdr.len().min(self.hdr_len);
        v[..n].copy_from_slice(&self.tx_hdr[..n]);
        v.extend_from_slice(frame);
        v
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
        let all = self.hdr_and_frame(frame);
        match layout {
            TxLayout::Single => {
                let d = self.alloc_desc();
                self.mem.write(self.buf_addr(d), &all).expect("buf");
                self.write_desc(d, desc(self.buf_addr(d), all.len(), 0, 0));
                self.push_avail(d);
                d
            }
            TxLayout::Chained(n) => {
                let pieces = split(&all[self.hdr_len..], n);
                let head = self.alloc_desc();
                let mut prev = head;
                let hdr = &all[..self.hdr_len];
                self.mem.write(self.buf_addr(head), hdr).expect("buf");
                let mut prev_desc = desc(self.buf_addr(head), hdr.len(), 0, 0);
                for p in pieces {
                    let d = self.alloc_desc();
                    self.mem.write(self.buf_addr(d), p).expect("buf");
                    prev_desc.flags |= VIRTQ_DESC_F_NEXT;
                    prev_desc.next = d;
                    self.write_desc(prev, prev_desc);
                    prev = d;
                    prev_desc = desc(self.buf_addr(d), p.len(), 0, 0);
                }
                self.write_desc(prev, prev_desc);
                self.push_avail(head);
                head
            }
            TxLayout::Indirect(n) => self.send_indirect(&all, n),
        }
    }

    fn send_indirect(&mut self, all: &[u8], n: usize) -> u16 {
        let head = self.alloc_desc();
        let table = self.ind_base + u64::from(head) * DESC_SIZE * MOCK_MAX_IND;
        let mut pieces = vec![&all[..self.hdr_len]];
        pieces.extend(split(&all[self.hdr_len..], n));
        assert!(pieces.len() as u64 <= MOCK_MAX_IND);
        let mut off = self.buf_addr(head);
        for (i, p) in pieces.iter().enumerate() {
            self.mem.write(off, p).expect("buf");
            let last = i + 1 == pieces.len();
            let flags = if last { 0 } else { VIRTQ_DESC_F_NEXT };
            let d = desc(off, p.len(), flags, (i + 1) as u16);
            self.mem
                .write(table + i as u64 * DESC_SIZE, &d.to_bytes())
                .expect("table");
            off += p.len() as u64;
        }
        let len = pieces.len() * DESC_SIZE as usize;
        self.write_desc(head, desc(table, len, VIRTQ_DESC_F_INDIRECT, 0));
        self.push_avail(head);
        head
    }

    /// Makes `n` device-writable buffers of `len` bytes available (one descriptor each).
    pub fn post_rx(&mut self, n: usize, len: u32) {
        for _ in 0..n {
            let d = self.alloc_desc();
            self.write_desc(
                d,
                desc(self.buf_addr(d), len as usize, VIRTQ_DESC_F_WRITE, 0),
            );
            self.push_avail(d);
        }
    }

    /// Makes one writable chain with descriptors of the given lengths available.
    pub fn post_rx_chain(&mut self, lens: &[u32]) {
        let ids: Vec<u16> = lens.iter().map(|_| self.alloc_desc()).collect();
        for (i, (&id, &len)) in ids.iter().zip(lens).enumerate() {
            let next = ids.get(i + 1).copied();
            let flags = VIRTQ_DESC_F_WRITE | next.map_or(0, |_| VIRTQ_DESC_F_NEXT);
            let d = desc(self.buf_addr(id), len as usize, flags, next.unwrap_or(0));
            self.write_desc(id, d);
        }
        self.push_avail(ids[0]);
    }

    /// Used entries `(id, len)` the device returned since the last call.
    pub fn take_used(&mut self) -> Vec<(u32, u32)> {
        let end = self.used_idx();
        let mut v = Vec::new();
        while self.last_used != end {
            let slot = u64::from(self.last_used & (self.addrs.size - 1));
            let gpa = self.addrs.used + 4 + 8 * slot;
            let id = self.mem.read_obj::<u32>(gpa).expect("used");
            let len = self.mem.read_obj::<u32>(gpa + 4).expect("used");
            v.push((id, len));
            self.last_used = self.last_used.wrapping_add(1);
        }
        v
    }

    /// Bytes the device wrote into the chain at `id`, up to `len`.
    fn chain_bytes(&self, id: u32, len: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let mut d = self.read_desc(id as u16);
        let mut left = len as usize;
        loop {
            let n = (d.len as usize).min(left);
            let mut b = vec![0u8; n];
            self.mem.read(d.addr, &mut b).expect("rx buf");
            out.extend_from_slice(&b);
            left -= n;
            if left == 0 || !d.has(VIRTQ_DESC_F_NEXT) {
                return out;
            }
            d = self.read_desc(d.next);
        }
    }

    /// [`Self::recv`] keeping each frame's virtio-net header in front of it.
    pub fn recv_with_hdr(&mut self, mrg: bool) -> Vec<(u16, Vec<u8>)> {
        let h = self.hdr_len;
        self.hdr_len = 0;
        let r = self.recv(mrg);
        self.hdr_len = h;
        r
    }

    /// Received frames: reads the used entries, joins mergeable buffers by `num_buffers` when
    /// `mrg`, strips headers. Each item is `(num_buffers, frame)`.
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
}

fn desc(addr: u64, len: usize, flags: u16, next: u16) -> Desc {
    Desc {
        addr,
        len: len as u32,
        flags,
        next,
    }
}

fn split(b: &[u8], n: usize) -> Vec<&[u8]> {
    let n = n.max(1);
    let step = b.len().div_ceil(n).max(1);
    let mut v: Vec<&[u8]> = b.chunks(step).collect();
    if v.is_empty() {
        v.push(&[]);
    }
    v
}
