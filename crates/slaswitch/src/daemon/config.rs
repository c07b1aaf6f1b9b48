//! The persisted configuration: tenants, ports and flows, written atomically (temp file + rename) after
//! every change that succeeded, and replayed at start so the daemon restarts into the same state.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use slaswitch_datapath::PortSpec;

/// What is persisted: tenants, ports and flows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedConfig {
    /// PIE-VDE's tenants and their weights (restored before the ports that name them).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tenants: std::collections::BTreeMap<String, u32>,
    /// Every port, as configured.
    pub ports: Vec<PortSpec>,
    /// Flows as `add-flow` text, with port names.
    pub flows: Vec<String>,
}

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

    /// Reads the file; an absent file is an empty configuration.
    pub fn load(&self) -> Result<SavedConfig, String> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| format!("{} is not a valid slaswitch configuration: {e}", self.path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(SavedConfig::default()),
            Err(e) => Err(format!("cannot read {}: {e}", self.path.display())),
        }
    }

    /// Writes the file atomically (a temporary file, then a rename).
    pub fn save(&self, config: &SavedConfig) -> Result<(), String> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let tmp = self.path.with_extension("tmp");
        let text = serde_json::to_string_pretty(config).expect("config serialises");
        std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| format!("cannot replace {}: {e}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
