//! `archive_reader`: reading an archive back (`archive::read_from`, what `lanes report
//! --from FILE` runs) from any bytes, plain or gzip-compressed.
//!
//! What must hold: nothing panics; the same text reads the same compressed or not (in one
//! gzip member or split over two); and an archive that reads, written again line by line
//! (`archive::to_line`, as `lanes archive` writes it), reads back as itself.

use std::io::Write as _;

use lanes_common::archive::{self, Archive, End, Line};

pub fn fuzz_one(data: &[u8]) {
    let read = archive::read_from(data);
    // The gzip path, on every input: the input compressed reads as the input does.
    if !data.starts_with(&[0x1f, 0x8b]) {
        let (head, tail) = data.split_at(data.len() / 2);
        let mut two_members = gzip(head);
        two_members.extend(gzip(tail));
        assert_eq!(
            archive::read_from(&gzip(data)[..]),
            read,
            "gzip changed the archive"
        );
        assert_eq!(
            archive::read_from(&two_members[..]),
            read,
            "two gzip members read differently from one"
        );
    }
    if let Ok(a) = read {
        let text = write(&a);
        let again = archive::read_from(text.as_bytes())
            .unwrap_or_else(|e| panic!("an archive written again does not read: {e}"));
        assert_eq!(again, a, "an archive changed when written again");
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

/// The archive's lines, as `lanes archive` writes them.
fn write(a: &Archive) -> String {
    let mut lines = vec![archive::to_line(&Line::Header(Box::new(a.header.clone())))];
    lines.extend(
        a.campaign
            .tasks
            .iter()
            .map(|t| archive::to_line(&Line::Task(t.clone()))),
    );
    lines.extend(
        a.rows
            .iter()
            .map(|r| archive::to_line(&Line::Row(Box::new(r.clone())))),
    );
    lines.push(archive::to_line(&Line::End(End {
        tasks: a.campaign.tasks.len() as u64,
        rows: a.rows.len() as u64,
    })));
    lines.join("\n")
}
