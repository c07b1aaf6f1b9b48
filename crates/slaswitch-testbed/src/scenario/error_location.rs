//! Where in a scenario file an error is: the line and the field, found in the file read as a
//! TOML document, so that a bad file is refused naming both.

use std::fmt;

/// A scenario error: where (line, field) and what.
#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioError {
    /// The scenario file.
    pub file: String,
    /// The line, when known.
    pub line: Option<usize>,
    /// The field, as a path (`vm[2].qos.priority`).
    pub field: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}: ", self.file)?,
            None => write!(f, "{}: ", self.file)?,
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ScenarioError {}

/// A path to a value in the TOML document, for finding its line.
#[derive(Clone, Debug)]
pub(super) enum Seg {
    Key(&'static str),
    Index(usize),
}

fn field_text(path: &[Seg]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// The field whose value a parse error points at (`host.vm_virtio_ring`, `vm[1].count`): the
/// innermost key whose value holds `offset`, found in the same document `locate` reads;
/// empty when the text does not parse as TOML (a syntax error names its line only).
pub(super) fn field_at(text: &str, offset: usize) -> String {
    let Ok(doc) = text.to_string().parse::<toml_edit::ImDocument<String>>() else { return String::new() };
    let mut path = String::new();
    find_field(doc.as_table(), offset, &mut path);
    path
}

/// Appends to `path` the key of `table` whose value holds `offset`, and so on inward.
fn find_field(table: &dyn toml_edit::TableLike, offset: usize, path: &mut String) -> bool {
    let holds = |span: Option<std::ops::Range<usize>>| span.is_some_and(|r| r.contains(&offset));
    for (key, item) in table.iter() {
        let mark = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
        let found = match item {
            toml_edit::Item::Value(v) if holds(v.span()) => {
                if let Some(inline) = v.as_inline_table() {
                    // A key inside it names the field better; the table's own key stands if none does.
                    find_field(inline, offset, path);
                }
                true
            }
            toml_edit::Item::Value(_) | toml_edit::Item::None => false,
            toml_edit::Item::Table(t) => find_field(t, offset, path),
            toml_edit::Item::ArrayOfTables(tables) => tables.iter().enumerate().any(|(i, t)| {
                let inner = path.len();
                path.push_str(&format!("[{i}]"));
                find_field(t, offset, path) || {
                    path.truncate(inner);
                    false
                }
            }),
        };
        if found {
            return true;
        }
        path.truncate(mark);
    }
    false
}

/// The line of the value at `path` (or of its closest present parent).
fn locate(text: &str, path: &[Seg]) -> Option<usize> {
    let doc: toml_edit::ImDocument<String> = text.to_string().parse().ok()?;
    let mut item: &toml_edit::Item = doc.as_item();
    let mut best = None;
    for seg in path {
        let next = match seg {
            Seg::Key(k) => item.get(*k),
            Seg::Index(i) => item.get(*i),
        };
        let Some(next) = next else { break };
        if let Some(span) = next.span() {
            best = Some(span.start);
        }
        item = next;
    }
    best.map(|o| line_of(text, o))
}

pub(super) struct Checker<'a> {
    pub(super) file: &'a str,
    pub(super) text: &'a str,
}

impl Checker<'_> {
    pub(super) fn err(&self, path: &[Seg], message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            file: self.file.to_string(),
            line: locate(self.text, path),
            field: field_text(path),
            message: message.into(),
        }
    }
}
