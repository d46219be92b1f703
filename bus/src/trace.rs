//! W3C trace context (`traceparent`) carried in NATS headers, so one human
//! message can be followed through the coordinator, the worker and back.

use async_nats::HeaderMap;

pub const TRACEPARENT: &str = "traceparent";

/// A trace id and the id of the span that sent the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: u128,
    pub span_id: u64,
}

impl TraceContext {
    /// A new trace (a message that starts a chain: typed input, a summon).
    pub fn new_root() -> Self {
        Self {
            trace_id: fastrand::u128(1..),
            span_id: fastrand::u64(1..),
        }
    }

    /// The same trace, a new span: for what is sent on behalf of a received message.
    pub fn child(&self) -> Self {
        Self {
            trace_id: self.trace_id,
            span_id: fastrand::u64(1..),
        }
    }

    pub fn traceparent(&self) -> String {
        format!("00-{:032x}-{:016x}-01", self.trace_id, self.span_id)
    }

    pub fn trace_id_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    pub fn inject(&self, headers: &mut HeaderMap) {
        headers.insert(TRACEPARENT, self.traceparent().as_str());
    }

    /// The context of a received message, or a new root when it has none or a bad one.
    pub fn from_headers(headers: Option<&HeaderMap>) -> Self {
        headers
            .and_then(|h| h.get(TRACEPARENT))
            .and_then(|v| Self::parse(v.as_str()))
            .unwrap_or_else(Self::new_root)
    }

    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.split('-');
        let (version, trace, span) = (parts.next()?, parts.next()?, parts.next()?);
        if version.len() != 2 || trace.len() != 32 || span.len() != 16 {
            return None;
        }
        let trace_id = u128::from_str_radix(trace, 16).ok()?;
        let span_id = u64::from_str_radix(span, 16).ok()?;
        (trace_id != 0 && span_id != 0).then_some(Self { trace_id, span_id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips() {
        let root = TraceContext::new_root();
        let parsed = TraceContext::parse(&root.traceparent()).unwrap();
        assert_eq!(parsed, root);
        assert_eq!(root.child().trace_id, root.trace_id);
        assert!(
            TraceContext::parse("00-00000000000000000000000000000000-0000000000000001-01")
                .is_none()
        );
        assert!(TraceContext::parse("garbage").is_none());
    }
}
