//! `slaswitch-sim pmd-placement`: a host with many PMD cores, VMs with cycle purchases placed by
//! the switch's own code (`slaswitch_config::pmd_placement`: by purchase, with admission per
//! core) against OVS-DPDK's rx-queue assignment (`pmd-rxq-assign=roundrobin` and `=cycles`,
//! neither with admission), then a rise in some ports' cost: slaswitch's rebalancer moves one
//! port per second, OVS's `pmd-auto-lb` reassigns by cycles once a PMD has been over 95% busy for
//! its interval (a minute by default).
//!
//! Each VM bought cycles per second (exponential around `mean_share` of a core, 1-50%) and uses
//! a uniform share of them (`min_use_share` to 100%). A VM is short in a second when it gets less than the smaller of
//! its demand and its purchase: under C2QoS that happens only on a core whose promises in use
//! exceed what it delivers; under OVS's round robin a core's cycles are shared in proportion to
//! demand, so every VM of an overloaded core is short.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use slaswitch_config::allocation::{deliverable_cycles_per_sec, Candidate};
use slaswitch_config::pmd_placement::{place, rebalance, CoreLoad, PortLoad};
use slaswitch_config::port_settings::PortSettings;
use slaswitch_config::{PortSpec, PortType};

use crate::datacenter::exponential;
use crate::SimError;

/// The study's settings (also `slaswitch-sim pmd-placement`'s options).
#[derive(Clone, Debug, PartialEq, Serialize, clap::Args)]
pub struct PmdStudy {
    /// PMD cores on the host.
    #[arg(long, default_value_t = 16)]
    pub cores: usize,
    /// Each core's cycles per second.
    #[arg(long, default_value_t = 2_300_000_000)]
    pub core_hz: u64,
    /// VMs offered (those no core admits are not sold).
    #[arg(long, default_value_t = 300)]
    pub offered: usize,
    /// Mean purchase, share of a core.
    #[arg(long, default_value_t = 0.08)]
    pub mean_share: f64,
    /// Each VM uses a uniform share of its purchase from this to 1.
    #[arg(long, default_value_t = 0.6)]
    pub min_use_share: f64,
    /// Share of the placed VMs whose cost per packet doubles.
    #[arg(long, default_value_t = 0.2)]
    pub cost_rise_share: f64,
    /// Seconds OVS's `pmd-auto-lb` waits with a PMD over its threshold (its default: a minute).
    #[arg(long, default_value_t = 60)]
    pub auto_lb_interval_secs: u32,
    /// Seconds simulated after the cost rises.
    #[arg(long, default_value_t = 120)]
    pub secs: u32,
    /// Seed of every draw (the command line gives several, `--seeds`).
    #[arg(skip)]
    pub seed: u64,
}

/// What one placement rule gave.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PmdOutcome {
    /// `slaswitch` (by purchase, admitted per core), `ovs-roundrobin`, `ovs-cycles`.
    pub policy: String,
    /// VMs placed (the same VMs for every rule: those slaswitch admitted).
    pub placed: usize,
    /// Of them, on a core whose purchases add up to more than it delivers.
    pub on_over_promised_core: usize,
    /// VM-seconds short before the cost rise (one second).
    pub short_before: usize,
    /// VM-seconds short over `secs` after the cost rise.
    pub short_after: usize,
    /// Seconds until no VM was short again (None: not within `secs`).
    pub secs_to_whole: Option<u32>,
    /// Ports moved.
    pub moves: usize,
}

#[derive(Clone)]
struct Vm {
    promised: u64,
    used: u64,
    core: usize,
}

impl PmdStudy {
    /// Refuses settings the study cannot run, naming the field.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.cores < 2 || self.offered == 0 || self.secs == 0 || self.core_hz == 0 {
            return Err(SimError::setting(
                "cores, offered, secs and core_hz",
                format!("{}, {}, {}, {}", self.cores, self.offered, self.secs, self.core_hz),
                "at least 2 cores, and at least 1 of the others",
            ));
        }
        let shares = [
            ("mean_share", self.mean_share),
            ("min_use_share", self.min_use_share),
            ("cost_rise_share", self.cost_rise_share),
        ];
        for (name, v) in shares {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return Err(SimError::setting(name, v, "a share above 0 and at most 1"));
            }
        }
        Ok(())
    }

    /// Runs the three rules on the same VMs.
    pub fn run(&self) -> Result<Vec<PmdOutcome>, SimError> {
        self.validate()?;
        let mut rng = StdRng::seed_from_u64(self.seed);
        let hz = self.core_hz as f64;
        let offered: Vec<(u64, f64)> = (0..self.offered)
            .map(|_| {
                let u: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
                let share = exponential(self.mean_share, u).clamp(0.01, 0.5);
                ((share * hz) as u64, rng.random_range(self.min_use_share..=1.0))
            })
            .collect();
        let admitted = self.place_by_purchase(&offered)?;
        let risen: Vec<bool> = (0..admitted.len()).map(|_| rng.random_bool(self.cost_rise_share)).collect();
        let assigned_rr = assign(&admitted, self.cores, |vms, _| fewest_ports(vms, self.cores));
        let assigned_cycles = assign(&admitted, self.cores, |vms, _| least_used(vms, self.cores));
        Ok(vec![
            self.after_rise("slaswitch", admitted.clone(), &risen),
            self.after_rise("ovs-roundrobin", assigned_rr, &risen),
            self.after_rise("ovs-cycles", assigned_cycles, &risen),
        ])
    }

    /// The offered VMs through `place`, in order; those no core admits are not sold.
    fn place_by_purchase(&self, offered: &[(u64, f64)]) -> Result<Vec<Vm>, SimError> {
        let cores: Vec<usize> = (0..self.cores).collect();
        let mut ports: Vec<(PortSpec, PortSettings, usize)> = Vec::new();
        let mut vms = Vec::new();
        for (i, &(promised, use_share)) in offered.iter().enumerate() {
            let spec = PortSpec {
                name: format!("vm{i}"),
                port_type: PortType::Null,
                number: 1,
                options: [("cycles_per_sec".to_string(), promised.to_string())].into_iter().collect(),
            };
            let settings = spec.validate().map_err(|e| SimError::setting("purchase", promised, e.to_string()))?;
            let others: Vec<Candidate> =
                ports.iter().map(|(spec, settings, core)| Candidate { spec, settings, pmd_core: *core }).collect();
            if let Ok(placed) = place(&others, &spec, &settings, &cores, None, self.core_hz) {
                vms.push(Vm { promised, used: (promised as f64 * use_share) as u64, core: placed.core });
                ports.push((spec, settings, placed.core));
            }
        }
        Ok(vms)
    }

    /// One second before the cost rise, then `secs` after it with the rule's moves.
    fn after_rise(&self, policy: &str, mut vms: Vec<Vm>, risen: &[bool]) -> PmdOutcome {
        // OVS has no C2QoS: its cores are shared in proportion to demand.
        let deliverable = deliverable_cycles_per_sec(self.core_hz);
        let over = over_promised(&vms, self.cores, deliverable);
        let on_over_promised_core = vms.iter().filter(|v| over[v.core]).count();
        let c2qos = policy == "slaswitch";
        let short_before = short(&vms, self.cores, deliverable, c2qos);
        for (v, &r) in vms.iter_mut().zip(risen) {
            if r {
                v.promised *= 2;
                v.used *= 2;
            }
        }
        let (mut short_after, mut secs_to_whole, mut moves, mut hot_secs) = (0, None, 0, 0u32);
        for t in 0..self.secs {
            let n = short(&vms, self.cores, deliverable, c2qos);
            short_after += n;
            if n == 0 && secs_to_whole.is_none() {
                secs_to_whole = Some(t);
            }
            if policy == "slaswitch" {
                if let Some(m) = rebalance(&loads(&vms), &core_loads(&vms, self.cores, deliverable, self.core_hz)) {
                    let index = |name: &str| -> usize { name[2..].parse().expect("vm<i>") };
                    vms[index(&m.port)].core = m.to;
                    if let Some(q) = &m.swap_with {
                        vms[index(q)].core = m.from;
                    }
                    moves += 1;
                }
            } else if policy == "ovs-cycles" {
                // pmd-auto-lb acts only with cycles-based assignment.
                let busiest = (0..self.cores).map(|c| core_used(&vms, c)).max().unwrap_or(0);
                hot_secs = if busiest as f64 >= 0.95 * self.core_hz as f64 { hot_secs + 1 } else { 0 };
                if hot_secs >= self.auto_lb_interval_secs {
                    vms = assign(&vms, self.cores, |vms, _| least_used(vms, self.cores));
                    moves += 1;
                    hot_secs = 0;
                }
            }
        }
        PmdOutcome {
            policy: policy.into(),
            placed: vms.len(),
            on_over_promised_core,
            short_before,
            short_after,
            secs_to_whole,
            moves,
        }
    }
}

/// Re-places every VM, biggest user first, on the core `pick` names.
fn assign(vms: &[Vm], cores: usize, pick: impl Fn(&[Vm], usize) -> usize) -> Vec<Vm> {
    let mut order: Vec<usize> = (0..vms.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(vms[i].used));
    let mut out = vms.to_vec();
    let mut placed: Vec<Vm> = Vec::new();
    for i in order {
        let core = pick(&placed, cores);
        out[i].core = core;
        placed.push(out[i].clone());
    }
    out
}

fn fewest_ports(vms: &[Vm], cores: usize) -> usize {
    (0..cores).min_by_key(|&c| vms.iter().filter(|v| v.core == c).count()).unwrap_or(0)
}

fn least_used(vms: &[Vm], cores: usize) -> usize {
    (0..cores).min_by_key(|&c| core_used(vms, c)).unwrap_or(0)
}

fn core_used(vms: &[Vm], core: usize) -> u64 {
    vms.iter().filter(|v| v.core == core).map(|v| v.used).sum()
}

fn over_promised(vms: &[Vm], cores: usize, deliverable: u64) -> Vec<bool> {
    (0..cores).map(|c| vms.iter().filter(|v| v.core == c).map(|v| v.promised).sum::<u64>() > deliverable).collect()
}

/// VMs short this second. On an overloaded core: under C2QoS (`c2qos`) every VM when the demands
/// within purchases exceed the core (else none: each gets what it bought first); under OVS's
/// sharing in proportion to demand every VM, each getting less than it needs.
fn short(vms: &[Vm], cores: usize, deliverable: u64, c2qos: bool) -> usize {
    (0..cores)
        .map(|c| {
            let on: Vec<&Vm> = vms.iter().filter(|v| v.core == c).collect();
            let used: u64 = on.iter().map(|v| v.used).sum();
            if used <= deliverable {
                return 0;
            }
            let kept: u64 = on.iter().map(|v| v.used.min(v.promised)).sum();
            if c2qos && kept <= deliverable {
                0
            } else {
                on.len()
            }
        })
        .sum()
}

fn loads(vms: &[Vm]) -> Vec<PortLoad> {
    vms.iter()
        .enumerate()
        .map(|(i, v)| PortLoad {
            name: format!("vm{i}"),
            core: v.core,
            promised_cycles_per_sec: v.promised,
            used_cycles_per_sec: v.used,
            pinned: false,
        })
        .collect()
}

fn core_loads(vms: &[Vm], cores: usize, deliverable: u64, core_hz: u64) -> Vec<CoreLoad> {
    (0..cores)
        .map(|c| CoreLoad {
            core: c,
            deliverable_cycles_per_sec: deliverable,
            available_cycles_per_sec: core_hz,
            busy_cycles_per_sec: core_used(vms, c).min(core_hz),
        })
        .collect()
}
