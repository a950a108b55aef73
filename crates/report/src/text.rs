//! The report as compact, plain-ASCII text: what `lanes report` prints by default.

use std::fmt::Write as _;

use super::document::{Block, Document, Table};

/// Typesets `doc`: aligned tables, two-space indents, names made ASCII.
pub(super) fn render(doc: &Document) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}  ({})", ascii(&doc.title), ascii(&doc.schema));
    for (label, value) in &doc.facts {
        let _ = writeln!(out, "{label}: {}", ascii(value));
    }
    for section in &doc.sections {
        let _ = write!(out, "\n{}\n", section.title);
        for block in &section.blocks {
            match block {
                Block::Line(l) | Block::Note(l) => {
                    let _ = writeln!(out, "  {}", ascii(l));
                }
                Block::Table(t) => table(&mut out, t),
                Block::Warnings(ws) => {
                    out.push_str("\n  WARNINGS:\n");
                    for w in ws {
                        let _ = writeln!(out, "  ! {}", ascii(w));
                    }
                }
            }
        }
    }
    // A summary ends with the blank line that opens the rates, so it is a prefix of the full
    // text.
    if doc.sections.len() == 1 {
        out.push('\n');
    }
    out
}

/// A titled table says "none" when it has no rows.
fn table(out: &mut String, t: &Table) {
    if let Some(title) = &t.title {
        if t.rows.is_empty() {
            let _ = writeln!(out, "\n  {title}: none");
            return;
        }
        let _ = writeln!(out, "\n  {title}:");
    }
    aligned(out, &t.headers, &t.rows);
}

/// Keeps the text plain ASCII whatever a name holds.
fn ascii(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii() && !c.is_ascii_control() {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// An aligned table: the first column left-aligned, the others right-aligned, two spaces
/// between columns.
fn aligned(out: &mut String, headers: &[String], rows: &[Vec<String>]) {
    let headers: Vec<String> = headers.iter().map(|c| ascii(c)).collect();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| ascii(c)).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(String::len).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |out: &mut String, cells: &[String]| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                let _ = write!(text, "  {cell:<w$}");
            } else {
                let _ = write!(text, "  {cell:>w$}");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(out, &headers);
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    line(out, &rule);
    for row in &rows {
        line(out, row);
    }
}
