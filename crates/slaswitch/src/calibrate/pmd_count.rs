//! The PMD-count coefficient (seed 000 Sec. III-D, Fig. 6c), measured: with N PMD threads each
//! polling one backlogged VM (64-byte frames, many flows), the cycles per packet over all of
//! them against one PMD polling one VM. Several PMDs share the output ports (a lock per tx
//! queue) and the caches of the cores, which a single PMD does not. On a host with fewer free
//! cores than PMDs the extra PMDs share the VMs' core, and the model's method says so. How this
//! differs from the paper's per-VM-count comparison: `docs/deviations.md`, row 37.

use slaswitch_qos::cpu::model::FactorTable;

use super::{measure_median, progress, set_up, CalibrateOptions, PrivateSwitch};
use crate::error::CalibrateError;

/// The cores of `count` PMDs: the calibration's PMD core, then the machine's other cores in
/// order, the VMs' core last.
fn cores_for(opts: &CalibrateOptions, count: usize, cores: usize) -> Vec<usize> {
    let mut others: Vec<usize> = (0..cores).filter(|&c| c != opts.pmd_core && c != opts.vm_core).collect();
    others.push(opts.vm_core);
    std::iter::once(opts.pmd_core).chain(others).take(count).collect()
}

/// Measures the coefficient at each of `opts.pmd_counts` (1 is the baseline, always 1.0), on
/// private switches started for it. Returns the factor table and the measured ratios as text.
pub(super) fn measure(
    opts: &CalibrateOptions,
    single: f64,
    first_step: usize,
    total_steps: usize,
) -> Result<(FactorTable, String), CalibrateError> {
    let machine_cores = slaswitch_datapath::pmd::online_cores();
    let mut points = vec![(1, 1.0)];
    let mut ratios = Vec::new();
    let mut highest: f64 = 1.0;
    let mut counts: Vec<u32> = opts.pmd_counts.iter().copied().filter(|&n| n > 1).collect();
    counts.sort_unstable();
    counts.dedup();
    for (i, n) in counts.into_iter().enumerate() {
        if n as usize > machine_cores {
            return Err(CalibrateError::Plan("--pmd-counts asks for more PMDs than the machine has cores"));
        }
        let cores = cores_for(opts, n as usize, machine_cores);
        let shared = if cores.contains(&opts.vm_core) { ", one sharing the VMs' core" } else { "" };
        progress(opts, first_step + i, total_steps, &format!("{n} PMDs{shared}, one VM each"));
        let sw = PrivateSwitch::start(opts, &cores)?;
        set_up(&sw, opts)?;
        let m = measure_median(&sw, opts, n as usize, 64, opts.many_flows)?;
        drop(sw);
        let ratio = m.cycles.total() / single;
        // As for the VM count: a point below the one before is noise, so the running maximum.
        highest = highest.max(ratio);
        points.push((n, highest));
        ratios.push(format!("{n} on cores {cores:?}{shared}: {ratio:.3}"));
    }
    Ok((FactorTable { points, source: "measured".into() }, ratios.join("; ")))
}
