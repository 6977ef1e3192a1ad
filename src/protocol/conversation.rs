//! The Conversations API's wire types (`/v1/conversations`): a conversation, its deletion, and
//! the request bodies, each problem a 400 naming its field.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use super::field::FieldError;
use super::items::Item;
use super::request::{InputEntry, parse_item};

/// Items one create (of a conversation, or of items) may carry.
pub const MAX_ITEMS: usize = 20;

/// `{"id": "conv_…", "object": "conversation", "created_at", "metadata"}`
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Conversation {
    /// `conv_` and 48 hex digits.
    pub id: String,
    /// Always `conversation`.
    #[schema(schema_with = object_conversation)]
    pub object: &'static str,
    /// Unix seconds.
    pub created_at: i64,
    /// Up to 16 string pairs.
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
}

/// `{"id", "object": "conversation.deleted", "deleted": true}`
#[derive(Debug, Serialize, ToSchema)]
pub struct ConversationDeleted {
    pub id: String,
    /// Always `conversation.deleted`.
    #[schema(schema_with = object_conversation_deleted)]
    pub object: &'static str,
    pub deleted: bool,
}

fn object_conversation() -> utoipa::openapi::schema::Object {
    super::schema::constant("conversation")
}

fn object_conversation_deleted() -> utoipa::openapi::schema::Object {
    super::schema::constant("conversation.deleted")
}

/// Body of `POST /v1/conversations`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateConversation {
    /// Up to 16 string pairs.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    /// Up to 20 items to start with, as `input` items of a response.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub items: Option<Vec<Value>>,
}

/// Body of `POST /v1/conversations/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateConversation {
    /// Replaces the metadata.
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
}

/// Body of `POST /v1/conversations/{id}/items`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateItems {
    /// Up to 20 items, as `input` items of a response.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<Value>,
}

/// Query of the item endpoints (`include[]` is accepted and ignored).
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ItemsQuery {
    /// Items on a page, 1 to 100 (default 20).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100)]
    pub limit: Option<String>,
    /// `asc` or `desc` (default).
    #[param(value_type = Option<String>, pattern = "^(asc|desc)$")]
    pub order: Option<String>,
    /// An item id of this conversation: the page starts after it.
    pub after: Option<String>,
}

/// Items as the Conversations API takes them: at most [`MAX_ITEMS`], each parsed as an `input`
/// item (ids and statuses filled in), at `items[i]`; a reference to another item is refused.
pub fn parse_items(values: &[Value]) -> Result<Vec<Item>, FieldError> {
    if values.len() > MAX_ITEMS {
        return Err(FieldError::new(
            "items",
            format!(
                "Invalid 'items': array too long. Expected an array with maximum length {MAX_ITEMS}, but got an array with length {} instead.",
                values.len()
            ),
        ));
    }
    let mut items = Vec::with_capacity(values.len());
    for (index, value) in values.iter().enumerate() {
        let path = format!("items[{index}]");
        match parse_item(value, &path)? {
            InputEntry::Item(mut item) => {
                item.normalise();
                items.push(item);
            }
            InputEntry::Reference(_) => {
                return Err(FieldError::new(
                    path,
                    "Item references are not supported in a conversation's items; give the item itself.",
                ));
            }
        }
    }
    Ok(items)
}
