//! One burst of 32 frames of 64 bytes through a split ring and back, against the mock driver:
//! what the dequeue (guest tx) and enqueue (guest rx) of a vhost-user port cost per burst, with
//! the virtio-net offloads off and, where the build has them, on (the header read once and
//! checked per frame). Run: `cargo bench -p virtq --features mock --bench burst`.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use packet::{Batch, Packet, Pool};
use virtq::mock::{MockDriver, TxLayout};
use virtq::{NetFeatures, Queue};

fn frame() -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f
}

fn bench(c: &mut Criterion, name: &str, feat: NetFeatures) {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(32));
    let f = frame();
    // Guest tx → dequeue: the driver re-posts 32 single-descriptor frames per iteration.
    let mut drv = MockDriver::new(256, 0, 12);
    let mut q = Queue::new(drv.mem(), drv.addrs(), feat, 0, 0).unwrap();
    let mut pool = Pool::new(0, 256);
    let mut out = Batch::new();
    g.bench_function("dequeue_32x64B", |b| {
        b.iter(|| {
            for _ in 0..32 {
                drv.send(&f, TxLayout::Single);
            }
            let r = q.dequeue(&mut pool, &mut out);
            black_box(r.packets);
            pool.put_batch(&mut out);
            drv.take_used();
        })
    });
    // Packets → guest rx: 32 buffers posted per iteration.
    let mut drv = MockDriver::new(256, 0, 12);
    let mut q = Queue::new(drv.mem(), drv.addrs(), feat, 0, 0).unwrap();
    let pkts: Vec<Packet> = (0..32).map(|_| Packet::from_slice(&f)).collect();
    g.bench_function("enqueue_32x64B", |b| {
        b.iter(|| {
            drv.post_rx(32, 2048);
            let r = q.enqueue(&pkts);
            black_box(r.packets);
            drv.take_used();
        })
    });
    g.finish();
}

fn burst(c: &mut Criterion) {
    let off = NetFeatures {
        hdr_len: 12,
        mrg_rxbuf: true,
        ..NetFeatures::default()
    };
    bench(c, "split_offloads_off", off);
    #[cfg(feature = "offloads")]
    bench(
        c,
        "split_offloads_on",
        NetFeatures {
            host: packet::vnet::Offloads::ALL,
            guest: packet::vnet::Offloads::ALL,
            ..off
        },
    );
}

criterion_group!(benches, burst);
criterion_main!(benches);
