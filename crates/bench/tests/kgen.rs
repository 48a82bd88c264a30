//! vireo-kgen `tx` against the real kernel: run inside a namespace on one end of a veth
//! pair, it must deliver UDP frames of exactly the asked number of distinct 5-tuples, each
//! with a valid IPv4 header checksum, to the other end (read here with a packet socket).
//! Skips (fails under `VIREO_REQUIRE_PEERS=1`) without `ip`; needs root like every
//! namespace test.
//!
//! Threads: the test's own, a reader thread; vireo-kgen is a child process.
use std::collections::HashSet;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use testkit::veth::{have_ip, NsVeth};

fn checksum_ok(h: &[u8]) -> bool {
    let mut s: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s == 0xffff
}

/// What the host end received: distinct (source, destination port) pairs, frames with a
/// bad header checksum, frames from vireo-kgen in all.
fn read_flows(fd: OwnedFd, stop: Arc<AtomicBool>) -> (HashSet<([u8; 4], u16)>, u64, u64) {
    let (mut seen, mut bad, mut n) = (HashSet::new(), 0, 0);
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let Ok(r) = nix::sys::socket::recv(
            fd.as_raw_fd(),
            &mut buf,
            nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        ) else {
            std::thread::sleep(Duration::from_micros(100));
            continue;
        };
        let f = &buf[..r];
        // vireo-kgen's frames: IPv4/UDP from 02:00:00:00:00:01.
        if f.len() < 42 || f[6..12] != [2, 0, 0, 0, 0, 1] || f[12..14] != [8, 0] || f[23] != 17 {
            continue;
        }
        n += 1;
        if !checksum_ok(&f[14..34]) {
            bad += 1;
        }
        seen.insert((
            [f[26], f[27], f[28], f[29]],
            u16::from_be_bytes([f[36], f[37]]),
        ));
    }
    (seen, bad, n)
}

#[test]
fn tx_sends_the_asked_number_of_distinct_valid_flows() {
    if !have_ip() {
        return;
    }
    let pid = std::process::id();
    let v = NsVeth::new(
        &format!("kgt-{pid}"),
        &format!("kgt{pid}h"),
        &format!("kgt{pid}n"),
        "10.232.0.1/24",
        1,
    );
    let ifindex = ksys::sys::if_index(&v.host_if).unwrap();
    // Receives nothing until bound, then every frame of the host end.
    let fd = ksys::sys::packet_socket().unwrap();
    ksys::sys::bind_packet(std::os::fd::AsFd::as_fd(&fd), ifindex).unwrap();
    let _ = ksys::sys::set_buf(std::os::fd::AsFd::as_fd(&fd), true, 64 << 20);
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = Arc::clone(&stop);
    let reader = std::thread::spawn(move || read_flows(fd, s2));
    let flows = 1000u32;
    let out = Command::new("ip")
        .args(["netns", "exec", &v.ns])
        .arg(env!("CARGO_BIN_EXE_vireo-kgen"))
        .args(["--secs", "1", "tx", "--iface", &v.ns_if, "--len", "60"])
        .arg(format!("--flows={flows}"))
        .output()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let (seen, bad, n) = reader.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "vireo-kgen: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Tx-pps:") || text.contains("sent "), "{text}");
    assert!(n >= u64::from(flows), "only {n} frames arrived: {text}");
    assert_eq!(
        bad, 0,
        "{bad} of {n} frames with a bad IPv4 header checksum"
    );
    assert_eq!(
        seen.len(),
        flows as usize,
        "distinct 5-tuples among {n} frames"
    );
}
