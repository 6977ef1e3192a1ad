//! The WebSocket transport of the Open Responses specification: `GET /v1/responses` upgraded
//! to a WebSocket. Each `response.create` message (a create request without the transport's
//! `stream` and `background`) creates a response; its events go out as text frames, exactly
//! the JSON of the SSE events, without `[DONE]`. One response at a time: the next message is
//! read once the response before it has ended. A failure before a response starts is an
//! `error` event with the HTTP status it would have had, and the socket goes on. The socket
//! remembers its most recent `store: false` response, so that the next one can continue it
//! with `previous_response_id` (see `SocketMemory`).

use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{Map, Value};

use super::extract::parse_json;
use super::state::AppState;
use crate::auth::Caller;
use crate::engine::SocketMemory;
use crate::error::ApiError;
use crate::protocol::request::CreateResponse;
use crate::protocol::response::ResponseObject;

/// How long a connection may last (Open Responses): then an error says so and it closes.
const CONNECTION_LIMIT: Duration = Duration::from_secs(60 * 60);

/// `GET /v1/responses` with `Upgrade: websocket` (the listing's handler hands it over): a
/// WebSocket on which each text message is a `response.create` request.
pub(super) fn accept(state: AppState, caller: Caller, upgrade: WebSocketUpgrade) -> Response {
    upgrade
        .max_message_size(state.body_limit)
        .on_upgrade(move |socket| session(state, caller, socket))
        .into_response()
}

async fn session(state: AppState, caller: Caller, mut socket: WebSocket) {
    let _open = crate::metrics::OpenStream::new(crate::metrics::Transport::WebSocket);
    let mut memory = SocketMemory::default();
    let deadline = tokio::time::Instant::now() + CONNECTION_LIMIT;
    loop {
        let message = tokio::select! {
            message = socket.recv() => message,
            _ = tokio::time::sleep_until(deadline) => {
                let limit = ApiError::InvalidRequest {
                    message: "The WebSocket connection reached its 60-minute limit; open a new one.".into(),
                    param: None,
                    code: Some("websocket_connection_limit_reached".into()),
                };
                let _ = send(&mut socket, &limit.websocket_event()).await;
                let _ = socket.send(Message::Close(None)).await;
                return;
            }
        };
        let text = match message {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Binary(bytes))) => match String::from_utf8(bytes.to_vec()) {
                Ok(text) => text.into(),
                Err(_) => {
                    let error = ApiError::invalid("", "Messages must be UTF-8 JSON text.");
                    if send(&mut socket, &error.websocket_event()).await.is_err() {
                        return;
                    }
                    continue;
                }
            },
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
        };
        if respond(&state, &caller, &mut socket, &mut memory, text.as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Creates the response a message asks for and streams its events; `Err` when the socket is
/// gone (the response goes on without it, as with SSE).
async fn respond(
    state: &AppState,
    caller: &Caller,
    socket: &mut WebSocket,
    memory: &mut SocketMemory,
    text: &[u8],
) -> Result<(), axum::Error> {
    let request = match create_request(text) {
        Ok(request) => request,
        Err(error) => return send(socket, &error.websocket_event()).await,
    };
    let previous = request.previous_response_id.clone();
    let started = match state.engine.create_on_socket(caller, request, memory).await {
        Ok(started) => started,
        Err(error) => {
            // A continuation that fails is not continued from memory again (Open Responses).
            if let Some(previous) = &previous {
                memory.forget(previous);
            }
            return send(socket, &ApiError::from(error).websocket_event()).await;
        }
    };
    let Some(mut events) = started.events else {
        return Ok(());
    };
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(error) => return send(socket, &ApiError::from(error).websocket_event()).await,
        };
        if let Some(response) = terminal_response(&event.event_type, &event.data) {
            if response.status == crate::protocol::response::ResponseStatus::Failed
                && let Some(previous) = &previous
            {
                memory.forget(previous);
            }
            memory.finished(&response);
        }
        socket
            .send(Message::Text(event.data.to_string().into()))
            .await?;
    }
    Ok(())
}

/// The create request of a `response.create` message: its other fields as the body of
/// `POST /v1/responses`, streamed. `stream` and `stream_options` belong to HTTP and are
/// ignored; a background response cannot be streamed on a socket.
fn create_request(text: &[u8]) -> Result<CreateResponse, ApiError> {
    let mut message: Map<String, Value> = parse_json(text)?;
    match message.remove("type") {
        Some(Value::String(kind)) if kind == "response.create" => {}
        Some(other) => {
            return Err(ApiError::invalid(
                "type",
                format!("Invalid value for 'type': {other}. Expected 'response.create'."),
            ));
        }
        None => {
            return Err(ApiError::invalid(
                "type",
                "Missing required parameter: 'type'.",
            ));
        }
    }
    if message.get("background") == Some(&Value::Bool(true)) {
        return Err(ApiError::invalid(
            "background",
            "Background responses cannot be created on a WebSocket; use POST /v1/responses.",
        ));
    }
    message.remove("background");
    message.remove("stream_options");
    message.insert("stream".into(), Value::Bool(true));
    let body = serde_json::to_vec(&message)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("cannot re-encode a message: {e}")))?;
    parse_json(&body)
}

/// The response a terminal event carries.
fn terminal_response(event_type: &str, data: &str) -> Option<ResponseObject> {
    #[derive(serde::Deserialize)]
    struct Terminal {
        response: ResponseObject,
    }
    if !matches!(
        event_type,
        "response.completed" | "response.failed" | "response.incomplete"
    ) {
        return None;
    }
    serde_json::from_str::<Terminal>(data)
        .ok()
        .map(|t| t.response)
}

async fn send(socket: &mut WebSocket, value: &Value) -> Result<(), axum::Error> {
    socket.send(Message::Text(value.to_string().into())).await
}
