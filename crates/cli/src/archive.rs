//! `lanes archive ID --to FILE`: the campaign as recorded (spec, amendments, tasks) and its
//! whole ledger in one JSONL file, gzip-compressed when FILE ends in `.gz`; and reading one
//! back for `lanes report --from FILE`. The file is written beside its final name and renamed
//! into place only once it is whole, so an archive that exists is complete.

use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use tokio_stream::StreamExt;

use lanes_common::archive::{self, ARCHIVE_FORMAT, Archive, End, Header, Line};
use lanes_common::proto as pb;
use lanes_common::row::Row;
use lanes_common::spec::CampaignSpec;

use crate::client::{Client, status_json};

/// What an archive held, for the closing line.
pub(crate) struct Written {
    pub(crate) tasks: u64,
    pub(crate) rows: u64,
    pub(crate) state: String,
}

fn gzipped(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gz")
}

/// Writes the archive of `id` to `to`; refuses an existing file unless `force`.
pub(crate) async fn write(
    c: &mut Client,
    id: &str,
    to: &Path,
    force: bool,
) -> anyhow::Result<Written> {
    if to.exists() && !force {
        anyhow::bail!("{} exists: pass --force to replace it", to.display());
    }
    let mut export = c
        .export(pb::ExportRequest { id: id.to_owned() })
        .await?
        .into_inner();
    let header = match export.next().await.transpose()?.and_then(|c| c.chunk) {
        Some(pb::export_chunk::Chunk::Header(h)) => h,
        _ => anyhow::bail!("the coordinator's export did not start with a header"),
    };
    let status = header
        .status
        .as_ref()
        .context("the export header has no status")?;
    let state = status_json(status)["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let spec: CampaignSpec =
        serde_json::from_str(&header.spec_json).context("the exported spec does not parse")?;
    let tmp = partial_path(to);
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let mut out = Sink::new(file, gzipped(to));
    let result = async {
        let mut line = |l: &Line| writeln!(out, "{}", archive::to_line(l));
        line(&Line::Header(Box::new(Header {
            format: ARCHIVE_FORMAT.to_owned(),
            archived_utc: lanes_common::utc::UtcTime::from_ms(now_ms()),
            spec,
            amendments: serde_json::from_str(&header.amendments_json)
                .context("the exported amendments do not parse")?,
            status: status_json(status),
        })))?;
        let mut tasks = 0u64;
        while let Some(chunk) = export.next().await.transpose()? {
            if let Some(pb::export_chunk::Chunk::Tasks(t)) = chunk.chunk {
                for (i, task) in t.tasks.into_iter().enumerate() {
                    let task = lanes_common::convert::task_from_wire(i, task)
                        .map_err(|e| anyhow::anyhow!("an exported task: {e}"))?;
                    line(&Line::Task(task))?;
                    tasks += 1;
                }
            }
        }
        let mut rows_stream = c
            .rows(pb::RowsRequest {
                id: id.to_owned(),
                from_seq: 0,
                follow: false,
            })
            .await?
            .into_inner();
        let mut rows = 0u64;
        while let Some(r) = rows_stream.next().await.transpose()? {
            let row = Row::try_from(r).map_err(|e| anyhow::anyhow!("a ledger row: {e}"))?;
            line(&Line::Row(Box::new(row)))?;
            rows += 1;
        }
        line(&Line::End(End { tasks, rows }))?;
        anyhow::Ok((tasks, rows))
    }
    .await;
    let finished = result.and_then(|counts| {
        // Every byte on disk, then read back whole, before the archive takes its name: the
        // next step may well be `lanes delete`.
        out.finish()?;
        read(&tmp).context("the archive just written does not read back")?;
        std::fs::rename(&tmp, to).with_context(|| format!("cannot write {}", to.display()))?;
        if let Some(dir) = to.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .with_context(|| format!("cannot sync {}", dir.display()))?;
        }
        Ok(counts)
    });
    match finished {
        Ok((tasks, rows)) => Ok(Written { tasks, rows, state }),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Where the lines go: the file, through gzip or not. [`Sink::finish`] reports every error
/// that dropping would swallow (the gzip trailer, the last buffer, the fsync).
enum Sink {
    Plain(BufWriter<std::fs::File>),
    Gzip(flate2::write::GzEncoder<BufWriter<std::fs::File>>),
}

impl Sink {
    fn new(file: std::fs::File, gzip: bool) -> Self {
        let buffered = BufWriter::new(file);
        if gzip {
            Sink::Gzip(flate2::write::GzEncoder::new(
                buffered,
                flate2::Compression::default(),
            ))
        } else {
            Sink::Plain(buffered)
        }
    }

    fn finish(self) -> anyhow::Result<()> {
        let buffered = match self {
            Sink::Plain(b) => b,
            Sink::Gzip(g) => g.finish()?,
        };
        let file = buffered.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(())
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Gzip(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Gzip(w) => w.flush(),
        }
    }
}

/// `<to>.partial`, where the archive is written until it is whole.
fn partial_path(to: &Path) -> PathBuf {
    let mut name = to.file_name().unwrap_or_default().to_owned();
    name.push(".partial");
    to.with_file_name(name)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Reads an archive, compressed or not (told by its first bytes, not its name).
pub(crate) fn read(path: &Path) -> anyhow::Result<Archive> {
    let file = BufReader::new(
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?,
    );
    archive::read_from(file).map_err(|e| match e {
        archive::ArchiveError::Unreadable(_) => {
            anyhow::Error::new(e).context(format!("cannot read {}", path.display()))
        }
        e => anyhow::Error::new(e).context(format!("{} is not a whole archive", path.display())),
    })
}
