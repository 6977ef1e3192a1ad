//! What API keys use: how many runs each has executing on this instance (for its concurrent-run
//! limit), and the tokens its runs consumed, added up in memory and written to the store at
//! every sweep (and at shutdown), so that recording usage costs a run no write of its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::protocol::response::Usage;
use crate::store::UsageRow;
use crate::time::UnixMillis;

/// Runs executing here, per API key.
#[derive(Default)]
pub(super) struct KeyRuns {
    running: Mutex<HashMap<String, u32>>,
}

/// One executing run of a key: counted until dropped.
pub(super) struct KeyRun {
    runs: Arc<KeyRuns>,
    key_id: String,
}

impl KeyRuns {
    /// How many runs of the key execute here.
    pub fn count(&self, key_id: &str) -> u32 {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.get(key_id).copied().unwrap_or(0)
    }

    /// Counts a run of the key until the returned guard is dropped.
    pub fn enter(runs: &Arc<KeyRuns>, key_id: &str) -> KeyRun {
        let mut running = runs.running.lock().unwrap_or_else(|e| e.into_inner());
        *running.entry(key_id.to_string()).or_insert(0) += 1;
        KeyRun {
            runs: runs.clone(),
            key_id: key_id.to_string(),
        }
    }
}

impl Drop for KeyRun {
    fn drop(&mut self) {
        let mut running = self.runs.running.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = running.get_mut(&self.key_id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                running.remove(&self.key_id);
            }
        }
    }
}

/// Token usage not yet written, by tenant, key, model and day.
#[derive(Default)]
pub(super) struct UsageMeter {
    rows: Mutex<HashMap<(String, String, String, String), UsageRow>>,
}

impl UsageMeter {
    /// Adds what one execution of a run used (a run that paused and resumed adds each part).
    pub fn add(&self, tenant_id: &str, key_id: &str, model: &str, used: &Usage) {
        let day = UnixMillis::now().utc_day();
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        let key = (
            tenant_id.to_string(),
            key_id.to_string(),
            model.to_string(),
            day.clone(),
        );
        let row = rows.entry(key).or_insert_with(|| UsageRow {
            tenant_id: tenant_id.to_string(),
            key_id: key_id.to_string(),
            model: model.to_string(),
            day,
            ..UsageRow::default()
        });
        row.runs += 1;
        row.input_tokens += used.input_tokens as i64;
        row.cached_tokens += used.input_tokens_details.cached_tokens as i64;
        row.output_tokens += used.output_tokens as i64;
    }

    /// The rows added up so far, leaving none.
    pub fn take(&self) -> Vec<UsageRow> {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        rows.drain().map(|(_, row)| row).collect()
    }

    /// Puts back rows that could not be written.
    pub fn restore(&self, failed: Vec<UsageRow>) {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        for row in failed {
            let key = (
                row.tenant_id.clone(),
                row.key_id.clone(),
                row.model.clone(),
                row.day.clone(),
            );
            let into = rows.entry(key).or_insert_with(|| UsageRow {
                runs: 0,
                input_tokens: 0,
                cached_tokens: 0,
                output_tokens: 0,
                ..row.clone()
            });
            into.runs += row.runs;
            into.input_tokens += row.input_tokens;
            into.cached_tokens += row.cached_tokens;
            into.output_tokens += row.output_tokens;
        }
    }
}
