//! The run inspector (`/ui`, SPEC §17): HTML pages, served by the binary, to watch runs and
//! answer them. The list of a tenant's runs, a page per run (its timeline from the stored
//! event log, live while it runs), the forms that answer a pause or cancel a run — through the
//! same engine calls as the API, so an answer counts exactly once whichever tab or client
//! gives it.
//!
//! Access: in open mode nobody signs in; in key mode a person signs in with an API key, kept
//! in a cookie only this path gets (`HttpOnly`: no script reads it; `SameSite=Strict`: no other
//! site's page sends it; `Secure` behind TLS) and checked on every request like the
//! `Authorization` header, so a revoked key ends its sessions as it ends its API access (within
//! the key cache's few seconds). Every form that changes
//! something carries a CSRF token (double submit: the token equals a random cookie of its own),
//! and a request from another origin is refused.
//!
//! Hostile content (model output, tool arguments and outputs, metadata): the templates escape
//! every value (askama); no page has an inline script or handler, the one script builds
//! nothing from markup strings, and the Content-Security-Policy allows scripts, styles and
//! connections from this origin only.

mod view;

use askama::Template;
use axum::Form;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use futures_util::StreamExt as _;
use serde::Deserialize;

use super::responses::run_filter;
use super::state::AppState;
use crate::auth::{AuthError, Caller};
use crate::engine::{EngineError, Inspection};
use crate::error::ApiError;
use crate::protocol::items::ToolOutput;
use crate::protocol::request::{ListResponses, SubmitToolOutputs, SubmittedOutput, ToolApproval};
use crate::store::RunState;
use crate::time::UnixMillis;
use view::{Content, Entry, Row};

const SESSION_COOKIE: &str = "switchyard_session";
const CSRF_COOKIE: &str = "switchyard_csrf";
/// Runs on a page of the list.
const PAGE: u32 = 50;

const SCRIPT: &str = include_str!("../../../assets/ui/inspector.js");
const STYLE: &str = include_str!("../../../assets/ui/inspector.css");

/// Scripts, styles and connections from this origin only; no plugins, frames or inline code.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
    connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The inspector's routes (the caller checks `[ui] enabled`).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui", get(list_page))
        .route("/ui/", get(|| async { Redirect::to("/ui") }))
        .route("/ui/sign-in", get(sign_in_page).post(sign_in))
        .route("/ui/sign-out", post(sign_out))
        .route("/ui/responses/{id}", get(run_page))
        .route("/ui/responses/{id}/events", get(run_events))
        .route("/ui/responses/{id}/answer", post(answer))
        .route("/ui/responses/{id}/cancel", post(cancel))
        .route("/ui/assets/inspector.js", get(script))
        .route("/ui/assets/inspector.css", get(style))
        .layer(axum::middleware::map_response(protect))
}

/// The headers every inspector response carries.
async fn protect(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        // Not `no-referrer`: with it a browser sends `Origin: null` on the pages' own forms.
        HeaderValue::from_static("same-origin"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}

// ------------------------------------------------------------------ who is asking

/// A request's cookies, by name.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Whether the page was reached over TLS (directly or through a proxy that says so).
fn over_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|proto| proto.eq_ignore_ascii_case("https"))
}

/// A `Set-Cookie` value for this path; `None` deletes the cookie.
fn set_cookie(name: &str, value: Option<&str>, headers: &HeaderMap) -> HeaderValue {
    let secure = if over_tls(headers) { "; Secure" } else { "" };
    let text = match value {
        Some(value) => format!("{name}={value}; Path=/ui; HttpOnly; SameSite=Strict{secure}"),
        None => format!("{name}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    };
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The caller a request's session stands for: everyone in open mode, the signed-in key's
/// tenant in key mode; `None` without a valid session. A read (`metered` false) does not count
/// against the key's request rate, a change does, as the API's requests do.
async fn caller(
    state: &AppState,
    headers: &HeaderMap,
    metered: bool,
) -> Result<Option<Caller>, AuthError> {
    if state.auth.is_open() {
        return Ok(Some(Caller::open()));
    }
    let Some(key) = cookie(headers, SESSION_COOKIE).and_then(|key| {
        form_urlencoded::parse(format!("k={key}").as_bytes())
            .next()
            .map(|(_, value)| format!("Bearer {value}"))
    }) else {
        return Ok(None);
    };
    let found = match metered {
        true => state.auth.authenticate(Some(&key)).await,
        false => state.auth.identify(Some(&key)).await,
    };
    match found {
        Ok(caller) => Ok(Some(caller)),
        Err(AuthError::Missing | AuthError::Invalid(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The CSRF token of this browser (its cookie's value), and the cookie to set when it had
/// none yet.
fn csrf(headers: &HeaderMap) -> (String, Option<HeaderValue>) {
    match cookie(headers, CSRF_COOKIE).filter(|t| t.len() == 32) {
        Some(token) => (token.to_owned(), None),
        None => {
            let token = crate::auth::os_random_hex(16);
            let set = set_cookie(CSRF_COOKIE, Some(&token), headers);
            (token, Some(set))
        }
    }
}

/// A form that changes something must come from this origin and carry this browser's token.
fn check_form(headers: &HeaderMap, token: &str) -> Result<(), Page> {
    let cross_site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|site| site == "cross-site");
    // The address the browser used: a proxy's `X-Forwarded-Host`, else `Host`.
    let host = headers
        .get("x-forwarded-host")
        .or(headers.get(header::HOST))
        .and_then(|v| v.to_str().ok());
    // `Origin: null` (a privacy setting, a sandboxed page) says nothing either way: the
    // token and `Sec-Fetch-Site` decide.
    let origin = headers
        .get(header::ORIGIN)
        .filter(|o| o.as_bytes() != b"null");
    let foreign_origin = match (origin, host) {
        (Some(origin), Some(host)) => {
            let origin = origin.to_str().unwrap_or_default();
            let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
            origin_host != host
        }
        _ => false,
    };
    let expected = cookie(headers, CSRF_COOKIE);
    if cross_site || foreign_origin || expected.is_none() || expected != Some(token) {
        return Err(Page::message(
            StatusCode::FORBIDDEN,
            "This form is out of date or came from another site; reload the page and try again.",
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------ pages

/// What every page's frame needs.
struct Frame {
    csrf: String,
    set_csrf: Option<HeaderValue>,
    signed_in: bool,
    read_only: bool,
}

impl Frame {
    fn of(state: &AppState, headers: &HeaderMap) -> Frame {
        let (csrf, set_csrf) = csrf(headers);
        Frame {
            csrf,
            set_csrf,
            signed_in: !state.auth.is_open(),
            read_only: state.ui.read_only,
        }
    }
}

/// A rendered page (or a redirect), with its status and cookies.
struct Page {
    status: StatusCode,
    body: Result<String, askama::Error>,
    cookies: Vec<HeaderValue>,
}

impl Page {
    fn of(status: StatusCode, template: &impl Template, frame: &Frame) -> Page {
        Page {
            status,
            body: template.render(),
            cookies: frame.set_csrf.iter().cloned().collect(),
        }
    }

    /// A page that says one thing (an error, mostly), in an alert.
    fn message(status: StatusCode, message: &str) -> Page {
        let template = MessagePage {
            title: status.canonical_reason().unwrap_or("Error"),
            message,
            csrf: "",
            signed_in: false,
        };
        Page {
            status,
            body: template.render(),
            cookies: Vec::new(),
        }
    }
}

impl IntoResponse for Page {
    fn into_response(self) -> Response {
        let mut response = match self.body {
            Ok(html) => (
                self.status,
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                html,
            )
                .into_response(),
            Err(e) => ApiError::Internal(anyhow::anyhow!("an inspector page did not render: {e}"))
                .into_response(),
        };
        for cookie in self.cookies {
            response.headers_mut().append(header::SET_COOKIE, cookie);
        }
        response
    }
}

/// An API refusal or a fault, as a page: its status and the API's own message.
fn refusal(e: impl Into<ApiError>) -> (StatusCode, String) {
    let e: ApiError = e.into();
    let shown = e.shown_message();
    (e.status_code(), shown)
}

#[derive(Template)]
#[template(path = "ui/message.html")]
struct MessagePage<'a> {
    title: &'a str,
    message: &'a str,
    csrf: &'a str,
    signed_in: bool,
}

#[derive(Template)]
#[template(path = "ui/sign_in.html")]
struct SignInPage<'a> {
    csrf: &'a str,
    signed_in: bool,
    error: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "ui/list.html")]
struct ListPage<'a> {
    csrf: &'a str,
    signed_in: bool,
    rows: Vec<Row>,
    form: &'a ListForm,
    statuses: Vec<(&'static str, bool)>,
    error: Option<String>,
    older: Option<String>,
    /// The first page with the same filters, on a later page.
    newest: Option<String>,
}

#[derive(Template)]
#[template(path = "ui/run.html")]
struct RunPage<'a> {
    csrf: &'a str,
    signed_in: bool,
    read_only: bool,
    id: &'a str,
    status: &'a str,
    summary: Vec<(&'static str, String)>,
    metadata: Vec<(String, String)>,
    entries: Vec<Entry>,
    input: Vec<(String, String)>,
    calls: Vec<PendingCallView>,
    approvals: Vec<PendingApprovalView>,
    cancellable: bool,
    live: bool,
    after: String,
    error: Option<String>,
}

struct PendingCallView {
    call_id: String,
    name: String,
    arguments: String,
}

struct PendingApprovalView {
    id: String,
    title: String,
    arguments: String,
}

// ------------------------------------------------------------------ sign in and out

async fn sign_in_page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if state.auth.is_open() || matches!(caller(&state, &headers, false).await, Ok(Some(_))) {
        return Redirect::to("/ui").into_response();
    }
    let frame = Frame::of(&state, &headers);
    let page = SignInPage {
        csrf: &frame.csrf,
        signed_in: false,
        error: None,
    };
    Page::of(StatusCode::OK, &page, &frame).into_response()
}

#[derive(Deserialize)]
struct SignInForm {
    #[serde(default)]
    api_key: String,
    #[serde(default)]
    csrf: String,
}

async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<SignInForm>,
) -> Response {
    if let Err(page) = check_form(&headers, &form.csrf) {
        return page.into_response();
    }
    if state.auth.is_open() {
        return Redirect::to("/ui").into_response();
    }
    let key = form.api_key.trim();
    // Signing in changes no run: not counted against the key's rate, as the pages are not.
    match state.auth.identify(Some(&format!("Bearer {key}"))).await {
        Ok(_) => {
            let value: String = form_urlencoded::byte_serialize(key.as_bytes()).collect();
            let mut response = Redirect::to("/ui").into_response();
            response.headers_mut().append(
                header::SET_COOKIE,
                set_cookie(SESSION_COOKIE, Some(&value), &headers),
            );
            response
        }
        Err(e) => {
            let (status, message) = refusal(e);
            let frame = Frame::of(&state, &headers);
            let message = format!("That API key was not accepted: {message}");
            let page = SignInPage {
                csrf: &frame.csrf,
                signed_in: false,
                error: Some(&message),
            };
            Page::of(status, &page, &frame).into_response()
        }
    }
}

#[derive(Deserialize)]
struct TokenForm {
    #[serde(default)]
    csrf: String,
}

async fn sign_out(headers: HeaderMap, Form(form): Form<TokenForm>) -> Response {
    if let Err(page) = check_form(&headers, &form.csrf) {
        return page.into_response();
    }
    let mut response = Redirect::to("/ui/sign-in").into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(SESSION_COOKIE, None, &headers),
    );
    response
}

/// The signed-in caller, or the way to the sign-in page (for a page) or a 401 (otherwise).
async fn signed_in(
    state: &AppState,
    headers: &HeaderMap,
    method: &Method,
) -> Result<Caller, Response> {
    match caller(state, headers, method != Method::GET).await {
        Ok(Some(caller)) => Ok(caller),
        // Over the key's rate, or the keys cannot be read: said as the API says it.
        Err(e) => {
            let (status, message) = refusal(e);
            Err(Page::message(status, &message).into_response())
        }
        Ok(None) if method == Method::GET && !is_fetch(headers) => {
            Err(Redirect::to("/ui/sign-in").into_response())
        }
        Ok(None) => Err(Page::message(
            StatusCode::UNAUTHORIZED,
            "Your session ended: sign in again.",
        )
        .into_response()),
    }
}

/// A request the page's own script makes (it refreshes what it shows).
fn is_fetch(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-dest")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|dest| dest == "empty")
}

// ------------------------------------------------------------------ the run list

/// The list's filters, as the page's form sends them.
#[derive(Debug, Default, Deserialize)]
struct ListForm {
    #[serde(default)]
    status: String,
    #[serde(default)]
    model: String,
    /// `key=value`
    #[serde(default)]
    metadata: String,
    /// `YYYY-MM-DDTHH:MM`, UTC.
    #[serde(default)]
    created_after: String,
    #[serde(default)]
    created_before: String,
    #[serde(default)]
    waiting: String,
    #[serde(default)]
    after: String,
}

const STATUSES: [&str; 8] = [
    "queued",
    "in_progress",
    "requires_action",
    "completed",
    "failed",
    "incomplete",
    "cancelled",
    "expired",
];

async fn list_page(
    State(state): State<AppState>,
    method: Method,
    headers: HeaderMap,
    Query(form): Query<ListForm>,
) -> Response {
    let caller = match signed_in(&state, &headers, &method).await {
        Ok(caller) => caller,
        Err(response) => return response,
    };
    let frame = Frame::of(&state, &headers);
    let listed = async {
        let listing = list_query(&form)?;
        let metadata = match form.metadata.trim() {
            "" => Vec::new(),
            pair => match pair.split_once('=') {
                Some((key, value)) => vec![(key.trim().to_owned(), value.trim().to_owned())],
                None => {
                    return Err(ApiError::invalid(
                        "metadata",
                        format!("Invalid metadata filter '{pair}': write it as key=value."),
                    ));
                }
            },
        };
        let filter = run_filter(&listing, metadata)?;
        let after = Some(form.after.as_str()).filter(|id| !id.is_empty());
        Ok::<_, ApiError>(
            state
                .engine
                .list(&caller.tenant_id, &filter, PAGE, after)
                .await?,
        )
    };
    let (status, rows, more, error) = match listed.await {
        Ok((runs, more)) => {
            let now = UnixMillis::now();
            let rows: Vec<Row> = runs.iter().map(|run| Row::of(run, now)).collect();
            (StatusCode::OK, rows, more, None)
        }
        Err(e) => {
            let (status, message) = refusal(e);
            (status, Vec::new(), false, Some(message))
        }
    };
    let older = more
        .then(|| rows.last().map(|row| list_link(&form, Some(&row.id))))
        .flatten();
    let page = ListPage {
        csrf: &frame.csrf,
        signed_in: frame.signed_in,
        rows,
        form: &form,
        statuses: STATUSES.iter().map(|s| (*s, form.status == *s)).collect(),
        error,
        older,
        newest: (!form.after.is_empty()).then(|| list_link(&form, None)),
    };
    Page::of(status, &page, &frame).into_response()
}

/// The list with the same filters: after `id` (the next page), or from the newest.
fn list_link(form: &ListForm, after: Option<&str>) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (key, value) in [
        ("status", &form.status),
        ("model", &form.model),
        ("metadata", &form.metadata),
        ("created_after", &form.created_after),
        ("created_before", &form.created_before),
        ("waiting", &form.waiting),
    ] {
        if !value.is_empty() {
            query.append_pair(key, value);
        }
    }
    if let Some(id) = after {
        query.append_pair("after", id);
    }
    format!("/ui?{}", query.finish())
}

/// The API's listing query for the page's form (times in UTC, the checkbox as `waiting`).
fn list_query(form: &ListForm) -> Result<ListResponses, ApiError> {
    let time = |name: &str, text: &str| -> Result<Option<String>, ApiError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(None);
        }
        let parsed = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M")
            .or_else(|_| chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S"))
            .map_err(|_| {
                ApiError::invalid(
                    name,
                    format!("Invalid '{name}': expected a date and time (YYYY-MM-DDTHH:MM, UTC), but got '{text}' instead."),
                )
            })?;
        Ok(Some(parsed.and_utc().timestamp().to_string()))
    };
    Ok(ListResponses {
        limit: None,
        after: None,
        status: Some(form.status.clone()),
        model: Some(form.model.trim().to_owned()),
        created_after: time("created_after", &form.created_after)?,
        created_before: time("created_before", &form.created_before)?,
        waiting: (form.waiting == "true").then(|| "true".to_owned()),
    })
}

// ------------------------------------------------------------------ a run

async fn run_page(
    State(state): State<AppState>,
    method: Method,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let caller = match signed_in(&state, &headers, &method).await {
        Ok(caller) => caller,
        Err(response) => return response,
    };
    show_run(&state, &headers, &caller, &id, StatusCode::OK, None).await
}

/// A run's page, with `error` (a refused answer) in its alert.
async fn show_run(
    state: &AppState,
    headers: &HeaderMap,
    caller: &Caller,
    id: &str,
    status: StatusCode,
    error: Option<String>,
) -> Response {
    let frame = Frame::of(state, headers);
    let inspection = match state.engine.inspect(&caller.tenant_id, id).await {
        Ok(inspection) => inspection,
        Err(e) => {
            let (status, message) = refusal(e);
            return Page::message(status, &message).into_response();
        }
    };
    let content = Content {
        shown: state.ui.show_content,
    };
    let page = run_view(&inspection, content, &frame, error);
    Page::of(status, &page, &frame).into_response()
}

fn run_view<'a>(
    inspection: &'a Inspection,
    content: Content,
    frame: &'a Frame,
    error: Option<String>,
) -> RunPage<'a> {
    let run = &inspection.run;
    let body = &run.body;
    let row = Row::of(run, UnixMillis::now());
    let mut summary = vec![
        ("Model", body.model.clone()),
        ("Started (UTC)", row.started),
        ("Duration", row.duration),
    ];
    if let Some(usage) = &body.usage {
        summary.push((
            "Tokens",
            format!(
                "{} in ({} cached), {} out ({} reasoning), {} in all",
                usage.input_tokens,
                usage.input_tokens_details.cached_tokens,
                usage.output_tokens,
                usage.output_tokens_details.reasoning_tokens,
                usage.total_tokens
            ),
        ));
    }
    if let Some(previous) = &body.previous_response_id {
        summary.push(("Continues", previous.clone()));
    }
    if let Some(conversation) = &body.conversation {
        summary.push(("Conversation", conversation.id.clone()));
    }
    if let Some(error) = &body.error {
        summary.push(("Error", content.text(&error.message)));
    }
    let metadata = body
        .metadata
        .iter()
        .map(|(key, value)| {
            let value = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            (key.clone(), content.text(&value))
        })
        .collect();
    let paused = run.state == RunState::RequiresAction && !frame.read_only;
    let pending = body
        .required_action
        .as_ref()
        .map(|action| action.submit_tool_outputs.clone())
        .unwrap_or_default();
    let calls = match paused {
        true => pending
            .tool_calls
            .iter()
            .map(|call| PendingCallView {
                call_id: call.id.clone(),
                name: call.function.name.clone(),
                arguments: content.text(&call.function.arguments),
            })
            .collect(),
        false => Vec::new(),
    };
    let approvals = match paused {
        true => pending
            .approval_requests
            .iter()
            .map(|request| PendingApprovalView {
                id: request.id.clone(),
                title: format!("{} / {}", request.server_label, request.name),
                arguments: content.text(&request.arguments),
            })
            .collect(),
        false => Vec::new(),
    };
    let cancellable = !frame.read_only
        && matches!(
            run.state,
            RunState::Queued | RunState::InProgress | RunState::RequiresAction
        );
    RunPage {
        csrf: &frame.csrf,
        signed_in: frame.signed_in,
        read_only: frame.read_only,
        id: &body.id,
        status: run.state.as_str(),
        summary,
        metadata,
        entries: view::timeline(inspection, content),
        input: view::input_lines(&inspection.input, content),
        calls,
        approvals,
        cancellable,
        live: matches!(run.state, RunState::Queued | RunState::InProgress),
        after: view::last_sequence(&inspection.events).map_or_else(String::new, |n| n.to_string()),
        error,
    }
}

#[derive(Deserialize)]
struct EventsQuery {
    starting_after: Option<u64>,
}

/// What the run's page follows: the number of each event after the page's last, as it is
/// stored (the same follower as the API's stream: across replicas, until the run stops or
/// pauses), then `[DONE]`. The page fetches itself again on them; the events' content never
/// goes through the script.
async fn run_events(
    State(state): State<AppState>,
    method: Method,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
) -> Response {
    let caller = match signed_in(&state, &headers, &method).await {
        Ok(caller) => caller,
        Err(response) => return response,
    };
    // A reconnection goes on from the last number it got.
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .or(query.starting_after);
    let events = match state.engine.follow(&caller.tenant_id, &id, after).await {
        Ok(events) => events,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let numbers = events
        .take_while(|event| std::future::ready(event.is_ok()))
        .filter_map(|event| {
            std::future::ready(event.ok().map(|event| {
                let n = event.sequence_number.to_string();
                Ok::<_, std::convert::Infallible>(SseEvent::default().id(&n).data(n))
            }))
        })
        .chain(futures_util::stream::once(std::future::ready(Ok(
            SseEvent::default().data("[DONE]"),
        ))));
    Sse::new(numbers)
        .keep_alive(KeepAlive::new().interval(state.heartbeat))
        .into_response()
}

/// The pause's answer: `output:CALL_ID` fields, and `approval:REQUEST_ID` = `approve` or
/// `deny` (or a `decision` button `approve:REQUEST_ID` / `deny:REQUEST_ID`).
async fn answer(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let token = fields
        .iter()
        .find(|(name, _)| name == "csrf")
        .map_or("", |(_, value)| value.as_str());
    let caller = match changer(&state, &headers, token).await {
        Ok(caller) => caller,
        Err(response) => return response,
    };
    let mut submission = SubmitToolOutputs {
        tool_outputs: Vec::new(),
        tool_approvals: Vec::new(),
        stream: Some(false),
    };
    for (name, value) in &fields {
        if let Some(call_id) = name.strip_prefix("output:") {
            submission.tool_outputs.push(SubmittedOutput {
                tool_call_id: call_id.to_owned(),
                output: ToolOutput::Text(value.clone()),
            });
        }
        let decision = match (name.strip_prefix("approval:"), name.as_str()) {
            (Some(request), _) => Some((request, value.as_str())),
            (None, "decision") => value
                .split_once(':')
                .map(|(verdict, request)| (request, verdict)),
            _ => None,
        };
        if let Some((request, verdict)) = decision {
            submission.tool_approvals.push(ToolApproval {
                approval_request_id: request.to_owned(),
                approve: verdict == "approve",
                reason: None,
            });
        }
    }
    // The run goes on without this request: its task owns it.
    let answered = state
        .engine
        .submit_tool_outputs(&caller, &id, submission)
        .await;
    changed(&state, &headers, &caller, &id, answered).await
}

async fn cancel(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<TokenForm>,
) -> Response {
    let caller = match changer(&state, &headers, &form.csrf).await {
        Ok(caller) => caller,
        Err(response) => return response,
    };
    let cancelled = state.engine.cancel(&caller.tenant_id, &id).await;
    changed(&state, &headers, &caller, &id, cancelled).await
}

/// Who changes a run through a form: a signed-in caller (counted against its key's rate), with
/// this browser's token from this site, on an inspector that is not read-only.
async fn changer(state: &AppState, headers: &HeaderMap, token: &str) -> Result<Caller, Response> {
    let caller = signed_in(state, headers, &Method::POST).await?;
    check_form(headers, token).map_err(IntoResponse::into_response)?;
    if state.ui.read_only {
        return Err(
            Page::message(StatusCode::FORBIDDEN, "This inspector is read-only.").into_response(),
        );
    }
    Ok(caller)
}

/// After a form's change: back to the run's page, or the run's page with the API's refusal.
async fn changed<T>(
    state: &AppState,
    headers: &HeaderMap,
    caller: &Caller,
    id: &str,
    outcome: Result<T, EngineError>,
) -> Response {
    match outcome {
        Ok(_) => Redirect::to(&format!("/ui/responses/{id}")).into_response(),
        Err(e) => {
            let (status, message) = refusal(e);
            show_run(state, headers, caller, id, status, Some(message)).await
        }
    }
}
