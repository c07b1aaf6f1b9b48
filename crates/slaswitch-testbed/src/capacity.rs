//! Rates as shares of what this host's PMD core forwards. A scenario's `[capacity]` table names
//! budgets; anywhere in the file `{NAME.UNIT}` or `{NAME.UNIT*FACTOR}` stands for the budget's
//! rate in that unit, so one file saturates (or leaves idle) the PMD on a fast host and a slow
//! one alike. The runner measures the core's capacity for each budget's frames just before the
//! run (every traffic kind alone at full speed on slaswitch's PMD), takes the switch's model's
//! figure where that is less ([`smaller_of_probe_and_model`]) and writes the resolved file
//! into the run folder; the report states the figures.
//!
//! ```toml
//! [capacity]
//! innocent = { core_share = 0.30, size = 1024, flows = 20000 }  # 30% of the core's packets
//! flood = { core_share = 0.14, size = 64, flows = 20000 }
//! buy = { same_policed_rate_as = "flood", size = 512 }   # flood's bytes less headers, in 512-byte frames
//!
//! [[vm]]
//! name = "vm"
//! phases = ["size=1024,flows=20000,rate={innocent.mbps*1.05}mbps"]
//! qos = { bandwidth_bps = "{innocent.bps}" }   # a quoted placeholder becomes a bare number
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use slaswitch_qos::cpu::{BandwidthModel, FlowCount, TrafficProfile};

/// The bytes of an Ethernet header, which byte policers do not count (OVS's
/// `ingress_policing_rate` is in bits of frames less it).
pub const ETHERNET_HEADER_BYTES: f64 = 14.0;

/// One budget of the `[capacity]` table: either a share of the core or another budget's
/// policed byte rate in frames of another size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// The share of one PMD core's packets of this kind, 0 to 10 (above 1: an overload).
    pub core_share: Option<f64>,
    /// The frames' length in bytes, without FCS.
    pub size: u16,
    /// The flows (UDP source ports) they cycle through; with `same_policed_rate_as`, unused.
    #[serde(default = "one_flow")]
    pub flows: u32,
    /// Another budget whose bits, less Ethernet headers, this one carries in `size`-byte frames
    /// (what a byte policer set at one lets through of the other).
    pub same_policed_rate_as: Option<String>,
}

fn one_flow() -> u32 {
    1
}

/// The frames a capacity is measured for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Kind {
    /// Bytes per frame, without FCS.
    pub size: u16,
    /// Flows they cycle through.
    pub flows: u32,
}

/// A budget with its rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resolved {
    /// Its name in the file.
    pub name: String,
    /// What it was given as.
    pub budget: Budget,
    /// The core's capacity for its frames, packets per second (budgets of a core share): the
    /// smaller of the probe's and the model's ([`smaller_of_probe_and_model`]).
    pub capacity_pps: Option<f64>,
    /// What the capacity probe measured for its frames, packets per second.
    #[serde(default)]
    pub probe_capacity_pps: Option<f64>,
    /// What slaswitch's bandwidth-CPU model prices its frames at, packets per second of the
    /// core (none: no model).
    #[serde(default)]
    pub model_capacity_pps: Option<f64>,
    /// Its rate, packets per second of `budget.size`-byte frames.
    pub pps: f64,
}

impl Resolved {
    /// The rate in `unit`: pps, kpps, mpps, bps, kbps, mbps, gbps or policer_kbps (kbit/s of
    /// frames less their Ethernet header).
    pub fn value(&self, unit: &str) -> Option<f64> {
        let bytes = f64::from(self.budget.size);
        let bps = self.pps * bytes * 8.0;
        Some(match unit {
            "pps" => self.pps,
            "kpps" => self.pps / 1e3,
            "mpps" => self.pps / 1e6,
            "bps" => bps,
            "kbps" => bps / 1e3,
            "mbps" => bps / 1e6,
            "gbps" => bps / 1e9,
            "policer_kbps" => self.pps * (bytes - ETHERNET_HEADER_BYTES) * 8.0 / 1e3,
            _ => return None,
        })
    }
}

const UNITS: &str = "pps, kpps, mpps, bps, kbps, mbps, gbps, policer_kbps";

/// A `[capacity]` table that cannot be priced: the budget or placeholder, and what is allowed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BudgetError {
    /// The table does not read as budgets.
    #[error("capacity: {0}")]
    Table(String),
    /// A budget's name.
    #[error("capacity.{name}: a budget's name is letters, digits, '-' and '_'")]
    Name {
        /// The budget.
        name: String,
    },
    /// A frame size.
    #[error("capacity.{name}.size={size}: frames are 60 to 1514 bytes (without FCS)")]
    Size {
        /// The budget.
        name: String,
        /// The size given.
        size: u16,
    },
    /// A share of the core.
    #[error("capacity.{name}.core_share={share}: a share above 0, at most 10")]
    Share {
        /// The budget.
        name: String,
        /// The share given.
        share: f64,
    },
    /// `same_policed_rate_as` names a budget that is not a share itself.
    #[error("capacity.{name}.same_policed_rate_as='{other}': that budget must give a core_share itself")]
    NotAShare {
        /// The budget.
        name: String,
        /// The one it names.
        other: String,
    },
    /// `same_policed_rate_as` names no budget.
    #[error("capacity.{name}.same_policed_rate_as='{other}': no such budget")]
    NoSuchBudget {
        /// The budget.
        name: String,
        /// The one it names.
        other: String,
    },
    /// Neither or both of the two ways to size a budget.
    #[error("capacity.{name}: give either core_share or same_policed_rate_as")]
    Neither {
        /// The budget.
        name: String,
    },
    /// A traffic kind whose capacity was not measured.
    #[error("no capacity measured for {0}")]
    NotMeasured(String),
    /// A placeholder naming no budget.
    #[error("line {line}: {{{placeholder}}}: no budget '{name}' in [capacity] (it has: {names})")]
    Placeholder {
        /// Its line.
        line: usize,
        /// Its text between the braces.
        placeholder: String,
        /// The budget it names.
        name: String,
        /// The budgets there are, comma separated.
        names: String,
    },
    /// A placeholder's unit.
    #[error("line {line}: {{{placeholder}}}: unknown unit '{unit}' ({})", UNITS)]
    Unit {
        /// Its line.
        line: usize,
        /// Its text between the braces.
        placeholder: String,
        /// The unit given.
        unit: String,
    },
}

/// The `[capacity]` table of a scenario's text (empty when it has none).
pub fn budgets(text: &str) -> Result<BTreeMap<String, Budget>, BudgetError> {
    #[derive(Deserialize)]
    struct OnlyCapacity {
        #[serde(default)]
        capacity: BTreeMap<String, Budget>,
    }
    let doc: toml::Table = toml::from_str(text).map_err(|e| BudgetError::Table(e.message().trim().to_string()))?;
    let Some(table) = doc.get("capacity") else { return Ok(BTreeMap::new()) };
    let wrapped = toml::Table::from_iter([("capacity".to_string(), table.clone())]);
    let only: OnlyCapacity =
        wrapped.try_into().map_err(|e: toml::de::Error| BudgetError::Table(e.message().to_string()))?;
    for (name, b) in &only.capacity {
        check_budget(name, b, &only.capacity)?;
    }
    Ok(only.capacity)
}

fn check_budget(name: &str, b: &Budget, all: &BTreeMap<String, Budget>) -> Result<(), BudgetError> {
    let name = name.to_string();
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(BudgetError::Name { name });
    }
    if !(60..=1514).contains(&b.size) {
        return Err(BudgetError::Size { name, size: b.size });
    }
    match (b.core_share, &b.same_policed_rate_as) {
        (Some(s), None) if s > 0.0 && s <= 10.0 => Ok(()),
        (Some(share), None) => Err(BudgetError::Share { name, share }),
        (None, Some(other)) => match all.get(other) {
            Some(o) if o.core_share.is_some() => Ok(()),
            Some(_) => Err(BudgetError::NotAShare { name, other: other.clone() }),
            None => Err(BudgetError::NoSuchBudget { name, other: other.clone() }),
        },
        _ => Err(BudgetError::Neither { name }),
    }
}

/// The traffic kinds whose capacity the budgets need.
pub fn kinds(budgets: &BTreeMap<String, Budget>) -> Vec<Kind> {
    let mut k: Vec<Kind> =
        budgets.values().filter(|b| b.core_share.is_some()).map(|b| Kind { size: b.size, flows: b.flows }).collect();
    k.sort();
    k.dedup();
    k
}

/// Every budget's rate, from the capacities measured for `kinds(budgets)`.
pub fn resolve(
    budgets: &BTreeMap<String, Budget>,
    capacity_pps: &BTreeMap<Kind, f64>,
) -> Result<Vec<Resolved>, BudgetError> {
    let share_rate = |b: &Budget| -> Result<(f64, f64), BudgetError> {
        let kind = Kind { size: b.size, flows: b.flows };
        let cap = *capacity_pps.get(&kind).ok_or_else(|| BudgetError::NotMeasured(format!("{kind:?}")))?;
        Ok((cap, cap * b.core_share.expect("a share budget")))
    };
    budgets
        .iter()
        .map(|(name, b)| {
            let (capacity_pps, pps) = match &b.same_policed_rate_as {
                None => share_rate(b).map(|(c, p)| (Some(c), p))?,
                Some(other) => {
                    let o = &budgets[other];
                    let (_, other_pps) = share_rate(o)?;
                    let policed_bytes_per_sec = other_pps * (f64::from(o.size) - ETHERNET_HEADER_BYTES);
                    (None, policed_bytes_per_sec / (f64::from(b.size) - ETHERNET_HEADER_BYTES))
                }
            };
            Ok(Resolved {
                name: name.clone(),
                budget: b.clone(),
                capacity_pps,
                probe_capacity_pps: None,
                model_capacity_pps: None,
                pps,
            })
        })
        .collect()
}

/// What slaswitch's bandwidth-CPU model says one VM's frames of `kind` cost the core, as packets
/// per second of the whole core (`None`: the model has no row for them).
pub fn model_capacity_pps(model: &BandwidthModel, kind: Kind) -> Option<f64> {
    let flows = if kind.flows <= 1 { FlowCount::Single } else { FlowCount::Many };
    let (cycles, _) = model.cycles_per_packet(&TrafficProfile::new(u32::from(kind.size), flows)).ok()?;
    (cycles.total() > 0.0).then(|| model.tsc_hz as f64 / cycles.total())
}

/// The capacity each kind's budgets are shares of: the smaller of what the probe just measured
/// and what the switch's model prices the frames at. A frame's cost on a shared host moves
/// between levels about 2x apart within minutes (docs/results/c2qos-experiments.md, Fig. 10's
/// refusals), and admission prices purchases with the model: shares of a probe that caught
/// the fast level did not fit the core by a model calibrated at the slow one, and were refused.
pub fn smaller_of_probe_and_model(
    probe_pps: &BTreeMap<Kind, f64>,
    model: Option<&BandwidthModel>,
) -> BTreeMap<Kind, f64> {
    probe_pps
        .iter()
        .map(|(&kind, &probe)| {
            let model = model.and_then(|m| model_capacity_pps(m, kind));
            (kind, model.map_or(probe, |m| m.min(probe)))
        })
        .collect()
}

/// Notes on each share budget what the probe measured and what the model says (`describe`).
pub fn note_sources(resolved: &mut [Resolved], probe_pps: &BTreeMap<Kind, f64>, model: Option<&BandwidthModel>) {
    for r in resolved.iter_mut().filter(|r| r.capacity_pps.is_some()) {
        let kind = Kind { size: r.budget.size, flows: r.budget.flows };
        r.probe_capacity_pps = probe_pps.get(&kind).copied();
        r.model_capacity_pps = model.and_then(|m| model_capacity_pps(m, kind));
    }
}

/// `text` with every `{NAME.UNIT}` / `{NAME.UNIT*FACTOR}` replaced by the number; a placeholder
/// that is a whole quoted string (`"{a.bps}"`) becomes a bare number. Rates in bits, and pps,
/// are whole numbers; the others keep three decimals.
pub fn substitute(text: &str, resolved: &[Resolved]) -> Result<String, BudgetError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let Some(len) = rest[open..].find('}') else { break };
        let inner = &rest[open + 1..open + len];
        let Some((name, unit, factor)) = placeholder(inner) else {
            out.push_str(&rest[..=open]);
            rest = &rest[open + 1..];
            continue;
        };
        let line = text[..text.len() - rest.len() + open].matches('\n').count() + 1;
        let r = resolved.iter().find(|r| r.name == name).ok_or_else(|| {
            let names: Vec<&str> = resolved.iter().map(|r| r.name.as_str()).collect();
            let (placeholder, name, names) = (inner.to_string(), name.to_string(), names.join(", "));
            BudgetError::Placeholder { line, placeholder, name, names }
        })?;
        let unit_error = || BudgetError::Unit { line, placeholder: inner.to_string(), unit: unit.to_string() };
        let v = r.value(unit).ok_or_else(unit_error)? * factor;
        let number = if matches!(unit, "kpps" | "mpps" | "mbps" | "gbps") {
            format!("{v:.3}")
        } else {
            format!("{:.0}", v.round())
        };
        let quoted = open > 0 && rest[..open].ends_with('"') && rest[open + len + 1..].starts_with('"');
        if quoted {
            out.push_str(&rest[..open - 1]);
            out.push_str(&number);
            rest = &rest[open + len + 2..];
        } else {
            out.push_str(&rest[..open]);
            out.push_str(&number);
            rest = &rest[open + len + 1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// `NAME.UNIT` or `NAME.UNIT*FACTOR` (anything else, e.g. an inline table or `{count}`, is not
/// a placeholder).
fn placeholder(inner: &str) -> Option<(&str, &str, f64)> {
    let (name, tail) = inner.split_once('.')?;
    let (unit, factor) = match tail.split_once('*') {
        Some((u, f)) => (u, f.parse::<f64>().ok().filter(|f| f.is_finite() && *f > 0.0)?),
        None => (tail, 1.0),
    };
    let word = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    (word(name) && word(unit)).then_some((name, unit, factor))
}

/// `share` as a percentage, to a tenth where it has one (3.5%, 12%).
fn percent(share: f64) -> String {
    let tenths = (share * 1000.0).round();
    if tenths % 10.0 == 0.0 {
        format!("{:.0}", tenths / 10.0)
    } else {
        format!("{:.1}", tenths / 10.0)
    }
}

/// The resolved budgets as report lines.
pub fn describe(resolved: &[Resolved]) -> Vec<String> {
    resolved
        .iter()
        .map(|r| {
            let b = &r.budget;
            let what = match (&b.same_policed_rate_as, r.capacity_pps) {
                (Some(o), _) => format!("{o}'s policed byte rate in {}-byte frames", b.size),
                (None, Some(cap)) => format!(
                    "{}% of the core's {:.0} kpps of {}-byte frames over {} flow{}{}",
                    percent(b.core_share.unwrap_or(0.0)),
                    cap / 1e3,
                    b.size,
                    b.flows,
                    if b.flows == 1 { "" } else { "s" },
                    sources(r)
                ),
                (None, None) => String::new(),
            };
            format!(
                "{}: {what} = {:.1} kpps = {:.1} Mbit/s ({:.0} kbit/s policed)",
                r.name,
                r.pps / 1e3,
                r.value("mbps").unwrap_or(0.0),
                r.value("policer_kbps").unwrap_or(0.0)
            )
        })
        .collect()
}

/// Where a share budget's capacity came from, when the probe and the model were both read.
fn sources(r: &Resolved) -> String {
    match (r.probe_capacity_pps, r.model_capacity_pps) {
        (Some(probe), Some(model)) => {
            format!(" (the smaller of the probe's {:.0} and the model's {:.0} kpps)", probe / 1e3, model / 1e3)
        }
        (Some(probe), None) => format!(" (the probe's {:.0} kpps; no model figure for them)", probe / 1e3),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
[capacity]
a = { core_share = 0.5, size = 1024, flows = 100 }
b = { same_policed_rate_as = "a", size = 64 }

[[vm]]
phases = ["size=1024,rate={a.kpps*2}kpps", "size=64,rate={b.pps}pps,x={count}"]
qos = { bandwidth_bps = "{a.bps}", ingress_policing_rate_kbps = "{a.policer_kbps}" }
"#;

    fn caps() -> BTreeMap<Kind, f64> {
        BTreeMap::from([(Kind { size: 1024, flows: 100 }, 2_000_000.0)])
    }

    #[test]
    fn a_share_is_described_to_a_tenth_of_a_percent() {
        assert_eq!((percent(0.035), percent(0.12), percent(0.5)), ("3.5".into(), "12".into(), "50".into()));
    }

    #[test]
    fn shares_become_rates_and_quoted_placeholders_bare_numbers() {
        let b = budgets(TEXT).unwrap();
        assert_eq!(kinds(&b), vec![Kind { size: 1024, flows: 100 }]);
        let r = resolve(&b, &caps()).unwrap();
        let out = substitute(TEXT, &r).unwrap();
        // Half of 2 Mpps, twice over in the phase.
        assert!(out.contains("rate=2000.000kpps"), "{out}");
        // 1 Mpps of 1010 policed bytes is 20.2 Mpps of 64-byte frames (50 policed bytes each).
        assert!(out.contains("rate=20200000pps"), "{out}");
        assert!(out.contains("x={count}"), "{out}");
        assert!(out.contains("bandwidth_bps = 8192000000,"), "{out}");
        assert!(out.contains("ingress_policing_rate_kbps = 8080000 }"), "{out}");
        // The inline table's braces are left alone.
        assert!(out.contains("qos = { bandwidth_bps"), "{out}");
    }

    #[test]
    fn a_budget_is_a_share_of_the_smaller_of_the_probe_and_the_model() {
        // Every row of the example model is 200 cycles at 1 GHz: 5 Mpps of any size it covers.
        let model = slaswitch_config::allocation::example_model();
        let (big, small, short) =
            (Kind { size: 1024, flows: 100 }, Kind { size: 64, flows: 1 }, Kind { size: 60, flows: 1 });
        let probe = BTreeMap::from([(big, 8_000_000.0), (small, 2_000_000.0), (short, 9_000_000.0)]);
        let used = smaller_of_probe_and_model(&probe, Some(&model));
        assert_eq!(used[&big], 5_000_000.0, "the probe caught a faster host than the model was priced at");
        assert_eq!(used[&small], 2_000_000.0, "the probe measured less than the model");
        assert_eq!(used[&short], 9_000_000.0, "no row covers 60-byte frames: the probe's");
        assert_eq!(smaller_of_probe_and_model(&probe, None), probe);
        let mut r = resolve(&budgets(TEXT).unwrap(), &used).unwrap();
        note_sources(&mut r, &probe, Some(&model));
        let a = r.iter().find(|r| r.name == "a").unwrap();
        assert_eq!((a.pps, a.probe_capacity_pps, a.model_capacity_pps), (2_500_000.0, Some(8e6), Some(5e6)));
        let line = &describe(&r)[0];
        assert!(line.contains("5000 kpps") && line.contains("the probe's 8000 and the model's 5000 kpps"), "{line}");
    }

    #[test]
    fn bad_budgets_and_placeholders_are_named() {
        let e = budgets("[capacity]\na = { core_share = 0, size = 64 }\n").unwrap_err().to_string();
        assert!(e.contains("capacity.a.core_share=0"), "{e}");
        let e = budgets("[capacity]\na = { same_policed_rate_as = \"z\", size = 64 }\n").unwrap_err().to_string();
        assert!(e.contains("no such budget"), "{e}");
        let e = budgets("[capacity]\na = { size = 64 }\n").unwrap_err().to_string();
        assert!(e.contains("either core_share or same_policed_rate_as"), "{e}");
        let r = resolve(&budgets(TEXT).unwrap(), &caps()).unwrap();
        let e = substitute("x = \"{c.bps}\"\n", &r).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("no budget 'c'"), "{e}");
        let e = substitute("\n\nx = \"{a.furlongs}\"\n", &r).unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("unknown unit 'furlongs'"), "{e}");
    }
}
