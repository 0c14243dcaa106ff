//! The change feed: every persisted change to a notification, a vmove, a
//! progress event or an instance's timeline, published after its
//! transaction commits. The dispatcher
//! listens for new notifications; watchers follow one notification.
//!
//! A broadcast channel: publishing never waits, so a slow listener cannot
//! slow a recovery down; a listener that falls behind is told so and
//! re-reads the database.

use std::sync::Arc;

use tokio::sync::broadcast;

use crate::domain::{InstanceStep, Notification, NotificationId, ProgressEvent, VMove};

/// One persisted change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A notification was stored or changed status.
    Notification(Notification),
    /// A vmove was created or changed.
    VMove(VMove),
    /// A progress event was appended.
    Progress {
        notification_id: NotificationId,
        event: ProgressEvent,
    },
    /// An instance entered a step of its recovery.
    Step(InstanceStep),
}

impl Change {
    pub fn notification_id(&self) -> NotificationId {
        match self {
            Self::Notification(n) => n.id,
            Self::VMove(v) => v.notification_id,
            Self::Progress {
                notification_id, ..
            } => *notification_id,
            Self::Step(step) => step.notification_id,
        }
    }
}

/// How many changes a listener may fall behind before it is told it lagged.
const CAPACITY: usize = 8192;

#[derive(Clone, Debug)]
pub struct ChangeFeed {
    sender: broadcast::Sender<Arc<Change>>,
}

impl Default for ChangeFeed {
    fn default() -> Self {
        Self::new()
    }
}

impl ChangeFeed {
    pub fn new() -> Self {
        let (sender, _) = broadcast::channel(CAPACITY);
        Self { sender }
    }

    /// Publishes a committed change; never blocks.
    pub fn publish(&self, change: Change) {
        // No listener is fine: nobody is watching.
        let _ = self.sender.send(Arc::new(change));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.sender.subscribe()
    }
}
