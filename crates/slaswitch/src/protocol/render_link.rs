//! `link-show` for a person, and the link half of a purchase in `qos-show`.

use std::fmt::{self, Display, Formatter};

use slaswitch_config::link_policy::guarantee_text;
use slaswitch_qos::egress::link_scheduler::SchedulerState;

use super::qos::{LinkShowReply, LinkVmRow};

fn mbps(bps: Option<f64>) -> String {
    bps.map_or("-".into(), |b| format!("{:.1}", b / 1e6))
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.1}"))
}

/// The scheduler's state of one VM in a few words.
fn state(s: &SchedulerState) -> String {
    match s {
        SchedulerState::Ancs { remain_credit_bytes, credit_peak_bytes } => {
            format!("credit {remain_credit_bytes:.0}/{credit_peak_bytes:.0} B")
        }
        SchedulerState::SoftBw { dtau_ns, tts_ns } => format!("dtau {:.1} us, tts {tts_ns}", dtau_ns / 1e3),
        SchedulerState::RateLimit { limit_bps, demand_bps } => {
            format!("limit {} demand {}", mbps(Some(*limit_bps)), mbps(Some(*demand_bps)))
        }
        SchedulerState::None => "-".into(),
    }
}

impl Display for LinkShowReply {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let l = &self.link;
        writeln!(
            f,
            "{}: {} on {} Mbit/s (wire), {} drop, ANCS period {} us, rate-limit period {} us; {} frames queued; utilisation {}%",
            l.name,
            l.scheduler,
            mbps(Some(l.link_rate_bps as f64)),
            l.drop_policy,
            l.ancs_period_us,
            l.ratelimit_period_us,
            l.queued_frames,
            pct(self.utilisation_pct),
        )?;
        if !l.tenants.is_empty() {
            let list: Vec<String> = l.tenants.iter().map(|(n, w)| format!("{n}={w}")).collect();
            writeln!(f, "tenants (weight): {}", list.join(" "))?;
        }
        writeln!(
            f,
            "{:<12} {:>6} {:>9} {:>9} {:<22} {:<10} {:>7} {:>9} {:>6} {:>7} {:>8} {:>7}  scheduler state",
            "vm",
            "weight",
            "min Mb/s",
            "max Mb/s",
            "guarantee",
            "tenant",
            "queued",
            "rate Mb/s",
            "share%",
            "fulfil%",
            "drops/s",
            "cyc/frm",
        )?;
        for v in &self.vms {
            let s = &v.stats;
            writeln!(
                f,
                "{:<12} {:>6} {:>9} {:>9} {:<22} {:<10} {:>7} {:>9} {:>6} {:>7} {:>8} {:>7}  {}",
                s.name,
                s.weight,
                mbps(s.min_bps.map(|b| b as f64)),
                mbps(s.max_bps.map(|b| b as f64)),
                guarantee_text(&s.guarantee),
                s.tenant,
                s.queued_frames,
                mbps(v.rate_bps),
                pct(v.share_pct),
                pct(v.fulfillment_pct),
                v.dropped_interval.map_or("-".into(), |d| d.to_string()),
                v.sched_cycles_per_frame.map_or("-".into(), |c| format!("{c:.0}")),
                state(&s.state),
            )?;
        }
        Ok(())
    }
}

/// One line for a port's link half in `qos-show`.
pub(super) fn link_half(l: &LinkVmRow) -> String {
    let s = &l.stats;
    format!(
        "  link half: guarantee {} (now {} Mbit/s wire), min {} Mbit/s, tenant {}; sent {} Mbit/s, fulfillment {}%, {} frames queued\n",
        guarantee_text(&s.guarantee),
        mbps(Some(s.guarantee_bps as f64)),
        mbps(s.min_bps.map(|b| b as f64)),
        s.tenant,
        mbps(l.rate_bps),
        pct(l.fulfillment_pct),
        s.queued_frames,
    )
}
