//! CPU-bound hosts in the datacenter simulation: before a server's VMs reach its link, their
//! frames cross the switch's PMD core, and each frame costs cycles by its size (the
//! bandwidth-CPU model of seed 000 Sec. III). With small frames and fast links the core, not
//! the link, runs out first. The core is shared every second by C2TB under HBS in fluid form
//! (`slaswitch_qos::cpu::c2tb_fluid`, the limit of the scheduler the data plane runs): with
//! C2QoS (each VM's guarantee bought as a cycle allocation at its frame size, MIN-MAX with idle
//! cycles shared equally, or strict) or with no cycle QoS (round robin, OVS's PMD loop).
//!
//! Only the sender's core is modelled: in the data plane a received frame's cycles are charged
//! to the uplink's port, which has no purchase, so they are not a VM's guarantee.

use crate::SimError;
use serde::Serialize;
use slaswitch_qos::cpu::c2tb_fluid::{fluid_cycles, CpuScratch, FluidPort};
use slaswitch_qos::cpu::{BandwidthModel, CycleLimit};
use slaswitch_qos::egress::softbw_fluid::FluidDemand;

/// Frames per full batch (the data plane's burst).
pub const BATCH_FRAMES: f64 = 32.0;

/// How a server's PMD core is shared among its VMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpuSharing {
    /// C2QoS: each VM's guarantee, priced at its frame size, as a MIN-MAX cycle allocation
    /// (idle cycles and unused allocations shared equally).
    C2qos,
    /// C2QoS strict: the same allocations, never more.
    C2qosStrict,
    /// No cycle QoS: every VM polled in turn, one batch each.
    RoundRobin,
}

impl std::str::FromStr for CpuSharing {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        match s {
            "c2qos" => Ok(CpuSharing::C2qos),
            "c2qos-strict" => Ok(CpuSharing::C2qosStrict),
            "round-robin" => Ok(CpuSharing::RoundRobin),
            other => Err(SimError::setting("cpu", format!("'{other}'"), "give c2qos, c2qos-strict or round-robin")),
        }
    }
}

/// Each server's switch core.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CpuHost {
    /// Cycles per second the core gives the VMs' frames (its TSC rate less its own work).
    pub core_cycles_per_sec: f64,
    /// Each VM's frame size, repeated over each server's VMs, bytes.
    pub frame_bytes: Vec<u32>,
    /// Cycles per frame of each of those sizes (the model's price, same order).
    pub cycles_per_frame: Vec<f64>,
    /// How the core is shared.
    pub sharing: CpuSharing,
}

impl CpuHost {
    /// Prices `frame_bytes` with a bandwidth-CPU model's many-flow rows (as a purchase of that
    /// profile is priced) on a core of `core_cycles_per_sec`.
    pub fn from_model(
        model: &BandwidthModel,
        core_cycles_per_sec: f64,
        frame_bytes: Vec<u32>,
        sharing: CpuSharing,
    ) -> Result<CpuHost, SimError> {
        let cycles_per_frame = frame_bytes
            .iter()
            .map(|&b| {
                let miss = model.calibrated_miss_share(slaswitch_qos::cpu::FlowCount::Many);
                model.predict_cycles_per_packet(f64::from(b), miss).ok_or(SimError::EmptyModel)
            })
            .collect::<Result<_, _>>()?;
        Ok(CpuHost { core_cycles_per_sec, frame_bytes, cycles_per_frame, sharing })
    }

    /// Refuses settings the simulation cannot run, naming the field and what is allowed.
    pub fn validate(&self) -> Result<(), SimError> {
        if !(self.core_cycles_per_sec.is_finite() && self.core_cycles_per_sec > 0.0) {
            return Err(SimError::setting("core_cycles_per_sec", self.core_cycles_per_sec, "give a number above 0"));
        }
        if self.frame_bytes.is_empty() || self.frame_bytes.iter().any(|b| !(60..=9000).contains(b)) {
            let sizes = format!("{:?}", self.frame_bytes);
            return Err(SimError::setting("frame_bytes", sizes, "give sizes of 60 to 9000 bytes"));
        }
        if self.cycles_per_frame.len() != self.frame_bytes.len() || self.cycles_per_frame.iter().any(|c| *c <= 0.0) {
            let prices = format!("{:?}", self.cycles_per_frame);
            return Err(SimError::setting("cycles_per_frame", prices, "give one price above 0 per frame size"));
        }
        Ok(())
    }

    /// The frame size and price of the `k`-th VM of a server.
    pub fn frames(&self, k: usize) -> (u32, f64) {
        let i = k % self.frame_bytes.len();
        (self.frame_bytes[i], self.cycles_per_frame[i])
    }

    /// Cycles per second a rate of `k`'s frames costs.
    pub fn cycles_per_sec(&self, k: usize, bps: f64) -> f64 {
        let (bytes, cycles) = self.frames(k);
        bps / (8.0 * f64::from(bytes)) * cycles
    }

    /// The cycles a guarantee of `guarantee_bps` buys a server's VMs, over the core: above 1,
    /// the core's cycles are over-committed.
    pub fn cycle_commitment(&self, vms: usize, guarantee_bps: f64) -> f64 {
        (0..vms).map(|k| self.cycles_per_sec(k, guarantee_bps)).sum::<f64>() / self.core_cycles_per_sec
    }
}

/// The core's ports for a server's VMs offering `demands_bps`, each having bought
/// `purchase_bps` of its own frames, into `ports`.
pub fn fill_ports(
    host: &CpuHost,
    purchase_bps: f64,
    demands_bps: impl Iterator<Item = f64>,
    ports: &mut Vec<FluidPort>,
) {
    ports.clear();
    for (k, demand_bps) in demands_bps.enumerate() {
        // Rounded up, as a purchase buys whole cycles: its own rate always fits.
        let bought = host.cycles_per_sec(k, purchase_bps).ceil() as u64;
        let limit = match host.sharing {
            CpuSharing::C2qos => CycleLimit::MinMax { cycles_per_sec: bought, weight: 1 },
            CpuSharing::C2qosStrict => CycleLimit::Strict { cycles_per_sec: bought },
            CpuSharing::RoundRobin => CycleLimit::Unlimited,
        };
        ports.push(FluidPort {
            demand_cycles_per_sec: host.cycles_per_sec(k, demand_bps),
            batch_cycles: BATCH_FRAMES * host.frames(k).1,
            limit,
        });
    }
}

/// Reusable buffers for [`pass_core`].
#[derive(Default)]
pub struct CoreScratch {
    ports: Vec<FluidPort>,
    cycles: Vec<f64>,
    cpu: CpuScratch,
}

/// What of `demands` (a server's VMs' offers) crosses the core, bits per second, into `passed`;
/// returns the cycles used. Every VM's purchase is `purchase_bps` of its own frames.
pub fn pass_core(
    host: &CpuHost,
    purchase_bps: f64,
    demands: &[FluidDemand],
    s: &mut CoreScratch,
    passed: &mut Vec<f64>,
) -> f64 {
    fill_ports(host, purchase_bps, demands.iter().map(|d| d.demand_bps), &mut s.ports);
    fluid_cycles(host.core_cycles_per_sec, &s.ports, &mut s.cpu, &mut s.cycles);
    passed.clear();
    passed.extend(s.cycles.iter().enumerate().map(|(k, &c)| {
        let (bytes, cycles) = host.frames(k);
        (c / cycles * 8.0 * f64::from(bytes)).min(demands[k].demand_bps)
    }));
    s.cycles.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(sharing: CpuSharing) -> CpuHost {
        // 64-byte frames at 100 cycles, 1500-byte at 200, on a 1 G cycle core.
        CpuHost { core_cycles_per_sec: 1e9, frame_bytes: vec![64, 1500], cycles_per_frame: vec![100.0, 200.0], sharing }
    }

    fn d(mbps: f64) -> FluidDemand {
        FluidDemand { demand_bps: mbps * 1e6, guarantee_bps: 0.0 }
    }

    #[test]
    fn an_idle_core_passes_every_demand() {
        let mut passed = Vec::new();
        let used =
            pass_core(&host(CpuSharing::C2qos), 1e9, &[d(100.0), d(100.0)], &mut CoreScratch::default(), &mut passed);
        assert_eq!(passed, vec![100e6, 100e6]);
        // 100 Mbit/s of 64-byte frames is 195,312 frames at 100 cycles; of 1500-byte, 8,333 at 200.
        assert!((used - (195_312.5 * 100.0 + 8_333.333 * 200.0)).abs() < 1e3, "{used}");
    }

    #[test]
    fn round_robin_starves_small_frames_and_c2qos_holds_their_purchase() {
        // A 64-byte VM that bought 2 Gbit/s (391 M cycles) and wants 3, beside a 1500-byte VM
        // flooding at 100 Gbit/s (1.67 G cycles): round robin gives both equal batches, so the
        // small-frame VM gets a third of the core's 1 G, 1.7 Gbit/s; C2QoS gives it its
        // purchase first and shares the rest.
        let demands = [d(3000.0), d(100_000.0)];
        let mut passed = Vec::new();
        pass_core(&host(CpuSharing::RoundRobin), 2e9, &demands, &mut CoreScratch::default(), &mut passed);
        assert!((passed[0] - 1e9 / 3.0 / 100.0 * 512.0).abs() < 1e3, "{passed:?}");
        pass_core(&host(CpuSharing::C2qos), 2e9, &demands, &mut CoreScratch::default(), &mut passed);
        assert!(passed[0] >= 2e9, "{passed:?}");
        // Work conserving: the core is used in full either way.
        let used = pass_core(&host(CpuSharing::C2qos), 2e9, &demands, &mut CoreScratch::default(), &mut passed);
        assert!((used - 1e9).abs() < 1.0, "{used}");
    }

    #[test]
    fn the_cycle_commitment_counts_each_vm_at_its_frame_size() {
        // 1 Gbit/s of 64-byte frames is 1.953 M frames (195 M cycles); of 1500-byte, 83 k (16.7 M).
        let c = host(CpuSharing::C2qos).cycle_commitment(2, 1e9);
        assert!((c - (195.3125e6 + 16.6667e6) / 1e9).abs() < 1e-4, "{c}");
    }
}
