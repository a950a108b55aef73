//! The Redis store's layout record, the key `lanes:layout` (a decimal integer): read and
//! checked at connect, written on a fresh store and by `lanes store migrate`.

use super::conn::Conn;
use super::keys::CAMPAIGNS;
use super::redis_err;
use crate::store::api::StoreError;
use crate::store::layout::{LayoutError, REDIS_LAYOUT, Recorded, StoreAt, UNVERSIONED_LAYOUT};
use crate::store::tx::R;

/// The layout record (outside any campaign's slot, like the campaign index).
pub(crate) const LAYOUT_KEY: &str = "lanes:layout";

fn parse(text: &str) -> R<u32> {
    text.parse::<u32>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| StoreError::Corrupt(format!("{LAYOUT_KEY} is {text:?}, not a layout")))
}

/// What the store records. A store without a record but with campaigns listed is of the
/// layout written before layouts were recorded; every campaign is listed before its first
/// commit, so a store without the index holds no campaign data.
pub(crate) async fn recorded(conn: &mut Conn) -> R<Recorded> {
    let (layout, listed): (Option<String>, bool) = redis::pipe()
        .cmd("GET")
        .arg(LAYOUT_KEY)
        .cmd("EXISTS")
        .arg(CAMPAIGNS)
        .query_async(conn)
        .await
        .map_err(redis_err)?;
    match layout {
        Some(text) => parse(&text).map(Recorded::Layout),
        None if listed => Ok(Recorded::Unversioned),
        None => Ok(Recorded::Empty),
    }
}

/// Records `layout` unless a record is there already (`SET NX`: a coordinator connecting at the
/// same time may have been first); answers the record now stored.
pub(crate) async fn stamp(conn: &mut Conn, layout: u32) -> R<u32> {
    let (stored,): (String,) = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg(LAYOUT_KEY)
        .arg(layout)
        .arg("NX")
        .ignore()
        .cmd("GET")
        .arg(LAYOUT_KEY)
        .query_async(conn)
        .await
        .map_err(redis_err)?;
    parse(&stored)
}

/// Records `layout` over an older record (the end of a migration).
pub(crate) async fn record(conn: &mut Conn, layout: u32) -> R<()> {
    redis::cmd("SET")
        .arg(LAYOUT_KEY)
        .arg(layout)
        .query_async::<()>(conn)
        .await
        .map_err(redis_err)
}

/// At connect: stamps a fresh store with [`REDIS_LAYOUT`]; refuses any other layout.
pub(crate) async fn check(conn: &mut Conn, at: &StoreAt) -> R<()> {
    let found = match recorded(conn).await? {
        Recorded::Empty => stamp(conn, REDIS_LAYOUT).await?,
        Recorded::Unversioned => UNVERSIONED_LAYOUT,
        Recorded::Layout(n) => n,
    };
    match LayoutError::check(at, found, REDIS_LAYOUT) {
        None => Ok(()),
        Some(e) => Err(e.into()),
    }
}
