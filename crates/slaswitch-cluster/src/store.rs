//! The billing store: one record per VM per billing cycle, in SQLite (embedded, one file, the
//! default) or PostgreSQL (when a URL is given). The primary key (vm, cycle) makes every write
//! idempotent: a report billed twice (a retry, a master restarted before it deleted the report)
//! inserts nothing the second time.

use crate::utilization::{Distribution, Owner};
use crate::ClusterError;
use serde::{Deserialize, Serialize};

/// One VM's bill for one cycle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The VM.
    pub vm: String,
    /// The cycle (its end in Unix time over `cycle_ms`).
    pub cycle: u64,
    /// The cycle's length, milliseconds.
    pub cycle_ms: u64,
    /// The host that reported it.
    pub host: String,
    /// Who pays ("-" for a VM nobody bought anything for).
    pub tenant: String,
    /// The time the counters covered, seconds.
    pub secs: f64,
    /// Bytes sent.
    pub bytes: u64,
    /// The guarantee as bought.
    pub guarantee: String,
    /// The rate that guarantee promises (B, or S/T), bits/s.
    pub guarantee_bps: f64,
    /// The rate the switch's scheduler guaranteed at the cycle's end, bits/s.
    pub in_force_bps: u64,
    /// bytes * 8 / secs.
    pub rate_bps: f64,
    /// rate / guarantee (none for fairness).
    pub fulfillment: Option<f64>,
    /// The charge for the guaranteed part (P_s B F or P_d B_j F).
    pub charge_guaranteed: f64,
    /// The charge above the guarantee (at P_f).
    pub charge_above: f64,
}

impl Record {
    /// The cycle's end, Unix milliseconds.
    pub fn end_unix_ms(&self) -> u64 {
        self.cycle * self.cycle_ms
    }
}

const COLUMNS: &str = "vm, cycle, cycle_ms, host, tenant, secs, bytes, guarantee, guarantee_bps, in_force_bps, \
                       rate_bps, fulfillment, charge_guaranteed, charge_above";

const CREATE: &str = "CREATE TABLE IF NOT EXISTS usage_records (
    vm TEXT NOT NULL, cycle BIGINT NOT NULL, cycle_ms BIGINT NOT NULL, host TEXT NOT NULL,
    tenant TEXT NOT NULL, secs DOUBLE PRECISION NOT NULL, bytes BIGINT NOT NULL,
    guarantee TEXT NOT NULL, guarantee_bps DOUBLE PRECISION NOT NULL, in_force_bps BIGINT NOT NULL,
    rate_bps DOUBLE PRECISION NOT NULL, fulfillment DOUBLE PRECISION,
    charge_guaranteed DOUBLE PRECISION NOT NULL, charge_above DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (vm, cycle));
    CREATE INDEX IF NOT EXISTS usage_records_tenant ON usage_records (tenant, cycle);
    CREATE TABLE IF NOT EXISTS utilization (
    owner TEXT NOT NULL, name TEXT NOT NULL, samples BIGINT NOT NULL,
    sum_utilization DOUBLE PRECISION NOT NULL, sum_rate_bps DOUBLE PRECISION NOT NULL,
    histogram TEXT NOT NULL, PRIMARY KEY (owner, name));";

const UPSERT_UTILIZATION: &str =
    "INSERT INTO utilization (owner, name, samples, sum_utilization, sum_rate_bps, histogram) \
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (owner, name) DO UPDATE SET samples = excluded.samples, \
     sum_utilization = excluded.sum_utilization, sum_rate_bps = excluded.sum_rate_bps, histogram = excluded.histogram";

/// A distribution as one row of the store.
pub type UtilizationRow = (Owner, String, Distribution);

fn histogram_text(d: &Distribution) -> String {
    serde_json::to_string(&d.histogram).expect("JSON")
}

fn distribution(samples: i64, sum_utilization: f64, sum_rate_bps: f64, histogram: &str) -> Distribution {
    Distribution {
        samples: samples.max(0) as u64,
        sum_utilization,
        sum_rate_bps,
        histogram: serde_json::from_str(histogram).unwrap_or_default(),
    }
}

fn insert_sql() -> String {
    format!(
        "INSERT INTO usage_records ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
         ON CONFLICT (vm, cycle) DO NOTHING"
    )
}

/// The store, either engine.
pub enum Store {
    /// Embedded.
    Sqlite(rusqlite::Connection),
    /// A server.
    Postgres(Box<postgres::Client>),
}

/// Signed 64-bit, as both engines store integers; counters stay far below 2^63.
fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Store {
    /// Opens a SQLite file that must exist (for readers: an absent file is a wrong path, not an
    /// empty bill).
    pub fn open_sqlite_existing(path: &std::path::Path) -> Result<Store, ClusterError> {
        if !path.exists() {
            return Err(ClusterError::NoStore(path.display().to_string()));
        }
        Store::open_sqlite(path)
    }

    /// Opens (creating if needed) a SQLite file.
    pub fn open_sqlite(path: &std::path::Path) -> Result<Store, ClusterError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(ClusterError::io(format!("cannot create {}", dir.display())))?;
        }
        let opening = |cause: rusqlite::Error| ClusterError::StoreOpen {
            what: format!("cannot open {}", path.display()),
            cause: cause.to_string(),
        };
        let c = rusqlite::Connection::open(path).map_err(opening)?;
        // WAL: `bill` and `vms` read while the master writes. FULL: a committed record survives
        // a power cut, since its report leaves etcd once committed.
        c.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA busy_timeout=5000;")
            .and_then(|()| c.execute_batch(CREATE))
            .map_err(opening)?;
        Ok(Store::Sqlite(c))
    }

    /// Connects to PostgreSQL at `url` (`postgresql://user@host/db`) and creates the table.
    pub fn open_postgres(url: &str) -> Result<Store, ClusterError> {
        let mut c = postgres::Client::connect(url, postgres::NoTls).map_err(|cause| ClusterError::StoreOpen {
            what: format!("cannot connect to {url}"),
            cause: cause.to_string(),
        })?;
        c.batch_execute(CREATE)
            .map_err(|cause| ClusterError::StoreOpen { what: url.to_string(), cause: cause.to_string() })?;
        Ok(Store::Postgres(Box::new(c)))
    }

    /// Inserts `records` in one transaction; returns how many were new.
    pub fn insert(&mut self, records: &[Record]) -> Result<usize, ClusterError> {
        self.insert_and(records, |_| Vec::new())
    }

    /// Inserts `records` and, in the same transaction, the utilization rows `then` makes of
    /// those that were new (a record already there adds no sample twice); returns how many
    /// were new.
    pub fn insert_and(
        &mut self,
        records: &[Record],
        then: impl FnOnce(&[&Record]) -> Vec<UtilizationRow>,
    ) -> Result<usize, ClusterError> {
        let sql = insert_sql();
        let mut new = Vec::with_capacity(records.len());
        match self {
            Store::Sqlite(c) => {
                let tx = c.transaction()?;
                {
                    let mut st = tx.prepare_cached(&sql)?;
                    for r in records {
                        let n = st.execute(rusqlite::params![
                            r.vm,
                            i(r.cycle),
                            i(r.cycle_ms),
                            r.host,
                            r.tenant,
                            r.secs,
                            i(r.bytes),
                            r.guarantee,
                            r.guarantee_bps,
                            i(r.in_force_bps),
                            r.rate_bps,
                            r.fulfillment,
                            r.charge_guaranteed,
                            r.charge_above
                        ])?;
                        if n > 0 {
                            new.push(r);
                        }
                    }
                    let mut up = tx.prepare_cached(UPSERT_UTILIZATION)?;
                    for (owner, name, d) in then(&new) {
                        up.execute(rusqlite::params![
                            owner.as_str(),
                            name,
                            i(d.samples),
                            d.sum_utilization,
                            d.sum_rate_bps,
                            histogram_text(&d)
                        ])?;
                    }
                }
                tx.commit()?;
                Ok(new.len())
            }
            Store::Postgres(c) => {
                let mut tx = c.transaction()?;
                let st = tx.prepare(&sql)?;
                for r in records {
                    let n = tx.execute(
                        &st,
                        &[
                            &r.vm,
                            &i(r.cycle),
                            &i(r.cycle_ms),
                            &r.host,
                            &r.tenant,
                            &r.secs,
                            &i(r.bytes),
                            &r.guarantee,
                            &r.guarantee_bps,
                            &i(r.in_force_bps),
                            &r.rate_bps,
                            &r.fulfillment,
                            &r.charge_guaranteed,
                            &r.charge_above,
                        ],
                    )?;
                    if n > 0 {
                        new.push(r);
                    }
                }
                let up = tx.prepare(UPSERT_UTILIZATION)?;
                for (owner, name, d) in then(&new) {
                    let row: [&(dyn postgres::types::ToSql + Sync); 6] = [
                        &owner.as_str(),
                        &name,
                        &i(d.samples),
                        &d.sum_utilization,
                        &d.sum_rate_bps,
                        &histogram_text(&d),
                    ];
                    tx.execute(&up, &row)?;
                }
                tx.commit()?;
                Ok(new.len())
            }
        }
    }

    /// Every VM's and host's utilization.
    pub fn utilization(&mut self) -> Result<Vec<UtilizationRow>, ClusterError> {
        let sql = "SELECT owner, name, samples, sum_utilization, sum_rate_bps, histogram FROM utilization";
        let mut out = Vec::new();
        match self {
            Store::Sqlite(c) => {
                let mut st = c.prepare(sql)?;
                let rows = st.query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        distribution(r.get(2)?, r.get(3)?, r.get(4)?, &r.get::<_, String>(5)?),
                    ))
                })?;
                for row in rows {
                    let (owner, name, d) = row?;
                    out.extend(Owner::parse(&owner).map(|o| (o, name, d)));
                }
            }
            Store::Postgres(c) => {
                for r in c.query(sql, &[])? {
                    let owner: String = r.get(0);
                    let d = distribution(r.get(2), r.get(3), r.get(4), r.get::<_, &str>(5));
                    out.extend(Owner::parse(&owner).map(|o| (o, r.get(1), d)));
                }
            }
        }
        Ok(out)
    }

    /// Bytes `vm` sent in cycles ending at or after `from_unix_ms`.
    pub fn sent_since(&mut self, vm: &str, from_unix_ms: u64) -> Result<u64, ClusterError> {
        let sql = "SELECT COALESCE(SUM(bytes), 0) FROM usage_records WHERE vm = $1 AND cycle * cycle_ms >= $2";
        let sum: i64 = match self {
            Store::Sqlite(c) => c.query_row(sql, rusqlite::params![vm, i(from_unix_ms)], |r| r.get(0)),
            Store::Postgres(c) => {
                // SUM over BIGINT is NUMERIC in PostgreSQL; cast back.
                let sql = sql.replace("COALESCE(SUM(bytes), 0)", "COALESCE(SUM(bytes), 0)::BIGINT");
                return c
                    .query_one(&sql, &[&vm, &i(from_unix_ms)])
                    .map(|r| r.get::<_, i64>(0).max(0) as u64)
                    .map_err(ClusterError::from);
            }
        }?;
        Ok(sum.max(0) as u64)
    }

    /// Records whose cycle ends within [from, to) Unix milliseconds, of `tenant` (or every
    /// tenant), in cycle order.
    pub fn records(
        &mut self,
        tenant: Option<&str>,
        from_unix_ms: u64,
        to_unix_ms: u64,
    ) -> Result<Vec<Record>, ClusterError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM usage_records WHERE ($1 = '' OR tenant = $1) \
             AND cycle * cycle_ms >= $2 AND cycle * cycle_ms < $3 ORDER BY cycle, vm"
        );
        let t = tenant.unwrap_or("");
        match self {
            Store::Sqlite(c) => {
                let mut st = c.prepare(&sql)?;
                let rows = st.query_map(rusqlite::params![t, i(from_unix_ms), i(to_unix_ms)], |r| {
                    Ok(Record {
                        vm: r.get(0)?,
                        cycle: r.get::<_, i64>(1)? as u64,
                        cycle_ms: r.get::<_, i64>(2)? as u64,
                        host: r.get(3)?,
                        tenant: r.get(4)?,
                        secs: r.get(5)?,
                        bytes: r.get::<_, i64>(6)? as u64,
                        guarantee: r.get(7)?,
                        guarantee_bps: r.get(8)?,
                        in_force_bps: r.get::<_, i64>(9)? as u64,
                        rate_bps: r.get(10)?,
                        fulfillment: r.get(11)?,
                        charge_guaranteed: r.get(12)?,
                        charge_above: r.get(13)?,
                    })
                })?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            }
            Store::Postgres(c) => {
                let rows = c.query(&sql, &[&t, &i(from_unix_ms), &i(to_unix_ms)])?;
                Ok(rows
                    .iter()
                    .map(|r| Record {
                        vm: r.get(0),
                        cycle: r.get::<_, i64>(1) as u64,
                        cycle_ms: r.get::<_, i64>(2) as u64,
                        host: r.get(3),
                        tenant: r.get(4),
                        secs: r.get(5),
                        bytes: r.get::<_, i64>(6) as u64,
                        guarantee: r.get(7),
                        guarantee_bps: r.get(8),
                        in_force_bps: r.get::<_, i64>(9) as u64,
                        rate_bps: r.get(10),
                        fulfillment: r.get(11),
                        charge_guaranteed: r.get(12),
                        charge_above: r.get(13),
                    })
                    .collect())
            }
        }
    }
}
