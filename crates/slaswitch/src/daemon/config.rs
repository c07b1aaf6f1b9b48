//! The persisted configuration: tenants, ports and flows, written atomically (temp file, fsync,
//! rename, fsync of the directory) after every change that succeeded, and replayed at start so
//! the daemon restarts into the same state. A file that does not parse is never overwritten:
//! the daemon refuses to start and keeps a copy of it aside.

use std::path::{Path, PathBuf};

use crate::error::DaemonError;
pub use crate::protocol::SavedConfig;

/// The configuration file.
pub struct ConfigStore {
    path: PathBuf,
}

impl ConfigStore {
    /// The store at `path` (nothing is read yet).
    pub fn new(path: PathBuf) -> Self {
        ConfigStore { path }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file; an absent file is an empty configuration. A corrupt or truncated file is
    /// refused, and a copy of it is kept beside it (`NAME.corrupt-UNIXSECS`).
    pub fn load(&self) -> Result<SavedConfig, DaemonError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(SavedConfig::default()),
            Err(cause) => return Err(DaemonError::File { action: "read", path: self.path.clone(), cause }),
        };
        serde_json::from_str(&text).map_err(|cause| {
            let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            let aside = PathBuf::from(format!("{}.corrupt-{secs}", self.path.display()));
            let kept = match std::fs::copy(&self.path, &aside) {
                Ok(_) => format!("a copy is kept at {}", aside.display()),
                Err(c) => format!("no copy could be kept ({c})"),
            };
            DaemonError::CorruptConfig { path: self.path.clone(), cause, kept }
        })
    }

    /// Writes the file atomically and durably: a temporary file, synced, renamed over the old
    /// one, and the directory synced so the rename survives a power cut.
    pub fn save(&self, config: &SavedConfig) -> Result<(), DaemonError> {
        use std::io::Write;
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(DaemonError::file("create", dir))?;
        let tmp = self.path.with_extension("tmp");
        let text = serde_json::to_string_pretty(config).expect("config serialises");
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()
        };
        write().map_err(DaemonError::file("write", &tmp))?;
        std::fs::rename(&tmp, &self.path).map_err(DaemonError::file("replace", &self.path))?;
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(DaemonError::file("sync", dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupt_or_truncated_file_is_refused_kept_aside_and_never_overwritten() {
        let dir = std::env::temp_dir().join(format!("slaswitch-config-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("conf.json");
        for text in ["{\"ports\": [{\"name\": \"vm1\", \"ty", "\u{0}\u{0}garbage"] {
            std::fs::write(&path, text).unwrap();
            let e = ConfigStore::new(path.clone()).load().unwrap_err().to_string();
            assert!(e.contains("is not a valid slaswitch configuration") && e.contains("will not overwrite"), "{e}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "the file is left as it was");
            let copies: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("conf.json.corrupt-"))
                .collect();
            assert!(!copies.is_empty(), "a copy is kept aside");
            assert_eq!(std::fs::read_to_string(copies[0].path()).unwrap(), text);
            for c in copies {
                std::fs::remove_file(c.path()).unwrap();
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A configuration file as earlier versions wrote it still loads, unchanged: its format
    /// is the persisted contract, whatever the control protocol does.
    #[test]
    fn a_file_written_by_an_earlier_version_loads() {
        let dir = std::env::temp_dir().join(format!("slaswitch-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("conf.json");
        std::fs::write(
            &path,
            r#"{"ports": [{"name": "vm1", "type": "vhost-user", "number": 1,
                           "options": {"bandwidth_bps": "2G", "priority": "1"}},
                          {"name": "up", "type": "null", "number": 2}],
                "flows": ["in_port=vm1,actions=output:up"]}"#,
        )
        .unwrap();
        let store = ConfigStore::new(path.clone());
        let saved = store.load().unwrap();
        assert_eq!(saved.ports.len(), 2);
        assert_eq!(saved.ports[0].options["bandwidth_bps"], "2G");
        assert!(saved.ports[1].options.is_empty());
        assert_eq!(saved.flows, ["in_port=vm1,actions=output:up"]);
        assert!(saved.tenants.is_empty());
        store.save(&saved).unwrap();
        assert_eq!(store.load().unwrap(), saved, "saving and loading again changes nothing");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
