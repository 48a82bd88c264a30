//! vhost-user message decoder and backend state machine over arbitrary byte streams.
//!
//! Input: repeated `[fd_count_byte][12-byte header][payload]`; each message carries
//! `fd_count_byte % 4` fds of a 64 KiB memfd. Decoding stops where a real connection would be
//! dropped. Afterwards the device is polled, so rings the fuzzer managed to start run too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packet::{Batch, Packet, Pool};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, OnceLock};
use vhost::backend::Backend;
use vhost::msg::{Header, Msg, HDR_SIZE};
use vhost::Device;

fn memfd() -> OwnedFd {
    static FD: OnceLock<OwnedFd> = OnceLock::new();
    let fd = FD.get_or_init(|| {
        let fd = rustix::fs::memfd_create("fuzz", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, 65536).unwrap();
        fd
    });
    fd.as_fd().try_clone_to_owned().unwrap()
}

fuzz_target!(|data: &[u8]| {
    let dev = Arc::new(Device::new(2));
    let mut backend = Backend::new(Arc::clone(&dev));
    let mut rest = data;
    while rest.len() > HDR_SIZE {
        let nfds = usize::from(rest[0] % 4);
        let mut h = [0u8; HDR_SIZE];
        h.copy_from_slice(&rest[1..=HDR_SIZE]);
        rest = &rest[HDR_SIZE + 1..];
        let Ok(hdr) = Header::decode(&h) else { break };
        let size = hdr.size as usize;
        if rest.len() < size {
            break;
        }
        let payload = rest[..size].to_vec();
        rest = &rest[size..];
        let fds = (0..nfds).map(|_| memfd()).collect();
        let _ = backend.handle(Msg { hdr, payload, fds });
    }
    let mut pool = Pool::new(0, 32);
    let mut out = Batch::new();
    for pair in 0..2 {
        dev.rx_burst(pair, &mut pool, &mut out);
        let _ = out.push(Packet::from_slice(&[0u8; 60]));
        dev.tx_burst(pair, &out);
        pool.put_batch(&mut out);
    }
    backend.reset();
    assert_eq!(dev.running_pairs(), 0);
});
