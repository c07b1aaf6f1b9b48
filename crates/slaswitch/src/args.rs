//! A small command-line reader shared by the three programs: `--flag`, `--key value`,
//! `--key=value` and positional words, with errors that name the offending word.

use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub struct Args {
    pub positional: Vec<String>,
    pub options: BTreeMap<String, Vec<String>>,
    pub flags: Vec<String>,
}

impl Args {
    /// `takes_value` lists the `--options` that take a value; every other `--word` is a flag.
    pub fn parse(argv: impl IntoIterator<Item = String>, takes_value: &[&str], flags: &[&str]) -> Result<Args, String> {
        let mut a = Args::default();
        let mut it = argv.into_iter();
        while let Some(word) = it.next() {
            // A bare `--` separates commands, as in ovs-vsctl: the caller splits on it.
            if word == "--" {
                a.positional.push(word);
            } else if let Some(name) = word.strip_prefix("--") {
                let (name, inline) = match name.split_once('=') {
                    Some((n, v)) => (n.to_string(), Some(v.to_string())),
                    None => (name.to_string(), None),
                };
                if takes_value.contains(&name.as_str()) {
                    let value = match inline {
                        Some(v) => v,
                        None => it.next().ok_or_else(|| format!("--{name} needs a value"))?,
                    };
                    a.options.entry(name).or_default().push(value);
                } else if flags.contains(&name.as_str()) {
                    a.flags.push(name);
                } else {
                    return Err(format!("unknown option --{name}"));
                }
            } else {
                a.positional.push(word);
            }
        }
        Ok(a)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.options.get(name).and_then(|v| v.last()).map(String::as_str)
    }

    pub fn all(&self, name: &str) -> &[String] {
        self.options.get(name).map_or(&[], Vec::as_slice)
    }

    pub fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }

    pub fn parsed<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("--{name} {v}: not a valid value")),
        }
    }
}

/// Parses `key=value` words into a map; errors name the word without `=`.
pub fn key_values(words: &[String]) -> Result<BTreeMap<String, String>, String> {
    words
        .iter()
        .map(|w| {
            w.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("'{w}' is not key=value"))
        })
        .collect()
}
