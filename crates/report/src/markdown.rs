//! The report as Markdown (GitHub-flavoured tables), for issues, pull requests and notebooks.

use std::fmt::Write as _;

use super::document::{Block, Document, Table};

pub(super) fn render(doc: &Document) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", inline(&doc.title));
    let _ = writeln!(out, "Report schema `{}`.\n", doc.schema);
    for (label, value) in &doc.facts {
        let _ = writeln!(out, "- **{}**: {}", inline(label), inline(value));
    }
    for section in &doc.sections {
        let _ = write!(out, "\n## {}\n", inline(&section.title));
        for block in &section.blocks {
            match block {
                Block::Line(l) => {
                    let _ = write!(out, "\n{}\n", inline(l));
                }
                Block::Note(l) => {
                    let _ = write!(out, "\n*{}*\n", inline(l));
                }
                Block::Table(t) => table(&mut out, t),
                Block::Warnings(ws) => {
                    out.push_str("\n**Warnings:**\n\n");
                    for w in ws {
                        let _ = writeln!(out, "- {}", inline(w));
                    }
                }
            }
        }
    }
    out
}

fn table(out: &mut String, t: &Table) {
    if let Some(title) = &t.title {
        if t.rows.is_empty() {
            let _ = write!(out, "\n{}: none\n", inline(title));
            return;
        }
        let _ = write!(out, "\n**{}**\n", inline(title));
    }
    out.push('\n');
    row(out, &t.headers);
    let align: Vec<String> = (0..t.headers.len())
        .map(|i| if i == 0 { ":--" } else { "--:" }.to_owned())
        .collect();
    row(out, &align);
    for r in &t.rows {
        row(out, r);
    }
}

fn row(out: &mut String, cells: &[String]) {
    out.push('|');
    for c in cells {
        let _ = write!(out, " {} |", cell(c));
    }
    out.push('\n');
}

/// Text in a table cell: pipes escaped, no line breaks.
fn cell(s: &str) -> String {
    inline(s).replace('|', "\\|")
}

/// Text that Markdown must not read as markup: the characters that start emphasis, code,
/// links or HTML are escaped, and line breaks become spaces.
pub(super) fn inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}
