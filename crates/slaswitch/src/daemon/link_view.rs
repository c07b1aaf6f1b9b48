//! What `link-show` answers: a paced port's scheduler and, per VM, its queue, its settings,
//! its state in the scheduler, and what it got over the last interval (rate, share of the link,
//! fulfillment = rate / guarantee as seed 003 Sec. 3.3 defines it, the scheduler's cycles per
//! frame). `qos-show` shows the same row as the link half of a VM's purchase.

use slaswitch_datapath::datapath::LinkStats;

use super::rates::Snapshot;
use crate::protocol::qos::{LinkShowReply, LinkVmRow};

fn find<'a>(s: Option<&'a Snapshot>, name: &str) -> Option<(std::time::Instant, &'a LinkStats)> {
    s.and_then(|s| s.links.iter().find(|l| l.name == name).map(|l| (s.at, l)))
}

/// The view of `now`, with rates from the two latest snapshots when both have the link.
pub fn link_show(mut now: LinkStats, previous: Option<&Snapshot>, latest: Option<&Snapshot>) -> LinkShowReply {
    let pair = find(previous, &now.name).zip(find(latest, &now.name));
    let interval_secs = pair.map(|((a, _), (b, _))| b.duration_since(a).as_secs_f64()).filter(|&s| s > 0.0);
    let link_rate = now.link_rate_bps as f64;
    let vms: Vec<LinkVmRow> = std::mem::take(&mut now.vms)
        .into_iter()
        .map(|vm| {
            let delta = pair.zip(interval_secs).and_then(|(((_, a), (_, b)), secs)| {
                let before = a.vms.iter().find(|v| v.number == vm.number)?;
                let after = b.vms.iter().find(|v| v.number == vm.number)?;
                let bytes = after.out.sent_wire_bytes.saturating_sub(before.out.sent_wire_bytes);
                let frames = after.out.sent_packets.saturating_sub(before.out.sent_packets);
                let cycles = after.out.sched_cycles.saturating_sub(before.out.sched_cycles);
                let dropped = after.out.dropped.saturating_sub(before.out.dropped);
                Some((bytes as f64 * 8.0 / secs, frames, cycles, dropped))
            });
            let rate = delta.map(|d| d.0);
            LinkVmRow {
                // Before `vm` moves into the row.
                fulfillment_pct: rate.filter(|_| vm.guarantee_bps > 0).map(|r| 100.0 * r / vm.guarantee_bps as f64),
                stats: vm,
                rate_bps: rate,
                share_pct: rate.map(|r| 100.0 * r / link_rate),
                dropped_interval: delta.map(|d| d.3),
                sched_cycles_per_frame: delta.filter(|d| d.1 > 0).map(|d| d.2 as f64 / d.1 as f64),
            }
        })
        .collect();
    let utilisation_pct = interval_secs.map(|_| vms.iter().filter_map(|v| v.share_pct).sum());
    LinkShowReply { link: now, interval_secs, utilisation_pct, vms }
}
