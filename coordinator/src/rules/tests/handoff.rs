//! Table tests: the handoff rule.
