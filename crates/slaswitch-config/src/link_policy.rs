//! The link schedulers' options: which scheduler a paced port runs, and each VM port's
//! settings for it, in the seeds' own terms. All change live.
//!
//! On a paced port (one with `link_rate_bps`):
//!
//! | option                | meaning                                                               |
//! |-----------------------|-----------------------------------------------------------------------|
//! | `egress_scheduler`    | `fifo` (default), `ancs` (seed 002), `softbw` (seed 003), `pievde` (seed 004) or `ratelimit` (seed 003's ElasticSwitch-style baseline) |
//! | `link_drop`           | `tail` (default): a full VM queue drops the arriving frame; `head`: its oldest |
//! | `link_latency`        | `on` (default): latency-class VMs (`priority` 1 or 2) send ahead of the scheduler's choice, up to their purchase; `off`: they wait their turn |
//! | `ancs_period_us`      | ANCS's accounting period, 1,000 to 1,000,000 us (default 30,000, seed 002 Sec. 3.2) |
//! | `ratelimit_period_us` | how often the baseline recomputes its limits, 1,000 to 1,000,000 us (default 50,000) |
//!
//! On every port whose frames cross a paced port (the VMs):
//!
//! | option              | meaning                                                                 |
//! |---------------------|-------------------------------------------------------------------------|
//! | `link_weight`       | ANCS's weight, and the VM's weight among its tenant's VMs in PIE-VDE (1 to 10,000, default 1) |
//! | `link_min_bps`      | ANCS's MinimumCredit as a rate; default: the VM's purchase (`bandwidth_bps`) |
//! | `link_max_bps`      | ANCS's MaximumCredit as a rate                                           |
//! | `link_guarantee`    | SoftBW's guarantee: `strict:RATE`, `dynamic:SIZE,SECONDS` (SIZE in bytes, `k`/`M`/`G` accepted) or `fairness`; default: `strict` at the purchase, else `fairness` |
//! | `tenant`            | PIE-VDE's tenant (`slaswitch set-tenant NAME weight=W`); default `default`, weight 1 |
//! | `link_queue_frames` | frames its queue on a paced port holds, 1 to 32,768 (default 1024)     |
//!
//! Rates on the link are wire rates (frames plus 24 bytes of FCS, preamble and gap, as
//! `link_rate_bps` is). A purchase is in frame bits/s; its guarantee on the link is the same
//! purchase in wire bits/s at its profile's frame size, so one `bandwidth_bps` buys both the
//! PMD's cycles and the link.

use std::collections::BTreeMap;

use slaswitch_qos::egress::link_scheduler::SchedulerKind;
use slaswitch_qos::egress::softbw::Guarantee;
use slaswitch_qos::link::WIRE_OVERHEAD_BYTES;

use crate::bandwidth::{parse_rate_bps, BandwidthSla};
use crate::error::ConfigError;
use crate::ranges::number_in;

/// The options of this module.
pub const LINK_POLICY_OPTIONS: &[&str] = &[
    "egress_scheduler",
    "link_drop",
    "link_latency",
    "ancs_period_us",
    "ratelimit_period_us",
    "link_weight",
    "link_min_bps",
    "link_max_bps",
    "link_guarantee",
    "tenant",
    "link_queue_frames",
];

/// The tenant a VM belongs to when it names none.
pub const DEFAULT_TENANT: &str = "default";

/// Frames a VM's queue on a paced port holds by default.
pub const DEFAULT_LINK_QUEUE_FRAMES: usize = 1024;

/// What a paced port's scheduler is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EgressSpec {
    /// Which scheduler.
    pub kind: SchedulerKind,
    /// Head drop instead of tail drop.
    pub head_drop: bool,
    /// Latency-class VMs go ahead of the scheduler's choice, within their purchase.
    pub latency_lane: bool,
    /// ANCS's accounting period.
    pub ancs_period_ns: u64,
    /// The baseline's recomputation period.
    pub ratelimit_period_ns: u64,
}

impl Default for EgressSpec {
    fn default() -> Self {
        EgressSpec {
            kind: SchedulerKind::Fifo,
            head_drop: false,
            latency_lane: true,
            ancs_period_ns: 30_000_000,
            ratelimit_period_ns: 50_000_000,
        }
    }
}

/// A VM's own settings for the link's schedulers, as given (purchase defaults not yet applied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmLinkSpec {
    /// `link_weight`.
    pub weight: u32,
    /// `link_min_bps`.
    pub min_bps: Option<u64>,
    /// `link_max_bps`.
    pub max_bps: Option<u64>,
    /// `link_guarantee`.
    pub guarantee: Option<Guarantee>,
    /// `tenant`.
    pub tenant: String,
    /// `link_queue_frames`.
    pub queue_frames: usize,
}

impl Default for VmLinkSpec {
    fn default() -> Self {
        VmLinkSpec {
            weight: 1,
            min_bps: None,
            max_bps: None,
            guarantee: None,
            tenant: DEFAULT_TENANT.into(),
            queue_frames: DEFAULT_LINK_QUEUE_FRAMES,
        }
    }
}

impl EgressSpec {
    /// Reads the paced port's options.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<EgressSpec, ConfigError> {
        let kind = match options.get("egress_scheduler") {
            None => SchedulerKind::Fifo,
            Some(v) => SchedulerKind::parse(v).map_err(|_| {
                let names = SchedulerKind::ALL.map(|k| k.name()).join(", ");
                ConfigError::value("egress_scheduler", v, format!("one of {names}"))
            })?,
        };
        let head_drop = match options.get("link_drop").map(String::as_str) {
            None | Some("tail") => false,
            Some("head") => true,
            Some(v) => return Err(ConfigError::value("link_drop", v, "tail or head")),
        };
        let latency_lane = match options.get("link_latency").map(String::as_str) {
            None | Some("on") => true,
            Some("off") => false,
            Some(v) => return Err(ConfigError::value("link_latency", v, "on or off")),
        };
        let period = |key| number_in::<u64>(options, key, 1_000..=1_000_000).map(|us| us.map(|us| us * 1_000));
        let d = EgressSpec::default();
        Ok(EgressSpec {
            kind,
            head_drop,
            latency_lane,
            ancs_period_ns: period("ancs_period_us")?.unwrap_or(d.ancs_period_ns),
            ratelimit_period_ns: period("ratelimit_period_us")?.unwrap_or(d.ratelimit_period_ns),
        })
    }
}

/// Checks a tenant's name: the names' pattern, up to 32 characters.
pub fn valid_tenant_name(name: &str) -> Result<(), ConfigError> {
    crate::names::valid_name("tenant name", name, 32)
}

/// A size in bytes with an optional `k`, `M` or `G` (powers of ten).
fn parse_bytes(key: &str, v: &str) -> Result<u64, ConfigError> {
    parse_rate_bps(key, v)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| ConfigError::value(key, v, "a size in bytes, e.g. 32k or 500M"))
}

/// A guarantee as `link_guarantee` writes it, in bits/s, bytes and seconds; what
/// [`parse_guarantee`] reads back.
pub fn guarantee_text(g: &Guarantee) -> String {
    match *g {
        Guarantee::Strict { rate_bps } => format!("strict:{rate_bps}"),
        Guarantee::Dynamic { total_bytes, duration_ns } => {
            format!("dynamic:{total_bytes},{}", duration_ns as f64 / 1e9)
        }
        Guarantee::Fairness => "fairness".into(),
    }
}

/// A guarantee in JSON as the text `link_guarantee` takes, for serde's `with`: etcd, the
/// control socket's replies and the switch's options read the same words.
pub mod guarantee_as_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use slaswitch_qos::egress::softbw::Guarantee;

    /// Writes [`super::guarantee_text`].
    pub fn serialize<S: Serializer>(g: &Guarantee, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::guarantee_text(g))
    }

    /// Reads with [`super::parse_guarantee`]; a bad one is refused naming the field.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Guarantee, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_guarantee(&text).map_err(serde::de::Error::custom)
    }
}

/// `strict:RATE`, `dynamic:SIZE,SECONDS` or `fairness`.
pub fn parse_guarantee(v: &str) -> Result<Guarantee, ConfigError> {
    let bad = |why: &str| {
        ConfigError::value("link_guarantee", v, format!("{why}; strict:RATE, dynamic:SIZE,SECONDS or fairness"))
    };
    if v == "fairness" {
        return Ok(Guarantee::Fairness);
    }
    if let Some(rate) = v.strip_prefix("strict:") {
        let rate_bps = parse_rate_bps("link_guarantee", rate).map_err(|_| bad("not a rate"))?;
        if rate_bps == 0 {
            return Err(bad("a strict rate must be positive"));
        }
        return Ok(Guarantee::Strict { rate_bps });
    }
    if let Some(rest) = v.strip_prefix("dynamic:") {
        let (size, secs) = rest.split_once(',').ok_or_else(|| bad("dynamic needs SIZE,SECONDS"))?;
        let total_bytes = parse_bytes("SIZE", size).map_err(|e| bad(&e.to_string()))?;
        let secs: f64 = secs
            .parse()
            .ok()
            .filter(|s: &f64| s.is_finite() && *s >= 0.001 && *s <= 86_400.0)
            .ok_or_else(|| bad("SECONDS from 0.001 to 86400"))?;
        return Ok(Guarantee::Dynamic { total_bytes, duration_ns: (secs * 1e9).round() as u64 });
    }
    Err(bad("unknown form"))
}

impl VmLinkSpec {
    /// Reads a VM port's options.
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<VmLinkSpec, ConfigError> {
        let rate = |key: &str| -> Result<Option<u64>, ConfigError> {
            options.get(key).map(|v| parse_rate_bps(key, v)).transpose()
        };
        let tenant = options.get("tenant").cloned().unwrap_or_else(|| DEFAULT_TENANT.into());
        valid_tenant_name(&tenant).map_err(|e| ConfigError::value("tenant", &tenant, e.to_string()))?;
        let spec = VmLinkSpec {
            weight: number_in::<u32>(options, "link_weight", 1..=10_000)?.unwrap_or(1),
            min_bps: rate("link_min_bps")?.filter(|&r| r > 0),
            max_bps: rate("link_max_bps")?,
            guarantee: options.get("link_guarantee").map(|v| parse_guarantee(v)).transpose()?,
            tenant,
            queue_frames: number_in::<usize>(options, "link_queue_frames", 1..=32_768)?
                .unwrap_or(DEFAULT_LINK_QUEUE_FRAMES),
        };
        if spec.max_bps == Some(0) {
            return Err(ConfigError::value("link_max_bps", "0", "a maximum must be positive (leave it out for none)"));
        }
        if let (Some(min), Some(max)) = (spec.min_bps, spec.max_bps) {
            if min > max {
                return Err(ConfigError::MinAboveMax { min_bps: min, max_bps: max });
            }
        }
        Ok(spec)
    }

    /// The minimum in force: the one given, else the purchase on the wire.
    pub fn min_in_force(&self, sla: Option<&BandwidthSla>) -> Option<u64> {
        let from_purchase = sla.map(purchase_on_wire_bps);
        match (self.min_bps, self.max_bps) {
            (Some(min), _) => Some(min),
            (None, Some(max)) => from_purchase.map(|p| p.min(max)),
            (None, None) => from_purchase,
        }
    }

    /// The rate up to which a latency-class VM's frames go ahead on the link: what it is
    /// guaranteed (a dynamic guarantee's S/T), else its minimum; `None` without either, since
    /// the lane is bounded by a purchase.
    pub fn latency_in_force(&self, sla: Option<&BandwidthSla>) -> Option<u64> {
        match self.guarantee_in_force(sla) {
            Guarantee::Fairness => self.min_in_force(sla),
            g => Some(g.initial_rate_bps()),
        }
        .filter(|&r| r > 0)
    }

    /// The guarantee in force: the one given, else strict at the purchase on the wire, else
    /// fairness.
    pub fn guarantee_in_force(&self, sla: Option<&BandwidthSla>) -> Guarantee {
        self.guarantee.unwrap_or_else(|| match sla {
            Some(s) => Guarantee::Strict { rate_bps: purchase_on_wire_bps(s) },
            None => Guarantee::Fairness,
        })
    }
}

/// A purchase of frame bits/s as wire bits/s, at its profile's frame size.
pub fn purchase_on_wire_bps(sla: &BandwidthSla) -> u64 {
    let frame = u64::from(sla.profile.packet_bytes.max(1));
    sla.bandwidth_bps.saturating_mul(frame + u64::from(WIRE_OVERHEAD_BYTES)) / frame
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn guarantees_in_the_seeds_terms() {
        assert_eq!(parse_guarantee("strict:450M").unwrap(), Guarantee::Strict { rate_bps: 450_000_000 });
        assert_eq!(
            parse_guarantee("dynamic:32k,0.5").unwrap(),
            Guarantee::Dynamic { total_bytes: 32_000, duration_ns: 500_000_000 }
        );
        assert_eq!(parse_guarantee("fairness").unwrap(), Guarantee::Fairness);
        for bad in ["strict:0", "strict:fast", "dynamic:1M", "dynamic:1M,0", "dynamic:0,1", "dynamic:1M,inf", "wfq"] {
            let e = parse_guarantee(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("link_guarantee={bad}:")) && e.contains("strict:RATE"), "{e}");
        }
    }

    #[test]
    fn every_bad_value_names_its_option_its_value_and_what_is_allowed() {
        for (key, value, allowed) in [
            ("egress_scheduler", "wfq", "fifo, ancs, softbw, pievde, ratelimit"),
            ("link_drop", "random", "tail or head"),
            ("link_latency", "maybe", "on or off"),
            ("ancs_period_us", "10", "from 1000 to 1000000"),
            ("link_weight", "0", "from 1 to 10000"),
            ("link_queue_frames", "40000", "from 1 to 32768"),
            ("link_min_bps", "-5", "bits per second"),
            ("tenant", "-x", "1 to 32 letters"),
            ("tenant", "_x", "starting with a letter or a digit"),
        ] {
            let o = opts(&[(key, value)]);
            let e = EgressSpec::from_options(&o).and_then(|_| VmLinkSpec::from_options(&o)).unwrap_err().to_string();
            assert!(e.contains(&format!("{key}={value}")) && e.contains(allowed), "{key}={value}: {e}");
        }
        let e = VmLinkSpec::from_options(&opts(&[("link_min_bps", "300M"), ("link_max_bps", "200M")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("link_min_bps=300000000") && e.contains("link_max_bps=200000000"), "{e}");
    }

    #[test]
    fn a_purchase_sets_the_minimum_and_the_guarantee_on_the_wire() {
        let sla = BandwidthSla::from_options(&opts(&[("bandwidth_bps", "400M"), ("profile_packet_bytes", "1500")]))
            .unwrap()
            .unwrap();
        let vm = VmLinkSpec::default();
        // 400 Mbit/s of 1500-byte frames is 406.4 Mbit/s on the wire.
        assert_eq!(vm.min_in_force(Some(&sla)), Some(406_400_000));
        assert_eq!(vm.guarantee_in_force(Some(&sla)), Guarantee::Strict { rate_bps: 406_400_000 });
        let own = VmLinkSpec::from_options(&opts(&[("link_guarantee", "fairness"), ("link_max_bps", "100M")])).unwrap();
        assert_eq!(own.guarantee_in_force(Some(&sla)), Guarantee::Fairness);
        assert_eq!(own.min_in_force(Some(&sla)), Some(100_000_000), "a minimum never exceeds the maximum given");
        assert_eq!(vm.guarantee_in_force(None), Guarantee::Fairness);
    }
}
