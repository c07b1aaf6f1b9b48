//! Number ranges shared by every module's options: one range check, so each error names the
//! option, its value and the range in the same words.

use std::collections::BTreeMap;

/// Port numbers run from 1 to `MAX_PORTS - 1`; the data plane sizes its port tables by it.
pub const MAX_PORTS: usize = 1024;

/// The whole-number option `key`, if given, within `range`; the error names the option, its
/// value and the range. Every module's numeric options go through it.
pub fn number_in<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
    options: &BTreeMap<String, String>,
    key: &str,
    range: std::ops::RangeInclusive<T>,
) -> Result<Option<T>, crate::error::ConfigError> {
    let Some(v) = options.get(key) else { return Ok(None) };
    match v.parse::<T>() {
        Ok(n) if range.contains(&n) => Ok(Some(n)),
        _ => Err(crate::error::ConfigError::value(
            key,
            v,
            format!("a whole number from {} to {}", range.start(), range.end()),
        )),
    }
}
