//! The bandwidth-CPU model file (seed 000 Sec. III) that `slaswitch calibrate` writes: one
//! reader for the daemon, the simulator and the test bed, so that they agree on what a missing
//! or broken file means.

use std::path::{Path, PathBuf};

use slaswitch_qos::cpu::BandwidthModel;

/// Where slaswitchd reads the bandwidth-CPU model and `slaswitch calibrate` writes it.
pub const DEFAULT_MODEL_PATH: &str = "/var/lib/slaswitch/bandwidth-model.json";

/// Why a model file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ModelFileError {
    /// The file is there but could not be read.
    #[error("cannot read the bandwidth-CPU model {}: {cause}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What reading it said.
        cause: std::io::Error,
    },
    /// The file is not a bandwidth-CPU model.
    #[error("{} is not a bandwidth-CPU model: {cause}", .path.display())]
    NotModel {
        /// The file.
        path: PathBuf,
        /// Why it does not parse.
        cause: serde_json::Error,
    },
}

/// Reads the model at `path`; `None` when there is no such file.
pub fn read_model(path: &Path) -> Result<Option<BandwidthModel>, ModelFileError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|cause| ModelFileError::NotModel { path: path.to_path_buf(), cause }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(cause) => Err(ModelFileError::Read { path: path.to_path_buf(), cause }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_no_model_and_a_broken_one_is_named() {
        let dir = std::env::temp_dir().join(format!("slaswitch-model-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(read_model(&dir.join("absent.json")).unwrap().is_none());
        let broken = dir.join("broken.json");
        std::fs::write(&broken, "{\"tsc_hz\": ").unwrap();
        let err = read_model(&broken).unwrap_err();
        assert!(matches!(err, ModelFileError::NotModel { .. }), "{err:?}");
        assert!(err.to_string().contains("broken.json"), "{err}");
        assert!(matches!(read_model(&dir).unwrap_err(), ModelFileError::Read { .. }));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
