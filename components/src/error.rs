//! Typed errors shared by components and the runtime layer.

use std::time::Duration;

/// The broad class of an error, for callers (and the suite) that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidRequest,
    NotAllowed,
    NotFound,
    Unsupported,
    Broker,
    Timeout,
    Closed,
}

/// Every error a component or the runtime returns; each variant carries its context.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PubSubError {
    /// The request is malformed; nothing was published or changed.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The request is well formed but not permitted in this state (e.g. an ack for a
    /// topic the consumer does not subscribe).
    #[error("not allowed: {0}")]
    NotAllowed(String),
    /// A named thing (topic, subscription) does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The component declared the feature unsupported.
    #[error("unsupported: component '{component}' does not support {feature}")]
    Unsupported { component: String, feature: String },
    /// The broker or the transport to it failed.
    #[error("broker error while {context}: {message}")]
    Broker { context: String, message: String },
    /// An operation did not complete within its bound.
    #[error("timed out after {after:?} while {what}")]
    Timeout { what: String, after: Duration },
    /// The component, consumer or subscription was closed.
    #[error("closed: {0}")]
    Closed(String),
}

impl PubSubError {
    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            PubSubError::InvalidRequest(_) => ErrorKind::InvalidRequest,
            PubSubError::NotAllowed(_) => ErrorKind::NotAllowed,
            PubSubError::NotFound(_) => ErrorKind::NotFound,
            PubSubError::Unsupported { .. } => ErrorKind::Unsupported,
            PubSubError::Broker { .. } => ErrorKind::Broker,
            PubSubError::Timeout { .. } => ErrorKind::Timeout,
            PubSubError::Closed(_) => ErrorKind::Closed,
        }
    }

    /// Shorthand for an [`PubSubError::Unsupported`] error.
    pub fn unsupported(component: &str, feature: &str) -> Self {
        PubSubError::Unsupported {
            component: component.to_string(),
            feature: feature.to_string(),
        }
    }

    /// Shorthand for a [`PubSubError::Broker`] error.
    pub fn broker(context: impl Into<String>, message: impl std::fmt::Display) -> Self {
        PubSubError::Broker {
            context: context.into(),
            message: message.to_string(),
        }
    }
}

/// Result with [`PubSubError`].
pub type Result<T, E = PubSubError> = std::result::Result<T, E>;
