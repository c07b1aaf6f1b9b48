//! EAL in this process, with a null vdev and a vhost vdev: allocate, transmit, receive through
//! the shim.
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
    let eal = Eal::init(0, &args).expect("EAL");
    assert!(eal.tsc_hz() > 100_000_000);
    let pool = Mempool::new(&eal, "shim_test_pool", 4095, 256, 2048 + 128).expect("pool");
    let port = EthPort::create_vdev(&eal, "net_null_shimtest", "").expect("null vdev");
    port.setup(512, 512, &pool).expect("setup");
    let before = pool.available();
    let mut batch = MbufBatch::new();
    assert!(batch.alloc(&pool, MAX_BURST));
    assert_eq!(batch.len(), MAX_BURST);
    for m in batch.as_mut_slice() {
        assert!(m.set_len(64));
        m.data_mut().fill(0xab);
        assert_eq!(m.pkt_len(), 64);
        assert_eq!(m.data()[63], 0xab);
    }
    let copy = pool.copy(&batch.as_slice()[0]).expect("a copy");
    assert_eq!(copy.data(), batch.as_slice()[0].data());
    drop(copy);
    let sent = batch.tx_burst(&port);
    assert_eq!(batch.len(), MAX_BURST - sent, "the unsent stay, at the front");
    drop(batch);
    let mut rx = MbufBatch::new();
    let got = rx.rx_burst(&port, MAX_BURST);
    assert!(got > 0, "the null PMD always has packets to receive");
    let mut i = 0;
    rx.retain(|_| {
        i += 1;
        i % 2 == 0
    });
    assert_eq!(rx.len(), got / 2);
    // A drain stopped early frees what it did not hand out.
    let first = rx.drain().next();
    assert!(first.is_some() && rx.is_empty());
    drop(first);
    // A drain hands its rest over in one move; each mbuf keeps one owner.
    let got = rx.rx_burst(&port, MAX_BURST);
    assert!(got > 4);
    let mut to = MbufBatch::new();
    {
        let mut drain = rx.drain();
        assert_eq!((drain.len(), drain.rest().len()), (got, got));
        drop(drain.next());
        assert_eq!(drain.move_to(&mut to, 3), 3);
        assert_eq!(drain.rest().len(), got - 4);
        assert_eq!(drain.move_to(&mut to, MAX_BURST), got - 4, "no more than are left");
        assert!(drain.next().is_none());
    }
    assert_eq!((rx.len(), to.len()), (0, got - 1));
    drop(to);
    assert_eq!(pool.available(), before, "every mbuf went back to the pool");
    let stats = port.stats().unwrap();
    assert_eq!(stats.opackets, sent as u64);
    // Only a vhost port is received from through the vhost library; a port never attached
    // gives nothing that way.
    assert!(port.receive_vhost_directly(&pool).is_err());
    assert_eq!(MbufBatch::new().receive(&port, RxPath::VhostDirect, 0, MAX_BURST), 0);
    port.stop_close().unwrap();
    remove_vdev("net_null_shimtest").unwrap();
    vhost_port_without_a_guest(&eal, &pool);
}

/// A vhost port with no guest attaches to the direct receive, receives nothing, and closes.
fn vhost_port_without_a_guest(eal: &Eal, pool: &Mempool) {
    let socket = std::env::temp_dir().join(format!("ss-shim-test-{}.sock", std::process::id()));
    let args = format!("iface={},queues=1,client=0", socket.display());
    let port = EthPort::create_vdev(eal, "net_vhost_shimtest", &args).expect("vhost vdev");
    let setup = PortSetup { partial_checksums: true, ..PortSetup::default() };
    port.setup_with(pool, &setup).expect("setup");
    port.receive_vhost_directly(pool).expect("a started vhost port taking its guest's partial checksums");
    let mut batch = MbufBatch::new();
    assert_eq!(batch.receive(&port, RxPath::VhostDirect, 0, MAX_BURST), 0, "no guest, no frames");
    port.stop_close().unwrap();
    remove_vdev("net_vhost_shimtest").unwrap();
    let _ = std::fs::remove_file(&socket);
    // Without the checksum offload net_vhost would complete checksums in software on receive.
    let port = EthPort::create_vdev(eal, "net_vhost_shimtest2", &args).expect("vhost vdev");
    port.setup_with(pool, &PortSetup::default()).expect("setup");
    assert!(port.receive_vhost_directly(pool).is_err());
    port.stop_close().unwrap();
    remove_vdev("net_vhost_shimtest2").unwrap();
    let _ = std::fs::remove_file(socket);
}
