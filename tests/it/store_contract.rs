//! The `RunStore` contract, run against SQLite always and PostgreSQL when `TEST_DATABASE_URL`
//! is set (CI sets it), each test on a fresh database of its own.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use switchyard::engine::control::RunControl;
use switchyard::engine::hub::EventHub;
use switchyard::protocol::events::EventRecord;
use switchyard::protocol::ids;
use switchyard::protocol::items::{ContentPart, Item, Message, Role};
use switchyard::protocol::response::{ResponseObject, ResponseStatus};
use switchyard::protocol::transcript::Entry;
use switchyard::store::{
    self, Backend, Change, Lease, Loss, NewRun, Notification, Order, RunEnding, RunState, RunStore,
    StoreError, Transition, WriteBatch,
};
use switchyard::time::UnixMillis;

use crate::support::backends;

fn at(millis: i64) -> UnixMillis {
    UnixMillis::from_millis(millis)
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
        phase: None,
    });
    item.normalise();
    item
}

/// A running run held by `holder` until `until`.
fn new_run(id: &str, items: usize, holder: &str, until: i64) -> NewRun {
    NewRun {
        tenant_id: store::DEFAULT_TENANT.into(),
        state: RunState::InProgress,
        body: body(id),
        body_json: None,
        input_items: (0..items).map(|i| message(&format!("m{i}"))).collect(),
        lease: Some(Lease {
            holder: holder.into(),
            until: at(until),
        }),
        now: at(1_000),
        initial_events: vec![],
        idempotency: None,
        key_id: None,
    }
}

fn event(id: &str, n: u64) -> EventRecord {
    event_of(id, n, "response.output_text.delta")
}

fn event_of(id: &str, n: u64, kind: &'static str) -> EventRecord {
    EventRecord {
        response_id: Arc::from(id),
        tenant_id: Arc::from(store::DEFAULT_TENANT),
        sequence_number: n,
        event_type: Cow::Borrowed(kind),
        data: Arc::from(format!(r#"{{"type":"{kind}","sequence_number":{n}}}"#)),
        created_at: 5,
        ends_run: false,
    }
}

fn batch<'a>(
    holder: &'a str,
    runs: &'a [NewRun],
    events: &'a [EventRecord],
    endings: &'a [RunEnding],
) -> WriteBatch<'a> {
    WriteBatch {
        holder,
        runs: runs.iter().collect(),
        events,
        endings: endings.iter().collect(),
    }
}

/// The holder's ending of `id` in `to`, with its closing events `first..`.
fn ending(id: &str, to: RunState, first: u64, closing: usize) -> RunEnding {
    let mut done = body(id);
    done.status = ResponseStatus::Completed;
    RunEnding {
        id: id.into(),
        tenant_id: store::DEFAULT_TENANT.into(),
        transition: Transition::ending(to).unwrap(),
        body: done,
        body_json: None,
        transcript: vec![Entry::Item(message("answer"))],
        expires_at: None,
        now: at(2_000),
        events: (first..first + closing as u64)
            .map(|n| event_of(id, n, "response.completed"))
            .collect(),
    }
}

/// The holder `caller` ends `id` in `to` through a transition.
fn end<'a>(id: &'a str, to: RunState, caller: &'a str, now: i64) -> Change<'a> {
    Change {
        now: at(now),
        ..Change::new(id, Transition::ending(to).unwrap(), caller)
    }
}

async fn numbers(store: &dyn RunStore, id: &str) -> Vec<u64> {
    let events = store.events_after(id, None, 10_000).await.unwrap();
    events.iter().map(|e| e.sequence_number).collect()
}

async fn state(store: &dyn RunStore, id: &str) -> RunState {
    store.state_of(id).await.unwrap().unwrap()
}

#[tokio::test]
async fn a_run_is_stored_with_its_input_items_and_first_events_and_read_back_unchanged() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let id = ids::new(ids::RESPONSE);
        let mut run = new_run(&id, 3, "a", 10);
        run.initial_events = vec![
            event_of(&id, 0, "response.created"),
            event_of(&id, 1, "response.queued"),
        ];
        store.insert_run(&run).await.unwrap();
        let events = store.events_after(&id, None, 10).await.unwrap();
        assert_eq!(events, run.initial_events, "{}", db.url);
        let stored = store.get_run(store::DEFAULT_TENANT, &id).await.unwrap();
        assert_eq!(stored.state, RunState::InProgress, "{}", db.url);
        assert_eq!(stored.body, run.body);
        assert_eq!(stored.lease_owner.as_deref(), Some("a"));
        assert_eq!(stored.lease_expires_at, Some(at(10)));
        assert!(!stored.cancel_requested);
        assert_eq!(
            store.input_items(store::DEFAULT_TENANT, &id).await.unwrap(),
            run.input_items
        );
        assert!(matches!(
            store.get_run("other-tenant", &id).await,
            Err(StoreError::NotFound)
        ));
        assert!(matches!(
            store.get_run(store::DEFAULT_TENANT, "resp_none").await,
            Err(StoreError::NotFound)
        ));
        store.ping().await.unwrap();
    }
}

#[tokio::test]
async fn text_with_a_nul_character_is_stored_and_read_back_exactly_and_a_key_holding_one_finds_nothing()
 {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let id = ids::new(ids::RESPONSE);
        let nul = "before\u{0}after";
        let mut run = new_run(&id, 0, "a", 10);
        run.body.instructions = Some(nul.into());
        run.body.metadata.insert("k".into(), json!(nul));
        run.input_items = vec![message(nul)];
        store.insert_run(&run).await.unwrap();
        let mut data = event(&id, 0);
        data.data = Arc::from(serde_json::to_string(&json!({"delta": nul})).unwrap());
        let outcome = store
            .write_batch(&batch("a", &[], &[data.clone()], &[]))
            .await;
        assert!(outcome.lost.is_empty(), "{}: {:?}", db.url, outcome.lost);
        let mut done = ending(&id, RunState::Completed, 1, 1);
        done.body.output = vec![message(nul)];
        done.transcript = vec![Entry::Item(message(nul)), Entry::TurnEnd];
        let outcome = store
            .write_batch(&batch("a", &[], &[], &[done.clone()]))
            .await;
        assert!(
            outcome.endings[0].is_ok(),
            "{}: {:?}",
            db.url,
            outcome.endings
        );

        let stored = store.get_run(store::DEFAULT_TENANT, &id).await.unwrap();
        assert_eq!(stored.body, done.body, "{}", db.url);
        assert_eq!(stored.transcript, done.transcript);
        let items = store.input_items(store::DEFAULT_TENANT, &id).await;
        assert_eq!(items.unwrap(), run.input_items);
        let logged = store.events_after(&id, None, 10).await.unwrap();
        assert_eq!(logged[0].data, data.data);
        assert_eq!(store.state_of("resp_\u{0}").await.unwrap(), None);
        assert!(matches!(
            store.get_run(store::DEFAULT_TENANT, "resp_\u{0}").await,
            Err(StoreError::NotFound)
        ));
        let key = store.find_idempotent(store::DEFAULT_TENANT, "k\u{0}").await;
        assert_eq!(key.unwrap(), None);
    }
}

#[tokio::test]
async fn a_transition_is_a_compare_and_set_that_reports_the_state_it_found() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let id = ids::new(ids::RESPONSE);
        store.insert_run(&new_run(&id, 0, "a", 10)).await.unwrap();
        let mut done = body(&id);
        done.status = ResponseStatus::Completed;
        let seen = [Entry::Item(message("seen"))];
        let change = Change {
            body: Some(&done),
            transcript: Some(&seen),
            ..end(&id, RunState::Completed, "a", 2_000)
        };
        let applied = store.transition(&change).await.unwrap();
        assert_eq!(applied.next_sequence, 0, "an empty log continues at 0");
        let stored = store.get_run(store::DEFAULT_TENANT, &id).await.unwrap();
        assert_eq!(stored.state, RunState::Completed);
        assert_eq!(stored.body.status, ResponseStatus::Completed);
        assert_eq!(stored.updated_at, at(2_000));
        assert_eq!(
            stored.transcript, seen,
            "the transcript is stored with the state"
        );
        assert_eq!(stored.lease_owner, None, "a stopped run is held by nobody");
        let again = store
            .transition(&end(&id, RunState::Failed, "a", 3_000))
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
        let missing = store
            .transition(&end("resp_none", RunState::Failed, "a", 3_000))
            .await;
        assert!(matches!(missing, Err(StoreError::NotFound)));
    }
}

#[tokio::test]
async fn a_change_whose_lease_guard_does_not_hold_is_refused_without_touching_the_run() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let id = ids::new(ids::RESPONSE);
        store
            .insert_run(&new_run(&id, 0, "a", 10_000))
            .await
            .unwrap();
        // Not the holder: it cannot end the run, nor hand it over.
        for change in [
            end(&id, RunState::Completed, "b", 5),
            Change::new(&id, Transition::HAND_OVER, "b"),
        ] {
            let refused = store.transition(&change).await;
            assert!(
                matches!(
                    refused,
                    Err(StoreError::Conflict {
                        actual: RunState::InProgress
                    })
                ),
                "{}: {refused:?}",
                db.url
            );
        }
        // A running run is nobody's to cancel as if it were paused, or to take over while its
        // lease holds.
        let paused = store
            .transition(&Change::new(&id, Transition::CANCEL_PAUSED, "b"))
            .await;
        assert!(
            matches!(paused, Err(StoreError::Conflict { .. })),
            "{paused:?}"
        );
        let lease = Lease {
            holder: "b".into(),
            until: at(99_000),
        };
        assert!(
            store
                .claim_stale(&id, &lease, at(5_000))
                .await
                .unwrap()
                .is_none()
        );
        let stored = store.get_run(store::DEFAULT_TENANT, &id).await.unwrap();
        assert_eq!(stored.state, RunState::InProgress);
        assert_eq!(stored.lease_owner.as_deref(), Some("a"));
        assert_eq!(stored.updated_at, at(1_000));
        // A final state has no way out in the table at all.
        for from in RunState::ALL.into_iter().filter(|s| s.is_final()) {
            for to in RunState::ALL {
                assert_eq!(Transition::unheld(from, to), None);
            }
        }
    }
}

#[tokio::test]
async fn of_many_concurrent_transitions_from_one_state_exactly_one_wins() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let id = ids::new(ids::RESPONSE);
        store.insert_run(&new_run(&id, 0, "a", 10)).await.unwrap();
        let attempts = (0..8).map(|i| {
            let store = store.clone();
            let id = id.clone();
            tokio::spawn(async move {
                let to = match i % 2 {
                    0 => RunState::Completed,
                    _ => RunState::Cancelled,
                };
                let closing = |next: u64| vec![event_of(&id, next, "response.failed")];
                let change = Change {
                    closing: Some(&closing),
                    ..end(&id, to, "a", 1)
                };
                store.transition(&change).await
            })
        });
        let results = futures_util::future::join_all(attempts).await;
        let wins = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
        assert_eq!(wins, 1, "{}", db.url);
        // Every loser is told the run moved on; none fails otherwise, and none wrote.
        assert!(
            results
                .iter()
                .all(|r| matches!(r, Ok(Ok(_) | Err(StoreError::Conflict { .. }))))
        );
        assert_eq!(numbers(&*store, &id).await, [0]);
    }
}

#[tokio::test]
async fn a_transitions_closing_events_follow_the_log_and_commit_with_it_or_not_at_all() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let id = ids::new(ids::RESPONSE);
        store.insert_run(&new_run(&id, 0, "a", 10)).await.unwrap();
        let events = [event(&id, 0), event(&id, 1), event(&id, 2)];
        store.write_batch(&batch("a", &[], &events, &[])).await;
        let closing = |next: u64| {
            vec![
                event_of(&id, next, "error"),
                event_of(&id, next + 1, "response.failed"),
            ]
        };
        let change = Change {
            closing: Some(&closing),
            ..end(&id, RunState::Failed, "a", 5)
        };
        let applied = store.transition(&change).await.unwrap();
        assert_eq!(applied.next_sequence, 5, "{}", db.url);
        assert_eq!(numbers(&*store, &id).await, [0, 1, 2, 3, 4]);
        let last = store.events_after(&id, Some(3), 1).await.unwrap();
        assert_eq!(last[0].event_type, "response.failed");
        // The run moved on: a second ending writes neither state nor events.
        let again = store.transition(&change).await;
        assert!(matches!(again, Err(StoreError::Conflict { .. })));
        assert_eq!(numbers(&*store, &id).await.len(), 5);
    }
}

#[tokio::test]
async fn events_are_appended_in_batches_and_read_in_order_after_any_point() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let id = ids::new(ids::RESPONSE);
        store.insert_run(&new_run(&id, 0, "a", 10)).await.unwrap();
        // One batch, larger than one INSERT chunk.
        let events: Vec<EventRecord> = (0..1500).map(|n| event(&id, n)).collect();
        let outcome = store.write_batch(&batch("a", &[], &events, &[])).await;
        assert!(outcome.lost.is_empty(), "{}: {:?}", db.url, outcome.lost);

        let first = store.events_after(&id, None, 10).await.unwrap();
        assert_eq!(
            first.iter().map(|e| e.sequence_number).collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
        assert_eq!(
            first[3], events[3],
            "an event reads back exactly as written"
        );
        let tail = store.events_after(&id, Some(1495), 100).await.unwrap();
        assert_eq!(
            tail.iter().map(|e| e.sequence_number).collect::<Vec<_>>(),
            vec![1496, 1497, 1498, 1499]
        );
        assert_eq!(store.last_sequence_number(&id).await.unwrap(), Some(1499));
        assert_eq!(store.last_sequence_number("resp_none").await.unwrap(), None);

        // Then 200 batches of three events (a frame each, stored): read across many frames,
        // from inside one, up to a limit that ends inside another.
        for b in 0..200 {
            let events: Vec<EventRecord> = (0..3).map(|i| event(&id, 1500 + b * 3 + i)).collect();
            let outcome = store.write_batch(&batch("a", &[], &events, &[])).await;
            assert!(outcome.lost.is_empty(), "{}: {:?}", db.url, outcome.lost);
        }
        let numbers = |events: Vec<EventRecord>| -> Vec<u64> {
            events.iter().map(|e| e.sequence_number).collect()
        };
        let read = store.events_after(&id, Some(1600), 400).await.unwrap();
        assert_eq!(
            numbers(read),
            (1601..2001).collect::<Vec<_>>(),
            "{}",
            db.url
        );
        let all = store.events_after(&id, None, 5000).await.unwrap();
        assert_eq!(numbers(all), (0..2100).collect::<Vec<_>>(), "{}", db.url);
        assert_eq!(store.last_sequence_number(&id).await.unwrap(), Some(2099));
    }
}

#[tokio::test]
async fn events_of_a_run_the_writer_does_not_hold_are_not_written_and_are_reported() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let (held, other, paused) = (
            ids::new(ids::RESPONSE),
            ids::new(ids::RESPONSE),
            ids::new(ids::RESPONSE),
        );
        store.insert_run(&new_run(&held, 0, "a", 10)).await.unwrap();
        store
            .insert_run(&new_run(&other, 0, "b", 10))
            .await
            .unwrap();
        store
            .insert_run(&new_run(&paused, 0, "a", 10))
            .await
            .unwrap();
        let pause = Change {
            expires_at: Some(at(9_000)),
            ..end(&paused, RunState::RequiresAction, "a", 5)
        };
        store.transition(&pause).await.unwrap();
        for events in [
            // The common batch, events alone (one statement on SQLite)…
            vec![event(&held, 0), event(&other, 0), event(&paused, 0)],
            // …and one with a new run and an ending beside them (a transaction).
            vec![event(&held, 1), event(&other, 1), event(&paused, 1)],
        ] {
            let new = ids::new(ids::RESPONSE);
            let runs = match events[0].sequence_number {
                0 => Vec::new(),
                _ => vec![new_run(&new, 0, "a", 10)],
            };
            let endings = match events[0].sequence_number {
                0 => Vec::new(),
                _ => vec![ending(&other, RunState::Completed, 1, 1)],
            };
            let outcome = store
                .write_batch(&batch("a", &runs, &events, &endings))
                .await;
            let mut lost: Vec<&str> = outcome.lost.keys().map(|id| &**id).collect();
            lost.sort_unstable();
            let mut expected = vec![other.as_str(), paused.as_str()];
            expected.sort_unstable();
            assert_eq!(lost, expected, "{}", db.url);
            assert!(outcome.lost.values().all(|l| matches!(l, Loss::NotHeld)));
            assert!(matches!(
                outcome.endings.first(),
                None | Some(Err(StoreError::Conflict { .. }))
            ));
        }
        assert_eq!(numbers(&*store, &held).await, [0, 1], "{}", db.url);
        assert!(numbers(&*store, &other).await.is_empty());
        assert!(numbers(&*store, &paused).await.is_empty());
        assert_eq!(state(&*store, &other).await, RunState::InProgress);
    }
}

#[tokio::test]
async fn a_batch_the_database_refuses_loses_only_the_offending_runs_part() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let (good, clashing) = (ids::new(ids::RESPONSE), ids::new(ids::RESPONSE));
        store.insert_run(&new_run(&good, 0, "a", 10)).await.unwrap();
        store
            .insert_run(&new_run(&clashing, 0, "a", 10))
            .await
            .unwrap();
        store
            .write_batch(&batch("a", &[], &[event(&clashing, 0)], &[]))
            .await;
        // The clashing run's event 0 is already stored: the log is append-only.
        let events = [
            event(&good, 0),
            event(&clashing, 1),
            event(&clashing, 0),
            event(&good, 1),
        ];
        let endings = [ending(&clashing, RunState::Completed, 2, 1)];
        let outcome = store.write_batch(&batch("a", &[], &events, &endings)).await;
        assert_eq!(outcome.lost.len(), 1, "{}: {:?}", db.url, outcome.lost);
        assert!(matches!(
            outcome.lost.get(clashing.as_str()),
            Some(Loss::Failed(StoreError::Rejected(_)))
        ));
        assert!(
            outcome.endings[0].is_err(),
            "no ending after a hole in the log"
        );
        assert_eq!(numbers(&*store, &good).await, [0, 1], "{}", db.url);
        assert_eq!(numbers(&*store, &clashing).await, [0]);
        assert_eq!(state(&*store, &clashing).await, RunState::InProgress);
    }
}

#[tokio::test]
async fn a_new_run_whose_row_is_refused_is_reported_and_the_others_of_its_batch_are_stored() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let taken = ids::new(ids::RESPONSE);
        store
            .insert_run(&new_run(&taken, 1, "a", 10))
            .await
            .unwrap();
        let fresh = ids::new(ids::RESPONSE);
        let runs = [new_run(&fresh, 3, "a", 10), new_run(&taken, 2, "a", 10)];
        let events = [event(&fresh, 0), event(&taken, 0)];
        let outcome = store.write_batch(&batch("a", &runs, &events, &[])).await;
        assert!(outcome.not_inserted.contains_key(&taken), "{}", db.url);
        assert!(!outcome.not_inserted.contains_key(&fresh));
        let stored = store.get_run(store::DEFAULT_TENANT, &fresh).await.unwrap();
        assert_eq!(stored.body, runs[0].body, "{}", db.url);
        let items = store.input_items(store::DEFAULT_TENANT, &fresh).await;
        assert_eq!(items.unwrap(), runs[0].input_items);
        assert_eq!(numbers(&*store, &fresh).await, [0]);
        let items = store.input_items(store::DEFAULT_TENANT, &taken).await;
        assert_eq!(
            items.unwrap().len(),
            1,
            "the first run with this id is untouched"
        );
    }
}

#[tokio::test]
async fn input_items_page_forwards_and_backwards() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let id = ids::new(ids::RESPONSE);
        let run = new_run(&id, 5, "a", 10);
        store.insert_run(&run).await.unwrap();
        let t = store::DEFAULT_TENANT;
        let items = &run.input_items;
        let (page, more) = store
            .list_input_items(t, &id, 2, Order::Ascending, None)
            .await
            .unwrap();
        assert_eq!(page, items[..2]);
        assert!(more);
        let (page, more) = store
            .list_input_items(t, &id, 10, Order::Ascending, Some(items[2].id()))
            .await
            .unwrap();
        assert_eq!(page, items[3..]);
        assert!(!more);
        let (page, more) = store
            .list_input_items(t, &id, 2, Order::Descending, Some(items[2].id()))
            .await
            .unwrap();
        assert_eq!(page, vec![items[1].clone(), items[0].clone()]);
        assert!(!more);
        assert!(matches!(
            store
                .list_input_items(t, &id, 2, Order::Descending, Some("msg_none"))
                .await,
            Err(StoreError::NotFound)
        ));
    }
}

#[tokio::test]
async fn a_tenants_runs_are_listed_newest_first_in_pages_and_filtered() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let t = store::DEFAULT_TENANT;
        // (model, metadata, state, created at): ids made in this order sort by creation.
        let runs = [
            (
                "a",
                json!({"k": "v", "team": "x"}),
                RunState::Completed,
                1_000,
            ),
            ("b", json!({"k": "v"}), RunState::RequiresAction, 2_000),
            ("a", json!({"k": "w"}), RunState::InProgress, 3_000),
            (
                "a",
                json!({"k": "v", "team": "x", "odd": "it's \"q\""}),
                RunState::RequiresAction,
                4_000,
            ),
        ];
        let mut ids = Vec::new();
        for (model, metadata, state, now) in &runs {
            let id = ids::new(ids::RESPONSE);
            let mut run = new_run(&id, 1, "a", 10);
            run.body.model = (*model).into();
            run.body.metadata = serde_json::from_value(metadata.clone()).unwrap();
            run.state = *state;
            run.now = at(*now);
            store.insert_run(&run).await.unwrap();
            ids.push(id);
        }

        let list = |filter: store::RunFilter, limit: u32, after: Option<String>| {
            let store = store.clone();
            async move {
                let (runs, more) = store
                    .list_runs(t, &filter, limit, after.as_deref())
                    .await
                    .unwrap();
                let ids: Vec<String> = runs.into_iter().map(|r| r.body.id).collect();
                (ids, more)
            }
        };
        let all = store::RunFilter::default();
        assert_eq!(
            list(all.clone(), 10, None).await,
            (
                vec![
                    ids[3].clone(),
                    ids[2].clone(),
                    ids[1].clone(),
                    ids[0].clone()
                ],
                false
            )
        );
        assert_eq!(
            list(all.clone(), 2, None).await,
            (vec![ids[3].clone(), ids[2].clone()], true)
        );
        assert_eq!(
            list(all.clone(), 2, Some(ids[2].clone())).await,
            (vec![ids[1].clone(), ids[0].clone()], false)
        );
        let by = |change: fn(&mut store::RunFilter)| {
            let mut filter = store::RunFilter::default();
            change(&mut filter);
            filter
        };
        let paused = by(|f| f.state = Some(RunState::RequiresAction));
        assert_eq!(
            list(paused, 10, None).await.0,
            [ids[3].clone(), ids[1].clone()]
        );
        let not_paused = by(|f| f.not_state = Some(RunState::RequiresAction));
        assert_eq!(
            list(not_paused, 10, None).await.0,
            [ids[2].clone(), ids[0].clone()]
        );
        let model = by(|f| f.model = Some("b".into()));
        assert_eq!(list(model, 10, None).await.0, [ids[1].clone()]);
        let pairs =
            by(|f| f.metadata = vec![("k".into(), "v".into()), ("team".into(), "x".into())]);
        assert_eq!(
            list(pairs, 10, None).await.0,
            [ids[3].clone(), ids[0].clone()]
        );
        let quoted = by(|f| f.metadata = vec![("odd".into(), "it's \"q\"".into())]);
        assert_eq!(list(quoted, 10, None).await.0, [ids[3].clone()]);
        let missing = by(|f| f.metadata = vec![("nope".into(), "v".into())]);
        assert_eq!(list(missing, 10, None).await.0, Vec::<String>::new());
        let window = by(|f| {
            f.created_from = Some(at(2_000));
            f.created_before = Some(at(4_000));
        });
        assert_eq!(
            list(window, 10, None).await.0,
            [ids[2].clone(), ids[1].clone()]
        );
    }
}

#[tokio::test]
async fn deleting_a_run_removes_its_items_and_events() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let id = ids::new(ids::RESPONSE);
        store.insert_run(&new_run(&id, 2, "a", 10)).await.unwrap();
        let events = [event(&id, 0), event(&id, 1)];
        store.write_batch(&batch("a", &[], &events, &[])).await;
        store.delete_run(store::DEFAULT_TENANT, &id).await.unwrap();
        assert!(matches!(
            store.get_run(store::DEFAULT_TENANT, &id).await,
            Err(StoreError::NotFound)
        ));
        assert!(numbers(&*store, &id).await.is_empty());
        let items = store.input_items(store::DEFAULT_TENANT, &id).await;
        assert!(items.unwrap().is_empty());
        assert!(matches!(
            store.delete_run(store::DEFAULT_TENANT, &id).await,
            Err(StoreError::NotFound)
        ));
    }
}

#[tokio::test]
async fn runs_that_stopped_before_the_window_are_pruned_in_batches_and_no_others() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        // Negative times, from when the PostgreSQL database was shared with the other tests
        // (whose runs stop at small positive times and were not to be pruned here); each test
        // has a database of its own now.
        let mut old = Vec::new();
        for i in 0..250 {
            let id = ids::new(ids::RESPONSE);
            let mut run = new_run(&id, 1, "a", 10);
            run.now = at(-10_000 + i);
            store.insert_run(&run).await.unwrap();
            store
                .write_batch(&batch("a", &[], &[event(&id, 0)], &[]))
                .await;
            let to = match i % 2 {
                0 => RunState::Completed,
                _ => RunState::Failed,
            };
            store
                .transition(&end(&id, to, "a", -5_000 + i))
                .await
                .unwrap();
            old.push(id);
        }
        // Active runs are kept however old; a run that stopped after the window too.
        let active = ids::new(ids::RESPONSE);
        let mut run = new_run(&active, 1, "a", 10);
        run.now = at(-20_000);
        store.insert_run(&run).await.unwrap();
        let recent = ids::new(ids::RESPONSE);
        let mut run = new_run(&recent, 1, "a", 10);
        run.now = at(-20_000);
        store.insert_run(&run).await.unwrap();
        store
            .write_batch(&batch("a", &[], &[event(&recent, 0)], &[]))
            .await;
        store
            .transition(&end(&recent, RunState::Completed, "a", 0))
            .await
            .unwrap();

        let (runs, _) = store.prune(at(0), at(i64::MIN)).await.unwrap();
        assert_eq!(runs, 250, "{}", db.url);
        for id in &old {
            assert!(matches!(
                store.get_run(store::DEFAULT_TENANT, id).await,
                Err(StoreError::NotFound)
            ));
            assert!(numbers(&*store, id).await.is_empty());
            let items = store.input_items(store::DEFAULT_TENANT, id).await;
            assert!(items.unwrap().is_empty());
        }
        for id in [&active, &recent] {
            store.get_run(store::DEFAULT_TENANT, id).await.unwrap();
            let items = store.input_items(store::DEFAULT_TENANT, id).await;
            assert_eq!(items.unwrap().len(), 1);
        }
        assert_eq!(numbers(&*store, &recent).await.len(), 1);
        assert_eq!(store.prune(at(0), at(i64::MIN)).await.unwrap().0, 0);
    }
}

#[tokio::test]
async fn leases_are_renewed_by_their_holder_taken_over_once_they_run_out_and_let_go_at_shutdown() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let holder = ids::new("inst");
        let (mine, dead, finished) = (
            ids::new(ids::RESPONSE),
            ids::new(ids::RESPONSE),
            ids::new(ids::RESPONSE),
        );
        store
            .insert_run(&new_run(&mine, 0, &holder, 100))
            .await
            .unwrap();
        store
            .insert_run(&new_run(&dead, 0, "dead", 100))
            .await
            .unwrap();
        store
            .insert_run(&new_run(&finished, 0, "dead", 100))
            .await
            .unwrap();
        store
            .transition(&end(&finished, RunState::Completed, "dead", 1))
            .await
            .unwrap();

        // Only the runs named, and only those the holder holds.
        let cancelled = store
            .renew_leases(&holder, &[&mine, &dead], at(5_000))
            .await
            .unwrap();
        assert!(cancelled.is_empty());
        let stored = store.get_run(store::DEFAULT_TENANT, &mine).await.unwrap();
        assert_eq!(stored.lease_expires_at, Some(at(5_000)), "{}", db.url);
        let stored = store.get_run(store::DEFAULT_TENANT, &dead).await.unwrap();
        assert_eq!(stored.lease_expires_at, Some(at(100)));

        let stale: Vec<String> = store
            .stale_runs(at(1_000))
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.body.id)
            .collect();
        assert!(stale.contains(&dead), "a lease that ran out is stale");
        assert!(!stale.contains(&mine), "a lease still valid is not");
        assert!(!stale.contains(&finished), "finished runs are not");

        // One instance takes it over, with its state and log as they are.
        let lease = Lease {
            holder: holder.clone(),
            until: at(9_000),
        };
        let taken = store.claim_stale(&dead, &lease, at(1_000)).await.unwrap();
        let taken = taken.expect("the run was taken over");
        assert_eq!(taken.lease_owner.as_deref(), Some(holder.as_str()));
        assert_eq!(taken.state, RunState::InProgress);
        let again = Lease {
            holder: "other".into(),
            until: at(9_000),
        };
        assert!(
            store
                .claim_stale(&dead, &again, at(1_000))
                .await
                .unwrap()
                .is_none()
        );
        // Nor does its holder take it over a second time, even counting every lease as run
        // out, as a start does for what a previous process left (its periodic sweep may have
        // taken the run over while the start waited for MCP servers); another holder does,
        // and then the first one can again.
        for (claimer, takes) in [(&lease, false), (&again, true), (&lease, true)] {
            let taken = store
                .claim_stale(&dead, claimer, UnixMillis::MAX)
                .await
                .unwrap();
            assert_eq!(taken.is_some(), takes, "{}: {}", db.url, claimer.holder);
        }

        // At shutdown the holder lets go of both: anyone may take them over at once.
        assert_eq!(store.release_leases(&holder).await.unwrap(), 2);
        let stale: Vec<String> = store
            .stale_runs(at(0))
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.body.id)
            .collect();
        assert!(stale.contains(&mine) && stale.contains(&dead), "{}", db.url);
        assert!(
            store
                .claim_stale(&mine, &again, at(0))
                .await
                .unwrap()
                .is_some()
        );
    }
}

#[tokio::test]
async fn a_cancel_request_reaches_the_holder_through_renewal_and_checkpoints_until_the_run_ends() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let id = ids::new(ids::RESPONSE);
        store.insert_run(&new_run(&id, 0, "a", 100)).await.unwrap();
        let t = store::DEFAULT_TENANT;
        assert!(
            !store
                .request_cancel("other-tenant", &id, at(5))
                .await
                .unwrap()
        );
        assert!(
            store.request_cancel(t, &id, at(5)).await.unwrap(),
            "{}",
            db.url
        );
        let saved = store
            .checkpoint(&id, "a", &body(&id), &[], at(6))
            .await
            .unwrap();
        assert!(saved.cancel_requested);
        let renewed = store.renew_leases("a", &[&id], at(200)).await.unwrap();
        assert_eq!(renewed, std::slice::from_ref(&id));
        // A takeover keeps the request; an ending clears it.
        store
            .transition(&Change::new(&id, Transition::HAND_OVER, "a"))
            .await
            .unwrap();
        let lease = Lease {
            holder: "b".into(),
            until: at(9_000),
        };
        let taken = store
            .claim_stale(&id, &lease, at(7))
            .await
            .unwrap()
            .unwrap();
        assert!(taken.cancel_requested);
        store
            .transition(&end(&id, RunState::Cancelled, "b", 8))
            .await
            .unwrap();
        let stored = store.get_run(t, &id).await.unwrap();
        assert!(!stored.cancel_requested);
        assert!(
            !store.request_cancel(t, &id, at(9)).await.unwrap(),
            "not running"
        );
        // A checkpoint by a former holder is refused.
        let stale = store.checkpoint(&id, "a", &body(&id), &[], at(10)).await;
        assert!(matches!(stale, Err(StoreError::Conflict { .. })));
    }
}

#[tokio::test]
async fn a_transition_can_append_input_items_and_set_an_expiry_atomically() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let id = ids::new(ids::RESPONSE);
        store.insert_run(&new_run(&id, 2, "a", 10)).await.unwrap();
        let pause = Change {
            expires_at: Some(at(5_000)),
            ..end(&id, RunState::RequiresAction, "a", 100)
        };
        store.transition(&pause).await.unwrap();
        let stored = store.get_run(store::DEFAULT_TENANT, &id).await.unwrap();
        assert_eq!(stored.expires_at, Some(at(5_000)));
        assert_eq!(stored.lease_owner, None, "a paused run is held by nobody");

        let overdue = |now| {
            let store = store.clone();
            async move {
                let runs = store.expired_runs(at(now)).await.unwrap();
                runs.into_iter().map(|r| r.body.id).collect::<Vec<_>>()
            }
        };
        assert!(overdue(6_000).await.contains(&id));
        assert!(!overdue(4_000).await.contains(&id));

        let outputs = vec![message("output 1"), message("output 2")];
        let resume = Change {
            append_input: &outputs,
            lease_until: at(9_000),
            now: at(200),
            ..Change::new(&id, Transition::RESUME, "b")
        };
        store.transition(&resume).await.unwrap();
        let items = store.input_items(store::DEFAULT_TENANT, &id).await.unwrap();
        assert_eq!(items.len(), 4);
        assert_eq!(items[2..], outputs[..], "appended after the original input");
        let stored = store.get_run(store::DEFAULT_TENANT, &id).await.unwrap();
        assert_eq!(stored.lease_owner.as_deref(), Some("b"));
        assert_eq!(stored.lease_expires_at, Some(at(9_000)));
        assert_eq!(stored.expires_at, None);

        // A lost compare-and-set appends nothing.
        let again = store.transition(&resume).await;
        assert!(matches!(
            again,
            Err(StoreError::Conflict {
                actual: RunState::InProgress
            })
        ));
        let items = store.input_items(store::DEFAULT_TENANT, &id).await;
        assert_eq!(items.unwrap().len(), 4);
    }
}

#[tokio::test]
async fn a_write_batch_inserts_runs_appends_events_and_applies_endings_with_their_closing_events() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let (first, second) = (ids::new(ids::RESPONSE), ids::new(ids::RESPONSE));
        let mut runs = [new_run(&first, 2, "a", 10), new_run(&second, 1, "a", 10)];
        // The first run's body comes as the text its events carry, the second's is serialised
        // by the store.
        runs[0].body_json = Some(serde_json::to_string(&runs[0].body).unwrap().into());
        let outcome = store.write_batch(&batch("a", &runs, &[], &[])).await;
        assert!(outcome.not_inserted.is_empty() && outcome.lost.is_empty());
        let inserted = store.get_run(store::DEFAULT_TENANT, &first).await.unwrap();
        assert_eq!(inserted.body, runs[0].body, "{}", db.url);
        // The second run was taken over by another instance meanwhile: its ending is
        // refused, with its closing events; the first run's stands.
        store
            .transition(&Change::new(&second, Transition::HAND_OVER, "a"))
            .await
            .unwrap();
        let lease = Lease {
            holder: "b".into(),
            until: at(99_000),
        };
        store
            .claim_stale(&second, &lease, at(1))
            .await
            .unwrap()
            .unwrap();
        let mut endings = [
            ending(&first, RunState::Completed, 2, 1),
            ending(&second, RunState::Completed, 1, 1),
        ];
        endings[0].body_json = Some(serde_json::to_string(&endings[0].body).unwrap());
        let events = [event(&first, 0), event(&first, 1), event(&second, 0)];
        let outcome = store.write_batch(&batch("a", &[], &events, &endings)).await;
        assert!(
            outcome.endings[0].is_ok(),
            "{}: {:?}",
            db.url,
            outcome.endings
        );
        assert!(
            matches!(
                outcome.endings[1],
                Err(StoreError::Conflict {
                    actual: RunState::InProgress
                })
            ),
            "{}: {:?}",
            db.url,
            outcome.endings[1]
        );
        let stored = store.get_run(store::DEFAULT_TENANT, &first).await.unwrap();
        assert_eq!(stored.state, RunState::Completed, "{}", db.url);
        assert_eq!(stored.lease_owner, None);
        assert_eq!(stored.transcript, endings[0].transcript);
        assert_eq!(stored.body, endings[0].body, "{}", db.url);
        assert_eq!(numbers(&*store, &first).await, [0, 1, 2]);
        let other = store.get_run(store::DEFAULT_TENANT, &second).await.unwrap();
        assert_eq!(other.state, RunState::InProgress, "{}", db.url);
        assert_eq!(other.lease_owner.as_deref(), Some("b"));
        assert!(numbers(&*store, &second).await.is_empty());
        let items = store.input_items(store::DEFAULT_TENANT, &first).await;
        assert_eq!(items.unwrap().len(), 2);
    }
}

#[tokio::test]
async fn a_run_inserted_and_ended_in_one_batch_is_stored_ended_and_a_missing_run_is_not_found() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let (quick, missing) = (ids::new(ids::RESPONSE), ids::new(ids::RESPONSE));
        let mut run = new_run(&quick, 1, "a", 10);
        run.initial_events = vec![event(&quick, 0)];
        let endings = [
            ending(&quick, RunState::Failed, 2, 2),
            ending(&missing, RunState::Failed, 0, 1),
        ];
        let events = [event(&quick, 1)];
        let outcome = store
            .write_batch(&batch("a", std::slice::from_ref(&run), &events, &endings))
            .await;
        assert!(
            outcome.endings[0].is_ok(),
            "{}: {:?}",
            db.url,
            outcome.endings
        );
        assert!(
            matches!(outcome.endings[1], Err(StoreError::NotFound)),
            "{}: {:?}",
            db.url,
            outcome.endings[1]
        );
        let stored = store.get_run(store::DEFAULT_TENANT, &quick).await.unwrap();
        assert_eq!(stored.state, RunState::Failed, "{}", db.url);
        assert_eq!(stored.transcript, endings[0].transcript);
        assert_eq!(stored.lease_owner, None);
        assert_eq!(numbers(&*store, &quick).await, [0, 1, 2, 3], "{}", db.url);
        assert!(numbers(&*store, &missing).await.is_empty());
    }
}

#[tokio::test]
async fn appended_events_and_cancel_requests_are_announced_where_the_backend_has_listeners() {
    use futures_util::StreamExt;
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let Some(mut news) = store.notifications().await.unwrap() else {
            // SQLite: one process serves the file, and its hub knows what it appends.
            assert_eq!(store.backend(), Backend::Sqlite);
            continue;
        };
        let run = new_run(&ids::new(ids::RESPONSE), 0, "a", 10);
        let id = run.body.id.clone();
        let events = [event(&id, 0), event(&id, 1)];
        store
            .write_batch(&batch("a", std::slice::from_ref(&run), &events, &[]))
            .await;
        store
            .request_cancel(store::DEFAULT_TENANT, &id, at(1))
            .await
            .unwrap();
        // Other tests share the database: their runs may be announced too.
        let mut expected = vec![
            Notification::Appended(id.clone()),
            Notification::CancelRequested(id.clone()),
        ];
        let heard = async {
            while let Some(heard) = news.next().await {
                expected.retain(|n| *n != heard);
                if expected.is_empty() {
                    return true;
                }
            }
            false
        };
        let heard = tokio::time::timeout(Duration::from_secs(5), heard).await;
        assert_eq!(heard, Ok(true), "{}: news of {id} missing", db.url);
    }
}

#[tokio::test]
async fn a_run_whose_request_went_away_before_its_insert_committed_is_discarded() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let (hub, writer) = EventHub::start(store.clone(), "a".into(), 64);
        let id = ids::new(ids::RESPONSE);
        // The request is polled once (its insert is queued), then dropped: the writer task
        // cannot have run in between.
        let insert = async {
            let inserted = hub.queue_insert(new_run(&id, 1, "a", 10)).await.unwrap();
            inserted.await
        };
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
                store.get_run(store::DEFAULT_TENANT, &id).await,
                Err(StoreError::NotFound)
            ),
            "{}",
            db.url
        );
        writer.finish(hub).await;
    }
}

#[tokio::test]
async fn a_live_stream_stops_at_the_runs_last_event_but_looks_for_more_after_a_pause() {
    use futures_util::StreamExt;
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let (hub, writer) = EventHub::start(store.clone(), "a".into(), 64);
        for ends_run in [true, false] {
            let id = ids::new(ids::RESPONSE);
            let inserted = hub.queue_insert(new_run(&id, 0, "a", 10)).await.unwrap();
            inserted.await.unwrap();
            let response_id: Arc<str> = Arc::from(id.as_str());
            let live = hub.open(&response_id, Arc::new(RunControl::default()));
            let events = hub.follow_new(response_id.clone());
            // Stored behind the stream's back, as a resumed run's next event would be.
            store
                .write_batch(&batch("a", &[], &[event(&id, 2)], &[]))
                .await;
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
            let url = &db.url;
            let seen: Vec<u64> = tokio::time::timeout(
                Duration::from_secs(5),
                events
                    .take(limit)
                    .map(|e| e.unwrap().sequence_number)
                    .collect(),
            )
            .await
            .unwrap_or_else(|_| panic!("{url}: the stream did not end (ends_run {ends_run})"));
            let expected: Vec<u64> = if ends_run { vec![0, 1] } else { vec![0, 1, 2] };
            assert_eq!(seen, expected, "{url}, ends_run {ends_run}");
            live.close().await;
        }
        writer.finish(hub).await;
    }
}

#[tokio::test]
async fn a_writer_whose_run_was_taken_over_stops_it_and_publishes_nothing_more_of_it() {
    use futures_util::StreamExt;
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let (hub, writer) = EventHub::start(store.clone(), "a".into(), 64);
        let id = ids::new(ids::RESPONSE);
        store.insert_run(&new_run(&id, 0, "a", 10)).await.unwrap();
        let response_id: Arc<str> = Arc::from(id.as_str());
        let control = Arc::new(RunControl::default());
        let live = hub.open(&response_id, control.clone());
        let mut events = Box::pin(hub.follow_new(response_id.clone()));
        hub.send(Arc::new(event(&id, 0))).await;
        hub.flush(response_id.clone()).await.unwrap();
        assert_eq!(events.next().await.unwrap().unwrap().sequence_number, 0);
        // Another instance takes it over (its lease ran out here).
        store
            .transition(&Change::new(&id, Transition::HAND_OVER, "a"))
            .await
            .unwrap();
        let lease = Lease {
            holder: "b".into(),
            until: at(99_000),
        };
        store
            .claim_stale(&id, &lease, at(1))
            .await
            .unwrap()
            .unwrap();
        hub.send(Arc::new(event(&id, 1))).await;
        assert!(hub.flush(response_id.clone()).await.is_err(), "{}", db.url);
        assert_eq!(
            control.reason(),
            Some(switchyard::engine::control::StopReason::Lost)
        );
        assert!(control.token().is_cancelled());
        assert_eq!(numbers(&*store, &id).await, [0]);
        live.close().await;
        drop((live, events));
        writer.finish(hub).await;
    }
}

/// A client call item with id `fc_…` and the given call id.
fn function_call(call_id: &str) -> Item {
    let mut item: Item = serde_json::from_value(json!({
        "type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}))
    .unwrap();
    item.normalise();
    item
}

#[tokio::test]
async fn output_items_of_paused_and_stopped_runs_are_found_by_id_and_call_id_within_their_tenant() {
    for db in backends().await {
        let store = store::connect(&db.url, 4).await.unwrap();
        let (paused, done, unstored) = (
            ids::new(ids::RESPONSE),
            ids::new(ids::RESPONSE),
            ids::new(ids::RESPONSE),
        );
        let call_id = format!("call_{}", ids::new("x"));
        let mut secret = new_run(&unstored, 0, "a", 10);
        secret.body.store = false;
        let runs = [
            new_run(&paused, 1, "a", 10),
            new_run(&done, 1, "a", 10),
            secret,
        ];
        store.write_batch(&batch("a", &runs, &[], &[])).await;
        let mut pause = ending(&paused, RunState::RequiresAction, 0, 1);
        pause.body.output = vec![message("thinking"), function_call(&call_id)];
        let mut stop = ending(&done, RunState::Completed, 0, 1);
        stop.body.output = vec![message("answer")];
        let mut gone = ending(&unstored, RunState::Completed, 0, 1);
        gone.body.output = vec![message("secret")];
        gone.body.store = false;
        let outcome = store
            .write_batch(&batch(
                "a",
                &[],
                &[],
                &[pause.clone(), stop.clone(), gone.clone()],
            ))
            .await;
        assert!(outcome.endings.iter().all(Result::is_ok), "{}", db.url);

        let call_item = pause.body.output[1].id().to_string();
        let answer = stop.body.output[0].id().to_string();
        let secret = gone.body.output[0].id().to_string();
        let input = store
            .input_items(store::DEFAULT_TENANT, &done)
            .await
            .unwrap()[0]
            .id()
            .to_string();
        let keys = [
            call_item.as_str(),
            answer.as_str(),
            secret.as_str(),
            input.as_str(),
        ];
        let found = store
            .find_items(store::DEFAULT_TENANT, &keys)
            .await
            .unwrap();
        let of = |id: &str| {
            found
                .iter()
                .filter(|f| f.item.id() == id)
                .collect::<Vec<_>>()
        };
        assert_eq!(of(&call_item)[0].response_id, paused, "{}", db.url);
        assert_eq!(of(&call_item)[0].state, RunState::RequiresAction);
        assert!(of(&call_item)[0].output);
        assert_eq!(of(&answer)[0].item, stop.body.output[0]);
        assert_eq!(of(&answer)[0].state, RunState::Completed);
        assert!(
            of(&secret).is_empty(),
            "a stopped store: false run is not indexed"
        );
        assert!(!of(&input)[0].output, "input items are found too");

        // A client call by its call id; another tenant finds nothing.
        let by_call = store
            .find_items(store::DEFAULT_TENANT, &[call_id.as_str()])
            .await
            .unwrap();
        assert_eq!(by_call.len(), 1, "{}", db.url);
        assert_eq!(by_call[0].item.id(), call_item);
        let other = store.find_items("other", &keys).await.unwrap();
        assert!(other.is_empty());

        // Deleting the run deletes its index.
        store
            .delete_run(store::DEFAULT_TENANT, &done)
            .await
            .unwrap();
        let found = store
            .find_items(store::DEFAULT_TENANT, &[answer.as_str()])
            .await
            .unwrap();
        assert!(found.is_empty(), "{}", db.url);
    }
}

#[tokio::test]
async fn unfinished_runs_are_counted_by_state() {
    // The counts are every run's of the test's database.
    for db in backends().await {
        let url = &db.url;
        let store = store::connect(url, 4).await.unwrap();
        assert_eq!(store.count_unfinished().await.unwrap(), vec![], "{url}");
        let running = ids::new(ids::RESPONSE);
        store
            .insert_run(&new_run(&running, 0, "a", 10))
            .await
            .unwrap();
        let mut queued = new_run(&ids::new(ids::RESPONSE), 0, "a", 10);
        queued.state = RunState::Queued;
        queued.lease = None;
        store.insert_run(&queued).await.unwrap();
        let ended = ids::new(ids::RESPONSE);
        store
            .insert_run(&new_run(&ended, 0, "a", 10))
            .await
            .unwrap();
        let change = end(&ended, RunState::Completed, "a", 2_000);
        store.transition(&change).await.unwrap();
        assert_eq!(state(&*store, &ended).await, RunState::Completed);
        let mut counts = store.count_unfinished().await.unwrap();
        counts.sort_by_key(|(state, _)| state.as_str());
        assert_eq!(
            counts,
            vec![(RunState::InProgress, 1), (RunState::Queued, 1)],
            "{url}"
        );
    }
}
