//! What names may be: ports, tenants. One pattern for all, so the CLI's separators and flags
//! (`-`, `--`) can never be names and a port name can become an interface name.

/// Checks `name` (a `what`, e.g. "port name"): 1 to `max_len` characters, letters, digits, `-`
/// and `_`, starting with a letter or a digit.
pub fn valid_name(what: &'static str, name: &str, max_len: usize) -> Result<(), crate::error::ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= max_len
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(crate::error::ConfigError::Name { what, name: name.into(), max_len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_start_with_a_letter_or_digit_and_fit() {
        for good in ["vm1", "a", "2nd-vm", "web_01"] {
            assert_eq!(valid_name("port name", good, 15), Ok(()));
        }
        for bad in ["", "-", "--x", "_x", "vm 1", "vm/1", "sixteen-chars-xx", "é"] {
            let e = valid_name("port name", bad, 15).unwrap_err().to_string();
            assert!(e.starts_with(&format!("port name '{bad}'")) && e.contains("1 to 15"), "{e}");
        }
    }
}
