//! A usage report priced (seed 003 Sec. 3.3), and a dynamic guarantee's progress: the master
//! bills every cycle with [`slaswitch_qos::pricing`] and recomputes what is left of each
//! dynamic (S, T) purchase.

use std::collections::BTreeMap;

use slaswitch_config::link_policy::guarantee_text;
use slaswitch_qos::egress::softbw::Guarantee;
use slaswitch_qos::pricing::{charge, PriceParams};

use crate::purchase::Purchase;
use crate::store::Record;
use crate::usage::UsageReport;

/// The tenant of a VM nobody bought anything for: it is billed at the fairness price.
pub const NO_TENANT: &str = "-";

/// The records of one report, one per VM, priced with `params`. `sent` holds, for each VM
/// with a dynamic guarantee, the bytes it sent since it was bought, before this report; the
/// report's bytes are added to it.
pub fn price_report(
    params: &PriceParams,
    report: &UsageReport,
    purchases: &BTreeMap<String, Purchase>,
    sent: &mut BTreeMap<String, u64>,
) -> Vec<Record> {
    report
        .vms
        .iter()
        .map(|u| {
            let purchase = purchases.get(&u.vm);
            let before = sent.get(&u.vm).copied().unwrap_or(0);
            if let Some(s) = sent.get_mut(&u.vm) {
                *s += u.bytes;
            }
            let guarantee =
                purchase.map_or(Guarantee::Fairness, |p| billed_guarantee(p, report.cycle * report.cycle_ms, before));
            let c = charge(params, &guarantee, u.bytes, report.secs);
            Record {
                vm: u.vm.clone(),
                cycle: report.cycle,
                cycle_ms: report.cycle_ms,
                host: report.host.clone(),
                tenant: purchase.map_or(NO_TENANT.to_string(), |p| p.tenant.clone()),
                secs: report.secs,
                bytes: u.bytes,
                guarantee: guarantee_text(&purchase.map_or(Guarantee::Fairness, |p| p.guarantee)),
                guarantee_bps: c.guarantee_bps,
                in_force_bps: u.guarantee_bps,
                rate_bps: c.rate_bps,
                fulfillment: c.fulfillment,
                charge_guaranteed: c.guaranteed,
                charge_above: c.above,
            }
        })
        .collect()
}

/// The guarantee a cycle ending at `end_unix_ms` is billed under: the purchase's, except that a
/// dynamic guarantee leaves only fairness once its time T is over or its size S was sent before
/// the cycle (`sent_before` bytes since it was bought), as the switch's scheduler does (seed 003
/// Sec. 4).
fn billed_guarantee(p: &Purchase, end_unix_ms: u64, sent_before: u64) -> Guarantee {
    match p.guarantee {
        Guarantee::Dynamic { total_bytes, duration_ns }
            if end_unix_ms > p.bought_unix_ms + duration_ns.div_ceil(1_000_000) || sent_before >= total_bytes =>
        {
            Guarantee::Fairness
        }
        g => g,
    }
}

/// What is left of a dynamic guarantee of `total_bytes` within `duration_ns` bought at
/// `bought_unix_ms`, with `sent_bytes` sent by `now_unix_ms` (seed 003 Sec. 4): the remaining
/// size over the remaining time, never above S/T; `Fairness` once the time is over or the size
/// sent. Written as a dynamic guarantee of the remaining size within the remaining time, which
/// starts the switch at exactly that rate; above S/T, the size is cut to what S/T sends in the
/// time left.
pub fn dynamic_in_force(
    total_bytes: u64,
    duration_ns: u64,
    bought_unix_ms: u64,
    sent_bytes: u64,
    now_unix_ms: u64,
) -> Guarantee {
    let elapsed_ns = now_unix_ms.saturating_sub(bought_unix_ms).saturating_mul(1_000_000);
    let remaining_bytes = total_bytes.saturating_sub(sent_bytes);
    if remaining_bytes == 0 || elapsed_ns >= duration_ns {
        return Guarantee::Fairness;
    }
    let left_ns = duration_ns - elapsed_ns;
    // At S/T for the time left: S * left / T bytes.
    let at_initial_rate = (total_bytes as u128 * left_ns as u128 / duration_ns as u128) as u64;
    Guarantee::Dynamic { total_bytes: remaining_bytes.min(at_initial_rate).max(1), duration_ns: left_ns }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::VmUsage;

    const S: u64 = 1_000_000_000;

    #[test]
    fn the_remaining_size_over_the_remaining_time_never_above_s_over_t() {
        // 1 GB in 10 s, bought at 0.
        assert_eq!(dynamic_in_force(S, 10 * S, 0, 0, 0), Guarantee::Dynamic { total_bytes: S, duration_ns: 10 * S });
        // Ahead of schedule: half sent after 2 s, 0.5 GB in 8 s.
        assert_eq!(
            dynamic_in_force(S, 10 * S, 0, S / 2, 2_000),
            Guarantee::Dynamic { total_bytes: S / 2, duration_ns: 8 * S }
        );
        // Behind: nothing sent after 5 s; capped at S/T, 0.5 GB in the 5 s left.
        assert_eq!(
            dynamic_in_force(S, 10 * S, 0, 0, 5_000),
            Guarantee::Dynamic { total_bytes: S / 2, duration_ns: 5 * S }
        );
        assert_eq!(dynamic_in_force(S, 10 * S, 0, S, 3_000), Guarantee::Fairness);
        assert_eq!(dynamic_in_force(S, 10 * S, 0, 0, 10_000), Guarantee::Fairness);
    }

    #[test]
    fn a_dynamic_guarantee_is_billed_at_fairness_once_its_size_was_sent() {
        let p = Purchase {
            vm: "d".into(),
            tenant: "acme".into(),
            host: Some("h".into()),
            guarantee: Guarantee::Dynamic { total_bytes: 1000, duration_ns: 60 * S },
            cycles: BTreeMap::new(),
            bought_unix_ms: 0,
            admission: None,
        };
        let purchases = BTreeMap::from([("d".to_string(), p)]);
        let report = |cycle: u64, bytes: u64| UsageReport {
            host: "h".into(),
            cycle,
            cycle_ms: 1000,
            secs: 1.0,
            read_unix_ms: cycle * 1000,
            vms: vec![VmUsage { vm: "d".into(), bytes, guarantee_bps: 0 }],
        };
        let mut sent = BTreeMap::from([("d".to_string(), 0u64)]);
        let params = PriceParams::default();
        // 600 bytes, then 600 more (S reached within that cycle), then 10 after S.
        let priced: Vec<Record> = [(1, 600), (2, 600), (3, 10)]
            .iter()
            .flat_map(|&(c, b)| price_report(&params, &report(c, b), &purchases, &mut sent))
            .collect();
        assert!(priced[0].charge_guaranteed > 0.0 && priced[1].charge_guaranteed > 0.0);
        assert_eq!((priced[2].charge_guaranteed, priced[2].fulfillment), (0.0, None), "{:?}", priced[2]);
        assert!(priced[2].charge_above > 0.0, "traffic after S is billed at the fairness price");
        assert_eq!(sent["d"], 1210);
    }

    #[test]
    fn a_report_is_priced_per_vm_with_its_purchase() {
        let purchase = Purchase {
            vm: "a".into(),
            tenant: "acme".into(),
            host: Some("h".into()),
            guarantee: Guarantee::Strict { rate_bps: 100_000_000 },
            cycles: BTreeMap::new(),
            bought_unix_ms: 0,
            admission: None,
        };
        let purchases = BTreeMap::from([("a".to_string(), purchase)]);
        let report = UsageReport {
            host: "h".into(),
            cycle: 5,
            cycle_ms: 1000,
            secs: 1.0,
            read_unix_ms: 5000,
            vms: vec![
                VmUsage { vm: "a".into(), bytes: 6_250_000, guarantee_bps: 100_000_000 },
                VmUsage { vm: "b".into(), bytes: 1_000, guarantee_bps: 0 },
            ],
        };
        let r = price_report(&PriceParams::default(), &report, &purchases, &mut BTreeMap::new());
        assert_eq!((r[0].tenant.as_str(), r[0].fulfillment), ("acme", Some(0.5)));
        assert!(r[0].charge_guaranteed > 0.0 && r[0].charge_above == 0.0);
        assert_eq!((r[1].tenant.as_str(), r[1].fulfillment, r[1].charge_guaranteed), (NO_TENANT, None, 0.0));
    }
}
