//! The short-flow mix at datacenter scale: seed 003's Fig. 7 (a VM's short flows beside other
//! VMs' long ones on a congested link) on the links of its 2,000-server simulation. A one-second
//! fluid step cannot tell a short flow from a long one, so this replays, frame by frame on a fake
//! clock, the egress of the servers whose links the simulation found most contended: one VM of
//! each (the first) sends short flows, the others what the simulation had them offer, through
//! the data plane's own link schedulers: `SoftBw`, the ElasticSwitch-style `RateLimit` baseline
//! (limits recomputed every 50 ms) and `Fifo` (best effort). A short flow's completion time is
//! from its arrival to its last frame's departure.
//!
//! Open loop: a flow's frames are queued when it arrives (a TCP sender whose window holds the
//! whole flow, 8 KB or 32 KB within a 10-segment initial window and one more round trip); no
//! TCP reacts to loss or delay, so the long VMs keep offering their demand.

use rand::{Rng, SeedableRng};
use serde::Serialize;
use slaswitch_qos::egress::fifo::Fifo;
use slaswitch_qos::egress::ratelimit::{RateLimit, RateLimitConfig};
use slaswitch_qos::egress::softbw::{Guarantee, SoftBw, SoftBwConfig};
use slaswitch_qos::egress::softbw_fluid::FluidDemand;
use slaswitch_qos::egress::EgressScheduler;

/// Frames' length on the wire, bytes, and the payload each carries.
pub const FRAME_BYTES: u32 = 1500;
/// Payload per frame (TCP over IPv4 without options).
pub const PAYLOAD_BYTES: u32 = 1460;
/// Frames a VM's queue holds; more are dropped (a NIC queue, or a vhost ring).
pub const QUEUE_FRAMES: usize = 1024;
/// Replayed before flows are counted, ns.
pub const WARMUP_NS: u64 = 200_000_000;
/// Flows arriving in this span after the warm-up are counted, ns; the replay runs on until
/// they finish or a further second passes.
pub const MEASURE_NS: u64 = 1_000_000_000;

/// A link scheduler the replay runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheduler {
    /// SoftBW's fulfillment-based round robin.
    Softbw,
    /// Per-VM limits recomputed every 50 ms, then one FIFO (ElasticSwitch-style).
    RateLimit,
    /// One first-in first-out queue (best effort).
    Fifo,
}

impl Scheduler {
    /// Every scheduler, in the report's order.
    pub const ALL: [Scheduler; 3] = [Scheduler::Softbw, Scheduler::RateLimit, Scheduler::Fifo];

    /// Its name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Scheduler::Softbw => "softbw",
            Scheduler::RateLimit => "rate-limit",
            Scheduler::Fifo => "fifo",
        }
    }

    fn build(&self, link_bps: f64, guarantees_bps: &[f64]) -> Box<dyn EgressScheduler<u32>> {
        let link = link_bps as u64;
        match self {
            Scheduler::Softbw => {
                let mut s = SoftBw::new(SoftBwConfig::new(link), 0).expect("a positive link");
                for (q, g) in guarantees_bps.iter().enumerate() {
                    let rate_bps = (g.round() as u64).max(1);
                    s.set_guarantee(q, Guarantee::Strict { rate_bps }, QUEUE_FRAMES, 0).expect("a positive rate");
                }
                Box::new(s)
            }
            Scheduler::RateLimit => {
                let mut s = RateLimit::new(RateLimitConfig::new(link), 0).expect("a positive link");
                for (q, g) in guarantees_bps.iter().enumerate() {
                    s.set_guarantee(q, (g.round() as u64).max(1), QUEUE_FRAMES, 0);
                }
                Box::new(s)
            }
            Scheduler::Fifo => {
                let mut s = Fifo::new();
                for q in 0..guarantees_bps.len() {
                    s.set_queue(q, QUEUE_FRAMES);
                }
                Box::new(s)
            }
        }
    }
}

/// The short flows one VM sends.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShortFlows {
    /// Sizes, bytes, taken in turn (seed 003 Fig. 7: 8 KB and 32 KB).
    pub sizes_bytes: Vec<u32>,
    /// Mean time between arrivals (exponential), ns (Fig. 7: 10 ms and 100 ms).
    pub mean_interval_ns: u64,
}

/// One flow's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FlowTime {
    /// Its size, bytes.
    pub size_bytes: u32,
    /// From arrival to its last frame's departure, ns; `None`: a frame was dropped.
    pub completion_ns: Option<u64>,
}

/// Replays one server's egress: queue 0 sends `short`, the others their `demands`; returns
/// every counted short flow.
pub fn replay(
    scheduler: Scheduler,
    link_bps: f64,
    demands: &[FluidDemand],
    short: &ShortFlows,
    seed: u64,
) -> Vec<FlowTime> {
    let guarantees: Vec<f64> = demands.iter().map(|d| d.guarantee_bps).collect();
    let mut s = scheduler.build(link_bps, &guarantees);
    let frame_ns = |bps: f64| if bps > 0.0 { (f64::from(FRAME_BYTES) * 8e9 / bps) as u64 } else { u64::MAX };
    let interval: Vec<u64> =
        demands.iter().enumerate().map(|(q, d)| if q == 0 { u64::MAX } else { frame_ns(d.demand_bps) }).collect();
    // Queue 0's frames come with its flows, not evenly: it has no next frame of its own.
    let mut next: Vec<u64> = interval
        .iter()
        .enumerate()
        .map(|(q, &iv)| if q == 0 { u64::MAX } else { iv.saturating_mul(q as u64) / (demands.len() as u64 + 1) })
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let arrival =
        |rng: &mut rand::rngs::StdRng| (-(1.0 - rng.random::<f64>()).ln() * short.mean_interval_ns as f64) as u64;
    let mut next_flow = arrival(&mut rng);
    let mut flows: Vec<Flow> = Vec::new();
    let tx_ns = frame_ns(link_bps);
    let (arrivals_end, end) = (WARMUP_NS + MEASURE_NS, WARMUP_NS + 2 * MEASURE_NS);
    let (mut now, mut open) = (0u64, 0usize);
    while now < end {
        for q in 1..demands.len() {
            while next[q] <= now {
                let _ = s.enqueue(q, FRAME_BYTES, u32::MAX, now);
                next[q] = next[q].saturating_add(interval[q]);
            }
        }
        while next_flow <= now && next_flow < arrivals_end {
            let size_bytes = short.sizes_bytes[flows.len() % short.sizes_bytes.len()];
            let frames = size_bytes.div_ceil(PAYLOAD_BYTES);
            let id = flows.len() as u32;
            let dropped = (0..frames).filter(|_| s.enqueue(0, FRAME_BYTES, id, next_flow).is_err()).count() as u32;
            flows.push(Flow {
                size_bytes,
                arrival_ns: next_flow,
                left: frames - dropped,
                dropped: dropped > 0,
                done_ns: None,
            });
            open += usize::from(frames > dropped);
            next_flow += arrival(&mut rng).max(1);
        }
        match s.dequeue(now) {
            Some(d) => {
                now += tx_ns;
                if let Some(f) = flows.get_mut(d.item as usize) {
                    f.left -= 1;
                    if f.left == 0 {
                        open -= 1;
                        f.done_ns = (!f.dropped).then_some(now);
                    }
                }
            }
            // Frames held back (a time-to-send, a rate limit): look again 500 ns later.
            None if s.backlog_packets() > 0 => now += 500,
            None => now = next.iter().copied().chain([next_flow]).min().unwrap_or(end).max(now + 1),
        }
        if next_flow >= arrivals_end && open == 0 {
            break;
        }
    }
    flows
        .iter()
        .filter(|f| f.arrival_ns >= WARMUP_NS)
        .map(|f| FlowTime { size_bytes: f.size_bytes, completion_ns: f.done_ns.map(|d| d - f.arrival_ns) })
        .collect()
}

/// A short flow in the replay.
struct Flow {
    size_bytes: u32,
    arrival_ns: u64,
    /// Its frames still queued.
    left: u32,
    /// One of its frames found its queue full.
    dropped: bool,
    done_ns: Option<u64>,
}

/// Completion times of one flow size under one scheduler.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SizeStats {
    /// The flows' size, bytes.
    pub size_bytes: u32,
    /// Flows counted.
    pub flows: usize,
    /// The share that lost a frame or did not finish within a second of the last arrival.
    pub lost_share: f64,
    /// Median completion time of those that finished, microseconds.
    pub median_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// The flow's frames back to back on an idle link, microseconds.
    pub alone_us: f64,
}

/// The statistics of `flows` per size.
pub fn stats(flows: &[FlowTime], link_bps: f64) -> Vec<SizeStats> {
    let mut sizes: Vec<u32> = flows.iter().map(|f| f.size_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .into_iter()
        .map(|size| {
            let of: Vec<&FlowTime> = flows.iter().filter(|f| f.size_bytes == size).collect();
            let mut done: Vec<f64> = of.iter().filter_map(|f| f.completion_ns).map(|ns| ns as f64 / 1e3).collect();
            done.sort_by(f64::total_cmp);
            let at = |q: f64| done.get(((done.len() as f64 * q) as usize).min(done.len().saturating_sub(1))).copied();
            SizeStats {
                size_bytes: size,
                flows: of.len(),
                lost_share: (of.len() - done.len()) as f64 / of.len().max(1) as f64,
                median_us: at(0.5).unwrap_or(f64::NAN),
                p99_us: at(0.99).unwrap_or(f64::NAN),
                alone_us: f64::from(size.div_ceil(PAYLOAD_BYTES) * FRAME_BYTES) * 8e6 / link_bps,
            }
        })
        .collect()
}

/// Every scheduler over every captured server (in parallel); each scheduler's flows.
pub fn study(
    link_bps: f64,
    captured: &[crate::datacenter::CapturedServer],
    short: &ShortFlows,
    seed: u64,
) -> Vec<(Scheduler, Vec<FlowTime>)> {
    use rayon::prelude::*;
    Scheduler::ALL
        .iter()
        .map(|&sched| {
            let flows = captured
                .par_iter()
                .flat_map_iter(|c| {
                    replay(sched, link_bps, &c.link, short, seed ^ (c.server as u64).wrapping_mul(0x9E37_79B9))
                })
                .collect();
            (sched, flows)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::d;

    #[test]
    fn softbw_serves_short_flows_at_once_where_fifo_queues_them_behind_long_ones() {
        // Seed 003 Fig. 7: X (450 Mbit/s guarantee) sends short flows, Y (450) floods a 1 Gbit/s
        // link, here with two more long VMs.
        let demands = [d(0.0, 450.0), d(900.0, 450.0), d(300.0, 50.0), d(300.0, 50.0)];
        let short = ShortFlows { sizes_bytes: vec![8192, 32768], mean_interval_ns: 10_000_000 };
        let median = |s: Scheduler| {
            let st = stats(&replay(s, 1e9, &demands, &short, 7), 1e9);
            assert!(st.iter().all(|x| x.flows > 30), "{st:?}");
            st.iter().map(|x| x.median_us).collect::<Vec<_>>()
        };
        let (softbw, fifo) = (median(Scheduler::Softbw), median(Scheduler::Fifo));
        // An 8 KB flow is 6 frames, 72 us alone; SoftBW keeps it within a few times that.
        assert!(softbw[0] < 300.0, "{softbw:?}");
        assert!(fifo[0] > 3.0 * softbw[0] && fifo[1] > 3.0 * softbw[1], "fifo {fifo:?} softbw {softbw:?}");
    }
}
