//! An MCP server over stdio whose one tool answers with a task handle (the
//! tasks extension, SEP-2663), for the worker's test of polling them
//! (`tests/tests/mcp_client.rs`). `slow_square` starts a task that squares
//! `n` after `ms` milliseconds (default 1500); a client that does not
//! declare the extension gets a tool error saying so.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetTaskParams, GetTaskResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData, ServerHandler, ServiceExt as _};

#[derive(Clone, Default)]
struct Slow {
    tasks: TaskManager,
}

impl ServerHandler for Slow {
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}, "ms": {"type": "integer"}},
            "required": ["n"],
        });
        let serde_json::Value::Object(schema) = schema else {
            unreachable!()
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "slow_square",
            "Squares n, slowly: it answers with a task handle to poll.",
            Arc::new(schema),
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arg = |key: &str| {
            request
                .arguments
                .as_ref()
                .and_then(|a| a.get(key))
                .and_then(serde_json::Value::as_i64)
        };
        let (n, ms) = (arg("n").unwrap_or(0), arg("ms").unwrap_or(1500));
        if !context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks())
        {
            return Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                ContentBlock::text("slow_square needs a client that takes task handles"),
            ])));
        }
        let wait = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
        let task = self
            .tasks
            .spawn(TaskOptions::new().with_poll_interval_ms(100), move |ctx| {
                Box::pin(async move {
                    tokio::select! {
                        () = ctx.cancelled() => Err(TaskExit::Cancelled),
                        () = tokio::time::sleep(wait) => Ok(CallToolResult::success(vec![
                            ContentBlock::text(format!("{n} squared is {}", n * n)),
                        ])),
                    }
                })
            });
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let service = Slow::default().serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}
