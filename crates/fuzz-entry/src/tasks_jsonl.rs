//! `tasks_jsonl`: the tasks-file parser (`spec::parse_tasks_jsonl`) on any text, then the task
//! rules (`spec::validate_tasks`). A task it reads must read back the same from the line it
//! writes, keep its canonical payload, and cross the wire (`TaskSpec`) unchanged when it is
//! valid.

use std::path::Path;

use lanes_common::convert::task_from_wire;
use lanes_common::proto as pb;
use lanes_common::spec::{self, Payload, Task};

pub fn fuzz_one(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("tasks.jsonl");
    let Ok(lined) = spec::parse_tasks_jsonl(path, text) else {
        return;
    };
    let lines = text.lines().count();
    let mut last = 0;
    for (line, task) in &lined {
        assert!(
            *line > last && *line <= lines,
            "line {line} after {last} of {lines}"
        );
        last = *line;
        let canonical = Payload::new(&task.payload.value()).expect("a kept payload fits");
        assert_eq!(
            canonical, task.payload,
            "a canonical payload is a fixed point"
        );

        let written = serde_json::to_string(task).expect("a task serializes");
        let again = spec::parse_tasks_jsonl(path, &written)
            .unwrap_or_else(|e| panic!("a task's own line {written} is refused: {e}"));
        assert_eq!(again.len(), 1);
        assert_eq!(&again[0].1, task, "a task changed through its own line");

        if spec::validate_tasks(std::slice::from_ref(task)).is_ok() {
            let wire = task_from_wire(0, pb::TaskSpec::from(task))
                .unwrap_or_else(|e| panic!("a valid task is refused on the wire: {e}"));
            assert_eq!(&wire, task, "a valid task changed on the wire");
        }
    }
    let tasks: Vec<Task> = lined.into_iter().map(|(_, t)| t).collect();
    let _ = spec::validate_tasks(&tasks);
}
