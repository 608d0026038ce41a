"""A small billing service and the task-level tools that wrap it (the demo's upstream)."""
