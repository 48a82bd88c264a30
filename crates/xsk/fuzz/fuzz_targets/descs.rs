//! Descriptors the kernel hands back (rx and completion rings), as arbitrary bytes: whatever
//! they say, an accepted rx descriptor is a byte range inside one frame of the pool that the
//! kernel held, and no frame is ever lost or counted twice.
#![no_main]
use libfuzzer_sys::fuzz_target;
use xsk::{FramePool, RawDesc};

const FS: u32 = 4096;
const FIRST: u32 = 8;
const COUNT: u32 = 16;

fuzz_target!(|data: &[u8]| {
    let mut pool = FramePool::new(FS, FIRST, COUNT);
    let mut given = std::collections::BTreeSet::new();
    for op in data.chunks(13) {
        if op.len() < 13 {
            break;
        }
        let addr = u64::from_le_bytes(op[1..9].try_into().unwrap());
        let len = u32::from_le_bytes(op[9..13].try_into().unwrap());
        match op[0] % 3 {
            0 => {
                if let Some(a) = pool.give() {
                    assert!(given.insert(a / u64::from(FS)), "frame given twice");
                }
            }
            1 => {
                let d = RawDesc {
                    addr,
                    len,
                    options: u32::from(op[0] >> 7),
                };
                let frame = addr / u64::from(FS);
                let held = given.contains(&frame);
                match pool.take_rx(d) {
                    Ok((a, l)) => {
                        assert!(held, "accepted a frame the kernel did not hold");
                        assert_eq!(a / u64::from(FS), (a + u64::from(l) - 1) / u64::from(FS));
                        assert!(l >= 14 && l <= FS);
                        given.remove(&frame);
                    }
                    Err(_) => {
                        // Reclaimed exactly when the address names a held frame.
                        if held {
                            given.remove(&frame);
                        }
                    }
                }
            }
            _ => {
                let frame = addr / u64::from(FS);
                let held = given.contains(&frame);
                assert_eq!(pool.take_completion(addr).is_ok(), held);
                if held {
                    given.remove(&frame);
                }
            }
        }
        assert_eq!(pool.in_kernel(), given.len());
        assert_eq!(pool.free_count() + pool.in_kernel(), COUNT as usize);
    }
});
