//! The `task` tool's model-facing spec and input. Only Orchestrators have it;
//! the subagent it starts is run by `crate::subagent`.

use arbiter_llm::ToolSpec;
use serde::Deserialize;

/// The tool's model-facing name.
pub const NAME: &str = "task";

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: NAME.into(),
        description: "Hand a discrete piece of work to a subagent and wait for its report. The \
                      subagent starts with a fresh, empty context: it sees only your prompt, so \
                      make the prompt complete (goal, relevant paths, constraints, what to \
                      check, what to report). It works in the same workspace with read, write, \
                      edit, glob, grep and bash, but cannot start subagents of its own. Only its \
                      final report comes back to you; none of its tool traffic does. Use one \
                      task per item of work, and a separate task to verify work done."
            .into(),
        input_schema: arbiter_llm::schema::for_model::<TaskInput>(),
    }
}

/// The `task` tool's input; its JSON Schema is the tool's input schema.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskInput {
    /// A short title for the work (3 to 8 words), for progress displays.
    #[serde(default)]
    pub description: Option<String>,
    /// The complete, self-contained instruction for the subagent.
    pub prompt: String,
}
