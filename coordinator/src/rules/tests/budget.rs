//! Table tests: the budget rule.
