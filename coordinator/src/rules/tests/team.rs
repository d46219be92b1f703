//! Table tests: the team rule.
