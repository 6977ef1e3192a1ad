//! `POST /v1/responses/compact` (Open Responses): the model summarises a context window (the
//! chain of `previous_response_id` and the input); the answer is the window's user messages,
//! kept as they were, and one compaction item holding the summary. Nothing is stored: the
//! client starts a new response with the compacted window as its input.

use futures_util::StreamExt;

use super::{Engine, EngineError};
use crate::auth::Caller;
use crate::llm::{ModelEvent, ModelRequest};
use crate::protocol::field::FieldError;
use crate::protocol::ids;
use crate::protocol::items::{Compaction, ContentPart, Item, Message, Role};
use crate::protocol::request::{CompactRequest, check_input_size, parse_input};
use crate::protocol::response::{Compacted, Usage};
use crate::protocol::transcript::Entry;
use crate::time::UnixMillis;

/// What the model is told to do with the window.
const COMPACTION_INSTRUCTIONS: &str = "You compact conversations. Summarise the conversation \
above so that it can be continued from your summary alone: keep every fact, decision, \
commitment, open question, tool result and user preference that may matter later, with names, \
numbers and identifiers exactly as they were. Write the summary only, without a preamble.";

impl Engine {
    /// Compacts a context window; the model's failure is the caller's 502 or 504.
    pub async fn compact(
        &self,
        caller: &Caller,
        request: CompactRequest,
    ) -> Result<Compacted, EngineError> {
        let tenant_id = caller.tenant_id.as_str();
        let model = match request.model.as_deref() {
            Some(model) if !model.is_empty() => model.to_string(),
            _ => {
                return Err(
                    FieldError::new("model", "Missing required parameter: 'model'.").into(),
                );
            }
        };
        let client = self.client_for(&model, caller.policy())?;
        check_input_size(request.input.as_ref(), &self.inner.settings.limits)?;
        let input = self
            .resolve_input(tenant_id, parse_input(request.input.as_ref())?)
            .await?
            .items;
        let mut window = match &request.previous_response_id {
            Some(previous) => self.chain(tenant_id, previous).await?.0,
            None => Vec::new(),
        };
        window.extend(input.into_iter().map(Entry::Item));
        if window.is_empty() {
            return Err(FieldError::new("input", "Missing required parameter: 'input'.").into());
        }
        let mut items = window.clone();
        if let Some(instructions) = &request.instructions {
            items.insert(0, Entry::Item(text_message(Role::Developer, instructions)));
        }
        items.push(Entry::Item(text_message(
            Role::User,
            "Summarise the conversation so far as instructed.",
        )));
        let model_request = ModelRequest {
            model,
            instructions: Some(COMPACTION_INSTRUCTIONS.into()),
            items,
            ..ModelRequest::default()
        };
        let (summary, usage) = summarise(&*client, &model_request).await?;
        let mut output: Vec<Item> = window
            .into_iter()
            .filter_map(|entry| match entry {
                Entry::Item(Item::Message(m)) if m.role == Role::User => Some(Item::Message(m)),
                _ => None,
            })
            .collect();
        output.push(Item::Compaction(Compaction {
            id: ids::new(ids::COMPACTION),
            encrypted_content: summary,
            created_by: None,
            status: None,
        }));
        Ok(Compacted {
            id: ids::new(ids::COMPACTION_RESULT),
            object: "response.compaction".into(),
            output,
            created_at: UnixMillis::now().as_secs(),
            usage,
        })
    }
}

fn text_message(role: Role, text: &str) -> Item {
    Item::Message(Message {
        id: String::new(),
        role,
        content: vec![ContentPart::InputText {
            text: text.to_string(),
        }],
        status: None,
        phase: None,
    })
}

/// The model's text answer to `request`, and its usage.
async fn summarise(
    client: &dyn crate::llm::LlmClient,
    request: &ModelRequest,
) -> Result<(String, Usage), EngineError> {
    let upstream = |e: crate::llm::LlmError| EngineError::Upstream(e.into());
    let mut stream = client.stream(request).await.map_err(upstream)?;
    let mut text = String::new();
    let mut usage = Usage::default();
    while let Some(event) = stream.next().await {
        match event.map_err(upstream)? {
            ModelEvent::TextDelta(delta) => text.push_str(&delta),
            ModelEvent::Usage(turn) => usage.add(&turn),
            _ => {}
        }
    }
    Ok((text, usage))
}
