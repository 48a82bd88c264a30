//! The costliest descriptor chains a guest can post, for the bounded-work benchmark
//! (`examples/hostile-guest.rs`, `scripts/bench/hostile-guest.sh`) and the daemon's attack
//! test (`crates/vireo/tests/budget_attack.rs`). Built on the test frontend ([`MockGuest`]).
//!
//! - `zero`: heads into one ring-long loop of zero-length descriptors (all of the tx ring but
//!   the last 64 entries);
//! - `indirect`: indirect descriptors naming one table at the cap (1024 chained zero-length
//!   entries, the last holding a frame);
//! - `mrg`: valid 60-byte frames; with the rule `in_port=P,actions=in_port` they come back to
//!   this guest, whose rx ring holds only mergeable heads of 4 zero-length descriptors
//!   (maximal gathers, never consumed).
//!
//! Threads: the caller's (one guest, one thread).
use crate::frontend::MockGuest;
use virtq::ring::{Desc, DESC_SIZE, MAX_INDIRECT, VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT};

fn d(addr: u64, len: u32, flags: u16, next: u16) -> Desc {
    Desc {
        addr,
        len,
        flags,
        next,
    }
}

/// An armed attacker: its rings hold the chains, [`CostlyChains::post`] names them.
pub struct CostlyChains {
    heads: Vec<u16>,
    avail: u16,
    next: usize,
    size: u16,
}

impl CostlyChains {
    /// Writes the chains of `modes` (`zero`, `indirect`, `mrg`) into `g`'s first queue pair
    /// (rx ring 0, tx ring 1), whose rings must be at least 256 entries.
    pub fn arm(g: &mut MockGuest, modes: &[&str]) -> Result<CostlyChains, String> {
        let s = g.rings[1].addrs().size;
        if s < 256 {
            return Err("rings must hold at least 256 entries".into());
        }
        let loop_len = s - 64;
        // Guest rx: mergeable heads of 4 zero-length writable descriptors, filling the ring.
        for _ in 0..g.rings[0].addrs().size / 4 {
            g.rings[0].post_rx_chain(&[0; 4]);
        }
        let tx = &mut g.rings[1];
        let mem = tx.mem();
        for i in 0..loop_len {
            tx.write_desc(
                i,
                d(tx.buf_addr(0), 0, VIRTQ_DESC_F_NEXT, (i + 1) % loop_len),
            );
        }
        // One indirect table at the cap (16 KiB = 1024 entries) in entry `loop_len`'s buffer.
        let table = tx.buf_addr(loop_len);
        let frame_at = tx.buf_addr(loop_len + 1);
        let n = MAX_INDIRECT;
        let write = |at: u64, e: Desc| mem.write(at, &e.to_bytes()).map_err(|e| e.to_string());
        for i in 0..n - 1 {
            let e = d(frame_at, 0, VIRTQ_DESC_F_NEXT, (i + 1) as u16);
            write(table + u64::from(i) * DESC_SIZE, e)?;
        }
        write(
            table + u64::from(n - 1) * DESC_SIZE,
            d(frame_at, 12 + 60, 0, 0),
        )?;
        for i in 0..16 {
            let p = d(table, n * DESC_SIZE as u32, VIRTQ_DESC_F_INDIRECT, 0);
            tx.write_desc(loop_len + i, p);
        }
        // Valid frames (zeroed virtio-net header + 60 bytes) in the last 32 entries.
        let mut frame = vec![0u8; 12 + 60];
        frame[12..18].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x33]);
        frame[18..24].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x34]);
        frame[24..26].copy_from_slice(&[0x88, 0xb5]);
        for to in s - 32..s {
            mem.write(tx.buf_addr(to), &frame)
                .map_err(|e| e.to_string())?;
            tx.write_desc(to, d(tx.buf_addr(to), frame.len() as u32, 0, 0));
        }
        let mut heads: Vec<u16> = Vec::new();
        for m in modes {
            match *m {
                "zero" => heads.extend((0..8).map(|i| i * (loop_len / 8))),
                "indirect" => heads.extend((0..8).map(|i| loop_len + i)),
                "mrg" => heads.extend((0..8).map(|i| s - 32 + i)),
                other => return Err(format!("unknown mode {other}")),
            }
        }
        if heads.is_empty() {
            return Err("no modes".into());
        }
        Ok(CostlyChains {
            heads,
            avail: tx.used_idx(),
            next: 0,
            size: s,
        })
    }

    /// Names up to `max` chains in `g`'s tx avail ring, never more than the switch has
    /// returned (the ring never overflows); returns how many.
    pub fn post(&mut self, g: &mut MockGuest, max: u16) -> u16 {
        let tx = &mut g.rings[1];
        let pending = self.avail.wrapping_sub(tx.used_idx());
        let n = max.min(self.size.saturating_sub(pending));
        for _ in 0..n {
            tx.push_avail(self.heads[self.next % self.heads.len()]);
            self.next += 1;
        }
        self.avail = self.avail.wrapping_add(n);
        n
    }
}
