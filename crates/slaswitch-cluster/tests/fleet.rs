//! A small fleet in this process: agents (counters in place of data planes), the master and a
//! private etcd, billing into SQLite and into PostgreSQL. Every purchase bought while they run
//! is applied on its host, every agent keeps its lease, and the master keeps up with the reports.

mod common;

use slaswitch_cluster::etcd_server::EtcdServer;
use slaswitch_cluster::keys::DEFAULT_PREFIX;
use slaswitch_cluster::master::{MasterSettings, StoreSpec};
use slaswitch_cluster::scale::{run, ScaleResult, ScaleSettings};
use slaswitch_qos::pricing::PriceParams;

fn fleet(tag: &str, store: impl FnOnce(&std::path::Path) -> Option<StoreSpec>) -> Option<ScaleResult> {
    let dir = std::env::temp_dir().join(format!("slaswitch-fleet-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    if !slaswitch_testkit::require(&[slaswitch_testkit::Component::Etcd]) {
        return None;
    }
    let store = store(&dir)?;
    let etcd = EtcdServer::start(&dir.join("etcd")).expect("etcd");
    let settings = ScaleSettings {
        endpoints: vec![etcd.url()],
        tls: None,
        prefix: DEFAULT_PREFIX.into(),
        agents: 20,
        vms_per_agent: 2,
        secs: 4,
        buys_per_sec: 5.0,
        agent_poll_ms: 1000,
        report_every_cycles: 1,
        lease_ttl_secs: 5,
        agents_per_connection: 1,
        agents_started_per_sec: 1000,
        master: Some(MasterSettings {
            endpoints: vec![etcd.url()],
            tls: None,
            prefix: DEFAULT_PREFIX.into(),
            prices: PriceParams::default(),
            store,
            admission: Default::default(),
        }),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let r = rt.block_on(run(settings, |_| {})).unwrap();
    drop(etcd);
    let _ = std::fs::remove_dir_all(&dir);
    Some(r)
}

fn check(r: &ScaleResult) {
    assert_eq!(r.hosts_alive_at_end, 20, "{r:?}");
    assert!(r.purchases >= 15 && r.purchases_applied == r.purchases, "{r:?}");
    // One report per agent per second is offered; the master bills them as they come.
    assert!(r.reports_per_sec > 0.7 * r.offered_reports_per_sec, "{r:?}");
    let records_per_sec = r.records_per_sec.expect("the master ran here");
    // Counted at the master (commits) and at a watch (removals): the same reports within one
    // batch at either end of the window.
    assert!((records_per_sec / r.reports_per_sec - 2.0).abs() < 0.3, "a record per VM per report: {r:?}");
    assert!(r.billing_lag.count > 0 && r.billing_lag.p50_ms < 5000.0, "{r:?}");
}

#[test]
fn a_fleet_billing_into_sqlite_applies_every_purchase() {
    if let Some(r) = fleet("sqlite", |d| Some(StoreSpec::Sqlite(d.join("billing.sqlite")))) {
        check(&r);
    }
}

#[test]
fn a_fleet_billing_into_postgres_applies_every_purchase() {
    let mut pg = None;
    let r = fleet("pg", |d| {
        pg = common::PgServer::start(&d.join("pg"));
        pg.as_ref().map(|p| StoreSpec::Postgres(p.url()))
    });
    if let Some(r) = r {
        check(&r);
    }
}
