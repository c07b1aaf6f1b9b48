//! Admission and placement of bandwidth guarantees by SoftBW's failure model (seed 003 Sec. 2.2,
//! Eq. 2, and Sec. 4: the master places VMs on servers with enough bandwidth). One code for the
//! fleet's master and the datacenter simulator.
//!
//! A host's guarantees may add up to more than its link (over-commitment) as long as the
//! probability that its VMs' demands add up to more than the link stays under a target. The
//! seed's Eq. 2 takes `n` VMs with equal exponential demands; a real host's VMs differ, and a
//! sum of exponentials with unequal means has a heavier tail than Eq. 2 gives for the same
//! total (one busy VM dominates it). So the tail is computed for the VMs as they are, each an
//! exponential around its own measured mean ([`demand_tail`]); for equal means it is Eq. 2
//! exactly. A host whose guarantees fit in its link fails no guarantee: SoftBW's scheduler
//! gives every VM the smaller of its demand and its guarantee (Sec. 3.2), so its probability is
//! 0 whatever the demands.

/// One VM as admission sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tenancy {
    /// What it is guaranteed, bits/s (a strict rate, or a dynamic guarantee's S / T).
    pub guarantee_bps: f64,
    /// Its mean demand, bits/s: measured, or a prior times its guarantee for a new VM.
    pub mean_demand_bps: f64,
}

/// A host's link and the guaranteed VMs on it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostLoad {
    /// The link's rate, bits/s (C).
    pub capacity_bps: f64,
    /// Its VMs with a guarantee.
    pub vms: Vec<Tenancy>,
}

/// A host's over-commitment and the failure probability it carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Assessment {
    /// The guarantees over the link's rate (δ).
    pub committed_ratio: f64,
    /// The probability that the demands exceed the link in a second (Eq. 2; 0 when δ <= 1).
    pub failure_probability: f64,
    /// The mean demands over the link's rate (the utilization the model expects).
    pub expected_utilization: f64,
}

impl HostLoad {
    /// The host as it is.
    pub fn assess(&self) -> Assessment {
        assess(self.capacity_bps, self.vms.iter().copied())
    }

    /// The host with `vm` added.
    pub fn assess_with(&self, vm: Tenancy) -> Assessment {
        assess(self.capacity_bps, self.vms.iter().copied().chain(std::iter::once(vm)))
    }
}

fn assess(capacity_bps: f64, vms: impl Iterator<Item = Tenancy>) -> Assessment {
    let (mut guaranteed, mut demand, mut means) = (0.0, 0.0, Vec::new());
    for v in vms {
        guaranteed += v.guarantee_bps;
        demand += v.mean_demand_bps.max(0.0);
        means.push(v.mean_demand_bps);
    }
    if capacity_bps <= 0.0 {
        return Assessment { committed_ratio: f64::INFINITY, failure_probability: 1.0, expected_utilization: 0.0 };
    }
    let committed_ratio = guaranteed / capacity_bps;
    let expected_utilization = demand / capacity_bps;
    let failure_probability =
        if committed_ratio <= 1.0 || demand <= 0.0 { 0.0 } else { demand_tail(capacity_bps, means.iter().copied()) };
    Assessment { committed_ratio, failure_probability, expected_utilization }
}

/// Means below this share of the link count as this share: their VMs add almost nothing to the
/// tail, and the computation's length grows with the link over the smallest mean.
pub const SMALLEST_MEAN_OF_LINK: f64 = 1e-3;

/// The probability that independent exponential demands with means `means_bps` add up to more
/// than `capacity_bps` (Eq. 1 for unequal VMs). Uniformization: with `Λ` the largest rate
/// (1 / the smallest mean), each demand is a geometric number (success `p_i = λ_i / Λ`) of
/// exponential phases of rate `Λ`; the sum exceeds C exactly when fewer than N of a Poisson
/// process of rate Λ fall within C, N the phases in all. The distribution of N is built VM by
/// VM (`P'(k) = p P(k-1) + (1 - p) P'(k-1)`), and the terms beyond where the Poisson tail is
/// negligible are counted whole (never less than the truth).
pub fn demand_tail(capacity_bps: f64, means_bps: impl Iterator<Item = f64>) -> f64 {
    let floor = capacity_bps * SMALLEST_MEAN_OF_LINK;
    let means: Vec<f64> = means_bps.filter(|m| *m > 0.0).map(|m| m.max(floor)).collect();
    let Some(smallest) = means.iter().copied().reduce(f64::min) else { return 0.0 };
    let x = capacity_bps / smallest; // Λ C
    let limit = (x + 12.0 * x.sqrt() + 40.0).ceil() as usize;
    // P(N = k), k = 0..limit; N starts at 0.
    let mut phases = vec![0.0; limit + 1];
    phases[0] = 1.0;
    for m in &means {
        let p = smallest / m;
        // In place, k ascending: `before` holds P(k - 1) before this VM was added.
        let mut before = std::mem::take(&mut phases[0]);
        for k in 1..=limit {
            let here = phases[k];
            phases[k] = p * before + (1.0 - p) * phases[k - 1];
            before = here;
        }
    }
    // P(Poisson(x) <= k - 1), summed in log space as Eq. 2 is.
    let mut tail = 0.0;
    let mut log_pmf = -x; // log P(Poisson = 0)
    let mut log_cdf = f64::NEG_INFINITY; // log P(Poisson <= k - 1)
    for (k, &pk) in phases.iter().enumerate().skip(1) {
        log_cdf = log_add(log_cdf, log_pmf);
        tail += pk * log_cdf.exp();
        log_pmf += (x / k as f64).ln();
    }
    let inside: f64 = phases.iter().sum();
    (tail + (1.0 - inside).max(0.0)).min(1.0)
}

fn log_add(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY {
        hi
    } else {
        hi + (lo - hi).exp().ln_1p()
    }
}

/// How a host admits guarantees.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "policy")]
pub enum Policy {
    /// By the guarantees alone: they may add up to `max_ratio` times the link (1: no
    /// over-commitment; the seed's fixed 4x over-commitment is 4).
    Guarantee {
        /// The largest committed ratio.
        max_ratio: f64,
    },
    /// By the failure model: Eq. 2 with the VMs' mean demands must stay at or under
    /// `target_failure`, and the ratio at or under `max_ratio`.
    FailureModel {
        /// The largest failure probability admitted (seed 003 Sec. 4: e.g. 5%).
        target_failure: f64,
        /// The largest committed ratio, whatever the model says.
        max_ratio: f64,
    },
}

impl Policy {
    /// Checks the settings, naming the field, the value and what is allowed.
    pub fn validate(&self) -> Result<(), String> {
        let (ratio, target) = match *self {
            Policy::Guarantee { max_ratio } => (max_ratio, None),
            Policy::FailureModel { target_failure, max_ratio } => (max_ratio, Some(target_failure)),
        };
        if !(ratio.is_finite() && ratio >= 1.0) {
            return Err(format!("max_ratio={ratio}: give a number of at least 1"));
        }
        if let Some(t) = target.filter(|t| !(t.is_finite() && *t > 0.0 && *t < 1.0)) {
            return Err(format!("target_failure={t}: give a probability above 0 and below 1"));
        }
        Ok(())
    }
}

/// Why a host refused a guarantee, with the figures it would have had.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Refusal {
    /// The host with the VM added.
    pub with_vm: Assessment,
    /// The policy it broke.
    pub policy: Policy,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let a = &self.with_vm;
        match self.policy {
            Policy::FailureModel { target_failure, max_ratio } if a.committed_ratio <= max_ratio => write!(
                f,
                "failure probability would be {:.4} (target {target_failure}) at a committed ratio of {:.2}, \
                 expected utilization {:.3}",
                a.failure_probability, a.committed_ratio, a.expected_utilization
            ),
            Policy::FailureModel { max_ratio, .. } | Policy::Guarantee { max_ratio } => {
                write!(f, "committed ratio would be {:.2}, above the largest allowed {max_ratio}", a.committed_ratio)
            }
        }
    }
}

/// Whether `host` takes `vm` under `policy`: the figures it would have with it, or why not.
pub fn admit(policy: &Policy, host: &HostLoad, vm: Tenancy) -> Result<Assessment, Refusal> {
    let with_vm = host.assess_with(vm);
    let fits = match *policy {
        Policy::Guarantee { max_ratio } => with_vm.committed_ratio <= max_ratio + 1e-12,
        Policy::FailureModel { target_failure, max_ratio } => {
            with_vm.committed_ratio <= max_ratio + 1e-12 && with_vm.failure_probability <= target_failure
        }
    };
    if fits {
        Ok(with_vm)
    } else {
        Err(Refusal { with_vm, policy: *policy })
    }
}

/// Where first fit put a VM.
#[derive(Clone, Debug, PartialEq)]
pub struct Placed<K> {
    /// The host.
    pub host: K,
    /// Its figures with the VM.
    pub with_vm: Assessment,
    /// The hosts before it that refused, and why.
    pub passed_over: Vec<(K, Refusal)>,
}

/// First fit: the first host, in the order given, that admits `vm`; or every host's refusal.
pub fn place<'a, K>(
    policy: &Policy,
    hosts: impl IntoIterator<Item = (K, &'a HostLoad)>,
    vm: Tenancy,
) -> Result<Placed<K>, Vec<(K, Refusal)>> {
    let mut refused = Vec::new();
    for (host, load) in hosts {
        match admit(policy, load, vm) {
            Ok(with_vm) => return Ok(Placed { host, with_vm, passed_over: refused }),
            Err(r) => refused.push((host, r)),
        }
    }
    Err(refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overcommit::Overcommit;

    fn vm(guarantee_mbps: f64, utilization: f64) -> Tenancy {
        Tenancy { guarantee_bps: guarantee_mbps * 1e6, mean_demand_bps: guarantee_mbps * 1e6 * utilization }
    }

    fn host(vms: &[Tenancy]) -> HostLoad {
        HostLoad { capacity_bps: 1e9, vms: vms.to_vec() }
    }

    #[test]
    fn equal_vms_give_the_seeds_eq_2() {
        // 16 VMs of 250 Mbit/s at 10% on a 1 Gbit/s link: δ = 4, ρ = 0.1.
        let h = host(&[vm(250.0, 0.1); 16]);
        let a = h.assess();
        let eq2 = Overcommit { vms: 16, utilization: 0.1, ratio: 4.0 }.failure_probability();
        assert!((a.committed_ratio - 4.0).abs() < 1e-12);
        assert!((a.failure_probability - eq2).abs() < 1e-12, "{a:?} against {eq2}");
        assert!((a.expected_utilization - 0.4).abs() < 1e-12);
    }

    #[test]
    fn unequal_vms_have_a_heavier_tail_than_equal_ones_of_the_same_total() {
        // The same total mean (320 Mbit/s over 16 VMs on 1 Gbit/s) spread evenly, and with one
        // busy VM: its own exponential tail dominates.
        let even = demand_tail(1e9, std::iter::repeat_n(20e6, 16));
        let eq2 = Overcommit { vms: 16, utilization: 0.08, ratio: 4.0 }.failure_probability();
        assert!((even - eq2).abs() < 1e-12 && even < 1e-6, "equal means: {even} against Eq. 2's {eq2}");
        let skewed = demand_tail(1e9, std::iter::once(170e6).chain(std::iter::repeat_n(10e6, 15)));
        assert!(skewed > 1e-3, "one busy VM: {skewed}, even: {even}");
        // Against the integral for two unequal exponentials: P(X + Y > c) with means a, b is
        // (a e^(-c/a) - b e^(-c/b)) / (a - b).
        let (a, b, c): (f64, f64, f64) = (300e6, 100e6, 1e9);
        let exact = (a * (-c / a).exp() - b * (-c / b).exp()) / (a - b);
        let got = demand_tail(c, [a, b].into_iter());
        assert!((got - exact).abs() < 1e-9, "{got} against {exact}");
    }

    #[test]
    fn guarantees_within_the_link_never_fail() {
        let h = host(&[vm(250.0, 1.0); 4]);
        assert_eq!(h.assess().failure_probability, 0.0);
        assert!(
            admit(&Policy::FailureModel { target_failure: 0.05, max_ratio: 10.0 }, &host(&[]), vm(1000.0, 1.0)).is_ok()
        );
    }

    #[test]
    fn the_failure_model_admits_idle_vms_beyond_the_link_and_refuses_busy_ones() {
        let policy = Policy::FailureModel { target_failure: 0.05, max_ratio: 10.0 };
        let idle = host(&[vm(250.0, 0.05); 12]);
        assert!(admit(&policy, &idle, vm(250.0, 0.05)).is_ok(), "13 x 250M at 5% on 1G");
        let busy = host(&[vm(250.0, 0.6); 4]);
        let refusal = admit(&policy, &busy, vm(250.0, 0.6)).unwrap_err();
        assert!(refusal.with_vm.failure_probability > 0.05);
        let text = refusal.to_string();
        assert!(text.contains("failure probability would be") && text.contains("target 0.05"), "{text}");
        // Guarantees alone: 4x admits the busy fifth VM the model refuses.
        assert!(admit(&Policy::Guarantee { max_ratio: 4.0 }, &busy, vm(250.0, 0.6)).is_ok());
        assert!(admit(&Policy::Guarantee { max_ratio: 1.0 }, &busy, vm(250.0, 0.6)).is_err());
    }

    #[test]
    fn the_ratio_cap_holds_whatever_the_model_says() {
        let policy = Policy::FailureModel { target_failure: 0.05, max_ratio: 2.0 };
        let r = admit(&policy, &host(&[vm(500.0, 0.0); 4]), vm(500.0, 0.0)).unwrap_err();
        assert!(r.to_string().contains("committed ratio would be 2.50, above the largest allowed 2"), "{r}");
    }

    #[test]
    fn first_fit_takes_the_first_host_that_admits_and_lists_every_refusal() {
        let policy = Policy::FailureModel { target_failure: 0.05, max_ratio: 10.0 };
        let (full, empty) = (host(&[vm(250.0, 0.9); 4]), host(&[]));
        let placed = place(&policy, [("h1", &full), ("h2", &empty), ("h3", &empty)], vm(250.0, 0.9)).unwrap();
        assert_eq!((placed.host, placed.with_vm.committed_ratio), ("h2", 0.25));
        assert_eq!(placed.passed_over.len(), 1);
        assert_eq!(placed.passed_over[0].0, "h1");
        let refused = place(&policy, [("h1", &full)], vm(250.0, 0.9)).unwrap_err();
        assert_eq!(refused.len(), 1);
    }

    #[test]
    fn bad_policies_name_the_setting() {
        assert!(Policy::Guarantee { max_ratio: 0.5 }.validate().unwrap_err().contains("max_ratio=0.5"));
        let e = Policy::FailureModel { target_failure: 1.5, max_ratio: 4.0 }.validate().unwrap_err();
        assert!(e.contains("target_failure=1.5"), "{e}");
    }
}
