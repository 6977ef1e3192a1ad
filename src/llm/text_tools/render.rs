//! What a model without function calling is shown (SPEC §15): the tools' definitions in the
//! system prompt, in its protocol's syntax, sorted by name so that the prompt is the same from
//! request to request (a provider's prompt cache then hits); and the history's calls and their
//! results written back in that same syntax, never another, since a model imitates what it
//! sees. No `tools` field and no `tool` messages go upstream.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{hermes, vcp};
use crate::config::ToolProtocol;
use crate::llm::ToolSpec;

/// The system prompt's section that offers `tools` in `protocol`, with what `tool_choice` and
/// `parallel_tool_calls` ask for.
pub fn tools_prompt(
    protocol: ToolProtocol,
    tools: &[ToolSpec],
    tool_choice: Option<&Value>,
    parallel: Option<bool>,
) -> String {
    let mut tools: Vec<&ToolSpec> = tools.iter().collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let mut prompt = String::from("# Tools\n\n");
    match protocol {
        ToolProtocol::Hermes | ToolProtocol::Native => {
            prompt.push_str(
                "You can call functions to help with the request. Their signatures are in \
                 <tools></tools>:\n<tools>\n",
            );
            for tool in &tools {
                let _ = writeln!(prompt, "{}", definition(tool));
            }
            prompt.push_str(
                "</tools>\n\nTo call a function, write a JSON object with its name and \
                 arguments between <tool_call></tool_call> tags, one call per pair of tags:\n\
                 <tool_call>\n{\"name\": <function name>, \"arguments\": <arguments as a JSON \
                 object>}\n</tool_call>\nThe results come back between \
                 <tool_response></tool_response> tags.",
            );
        }
        ToolProtocol::Vcp => {
            prompt.push_str("You can call these tools:\n\n");
            for tool in &tools {
                let _ = writeln!(
                    prompt,
                    "<<<[TOOL_DEFINITION]>>>\ntool_name:「始」{}「末」\ndescription:「始」{}「末」\nparameters:「始」{}「末」\n<<<[END_TOOL_DEFINITION]>>>\n",
                    tool.name,
                    tool.description.as_deref().unwrap_or(""),
                    tool.parameters
                );
            }
            let _ = write!(
                prompt,
                "To call a tool, write a block like this, with one line per argument:\n{}\n\
                 tool_name:{}tool name{},\nargument name:{}value{}\n{}\nThe results come back \
                 in <<<[TOOL_RESULT]>>> blocks.",
                vcp::OPEN,
                vcp::START,
                vcp::END,
                vcp::START,
                vcp::END,
                vcp::CLOSE
            );
        }
        ToolProtocol::Json => {
            prompt.push_str("You can call these functions:\n");
            for tool in &tools {
                let _ = writeln!(prompt, "{}", definition(tool));
            }
            prompt.push_str(
                "\nAnswer with one JSON object only: {\"response\": \"your answer\"} to \
                 answer, or {\"tool_calls\": [{\"name\": <function name>, \"arguments\": \
                 <arguments as a JSON object>}]} to call functions. The results come back as \
                 {\"tool_results\": […]}.",
            );
        }
    }
    if let Some(rule) = tool_choice.and_then(choice_rule) {
        prompt.push_str("\n\n");
        prompt.push_str(&rule);
    }
    if parallel == Some(false) {
        prompt.push_str("\n\nCall at most one function per reply.");
    }
    prompt
}

/// One tool as a JSON line, its keys in the order Hermes-trained models are shown them.
fn definition(tool: &ToolSpec) -> String {
    let description = tool
        .description
        .as_ref()
        .map(|d| format!(", \"description\": {}", json!(d)))
        .unwrap_or_default();
    format!(
        "{{\"type\": \"function\", \"function\": {{\"name\": {}{description}, \"parameters\": {}}}}}",
        json!(tool.name),
        tool.parameters
    )
}

/// One call as a JSON object, `name` first, as models write it.
pub fn call_object(name: &str, arguments: &Value) -> String {
    format!("{{\"name\": {}, \"arguments\": {arguments}}}", json!(name))
}

/// What `tool_choice` asks of the model, in words.
fn choice_rule(choice: &Value) -> Option<String> {
    if let Some(name) = choice.get("name").and_then(Value::as_str) {
        return Some(format!("Call the function {name} now."));
    }
    match choice.as_str()? {
        "required" => Some("Call at least one function now.".into()),
        "none" => Some("Do not call any function now; answer in text.".into()),
        _ => None,
    }
}

/// Rewrites chat messages written for native calls into `protocol`'s text: an assistant
/// message's `tool_calls` become blocks after its text, and the `tool` messages that answer
/// them one user message of results.
pub fn render_history(protocol: ToolProtocol, messages: Vec<Value>) -> Vec<Value> {
    let mut names: HashMap<String, String> = HashMap::new();
    let mut rendered: Vec<Value> = Vec::with_capacity(messages.len());
    for mut message in messages {
        if message["role"] == "tool" {
            let id = message["tool_call_id"].as_str().unwrap_or_default();
            let name = names.get(id).cloned().unwrap_or_default();
            let content = text_of(&message["content"]);
            let result = result_text(protocol, &name, &content);
            let appended = match rendered.last_mut() {
                Some(last) if last["role"] == "user" && last.get("tool_results").is_some() => {
                    let joined = format!("{}\n{result}", last["content"].as_str().unwrap_or(""));
                    last["content"] = json!(joined);
                    true
                }
                _ => false,
            };
            if !appended {
                // Marked while results are still being added; the mark is taken off below.
                rendered.push(json!({"role": "user", "content": result, "tool_results": true}));
            }
            continue;
        }
        if let Some(Value::Array(calls)) =
            message.as_object_mut().and_then(|m| m.remove("tool_calls"))
        {
            let mut text = text_of(&message["content"]);
            let blocks: Vec<(String, String)> = calls
                .iter()
                .map(|call| {
                    let id = call["id"].as_str().unwrap_or_default().to_string();
                    let name = call["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    let arguments = call["function"]["arguments"].as_str().unwrap_or("{}");
                    names.insert(id, name.clone());
                    (name, arguments.to_string())
                })
                .collect();
            let calls_text = calls_text(protocol, &blocks);
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&calls_text);
            message["content"] = json!(text);
            if let Some(object) = message.as_object_mut() {
                object.remove("extra_content");
            }
        }
        rendered.push(message);
    }
    for message in &mut rendered {
        if let Some(object) = message.as_object_mut() {
            object.remove("tool_results");
        }
    }
    rendered
}

/// A message's content as text (parts joined).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Calls, as `(name, arguments JSON)`, written as the model writes them.
pub fn calls_text(protocol: ToolProtocol, calls: &[(String, String)]) -> String {
    let arguments_of = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(json!({}));
    match protocol {
        ToolProtocol::Hermes | ToolProtocol::Native => calls
            .iter()
            .map(|(name, arguments)| {
                let call = call_object(name, &arguments_of(arguments));
                format!("{}\n{call}\n{}", hermes::OPEN, hermes::CLOSE)
            })
            .collect::<Vec<_>>()
            .join("\n"),
        ToolProtocol::Vcp => calls
            .iter()
            .map(|(name, arguments)| {
                let mut block =
                    format!("{}\ntool_name:{}{name}{}", vcp::OPEN, vcp::START, vcp::END);
                if let Value::Object(fields) = arguments_of(arguments) {
                    for (key, value) in fields {
                        let value = match value {
                            Value::String(text) => text,
                            other => other.to_string(),
                        };
                        let _ = write!(block, ",\n{key}:{}{value}{}", vcp::START, vcp::END);
                    }
                }
                format!("{block}\n{}", vcp::CLOSE)
            })
            .collect::<Vec<_>>()
            .join("\n"),
        ToolProtocol::Json => {
            let calls: Vec<String> = calls
                .iter()
                .map(|(name, arguments)| call_object(name, &arguments_of(arguments)))
                .collect();
            format!("{{\"tool_calls\": [{}]}}", calls.join(", "))
        }
    }
}

/// One call's result, written as the protocol's results are.
fn result_text(protocol: ToolProtocol, name: &str, content: &str) -> String {
    match protocol {
        ToolProtocol::Hermes | ToolProtocol::Native => format!(
            "<tool_response>\n{{\"name\": {}, \"content\": {}}}\n</tool_response>",
            json!(name),
            json!(content)
        ),
        ToolProtocol::Vcp => format!(
            "<<<[TOOL_RESULT]>>>\ntool_name:{}{name}{},\nresult:{}{content}{}\n<<<[END_TOOL_RESULT]>>>",
            vcp::START,
            vcp::END,
            vcp::START,
            vcp::END
        ),
        ToolProtocol::Json => format!(
            "{{\"tool_results\": [{{\"name\": {}, \"content\": {}}}]}}",
            json!(name),
            json!(content)
        ),
    }
}
