//! Table tests: the consensus rule.
