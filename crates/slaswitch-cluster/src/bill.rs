//! A tenant's bill over a period: per VM its bytes, its mean rate and fulfillment and what it
//! owes, as a table, CSV or JSON, and its usage over time as a PNG.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use slaswitch_plot::{lines, Panel, Series};

use crate::store::Record;
use crate::ClusterError;

/// One VM's line of a bill.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct BillLine {
    /// The VM.
    pub vm: String,
    /// Its guarantee (the last one billed).
    pub guarantee: String,
    /// Cycles billed.
    pub cycles: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Mean rate over the billed cycles, bits/s.
    pub mean_rate_bps: f64,
    /// Mean fulfillment over the cycles that had a guarantee.
    pub mean_fulfillment: Option<f64>,
    /// Owed for guaranteed bandwidth.
    pub charge_guaranteed: f64,
    /// Owed for bandwidth above the guarantee.
    pub charge_above: f64,
    /// The sum.
    pub total: f64,
}

/// A tenant's bill.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Bill {
    /// Whose.
    pub tenant: String,
    /// The period, Unix milliseconds, [from, to).
    pub from_unix_ms: u64,
    /// Its end.
    pub to_unix_ms: u64,
    /// One line per VM.
    pub vms: Vec<BillLine>,
    /// The sum of every line.
    pub total: f64,
}

/// The bill of `records` (all of one tenant).
pub fn bill(tenant: &str, from_unix_ms: u64, to_unix_ms: u64, records: &[Record]) -> Bill {
    let mut lines: BTreeMap<&str, (BillLine, f64, f64, u64)> = BTreeMap::new();
    for r in records {
        let (l, secs, f_sum, f_n) =
            lines.entry(&r.vm).or_insert_with(|| (BillLine { vm: r.vm.clone(), ..BillLine::default() }, 0.0, 0.0, 0));
        l.guarantee = r.guarantee.clone();
        l.cycles += 1;
        l.bytes += r.bytes;
        l.charge_guaranteed += r.charge_guaranteed;
        l.charge_above += r.charge_above;
        *secs += r.secs;
        if let Some(f) = r.fulfillment {
            *f_sum += f;
            *f_n += 1;
        }
    }
    let vms: Vec<BillLine> = lines
        .into_values()
        .map(|(mut l, secs, f_sum, f_n)| {
            l.mean_rate_bps = if secs > 0.0 { l.bytes as f64 * 8.0 / secs } else { 0.0 };
            l.mean_fulfillment = (f_n > 0).then(|| f_sum / f_n as f64);
            l.total = l.charge_guaranteed + l.charge_above;
            l
        })
        .collect();
    let total = vms.iter().fold(0.0, |sum, l| sum + l.total);
    Bill { tenant: tenant.into(), from_unix_ms, to_unix_ms, vms, total }
}

/// The bill as an aligned table.
pub fn table(b: &Bill) -> String {
    let mut out = format!("tenant {}: {} VMs, total {:.4}\n", b.tenant, b.vms.len(), b.total);
    let _ = writeln!(
        out,
        "{:<16} {:<24} {:>7} {:>14} {:>12} {:>8} {:>12} {:>12} {:>12}",
        "vm", "guarantee", "cycles", "bytes", "Mbit/s", "F", "guaranteed", "above", "total"
    );
    for l in &b.vms {
        let f = l.mean_fulfillment.map_or("-".to_string(), |f| format!("{f:.3}"));
        let _ = writeln!(
            out,
            "{:<16} {:<24} {:>7} {:>14} {:>12.3} {:>8} {:>12.4} {:>12.4} {:>12.4}",
            l.vm,
            l.guarantee,
            l.cycles,
            l.bytes,
            l.mean_rate_bps / 1e6,
            f,
            l.charge_guaranteed,
            l.charge_above,
            l.total
        );
    }
    out
}

/// The bill's CSV columns: [`CsvRow`]'s fields, written even when there is no record.
const CSV_COLUMNS: [&str; 13] = [
    "vm",
    "cycle_end_unix_ms",
    "host",
    "tenant",
    "secs",
    "bytes",
    "guarantee",
    "guarantee_bps",
    "in_force_bps",
    "rate_bps",
    "fulfillment",
    "charge_guaranteed",
    "charge_above",
];

/// One row of the bill's CSV: a record with its cycle's end time.
#[derive(Serialize)]
struct CsvRow<'a> {
    vm: &'a str,
    cycle_end_unix_ms: u64,
    host: &'a str,
    tenant: &'a str,
    secs: f64,
    bytes: u64,
    guarantee: &'a str,
    guarantee_bps: f64,
    in_force_bps: u64,
    rate_bps: f64,
    fulfillment: Option<f64>,
    charge_guaranteed: f64,
    charge_above: f64,
}

/// Every record as CSV, one line per VM per cycle, quoted where a field needs it (a dynamic
/// guarantee, `dynamic:SIZE,SECONDS`, holds a comma).
pub fn csv(records: &[Record]) -> String {
    let mut w = ::csv::WriterBuilder::new().has_headers(false).from_writer(Vec::new());
    w.write_record(CSV_COLUMNS).expect("CSV into memory");
    for r in records {
        let row = CsvRow {
            vm: &r.vm,
            cycle_end_unix_ms: r.end_unix_ms(),
            host: &r.host,
            tenant: &r.tenant,
            secs: r.secs,
            bytes: r.bytes,
            guarantee: &r.guarantee,
            guarantee_bps: r.guarantee_bps,
            in_force_bps: r.in_force_bps,
            rate_bps: r.rate_bps,
            fulfillment: r.fulfillment,
            charge_guaranteed: r.charge_guaranteed,
            charge_above: r.charge_above,
        };
        w.serialize(row).expect("CSV into memory");
    }
    String::from_utf8(w.into_inner().expect("CSV into memory")).expect("UTF-8 fields")
}

/// Each VM's rate and charge per cycle over the period, as a PNG.
pub fn plot(path: &Path, b: &Bill, records: &[Record]) -> Result<(), ClusterError> {
    let mut rates: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    let mut charges: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for r in records {
        let t = (r.end_unix_ms() as f64 - b.from_unix_ms as f64) / 1000.0;
        rates.entry(&r.vm).or_default().push((t, r.rate_bps / 1e6));
        charges.entry(&r.vm).or_default().push((t, r.charge_guaranteed + r.charge_above));
    }
    let series = |m: BTreeMap<&str, Vec<(f64, f64)>>| {
        m.into_iter().map(|(vm, points)| Series { label: vm.to_string(), points }).collect::<Vec<_>>()
    };
    let panels = [
        Panel { title: "rate per billing cycle, Mbit/s".into(), series: series(rates), markers: Vec::new() },
        Panel { title: "charge per billing cycle".into(), series: series(charges), markers: Vec::new() },
    ];
    Ok(lines(path, &format!("tenant {}: usage", b.tenant), "seconds from the period's start", "", &panels)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(vm: &str, cycle: u64, bytes: u64, f: Option<f64>, charge: f64) -> Record {
        Record {
            vm: vm.into(),
            cycle,
            cycle_ms: 1000,
            host: "h".into(),
            tenant: "t".into(),
            secs: 1.0,
            bytes,
            guarantee: "strict:8000".into(),
            guarantee_bps: 8000.0,
            in_force_bps: 8000,
            rate_bps: bytes as f64 * 8.0,
            fulfillment: f,
            charge_guaranteed: charge,
            charge_above: 0.0,
        }
    }

    #[test]
    fn a_bill_sums_each_vms_cycles() {
        let recs = [r("a", 1, 1000, Some(1.0), 2.0), r("a", 2, 500, Some(0.5), 1.0), r("b", 1, 10, None, 0.5)];
        let b = bill("t", 0, 3000, &recs);
        assert_eq!(b.vms.len(), 2);
        assert_eq!((b.vms[0].cycles, b.vms[0].bytes, b.vms[0].mean_fulfillment), (2, 1500, Some(0.75)));
        assert_eq!(b.vms[0].mean_rate_bps, 6000.0);
        assert_eq!(b.vms[1].mean_fulfillment, None);
        assert_eq!(b.total, 3.5);
        assert!(table(&b).contains("total 3.5000"));
        assert_eq!(csv(&recs).lines().count(), 4);
    }

    #[test]
    fn a_dynamic_guarantee_keeps_the_bills_columns() {
        let mut rec = r("a", 1, 1000, Some(1.0), 2.0);
        rec.guarantee = "dynamic:1000000,30".into();
        let text = csv(&[rec, r("b", 1, 10, None, 0.5)]);
        let mut reader = ::csv::Reader::from_reader(text.as_bytes());
        let header = reader.headers().unwrap().clone();
        assert_eq!(header.len(), 13);
        assert_eq!(&header[6], "guarantee");
        let rows: Vec<::csv::StringRecord> = reader.records().map(|r| r.unwrap()).collect();
        assert!(rows.iter().all(|row| row.len() == 13), "{text}");
        assert_eq!(&rows[0][6], "dynamic:1000000,30");
        assert_eq!(&rows[1][10], "", "no fulfillment under fairness: {text}");
        assert_eq!(csv(&[]).trim_end(), CSV_COLUMNS.join(","), "the header alone");
    }
}
