//! Table tests: the outputs rule.
