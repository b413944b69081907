//! The runtime a row's cases run on: in process, or through the row's sidecars over
//! the wire, and how a component built again (behind a fault proxy, after a fault)
//! becomes one.

use pubsub_components::config::ComponentDefinition;
use pubsub_components::registry::Resolved;
use pubsub_components::runtime::Runtime;
use pubsub_components::Component;
use std::sync::Arc;

/// Turns a component into the runtime a row's cases run on, named as given.
pub type RuntimeWrapper = Arc<
    dyn Fn(
            String,
            Arc<dyn Component>,
        ) -> futures::future::BoxFuture<'static, Result<RowRuntime, String>>
        + Send
        + Sync,
>;

/// A runtime built for a row, with what ends it (the sidecars a row over HTTP
/// started for it) once it is done with.
pub struct RowRuntime {
    pub runtime: Runtime,
    /// In a mutex only to be shared between threads while it waits.
    retire: Option<std::sync::Mutex<futures::future::BoxFuture<'static, ()>>>,
}

impl RowRuntime {
    /// A runtime that needs no ending (in process).
    pub fn in_process(runtime: Runtime) -> Self {
        RowRuntime {
            runtime,
            retire: None,
        }
    }

    /// A runtime that `retire` ends.
    pub fn ended_by(runtime: Runtime, retire: futures::future::BoxFuture<'static, ()>) -> Self {
        RowRuntime {
            runtime,
            retire: Some(std::sync::Mutex::new(retire)),
        }
    }

    /// Ends what the runtime started.
    pub async fn retire(self) {
        if let Some(retire) = self.retire {
            retire.into_inner().unwrap_or_else(|p| p.into_inner()).await;
        }
    }
}

impl std::ops::Deref for RowRuntime {
    type Target = Runtime;

    fn deref(&self) -> &Runtime {
        &self.runtime
    }
}

/// Builds a component connected to the given `host:port`.
pub type ComponentFactory = Arc<
    dyn Fn(String) -> futures::future::BoxFuture<'static, Result<Arc<dyn Component>, String>>
        + Send
        + Sync,
>;

/// The factory that builds a resolved component against an endpoint.
pub fn factory_for(component: &Resolved) -> ComponentFactory {
    let component = component.clone();
    Arc::new(move |endpoint: String| {
        let build = component.build(Some(&endpoint));
        Box::pin(async move { build.await.map_err(|e| e.to_string()) })
    })
}

/// The factory that builds `definition`'s component against an endpoint (a type
/// this build does not know gives its error at each build).
pub fn factory_of(definition: &ComponentDefinition) -> ComponentFactory {
    match pubsub_components::registry::resolve(definition) {
        Ok(component) => factory_for(&component),
        Err(e) => {
            let refusal = e.to_string();
            Arc::new(move |_| {
                let refusal = refusal.clone();
                Box::pin(async move { Err(refusal) })
            })
        }
    }
}

/// `component` as a runtime through `wrap`, or in process.
pub async fn runtime_through(
    wrap: Option<&RuntimeWrapper>,
    name: String,
    component: Arc<dyn Component>,
) -> Result<RowRuntime, String> {
    match wrap {
        Some(wrap) => wrap(name, component).await,
        None => Ok(RowRuntime::in_process(Runtime::new(name, component))),
    }
}
