//! What a tenant buys for a VM and what a host is told to enforce (seed 003 Sec. 3.1, Sec. 4.1).
//!
//! A purchase is the link guarantee (strict rate, dynamic (S, T) or fairness) and, optionally,
//! the VM's C2QoS cycle purchase and its traffic profile (seed 000). The host enforces it as
//! port options through the same path as `slaswitch set-port`, so the switch's own validation
//! and admission decide; the values here are checked with that same code before anything is
//! written.

use std::collections::BTreeMap;

use crate::FleetError;
use serde::{Deserialize, Serialize};
use slaswitch_config::link_policy::guarantee_text;
use slaswitch_config::names::valid_name;
use slaswitch_config::port_settings::PortSettings;
use slaswitch_qos::egress::softbw::Guarantee;

/// The port options a purchase may carry besides its link guarantee, and what each is reset to
/// when the purchase is released.
pub const CYCLE_OPTIONS: &[(&str, &str)] =
    &[("bandwidth_bps", "0"), ("profile_packet_bytes", "358"), ("profile_flows", "many"), ("priority", "8")];

/// The longest VM (port) name: a port name.
pub const MAX_VM_NAME: usize = 15;
/// The longest tenant or host name.
pub const MAX_NAME: usize = 63;

/// What a tenant bought for one VM (etcd `vms/VM`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Purchase {
    /// The VM, named as its switch port is.
    pub vm: String,
    /// Who pays.
    pub tenant: String,
    /// The host it runs on; `None` until its port is announced by some host.
    pub host: Option<String>,
    /// The link guarantee; in etcd as `link_guarantee` reads it (`strict:RATE`,
    /// `dynamic:SIZE,SECONDS`, `fairness`).
    #[serde(with = "slaswitch_config::link_policy::guarantee_as_text")]
    pub guarantee: Guarantee,
    /// The cycle purchase and profile: port options from [`CYCLE_OPTIONS`].
    #[serde(default)]
    pub cycles: BTreeMap<String, String>,
    /// When it was bought (a dynamic guarantee's T counts from here), Unix milliseconds.
    pub bought_unix_ms: u64,
    /// The master's admission of it: on which host, with what figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
}

/// A purchase (new, or a change) waiting for the master's admission (etcd `requests/VM`), and
/// the master's answer once given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurchaseRequest {
    /// What is asked for.
    pub purchase: Purchase,
    /// When it was asked, Unix nanoseconds.
    pub requested_unix_ns: u64,
    /// The master's answer; none while it is waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Admission>,
}

/// The master's answer to a purchase (seed 003 Sec. 4: admission and placement by the failure
/// model of Sec. 2.2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admission {
    /// Taken (the purchase is in `vms/VM` and sent to its host) or refused (nothing changed).
    pub admitted: bool,
    /// The host it was placed on, or the one that refused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The host's figures with the purchase in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub figures: Option<slaswitch_qos::placement::Assessment>,
    /// Why it was refused, naming the figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Hosts that refused it before the one that took it, each with its figures.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passed_over: Vec<String>,
    /// When the master answered, Unix nanoseconds.
    pub answered_unix_ns: u64,
}

impl Purchase {
    /// Checks every field with the switch's own rules; the error names the field and value.
    pub fn validate(&self) -> Result<(), FleetError> {
        valid_name("vm", &self.vm, MAX_VM_NAME)?;
        valid_name("tenant", &self.tenant, MAX_NAME)?;
        if let Some(h) = &self.host {
            valid_name("host", h, MAX_NAME)?;
        }
        if let Some(k) = self.cycles.keys().find(|k| !CYCLE_OPTIONS.iter().any(|(o, _)| o == k)) {
            let allowed: Vec<&str> = CYCLE_OPTIONS.iter().map(|(o, _)| *o).collect();
            return Err(FleetError::NotCycleOption { key: k.clone(), allowed: allowed.join(", ") });
        }
        PortSettings::parse(&self.enforcement_options(&self.guarantee))?;
        Ok(())
    }

    /// The rate it guarantees, bits/s: a strict rate, a dynamic guarantee's S / T, or the cycle
    /// purchase's `bandwidth_bps` if that is more; 0 for fairness alone.
    pub fn guaranteed_bps(&self) -> f64 {
        let link = match self.guarantee {
            Guarantee::Strict { rate_bps } => rate_bps as f64,
            Guarantee::Dynamic { total_bytes, duration_ns } => total_bytes as f64 * 8e9 / duration_ns.max(1) as f64,
            Guarantee::Fairness => 0.0,
        };
        let cycles = self
            .cycles
            .get("bandwidth_bps")
            .and_then(|v| slaswitch_config::bandwidth::parse_rate_bps("bandwidth_bps", v).ok())
            .map_or(0.0, |b| b as f64);
        link.max(cycles)
    }

    /// The port options that enforce it with link guarantee `in_force` (for a dynamic one,
    /// what is left of it).
    pub fn enforcement_options(&self, in_force: &Guarantee) -> BTreeMap<String, String> {
        let mut options = self.cycles.clone();
        options.insert("link_guarantee".into(), guarantee_text(in_force));
        options
    }
}

/// What a host is told to set on one VM's port (etcd `hosts/HOST/guarantees/VM`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Enforcement {
    /// The port.
    pub vm: String,
    /// The options, exactly as `set-port` takes them.
    pub options: BTreeMap<String, String>,
    /// When the purchase it enforces was asked for (a rewrite by the master: when written),
    /// Unix nanoseconds, for purchase-to-enforcement latency.
    pub issued_unix_ns: u64,
    /// The over-commitment the master granted the host (its guarantees over its uplink's
    /// rate): the switch's own admission lets purchased bandwidth add up to this many times
    /// the uplink's rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_overcommit: Option<f64>,
}

/// The options that undo a released purchase: each key it set back to the switch's default.
pub fn release_options(applied: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut reset = BTreeMap::new();
    for key in applied.keys() {
        if key == "link_guarantee" {
            reset.insert(key.clone(), "fairness".to_string());
        } else if let Some((_, default)) = CYCLE_OPTIONS.iter().find(|(o, _)| o == key) {
            reset.insert(key.clone(), default.to_string());
        }
    }
    reset
}

/// What a host answered for one VM (etcd `hosts/HOST/status/VM`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Status {
    /// What became of it.
    pub state: EnforcementState,
    /// Why it was refused, in the switch's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The enforcement's etcd revision this answers.
    pub revision: i64,
    /// When the enforcement was written and when it took effect, Unix nanoseconds.
    pub issued_unix_ns: u64,
    /// When it was applied (or refused).
    pub answered_unix_ns: u64,
}

/// What became of an enforcement on its host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnforcementState {
    /// The switch took the options.
    Applied,
    /// The switch refused them (the reason says why); nothing changed.
    Refused,
    /// No port of the VM's name on the host yet.
    Waiting,
}

impl std::fmt::Display for EnforcementState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            EnforcementState::Applied => "applied",
            EnforcementState::Refused => "refused",
            EnforcementState::Waiting => "waiting",
        })
    }
}

/// A live host (etcd `hosts/HOST/alive`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostInfo {
    /// Its id.
    pub host: String,
    /// Its billing cycle, milliseconds.
    pub cycle_ms: u64,
    /// When its agent (re)connected, Unix milliseconds.
    pub since_unix_ms: u64,
    /// The line rate of its uplink, wire bits/s: the capacity C of the price functions for
    /// its VMs (seed 003 Sec. 3.3). None for a host without a paced uplink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplink_bps: Option<u64>,
}

impl Admission {
    /// A refusal, by `host` when one was asked, for `reason`.
    pub fn refused(host: Option<String>, reason: String) -> Admission {
        Admission {
            admitted: false,
            host,
            figures: None,
            reason: Some(reason),
            passed_over: Vec::new(),
            answered_unix_ns: unix_ns(),
        }
    }
}

/// A host's over-commitment as the master last assessed it (etcd `hosts/HOST/load`), with its
/// measured utilization.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostLoadView {
    /// The uplink's rate the figures are of, bits/s (C).
    pub capacity_bps: u64,
    /// Guaranteed VMs placed on it.
    pub vms: usize,
    /// Its guarantees over C, Eq. 2's failure probability and the utilization the VMs' mean
    /// demands make.
    pub figures: slaswitch_qos::placement::Assessment,
    /// Its measured utilization (all its VMs' traffic over C), per billing cycle: mean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_utilization: Option<f64>,
    /// When assessed, Unix milliseconds.
    pub assessed_unix_ms: u64,
}

/// Now, Unix nanoseconds.
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use slaswitch_config::link_policy::parse_guarantee;

    fn purchase(guarantee: &str, cycles: &[(&str, &str)]) -> Purchase {
        Purchase {
            vm: "vm1".into(),
            tenant: "acme".into(),
            host: None,
            guarantee: parse_guarantee(guarantee).unwrap(),
            cycles: cycles.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            bought_unix_ms: 0,
            admission: None,
        }
    }

    #[test]
    fn a_purchase_becomes_the_port_options_of_set_port() {
        let p = purchase("strict:300M", &[("bandwidth_bps", "300M")]);
        p.validate().unwrap();
        let o = p.enforcement_options(&p.guarantee);
        assert_eq!(o["link_guarantee"], "strict:300000000");
        assert_eq!(o["bandwidth_bps"], "300M");
    }

    #[test]
    fn bad_purchases_name_the_field_and_value() {
        // A guarantee is refused as it is read, from the CLI or from etcd.
        let text = r#"{"vm":"vm1","tenant":"acme","host":null,"guarantee":"strict:fast","bought_unix_ms":0}"#;
        let e = serde_json::from_str::<Purchase>(text).unwrap_err().to_string();
        assert!(e.contains("link_guarantee=strict:fast: not a rate"), "{e}");
        let back: Purchase =
            serde_json::from_str(&serde_json::to_string(&purchase("dynamic:1M,30", &[])).unwrap()).unwrap();
        assert_eq!(back.guarantee, Guarantee::Dynamic { total_bytes: 1_000_000, duration_ns: 30_000_000_000 });
        for (p, says) in [
            (purchase("fairness", &[("pmd", "1")]), "cycles: pmd is not a purchase option"),
            (purchase("fairness", &[("priority", "9")]), "priority"),
            (Purchase { vm: "-x".into(), ..purchase("fairness", &[]) }, "vm '-x'"),
            (Purchase { tenant: String::new(), ..purchase("fairness", &[]) }, "tenant ''"),
        ] {
            let e = p.validate().unwrap_err().to_string();
            assert!(e.contains(says), "{says}: {e}");
        }
    }

    #[test]
    fn release_resets_exactly_what_was_set() {
        let applied: BTreeMap<String, String> = [("link_guarantee", "strict:1"), ("priority", "2")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let r = release_options(&applied);
        assert_eq!(r.len(), 2);
        assert_eq!(r["link_guarantee"], "fairness");
        assert_eq!(r["priority"], "8");
    }
}
