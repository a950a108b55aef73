//! The archive of a campaign (`lanes archive`): one JSON object a line, a header with the
//! spec, the amendments and the status, then every task, then every ledger row, then an end
//! line with the counts. The end line is what tells a whole archive from a cut one, and
//! [`read`] refuses an archive without it or whose counts disagree. No file I/O: the caller
//! opens and writes the file (and compresses what it writes); [`read_from`] reads an archive's
//! bytes, gzip-compressed or not.

use std::io::{BufRead, Read as _};

use serde::{Deserialize, Serialize};

use crate::row::Row;
use crate::spec::{Campaign, CampaignSpec, Task, validate_tasks};
use crate::utc::UtcTime;

/// The archive format's tag, in the header.
pub const ARCHIVE_FORMAT: &str = "lanes-archive/1";

/// One line of an archive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    Header(Box<Header>),
    Task(Task),
    Row(Box<Row>),
    End(End),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// [`ARCHIVE_FORMAT`].
    pub format: String,
    /// When the archive was written.
    pub archived_utc: UtcTime,
    pub spec: CampaignSpec,
    /// The recorded amendments, as the coordinator answers them.
    pub amendments: serde_json::Value,
    /// The campaign's status when the archive began, as `lanes status --json` prints it.
    pub status: serde_json::Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    pub tasks: u64,
    pub rows: u64,
}

/// A whole archive, read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Archive {
    pub header: Header,
    pub campaign: Campaign,
    pub rows: Vec<Row>,
}

/// An archive that is not whole or not an archive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    #[error("line {line}: {reason}")]
    BadLine { line: usize, reason: String },
    #[error("line {line}: expected {expected}")]
    OutOfOrder { line: usize, expected: &'static str },
    #[error("the archive ends without its end line: it was cut short")]
    Truncated,
    #[error("the end line says {said} {what}, the archive holds {found}")]
    Count {
        what: &'static str,
        said: u64,
        found: u64,
    },
    #[error("format {0:?} is not {ARCHIVE_FORMAT}")]
    Format(String),
    #[error("the archived tasks do not validate: {0}")]
    Tasks(String),
    #[error("the archived spec does not validate: {0}")]
    Spec(String),
    #[error("row {index}: {reason}")]
    Row { index: usize, reason: String },
    /// The bytes could not be read: a broken gzip stream, text that is not UTF-8, or the
    /// reader's own error.
    #[error("cannot read the archive: {0}")]
    Unreadable(String),
}

/// The first bytes of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Reads an archive from its bytes, gzip-compressed or not (told by its first bytes, not by a
/// file name; `lanes archive --to FILE.gz` writes one gzip member, and any number are read).
pub fn read_from(mut bytes: impl BufRead) -> Result<Archive, ArchiveError> {
    let unreadable = |e: std::io::Error| ArchiveError::Unreadable(e.to_string());
    let gz = bytes
        .fill_buf()
        .map_err(unreadable)?
        .starts_with(&GZIP_MAGIC);
    let mut text = String::new();
    if gz {
        flate2::bufread::MultiGzDecoder::new(bytes).read_to_string(&mut text)
    } else {
        bytes.read_to_string(&mut text)
    }
    .map_err(unreadable)?;
    read(text.lines())
}

/// The line of `line` as JSON text.
pub fn to_line(line: &Line) -> String {
    serde_json::to_string(line).expect("an archive line serializes")
}

/// Reads an archive's lines (blank lines skipped): a header, tasks, rows, then the end line,
/// and nothing after it.
pub fn read<'a>(lines: impl IntoIterator<Item = &'a str>) -> Result<Archive, ArchiveError> {
    let mut header: Option<Header> = None;
    let mut tasks = Vec::new();
    let mut rows = Vec::new();
    let mut end: Option<End> = None;
    for (i, text) in lines.into_iter().enumerate() {
        let n = i + 1;
        if text.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(text).map_err(|e| ArchiveError::BadLine {
            line: n,
            reason: e.to_string(),
        })?;
        let order = |expected| Err(ArchiveError::OutOfOrder { line: n, expected });
        match (line, &header, end.is_some()) {
            (_, _, true) => return order("nothing after the end line"),
            (Line::Header(h), None, _) => {
                if h.format != ARCHIVE_FORMAT {
                    return Err(ArchiveError::Format(h.format));
                }
                header = Some(*h);
            }
            (_, None, _) => return order("the header first"),
            (Line::Header(_), Some(_), _) => return order("one header"),
            (Line::Task(t), Some(_), _) if rows.is_empty() => tasks.push(t),
            (Line::Task(_), Some(_), _) => return order("every task before the rows"),
            (Line::Row(r), Some(_), _) => rows.push(*r),
            (Line::End(e), Some(_), _) => end = Some(e),
        }
    }
    let (Some(header), Some(end)) = (header, end) else {
        return Err(ArchiveError::Truncated);
    };
    for (what, said, found) in [
        ("tasks", end.tasks, tasks.len() as u64),
        ("rows", end.rows, rows.len() as u64),
    ] {
        if said != found {
            return Err(ArchiveError::Count { what, said, found });
        }
    }
    header
        .spec
        .validate()
        .map_err(|e| ArchiveError::Spec(e.to_string()))?;
    validate_tasks(&tasks).map_err(|e| ArchiveError::Tasks(e.to_string()))?;
    // The ledger whole and of this campaign: seq 0, 1, 2, … with no gap or repeat.
    for (i, r) in rows.iter().enumerate() {
        let reason = if r.campaign != header.spec.id {
            Some(format!(
                "of campaign {}, not {}",
                r.campaign, header.spec.id
            ))
        } else if r.seq != i as u64 {
            Some(format!("has seq {}, expected {i}", r.seq))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(ArchiveError::Row { index: i, reason });
        }
    }
    Ok(Archive {
        campaign: Campaign {
            spec: header.spec.clone(),
            tasks,
        },
        header,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// Campaign `a`: one arm, two tasks.
    fn campaign() -> Campaign {
        crate::spec::load_str(
            "id = \"a\"\nphase1_runs = 1\nschedule_seed = 1\n[[arms]]\nid = \"x\"\n\
             [tasks]\nitems = [{ id = \"t1\" }, { id = \"t2\" }]\n[driver]\nsim = {}\n",
            Path::new("a.toml"),
            Path::new("."),
        )
        .unwrap()
    }

    fn lines(tasks: usize, end: End) -> Vec<String> {
        let c = campaign();
        let mut out = vec![to_line(&Line::Header(Box::new(Header {
            format: ARCHIVE_FORMAT.into(),
            archived_utc: "2026-12-04T00:00:00Z".parse().unwrap(),
            spec: c.spec.clone(),
            amendments: serde_json::json!([]),
            status: serde_json::json!({}),
        })))];
        out.extend(
            c.tasks[..tasks]
                .iter()
                .map(|t| to_line(&Line::Task(t.clone()))),
        );
        out.push(to_line(&Line::End(end)));
        out
    }

    fn read_lines(l: &[String]) -> Result<Archive, ArchiveError> {
        read(l.iter().map(String::as_str))
    }

    #[test]
    fn a_whole_archive_reads_back_and_a_broken_one_says_why() {
        let whole = lines(2, End { tasks: 2, rows: 0 });
        let a = read_lines(&whole).unwrap();
        assert_eq!(a.campaign.tasks.len(), 2);

        assert_eq!(
            read_lines(&whole[..2]).unwrap_err(),
            ArchiveError::Truncated
        );
        assert!(matches!(
            read_lines(&lines(1, End { tasks: 2, rows: 0 })).unwrap_err(),
            ArchiveError::Count {
                what: "tasks",
                said: 2,
                found: 1
            }
        ));
        let mut reordered = whole.clone();
        reordered.swap(0, 1);
        assert!(matches!(
            read_lines(&reordered).unwrap_err(),
            ArchiveError::OutOfOrder { line: 1, .. }
        ));
        let mut after = whole.clone();
        after.push(whole[1].clone());
        assert!(matches!(
            read_lines(&after).unwrap_err(),
            ArchiveError::OutOfOrder { line: 5, .. }
        ));
        let mut garbage = whole.clone();
        garbage[1] = "{not json".into();
        assert!(matches!(
            read_lines(&garbage).unwrap_err(),
            ArchiveError::BadLine { line: 2, .. }
        ));
        // Rows must be this campaign's, seq 0, 1, … with no gap.
        let c = campaign();
        let trial = crate::schedule::trials(&c).next().unwrap();
        let row = |seq: u64, campaign: &str| {
            let id = crate::ids::CampaignId::new(campaign).unwrap();
            let store = crate::row::StoreFields {
                seq,
                ..Default::default()
            };
            let r = Row::bare(&id, &trial, 1, crate::row::Status::Completed, None, store);
            to_line(&Line::Row(Box::new(r)))
        };
        for (rows, index) in [(vec![row(1, "a")], 0), (vec![row(0, "a"), row(0, "a")], 1)] {
            let mut l = lines(
                2,
                End {
                    tasks: 2,
                    rows: rows.len() as u64,
                },
            );
            let end = l.pop().unwrap();
            l.extend(rows);
            l.push(end);
            assert!(
                matches!(read_lines(&l).unwrap_err(), ArchiveError::Row { index: i, .. } if i == index),
                "{index}"
            );
        }
        let mut l = lines(2, End { tasks: 2, rows: 1 });
        let end = l.pop().unwrap();
        l.push(row(0, "b"));
        l.push(end);
        assert!(matches!(
            read_lines(&l).unwrap_err(),
            ArchiveError::Row { index: 0, .. }
        ));
        let mut l = lines(2, End { tasks: 2, rows: 1 });
        let end = l.pop().unwrap();
        l.push(row(0, "a"));
        l.push(end);
        assert_eq!(read_lines(&l).unwrap().rows.len(), 1);

        let other = whole[0].replace(ARCHIVE_FORMAT, "lanes-archive/9");
        let mut foreign = whole.clone();
        foreign[0] = other;
        assert!(matches!(
            read_lines(&foreign).unwrap_err(),
            ArchiveError::Format(_)
        ));
    }
}
