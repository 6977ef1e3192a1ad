//! The run inspector (`/ui`) over HTTP, as a browser speaks to it: sign-in and its cookie,
//! CSRF tokens, a tenant's view, answering and cancelling through the forms, escaping, and the
//! operator's switches. The browser itself drives it in `tests/ui/` (Playwright).

use std::sync::Arc;

use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};
use serde_json::{Value, json};
use switchyard::auth::{self, KeyPolicy};
use switchyard::config::{AuthMode, Config};
use switchyard::store::RunStore;

use crate::support::{TestApp, Turn};

fn keys(config: &mut Config) {
    config.auth.mode = AuthMode::Keys;
}

async fn key(store: &Arc<dyn RunStore>, tenant: &str) -> String {
    auth::create_key(&**store, tenant, "ui", &KeyPolicy::default())
        .await
        .unwrap()
        .1
}

/// A browser without a cookie jar of its own: cookies are sent as the test says.
struct Browser<'a> {
    app: &'a TestApp,
    client: reqwest::Client,
    cookies: Vec<String>,
}

struct Page {
    status: u16,
    headers: HeaderMap,
    html: String,
}

impl<'a> Browser<'a> {
    fn new(app: &'a TestApp) -> Browser<'a> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        Browser {
            app,
            client,
            cookies: Vec::new(),
        }
    }

    fn keep_cookies(&mut self, headers: &HeaderMap) {
        for set in headers.get_all(SET_COOKIE) {
            let pair = set.to_str().unwrap().split(';').next().unwrap().to_string();
            let name = pair.split('=').next().unwrap().to_string();
            self.cookies.retain(|c| !c.starts_with(&format!("{name}=")));
            if !pair.ends_with('=') {
                self.cookies.push(pair);
            }
        }
    }

    async fn send(&mut self, request: reqwest::RequestBuilder) -> Page {
        let request = match self.cookies.is_empty() {
            true => request,
            false => request.header("cookie", self.cookies.join("; ")),
        };
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        self.keep_cookies(&headers);
        Page {
            status,
            headers,
            html: response.text().await.unwrap(),
        }
    }

    async fn get(&mut self, path: &str) -> Page {
        let request = self.client.get(self.app.url(path));
        self.send(request).await
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let request = self.client.post(self.app.url(path)).form(form);
        self.send(request).await
    }

    fn csrf(&self) -> String {
        self.cookies
            .iter()
            .find_map(|c| c.strip_prefix("switchyard_csrf="))
            .unwrap()
            .to_string()
    }
}

fn location(page: &Page) -> &str {
    page.headers[LOCATION].to_str().unwrap()
}

/// The text of the page's alert.
fn alert(html: &str) -> &str {
    let start = html.find(r#"role="alert""#).expect("an alert");
    let text = &html[start..];
    let text = &text[text.find('>').unwrap() + 1..];
    &text[..text.find('<').unwrap()]
}

#[tokio::test]
async fn signing_in_with_a_key_gives_a_strict_http_only_session_scoped_to_its_tenant() {
    let app = TestApp::builder().config(keys).start().await;
    let store = app.store().await;
    let ours = key(&store, "acme").await;
    let theirs = key(&store, "other").await;
    app.llm.push(Turn::text("ours"));
    app.llm.push(Turn::text("theirs"));
    let mut ids = Vec::new();
    for secret in [&ours, &theirs] {
        let response = app
            .client
            .post(app.url("/v1/responses"))
            .bearer_auth(secret)
            .json(&json!({"model": "gpt-4o-mini", "input": "hi"}))
            .send()
            .await
            .unwrap();
        let body: Value = response.json().await.unwrap();
        ids.push(body["id"].as_str().unwrap().to_string());
    }

    let mut browser = Browser::new(&app);
    let page = browser.get("/ui").await;
    assert_eq!((page.status, location(&page)), (303, "/ui/sign-in"));
    let page = browser.get("/ui/sign-in").await;
    assert_eq!(page.status, 200);
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(page.headers["x-frame-options"], "DENY");
    assert!(
        page.html
            .contains(r#"<label for="api-key">API key</label>"#)
    );
    assert!(
        page.html
            .contains(r#"<button type="submit">Sign in</button>"#)
    );
    assert!(!page.html.contains("<script>"), "no inline script");
    let csrf = browser.csrf();

    // Without the form's token, from another site: refused, nobody signed in.
    let page = browser.post("/ui/sign-in", &[("api_key", &ours)]).await;
    assert_eq!(page.status, 403);
    let forged = browser
        .client
        .post(app.url("/ui/sign-in"))
        .header("origin", "https://evil.example")
        .header("cookie", browser.cookies.join("; "))
        .form(&[("api_key", ours.as_str()), ("csrf", &csrf)]);
    assert_eq!(browser.send(forged).await.status, 403);

    let page = browser
        .post("/ui/sign-in", &[("api_key", "sy-wrong"), ("csrf", &csrf)])
        .await;
    assert_eq!(page.status, 401);
    assert!(
        alert(&page.html).starts_with("That API key was not accepted"),
        "{}",
        page.html
    );

    // A browser told `Referrer-Policy` may send `Origin: null` on a page's own form.
    let signing_in = browser
        .client
        .post(app.url("/ui/sign-in"))
        .header("origin", "null")
        .header("sec-fetch-site", "same-origin")
        .form(&[("api_key", ours.as_str()), ("csrf", &csrf)]);
    let page = browser.send(signing_in).await;
    assert_eq!((page.status, location(&page)), (303, "/ui"));
    assert_eq!(page.headers["referrer-policy"], "same-origin");
    let session = page.headers[SET_COOKIE].to_str().unwrap();
    assert!(session.starts_with("switchyard_session="), "{session}");
    assert!(
        session.ends_with("; Path=/ui; HttpOnly; SameSite=Strict"),
        "{session}"
    );

    let list = browser.get("/ui").await;
    assert_eq!(list.status, 200);
    assert!(
        list.html
            .contains(&format!(r#"<a href="/ui/responses/{}">"#, ids[0]))
    );
    assert!(
        !list.html.contains(&ids[1]),
        "another tenant's run is not listed"
    );
    assert!(list.html.contains(r#"<th scope="col">Response</th>"#));
    let page = browser.get(&format!("/ui/responses/{}", ids[0])).await;
    assert_eq!(page.status, 200);
    assert!(page.html.contains("ours"));
    let page = browser.get(&format!("/ui/responses/{}", ids[1])).await;
    assert_eq!(page.status, 404);
    assert_eq!(
        alert(&page.html),
        format!("Response with id &#39;{}&#39; not found.", ids[1])
    );

    // Behind a proxy that says which address the browser used, a form from it is this site's.
    let proxied = browser
        .client
        .post(app.url("/ui/sign-in"))
        .header("origin", "https://inspector.example:8443")
        .header("x-forwarded-host", "inspector.example:8443")
        .header("cookie", format!("switchyard_csrf={csrf}"))
        .form(&[("api_key", ours.as_str()), ("csrf", &csrf)]);
    assert_eq!(browser.send(proxied).await.status, 303);

    // Behind TLS the cookie is Secure; signing out clears it.
    let tls = browser
        .client
        .post(app.url("/ui/sign-in"))
        .header("x-forwarded-proto", "https")
        .header("cookie", format!("switchyard_csrf={csrf}"))
        .form(&[("api_key", ours.as_str()), ("csrf", &csrf)]);
    let page = browser.send(tls).await;
    assert!(
        page.headers[SET_COOKIE]
            .to_str()
            .unwrap()
            .ends_with("; Secure")
    );
    let page = browser.post("/ui/sign-out", &[("csrf", &csrf)]).await;
    assert_eq!((page.status, location(&page)), (303, "/ui/sign-in"));
    assert_eq!(browser.get("/ui").await.status, 303);
}

#[tokio::test]
async fn a_pause_is_answered_through_the_form_once_and_a_second_answer_gets_the_apis_refusal() {
    let app = TestApp::start().await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "get_weather",
        r#"{"city":"Paris"}"#,
    ));
    app.llm.push(Turn::text("Sunny in Paris."));
    let weather = json!({"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}});
    let (_, paused) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "Weather?", "tools": [weather]}),
        )
        .await;
    let id = paused["id"].as_str().unwrap();
    let mut browser = Browser::new(&app);
    let page = browser.get(&format!("/ui/responses/{id}")).await;
    assert_eq!(page.status, 200);
    assert!(
        page.html
            .contains(r#"<label for="output-1">get_weather</label>"#),
        "{}",
        page.html
    );
    assert!(page.html.contains(r#"name="output:call_1""#));
    assert!(page.html.contains("Submit outputs"));
    assert!(page.html.contains("Cancel run"));
    let list = browser.get("/ui?waiting=true").await;
    assert!(list.html.contains("Waiting for you") && list.html.contains(id));

    let csrf = browser.csrf();
    let path = format!("/ui/responses/{id}/answer");
    let page = browser
        .post(&path, &[("csrf", &csrf), ("output:call_1", "22 C, sunny")])
        .await;
    assert_eq!(
        (page.status, location(&page)),
        (303, format!("/ui/responses/{id}").as_str())
    );
    let done = app.wait_until_stopped(id).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(
        done["output"].as_array().unwrap().last().unwrap()["content"][0]["text"],
        "Sunny in Paris."
    );
    let page = browser.get(&format!("/ui/responses/{id}")).await;
    assert!(page.html.contains("22 C, sunny") && page.html.contains("Sunny in Paris."));
    let turns: Vec<usize> = [
        "Model turn 1",
        "Client tool call: get_weather",
        "Paused: waiting for the client",
        "Resumed",
        "Model turn 2",
        "Model message",
        "Completed",
    ]
    .iter()
    .map(|title| {
        page.html
            .find(&format!("<h3>{title}</h3>"))
            .unwrap_or_else(|| panic!("{title}: {}", page.html))
    })
    .collect();
    assert!(
        turns.windows(2).all(|w| w[0] < w[1]),
        "the timeline in order: {turns:?}"
    );
    assert!(!page.html.contains("Submit outputs"));

    // The same form sent again (another tab): the API's refusal, and nothing runs again.
    let page = browser
        .post(&path, &[("csrf", &csrf), ("output:call_1", "again")])
        .await;
    assert_eq!(page.status, 400);
    assert_eq!(
        alert(&page.html),
        "Runs in status &#34;completed&#34; do not accept tool outputs."
    );
    assert_eq!(app.llm.requests().len(), 2);
}

#[tokio::test]
async fn a_run_is_cancelled_through_the_form() {
    let app = TestApp::start().await;
    app.llm.push(Turn::text("slow").delayed(5_000));
    let (_, queued) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "x", "background": true}),
        )
        .await;
    let id = queued["id"].as_str().unwrap();
    let mut browser = Browser::new(&app);
    let page = browser.get(&format!("/ui/responses/{id}")).await;
    assert!(
        page.html.contains("data-live-run"),
        "a running run's page follows it"
    );
    let csrf = browser.csrf();
    let page = browser
        .post(&format!("/ui/responses/{id}/cancel"), &[("csrf", &csrf)])
        .await;
    assert_eq!(page.status, 303);
    let (_, body) = app.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(body["status"], "cancelled");
}

#[tokio::test]
async fn hostile_text_arguments_and_metadata_are_shown_escaped() {
    let app = TestApp::start().await;
    let payload = r#"<script>alert(1)</script><img src=x onerror=alert(1)>"#;
    app.llm.push(Turn::tool_call(
        "call_x",
        "lookup",
        &json!({"q": payload}).to_string(),
    ));
    let lookup = json!({"type": "function", "name": "lookup", "parameters": {"type": "object"}});
    let (_, paused) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": payload, "tools": [lookup],
                "metadata": {"note": payload}}),
        )
        .await;
    let id = paused["id"].as_str().unwrap();
    let mut browser = Browser::new(&app);
    for path in [format!("/ui/responses/{id}"), "/ui".to_string()] {
        let page = browser.get(&path).await;
        assert_eq!(page.status, 200);
        assert!(!page.html.contains("<script>alert"), "{path}");
        assert!(!page.html.contains("<img"), "{path}");
        assert_eq!(
            page.html.matches("<script").count(),
            1,
            "{path}: the one script file"
        );
        assert!(
            page.html
                .contains(r#"<script src="/ui/assets/inspector.js" defer></script>"#)
        );
    }
    let page = browser.get(&format!("/ui/responses/{id}")).await;
    assert!(
        page.html
            .contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
        "{}",
        page.html
    );
}

#[tokio::test]
async fn the_operator_switches_make_the_pages_read_only_hide_content_or_turn_them_off() {
    let app = TestApp::builder()
        .config(|c| {
            c.ui.read_only = true;
            c.ui.show_content = false;
        })
        .start()
        .await;
    app.llm.push(Turn::tool_call(
        "call_1",
        "get_weather",
        r#"{"city":"Paris"}"#,
    ));
    let weather =
        json!({"type": "function", "name": "get_weather", "parameters": {"type": "object"}});
    let (_, paused) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "secret question", "tools": [weather],
                "metadata": {"who": "secret person"}}),
        )
        .await;
    let id = paused["id"].as_str().unwrap();
    let mut browser = Browser::new(&app);
    let page = browser.get(&format!("/ui/responses/{id}")).await;
    assert_eq!(page.status, 200);
    assert!(!page.html.contains("Submit outputs") && !page.html.contains("Cancel run"));
    assert!(
        !page.html.contains("secret") && !page.html.contains("Paris"),
        "{}",
        page.html
    );
    assert!(page.html.contains("(hidden: 15 bytes)"));
    let csrf = browser.csrf();
    let refused = browser
        .post(&format!("/ui/responses/{id}/cancel"), &[("csrf", &csrf)])
        .await;
    assert_eq!(refused.status, 403);
    let (_, body) = app.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(body["status"], "completed", "still paused: {body}");

    let off = TestApp::builder()
        .config(|c| c.ui.enabled = false)
        .start()
        .await;
    let (status, _) = off.get("/ui").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn pages_read_under_a_key_do_not_use_up_its_request_rate() {
    let app = TestApp::builder().config(keys).start().await;
    let store = app.store().await;
    let policy = KeyPolicy {
        requests_per_minute: Some(2),
        ..KeyPolicy::default()
    };
    let secret = auth::create_key(&*store, "acme", "slow", &policy)
        .await
        .unwrap()
        .1;
    let mut browser = Browser::new(&app);
    browser.get("/ui/sign-in").await;
    let csrf = browser.csrf();
    let page = browser
        .post("/ui/sign-in", &[("api_key", &secret), ("csrf", &csrf)])
        .await;
    assert_eq!(page.status, 303);
    for _ in 0..5 {
        assert_eq!(browser.get("/ui").await.status, 200);
    }
    // The key's two requests of the minute are still there for its clients, and no more.
    for expected in [200, 200, 429] {
        let response = app
            .client
            .get(app.url("/v1/responses"))
            .bearer_auth(&secret)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), expected);
    }
}
