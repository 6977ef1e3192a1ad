//! The `RunStore` contract, run against SQLite always and PostgreSQL when `TEST_DATABASE_URL`
//! is set (CI sets it). Ids are unique per test, so tests share one PostgreSQL database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::json;
use switchyard::protocol::ids;
use switchyard::protocol::items::{ContentPart, Item, Message, Role};
use switchyard::protocol::response::{ResponseObject, ResponseStatus};
use switchyard::protocol::transcript::Entry;
use switchyard::store::{
    self, EventRecord, ItemPage, NewRun, RunState, RunStore, RunUpdate, StoreError,
};
use tempfile::TempDir;

struct Backend {
    store: Arc<dyn RunStore>,
    _dir: Option<TempDir>,
}

async fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/contract.db", dir.path().display());
    let mut list = vec![Backend {
        store: store::connect(&url, 4).await.unwrap(),
        _dir: Some(dir),
    }];
    if let Ok(url) = std::env::var("TEST_DATABASE_URL") {
        list.push(Backend {
            store: store::connect(&url, 4).await.unwrap(),
            _dir: None,
        });
    }
    list
}

fn body(id: &str) -> ResponseObject {
    serde_json::from_value(json!({
        "id": id, "object": "response", "created_at": 1, "completed_at": null,
        "status": "in_progress", "error": null, "incomplete_details": null, "instructions": null,
        "model": "m", "output": [], "parallel_tool_calls": true, "previous_response_id": null,
        "tools": [], "tool_choice": "auto", "truncation": "disabled",
        "text": {"format": {"type": "text"}}, "reasoning": {"effort": null, "summary": null},
        "temperature": 0.7, "top_p": null, "presence_penalty": null, "frequency_penalty": null,
        "top_logprobs": 0, "max_output_tokens": null, "max_tool_calls": null, "store": true,
        "background": false, "service_tier": "default", "metadata": {"k": "v"},
        "safety_identifier": null, "prompt_cache_key": null, "user": null, "usage": null,
        "required_action": null
    }))
    .unwrap()
}

fn message(text: &str) -> Item {
    let mut item = Item::Message(Message {
        id: String::new(),
        role: Role::User,
        content: vec![ContentPart::InputText { text: text.into() }],
        status: None,
    });
    item.normalise();
    item
}

fn new_run(id: &str, items: usize, owner: &str, lease_expires_at: i64) -> NewRun {
    NewRun {
        tenant_id: store::DEFAULT_TENANT.into(),
        state: RunState::InProgress,
        body: body(id),
        input_items: (0..items).map(|i| message(&format!("m{i}"))).collect(),
        lease_owner: Some(owner.into()),
        lease_expires_at: Some(lease_expires_at),
        now_ms: 1_000,
        initial_events: vec![],
        idempotency: None,
    }
}

fn update<'a>(body: &'a ResponseObject, transcript: &'a [Entry], now_ms: i64) -> RunUpdate<'a> {
    RunUpdate {
        body,
        transcript,
        lease_owner: None,
        lease_expires_at: None,
        expires_at: None,
        append_input: &[],
        expected_owner: None,
        now_ms,
    }
}

fn event(id: &str, n: u64) -> EventRecord {
    EventRecord {
        response_id: Arc::from(id),
        tenant_id: Arc::from(store::DEFAULT_TENANT),
        sequence_number: n,
        event_type: Cow::Borrowed("response.output_text.delta"),
        data: Arc::from(format!(
            r#"{{"type":"response.output_text.delta","sequence_number":{n}}}"#
        )),
        created_at: 5,
        ends_run: false,
    }
}

#[tokio::test]
async fn a_run_is_stored_with_its_input_items_and_read_back_unchanged() {
    for b in backends().await {
        let id = ids::new(ids::RESPONSE);
        let run = new_run(&id, 3, "a", 10);
        b.store.insert_run(&run).await.unwrap();
        let stored = b.store.get_run(store::DEFAULT_TENANT, &id).await.unwrap();
        assert_eq!(stored.state, RunState::InProgress, "{}", b.store.backend());
        assert_eq!(stored.body, run.body);
        assert_eq!(stored.lease_owner.as_deref(), Some("a"));
        assert_eq!(stored.lease_expires_at, Some(10));
        assert_eq!(
            b.store
                .input_items(store::DEFAULT_TENANT, &id)
                .await
                .unwrap(),
            run.input_items
        );
        assert!(matches!(
            b.store.get_run("other-tenant", &id).await,
            Err(StoreError::NotFound)
        ));
        assert!(matches!(
            b.store.get_run(store::DEFAULT_TENANT, "resp_none").await,
            Err(StoreError::NotFound)
        ));
        b.store.ping().await.unwrap();
    }
}

#[tokio::test]
async fn a_transition_is_a_compare_and_set_that_reports_the_state_it_found() {
    for b in backends().await {
        let id = ids::new(ids::RESPONSE);
        b.store.insert_run(&new_run(&id, 0, "a", 10)).await.unwrap();
        let mut done = body(&id);
        done.status = ResponseStatus::Completed;
        b.store
            .transition(
                &id,
                RunState::InProgress,
                RunState::Completed,
                &update(&done, &[Entry::Item(message("seen"))], 2_000),
            )
            .await
            .unwrap();
        let stored = b.store.get_run(store::DEFAULT_TENANT, &id).await.unwrap();
        assert_eq!(stored.state, RunState::Completed);
        assert_eq!(stored.body.status, ResponseStatus::Completed);
        assert_eq!(stored.updated_at, 2_000);
        assert_eq!(
            stored.transcript.len(),
            1,
            "the transcript is stored with the state"
        );
        let again = b
            .store
            .transition(
                &id,
                RunState::InProgress,
                RunState::Failed,
                &update(&done, &[], 3_000),
            )
            .await;
        assert!(
            matches!(
                again,
                Err(StoreError::Conflict {
                    actual: RunState::Completed
                })
            ),
            "{again:?}"
        );
        let missing = b
            .store
            .transition(
                "resp_none",
                RunState::InProgress,
                RunState::Failed,
                &update(&done, &[], 3_000),
            )
            .await;
        assert!(matches!(missing, Err(StoreError::NotFound)));
    }
}

#[tokio::test]
async fn of_many_concurrent_transitions_from_one_state_exactly_one_wins() {
    for b in backends().await {
        let id = ids::new(ids::RESPONSE);
        b.store.insert_run(&new_run(&id, 0, "a", 10)).await.unwrap();
        let attempts = (0..8).map(|i| {
            let store = b.store.clone();
            let id = id.clone();
            tokio::spawn(async move {
                let to = if i % 2 == 0 {
                    RunState::Completed
                } else {
                    RunState::Cancelled
                };
                store
                    .transition(&id, RunState::InProgress, to, &update(&body(&id), &[], 1))
                    .await
            })
        });
        let results = futures_util::future::join_all(attempts).await;
        let wins = results.iter().filter(|r| matches!(r, Ok(Ok(())))).count();
        assert_eq!(wins, 1, "{}", b.store.backend());
        // Every loser is told the run moved on; none fails otherwise.
        assert!(
            results
                .iter()
                .all(|r| matches!(r, Ok(Ok(()) | Err(StoreError::Conflict { .. }))))
        );
    }
}

#[tokio::test]
async fn events_are_appended_in_batches_and_read_in_order_after_any_point() {
    for b in backends().await {
        let id = ids::new(ids::RESPONSE);
        let other = ids::new(ids::RESPONSE);
        b.store.insert_run(&new_run(&id, 0, "a", 10)).await.unwrap();
        // One batch mixing two runs, larger than one INSERT chunk.
        let mut batch: Vec<EventRecord> = (0..1500).map(|n| event(&id, n)).collect();
        batch.extend((0..3).map(|n| event(&other, n)));
        b.store.append_events(&batch).await.unwrap();

        let first = b.store.events_after(&id, None, 10).await.unwrap();
        assert_eq!(
            first.iter().map(|e| e.sequence_number).collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
        assert_eq!(first[3], batch[3], "an event reads back exactly as written");
        let tail = b.store.events_after(&id, Some(1495), 100).await.unwrap();
        assert_eq!(
            tail.iter().map(|e| e.sequence_number).collect::<Vec<_>>(),
            vec![1496, 1497, 1498, 1499]
        );
        assert_eq!(b.store.last_sequence_number(&id).await.unwrap(), Some(1499));
        assert_eq!(
            b.store.last_sequence_number("resp_none").await.unwrap(),
            None
        );

        // The log is append-only: a sequence number cannot be written twice.
        assert!(b.store.append_events(&[event(&id, 7)]).await.is_err());
    }
}

#[tokio::test]
async fn input_items_page_forwards_and_backwards() {
    for b in backends().await {
        let id = ids::new(ids::RESPONSE);
        let run = new_run(&id, 5, "a", 10);
        b.store.insert_run(&run).await.unwrap();
        let page = |limit, descending, after: Option<&Item>| ItemPage {
            limit,
            descending,
            after: after.map(|i| i.id().to_string()),
        };
        let t = store::DEFAULT_TENANT;
        let (items, more) = b
            .store
            .list_input_items(t, &id, &page(2, false, None))
            .await
            .unwrap();
        assert_eq!(items, run.input_items[..2]);
        assert!(more);
        let (items, more) = b
            .store
            .list_input_items(t, &id, &page(10, false, Some(&run.input_items[2])))
            .await
            .unwrap();
        assert_eq!(items, run.input_items[3..]);
        assert!(!more);
        let (items, more) = b
            .store
            .list_input_items(t, &id, &page(2, true, Some(&run.input_items[2])))
            .await
            .unwrap();
        assert_eq!(
            items,
            vec![run.input_items[1].clone(), run.input_items[0].clone()]
        );
        assert!(!more);
        let unknown = ItemPage {
            limit: 2,
            descending: true,
            after: Some("msg_none".into()),
        };
        assert!(matches!(
            b.store.list_input_items(t, &id, &unknown).await,
            Err(StoreError::NotFound)
        ));
    }
}

#[tokio::test]
async fn deleting_a_run_removes_its_items_and_events() {
    for b in backends().await {
        let id = ids::new(ids::RESPONSE);
        b.store.insert_run(&new_run(&id, 2, "a", 10)).await.unwrap();
        b.store
            .append_events(&[event(&id, 0), event(&id, 1)])
            .await
            .unwrap();
        b.store
            .delete_run(store::DEFAULT_TENANT, &id)
            .await
            .unwrap();
        assert!(matches!(
            b.store.get_run(store::DEFAULT_TENANT, &id).await,
            Err(StoreError::NotFound)
        ));
        assert!(
            b.store
                .events_after(&id, None, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            b.store
                .input_items(store::DEFAULT_TENANT, &id)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(matches!(
            b.store.delete_run(store::DEFAULT_TENANT, &id).await,
            Err(StoreError::NotFound)
        ));
    }
}

#[tokio::test]
async fn runs_that_stopped_before_the_window_are_pruned_in_batches_and_no_others() {
    for b in backends().await {
        // Negative times: the PostgreSQL database is shared with the other tests, whose runs
        // stop at small positive times and must not be pruned here.
        let mut old = Vec::new();
        for i in 0..250 {
            let id = ids::new(ids::RESPONSE);
            let mut run = new_run(&id, 1, "a", 10);
            run.now_ms = -10_000 + i;
            b.store.insert_run(&run).await.unwrap();
            b.store.append_events(&[event(&id, 0)]).await.unwrap();
            let to = if i % 2 == 0 {
                RunState::Completed
            } else {
                RunState::Failed
            };
            b.store
                .transition(
                    &id,
                    RunState::InProgress,
                    to,
                    &update(&body(&id), &[], -5_000 + i),
                )
                .await
                .unwrap();
            old.push(id);
        }
        // Active runs are kept however old; a run that stopped after the window too.
        let active = ids::new(ids::RESPONSE);
        let mut run = new_run(&active, 1, "a", 10);
        run.now_ms = -20_000;
        b.store.insert_run(&run).await.unwrap();
        let recent = ids::new(ids::RESPONSE);
        let mut run = new_run(&recent, 1, "a", 10);
        run.now_ms = -20_000;
        b.store.insert_run(&run).await.unwrap();
        b.store.append_events(&[event(&recent, 0)]).await.unwrap();
        let to = RunState::Completed;
        b.store
            .transition(
                &recent,
                RunState::InProgress,
                to,
                &update(&body(&recent), &[], 0),
            )
            .await
            .unwrap();

        let (runs, _) = b.store.prune(0, i64::MIN).await.unwrap();
        assert_eq!(runs, 250, "{}", b.store.backend());
        for id in &old {
            assert!(matches!(
                b.store.get_run(store::DEFAULT_TENANT, id).await,
                Err(StoreError::NotFound)
            ));
            assert!(b.store.events_after(id, None, 10).await.unwrap().is_empty());
            let items = b.store.input_items(store::DEFAULT_TENANT, id).await;
            assert!(items.unwrap().is_empty());
        }
        for id in [&active, &recent] {
            b.store.get_run(store::DEFAULT_TENANT, id).await.unwrap();
            let items = b.store.input_items(store::DEFAULT_TENANT, id).await;
            assert_eq!(items.unwrap().len(), 1);
        }
        assert_eq!(
            b.store.events_after(&recent, None, 10).await.unwrap().len(),
            1
        );
        assert_eq!(b.store.prune(0, i64::MIN).await.unwrap().0, 0);
    }
}

#[tokio::test]
async fn leases_are_renewed_by_their_owner_and_expired_ones_are_found() {
    for b in backends().await {
        let owner = ids::new("inst");
        let mine = ids::new(ids::RESPONSE);
        let dead = ids::new(ids::RESPONSE);
        let finished = ids::new(ids::RESPONSE);
        b.store
            .insert_run(&new_run(&mine, 0, &owner, 100))
            .await
            .unwrap();
        b.store
            .insert_run(&new_run(&dead, 0, "dead", 100))
            .await
            .unwrap();
        b.store
            .insert_run(&new_run(&finished, 0, "dead", 100))
            .await
            .unwrap();
        b.store
            .transition(
                &finished,
                RunState::InProgress,
                RunState::Completed,
                &update(&body(&finished), &[], 1),
            )
            .await
            .unwrap();

        assert_eq!(b.store.renew_leases(&owner, 5_000).await.unwrap(), 1);
        let owned = b
            .store
            .runs_owned_by(&owner, &[RunState::InProgress])
            .await
            .unwrap();
        assert_eq!(
            owned.iter().map(|r| r.body.id.clone()).collect::<Vec<_>>(),
            vec![mine.clone()]
        );
        assert_eq!(owned[0].lease_expires_at, Some(5_000));
        assert!(
            b.store
                .runs_owned_by(&owner, &[RunState::Queued])
                .await
                .unwrap()
                .is_empty()
        );

        let stale: Vec<String> = b
            .store
            .stale_runs(1_000, &owner)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.body.id)
            .collect();
        assert!(
            stale.contains(&dead),
            "an expired lease of another instance is stale"
        );
        assert!(!stale.contains(&mine), "this instance's own runs are not");
        assert!(!stale.contains(&finished), "finished runs are not");
        let stale: Vec<String> = b
            .store
            .stale_runs(50, &owner)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.body.id)
            .collect();
        assert!(!stale.contains(&dead), "a lease still valid is not stale");
    }
}

#[tokio::test]
async fn a_transition_can_append_input_items_and_set_an_expiry_atomically() {
    for b in backends().await {
        let id = ids::new(ids::RESPONSE);
        b.store.insert_run(&new_run(&id, 2, "a", 10)).await.unwrap();
        let paused = body(&id);
        let mut pause = update(&paused, &[], 100);
        pause.expires_at = Some(5_000);
        b.store
            .transition(&id, RunState::InProgress, RunState::RequiresAction, &pause)
            .await
            .unwrap();
        let stored = b.store.get_run(store::DEFAULT_TENANT, &id).await.unwrap();
        assert_eq!(stored.expires_at, Some(5_000));
        assert_eq!(stored.lease_owner, None, "a paused run is held by nobody");

        let overdue: Vec<String> = b
            .store
            .expired_runs(6_000)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.body.id)
            .collect();
        assert!(overdue.contains(&id));
        let early: Vec<String> = b
            .store
            .expired_runs(4_000)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.body.id)
            .collect();
        assert!(!early.contains(&id));

        let outputs = vec![message("output 1"), message("output 2")];
        let mut resume = update(&paused, &[], 200);
        resume.append_input = &outputs;
        resume.lease_owner = Some("b");
        resume.lease_expires_at = Some(9_000);
        b.store
            .transition(&id, RunState::RequiresAction, RunState::InProgress, &resume)
            .await
            .unwrap();
        let items = b
            .store
            .input_items(store::DEFAULT_TENANT, &id)
            .await
            .unwrap();
        assert_eq!(items.len(), 4);
        assert_eq!(items[2..], outputs[..], "appended after the original input");
        let stored = b.store.get_run(store::DEFAULT_TENANT, &id).await.unwrap();
        assert_eq!(stored.lease_owner.as_deref(), Some("b"));
        assert_eq!(stored.expires_at, None);

        // A lost compare-and-set appends nothing.
        let again = b
            .store
            .transition(&id, RunState::RequiresAction, RunState::InProgress, &resume)
            .await;
        assert!(matches!(
            again,
            Err(StoreError::Conflict {
                actual: RunState::InProgress
            })
        ));
        assert_eq!(
            b.store
                .input_items(store::DEFAULT_TENANT, &id)
                .await
                .unwrap()
                .len(),
            4
        );
    }
}

#[tokio::test]
async fn a_transition_the_state_table_forbids_is_refused_without_touching_the_run() {
    for b in backends().await {
        let id = ids::new(ids::RESPONSE);
        b.store.insert_run(&new_run(&id, 0, "a", 10)).await.unwrap();
        let done = body(&id);
        switchyard::engine::state::transition(
            &*b.store,
            &id,
            RunState::InProgress,
            RunState::Completed,
            &update(&done, &[], 5),
        )
        .await
        .unwrap();
        for to in [
            RunState::InProgress,
            RunState::RequiresAction,
            RunState::Failed,
        ] {
            let refused = switchyard::engine::state::transition(
                &*b.store,
                &id,
                RunState::Completed,
                to,
                &update(&done, &[], 6),
            )
            .await;
            assert!(
                matches!(
                    refused,
                    Err(StoreError::Conflict {
                        actual: RunState::Completed
                    })
                ),
                "{to:?}"
            );
        }
        let stored = b.store.get_run(store::DEFAULT_TENANT, &id).await.unwrap();
        assert_eq!(stored.state, RunState::Completed);
        assert_eq!(stored.updated_at, 5);
    }
}

#[tokio::test]
async fn a_write_batch_inserts_runs_appends_events_and_applies_endings_in_one_go() {
    for b in backends().await {
        let backend = b.store.backend();
        let (first, second) = (ids::new(ids::RESPONSE), ids::new(ids::RESPONSE));
        let runs = [new_run(&first, 2, "a", 10), new_run(&second, 1, "a", 10)];
        let inserted = store::WriteBatch {
            runs: runs.iter().collect(),
            ..Default::default()
        };
        assert!(b.store.write_batch(&inserted).await.unwrap().is_empty());
        let mut done = body(&first);
        done.status = ResponseStatus::Completed;
        let ending = |id: &str, owner: &str| store::RunEnding {
            id: id.into(),
            to: RunState::Completed,
            body: done.clone(),
            transcript: vec![Entry::Item(message("answer"))],
            expires_at: None,
            owner: owner.into(),
            now_ms: 2_000,
        };
        // The second run is held by another instance: its ending is refused, the rest stands.
        let endings = [ending(&first, "a"), ending(&second, "b")];
        let events = [event(&first, 0), event(&first, 1), event(&second, 0)];
        let batch = store::WriteBatch {
            runs: Vec::new(),
            events: &events,
            endings: endings.iter().collect(),
        };
        let results = b.store.write_batch(&batch).await.unwrap();
        assert!(results[0].is_ok(), "{backend}: {:?}", results[0]);
        assert!(
            matches!(
                results[1],
                Err(StoreError::Conflict {
                    actual: RunState::InProgress
                })
            ),
            "{backend}: {:?}",
            results[1]
        );
        let stored = b
            .store
            .get_run(store::DEFAULT_TENANT, &first)
            .await
            .unwrap();
        assert_eq!(stored.state, RunState::Completed, "{backend}");
        assert_eq!(stored.lease_owner, None);
        assert_eq!(stored.transcript, endings[0].transcript);
        let other = b
            .store
            .get_run(store::DEFAULT_TENANT, &second)
            .await
            .unwrap();
        assert_eq!(other.state, RunState::InProgress, "{backend}");
        assert_eq!(other.lease_owner.as_deref(), Some("a"));
        assert_eq!(
            b.store.events_after(&first, None, 10).await.unwrap().len(),
            2
        );
        assert_eq!(
            b.store.events_after(&second, None, 10).await.unwrap().len(),
            1
        );
        assert_eq!(
            b.store
                .input_items(store::DEFAULT_TENANT, &first)
                .await
                .unwrap()
                .len(),
            2
        );
    }
}

#[tokio::test]
async fn a_write_batch_of_events_alone_is_written_whole_or_not_at_all() {
    for b in backends().await {
        let backend = b.store.backend();
        let id = ids::new(ids::RESPONSE);
        let run = new_run(&id, 0, "a", 10);
        let first = [event(&id, 0)];
        let inserted = store::WriteBatch {
            runs: vec![&run],
            events: &first,
            endings: Vec::new(),
        };
        b.store.write_batch(&inserted).await.unwrap();
        // The last event is already stored: the batch fails, and its other events are not
        // written either.
        let clashing = [event(&id, 1), event(&id, 2), event(&id, 0)];
        let batch = store::WriteBatch {
            events: &clashing,
            ..Default::default()
        };
        assert!(b.store.write_batch(&batch).await.is_err(), "{backend}");
        let stored = b.store.events_after(&id, None, 10).await.unwrap();
        assert_eq!(stored.len(), 1, "{backend}");
        let batch = store::WriteBatch {
            events: &clashing[..2],
            ..Default::default()
        };
        assert!(b.store.write_batch(&batch).await.unwrap().is_empty());
        let stored = b.store.events_after(&id, None, 10).await.unwrap();
        assert_eq!(stored.len(), 3, "{backend}");
    }
}

#[tokio::test]
async fn a_write_batch_of_new_runs_alone_is_written_whole_or_not_at_all() {
    for b in backends().await {
        let backend = b.store.backend();
        let taken = ids::new(ids::RESPONSE);
        let first = new_run(&taken, 1, "a", 10);
        let batch = store::WriteBatch {
            runs: vec![&first],
            ..Default::default()
        };
        assert!(b.store.write_batch(&batch).await.unwrap().is_empty());
        // The second run's id is taken: the batch fails, and neither the first run nor its
        // items are written.
        let fresh = ids::new(ids::RESPONSE);
        let (run, again) = (new_run(&fresh, 3, "a", 10), new_run(&taken, 2, "a", 10));
        let batch = store::WriteBatch {
            runs: vec![&run, &again],
            ..Default::default()
        };
        assert!(b.store.write_batch(&batch).await.is_err(), "{backend}");
        assert!(
            matches!(
                b.store.get_run(store::DEFAULT_TENANT, &fresh).await,
                Err(StoreError::NotFound)
            ),
            "{backend}"
        );
        let items = b.store.input_items(store::DEFAULT_TENANT, &fresh).await;
        assert!(items.unwrap_or_default().is_empty(), "{backend}");
        // Alone, it is written with its items, in order and unchanged.
        let batch = store::WriteBatch {
            runs: vec![&run],
            ..Default::default()
        };
        assert!(b.store.write_batch(&batch).await.unwrap().is_empty());
        let stored = b
            .store
            .get_run(store::DEFAULT_TENANT, &fresh)
            .await
            .unwrap();
        assert_eq!(stored.body, run.body, "{backend}");
        let items = b
            .store
            .input_items(store::DEFAULT_TENANT, &fresh)
            .await
            .unwrap();
        assert_eq!(items, run.input_items, "{backend}");
    }
}

#[tokio::test]
async fn a_run_inserted_and_ended_in_one_batch_is_stored_ended_and_a_missing_run_is_not_found() {
    for b in backends().await {
        let backend = b.store.backend();
        let (quick, missing) = (ids::new(ids::RESPONSE), ids::new(ids::RESPONSE));
        let mut run = new_run(&quick, 1, "a", 10);
        run.initial_events = vec![event(&quick, 0)];
        let mut done = body(&quick);
        done.status = ResponseStatus::Failed;
        let ending = |id: &str| store::RunEnding {
            id: id.into(),
            to: RunState::Failed,
            body: done.clone(),
            transcript: vec![Entry::Item(message("partial"))],
            expires_at: None,
            owner: "a".into(),
            now_ms: 3_000,
        };
        let endings = [ending(&quick), ending(&missing)];
        let events = [event(&quick, 1)];
        let batch = store::WriteBatch {
            runs: vec![&run],
            events: &events,
            endings: endings.iter().collect(),
        };
        let results = b.store.write_batch(&batch).await.unwrap();
        assert!(results[0].is_ok(), "{backend}: {:?}", results[0]);
        assert!(
            matches!(results[1], Err(StoreError::NotFound)),
            "{backend}: {:?}",
            results[1]
        );
        let stored = b
            .store
            .get_run(store::DEFAULT_TENANT, &quick)
            .await
            .unwrap();
        assert_eq!(stored.state, RunState::Failed, "{backend}");
        assert_eq!(stored.transcript, endings[0].transcript, "{backend}");
        assert_eq!(stored.lease_owner, None, "{backend}");
        let logged: Vec<u64> = b
            .store
            .events_after(&quick, None, 10)
            .await
            .unwrap()
            .iter()
            .map(|e| e.sequence_number)
            .collect();
        assert_eq!(logged, [0, 1], "{backend}");
    }
}

#[tokio::test]
async fn appended_events_are_announced_to_listeners_where_the_backend_has_them() {
    for b in backends().await {
        let backend = b.store.backend();
        let Some(mut announced) = b.store.appended_events().await.unwrap() else {
            // SQLite: one process owns the file, and its hub knows what it appends.
            assert_eq!(backend, "sqlite");
            continue;
        };
        let run = new_run(&ids::new(ids::RESPONSE), 0, "a", 10);
        let id = run.body.id.clone();
        let events = [event(&id, 0), event(&id, 1)];
        let batch = store::WriteBatch {
            runs: vec![&run],
            events: &events,
            endings: Vec::new(),
        };
        b.store.write_batch(&batch).await.unwrap();
        // Other tests share the database: their runs may be announced too.
        let heard = async {
            while let Some(announced) = futures_util::StreamExt::next(&mut announced).await {
                if announced == id {
                    return true;
                }
            }
            false
        };
        let heard = tokio::time::timeout(std::time::Duration::from_secs(5), heard).await;
        assert_eq!(heard, Ok(true), "{backend}: {id} was not announced");
    }
}

#[tokio::test]
async fn a_run_whose_request_went_away_before_its_insert_committed_is_discarded() {
    for b in backends().await {
        let (hub, writer) = switchyard::engine::hub::EventHub::start(b.store.clone(), 64);
        let id = ids::new(ids::RESPONSE);
        // The request is polled once (its insert is queued), then dropped: the writer task
        // cannot have run in between.
        let insert = hub.insert_run(new_run(&id, 1, "a", 10));
        let answered = futures_util::FutureExt::now_or_never(insert);
        assert!(
            answered.is_none(),
            "the insert was answered before the request went away"
        );
        // Two round trips through the writer: the batch with the insert is handled by then.
        hub.flush(Arc::from("another")).await.unwrap();
        hub.flush(Arc::from("another")).await.unwrap();
        assert!(
            matches!(
                b.store.get_run(store::DEFAULT_TENANT, &id).await,
                Err(StoreError::NotFound)
            ),
            "{}",
            b.store.backend()
        );
        writer.finish(hub).await;
    }
}

#[tokio::test]
async fn a_live_stream_stops_at_the_runs_last_event_but_looks_for_more_after_a_pause() {
    use futures_util::StreamExt;
    for b in backends().await {
        let (hub, writer) = switchyard::engine::hub::EventHub::start(b.store.clone(), 64);
        for ends_run in [true, false] {
            let id = ids::new(ids::RESPONSE);
            hub.insert_run(new_run(&id, 0, "a", 10)).await.unwrap();
            let response_id: Arc<str> = Arc::from(id.as_str());
            let live = hub.open(&response_id);
            let events = hub.follow_new(response_id.clone());
            // Stored behind the stream's back, as a resumed run's next event would be.
            b.store.append_events(&[event(&id, 2)]).await.unwrap();
            hub.send(Arc::new(event(&id, 0))).await;
            let terminal = EventRecord {
                event_type: Cow::Borrowed("response.completed"),
                ends_run,
                ..event(&id, 1)
            };
            hub.send(Arc::new(terminal)).await;
            // A pause's stream goes on with what the store holds after it: three events are
            // taken. The run's last event ends the stream by itself.
            let limit = if ends_run { usize::MAX } else { 3 };
            let backend = b.store.backend();
            let seen: Vec<u64> = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                events
                    .take(limit)
                    .map(|e| e.unwrap().sequence_number)
                    .collect(),
            )
            .await
            .unwrap_or_else(|_| panic!("{backend}: the stream did not end (ends_run {ends_run})"));
            let expected: Vec<u64> = if ends_run { vec![0, 1] } else { vec![0, 1, 2] };
            assert_eq!(seen, expected, "{backend}, ends_run {ends_run}");
            live.close().await;
        }
        writer.finish(hub).await;
    }
}
