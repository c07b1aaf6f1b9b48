//! The datacenter simulation of seed 003 Sec. 6.4: servers with 1 Gbit/s access links behind a
//! non-blocking fabric, VMs with strict or dynamic (S, T) guarantees, the link shared every
//! second at each server's egress and then at each server's ingress by SoftBW's fulfillment
//! rule in fluid form (`slaswitch_qos::egress::softbw_fluid`, the packet scheduler's own
//! limit), and the over-commitment ratio deciding how many VMs a server holds.
//!
//! Workload (Sec. 6.4): a strict VM's demand is drawn every second, exponential around
//! `250 rho` Mbit/s, to a destination drawn uniformly; a dynamic VM sends one transfer of an
//! exponential size around `250 rho T_max` Mbit, starting uniformly within the run (the
//! Poisson arrivals of N_d / T_max per second), to one destination, within `T = S / 250 Mbit/s`.
//! A strict VM fails in a second when it gets less than the smaller of its demand and its
//! guarantee; a dynamic VM fails when it finishes after its deadline.
//!
//! Every draw comes from a counter-based generator keyed by (seed, VM, second), so the result
//! does not depend on how the servers are split over threads.

use rayon::prelude::*;
use serde::Serialize;
use slaswitch_qos::egress::fill::{weighted_fill, Claim};
use slaswitch_qos::egress::softbw_fluid::{fluid_rates, FluidDemand, FluidScratch};

use crate::datacenter_cpu::{pass_core, CoreScratch, CpuHost};
use crate::SimError;

/// How a link is shared among the VMs that send over it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sharing {
    /// SoftBW's per-VM queues (the fluid form of the data plane's scheduler).
    Softbw,
    /// Best effort: one first-in-first-out queue, so TCP shares the link per flow and a VM gets
    /// a part in proportion to its flows (the FIFO baseline of seed 003 Figs. 5 and 8).
    PerFlow,
}

impl std::str::FromStr for Sharing {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        match s {
            "softbw" => Ok(Sharing::Softbw),
            "per-flow" => Ok(Sharing::PerFlow),
            other => Err(SimError::setting("sharing", format!("'{other}'"), "give softbw or per-flow")),
        }
    }
}

/// What to simulate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DcConfig {
    /// Servers.
    pub servers: usize,
    /// Seconds simulated (T_max).
    pub secs: u32,
    /// Over-commitment ratio: guarantees sold per unit of link.
    pub oc: f64,
    /// Utilization without over-commitment (the paper: 0.15).
    pub rho: f64,
    /// Each server's access link, Mbit/s.
    pub link_mbps: f64,
    /// Each VM's guarantee (strict rate; a dynamic VM's S/T), Mbit/s.
    pub guarantee_mbps: f64,
    /// The share of each server's VMs with a dynamic guarantee.
    pub dynamic_share: f64,
    /// Seed of every draw.
    pub seed: u64,
    /// How each link is shared.
    pub sharing: Sharing,
    /// Flows per VM, repeated over each server's VMs (the test bed's 1:1:2 is `[1, 1, 2]`);
    /// only best-effort sharing looks at them.
    pub flows: Vec<u32>,
    /// Each server's switch core in front of its link (`None`: the core never limits).
    pub cpu: Option<CpuHost>,
    /// Strict VMs per server (its last ones) that flood: they offer ten times their link's rate every
    /// second, beyond any guarantee (the noisy neighbours of seed 000 Fig. 1). The failure
    /// figures are of the other strict VMs.
    pub flooders: usize,
}

impl DcConfig {
    /// The paper's setting at over-commitment `oc`.
    pub fn paper(servers: usize, oc: f64, seed: u64) -> Self {
        DcConfig {
            servers,
            secs: 600,
            oc,
            rho: 0.15,
            link_mbps: 1000.0,
            guarantee_mbps: 250.0,
            dynamic_share: 0.5,
            seed,
            sharing: Sharing::Softbw,
            flows: vec![1],
            cpu: None,
            flooders: 0,
        }
    }

    /// VMs per server: the link's worth of guarantees, times the over-commitment.
    pub fn vms_per_server(&self) -> usize {
        (self.link_mbps / self.guarantee_mbps * self.oc).round().max(1.0) as usize
    }

    /// Dynamic-guarantee VMs per server (the first ones of each server).
    pub fn dynamic_per_server(&self) -> usize {
        (self.vms_per_server() as f64 * self.dynamic_share).round() as usize
    }

    /// Refuses settings the simulation cannot run, naming the field and what is allowed.
    pub fn validate(&self) -> Result<(), SimError> {
        let positive = |name: &'static str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(SimError::setting(name, v, "give a finite number above 0"))
            }
        };
        positive("oc", self.oc)?;
        positive("rho", self.rho)?;
        positive("link_mbps", self.link_mbps)?;
        positive("guarantee_mbps", self.guarantee_mbps)?;
        if !(0.0..=1.0).contains(&self.dynamic_share) {
            return Err(SimError::setting("dynamic_share", self.dynamic_share, "give 0 to 1"));
        }
        if self.flows.is_empty() || self.flows.contains(&0) {
            return Err(SimError::setting(
                "flows",
                format!("{:?}", self.flows),
                "give one or more counts of at least 1",
            ));
        }
        if let Some(h) = &self.cpu {
            h.validate()?;
        }
        if self.flooders > self.vms_per_server() - self.dynamic_per_server() {
            let strict = self.vms_per_server() - self.dynamic_per_server();
            return Err(SimError::setting("flooders", self.flooders, format!("a server has {strict} strict VMs")));
        }
        if self.servers < 2 || self.secs == 0 {
            return Err(SimError::setting(
                "servers and secs",
                format!("{} and {}", self.servers, self.secs),
                "give at least 2 servers and 1 second",
            ));
        }
        Ok(())
    }
}

/// A draw in (0, 1], from (seed, VM, second, stream): SplitMix64 over the key. Written here
/// because the draws must be addressable by key, not by the order threads take them.
pub(crate) fn draw(seed: u64, vm: usize, second: u32, stream: u64) -> f64 {
    let mut z = seed
        ^ (vm as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ u64::from(second).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ stream.wrapping_mul(0x1656_67B1_9E37_79F9);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 11) as f64 + 1.0) / (1u64 << 53) as f64
}

pub(crate) fn exponential(mean: f64, u: f64) -> f64 {
    -mean * u.ln()
}

/// A server other than `server`, drawn uniformly.
fn destination(servers: usize, server: usize, u: f64) -> usize {
    let k = ((u * (servers - 1) as f64) as usize).min(servers - 2);
    if k >= server {
        k + 1
    } else {
        k
    }
}

/// What a flooding VM offers, in links' rates.
const FLOOD_OF_LINK: f64 = 10.0;

/// A dynamic VM's transfer.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Transfer {
    start: u32,
    deadline_secs: f64,
    dst: usize,
    left_mbit: f64,
    done_secs: Option<f64>,
}

/// One VM's offer in a second, at its server's egress, and what it got.
#[derive(Clone, Copy, Debug, Default)]
struct Flow {
    dst: usize,
    /// What it would send, bits per second.
    offered_bps: f64,
    /// What crossed its server's switch core (the offer, when the core is not modelled).
    cpu_bps: f64,
    /// Its offer to the link (what crossed the core) and its guarantee.
    demand: FluidDemand,
    egress_mbps: f64,
    got_mbps: f64,
}

/// What the simulation measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DcResult {
    /// The settings.
    pub config: Option<DcConfig>,
    /// Network-wide utilization per second (traffic over all access links' capacity).
    pub utilization: Vec<f64>,
    /// Per strict VM, the seconds it got less than min(demand, guarantee).
    pub strict_failure_secs: Vec<u32>,
    /// Per number of flows a VM has: the share of those strict VMs that failed at least once.
    pub strict_failed_by_flows: Vec<(u32, f64)>,
    /// Per dynamic VM that finished, or whose deadline passed within the run: completion time
    /// over its deadline (unfinished ones: the time they had, a lower bound).
    pub dynamic_completion_ratio: Vec<f64>,
    /// Each of those transfers' deadline T, seconds (same order).
    pub dynamic_deadline_secs: Vec<f64>,
    /// Dynamic VMs whose deadline passed within the run unfinished.
    pub dynamic_unfinished: usize,
    /// Dynamic VMs still within their deadline at the end (left out).
    pub dynamic_censored: usize,
    /// With CPU-bound hosts: per strict VM (same order as `strict_failure_secs`), the seconds
    /// its server's core alone already left it short.
    pub strict_cpu_failure_secs: Vec<u32>,
    /// With CPU-bound hosts: per frame size, the share of those strict VMs that failed at
    /// least once.
    pub strict_failed_by_frame: Vec<(u32, f64)>,
    /// With CPU-bound hosts: the cores' mean busy share per second.
    pub core_utilization: Vec<f64>,
}

impl DcResult {
    /// Mean utilization over the run.
    pub fn mean_utilization(&self) -> f64 {
        self.utilization.iter().sum::<f64>() / self.utilization.len().max(1) as f64
    }

    /// The share of strict VMs that failed at least one second.
    pub fn strict_failed_share(&self) -> f64 {
        let n = self.strict_failure_secs.len().max(1) as f64;
        self.strict_failure_secs.iter().filter(|&&s| s > 0).count() as f64 / n
    }

    /// The share of strict VM-seconds that failed (the per-second event of seed 003 Eq. 1,
    /// seen by one VM).
    pub fn strict_failed_seconds_share(&self) -> f64 {
        let secs = self.config.as_ref().map_or(1, |c| c.secs).max(1);
        let n = (self.strict_failure_secs.len() as f64 * f64::from(secs)).max(1.0);
        self.strict_failure_secs.iter().map(|&s| f64::from(s)).sum::<f64>() / n
    }

    /// The longest failure of a strict VM, seconds.
    pub fn strict_longest_failure_secs(&self) -> u32 {
        self.strict_failure_secs.iter().copied().max().unwrap_or(0)
    }

    /// The share of dynamic VMs (finished or past their deadline) that finished in time.
    pub fn dynamic_on_time_share(&self) -> f64 {
        let n = self.dynamic_completion_ratio.len().max(1) as f64;
        self.dynamic_completion_ratio.iter().filter(|&&r| r <= 1.0 + 1e-9).count() as f64 / n
    }

    /// The worst completion time over deadline, among transfers whose deadline is at least
    /// `min_deadline_secs` (a transfer shorter than the 1 s allocation step is at its mercy).
    pub fn dynamic_worst_ratio(&self, min_deadline_secs: f64) -> f64 {
        self.dynamic_completion_ratio
            .iter()
            .zip(&self.dynamic_deadline_secs)
            .filter(|(_, &t)| t >= min_deadline_secs)
            .map(|(&r, _)| r)
            .fold(0.0, f64::max)
    }
}

/// One server's egress in one second, kept for the packet-level checks.
#[derive(Clone, Debug, PartialEq)]
pub struct CapturedServer {
    /// The server.
    pub server: usize,
    /// Its VMs' offers to the link (what crossed the core) and guarantees.
    pub link: Vec<FluidDemand>,
    /// What its VMs offered the core, bits per second.
    pub offered_bps: Vec<f64>,
}

/// Egress demands of some servers in one second, kept for the packet-level checks.
pub type Capture = Vec<CapturedServer>;

/// Runs the simulation; `progress` is called after every second; `capture` keeps, for one
/// second, the egress demands of the `n` servers that offered the most (the ones whose links
/// are contended, where the fluid step matters).
pub fn run(cfg: &DcConfig, capture: Option<(u32, usize)>, progress: &(dyn Fn(u32) + Sync)) -> (DcResult, Capture) {
    let per = cfg.vms_per_server();
    let dynamic = cfg.dynamic_per_server();
    let vms = cfg.servers * per;
    let link_bps = cfg.link_mbps * 1e6;
    let g_bps = cfg.guarantee_mbps * 1e6;
    // The data plane's small fairness guarantee (SoftBwConfig::new): a thousandth of the link.
    let fairness_bps = link_bps / 1000.0;
    let mut transfers: Vec<Option<Transfer>> = (0..vms)
        .map(|vm| {
            let (server, k) = (vm / per, vm % per);
            (k < dynamic).then(|| {
                let size_mbit =
                    exponential(cfg.guarantee_mbps * cfg.rho * f64::from(cfg.secs), draw(cfg.seed, vm, 0, 1));
                Transfer {
                    start: ((draw(cfg.seed, vm, 0, 2) * f64::from(cfg.secs)) as u32).min(cfg.secs - 1),
                    deadline_secs: size_mbit / cfg.guarantee_mbps,
                    dst: destination(cfg.servers, server, draw(cfg.seed, vm, 0, 3)),
                    left_mbit: size_mbit,
                    done_secs: None,
                }
            })
        })
        .collect();
    let mut strict_fail = vec![0u32; vms];
    let mut flows = vec![Flow::default(); vms];
    let mut by_dst: Vec<usize> = Vec::with_capacity(vms);
    let mut offsets = vec![0usize; cfg.servers + 1];
    let mut ingress = vec![0.0f64; vms];
    let mut utilization = Vec::with_capacity(cfg.secs as usize);
    let mut captured = Vec::new();
    let vm_flows: Vec<u32> = (0..per).map(|k| cfg.flows[k % cfg.flows.len()]).collect();
    let mut strict_cpu_fail = vec![0u32; vms];
    let mut core_used = vec![0.0f64; cfg.servers];
    let mut core_utilization = Vec::new();
    for t in 0..cfg.secs {
        // Egress: every server's core passes what it can of its VMs' offers, then the server
        // shares its link among what passed.
        let servers = flows.par_chunks_mut(per).zip(transfers.par_chunks(per)).zip(core_used.par_iter_mut());
        servers.enumerate().for_each_init(
            || (FluidScratch::default(), Vec::new(), Vec::new(), CoreScratch::default()),
            |(scratch, demands, rates, core), (server, ((fl, tr), used))| {
                demands.clear();
                for (k, f) in fl.iter_mut().enumerate() {
                    let vm = server * per + k;
                    *f = offer(cfg, vm, server, t, tr[k].as_ref(), (g_bps, fairness_bps, link_bps));
                    demands.push(f.demand);
                }
                if let Some(host) = &cfg.cpu {
                    *used = pass_core(host, g_bps, demands, core, rates);
                    for ((f, d), &passed) in fl.iter_mut().zip(demands.iter_mut()).zip(rates.iter()) {
                        (f.cpu_bps, d.demand_bps, f.demand.demand_bps) = (passed, passed, passed);
                    }
                }
                share_link(cfg.sharing, link_bps, demands, &vm_flows, scratch, rates);
                for (f, r) in fl.iter_mut().zip(rates.iter()) {
                    f.egress_mbps = r / 1e6;
                }
            },
        );
        if let Some((_, n)) = capture.filter(|&(when, n)| when == t && n > 0) {
            let offered = |s: usize| flows[s * per..(s + 1) * per].iter().map(|f| f.offered_bps).sum::<f64>();
            let mut busiest: Vec<usize> = (0..cfg.servers).collect();
            busiest.sort_by(|&a, &b| offered(b).total_cmp(&offered(a)));
            captured = busiest[..n.min(cfg.servers)]
                .iter()
                .map(|&s| {
                    let fl = &flows[s * per..(s + 1) * per];
                    CapturedServer {
                        server: s,
                        link: fl.iter().map(|f| f.demand).collect(),
                        offered_bps: fl.iter().map(|f| f.offered_bps).collect(),
                    }
                })
                .collect();
        }
        // Ingress: every server shares its link among what the egresses sent it.
        group_by_destination(&flows, cfg.servers, &mut by_dst, &mut offsets);
        ingress_rates(cfg, &flows, &by_dst, &offsets, &mut ingress);
        let mut total_mbps = 0.0;
        for (j, &vm) in by_dst.iter().enumerate() {
            flows[vm].got_mbps = ingress[j];
            total_mbps += ingress[j];
        }
        account(t, &flows, &mut transfers, (&mut strict_fail, &mut strict_cpu_fail), per, dynamic);
        if let Some(host) = &cfg.cpu {
            core_utilization.push(core_used.iter().sum::<f64>() / (cfg.servers as f64 * host.core_cycles_per_sec));
        }
        utilization.push(total_mbps / (cfg.servers as f64 * cfg.link_mbps));
        progress(t + 1);
    }
    // The strict VMs the failure figures are of: not the flooders.
    let measured = dynamic..per - cfg.flooders;
    let mut r = summarize(cfg, utilization, &strict_fail, &transfers, per, measured.clone());
    if let Some(host) = &cfg.cpu {
        r.core_utilization = core_utilization;
        r.strict_cpu_failure_secs = strict_cpu_fail
            .iter()
            .enumerate()
            .filter(|(vm, _)| measured.contains(&(vm % per)))
            .map(|(_, &s)| s)
            .collect();
        r.strict_failed_by_frame = failed_by(&strict_fail, per, measured, |k| host.frames(k).0);
    }
    (r, captured)
}

/// Shares one link among `demands` (their flows in `flows`) by `sharing`, into `rates`.
fn share_link(
    sharing: Sharing,
    link_bps: f64,
    demands: &[FluidDemand],
    flows: &[u32],
    scratch: &mut FluidScratch,
    rates: &mut Vec<f64>,
) {
    match sharing {
        Sharing::Softbw => fluid_rates(link_bps, demands, scratch, rates),
        Sharing::PerFlow => {
            let claims: Vec<Claim> = demands
                .iter()
                .zip(flows)
                .map(|(d, &f)| Claim { weight: f64::from(f), floor: 0.0, ceiling: d.demand_bps })
                .collect();
            *rates = weighted_fill(&claims, link_bps);
        }
    }
}

/// A VM's offer in second `t`: its demand, guarantee and destination.
fn offer(
    cfg: &DcConfig,
    vm: usize,
    server: usize,
    t: u32,
    transfer: Option<&Transfer>,
    (g_bps, fairness_bps, link_bps): (f64, f64, f64),
) -> Flow {
    let (dst, demand_bps, guarantee_bps) = match transfer {
        None => {
            let per = cfg.vms_per_server();
            // A flooder sends as fast as its virtual NIC takes frames, which is faster than
            // the host's link: the switch's core spends cycles on all it takes.
            let d = if vm % per >= per - cfg.flooders {
                FLOOD_OF_LINK * link_bps
            } else {
                (exponential(cfg.guarantee_mbps * cfg.rho, draw(cfg.seed, vm, t + 1, 4)) * 1e6).min(link_bps)
            };
            (destination(cfg.servers, server, draw(cfg.seed, vm, t + 1, 5)), d, g_bps)
        }
        Some(x) if t < x.start || x.done_secs.is_some() => (x.dst, 0.0, 0.0),
        Some(x) => {
            // Seed 003 Sec. 4.2: remaining size over remaining time, never above S/T; after T,
            // the fairness guarantee.
            let elapsed = f64::from(t - x.start);
            let time_left = x.deadline_secs - elapsed;
            let g = if time_left > 0.0 {
                (x.left_mbit * 1e6 / time_left).min(g_bps).max(fairness_bps)
            } else {
                fairness_bps
            };
            // It offers what finishes it within this second, or by its deadline if that comes
            // sooner: a transfer shorter than the 1 s step is not held to a whole second.
            let within = time_left.clamp(1e-3, 1.0);
            (x.dst, (x.left_mbit * 1e6 / within).min(link_bps), g)
        }
    };
    let demand = FluidDemand { demand_bps, guarantee_bps };
    Flow { dst, offered_bps: demand_bps, cpu_bps: demand_bps, demand, egress_mbps: 0.0, got_mbps: 0.0 }
}

/// `by_dst`: the VMs with traffic, grouped by destination; `offsets[s]..offsets[s + 1]` is
/// server `s`'s group (a counting sort).
fn group_by_destination(flows: &[Flow], servers: usize, by_dst: &mut Vec<usize>, offsets: &mut [usize]) {
    offsets.iter_mut().for_each(|o| *o = 0);
    for f in flows.iter().filter(|f| f.egress_mbps > 0.0) {
        offsets[f.dst + 1] += 1;
    }
    for s in 0..servers {
        offsets[s + 1] += offsets[s];
    }
    by_dst.clear();
    by_dst.resize(offsets[servers], 0);
    let mut next: Vec<usize> = offsets[..servers].to_vec();
    for (vm, f) in flows.iter().enumerate().filter(|(_, f)| f.egress_mbps > 0.0) {
        by_dst[next[f.dst]] = vm;
        next[f.dst] += 1;
    }
}

/// Each destination's link shared among the rates its senders' egresses gave them (demand),
/// with the senders' guarantees; `out[j]` is the rate of `by_dst[j]`, Mbit/s.
fn ingress_rates(cfg: &DcConfig, flows: &[Flow], by_dst: &[usize], offsets: &[usize], out: &mut Vec<f64>) {
    let (link_bps, per) = (cfg.link_mbps * 1e6, cfg.vms_per_server());
    out.clear();
    out.resize(by_dst.len(), 0.0);
    let mut groups: Vec<(&[usize], &mut [f64])> = Vec::with_capacity(offsets.len());
    let mut rest: &mut [f64] = out;
    for w in offsets.windows(2) {
        let (head, tail) = rest.split_at_mut(w[1] - w[0]);
        groups.push((&by_dst[w[0]..w[1]], head));
        rest = tail;
    }
    groups.into_par_iter().for_each_init(
        || (FluidScratch::default(), Vec::new(), Vec::new(), Vec::new()),
        |(scratch, demands, counts, rates), (vms, got)| {
            demands.clear();
            demands.extend(vms.iter().map(|&vm| FluidDemand {
                demand_bps: flows[vm].egress_mbps * 1e6,
                guarantee_bps: flows[vm].demand.guarantee_bps,
            }));
            counts.clear();
            counts.extend(vms.iter().map(|&vm| cfg.flows[(vm % per) % cfg.flows.len()]));
            share_link(cfg.sharing, link_bps, demands, counts, scratch, rates);
            for (g, r) in got.iter_mut().zip(rates.iter()) {
                *g = r / 1e6;
            }
        },
    );
}

/// Counts strict failures and moves dynamic transfers on by what they got in second `t`.
fn account(
    t: u32,
    flows: &[Flow],
    transfers: &mut [Option<Transfer>],
    (strict_fail, strict_cpu_fail): (&mut [u32], &mut [u32]),
    per: usize,
    dynamic: usize,
) {
    for (vm, f) in flows.iter().enumerate() {
        let got = if f.egress_mbps > 0.0 { f.got_mbps } else { 0.0 };
        if vm % per >= dynamic {
            let wanted = f.offered_bps.min(f.demand.guarantee_bps) / 1e6;
            if got < wanted * (1.0 - 1e-9) {
                strict_fail[vm] += 1;
            }
            if f.cpu_bps / 1e6 < wanted * (1.0 - 1e-9) {
                strict_cpu_fail[vm] += 1;
            }
        } else if let Some(x) = transfers[vm].as_mut().filter(|x| x.done_secs.is_none() && t >= x.start) {
            if got >= x.left_mbit * (1.0 - 1e-12) {
                let within = if got > 0.0 { x.left_mbit / got } else { 0.0 };
                x.done_secs = Some(f64::from(t - x.start) + within);
                x.left_mbit = 0.0;
            } else {
                x.left_mbit -= got;
            }
        }
    }
}

/// Per value of `key` (of a VM's place on its server), the share of strict VMs that failed at
/// least one second.
fn failed_by(
    strict_fail: &[u32],
    per: usize,
    measured: std::ops::Range<usize>,
    key: impl Fn(usize) -> u32,
) -> Vec<(u32, f64)> {
    let mut keys: Vec<u32> = measured.clone().map(&key).collect();
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter()
        .map(|n| {
            let of_n: Vec<u32> = strict_fail
                .iter()
                .enumerate()
                .filter(|(vm, _)| measured.contains(&(vm % per)) && key(vm % per) == n)
                .map(|(_, &s)| s)
                .collect();
            (n, of_n.iter().filter(|&&s| s > 0).count() as f64 / of_n.len().max(1) as f64)
        })
        .collect()
}

fn summarize(
    cfg: &DcConfig,
    utilization: Vec<f64>,
    strict_fail: &[u32],
    transfers: &[Option<Transfer>],
    per: usize,
    measured: std::ops::Range<usize>,
) -> DcResult {
    let mut r = DcResult { config: Some(cfg.clone()), utilization, ..DcResult::default() };
    r.strict_failure_secs =
        strict_fail.iter().enumerate().filter(|(vm, _)| measured.contains(&(vm % per))).map(|(_, &s)| s).collect();
    r.strict_failed_by_flows = failed_by(strict_fail, per, measured.clone(), |k| cfg.flows[k % cfg.flows.len()]);
    for x in transfers.iter().flatten() {
        match x.done_secs {
            Some(done) => {
                r.dynamic_completion_ratio.push(done / x.deadline_secs);
                r.dynamic_deadline_secs.push(x.deadline_secs);
            }
            None if f64::from(x.start) + x.deadline_secs <= f64::from(cfg.secs) => {
                r.dynamic_unfinished += 1;
                r.dynamic_completion_ratio.push(f64::from(cfg.secs - x.start) / x.deadline_secs);
                r.dynamic_deadline_secs.push(x.deadline_secs);
            }
            None => r.dynamic_censored += 1,
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(oc: f64) -> DcConfig {
        DcConfig { servers: 40, secs: 60, ..DcConfig::paper(40, oc, 7) }
    }

    #[test]
    fn the_same_seed_gives_the_same_run_on_any_number_of_threads() {
        let cfg = small(4.0);
        let (a, _) = run(&cfg, None, &|_| {});
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let (b, _) = pool.install(|| run(&cfg, None, &|_| {}));
        assert_eq!(a, b);
        let (c, _) = run(&DcConfig { seed: 8, ..cfg }, None, &|_| {});
        assert_ne!(a.utilization, c.utilization);
    }

    #[test]
    fn over_commitment_raises_utilization_and_failures() {
        let one = run(&small(1.0), None, &|_| {}).0;
        let four = run(&small(4.0), None, &|_| {}).0;
        assert!(
            four.mean_utilization() > 2.5 * one.mean_utilization(),
            "{} vs {}",
            four.mean_utilization(),
            one.mean_utilization()
        );
        assert!(four.strict_failed_share() >= one.strict_failed_share());
        assert!(one.mean_utilization() > 0.03 && four.mean_utilization() < 1.0);
    }

    #[test]
    fn draws_are_uniform_and_destinations_never_the_sender() {
        let n = 100_000;
        let mean = (0..n).map(|i| draw(3, i, 5, 1)).sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
        for i in 0..1000 {
            let d = destination(5, 2, draw(3, i, 0, 9));
            assert!(d < 5 && d != 2);
        }
        assert_eq!(destination(2, 0, 1.0), 1);
        assert_eq!(destination(2, 1, 0.0), 0);
    }
}
