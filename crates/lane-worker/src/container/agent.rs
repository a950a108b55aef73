//! The agents the container driver runs, chosen by the arm's `config.agent`:
//! - `oracle`: the task's `solution/solve.sh` (the dataset's self-check);
//! - `nop`: nothing (every task should fail);
//! - `command`: `install` once per container, then `command` in a shell, in the task's
//!   workdir, with the instruction in `/lanes/instruction.md` and `$LANES_INSTRUCTION`.

use serde_json::Value;

/// Where the instruction is copied in the container for a `command` agent.
pub const INSTRUCTION_PATH: &str = "/lanes/instruction.md";
/// The variable the instruction is in, inside the container.
pub const INSTRUCTION_VAR: &str = "LANES_INSTRUCTION";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentKind {
    Oracle,
    Nop,
    Command {
        command: String,
        install: Option<String>,
    },
}

impl AgentKind {
    /// Reads the arm's config; the error says what is wrong with it.
    pub fn from_config(config: &Value) -> Result<Self, String> {
        let agent = config.get("agent").and_then(Value::as_str).ok_or(
            "the arm's config names no agent: set agent = \"oracle\", \"nop\" or \"command\"",
        )?;
        let text = |key: &str| -> Result<Option<String>, String> {
            match config.get(key) {
                None => Ok(None),
                Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
                Some(_) => Err(format!("the arm's `{key}` must be a non-empty string")),
            }
        };
        match agent {
            "oracle" => Ok(Self::Oracle),
            "nop" => Ok(Self::Nop),
            "command" => Ok(Self::Command {
                command: text("command")?.ok_or("agent = \"command\" needs a `command` to run")?,
                install: text("install")?,
            }),
            other => Err(format!(
                "unknown agent {other:?}: the container driver runs \"oracle\", \"nop\" or \"command\""
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_arm_config_names_its_agent() {
        assert_eq!(
            AgentKind::from_config(&json!({"agent": "oracle"})),
            Ok(AgentKind::Oracle)
        );
        assert_eq!(
            AgentKind::from_config(&json!({"agent": "nop", "model": "x"})),
            Ok(AgentKind::Nop)
        );
        assert_eq!(
            AgentKind::from_config(
                &json!({"agent": "command", "command": "my-agent run", "install": "setup"})
            ),
            Ok(AgentKind::Command {
                command: "my-agent run".into(),
                install: Some("setup".into())
            })
        );
        for bad in [
            json!({}),
            json!({"agent": "gpt"}),
            json!({"agent": "command"}),
            json!({"agent": "command", "command": ""}),
            json!({"agent": "command", "command": "x", "install": 3}),
        ] {
            assert!(AgentKind::from_config(&bad).is_err(), "{bad}");
        }
    }
}
