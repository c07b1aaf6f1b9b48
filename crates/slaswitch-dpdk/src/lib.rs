#![warn(missing_docs)]
//! slaswitch-dpdk: the only door to DPDK. `csrc/shim.c` wraps the static-inline calls we use;
//! this file declares them and puts safe wrappers on top. No other crate declares a DPDK symbol.
//!
//! Hot-path packet access (data pointer, lengths) reads the mbuf fields directly at offsets that
//! [`Eal::init`] checks against the C compiler's `offsetof`, so no FFI call is paid per field.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::fmt;
use std::ptr::NonNull;

mod mbuf;

pub use mbuf::{Drain, Mbuf, MbufBatch, OffloadRequest, Pieces};

mod ffi {
    use super::*;

    #[repr(C)]
    #[derive(Default, Debug, PartialEq, Eq)]
    pub struct MbufLayout {
        pub size: u32,
        pub buf_addr: u32,
        pub data_off: u32,
        pub pkt_len: u32,
        pub data_len: u32,
        pub nb_segs: u32,
        pub next: u32,
        pub pool: u32,
        pub ol_flags: u32,
        pub rx_lro: u64,
        pub rx_l4_cksum_mask: u64,
        pub rx_l4_cksum_none: u64,
        pub tx_tcp_seg: u64,
        pub tx_tcp_cksum: u64,
        pub tx_udp_cksum: u64,
        pub tx_ip_cksum: u64,
        pub tx_ipv4: u64,
        pub tx_ipv6: u64,
    }

    /// A device's own counters (`rte_eth_stats`, the fields the switch reads).
    #[repr(C)]
    #[derive(Default, Debug, Clone, Copy)]
    pub struct EthStats {
        /// Packets received.
        pub ipackets: u64,
        /// Packets sent.
        pub opackets: u64,
        /// Bytes received.
        pub ibytes: u64,
        /// Bytes sent.
        pub obytes: u64,
        /// Packets the device dropped because its rx ring was full.
        pub imissed: u64,
        /// Receive errors.
        pub ierrors: u64,
        /// Transmit errors.
        pub oerrors: u64,
        /// Receives that found no mbuf.
        pub rx_nombuf: u64,
    }

    extern "C" {
        pub fn ss_mbuf_layout(l: *mut MbufLayout);
        pub fn ss_eal_init(argc: c_int, argv: *mut *mut c_char) -> c_int;
        pub fn ss_eal_cleanup() -> c_int;
        pub fn ss_errno() -> c_int;
        pub fn ss_strerror(err: c_int) -> *const c_char;
        pub fn ss_tsc_hz() -> u64;
        pub fn ss_thread_register() -> c_int;
        pub fn ss_thread_unregister();
        pub fn ss_lcore_id() -> u32;
        pub fn ss_pktmbuf_pool_create(
            name: *const c_char,
            n: u32,
            cache: u32,
            data_room: u16,
            socket: c_int,
        ) -> *mut c_void;
        pub fn ss_mempool_free(mp: *mut c_void);
        pub fn ss_mempool_avail(mp: *const c_void) -> u32;
        pub fn ss_vdev_create(name: *const c_char, args: *const c_char) -> c_int;
        pub fn ss_max_eth_ports() -> c_uint;
        pub fn ss_eth_dev_count_total() -> c_uint;
        pub fn ss_vdev_remove(name: *const c_char) -> c_int;
        pub fn ss_eth_port_by_name(name: *const c_char, port: *mut u16) -> c_int;
        pub fn ss_eth_setup(
            port: u16,
            nb_rxd: u16,
            nb_txd: u16,
            mp: *mut c_void,
            l4_csum_rx: c_int,
            mtu: u16,
            queues: u16,
        ) -> c_int;
        pub fn ss_mbuf_tso_segsz(m: *const c_void) -> u16;
        pub fn ss_eth_max_mtu(port: u16) -> c_int;
        pub fn ss_mbuf_set_tx_offload(m: *mut c_void, l2: u8, l3: u16, l4: u8, segsz: u16, flags: u64);
        pub fn ss_vhost_features(port: u16) -> u64;
        pub fn ss_eth_stop_close(port: u16) -> c_int;
        pub fn ss_eth_mac(port: u16, mac: *mut u8) -> c_int;
        pub fn ss_eth_link_up(port: u16) -> c_int;
        pub fn ss_eth_stats(port: u16, s: *mut EthStats) -> c_int;
        pub fn ss_rx_burst(port: u16, queue: u16, pkts: *mut *mut c_void, n: u16) -> u16;
        pub fn ss_vhost_rx_attach(port: u16, mp: *mut c_void) -> c_int;
        pub fn ss_vhost_rx_burst(port: u16, queue: u16, pkts: *mut *mut c_void, n: u16) -> u16;
        pub fn ss_tx_burst(port: u16, queue: u16, pkts: *mut *mut c_void, n: u16) -> u16;
        pub fn ss_pktmbuf_alloc_bulk(mp: *mut c_void, pkts: *mut *mut c_void, n: u32) -> c_int;
        pub fn ss_pktmbuf_free_bulk(pkts: *mut *mut c_void, n: u32);
        pub fn ss_pktmbuf_free(m: *mut c_void);
        pub fn ss_pktmbuf_copy(m: *mut c_void, mp: *mut c_void) -> *mut c_void;
        pub fn ss_pktmbuf_set_len(m: *mut c_void, len: u16) -> c_int;
        pub fn ss_pktmbuf_linearize(m: *mut c_void) -> c_int;
        pub fn ss_dev_probe(devargs: *const c_char) -> c_int;
        pub fn ss_eth_dev_remove(port: u16) -> c_int;
    }
}

pub use ffi::EthStats;

/// Offsets in `struct rte_mbuf` (DPDK 22.11, x86_64), checked at [`Eal::init`].
pub(crate) const OFF_BUF_ADDR: usize = 0;
pub(crate) const OFF_DATA_OFF: usize = 16;
pub(crate) const OFF_NB_SEGS: usize = 20;
pub(crate) const OFF_PKT_LEN: usize = 36;
pub(crate) const OFF_DATA_LEN: usize = 40;
pub(crate) const OFF_OL_FLAGS: usize = 24;
pub(crate) const OFF_NEXT: usize = 64;

/// Offload flags of `rte_mbuf.ol_flags` (DPDK 22.11), checked at [`Eal::init`].
pub mod ol_flags {
    /// A received TCP segment larger than the MTU, to be cut at its `tso_segsz` (virtio's GSO).
    pub const RX_LRO: u64 = 1 << 16;
    /// The receive L4 checksum state's bits.
    pub const RX_L4_CKSUM_MASK: u64 = (1 << 3) | (1 << 8);
    /// ... and the state "not computed": the frame carries a partial checksum.
    pub const RX_L4_CKSUM_NONE: u64 = (1 << 3) | (1 << 8);
    /// Send as TCP segments of `tso_segsz` payload bytes.
    pub const TX_TCP_SEG: u64 = 1 << 50;
    /// The TCP checksum is partial; the receiver completes it.
    pub const TX_TCP_CKSUM: u64 = 1 << 52;
    /// The UDP checksum is partial; the receiver completes it.
    pub const TX_UDP_CKSUM: u64 = 3 << 52;
    /// Fill in the IPv4 header checksum.
    pub const TX_IP_CKSUM: u64 = 1 << 54;
    /// An IPv4 packet (with TX_TCP_SEG or an L4 checksum flag).
    pub const TX_IPV4: u64 = 1 << 55;
    /// An IPv6 packet (with TX_TCP_SEG or an L4 checksum flag).
    pub const TX_IPV6: u64 = 1 << 56;
}

/// Virtio-net feature bits (virtio 1.1 Sec. 5.1.3) a vhost port's guest may have negotiated.
pub mod virtio_features {
    /// The guest takes frames with a partial checksum.
    pub const GUEST_CSUM: u64 = 1 << 1;
    /// The guest takes TCP/IPv4 segments larger than its MTU.
    pub const GUEST_TSO4: u64 = 1 << 7;
    /// The guest takes TCP/IPv6 segments larger than its MTU.
    pub const GUEST_TSO6: u64 = 1 << 8;
    /// The guest sends frames with a partial checksum.
    pub const CSUM: u64 = 1 << 0;
    /// The guest sends TCP/IPv4 segments larger than its MTU.
    pub const HOST_TSO4: u64 = 1 << 11;
    /// The guest sends TCP/IPv6 segments larger than its MTU.
    pub const HOST_TSO6: u64 = 1 << 12;
    /// Receive buffers may be merged for one large frame.
    pub const MRG_RXBUF: u64 = 1 << 15;
}

/// Packets in one rx or tx burst (OVS-DPDK's batch size too).
pub const MAX_BURST: usize = 32;

/// How a port's frames are received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxPath {
    /// `rte_eth_rx_burst`, through the port's driver.
    Ethdev,
    /// A vhost port's guest's ring through the vhost library itself, as OVS-DPDK does
    /// ([`EthPort::receive_vhost_directly`]).
    VhostDirect,
}

/// An error from DPDK, with the call that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkError {
    /// The DPDK function that failed.
    pub call: String,
    /// Its return code (a negative errno, usually).
    pub code: i32,
    /// `rte_strerror` of the code.
    pub message: String,
}

impl fmt::Display for DpdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {} (code {})", self.call, self.message, self.code)
    }
}

impl std::error::Error for DpdkError {}

fn error(call: impl Into<String>, code: i32) -> DpdkError {
    let code = code.abs();
    // SAFETY: rte_strerror returns a pointer to a static or thread-local NUL-terminated string.
    let message = unsafe { std::ffi::CStr::from_ptr(ffi::ss_strerror(code)) }.to_string_lossy().into_owned();
    DpdkError { call: call.into(), code, message }
}

fn last_error(call: impl Into<String>) -> DpdkError {
    // SAFETY: reads the per-thread rte_errno.
    error(call, unsafe { ffi::ss_errno() })
}

fn cstring(s: &str) -> CString {
    CString::new(s).expect("DPDK names and arguments contain no NUL byte")
}

/// Pins the calling thread to `core` (threads and processes it starts later inherit the set).
pub fn pin_current_thread(core: usize) -> std::io::Result<()> {
    pin_current_thread_to(&[core])
}

/// Pins the calling thread to `cores` (threads and processes it starts later inherit the set).
pub fn pin_current_thread_to(cores: &[usize]) -> std::io::Result<()> {
    if cores.is_empty() || cores.iter().any(|&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes within it for core < CPU_SETSIZE.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &core in cores {
            libc::CPU_SET(core, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    match rc {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// The initialised Environment Abstraction Layer. DPDK allows one per process.
pub struct Eal {
    tsc_hz: u64,
}

impl Eal {
    /// Runs `rte_eal_init` with `main_core` as its one lcore (`-l`) and `args` (the program name
    /// first, no `-l`), then checks the mbuf layout. The calling thread is pinned to `main_core`
    /// first: EAL places its control threads (vhost-user's socket events, telemetry, interrupts)
    /// on the caller's allowed cores less the lcores, which left unpinned are the PMD cores.
    pub fn init(main_core: usize, args: &[String]) -> Result<Eal, DpdkError> {
        pin_current_thread(main_core).map_err(|e| {
            error(format!("sched_setaffinity(core {main_core})"), e.raw_os_error().unwrap_or(libc::EINVAL))
        })?;
        let mut args = args.to_vec();
        args.splice(1.min(args.len())..1.min(args.len()), ["-l".to_string(), main_core.to_string()]);
        let cargs: Vec<CString> = args.iter().map(|a| cstring(a)).collect();
        let mut argv: Vec<*mut c_char> = cargs.iter().map(|a| a.as_ptr() as *mut c_char).collect();
        // SAFETY: argv points at NUL-terminated strings that outlive the call.
        let rc = unsafe { ffi::ss_eal_init(argv.len() as c_int, argv.as_mut_ptr()) };
        if rc < 0 {
            return Err(last_error(format!("rte_eal_init({})", args.join(" "))));
        }
        let mut layout = ffi::MbufLayout::default();
        // SAFETY: fills a plain struct.
        unsafe { ffi::ss_mbuf_layout(&mut layout) };
        let expected = (OFF_BUF_ADDR, OFF_DATA_OFF, OFF_NB_SEGS, OFF_PKT_LEN, OFF_DATA_LEN, OFF_NEXT);
        let actual = (
            layout.buf_addr as usize,
            layout.data_off as usize,
            layout.nb_segs as usize,
            layout.pkt_len as usize,
            layout.data_len as usize,
            layout.next as usize,
        );
        assert_eq!(expected, actual, "rte_mbuf layout differs from what slaswitch-dpdk was written for (DPDK 22.11)");
        let flags = (
            layout.ol_flags as usize,
            [layout.rx_lro, layout.rx_l4_cksum_mask, layout.rx_l4_cksum_none, layout.tx_tcp_seg],
            [layout.tx_tcp_cksum, layout.tx_udp_cksum, layout.tx_ip_cksum, layout.tx_ipv4, layout.tx_ipv6],
        );
        use ol_flags::*;
        let ours = (
            OFF_OL_FLAGS,
            [RX_LRO, RX_L4_CKSUM_MASK, RX_L4_CKSUM_NONE, TX_TCP_SEG],
            [TX_TCP_CKSUM, TX_UDP_CKSUM, TX_IP_CKSUM, TX_IPV4, TX_IPV6],
        );
        assert_eq!(flags, ours, "rte_mbuf offload flags differ from what slaswitch-dpdk was written for (DPDK 22.11)");
        // SAFETY: EAL is initialised.
        let tsc_hz = unsafe { ffi::ss_tsc_hz() };
        Ok(Eal { tsc_hz })
    }

    /// The TSC's frequency as EAL measured it.
    pub fn tsc_hz(&self) -> u64 {
        self.tsc_hz
    }

    /// A function a new thread calls to register itself with EAL (an lcore id, so per-lcore
    /// mempool caches work). Holding the `&Eal` proves EAL is up when the function is made.
    pub fn thread_registrar(&self) -> impl FnOnce() -> Result<u32, DpdkError> + Send + 'static {
        || {
            // SAFETY: EAL was initialised before this closure was created.
            if unsafe { ffi::ss_thread_register() } < 0 {
                return Err(last_error("rte_thread_register"));
            }
            // SAFETY: plain getter.
            Ok(unsafe { ffi::ss_lcore_id() })
        }
    }
}

/// Gives back the lcore id a thread that is about to end took with [`Eal::thread_registrar`], so
/// threads that come and go (a kernel port's sender) do not use up DPDK's lcores. Does nothing
/// for a thread that has none.
pub fn unregister_current_thread() {
    // SAFETY: EAL's call checks the thread's own registration and touches nothing else.
    unsafe { ffi::ss_thread_unregister() }
}

impl Drop for Eal {
    fn drop(&mut self) {
        // SAFETY: every port and pool is gone by now (they borrow nothing, but the owner drops
        // them first); cleanup releases hugepage files.
        unsafe { ffi::ss_eal_cleanup() };
    }
}

/// The TSC, read inline (the cycle counter C2QoS accounts in; seed 000 Sec. V uses rdtsc).
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86_64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The TSC, read once everything before it has finished, stores included (`mfence; lfence`):
/// to time a piece of code on its own. A plain `rdtsc` may run while earlier loads and stores
/// are still in flight, so an interval that starts after a batch's egress would also hold the
/// tail of that egress's memory traffic.
#[inline(always)]
pub fn rdtsc_after_all() -> u64 {
    // SAFETY: fences and rdtsc have no preconditions on x86_64.
    unsafe {
        core::arch::x86_64::_mm_mfence();
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
}

/// The TSC, read once every earlier instruction has finished (`lfence`), without waiting for
/// earlier stores to reach the cache: to end an interval timed from [`rdtsc_after_all`]. The
/// interval then holds the timed code's loads and computation, cache misses included, but not
/// the time its stores take to drain, which the core overlaps with whatever comes next (the
/// PMD's next batch). Ending with `mfence` too would charge each store miss its full latency.
#[inline(always)]
pub fn rdtsc_after_loads() -> u64 {
    // SAFETY: lfence and rdtsc have no preconditions on x86_64.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
}

/// Asks the core to bring every cache line of the `len` bytes at `start` into its first-level
/// cache (`prefetcht0`), without waiting for them: a hint, so any address will do.
#[inline(always)]
pub fn prefetch(start: *const u8, len: usize) {
    let first = start as usize & !63;
    for line in (first..start as usize + len.max(1)).step_by(64) {
        // SAFETY: a prefetch never faults and reads nothing the program sees, whatever the address.
        unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(line as *const i8) }
    }
}

/// A packet mbuf pool.
pub struct Mempool {
    ptr: NonNull<c_void>,
}

// SAFETY: DPDK mempools are multi-producer multi-consumer safe.
unsafe impl Send for Mempool {}
unsafe impl Sync for Mempool {}

impl Mempool {
    /// `count` mbufs of `data_room` bytes (2048 + 128 headroom is DPDK's default).
    pub fn new(_eal: &Eal, name: &str, count: u32, cache_size: u32, data_room: u16) -> Result<Mempool, DpdkError> {
        let cname = cstring(name);
        // SAFETY: EAL is initialised (the `&Eal` proves it); the name is NUL-terminated.
        let ptr = unsafe { ffi::ss_pktmbuf_pool_create(cname.as_ptr(), count, cache_size, data_room, -1) };
        NonNull::new(ptr)
            .map(|ptr| Mempool { ptr })
            .ok_or_else(|| last_error(format!("rte_pktmbuf_pool_create({name}, {count} mbufs)")))
    }

    /// Mbufs free in the pool now.
    pub fn available(&self) -> u32 {
        // SAFETY: valid pool.
        unsafe { ffi::ss_mempool_avail(self.ptr.as_ptr()) }
    }

    /// A deep copy of `m` from this pool (for flooding); `None` when the pool is empty.
    pub fn copy(&self, m: &Mbuf) -> Option<Mbuf> {
        // SAFETY: m is a valid mbuf; the copy is a new mbuf this caller owns.
        let c = unsafe { ffi::ss_pktmbuf_copy(m.as_ptr(), self.ptr.as_ptr()) };
        // SAFETY: a non-null result is a fresh mbuf no one else holds.
        NonNull::new(c.cast()).map(|p| unsafe { Mbuf::from_raw(p) })
    }

    pub(crate) fn as_ptr(&self) -> *mut c_void {
        self.ptr.as_ptr()
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        // SAFETY: the pool is ours; its mbufs must have been returned.
        unsafe { ffi::ss_mempool_free(self.ptr.as_ptr()) }
    }
}

/// How a port is set up ([`EthPort::setup_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortSetup {
    /// Descriptors of each rx ring.
    pub rx_ring: u16,
    /// Descriptors of each tx ring.
    pub tx_ring: u16,
    /// Rx and tx queue pairs.
    pub queues: u16,
    /// Received frames keep the partial TCP/UDP checksums their senders left (flagged
    /// [`ol_flags::RX_L4_CKSUM_NONE`]) for the switch to complete where needed.
    pub partial_checksums: bool,
    /// The MTU given to the device where it has one (0: its own).
    pub mtu_bytes: u16,
}

impl Default for PortSetup {
    fn default() -> Self {
        PortSetup { rx_ring: 1024, tx_ring: 1024, queues: 1, partial_checksums: false, mtu_bytes: 0 }
    }
}

/// An ethdev port (a vdev: vhost-user, virtio-user, tap, af_packet, null; or a PCI NIC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EthPort(pub u16);

impl EthPort {
    /// Creates a virtual device (`rte_vdev_init`) and returns its port.
    pub fn create_vdev(_eal: &Eal, name: &str, args: &str) -> Result<EthPort, DpdkError> {
        // SAFETY: plain reads of DPDK's build constant and its device table.
        let (max, used) = unsafe { (ffi::ss_max_eth_ports(), ffi::ss_eth_dev_count_total()) };
        if used >= max {
            // rte_vdev_init would fail with a bare EPERM; say which limit it is.
            return Err(DpdkError {
                call: format!("rte_vdev_init({name}, {args})"),
                code: libc::ENOSPC,
                message: format!(
                    "all {max} ethdev ports this DPDK build holds (RTE_MAX_ETHPORTS) are in use; remove a port first"
                ),
            });
        }
        let (cname, cargs) = (cstring(name), cstring(args));
        // SAFETY: EAL initialised; strings NUL-terminated.
        let rc = unsafe { ffi::ss_vdev_create(cname.as_ptr(), cargs.as_ptr()) };
        if rc < 0 {
            return Err(error(format!("rte_vdev_init({name}, {args})"), rc));
        }
        Self::by_name(name)
    }

    /// The port of an existing device, by its DPDK name.
    pub fn by_name(name: &str) -> Result<EthPort, DpdkError> {
        let cname = cstring(name);
        let mut id = 0u16;
        // SAFETY: out-pointer to a local.
        let rc = unsafe { ffi::ss_eth_port_by_name(cname.as_ptr(), &mut id) };
        if rc < 0 {
            return Err(error(format!("rte_eth_dev_get_port_by_name({name})"), rc));
        }
        Ok(EthPort(id))
    }

    /// One rx and one tx queue of the given ring sizes, started, promiscuous.
    pub fn setup(&self, rx_ring: u16, tx_ring: u16, pool: &Mempool) -> Result<(), DpdkError> {
        self.setup_with(pool, &PortSetup { rx_ring, tx_ring, ..PortSetup::default() })
    }

    /// Sets the port up as `how` says, started, promiscuous. It receives frames longer than
    /// one mbuf chained where its driver can, and may be sent chained ones.
    pub fn setup_with(&self, pool: &Mempool, how: &PortSetup) -> Result<(), DpdkError> {
        let checksums = c_int::from(how.partial_checksums);
        let (rx, tx, mtu, queues) = (how.rx_ring, how.tx_ring, how.mtu_bytes, how.queues.max(1));
        // SAFETY: valid port id and pool.
        let rc = unsafe { ffi::ss_eth_setup(self.0, rx, tx, pool.ptr.as_ptr(), checksums, mtu, queues) };
        if rc < 0 {
            return Err(error(format!("setting up port {}", self.0), rc));
        }
        Ok(())
    }

    /// The largest MTU the port's driver takes.
    pub fn max_mtu(&self) -> Result<u16, DpdkError> {
        // SAFETY: valid port id; reads its device information.
        let rc = unsafe { ffi::ss_eth_max_mtu(self.0) };
        if rc < 0 {
            return Err(error(format!("rte_eth_dev_info_get({})", self.0), rc));
        }
        Ok(rc as u16)
    }

    /// The virtio features the guest on this vhost port negotiated ([`virtio_features`]); 0 while
    /// none is connected. Only for vhost ports.
    pub fn vhost_features(&self) -> u64 {
        // SAFETY: the caller made this port a vhost vdev; the call reads its device state.
        unsafe { ffi::ss_vhost_features(self.0) }
    }

    /// From now on this started vhost port is received from with [`RxPath::VhostDirect`], its
    /// mbufs from `pool`: the vhost library's dequeue without net_vhost's ethdev layer. Its
    /// device counters then count no received frames. The PMD must stop polling it before
    /// [`EthPort::stop_close`], which undoes this (a guest leaving waits for the PMD's next
    /// poll of the port). Refused, and the port left to [`RxPath::Ethdev`], when net_vhost's
    /// rx would do more than hand frames over (complete checksums, strip VLAN tags).
    pub fn receive_vhost_directly(&self, pool: &Mempool) -> Result<(), DpdkError> {
        // SAFETY: valid port id and pool; the pool outlives the port (the datapath drops it last).
        let rc = unsafe { ffi::ss_vhost_rx_attach(self.0, pool.ptr.as_ptr()) };
        if rc < 0 {
            return Err(error(format!("receiving from vhost port {} directly", self.0), rc));
        }
        Ok(())
    }

    /// Stops and closes the port; a vdev must then be removed with [`remove_vdev`].
    pub fn stop_close(&self) -> Result<(), DpdkError> {
        // SAFETY: valid port id.
        let rc = unsafe { ffi::ss_eth_stop_close(self.0) };
        if rc < 0 {
            return Err(error(format!("stopping port {}", self.0), rc));
        }
        Ok(())
    }

    /// The device's MAC address.
    pub fn mac(&self) -> Option<[u8; 6]> {
        let mut mac = [0u8; 6];
        // SAFETY: 6-byte out buffer.
        (unsafe { ffi::ss_eth_mac(self.0, mac.as_mut_ptr()) } == 0).then_some(mac)
    }

    /// True when the device reports its link up (a vhost-user VM connected, say).
    pub fn link_up(&self) -> bool {
        // SAFETY: valid port id.
        unsafe { ffi::ss_eth_link_up(self.0) == 1 }
    }

    /// The device's own counters.
    pub fn stats(&self) -> Option<EthStats> {
        let mut s = EthStats::default();
        // SAFETY: out-pointer to a local.
        (unsafe { ffi::ss_eth_stats(self.0, &mut s) } == 0).then_some(s)
    }

    /// The device's port id, for the burst calls in [`MbufBatch`].
    pub(crate) fn id(&self) -> u16 {
        self.0
    }
}

/// Probes a device by devargs (a PCI NIC such as `0000:3b:00.0`) and returns its port.
pub fn probe_device(_eal: &Eal, devargs: &str) -> Result<EthPort, DpdkError> {
    let c = cstring(devargs);
    // SAFETY: EAL initialised; NUL-terminated.
    let rc = unsafe { ffi::ss_dev_probe(c.as_ptr()) };
    if rc < 0 {
        return Err(error(format!("rte_dev_probe({devargs})"), rc));
    }
    EthPort::by_name(devargs.split(',').next().unwrap_or(devargs))
}

/// Detaches a probed (non-vdev) device after [`EthPort::stop_close`].
pub fn remove_device(port: EthPort) -> Result<(), DpdkError> {
    // SAFETY: valid port id.
    let rc = unsafe { ffi::ss_eth_dev_remove(port.0) };
    if rc < 0 {
        return Err(error(format!("rte_dev_remove(port {})", port.0), rc));
    }
    Ok(())
}

/// Removes a virtual device created with [`EthPort::create_vdev`].
pub fn remove_vdev(name: &str) -> Result<(), DpdkError> {
    let cname = cstring(name);
    // SAFETY: NUL-terminated name.
    let rc = unsafe { ffi::ss_vdev_remove(cname.as_ptr()) };
    if rc < 0 {
        return Err(error(format!("rte_vdev_uninit({name})"), rc));
    }
    Ok(())
}

/// Removes the hugepage files an EAL instance with `file_prefix` left in /dev/hugepages. A
/// process that exits cleanly leaves none; one that had to be killed keeps its pages until
/// this runs.
pub fn remove_hugepage_files(file_prefix: &str) {
    for entry in std::fs::read_dir("/dev/hugepages").into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with(file_prefix) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Hugepages: total and free 2 MiB pages, and whether hugetlbfs is mounted, for a start-up
/// check that says how to fix the machine instead of failing inside EAL.
pub fn hugepage_status() -> (u64, u64, bool) {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        meminfo
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let mounted =
        std::fs::read_to_string("/proc/mounts").unwrap_or_default().lines().any(|l| l.contains(" hugetlbfs "));
    (field("HugePages_Total:"), field("HugePages_Free:"), mounted)
}
