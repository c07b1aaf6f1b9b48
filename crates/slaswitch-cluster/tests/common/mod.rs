//! A private PostgreSQL server for the tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A private PostgreSQL cluster in a directory, on a Unix socket there; stopped on drop.
pub struct PgServer {
    dir: PathBuf,
    bin: PathBuf,
}

impl PgServer {
    /// None when PostgreSQL or root (its server runs as user postgres) is missing: the test
    /// is then skipped, or fails under `CI=true` (`slaswitch_testkit::require`).
    pub fn start(dir: &Path) -> Option<PgServer> {
        use slaswitch_testkit::Component::{Postgres, Root};
        if !slaswitch_testkit::require(&[Root, Postgres]) {
            return None;
        }
        let bin = slaswitch_testkit::postgres_bin()?;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let as_postgres = |args: &[&str]| {
            let out = Command::new("runuser").args(["-u", "postgres", "--"]).args(args).output().unwrap();
            assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        assert!(Command::new("chown").args(["postgres:postgres"]).arg(dir).status().unwrap().success());
        let data = dir.join("data").display().to_string();
        as_postgres(&[&bin.join("initdb").display().to_string(), "-D", &data, "-A", "trust", "-U", "postgres"]);
        let opts = format!("-k {} -c listen_addresses= -p 5499", dir.display());
        let log = dir.join("pg.log").display().to_string();
        as_postgres(&[&bin.join("pg_ctl").display().to_string(), "-D", &data, "-o", &opts, "-l", &log, "-w", "start"]);
        Some(PgServer { dir: dir.to_path_buf(), bin })
    }

    pub fn url(&self) -> String {
        format!("host={} port=5499 user=postgres dbname=postgres", self.dir.display())
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.dir.join("data").display().to_string();
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &data, "-m", "immediate", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
