//! The fluid core step checked against batches: a server's switch core in one second of the
//! datacenter simulation, replayed batch by batch through the `PortScheduler` (C2TB under HBS)
//! the data plane runs, on a fake clock, and each VM's cycles compared with what the fluid
//! form gives. The replay runs on the whole core, empty polls and all; the fluid form is given
//! the cycles the replay's frames took, so the check is of how the core is divided. How much
//! of the core frames get at all is the simulation's `DELIVERABLE_CORE_SHARE`, and each check
//! reports what the replay's frames got beside it.

use serde::Serialize;
use slaswitch_qos::cpu::c2tb_fluid::{fluid_cycles, CpuScratch, FluidPort};
use slaswitch_qos::cpu::water_fill::DELIVERABLE_CORE_SHARE;
use slaswitch_qos::cpu::{C2tbConfig, HbsConfig, PortScheduler};

use crate::datacenter::CapturedServer;
use crate::datacenter_cpu::{fill_ports, CpuHost, BATCH_FRAMES};

/// Seconds replayed before counting (buckets and queues settle).
pub const WARMUP_SECS: f64 = 0.1;
/// Seconds counted.
pub const MEASURE_SECS: f64 = 1.0;
/// Cycles an empty poll costs in the replay (a poll that finds no frame).
pub const EMPTY_POLL_CYCLES: u64 = 100;
/// Frames a VM's ring holds; a VM offering more loses the rest, as a full ring does.
pub const RING_FRAMES: f64 = 4096.0;

/// One server's second on its core: the fluid cycles, the scheduler's, and how far apart.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CoreCheck {
    /// The server.
    pub server: usize,
    /// What its VMs' frames would cost, over the core the simulation gives them (above 1:
    /// contended).
    pub offered_of_core: f64,
    /// The share of the whole core the replay's frames took (the rest: empty polls, idle).
    pub frames_of_whole_core: f64,
    /// Per VM: (demand, fluid, replayed), G cycles per second.
    pub vms: Vec<[f64; 3]>,
    /// The largest |replayed - fluid| over the VMs, as a share of the core.
    pub worst_of_core: f64,
}

/// The cycles per second `PortScheduler` gives each of `ports` when each is fed its frames
/// evenly at its demand and runs batches of up to 32 of them, each costing its frames' price.
pub fn replay(core_cycles_per_sec: f64, ports: &[FluidPort]) -> Vec<f64> {
    let hz = core_cycles_per_sec as u64;
    let mut s = PortScheduler::new(C2tbConfig::one_core(hz), HbsConfig::default(), 0);
    for (i, p) in ports.iter().enumerate() {
        s.add_port(i, 8, p.limit, 0).expect("a new port");
    }
    let cycles_per_frame: Vec<f64> = ports.iter().map(|p| p.batch_cycles / BATCH_FRAMES).collect();
    let frames_per_cycle: Vec<f64> =
        ports.iter().zip(&cycles_per_frame).map(|(p, c)| p.demand_cycles_per_sec / c / core_cycles_per_sec).collect();
    let mut backlog = vec![0.0f64; ports.len()];
    let mut got = vec![0u64; ports.len()];
    let (start, end) =
        ((WARMUP_SECS * core_cycles_per_sec) as u64, ((WARMUP_SECS + MEASURE_SECS) * core_cycles_per_sec) as u64);
    let (mut now, mut last) = (0u64, 0u64);
    while now < end {
        for (b, f) in backlog.iter_mut().zip(&frames_per_cycle) {
            *b = (*b + f * (now - last) as f64).min(RING_FRAMES);
        }
        last = now;
        let Some(port) = s.next_port(now) else {
            now += EMPTY_POLL_CYCLES;
            continue;
        };
        let frames = backlog[port].floor().min(BATCH_FRAMES);
        let cycles = if frames >= 1.0 { (frames * cycles_per_frame[port]) as u64 } else { EMPTY_POLL_CYCLES };
        backlog[port] -= frames;
        now += cycles;
        s.report_batch(port, cycles, frames as u32, now);
        if now > start && frames >= 1.0 {
            got[port] += cycles;
        }
    }
    got.iter().map(|&c| c as f64 / MEASURE_SECS).collect()
}

/// Compares the fluid core step with the scheduler on each captured server.
pub fn check(host: &CpuHost, purchase_bps: f64, captured: &[CapturedServer]) -> Vec<CoreCheck> {
    use rayon::prelude::*;
    captured
        .par_iter()
        .map(|c| {
            let mut ports = Vec::new();
            fill_ports(host, purchase_bps, c.offered_bps.iter().copied(), &mut ports);
            let whole_core = host.core_cycles_per_sec / DELIVERABLE_CORE_SHARE;
            let replayed = replay(whole_core, &ports);
            let frames_cycles: f64 = replayed.iter().sum();
            let mut fluid = Vec::new();
            fluid_cycles(frames_cycles, &ports, &mut CpuScratch::default(), &mut fluid);
            let core = host.core_cycles_per_sec;
            let mut out = CoreCheck {
                server: c.server,
                offered_of_core: ports.iter().map(|p| p.demand_cycles_per_sec).sum::<f64>() / core,
                frames_of_whole_core: frames_cycles / whole_core,
                vms: Vec::new(),
                worst_of_core: 0.0,
            };
            for ((p, f), r) in ports.iter().zip(&fluid).zip(&replayed) {
                out.vms.push([p.demand_cycles_per_sec / 1e9, f / 1e9, r / 1e9]);
                out.worst_of_core = out.worst_of_core.max((r - f).abs() / core);
            }
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datacenter_cpu::CpuSharing;

    fn host(sharing: CpuSharing) -> CpuHost {
        CpuHost { core_cycles_per_sec: 2e9, frame_bytes: vec![64, 1500], cycles_per_frame: vec![120.0, 200.0], sharing }
    }

    fn server(offered_mbps: &[f64]) -> CapturedServer {
        CapturedServer { server: 0, link: Vec::new(), offered_bps: offered_mbps.iter().map(|m| m * 1e6).collect() }
    }

    #[test]
    fn the_scheduler_gives_what_the_fluid_form_says_within_two_percent_of_the_core() {
        for sharing in [CpuSharing::C2qos, CpuSharing::C2qosStrict, CpuSharing::RoundRobin] {
            // Idle core; a flood beside light VMs; over-committed allocations, all backlogged.
            for offered in [
                vec![500.0, 500.0, 800.0, 100.0],
                vec![5000.0, 100_000.0, 300.0, 900.0],
                vec![20_000.0, 50_000.0, 20_000.0, 50_000.0],
            ] {
                let c = &check(&host(sharing), 2.5e9, &[server(&offered)])[0];
                assert!(c.worst_of_core < 0.02, "{sharing:?} {c:?}");
                // Work-conserving sharing leaves a contended core to empty polls a few percent at most.
                let conserving = sharing != CpuSharing::C2qosStrict;
                assert!(!conserving || c.offered_of_core < 0.9 || c.frames_of_whole_core > 0.9, "{sharing:?} {c:?}");
            }
        }
    }
}
