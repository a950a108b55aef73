//! The campaign meta in Redis, stored in parts so that a commit writes only what changed:
//!
//! - `meta`: the meta as JSON without the parts below (state, counters, quotas, pauses,
//!   amendments: a few hundred bytes);
//! - `spec`: the campaign spec as JSON, written only when a submit changes it;
//! - `stat:cost:<arm>`, `stat:wall:<arm>`, `stat:block_walls`: the capped lists of recent
//!   costs, wall times and finished-block walls, as lists of decimal numbers, to which a
//!   commit appends (`RPUSH`, then `LTRIM` to the length the engine keeps);
//! - `seen`: a hash of lane -> last seen (epoch ms).
//!
//! The engine still reads and writes one `Meta`; reads assemble it from the parts, and a
//! write is turned into part writes against the meta as committed (the replica cache's, at the
//! version the commit checks), so an append is exact.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use lanes_common::ids::ArmId;
use lanes_common::row::{QuotaReading, Status};
use lanes_common::state::{CampaignState, StopMode, StopReason};
use lanes_common::utc::EpochMs;

use super::conn::Conn;
use super::keys::Keys;
use super::redis_err;
use crate::store::api::{Amendment, StoreError};
use crate::store::model::Meta;
use crate::store::tx::R;

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("campaign meta: {e}"))
}

/// A write of one part.
#[derive(Debug, PartialEq)]
pub(crate) enum Part {
    Set(String, Vec<u8>),
    /// Appends `append` to the list, then keeps its last `keep` items (none: delete it).
    List {
        key: String,
        append: Vec<f64>,
        keep: usize,
    },
    /// A `seen` field; `None` deletes it.
    Seen(String, Option<EpochMs>),
}

/// Reads the parts (two pipelines: the arms' lists need the spec) and assembles the meta.
pub(crate) async fn read(conn: &mut Conn, keys: &Keys) -> R<Option<Meta>> {
    type Heads = (
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        HashMap<String, EpochMs>,
        Vec<f64>,
    );
    let (rest, spec, seen, blocks): Heads = redis::pipe()
        .cmd("GET")
        .arg(keys.meta())
        .cmd("GET")
        .arg(keys.spec())
        .cmd("HGETALL")
        .arg(keys.seen())
        .cmd("LRANGE")
        .arg(keys.block_walls())
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .map_err(redis_err)?;
    let Some(rest) = rest else {
        return Ok(None);
    };
    let mut meta: serde_json::Map<String, Value> =
        serde_json::from_slice(&rest).map_err(corrupt)?;
    let spec: Value =
        serde_json::from_slice(&spec.ok_or_else(|| corrupt("no spec"))?).map_err(corrupt)?;
    let arms: Vec<ArmId> = spec
        .get("arms")
        .and_then(Value::as_array)
        .map(|arms| {
            arms.iter()
                .filter_map(|a| a.get("id").cloned())
                .map(serde_json::from_value)
                .collect::<Result<_, _>>()
        })
        .transpose()
        .map_err(corrupt)?
        .unwrap_or_default();
    let mut pipe = redis::pipe();
    for arm in &arms {
        pipe.cmd("LRANGE").arg(keys.arm_costs(arm)).arg(0).arg(-1);
        pipe.cmd("LRANGE").arg(keys.arm_walls(arm)).arg(0).arg(-1);
    }
    let lists: Vec<Vec<f64>> = if arms.is_empty() {
        Vec::new()
    } else {
        pipe.query_async(conn).await.map_err(redis_err)?
    };
    let mut costs = BTreeMap::new();
    let mut walls = BTreeMap::new();
    for (arm, pair) in arms.iter().zip(lists.chunks(2)) {
        if !pair[0].is_empty() {
            costs.insert(arm.clone(), pair[0].clone());
        }
        if !pair[1].is_empty() {
            walls.insert(arm.clone(), pair[1].clone());
        }
    }
    let seen: BTreeMap<String, EpochMs> = seen.into_iter().collect();
    meta.insert("spec".into(), spec);
    meta.insert("arm_costs".into(), to_value(&costs)?);
    meta.insert("arm_walls".into(), to_value(&walls)?);
    meta.insert("finished_block_walls".into(), to_value(&blocks)?);
    meta.insert("lanes_seen".into(), to_value(&seen)?);
    serde_json::from_value(Value::Object(meta))
        .map(Some)
        .map_err(corrupt)
}

fn to_value<T: serde::Serialize>(v: &T) -> R<Value> {
    serde_json::to_value(v).map_err(|e| StoreError::Backend(e.to_string()))
}

/// The `meta` key's value: the meta's fields but those stored elsewhere, with
/// the names and encodings of `Meta`'s own serialization.
#[derive(serde::Serialize)]
struct Rest<'a> {
    spec_hash: &'a String,
    amendments: &'a Vec<Amendment>,
    n_tasks: u32,
    trials_total: u64,
    phase1_total: u64,
    blocks_total: u64,
    state: CampaignState,
    stop_reason: Option<StopReason>,
    stop_mode: Option<StopMode>,
    next_seq: u64,
    next_event: u64,
    spend_usd: f64,
    reserved_usd: f64,
    leases_open: u64,
    finals: u64,
    phase1_finals: u64,
    counted: u64,
    excluded: u64,
    not_started: u64,
    blocks_complete: u64,
    rows_by_status: &'a BTreeMap<Status, u64>,
    quotas: &'a BTreeMap<String, QuotaReading>,
    paused_until: &'a BTreeMap<String, EpochMs>,
    created_ms: EpochMs,
}

fn rest(meta: &Meta) -> R<Vec<u8>> {
    // Every field named, none elided: a field added to `Meta` fails to compile here until it
    // is stored somewhere.
    let Meta {
        spec: _,
        arm_costs: _,
        arm_walls: _,
        finished_block_walls: _,
        lanes_seen: _,
        spec_hash,
        amendments,
        n_tasks,
        trials_total,
        phase1_total,
        blocks_total,
        state,
        stop_reason,
        stop_mode,
        next_seq,
        next_event,
        spend_usd,
        reserved_usd,
        leases_open,
        finals,
        phase1_finals,
        counted,
        excluded,
        not_started,
        blocks_complete,
        rows_by_status,
        quotas,
        paused_until,
        created_ms,
    } = meta;
    serde_json::to_vec(&Rest {
        spec_hash,
        amendments,
        n_tasks: *n_tasks,
        trials_total: *trials_total,
        phase1_total: *phase1_total,
        blocks_total: *blocks_total,
        state: *state,
        stop_reason: *stop_reason,
        stop_mode: *stop_mode,
        next_seq: *next_seq,
        next_event: *next_event,
        spend_usd: *spend_usd,
        reserved_usd: *reserved_usd,
        leases_open: *leases_open,
        finals: *finals,
        phase1_finals: *phase1_finals,
        counted: *counted,
        excluded: *excluded,
        not_started: *not_started,
        blocks_complete: *blocks_complete,
        rows_by_status,
        quotas,
        paused_until,
        created_ms: *created_ms,
    })
    .map_err(|e| StoreError::Backend(e.to_string()))
}

/// The write of one capped list from `old` (as committed) to `new`.
fn list(key: String, old: &[f64], new: &[f64]) -> Option<Part> {
    if old == new {
        return None;
    }
    // The fewest items appended that make `new`: its head must be the tail of `old`. All
    // of `new` always works (then the trim drops every old item).
    let t = (0..=new.len())
        .find(|&t| {
            let head = &new[..new.len() - t];
            head.len() <= old.len() && old[old.len() - head.len()..] == *head
        })
        .unwrap_or(new.len());
    Some(Part::List {
        key,
        append: new[new.len() - t..].to_vec(),
        keep: new.len(),
    })
}

/// The part writes that turn the stored meta `old` (as committed; `None`: unknown or absent)
/// into `new`.
pub(crate) fn parts(keys: &Keys, old: Option<&Meta>, new: &Meta) -> R<Vec<Part>> {
    let mut out = vec![Part::Set(keys.meta(), rest(new)?)];
    if old.is_none_or(|o| o.spec != new.spec) {
        let spec = serde_json::to_vec(&new.spec).map_err(|e| StoreError::Backend(e.to_string()))?;
        out.push(Part::Set(keys.spec(), spec));
    }
    let empty = BTreeMap::new();
    let lists = [
        (
            old.map_or(&empty, |o| &o.arm_costs),
            &new.arm_costs,
            Keys::arm_costs as fn(&Keys, &ArmId) -> String,
        ),
        (
            old.map_or(&empty, |o| &o.arm_walls),
            &new.arm_walls,
            Keys::arm_walls,
        ),
    ];
    for (was, now, key) in lists {
        for arm in was.keys().chain(now.keys()) {
            let (a, b) = (
                was.get(arm).map_or(&[][..], Vec::as_slice),
                now.get(arm).map_or(&[][..], Vec::as_slice),
            );
            // An arm in both maps is seen twice: its write is the same both times.
            if let Some(p) = list(key(keys, arm), a, b)
                && !out.contains(&p)
            {
                out.push(p);
            }
        }
    }
    let was = old.map_or(&[][..], |o| o.finished_block_walls.as_slice());
    if let Some(p) = list(keys.block_walls(), was, &new.finished_block_walls) {
        out.push(p);
    }
    // Most commits leave the lanes seen alone, and a fleet's thousand lanes made diffing
    // them the largest cost of building a commit.
    if old.is_some_and(|o| o.lanes_seen.is_same(&new.lanes_seen)) {
        return Ok(out);
    }
    let no_lanes = BTreeMap::new();
    seen(
        old.map_or(&no_lanes, |o| &*o.lanes_seen),
        &new.lanes_seen,
        &mut out,
    );
    Ok(out)
}

/// The writes of the lanes whose last-seen time differs between `was` and `now`: both maps
/// walked side by side in lane order, one comparison per lane rather than one search.
fn seen(was: &BTreeMap<String, EpochMs>, now: &BTreeMap<String, EpochMs>, out: &mut Vec<Part>) {
    use std::cmp::Ordering::*;
    let (mut was, mut now) = (was.iter().peekable(), now.iter().peekable());
    loop {
        let order = match (was.peek(), now.peek()) {
            (None, None) => return,
            (Some(_), None) => Less,
            (None, Some(_)) => Greater,
            (Some((a, _)), Some((b, _))) => a.cmp(b),
        };
        match order {
            Less => {
                let (lane, _) = was.next().expect("peeked");
                out.push(Part::Seen(lane.clone(), None));
            }
            Greater => {
                let (lane, at) = now.next().expect("peeked");
                out.push(Part::Seen(lane.clone(), Some(*at)));
            }
            Equal => {
                let ((_, a), (lane, at)) =
                    (was.next().expect("peeked"), now.next().expect("peeked"));
                if a != at {
                    out.push(Part::Seen(lane.clone(), Some(*at)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::model::Shared;

    fn append(p: Option<Part>) -> Option<(Vec<f64>, usize)> {
        match p? {
            Part::List { append, keep, .. } => Some((append, keep)),
            other => panic!("{other:?}"),
        }
    }

    /// The parts hold the whole meta: `rest` plus the split fields deserialize back into
    /// the same `Meta` (every field set to something but its default).
    #[test]
    fn the_parts_hold_the_whole_meta() {
        let text = r#"id = "m"
phase1_runs = 1
schedule_seed = 1
[[arms]]
id = "a"
[driver]
sim = {}
[tasks]
items = [{ id = "t" }]
"#;
        let campaign = lanes_common::spec::load_str(
            text,
            std::path::Path::new("m.toml"),
            std::path::Path::new("."),
        )
        .expect("a campaign");
        let arm = ArmId::new("a").expect("an arm");
        let meta = Meta {
            spec: Shared::new(campaign.spec),
            spec_hash: "h".into(),
            amendments: vec![Amendment {
                at_ms: 1,
                spec_hash: "g".into(),
                added_tasks: 2,
                added_trials: 3,
                requeue: None,
            }],
            n_tasks: 4,
            trials_total: 5,
            phase1_total: 6,
            blocks_total: 7,
            state: CampaignState::Stopping,
            stop_reason: Some(StopReason::Budget),
            stop_mode: Some(StopMode::Cancel),
            next_seq: 8,
            next_event: 9,
            spend_usd: 1.5,
            reserved_usd: 0.25,
            leases_open: 10,
            finals: 11,
            phase1_finals: 12,
            counted: 13,
            excluded: 14,
            not_started: 15,
            blocks_complete: 16,
            rows_by_status: BTreeMap::from([(Status::Completed, 17)]),
            quotas: BTreeMap::from([(
                "p".to_owned(),
                QuotaReading {
                    provider: "p".into(),
                    utilisation: 0.5,
                    reset_epoch: Some(18),
                },
            )]),
            paused_until: BTreeMap::from([("p".to_owned(), 19)]),
            arm_costs: Shared::new(BTreeMap::from([(arm.clone(), vec![0.1, 0.2])])),
            arm_walls: Shared::new(BTreeMap::from([(arm, vec![3.0])])),
            finished_block_walls: Shared::new(vec![4.0, 5.0]),
            lanes_seen: Shared::new(BTreeMap::from([("l".to_owned(), 20)])),
            created_ms: 21,
        };
        let mut m: serde_json::Map<String, Value> =
            serde_json::from_slice(&rest(&meta).expect("rest")).expect("an object");
        m.insert("spec".into(), to_value(&meta.spec).unwrap());
        m.insert("arm_costs".into(), to_value(&meta.arm_costs).unwrap());
        m.insert("arm_walls".into(), to_value(&meta.arm_walls).unwrap());
        m.insert(
            "finished_block_walls".into(),
            to_value(&meta.finished_block_walls).unwrap(),
        );
        m.insert("lanes_seen".into(), to_value(&meta.lanes_seen).unwrap());
        let back: Meta = serde_json::from_value(Value::Object(m)).expect("a meta");
        assert_eq!(back, meta);
    }

    #[test]
    fn the_lanes_seen_are_written_as_what_changed() {
        let map = |v: &[(&str, EpochMs)]| -> BTreeMap<String, EpochMs> {
            v.iter().map(|(l, t)| ((*l).to_owned(), *t)).collect()
        };
        let mut out = Vec::new();
        seen(
            &map(&[("a", 1), ("b", 2), ("d", 4), ("f", 6)]),
            &map(&[("b", 3), ("c", 5), ("d", 4), ("e", 7)]),
            &mut out,
        );
        let lane = |l: &str| l.to_owned();
        assert_eq!(
            out,
            vec![
                Part::Seen(lane("a"), None),
                Part::Seen(lane("b"), Some(3)),
                Part::Seen(lane("c"), Some(5)),
                Part::Seen(lane("e"), Some(7)),
                Part::Seen(lane("f"), None),
            ]
        );
        out.clear();
        seen(&map(&[]), &map(&[("a", 1)]), &mut out);
        seen(&map(&[("z", 1)]), &map(&[]), &mut out);
        assert_eq!(
            out,
            vec![Part::Seen(lane("a"), Some(1)), Part::Seen(lane("z"), None)]
        );
    }

    #[test]
    fn a_capped_list_is_written_as_its_appended_tail() {
        let k = || "k".to_owned();
        assert_eq!(append(list(k(), &[1.0, 2.0], &[1.0, 2.0])), None);
        assert_eq!(
            append(list(k(), &[1.0, 2.0], &[1.0, 2.0, 3.0])),
            Some((vec![3.0], 3))
        );
        // At the cap: the head moved on by what was appended.
        assert_eq!(
            append(list(k(), &[1.0, 2.0, 3.0], &[3.0, 4.0, 5.0])),
            Some((vec![4.0, 5.0], 3))
        );
        // Equal values: any reading gives the same list, the shortest is taken.
        assert_eq!(append(list(k(), &[7.0; 3], &[7.0; 3])), None);
        assert_eq!(append(list(k(), &[], &[1.0])), Some((vec![1.0], 1)));
        assert_eq!(
            append(list(k(), &[1.0, 2.0], &[9.0])),
            Some((vec![9.0], 1)),
            "9 appended, the rest trimmed"
        );
        assert_eq!(append(list(k(), &[1.0], &[])), Some((vec![], 0)));
    }
}
