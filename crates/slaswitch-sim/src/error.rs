//! Why a study did not run or its report was not written: a setting named with its value and
//! what is allowed, or the file that could not be written.

use slaswitch_plot::PlotError;

/// A refused study, or a report not written.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A setting the simulation cannot run with.
    #[error("{setting}: {value} is not allowed; {allowed}")]
    Setting {
        /// The setting.
        setting: &'static str,
        /// What was given.
        value: String,
        /// What is allowed.
        allowed: String,
    },
    /// An option of `slaswitch-sim overcommit`.
    #[error("--{option} {value}: {allowed}")]
    Option {
        /// The option.
        option: &'static str,
        /// What was given.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// A bandwidth-CPU model without rows.
    #[error("the bandwidth-CPU model has no rows: run slaswitch calibrate")]
    EmptyModel,
    /// A file or folder of the report that could not be written.
    #[error("{path}: {cause}")]
    Write {
        /// The file or folder.
        path: String,
        /// Why.
        cause: std::io::Error,
    },
    /// A chart that could not be drawn.
    #[error("the plot: {0}")]
    Plot(PlotError),
}

impl From<PlotError> for SimError {
    fn from(e: PlotError) -> SimError {
        SimError::Plot(e)
    }
}

impl SimError {
    /// A setting the simulation cannot run with.
    pub fn setting(setting: &'static str, value: impl ToString, allowed: impl Into<String>) -> SimError {
        SimError::Setting { setting, value: value.to_string(), allowed: allowed.into() }
    }

    /// What writing `path` returned, as a report's error.
    pub fn write(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> SimError + '_ {
        move |cause| SimError::Write { path: path.display().to_string(), cause }
    }
}
