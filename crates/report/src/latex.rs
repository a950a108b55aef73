//! The report as a LaTeX fragment for papers: `booktabs` tables (the only package it needs),
//! unnumbered sections, every special character escaped.

use std::fmt::Write as _;

use super::document::{Block, Document, Table};

pub(super) fn render(doc: &Document) -> String {
    let mut out = String::new();
    out.push_str("% Lanes report; needs \\usepackage{booktabs}\n");
    let _ = writeln!(out, "\\section*{{{}}}", escape(&doc.title));
    let _ = writeln!(out, "Report schema \\texttt{{{}}}.", escape(&doc.schema));
    out.push_str("\\begin{itemize}\n");
    for (label, value) in &doc.facts {
        let _ = writeln!(
            out,
            "  \\item \\textbf{{{}}}: {}",
            escape(label),
            escape(value)
        );
    }
    out.push_str("\\end{itemize}\n");
    for section in &doc.sections {
        let _ = writeln!(out, "\n\\subsection*{{{}}}", escape(&section.title));
        for block in &section.blocks {
            match block {
                Block::Line(l) => {
                    let _ = writeln!(out, "{}\n", escape(l));
                }
                Block::Note(l) => {
                    let _ = writeln!(out, "{{\\footnotesize {}}}\n", escape(l));
                }
                Block::Table(t) => table(&mut out, t),
                Block::Warnings(ws) => {
                    out.push_str("\\paragraph{Warnings}\n\\begin{itemize}\n");
                    for w in ws {
                        let _ = writeln!(out, "  \\item {}", escape(w));
                    }
                    out.push_str("\\end{itemize}\n");
                }
            }
        }
    }
    out
}

fn table(out: &mut String, t: &Table) {
    if let Some(title) = &t.title {
        if t.rows.is_empty() {
            let _ = writeln!(out, "{}: none\n", escape(title));
            return;
        }
        let _ = writeln!(out, "\\paragraph{{{}}}", escape(title));
    }
    let spec: String = (0..t.headers.len())
        .map(|i| if i == 0 { 'l' } else { 'r' })
        .collect();
    let _ = writeln!(out, "\\begin{{tabular}}{{{spec}}}\n\\toprule");
    row(out, &t.headers);
    out.push_str("\\midrule\n");
    for r in &t.rows {
        row(out, r);
    }
    out.push_str("\\bottomrule\n\\end{tabular}\n\n");
}

fn row(out: &mut String, cells: &[String]) {
    let cells: Vec<String> = cells.iter().map(|c| escape(c)).collect();
    let _ = writeln!(out, "{} \\\\", cells.join(" & "));
}

/// Text with LaTeX's special characters escaped; line breaks become spaces.
pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\textbackslash{}"),
            '&' | '%' | '$' | '#' | '_' | '{' | '}' => {
                out.push('\\');
                out.push(c);
            }
            '~' => out.push_str("\\textasciitilde{}"),
            '^' => out.push_str("\\textasciicircum{}"),
            '<' => out.push_str("\\textless{}"),
            '>' => out.push_str("\\textgreater{}"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}
