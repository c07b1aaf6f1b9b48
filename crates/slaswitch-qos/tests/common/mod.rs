//! Test drivers with fake time: a PMD loop for the CPU schedulers and a link for the egress
//! schedulers. They play the part the data plane and the host simulator play for real.
#![allow(dead_code)]

use slaswitch_qos::cpu::PortScheduler;
use slaswitch_qos::egress::EgressScheduler;

/// What a port does when the PMD polls it.
#[derive(Clone, Copy, Debug)]
pub struct PortLoad {
    /// Cycles a batch with packets costs this port (packet size, flows: the C2QoS model's inputs).
    pub busy_batch_cycles: u64,
    /// Packets per batch when busy.
    pub batch_packets: u32,
    /// Whether the port has traffic at all.
    pub busy: bool,
}

pub const EMPTY_POLL_CYCLES: u64 = 60;

#[derive(Debug, Default, Clone)]
pub struct PmdRun {
    pub cycles_by_port: Vec<u64>,
    pub batches_by_port: Vec<u64>,
    pub idle_cycles: u64,
    /// Most cycles any port got beyond what its strict allocation allowed, checked at each batch.
    pub order: Vec<usize>,
}

/// Runs the PMD loop for `duration_tsc` ticks from `start_tsc`; returns per-port totals and the
/// service order (first `keep_order` decisions).
pub fn run_pmd(
    sched: &mut PortScheduler,
    loads: &[PortLoad],
    start_tsc: u64,
    duration_tsc: u64,
    keep_order: usize,
) -> PmdRun {
    let mut run =
        PmdRun { cycles_by_port: vec![0; loads.len()], batches_by_port: vec![0; loads.len()], ..Default::default() };
    let mut now = start_tsc;
    let end = start_tsc + duration_tsc;
    while now < end {
        match sched.next_port(now) {
            None => {
                now += 100;
                run.idle_cycles += 100;
            }
            Some(port) => {
                let load = loads[port];
                let (cycles, packets) =
                    if load.busy { (load.busy_batch_cycles, load.batch_packets) } else { (EMPTY_POLL_CYCLES, 0) };
                now += cycles;
                sched.report_batch(port, cycles, packets, now);
                run.cycles_by_port[port] += cycles;
                run.batches_by_port[port] += 1;
                if run.order.len() < keep_order {
                    run.order.push(port);
                }
            }
        }
    }
    run
}

/// A source feeding one queue.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    pub queue: usize,
    pub packet_bytes: u32,
    /// Offered load; `None` keeps the queue backlogged at all times.
    pub rate_bps: Option<u64>,
    pub start_ns: u64,
    pub stop_ns: u64,
}

impl Source {
    pub fn greedy(queue: usize, packet_bytes: u32) -> Self {
        Source { queue, packet_bytes, rate_bps: None, start_ns: 0, stop_ns: u64::MAX }
    }
}

/// Bytes each queue got onto the link, per window.
pub struct LinkRun {
    pub bytes_by_queue: Vec<u64>,
    pub windows: Vec<Vec<u64>>,
    pub busy_ns: u64,
    pub end_ns: u64,
}

/// Drives an egress scheduler over a link of `link_rate_bps` from `start_ns` for `duration_ns`:
/// the link sends one packet at a time and asks the scheduler again as soon as it is free.
pub fn run_link<S: EgressScheduler<u64>>(
    sched: &mut S,
    sources: &[Source],
    link_rate_bps: u64,
    start_ns: u64,
    duration_ns: u64,
    window_ns: u64,
) -> LinkRun {
    let duration_ns = start_ns + duration_ns;
    let queues = sources.iter().map(|s| s.queue).max().unwrap_or(0) + 1;
    let mut run = LinkRun { bytes_by_queue: vec![0; queues], windows: Vec::new(), busy_ns: 0, end_ns: duration_ns };
    let mut next_arrival: Vec<u64> = sources.iter().map(|s| s.start_ns.max(start_ns)).collect();
    let mut now = start_ns;
    let mut seq = 0u64;
    let mut window = vec![0u64; queues];
    let mut window_end = start_ns + window_ns;
    while now < duration_ns {
        // Arrivals up to now.
        for (i, src) in sources.iter().enumerate() {
            if now < src.start_ns || now >= src.stop_ns {
                continue;
            }
            match src.rate_bps {
                None => {
                    while sched.queue_backlog(src.queue).0 < 64 {
                        seq += 1;
                        if sched.enqueue(src.queue, src.packet_bytes, seq, now).is_err() {
                            break;
                        }
                    }
                }
                Some(rate) => {
                    let gap = u64::from(src.packet_bytes) * 8 * 1_000_000_000 / rate.max(1);
                    while next_arrival[i] <= now {
                        seq += 1;
                        let _ = sched.enqueue(src.queue, src.packet_bytes, seq, now);
                        next_arrival[i] += gap.max(1);
                    }
                }
            }
        }
        match sched.dequeue(now) {
            Some(d) => {
                let tx_ns = (u64::from(d.len_bytes) * 8 * 1_000_000_000).div_ceil(link_rate_bps);
                run.bytes_by_queue[d.queue] += u64::from(d.len_bytes);
                window[d.queue] += u64::from(d.len_bytes);
                run.busy_ns += tx_ns;
                now += tx_ns;
            }
            None => now += 1_000,
        }
        if now >= window_end {
            run.windows.push(std::mem::replace(&mut window, vec![0; queues]));
            window_end += window_ns;
        }
    }
    run
}

/// Rate in bit/s of `bytes` over `ns`.
pub fn bps(bytes: u64, ns: u64) -> f64 {
    bytes as f64 * 8.0 * 1e9 / ns as f64
}

pub fn assert_within(actual: f64, expected: f64, rel: f64, what: &str) {
    let err = (actual - expected).abs() / expected.abs().max(1e-12);
    assert!(
        err <= rel,
        "{what}: got {actual:.4}, expected {expected:.4} (off by {:.3}%, allowed {:.3}%)",
        err * 100.0,
        rel * 100.0
    );
}

/// A tiny deterministic generator (xorshift), so each seed is one arrival pattern.
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `[0, bound)`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }

    /// Uniform in `[lo, hi)`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }
}
