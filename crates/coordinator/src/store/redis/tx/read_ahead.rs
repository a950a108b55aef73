//! Reads fetched ahead in one pipeline: the tasks, trial records and blocks of the units a
//! ready-queue scan returns ([`RedisTx::read_ahead_units`]), and everything a batch of
//! completions will look up ([`RedisTx::prefetch_tokens`]).

use lanes_common::ids::TrialId;
use lanes_common::schedule::{block_name, from_position_key, phase_of};
use lanes_common::spec::Task;

use super::{R, RedisTx, fold, parse, redis_err, token_field, unit_trials};
use crate::store::model::{Meta, Unit};

impl RedisTx {
    /// Reads the fields not cached yet of several hashes in one pipeline, into the cache.
    pub(super) async fn read_ahead(&mut self, wanted: Vec<(String, Vec<String>)>) -> R<()> {
        let mut pipe = redis::pipe();
        let mut asked: Vec<(String, Vec<String>)> = Vec::new();
        for (key, mut fields) in wanted {
            // Most fields are cached once a campaign runs: drop those first, in place.
            fields.retain(|f| self.cache.field(&key, f).is_none());
            fields.sort_unstable();
            fields.dedup();
            if fields.is_empty() {
                continue;
            }
            pipe.cmd("HMGET").arg(&key).arg(&fields);
            asked.push((key, fields));
        }
        if asked.is_empty() {
            return Ok(());
        }
        let got: Vec<Vec<Option<Vec<u8>>>> =
            pipe.query_async(&mut self.conn).await.map_err(redis_err)?;
        for ((key, fields), values) in asked.into_iter().zip(got) {
            for (f, v) in fields.into_iter().zip(values) {
                self.cache.put_field(&key, f, v);
            }
        }
        Ok(())
    }

    /// The meta as this transaction sees it, if it was read already.
    pub(super) fn meta_seen(&self) -> Option<&Meta> {
        self.writes
            .meta
            .as_deref()
            .or_else(|| self.cache.meta.as_ref()?.as_ref())
    }

    /// Fetches ahead what claiming the units at `keys` of a queue reads: their tasks, then
    /// their trials' states and leases.
    pub(crate) async fn read_ahead_units(&mut self, unit: Unit, keys: &[u64]) -> R<()> {
        let Some(meta) = self.meta_seen().cloned() else {
            return Ok(());
        };
        let tasks_key = self.keys.tasks();
        let positions: Vec<String> = keys
            .iter()
            .map(|k| from_position_key(*k).1.to_string())
            .collect();
        self.read_ahead(vec![(tasks_key.clone(), positions)])
            .await?;
        let mut ids = Vec::new();
        let mut blocks = Vec::new();
        for key in keys {
            let (phase, tp, _, _) = from_position_key(*key);
            let task_id = match self.cache.task(tp) {
                Some(t) => t.id.clone(),
                None => {
                    let Some(Some(bytes)) = self.cache.field(&tasks_key, &tp.to_string()) else {
                        continue;
                    };
                    let task: Task = parse(bytes)?;
                    let id = task.id.clone();
                    self.remember_task(tp, task);
                    id
                }
            };
            ids.extend(unit_trials(&meta, unit, *key, &task_id).map(|t| t.to_string()));
            // Its completion adds to its block.
            blocks.push(block_name(phase, &task_id).to_string());
        }
        self.read_ahead(vec![
            (self.keys.trials(), ids.clone()),
            (self.keys.blocks(), blocks),
        ])
        .await?;
        // Trials written before layout 6 keep their leases apart.
        let apart = self.apart(ids.iter().map(String::as_str));
        self.read_ahead(vec![(self.keys.leases(), apart)]).await
    }

    /// Which of these trials' cached fields keep their lease and token records apart (written
    /// before layout 6).
    pub(super) fn apart<'a>(&self, ids: impl Iterator<Item = &'a str>) -> Vec<String> {
        let key = self.keys.trials();
        ids.filter(
            |id| matches!(self.cache.field(&key, id), Some(Some(bytes)) if fold::apart(bytes)),
        )
        .map(str::to_owned)
        .collect()
    }

    /// Caches a committed task, parsed, and its position by id (a task and its position never
    /// change once committed), so completions of its trials need not look it up.
    pub(super) fn remember_task(&mut self, pos: u32, task: Task) {
        let pos_key = self.keys.task_pos();
        if self.cache.field(&pos_key, task.id.as_str()).is_none() {
            self.cache.put_field(
                &pos_key,
                task.id.to_string(),
                Some(pos.to_string().into_bytes()),
            );
        }
        self.cache.put_task(pos, task);
    }

    /// Fetches ahead, in two pipelines, what completing or renewing these tokens reads: the
    /// trials' records and task positions, then their tasks and blocks (and the leases and
    /// token records of trials written before layout 6, which keep them apart).
    pub(crate) async fn prefetch_tokens(&mut self, tokens: &[(TrialId, u32)]) -> R<()> {
        let mut trials = Vec::new();
        let mut task_ids = Vec::new();
        for (tid, _) in tokens {
            let Ok((task, _, _)) = TrialId::parse(tid.as_str()) else {
                continue;
            };
            trials.push(tid.to_string());
            task_ids.push(task.to_string());
        }
        self.read_ahead(vec![
            (self.keys.trials(), trials),
            (self.keys.task_pos(), task_ids.clone()),
        ])
        .await?;
        let Some(meta) = self.meta_seen() else {
            return Ok(());
        };
        let pos_key = self.keys.task_pos();
        let mut positions = Vec::new();
        let mut blocks = Vec::new();
        for (tid, _) in tokens {
            let Ok((task, run, _)) = TrialId::parse(tid.as_str()) else {
                continue;
            };
            if let Some(Some(p)) = self.cache.field(&pos_key, task.as_str()) {
                positions.push(String::from_utf8_lossy(p).into_owned());
            }
            blocks.push(block_name(phase_of(&meta.spec, run), &task).to_string());
        }
        let apart = self.apart(tokens.iter().map(|(t, _)| t.as_str()));
        let mut records = Vec::new();
        for (tid, attempt) in tokens {
            if apart.iter().any(|a| a == tid.as_str()) {
                // A completion looks for the counted attempt among all of the trial's tokens.
                records.extend((1..=*attempt).map(|a| token_field(tid.as_str(), a)));
            }
        }
        self.read_ahead(vec![
            (self.keys.tasks(), positions),
            (self.keys.blocks(), blocks),
            (self.keys.leases(), apart),
            (self.keys.tokens(), records),
        ])
        .await
    }
}
