//! Defects of partition watches: versions the topic never had, rejected
//! notifications never sent again, a watcher over several topics that carries only
//! the topic that changed. (A partition update the component ignores is in
//! component.rs.)

use pubsub_components::{PartitionUpdate, PartitionWatch, PartitionsWatch};
use std::time::Duration;

/// For [`super::Defect::WatchesChangedTopicOnly`]: `merged`, each state cut down to the
/// topic that changed.
pub(super) fn changed_topic_only(mut merged: PartitionsWatch) -> PartitionsWatch {
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(mut state) = merged.next_within(Duration::from_secs(3600)).await {
            let changed = state.changed.clone();
            state.topics.retain(|topic, _| *topic == changed);
            if sender.send(state).is_err() {
                break;
            }
        }
    });
    PartitionsWatch::new(receiver)
}

/// For [`super::Defect::PhantomVersions`]: `watch` with versions 1, 3, 5 for 1, 2, 3
/// (and rejections of them mapped back).
pub(super) fn phantom_versions(watch: PartitionWatch) -> PartitionWatch {
    let (mut updates, rejections) = watch.into_parts();
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    let (phantom_rejections, mut rejected) =
        tokio::sync::mpsc::unbounded_channel::<PartitionUpdate>();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                update = updates.recv() => {
                    let Some(mut update) = update else { break };
                    update.version = update.version * 2 - 1;
                    if sender.send(update).is_err() {
                        break;
                    }
                }
                Some(mut update) = rejected.recv() => {
                    update.version = update.version.div_ceil(2);
                    if let Some(rejections) = &rejections {
                        let _ = rejections.send(update);
                    }
                }
            }
        }
    });
    PartitionWatch::with_rejections(receiver, phantom_rejections)
}

/// For [`super::Defect::IgnoresRejectedPartitionUpdates`]: `watch` taking no notice
/// of rejected notifications, so the client never gets the state it could not apply
/// again.
pub(super) fn ignoring_rejections(watch: PartitionWatch) -> PartitionWatch {
    let (updates, _rejections) = watch.into_parts();
    PartitionWatch::new(updates)
}

/// The outward ends of a topic's watchers, for [`super::Defect::DroppedWatcherStopsOthers`].
pub(super) type Siblings =
    std::sync::Arc<std::sync::Mutex<Vec<tokio::sync::mpsc::UnboundedSender<PartitionUpdate>>>>;

/// For [`super::Defect::DroppedWatcherStopsOthers`]: `watch`, ended once any watcher of
/// its topic has been dropped (`siblings` holds every watcher of the topic: they share
/// one subscription to its record, which the first watcher dropped cancels).
pub(super) fn stopped_by_dropped_watchers(
    watch: PartitionWatch,
    siblings: Siblings,
) -> PartitionWatch {
    let (mut updates, rejections) = watch.into_parts();
    let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
    siblings.lock().unwrap().push(sender.clone());
    tokio::spawn(async move {
        while let Some(update) = updates.recv().await {
            let cancelled = siblings.lock().unwrap().iter().any(|s| s.is_closed());
            if cancelled || sender.send(update).is_err() {
                break;
            }
        }
    });
    match rejections {
        Some(rejections) => PartitionWatch::with_rejections(receiver, rejections),
        None => PartitionWatch::new(receiver),
    }
}
