//! The batch term of the bandwidth-CPU model (`slaswitch_qos::cpu::model::BatchTerm`): what a
//! batch costs beyond its frames' price in the full-batch rows, by batch size.
//!
//! A light VM (64-byte frames, one flow, paced) shares the PMD with `neighbours` backlogged
//! ones (64-byte frames, many flows, as fast as they go), so that the PMD goes round all of
//! them between two polls of the light VM: its port is cold in the caches when polled, as a
//! light VM's is on a loaded PMD, and its pace sets how many frames a batch holds. For each
//! pace, the light VM's cycles per batch less what its frames cost by the table (at the
//! exact-match-cache misses they really had) is the overhead at that batch size. The
//! VM-count coefficient of the measurement is taken out first, because a purchase's price is
//! multiplied by its own deployment's.

use slaswitch_qos::cpu::model::{BatchPoint, BatchTerm};
use slaswitch_qos::cpu::BandwidthModel;

use super::{mac, measure_window, median_run, CalibrateOptions, PrivateSwitch};
use crate::error::CalibrateError;

/// One pace of the light VM: its batches' mean size and what one cost beyond its frames.
fn measure_point(
    sw: &PrivateSwitch,
    opts: &CalibrateOptions,
    model: &BandwidthModel,
    rate_kpps: f64,
) -> Result<BatchPoint, CalibrateError> {
    let uplink = mac("uplink");
    let mut phases = vec![format!("size=64,rate={rate_kpps}kpps,flows=1,dst-mac={uplink},vm=vm1")];
    for i in 2..=opts.batch_neighbours + 1 {
        phases.push(format!("size=64,rate=max,flows={},dst-mac={uplink},vm=vm{i}", opts.many_flows));
    }
    let w = measure_window(sw, opts, opts.batch_neighbours + 1, &phases)?;
    let light = w.per_vm[0];
    let packets_per_batch = light.packets / light.batches.max(1.0);
    let vm_factor = model.vm_count.lookup(opts.batch_neighbours as u32 + 1);
    let per_packet = model
        .predict_cycles_per_packet(64.0, light.miss_share())
        .ok_or(CalibrateError::Plan("the model has no 64-byte rows to price the light VM's frames"))?;
    let cycles_per_batch = light.busy() / light.batches.max(1.0) / vm_factor;
    Ok(BatchPoint { packets_per_batch, overhead_cycles_per_batch: cycles_per_batch - packets_per_batch * per_packet })
}

/// Measures every pace of `opts.batch_rates_kpps`, each `opts.repeats` times (the median by
/// overhead kept), `progress` called before each.
pub(super) fn measure(
    sw: &PrivateSwitch,
    opts: &CalibrateOptions,
    model: &BandwidthModel,
    mut progress: impl FnMut(&str),
) -> Result<BatchTerm, CalibrateError> {
    let mut points = Vec::new();
    for &rate in &opts.batch_rates_kpps {
        progress(&format!("light VM at {rate} kpps beside {} backlogged", opts.batch_neighbours));
        points.push(median_run(opts, || measure_point(sw, opts, model, rate), |p| p.overhead_cycles_per_batch)?);
    }
    points.sort_by(|a, b| a.packets_per_batch.total_cmp(&b.packets_per_batch));
    Ok(BatchTerm {
        points,
        method: format!(
            "a light VM (64-byte frames, one flow) at {} kpps beside {} backlogged VMs (64-byte frames, {} flows); overhead = its cycles per batch over the VM-count factor, less its frames' price at the misses they had; median of {} runs",
            opts.batch_rates_kpps.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", "),
            opts.batch_neighbours,
            opts.many_flows,
            opts.repeats
        ),
    })
}
