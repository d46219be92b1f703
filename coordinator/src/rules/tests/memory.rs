//! Table tests: the memory rule.
