//! One copy for large frames through vireod: two vhost-user frontends (the test's own
//! `MockGuest`, whose guest memory the test reads, so every byte that arrives can be checked)
//! and port-to-port flows. 1518-byte frames with a per-frame pattern arrive bit-exact in the
//! other guest; `port-stats` shows they took the one-copy path (rx on the sender's port, tx on
//! the receiver's); every transmit chain comes back to the sender exactly once, also when the
//! receiver has no buffers and each frame is dropped; small frames keep the two-copy path.
mod common;

use common::wait_until;
use common::Daemon;
use serde_json::Value;
use std::time::Duration;
use vhost::frontend::MockGuest;
use virtq::mock::TxLayout;

const SIZE: u16 = 256;

fn stats(d: &Daemon, port: &str) -> Value {
    d.json(&["port-stats", port])[0].clone()
}

fn one_copy(d: &Daemon, port: &str, dir: &str) -> u64 {
    stats(d, port)["one_copy"][dir].as_u64().unwrap_or(0)
}

/// Frame `i` of `len` bytes: UDP/IPv4 from vm1 to vm2, the payload a pattern of `i`.
fn frame(i: u32, len: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len)
        .map(|k| (k as u32).wrapping_mul(2_654_435_761).wrapping_add(i) as u8)
        .collect();
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..24].copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17]);
    f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    f
}

/// Waits until `g`'s guest rx ring (ring 0) has returned `n` frames; returns them.
fn receive(g: &mut MockGuest, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mrg = g.features & (1 << 15) != 0;
    wait_until(Duration::from_secs(10), || {
        got.extend(g.rings[0].recv(mrg).into_iter().map(|(_, f)| f));
        got.len() >= n
    });
    got
}

/// Waits until `g`'s guest tx ring (ring 1) has had `n` chains back; returns how many came.
fn returned(g: &mut MockGuest, n: usize) -> usize {
    let mut k = 0;
    wait_until(Duration::from_secs(10), || {
        k += g.rings[1].take_used().len();
        k >= n
    });
    // Give a duplicate the time to show.
    std::thread::sleep(Duration::from_millis(200));
    k + g.rings[1].take_used().len()
}

#[test]
fn large_frames_cross_guest_to_guest_bit_exact_with_one_copy() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let d = Daemon::start_with(&run, &["--pmd-cores", "0"]);
    d.ok(&["add-br", "br0", "internal=false"]);
    for p in ["vm1", "vm2"] {
        d.ok(&["add-port", "br0", p, "type=vhost-user"]);
    }
    d.ok(&["del-flows", "br0"]);
    d.ok(&["add-flow", "br0", "in_port=vm1,actions=output:vm2"]);
    let mut g1 = MockGuest::connect(&run.join("vm1.sock"), 1, SIZE, u64::MAX).expect("vm1");
    let mut g2 = MockGuest::connect(&run.join("vm2.sock"), 1, SIZE, u64::MAX).expect("vm2");
    assert!(
        wait_until(Duration::from_secs(10), || {
            let s = d.json(&["show"]).to_string();
            s.matches("\"running_queue_pairs\":1").count() >= 2
        }),
        "{}",
        d.ok(&["show"])
    );

    // 1518-byte frames over every tx layout the guest may use.
    g2.rings[0].post_rx(96 + 8, 2048);
    let frames: Vec<Vec<u8>> = (0..96).map(|i| frame(i, 1518)).collect();
    let layouts = [
        TxLayout::Single,
        TxLayout::Chained(1),
        TxLayout::Indirect(1),
    ];
    for (i, f) in frames.iter().enumerate() {
        g1.rings[1].send(f, layouts[i % 3]);
    }
    let got = receive(&mut g2, frames.len());
    assert_eq!(got.len(), frames.len(), "{}", stats(&d, "vm2"));
    for (i, (a, b)) in got.iter().zip(&frames).enumerate() {
        assert!(a == b, "frame {i} differs");
    }
    assert_eq!(returned(&mut g1, frames.len()), frames.len());
    // All 96 came in with one copy; the first (the flow's miss) was shown to the pipeline
    // whole, so it went out with two.
    let (rx1, tx2) = (one_copy(&d, "vm1", "rx"), one_copy(&d, "vm2", "tx"));
    assert_eq!((rx1, tx2), (96, 95), "{}", stats(&d, "vm1"));

    // Small frames: the two-copy path, counters unchanged.
    let small: Vec<Vec<u8>> = (0..8).map(|i| frame(1000 + i, 128)).collect();
    for f in &small {
        g1.rings[1].send(f, TxLayout::Single);
    }
    assert_eq!(receive(&mut g2, small.len()), small);
    assert_eq!(returned(&mut g1, small.len()), small.len());
    assert_eq!(one_copy(&d, "vm1", "rx"), 96);

    // The receiver has no buffers left: each large frame is dropped (counted), and still
    // every chain goes back to the sender, once.
    let drops = |d: &Daemon| stats(d, "vm2")["drops"]["queue-full"].as_u64().unwrap_or(0);
    let before = drops(&d);
    for i in 0..40 {
        g1.rings[1].send(&frame(2000 + i, 1518), TxLayout::Single);
    }
    assert_eq!(returned(&mut g1, 40), 40);
    assert!(
        wait_until(Duration::from_secs(5), || drops(&d) >= before + 40),
        "{}",
        stats(&d, "vm2")
    );
    assert_eq!(one_copy(&d, "vm1", "rx"), 136);
    assert_eq!(one_copy(&d, "vm2", "tx"), 95);
    drop((g1, g2));
}
