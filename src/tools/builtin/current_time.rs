//! `current_time`: the time now in an IANA time zone.

use async_trait::async_trait;
use chrono::Utc;
use chrono_tz::Tz;
use serde_json::{Value, json};

use crate::tools::{ToolContext, ToolHandler, ToolOptions, ToolOutput, ToolResult};

pub struct CurrentTime;

#[async_trait]
impl ToolHandler for CurrentTime {
    fn name(&self) -> &str {
        "current_time"
    }

    fn description(&self) -> &str {
        "The current date and time in a time zone, as RFC 3339."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "timezone": {"type": "string", "description": "An IANA time zone name such as 'Europe/Paris'; default 'UTC'."}
            },
            "additionalProperties": false
        })
    }

    fn options(&self) -> ToolOptions {
        ToolOptions {
            read_only: true,
            ..ToolOptions::default()
        }
    }

    async fn call(&self, _: ToolContext, arguments: Value, _: ToolOutput) -> ToolResult {
        let name = arguments
            .get("timezone")
            .and_then(Value::as_str)
            .unwrap_or("UTC");
        let Ok(zone) = name.parse::<Tz>() else {
            return ToolResult::error(format!(
                "Unknown time zone '{name}': use an IANA name such as 'Europe/Paris' or 'UTC'."
            ));
        };
        let now = Utc::now().with_timezone(&zone);
        let iso = now.to_rfc3339_opts(chrono::SecondsFormat::Secs, false);
        let offset = now.format("%:z").to_string();
        ToolResult::ok_with_data(
            iso.clone(),
            json!({"time": iso, "timezone": zone.name(), "utc_offset": offset}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

    fn context() -> ToolContext {
        ToolContext {
            response_id: "resp_1".into(),
            call_id: "call_1".into(),
            tenant_id: "default".into(),
            cancel: CancellationToken::new(),
        }
    }

    #[tokio::test]
    async fn the_time_is_given_in_the_zone_with_its_offset() {
        let result = CurrentTime
            .call(
                context(),
                json!({"timezone": "Asia/Kolkata"}),
                ToolOutput::discard(),
            )
            .await;
        assert!(!result.is_error());
        assert!(result.text.ends_with("+05:30"), "{}", result.text);
        let data = result.data.unwrap_or_default();
        assert_eq!(data["timezone"], "Asia/Kolkata");
        assert_eq!(data["utc_offset"], "+05:30");
        let utc = CurrentTime
            .call(context(), json!({}), ToolOutput::discard())
            .await;
        assert!(utc.text.ends_with("+00:00"), "{}", utc.text);
    }

    #[tokio::test]
    async fn an_unknown_zone_is_a_tool_error() {
        let result = CurrentTime
            .call(
                context(),
                json!({"timezone": "Mars/Olympus"}),
                ToolOutput::discard(),
            )
            .await;
        assert!(result.is_error());
        assert!(result.text.contains("Unknown time zone 'Mars/Olympus'"));
    }
}
