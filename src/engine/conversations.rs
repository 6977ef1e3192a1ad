//! The Conversations API: a tenant's conversations and their items, kept in the store.
//! Another tenant's conversation is answered exactly as one that does not exist.

use serde_json::{Map, Value};

use super::{Engine, EngineError, ItemPage};
use crate::protocol::conversation::{self, Conversation};
use crate::protocol::field::FieldError;
use crate::protocol::ids;
use crate::protocol::items::Item;
use crate::protocol::request::validate_metadata;
use crate::protocol::response::ResponseObject;
use crate::protocol::transcript::Entry;
use crate::store::{Appended, ConversationRecord, StoreError};
use crate::time::UnixMillis;

impl Engine {
    /// What a new response in the conversation `id` is shown before its input: the
    /// conversation's items, in order. An input item with an id the conversation has is a 400.
    pub(super) async fn conversation_context(
        &self,
        tenant_id: &str,
        id: &str,
        input: &[Item],
    ) -> Result<Vec<Entry>, EngineError> {
        let items = self
            .inner
            .store
            .conversation_history(tenant_id, id)
            .await
            .map_err(|e| missing_conversation(e, id))?;
        let known: std::collections::HashSet<&str> = items.iter().map(Item::id).collect();
        if let Some(item) = input.iter().find(|item| known.contains(item.id())) {
            return Err(FieldError::new(
                "input",
                format!("Duplicate item found with id {}.", item.id()),
            )
            .into());
        }
        Ok(items.into_iter().map(Entry::Item).collect())
    }

    /// What a stored response in a conversation was shown before its own items (to resume it
    /// or take it over): the conversation's items up to the first of its input or output.
    pub(super) async fn conversation_before(
        &self,
        tenant_id: &str,
        body: &ResponseObject,
        id: &str,
    ) -> Result<Vec<Entry>, EngineError> {
        let items = match self.inner.store.conversation_history(tenant_id, id).await {
            Ok(items) => items,
            // Deleted meanwhile: the response goes on with its own items only.
            Err(StoreError::NotFound) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let input = self.inner.store.input_items(tenant_id, &body.id).await?;
        let own: std::collections::HashSet<&str> =
            input.iter().chain(&body.output).map(Item::id).collect();
        Ok(items
            .into_iter()
            .take_while(|item| !own.contains(item.id()))
            .map(Entry::Item)
            .collect())
    }

    /// A new conversation with its first items.
    pub async fn create_conversation(
        &self,
        tenant_id: &str,
        metadata: Option<Map<String, Value>>,
        items: &[Value],
    ) -> Result<Conversation, EngineError> {
        let metadata = metadata.unwrap_or_default();
        validate_metadata(&metadata, &self.inner.settings.limits)?;
        let items = conversation::parse_items(items)?;
        if let Some(id) = first_repeated(&items) {
            return Err(duplicate(&id));
        }
        let record = ConversationRecord {
            id: ids::new_conversation(),
            tenant_id: tenant_id.to_string(),
            created_at: UnixMillis::now(),
            metadata: Value::Object(metadata).to_string(),
        };
        self.inner
            .store
            .create_conversation(&record, &items)
            .await?;
        shown(record)
    }

    pub async fn conversation(
        &self,
        tenant_id: &str,
        id: &str,
    ) -> Result<Conversation, EngineError> {
        let found = self.inner.store.get_conversation(tenant_id, id).await;
        shown(found.map_err(|e| missing_conversation(e, id))?)
    }

    pub async fn update_conversation(
        &self,
        tenant_id: &str,
        id: &str,
        metadata: Map<String, Value>,
    ) -> Result<Conversation, EngineError> {
        validate_metadata(&metadata, &self.inner.settings.limits)?;
        let updated = self
            .inner
            .store
            .update_conversation(tenant_id, id, &Value::Object(metadata).to_string())
            .await;
        shown(updated.map_err(|e| missing_conversation(e, id))?)
    }

    pub async fn delete_conversation(&self, tenant_id: &str, id: &str) -> Result<(), EngineError> {
        let deleted = self.inner.store.delete_conversation(tenant_id, id).await;
        deleted.map_err(|e| missing_conversation(e, id))
    }

    /// Appends items after the conversation's last; an id it has already is a 400 and
    /// nothing is appended.
    pub async fn add_conversation_items(
        &self,
        tenant_id: &str,
        id: &str,
        items: &[Value],
    ) -> Result<Vec<Item>, EngineError> {
        let items = conversation::parse_items(items)?;
        if let Some(repeated) = first_repeated(&items) {
            return Err(duplicate(&repeated));
        }
        let appended = self
            .inner
            .store
            .append_conversation_items(tenant_id, id, &items, UnixMillis::now())
            .await
            .map_err(|e| missing_conversation(e, id))?;
        match appended {
            Appended::Items(items) => Ok(items),
            Appended::Duplicate(item_id) => Err(duplicate(&item_id)),
        }
    }

    pub async fn conversation_items(
        &self,
        tenant_id: &str,
        id: &str,
        page: &ItemPage,
    ) -> Result<(Vec<Item>, bool), EngineError> {
        let listed = self
            .inner
            .store
            .list_conversation_items(
                tenant_id,
                id,
                page.limit,
                page.order(),
                page.after.as_deref(),
            )
            .await;
        match listed {
            Ok(found) => Ok(found),
            // No such conversation (its 404), or no such item to start after.
            Err(StoreError::NotFound) => {
                self.conversation(tenant_id, id).await?;
                Err(FieldError::new(
                    "after",
                    format!(
                        "Invalid 'after': no item with id '{}' in this conversation.",
                        page.after.as_deref().unwrap_or_default()
                    ),
                )
                .into())
            }
            Err(other) => Err(other.into()),
        }
    }

    pub async fn conversation_item(
        &self,
        tenant_id: &str,
        id: &str,
        item_id: &str,
    ) -> Result<Item, EngineError> {
        let found = self
            .inner
            .store
            .get_conversation_item(tenant_id, id, item_id)
            .await;
        match found {
            Ok(item) => Ok(item),
            // No such conversation (its 404), or no such item in it.
            Err(StoreError::NotFound) => {
                self.conversation(tenant_id, id).await?;
                Err(missing_item(StoreError::NotFound, item_id))
            }
            Err(other) => Err(other.into()),
        }
    }

    /// Takes an item out of a conversation; the conversation as it is then.
    pub async fn delete_conversation_item(
        &self,
        tenant_id: &str,
        id: &str,
        item_id: &str,
    ) -> Result<Conversation, EngineError> {
        let conversation = self.conversation(tenant_id, id).await?;
        let deleted = self
            .inner
            .store
            .delete_conversation_item(tenant_id, id, item_id)
            .await;
        deleted.map_err(|e| missing_item(e, item_id))?;
        Ok(conversation)
    }
}

/// The conversation as the API shows it.
fn shown(record: ConversationRecord) -> Result<Conversation, EngineError> {
    let metadata = match serde_json::from_str(&record.metadata) {
        Ok(Value::Object(map)) => map,
        _ => {
            return Err(EngineError::Internal(std::sync::Arc::new(
                StoreError::Corrupt(crate::store::Cause::new(format!(
                    "conversation {} has metadata that is not a JSON object",
                    record.id
                ))),
            )));
        }
    };
    Ok(Conversation {
        id: record.id,
        object: "conversation",
        created_at: record.created_at.as_secs(),
        metadata,
    })
}

fn missing_conversation(error: StoreError, id: &str) -> EngineError {
    match error {
        StoreError::NotFound => {
            EngineError::Missing(format!("Conversation with id '{id}' not found."))
        }
        other => other.into(),
    }
}

fn missing_item(error: StoreError, item_id: &str) -> EngineError {
    match error {
        StoreError::NotFound => {
            EngineError::Missing(format!("Item with id '{item_id}' not found."))
        }
        other => other.into(),
    }
}

/// OpenAI's words for an item id a conversation has already.
fn duplicate(id: &str) -> EngineError {
    FieldError::new("items", format!("Duplicate item found with id {id}.")).into()
}

/// The first id that comes twice among `items`.
fn first_repeated(items: &[Item]) -> Option<String> {
    let mut seen = std::collections::HashSet::new();
    items
        .iter()
        .map(Item::id)
        .find(|id| !seen.insert(*id))
        .map(str::to_string)
}

/// A conversation a response could not take as it was stored or resumed: another response
/// holds it (OpenAI's 400 `conversation_locked`), or it is gone.
pub(super) fn not_taken(error: StoreError, body: &ResponseObject) -> EngineError {
    let id = body.conversation.as_ref().map_or("", |c| c.id.as_str());
    match error {
        StoreError::Locked => EngineError::Invalid(
            FieldError::new(
                "conversation",
                "Another process is currently operating on this conversation. Please retry in a few seconds.",
            ),
            Some("conversation_locked"),
        ),
        other => missing_conversation(other, id),
    }
}
