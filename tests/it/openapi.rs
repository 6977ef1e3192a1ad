//! `GET /openapi.json`: an OpenAPI 3.1 document that names every route the router serves, with
//! its methods, statuses and schemas, and against which what the service really answers
//! validates (so a wire type that changes without its schema fails here).

use serde_json::{Value, json};

use crate::support::{Step, TestApp, Turn};

/// Every route of `api::router` with its methods. A route added there must be added here, and
/// then to the document.
const ROUTES: &[(&str, &[&str])] = &[
    ("/v1/responses", &["get", "post"]),
    ("/v1/responses/compact", &["post"]),
    ("/v1/responses/{id}", &["get", "delete"]),
    ("/v1/responses/{id}/input_items", &["get"]),
    ("/v1/responses/{id}/submit_tool_outputs", &["post"]),
    ("/v1/responses/{id}/cancel", &["post"]),
    ("/v1/conversations", &["post"]),
    ("/v1/conversations/{id}", &["get", "post", "delete"]),
    ("/v1/conversations/{id}/items", &["get", "post"]),
    ("/v1/conversations/{id}/items/{item_id}", &["get", "delete"]),
    ("/v1/models", &["get"]),
    ("/healthz", &["get"]),
    ("/readyz", &["get"]),
    ("/metrics", &["get"]),
    ("/openapi.json", &["get"]),
];

const METHODS: &[&str] = &["get", "put", "post", "delete", "patch"];

/// Operations that read a JSON body.
const WITH_BODY: &[(&str, &str)] = &[
    ("/v1/responses", "post"),
    ("/v1/responses/compact", "post"),
    ("/v1/responses/{id}/submit_tool_outputs", "post"),
    ("/v1/conversations", "post"),
    ("/v1/conversations/{id}", "post"),
    ("/v1/conversations/{id}/items", "post"),
];

async fn document(app: &TestApp) -> Value {
    let response = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    response.json().await.unwrap()
}

/// The operation at `path` and `method`.
fn operation<'a>(doc: &'a Value, path: &str, method: &str) -> &'a Value {
    let operation = &doc["paths"][path][method];
    assert!(operation.is_object(), "no {method} {path} in the document");
    operation
}

/// Follows a `$ref` to `#/components/…`.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str() {
        Some(reference) => {
            let pointer = reference.strip_prefix('#').expect("a local reference");
            doc.pointer(pointer)
                .unwrap_or_else(|| panic!("{reference} is not in the document"))
        }
        None => value,
    }
}

/// The schema the document gives for a status of an operation, in a media type.
fn response_schema(doc: &Value, path: &str, method: &str, status: u16, media: &str) -> Value {
    let responses = &operation(doc, path, method)["responses"];
    let response = resolve(doc, &responses[status.to_string()]);
    let schema = &response["content"][media]["schema"];
    assert!(
        schema.is_object(),
        "{method} {path}: no {media} schema for {status} in {response}"
    );
    schema.clone()
}

/// Asserts that `instance` is valid against `schema`, a schema of the document (its `$ref`s
/// into `#/components` resolved against the document's components).
fn assert_valid(doc: &Value, schema: &Value, instance: &Value) {
    let mut root = schema.as_object().cloned().unwrap_or_default();
    root.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    root.insert("components".into(), doc["components"].clone());
    let validator = jsonschema::validator_for(&Value::Object(root)).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{instance:#}\ndoes not validate against {schema}:\n{}",
        errors.join("\n")
    );
}

/// Asserts what the service answered against the document's schema for that answer.
async fn assert_conforms(
    doc: &Value,
    (path, method): (&str, &str),
    response: reqwest::Response,
) -> Value {
    let status = response.status().as_u16();
    let media = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    let body: Value = response.json().await.unwrap();
    let schema = response_schema(doc, path, method, status, &media);
    assert_valid(doc, &schema, &body);
    body
}

#[tokio::test]
async fn the_document_is_openapi_3_1_and_names_every_route_with_its_methods_and_no_other() {
    let app = TestApp::start().await;
    let doc = document(&app).await;

    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1."),
        "{}",
        doc["openapi"]
    );
    assert_eq!(doc["info"]["title"], "switchyard");
    let paths = doc["paths"].as_object().unwrap();
    let mut documented: Vec<&str> = paths.keys().map(String::as_str).collect();
    let mut routes: Vec<&str> = ROUTES.iter().map(|(path, _)| *path).collect();
    documented.sort_unstable();
    routes.sort_unstable();
    assert_eq!(documented, routes);
    for (path, methods) in ROUTES {
        for method in METHODS {
            assert_eq!(
                paths[*path].get(*method).is_some(),
                methods.contains(method),
                "{method} {path}"
            );
        }
    }
}

#[tokio::test]
async fn every_documented_route_and_method_is_served_and_every_other_method_is_not() {
    let app = TestApp::start().await;
    for (path, methods) in ROUTES {
        let url = app.url(&path.replace("{id}", "resp_unknown"));
        for method in METHODS {
            let mut request = app
                .client
                .request(method.to_uppercase().parse().unwrap(), &url);
            if *path == "/v1/responses" && *method == "get" {
                // The WebSocket transport: served only as an upgrade.
                request = request
                    .header("connection", "upgrade")
                    .header("upgrade", "websocket")
                    .header("sec-websocket-version", "13")
                    .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
            }
            if *method != "get" && *method != "delete" {
                request = request.json(&json!({}));
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            let unrouted = status == 405
                || (status == 404
                    && body["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("Invalid URL")));
            assert_eq!(
                unrouted,
                !methods.contains(method),
                "{method} {path}: {status} {body}"
            );
        }
    }
}

#[tokio::test]
async fn every_operation_documents_its_body_its_statuses_and_its_key() {
    let app = TestApp::start().await;
    let doc = document(&app).await;

    assert_eq!(
        doc["components"]["securitySchemes"]["api_key"],
        json!({"type": "http", "scheme": "bearer",
               "description": doc["components"]["securitySchemes"]["api_key"]["description"]})
    );
    for (path, methods) in ROUTES {
        for method in *methods {
            let op = operation(&doc, path, method);
            let label = format!("{method} {path}");
            assert!(op["operationId"].is_string(), "{label}");
            let responses = op["responses"].as_object().unwrap();
            let success = if *path == "/v1/responses" && *method == "get" {
                "101"
            } else {
                "200"
            };
            assert!(responses.contains_key(success), "{label}");
            let v1 = path.starts_with("/v1/");
            // The key and what the `/v1` layers answer whatever the handler.
            assert_eq!(
                op["security"],
                if v1 {
                    json!([{"api_key": []}])
                } else {
                    Value::Null
                },
                "{label}"
            );
            for status in ["401", "429", "500", "503"] {
                if v1 {
                    assert!(responses.contains_key(status), "{label}: {status}");
                }
            }
            assert_eq!(responses.contains_key("401"), v1, "{label}");
            let body = WITH_BODY.contains(&(*path, *method));
            assert_eq!(op["requestBody"].is_object(), body, "{label}");
            if body {
                let schema = &op["requestBody"]["content"]["application/json"]["schema"];
                assert!(resolve(&doc, schema).is_object(), "{label}: {schema}");
                for status in ["400", "408", "413", "415"] {
                    assert!(responses.contains_key(status), "{label}: {status}");
                }
            }
            if path.contains("{id}") {
                assert!(responses.contains_key("404"), "{label}");
                assert_eq!(op["parameters"][0]["name"], "id", "{label}");
            }
            // Every error is the envelope.
            for (status, response) in responses {
                if status.starts_with('4') || status.starts_with('5') {
                    assert_eq!(
                        resolve(&doc, response)["content"]["application/json"]["schema"],
                        json!({"$ref": "#/components/schemas/Error"}),
                        "{label}: {status}"
                    );
                }
            }
        }
    }
    // Streams: both media types where a stream may answer.
    for (path, method) in [
        ("/v1/responses", "post"),
        ("/v1/responses/{id}", "get"),
        ("/v1/responses/{id}/submit_tool_outputs", "post"),
    ] {
        let content = &operation(&doc, path, method)["responses"]["200"]["content"];
        assert_eq!(
            content["application/json"]["schema"],
            json!({"$ref": "#/components/schemas/Response"})
        );
        assert_eq!(
            content["text/event-stream"]["schema"],
            json!({"$ref": "#/components/schemas/ServerSentEvent"})
        );
    }
}

#[tokio::test]
async fn the_document_needs_no_key_and_is_the_same_text_every_time() {
    let app = TestApp::builder()
        .config(|config| config.auth.mode = switchyard::config::AuthMode::Keys)
        .start()
        .await;
    let first = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let first = first.text().await.unwrap();
    let second = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(first, second);
    assert_eq!(
        app.get("/v1/models").await.0,
        401,
        "the API itself needs one"
    );
}

#[tokio::test]
async fn what_the_service_answers_validates_against_the_document() {
    let app = TestApp::start().await;
    let doc = document(&app).await;
    let create = ("/v1/responses", "post");
    let post = |path: &str, body: Value| app.client.post(app.url(path)).json(&body).send();
    let get = |path: &str| app.client.get(app.url(path)).send();

    // A text answer.
    app.llm.push(Turn::text("Hello there"));
    let text = post(
        "/v1/responses",
        json!({"model": "gpt-4o-mini", "input": "Say hello", "metadata": {"k": "v"},
               "text": {"format": {"type": "text"}, "verbosity": "low"}, "temperature": 0.5}),
    )
    .await
    .unwrap();
    let text = assert_conforms(&doc, create, text).await;
    assert_eq!(text["status"], "completed");

    // A server tool (mcp_list_tools, mcp_call), then a client function: the run pauses.
    app.llm.push(Turn::tool_call(
        "call_calc",
        "calculator",
        r#"{"expression":"6*7"}"#,
    ));
    app.llm.push(Turn::tool_call(
        "call_w",
        "get_weather",
        r#"{"city":"Paris"}"#,
    ));
    let paused = post(
        "/v1/responses",
        json!({
            "model": "gpt-4o-mini",
            "input": [{"role": "user", "content": "Weather, and 6*7?"},
                      {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]}],
            "tools": [
                {"type": "mcp", "server_label": "builtin", "allowed_tools": ["calculator"], "require_approval": "never"},
                {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
                {"type": "custom", "name": "shell_script", "description": "Runs a script"},
                {"type": "web_search_preview"}
            ],
            "tool_choice": {"type": "allowed_tools", "mode": "auto",
                            "tools": [{"type": "function", "name": "get_weather"}, {"type": "mcp", "server_label": "builtin"}]},
            "reasoning": {"effort": "low"},
        }),
    )
    .await
    .unwrap();
    let paused = assert_conforms(&doc, create, paused).await;
    assert!(paused["required_action"].is_object(), "{paused}");
    let types: Vec<&str> = paused["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["mcp_list_tools", "mcp_call", "function_call"]);
    let id = paused["id"].as_str().unwrap().to_string();

    // Its input items, then the outputs that resume it.
    let items = get(&format!("/v1/responses/{id}/input_items?order=asc"))
        .await
        .unwrap();
    let items = assert_conforms(&doc, ("/v1/responses/{id}/input_items", "get"), items).await;
    assert_eq!(items["data"].as_array().unwrap().len(), 2);
    app.llm.push(Turn::text("Sunny, and 42"));
    let resumed = post(
        &format!("/v1/responses/{id}/submit_tool_outputs"),
        json!({"tool_outputs": [{"tool_call_id": "call_w", "output": [{"type": "input_text", "text": "sunny"}]}]}),
    )
    .await
    .unwrap();
    let resumed = assert_conforms(
        &doc,
        ("/v1/responses/{id}/submit_tool_outputs", "post"),
        resumed,
    )
    .await;
    assert_eq!(resumed["status"], "completed");
    assert!(resumed["usage"].is_object());

    // A stream: every event, and the frames as SSE clients parse them; with reasoning, as its
    // text and as a summary.
    let event_schema = json!({"$ref": "#/components/schemas/StreamEvent"});
    for summary in [json!(null), json!("auto")] {
        let mut steps = vec![Step::Reasoning {
            text: "Think.".into(),
        }];
        steps.extend(Turn::text("Thought words").steps);
        app.llm.push(Turn { steps });
        let sse = app
            .stream(&json!({"model": "gpt-4o-mini", "input": "Think",
                            "reasoning": {"summary": summary}, "include": ["reasoning.encrypted_content"]}))
            .await;
        assert!(sse.types().contains(&"response.output_item.added"));
        for event in &sse.events {
            assert_valid(&doc, &event_schema, &event.data);
        }
    }
    app.llm.push(Turn::text("Streamed words"));
    let sse = app
        .stream(&json!({"model": "gpt-4o-mini", "input": "Stream"}))
        .await;
    assert_eq!(sse.content_type, "text/event-stream");
    for event in &sse.events {
        assert_valid(&doc, &event_schema, &event.data);
    }
    let frame_schema = response_schema(&doc, "/v1/responses", "post", 200, "text/event-stream");
    for event in &sse.events {
        let frame = json!({"event": event.event, "id": event.id, "data": event.data.to_string()});
        assert_valid(&doc, &frame_schema, &frame);
    }
    assert_valid(
        &doc,
        &frame_schema,
        &json!({"event": "message", "data": "[DONE]"}),
    );

    // Reading, cancelling (stopped already: returned as it is), deleting, the models.
    let one = get(&format!("/v1/responses/{id}")).await.unwrap();
    assert_conforms(&doc, ("/v1/responses/{id}", "get"), one).await;
    let cancelled = post(&format!("/v1/responses/{id}/cancel"), json!({}))
        .await
        .unwrap();
    assert_conforms(&doc, ("/v1/responses/{id}/cancel", "post"), cancelled).await;
    let deleted = app
        .client
        .delete(app.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap();
    let deleted = assert_conforms(&doc, ("/v1/responses/{id}", "delete"), deleted).await;
    assert_eq!(deleted["deleted"], true);
    let models = get("/v1/models").await.unwrap();
    assert_conforms(&doc, ("/v1/models", "get"), models).await;

    // A background run, queued at once.
    let queued = post(
        "/v1/responses",
        json!({"model": "gpt-4o-mini", "input": "Later", "background": true}),
    )
    .await
    .unwrap();
    let queued = assert_conforms(&doc, create, queued).await;
    app.wait_until_stopped(queued["id"].as_str().unwrap()).await;

    // Compaction.
    app.llm.push(Turn::text("The user greeted."));
    let compacted = post(
        "/v1/responses/compact",
        json!({"model": "gpt-4o-mini", "input": [{"role": "user", "content": "Hi"}]}),
    )
    .await
    .unwrap();
    let compacted = assert_conforms(&doc, ("/v1/responses/compact", "post"), compacted).await;
    assert_eq!(compacted["object"], "response.compaction");

    // Errors: the envelope, whatever the status.
    let unknown = get("/v1/responses/resp_unknown").await.unwrap();
    assert_eq!(unknown.status(), 404);
    assert_conforms(&doc, ("/v1/responses/{id}", "get"), unknown).await;
    let invalid = post("/v1/responses", json!({"model": "nope", "input": "x"}))
        .await
        .unwrap();
    assert_eq!(invalid.status(), 400);
    assert_conforms(&doc, create, invalid).await;

    // The metrics: text, as documented.
    let metrics = get("/metrics").await.unwrap();
    assert_eq!(metrics.status(), 200);
    let media = metrics.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(media.starts_with("text/plain;"), "{media}");
    let documented = &operation(&doc, "/metrics", "get")["responses"]["200"]["content"];
    assert_eq!(documented["text/plain"]["schema"]["type"], "string");

    // Health and readiness.
    let health = get("/healthz").await.unwrap();
    assert_conforms(&doc, ("/healthz", "get"), health).await;
    let ready = get("/readyz").await.unwrap();
    assert_conforms(&doc, ("/readyz", "get"), ready).await;
}

#[tokio::test]
async fn a_response_that_breaks_the_document_fails_validation() {
    // The check above would catch drift: a key the document requires, left out, fails.
    let app = TestApp::start().await;
    let doc = document(&app).await;
    app.llm.push(Turn::text("Hello"));
    let (_, mut body) = app
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o-mini", "input": "Say hello"}),
        )
        .await;
    let schema = json!({"$ref": "#/components/schemas/Response"});
    assert_valid(&doc, &schema, &body);
    body.as_object_mut().unwrap().remove("usage");
    let result = std::panic::catch_unwind(|| assert_valid(&doc, &schema, &body));
    assert!(result.is_err(), "a Response without `usage` validated");
}
