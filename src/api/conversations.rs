//! `/v1/conversations` handlers: the Conversations API.

use axum::Extension;
use axum::Json;
use axum::extract::{Path, State};

use super::extract::{ApiJson, ApiQuery};
use super::state::AppState;
use crate::auth::Caller;
use crate::engine::ItemPage;
use crate::error::ApiError;
use crate::protocol::conversation::{
    Conversation, ConversationDeleted, CreateConversation, CreateItems, ItemsQuery,
    UpdateConversation,
};
use crate::protocol::items::Item;
use crate::protocol::response::List;

/// `POST /v1/conversations`
#[utoipa::path(
    post,
    path = "/v1/conversations",
    tag = "conversations",
    operation_id = "createConversation",
    summary = "Create a conversation",
    description = "A conversation kept on the server, with up to 20 items to start with.",
    request_body = CreateConversation,
    responses(
        (status = 200, description = "The conversation.", body = Conversation),
        (status = 400, response = super::errors::BadRequest),
        (status = 408, response = super::errors::RequestTimeout),
        (status = 413, response = super::errors::PayloadTooLarge),
        (status = 415, response = super::errors::UnsupportedMediaType),
    ),
)]
pub async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<CreateConversation>,
) -> Result<Json<Conversation>, ApiError> {
    let items = body.items.unwrap_or_default();
    let conversation = state
        .engine
        .create_conversation(&caller.tenant_id, body.metadata, &items)
        .await?;
    Ok(Json(conversation))
}

/// `GET /v1/conversations/{id}`
#[utoipa::path(
    get,
    path = "/v1/conversations/{id}",
    tag = "conversations",
    operation_id = "getConversation",
    summary = "A conversation",
    params(("id" = String, Path, description = "The conversation's id (`conv_…`).")),
    responses(
        (status = 200, description = "The conversation.", body = Conversation),
        (status = 404, response = super::errors::NotFound),
    ),
)]
pub async fn retrieve(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Conversation>, ApiError> {
    Ok(Json(
        state.engine.conversation(&caller.tenant_id, &id).await?,
    ))
}

/// `POST /v1/conversations/{id}`
#[utoipa::path(
    post,
    path = "/v1/conversations/{id}",
    tag = "conversations",
    operation_id = "updateConversation",
    summary = "Replace a conversation's metadata",
    params(("id" = String, Path, description = "The conversation's id (`conv_…`).")),
    request_body = UpdateConversation,
    responses(
        (status = 200, description = "The conversation.", body = Conversation),
        (status = 400, response = super::errors::BadRequest),
        (status = 408, response = super::errors::RequestTimeout),
        (status = 413, response = super::errors::PayloadTooLarge),
        (status = 415, response = super::errors::UnsupportedMediaType),
        (status = 404, response = super::errors::NotFound),
    ),
)]
pub async fn update(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateConversation>,
) -> Result<Json<Conversation>, ApiError> {
    let conversation = state
        .engine
        .update_conversation(&caller.tenant_id, &id, body.metadata)
        .await?;
    Ok(Json(conversation))
}

/// `DELETE /v1/conversations/{id}`
#[utoipa::path(
    delete,
    path = "/v1/conversations/{id}",
    tag = "conversations",
    operation_id = "deleteConversation",
    summary = "Delete a conversation and its items",
    params(("id" = String, Path, description = "The conversation's id (`conv_…`).")),
    responses(
        (status = 200, description = "Deleted.", body = ConversationDeleted),
        (status = 404, response = super::errors::NotFound),
    ),
)]
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<ConversationDeleted>, ApiError> {
    state
        .engine
        .delete_conversation(&caller.tenant_id, &id)
        .await?;
    Ok(Json(ConversationDeleted {
        id,
        object: "conversation.deleted",
        deleted: true,
    }))
}

/// `POST /v1/conversations/{id}/items`
#[utoipa::path(
    post,
    path = "/v1/conversations/{id}/items",
    tag = "conversations",
    operation_id = "createConversationItems",
    summary = "Add items to a conversation",
    description = "Up to 20 items, after the conversation's last; an item id the conversation \
        has already is a 400 and nothing is added.",
    params(("id" = String, Path, description = "The conversation's id (`conv_…`).")),
    request_body = CreateItems,
    responses(
        (status = 200, description = "The items added, in order.", body = List<Item>),
        (status = 400, response = super::errors::BadRequest),
        (status = 408, response = super::errors::RequestTimeout),
        (status = 413, response = super::errors::PayloadTooLarge),
        (status = 415, response = super::errors::UnsupportedMediaType),
        (status = 404, response = super::errors::NotFound),
    ),
)]
pub async fn add_items(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CreateItems>,
) -> Result<Json<List<Item>>, ApiError> {
    let items = state
        .engine
        .add_conversation_items(&caller.tenant_id, &id, &body.items)
        .await?;
    Ok(Json(list(items, false)))
}

/// `GET /v1/conversations/{id}/items`
#[utoipa::path(
    get,
    path = "/v1/conversations/{id}/items",
    tag = "conversations",
    operation_id = "listConversationItems",
    summary = "A conversation's items",
    description = "Newest first by default (`order=asc` for oldest first), in the order they \
        were added.",
    params(
        ("id" = String, Path, description = "The conversation's id (`conv_…`)."),
        ItemsQuery,
    ),
    responses(
        (status = 200, description = "A page of items.", body = List<Item>),
        (status = 400, response = super::errors::BadRequest),
        (status = 404, response = super::errors::NotFound),
    ),
)]
pub async fn list_items(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    ApiQuery(query): ApiQuery<ItemsQuery>,
) -> Result<Json<List<Item>>, ApiError> {
    let page = ItemPage {
        limit: super::responses::page_limit(query.limit.as_deref())?,
        descending: super::responses::page_descending(query.order.as_deref())?,
        after: query.after,
    };
    let (items, has_more) = state
        .engine
        .conversation_items(&caller.tenant_id, &id, &page)
        .await?;
    Ok(Json(list(items, has_more)))
}

/// `GET /v1/conversations/{id}/items/{item_id}`
#[utoipa::path(
    get,
    path = "/v1/conversations/{id}/items/{item_id}",
    tag = "conversations",
    operation_id = "getConversationItem",
    summary = "One item of a conversation",
    params(
        ("id" = String, Path, description = "The conversation's id (`conv_…`)."),
        ("item_id" = String, Path, description = "The item's id."),
    ),
    responses(
        (status = 200, description = "The item.", body = Item),
        (status = 404, response = super::errors::NotFound),
    ),
)]
pub async fn retrieve_item(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, item_id)): Path<(String, String)>,
) -> Result<Json<Item>, ApiError> {
    let item = state
        .engine
        .conversation_item(&caller.tenant_id, &id, &item_id)
        .await?;
    Ok(Json(item))
}

/// `DELETE /v1/conversations/{id}/items/{item_id}`
#[utoipa::path(
    delete,
    path = "/v1/conversations/{id}/items/{item_id}",
    tag = "conversations",
    operation_id = "deleteConversationItem",
    summary = "Take an item out of a conversation",
    params(
        ("id" = String, Path, description = "The conversation's id (`conv_…`)."),
        ("item_id" = String, Path, description = "The item's id."),
    ),
    responses(
        (status = 200, description = "The conversation.", body = Conversation),
        (status = 404, response = super::errors::NotFound),
    ),
)]
pub async fn delete_item(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, item_id)): Path<(String, String)>,
) -> Result<Json<Conversation>, ApiError> {
    let conversation = state
        .engine
        .delete_conversation_item(&caller.tenant_id, &id, &item_id)
        .await?;
    Ok(Json(conversation))
}

fn list(items: Vec<Item>, has_more: bool) -> List<Item> {
    List {
        object: "list",
        first_id: items.first().map(|i| i.id().to_string()),
        last_id: items.last().map(|i| i.id().to_string()),
        data: items,
        has_more,
    }
}
