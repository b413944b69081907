//! Captures what the runtime records through `tracing`: spans, so tracing cases can
//! look them up, and log events, so a cell's evidence carries the logs of its run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Dispatch, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// A span as created: its name and its fields as text.
#[derive(Debug, Clone, PartialEq)]
pub struct CapturedSpan {
    pub name: String,
    pub fields: BTreeMap<String, String>,
}

/// A tracing layer that keeps every new span. Clones share the store.
#[derive(Clone, Default)]
pub struct SpanCapture {
    spans: Arc<Mutex<Vec<CapturedSpan>>>,
}

impl SpanCapture {
    /// A dispatcher that records into this capture.
    pub fn dispatch(&self) -> Dispatch {
        Dispatch::new(tracing_subscriber::registry().with(self.clone()))
    }

    /// The spans named `name` captured so far.
    pub fn named(&self, name: &str) -> Vec<CapturedSpan> {
        self.spans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }
}

struct FieldText<'a>(&'a mut BTreeMap<String, String>);

impl Visit for FieldText<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_string(),
            format!("{value:?}").trim_matches('"').to_string(),
        );
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for SpanCapture {
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut FieldText(&mut fields));
        self.spans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(CapturedSpan {
                name: attrs.metadata().name().to_string(),
                fields,
            });
    }
}

/// A tracing layer that keeps warning and error events as text lines. Clones share
/// the store.
#[derive(Clone, Default)]
pub struct LogCapture {
    lines: Arc<Mutex<Vec<String>>>,
}

/// At most this many log lines are kept per case.
const MAX_LOG_LINES: usize = 200;

impl LogCapture {
    /// A dispatcher that records into this capture.
    pub fn dispatch(&self) -> Dispatch {
        Dispatch::new(tracing_subscriber::registry().with(self.clone()))
    }

    /// The lines captured so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for LogCapture {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let level = *event.metadata().level();
        if level > tracing::Level::WARN {
            return;
        }
        let mut fields = BTreeMap::new();
        event.record(&mut FieldText(&mut fields));
        let message = fields.remove("message").unwrap_or_default();
        let rest: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() < MAX_LOG_LINES {
            lines.push(
                format!(
                    "{level} {}: {message} {}",
                    event.metadata().target(),
                    rest.join(" ")
                )
                .trim_end()
                .to_string(),
            );
        }
    }
}
