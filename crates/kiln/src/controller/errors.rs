//! [`ControllerError`]: why a control-plane or invoke call failed, and what the registry's,
//! the code store's and the node agent's errors become.

use super::code::CodeError;
use super::registry::RegistryError;
use crate::agent::AgentError;

/// Why a control-plane or invoke call failed. Each variant maps to one Lambda error.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// the function (or resource) does not exist
    #[error("{0}")]
    NotFound(String),
    /// the resource exists already or is in use
    #[error("{0}")]
    Conflict(String),
    /// a parameter is invalid
    #[error("{0}")]
    InvalidParameter(String),
    /// a parameter fails Lambda's input model (a pattern, a length, an enum)
    #[error("{0}")]
    Validation(String),
    /// the request body is not what the call expects
    #[error("{0}")]
    InvalidRequestContent(String),
    /// the request is larger than allowed
    #[error("{0}")]
    TooLarge(String),
    /// the caller's RevisionId is not the function's current one
    #[error("{0}")]
    PreconditionFailed(String),
    /// concurrency is exhausted
    #[error("Rate Exceeded.")]
    Throttled { reserved: bool },
    /// kiln itself failed
    #[error("{0}")]
    Internal(String),
    /// kiln is shutting down
    #[error("kiln is shutting down")]
    ShuttingDown,
    /// what the change needs (the cluster's etcd, the shared store) cannot be reached
    #[error("{0}")]
    Unavailable(String),
}

impl From<RegistryError> for ControllerError {
    fn from(e: RegistryError) -> Self {
        match e {
            RegistryError::Etcd(_) => ControllerError::Unavailable(format!(
                "{e}: the change was not made; try again once etcd has a quorum"
            )),
            RegistryError::SharedStore(_) => ControllerError::Unavailable(e.to_string()),
            RegistryError::Unsupported(what) => ControllerError::InvalidParameter(what.into()),
            other => ControllerError::Internal(other.to_string()),
        }
    }
}

impl From<CodeError> for ControllerError {
    fn from(e: CodeError) -> Self {
        match e {
            CodeError::Io(io) => ControllerError::Internal(format!("code store: {io}")),
            CodeError::ZipTooLarge => ControllerError::TooLarge(e.to_string()),
            other => ControllerError::InvalidParameter(other.to_string()),
        }
    }
}

impl From<AgentError> for ControllerError {
    fn from(e: AgentError) -> Self {
        match e {
            AgentError::ThrottledReserved => ControllerError::Throttled { reserved: true },
            // Busy reaches a client only if a router let it through: the node is full.
            AgentError::ThrottledNode | AgentError::Busy => {
                ControllerError::Throttled { reserved: false }
            }
            AgentError::ShuttingDown => ControllerError::ShuttingDown,
            AgentError::Sandbox(message) | AgentError::Session(message) => {
                ControllerError::Internal(message)
            }
            lost @ AgentError::PeerLost(_) => ControllerError::Internal(lost.to_string()),
        }
    }
}
