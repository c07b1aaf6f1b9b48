//! What every slaswitch program's command line shares: options given as `key=value` words, and
//! one exit status for every refusal.

use std::collections::BTreeMap;

use crate::ConfigError;

/// Parses `key=value` words, as the CLIs take a port's options; the error names the word
/// without `=`.
pub fn key_values(words: &[String]) -> Result<BTreeMap<String, String>, ConfigError> {
    words
        .iter()
        .map(|w| {
            w.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| ConfigError::NotKeyValue(w.clone()))
        })
        .collect()
}

/// The command line of a slaswitch program, parsed from `words` (the program's own when `None`).
/// A bad option exits with 1, as every other refusal does (clap's own is 2); `--help` and
/// `--version` print and exit 0.
pub fn parse_args<C: clap::Parser>(words: Option<&[String]>) -> C {
    let parsed = match words {
        Some(w) => C::try_parse_from(w),
        None => C::try_parse(),
    };
    parsed.unwrap_or_else(|e| {
        if !e.use_stderr() {
            e.exit();
        }
        let _ = e.print();
        std::process::exit(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_become_options_and_a_word_without_equals_is_named() {
        let words = ["a=1".to_string(), "b=x=y".to_string()];
        let kv = key_values(&words).unwrap();
        assert_eq!(kv["a"], "1");
        assert_eq!(kv["b"], "x=y");
        let e = key_values(&["a=1".to_string(), "oops".to_string()]).unwrap_err();
        assert_eq!(e.to_string(), "'oops' is not key=value");
    }
}
