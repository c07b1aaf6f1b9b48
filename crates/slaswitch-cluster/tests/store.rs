//! The billing store on both engines: SQLite (always) and PostgreSQL (a private server started
//! from Debian's `postgresql` package, when it is installed and the test runs as root).

mod common;

use common::PgServer;
use slaswitch_cluster::store::{Record, Store};
use slaswitch_cluster::utilization::{Distribution, Owner};

fn record(vm: &str, cycle: u64, bytes: u64) -> Record {
    Record {
        vm: vm.into(),
        cycle,
        cycle_ms: 1000,
        host: "h1".into(),
        tenant: "acme".into(),
        secs: 1.0,
        bytes,
        guarantee: "strict:100000000".into(),
        guarantee_bps: 1e8,
        in_force_bps: 100_000_000,
        rate_bps: bytes as f64 * 8.0,
        fulfillment: Some(bytes as f64 * 8.0 / 1e8),
        charge_guaranteed: 1.0,
        charge_above: 0.0,
    }
}

/// A record is written once however often its report arrives; sums and ranges read it back.
fn written_once_and_read_back(s: &mut Store) {
    assert_eq!(s.insert(&[record("a", 10, 5), record("b", 10, 7)]).unwrap(), 2);
    // The same report again, and one overlapping it: only the new record counts.
    assert_eq!(s.insert(&[record("a", 10, 5), record("b", 10, 7)]).unwrap(), 0);
    assert_eq!(s.insert(&[record("a", 10, 999), record("a", 11, 3)]).unwrap(), 1);
    assert_eq!(s.sent_since("a", 0).unwrap(), 8);
    assert_eq!(s.sent_since("a", 11_000).unwrap(), 3);
    assert_eq!(s.sent_since("nobody", 0).unwrap(), 0);
    let all = s.records(Some("acme"), 0, u64::MAX >> 2).unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0], record("a", 10, 5));
    assert_eq!(s.records(None, 10_000, 11_000).unwrap().len(), 2);
    assert!(s.records(Some("other"), 0, u64::MAX >> 2).unwrap().is_empty());
    utilization_with_the_records(s);
}

/// Utilization rows are written in the records' transaction, from the new records only, and
/// replace the row they update.
fn utilization_with_the_records(s: &mut Store) {
    let row = |samples: u64| {
        let mut d = Distribution::default();
        (0..samples).for_each(|_| d.add(0.5, 50e6));
        (Owner::Vm, "a".to_string(), d)
    };
    let mut seen = Vec::new();
    let n = s
        .insert_and(&[record("a", 12, 5), record("a", 10, 5)], |new| {
            seen = new.iter().map(|r| r.cycle).collect();
            vec![row(1)]
        })
        .unwrap();
    assert_eq!((n, seen), (1, vec![12]), "only the new record is sampled");
    s.insert_and(&[record("a", 13, 5)], |_| vec![row(2)]).unwrap();
    let rows = s.utilization().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0], row(2));
}

#[test]
fn sqlite_writes_each_record_once_and_keeps_it() {
    let dir = std::env::temp_dir().join(format!("slaswitch-store-{}", std::process::id()));
    let path = dir.join("billing.sqlite");
    let _ = std::fs::remove_dir_all(&dir);
    written_once_and_read_back(&mut Store::open_sqlite(&path).unwrap());
    // Reopened: still there.
    assert_eq!(Store::open_sqlite(&path).unwrap().sent_since("b", 0).unwrap(), 7);
    let e = Store::open_sqlite_existing(&dir.join("nosuch.sqlite")).err().unwrap().to_string();
    assert!(e.contains("no billing store at"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn postgres_writes_each_record_once_and_keeps_it() {
    let dir = std::env::temp_dir().join(format!("slaswitch-pg-{}", std::process::id()));
    let Some(pg) = PgServer::start(&dir) else {
        return;
    };
    written_once_and_read_back(&mut Store::open_postgres(&pg.url()).unwrap());
    // A second connection (a restarted master) sees the same records and adds no duplicate.
    let mut again = Store::open_postgres(&pg.url()).unwrap();
    assert_eq!(again.insert(&[record("a", 11, 3)]).unwrap(), 0);
    assert_eq!(again.sent_since("b", 0).unwrap(), 7);
    let e = Store::open_postgres("host=/nonexistent port=1 user=postgres").err().unwrap().to_string();
    assert!(e.contains("cannot connect to"), "{e}");
}
