//! Table tests: the guard rule.
