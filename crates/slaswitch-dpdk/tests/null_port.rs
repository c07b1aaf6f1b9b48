//! EAL in this process, with a null vdev: allocate, transmit, receive through the shim.
//! Needs root; runs without hugepages (--no-huge) so it can run anywhere DPDK is installed.

use slaswitch_dpdk::*;

#[test]
fn null_port_rx_tx_through_the_shim() {
    if !slaswitch_testkit::require(&[slaswitch_testkit::Component::Root]) {
        return;
    }
    let args: Vec<String> =
        ["shim-test", "--no-huge", "-m", "256", "--no-pci", "--file-prefix", "ss-shim-test", "--log-level", "error"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let eal = Eal::init(&args).expect("EAL");
    assert!(eal.tsc_hz() > 100_000_000);
    let pool = Mempool::new(&eal, "shim_test_pool", 4095, 256, 2048 + 128).expect("pool");
    let port = EthPort::create_vdev(&eal, "net_null_shimtest", "").expect("null vdev");
    port.setup(512, 512, &pool).expect("setup");
    let before = pool.available();
    let mut batch = [Mbuf(std::ptr::NonNull::dangling()); 32];
    assert!(pool.alloc_bulk(&mut batch));
    for m in batch.iter_mut() {
        assert!(m.set_len(64));
        m.data_mut().fill(0xab);
        assert_eq!(m.pkt_len(), 64);
        assert_eq!(m.data()[63], 0xab);
    }
    let sent = port.tx_burst(&mut batch);
    free_bulk(&batch[sent..]);
    let mut rx = [Mbuf(std::ptr::NonNull::dangling()); 32];
    let got = port.rx_burst(&mut rx);
    assert!(got > 0, "the null PMD always has packets to receive");
    free_bulk(&rx[..got]);
    assert_eq!(pool.available(), before, "every mbuf went back to the pool");
    let stats = port.stats().unwrap();
    assert_eq!(stats.opackets, sent as u64);
    port.stop_close().unwrap();
    remove_vdev("net_null_shimtest").unwrap();
}
