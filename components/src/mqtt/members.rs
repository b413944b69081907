//! A group's members in one process, and where what a leaving member held goes.
//!
//! One member per group and process holds the group's persistent session (the anchor,
//! client id [`super::Mqtt5::anchor_id`]): the broker keeps for it what is published
//! while no member is connected. Further members use clean sessions. Neither kind of
//! session gives back what it holds when it ends while others stay: a broker keeps a
//! persistent session's unacknowledged messages until the session is resumed, and
//! Mosquitto drops a clean session's (MQTT 5 4.8.2 only says it SHOULD hand them to
//! another subscriber). So when a member leaves while others of its group stay:
//! * one of them resumes the persistent session the leaver held (a second
//!   connection of that member), and the broker hands out again what it held;
//! * a clean session unsubscribes and hands what it holds to one of them (its heir),
//!   staying connected until the heir settled all of it, since only that session
//!   can acknowledge it.

use super::{convert, drain_until_closed, open_session, records, MqttConfig, SETUP_BOUND};
use crate::component::{glob_match, TopicSelector};
use crate::error::Result;
use crate::message::{MessageId, ReceivedMessage};
use rumqttc::v5::mqttbytes::v5::{Filter, Packet, Publish};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, Event, EventLoop};
use rumqttc::Outgoing;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;

/// A message handed out and not settled yet, with the session that must settle it.
pub(super) struct Held {
    pub(super) publish: Publish,
    pub(super) message: ReceivedMessage,
    pub(super) client: AsyncClient,
    /// Whether the application received it (else it waits in a member's queue).
    pub(super) handed_out: bool,
    session: u64,
    _ticket: Ticket,
}

/// A session's unsettled messages, wherever they are: a retired session ends once
/// none is left.
#[derive(Default)]
struct Outstanding {
    count: AtomicUsize,
    settled: Notify,
}

impl Outstanding {
    /// Waits until no message of the session is unsettled.
    async fn all_settled(&self) {
        loop {
            let settled = self.settled.notified();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            settled.await;
        }
    }
}

/// Counts one unsettled message of a session while it lives.
struct Ticket(Arc<Outstanding>);

impl Ticket {
    fn new(outstanding: &Arc<Outstanding>) -> Self {
        outstanding.count.fetch_add(1, Ordering::SeqCst);
        Ticket(outstanding.clone())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}

/// Takes the entries `pick` chooses out of `unacked`.
fn take_held(unacked: &Unacked, pick: impl Fn(&Held) -> bool) -> Vec<(MessageId, Held)> {
    let mut unacked = unacked.lock().expect("unacked lock");
    let ids: Vec<MessageId> = unacked
        .iter()
        .filter(|(_, held)| pick(held))
        .map(|(id, _)| id.clone())
        .collect();
    ids.into_iter()
        .filter_map(|id| unacked.remove_entry(&id))
        .collect()
}

/// Numbers every session of the process apart.
static NEXT_SESSION: AtomicU64 = AtomicU64::new(0);

pub(super) type Unacked = Arc<Mutex<HashMap<MessageId, Held>>>;

/// The members of each group in this process, by anchor id.
pub(super) type Groups = Arc<Mutex<HashMap<String, Anchoring>>>;

/// Who of a group's members holds its persistent session.
#[derive(Default)]
pub(super) struct Anchoring {
    holder: Weak<Member>,
    members: Vec<Weak<Member>>,
}

/// Whether a live member of the group `anchor_id` holds its persistent session.
pub(super) fn is_held(groups: &Groups, anchor_id: &str) -> bool {
    lock(groups)
        .get(anchor_id)
        .is_some_and(|a| a.holder.upgrade().is_some())
}

fn lock(groups: &Groups) -> std::sync::MutexGuard<'_, HashMap<String, Anchoring>> {
    groups.lock().unwrap_or_else(|p| p.into_inner())
}

/// One connection of a member.
struct Session {
    id: u64,
    client: AsyncClient,
    /// Whether it is the group's persistent session.
    anchor: bool,
    filters: Vec<String>,
    task: JoinHandle<()>,
    /// Becomes true once the connection is closed.
    done: watch::Receiver<bool>,
    /// Where its reader puts what arrives.
    target: Arc<Mutex<Target>>,
    /// Its unsettled messages, wherever they are.
    outstanding: Arc<Outstanding>,
}

impl Session {
    /// Disconnects (what was queued before, acks, goes out first) and waits until
    /// the connection closed.
    async fn end(self) {
        let _ = self.client.disconnect().await;
        let mut done = self.done.clone();
        let _ = tokio::time::timeout(SETUP_BOUND, done.wait_for(|closed| *closed)).await;
        self.task.abort();
    }

    /// Stops taking messages, and ends once what it handed out is settled (or
    /// dropped, its holder leaving with no one to take it).
    fn wind_down(self) {
        for filter in &self.filters {
            let _ = self.client.try_unsubscribe(filter.clone());
        }
        tokio::spawn(async move {
            self.outstanding.all_settled().await;
            self.end().await;
        });
    }

    /// Hands what it holds to `heir` and winds down.
    fn retire(self, from: &Unacked, heir: &Member) {
        {
            let mut target = self.target.lock().expect("target lock");
            hand_over(take_held(from, |held| held.session == self.id), heir);
            *target = heir.target();
        }
        self.wind_down();
    }
}

/// Puts `moved` (messages another member held) into `heir`'s queue: one it received
/// comes to the heir as its next attempt.
fn hand_over(moved: Vec<(MessageId, Held)>, heir: &Member) {
    let mut unacked = heir.unacked.lock().expect("unacked lock");
    for (id, mut held) in moved {
        if held.handed_out {
            held.message.attempt += 1;
            held.handed_out = false;
        }
        let _ = heir.deliveries.send(held.message.clone());
        unacked.insert(id, held);
    }
}

/// Where a session's reader puts what arrives: a member's queue and unsettled
/// messages.
#[derive(Clone)]
struct Target {
    deliveries: mpsc::UnboundedSender<ReceivedMessage>,
    unacked: Unacked,
}

/// A member's receiving side: its sessions feed one delivery queue.
pub(super) struct Member {
    config: MqttConfig,
    filters: Vec<String>,
    topics: TopicSelector,
    pub(super) deliveries: mpsc::UnboundedSender<ReceivedMessage>,
    pub(super) unacked: Unacked,
    sessions: Mutex<Vec<Session>>,
    closed: AtomicBool,
    groups: Groups,
    anchor_id: String,
}

impl Member {
    /// Joins the group `anchor_id` and connects: with its persistent session when no
    /// live member holds it, else with a clean one.
    pub(super) async fn join(
        config: MqttConfig,
        filters: Vec<String>,
        topics: TopicSelector,
        groups: Groups,
        anchor_id: String,
    ) -> Result<(Arc<Member>, mpsc::UnboundedReceiver<ReceivedMessage>)> {
        let (deliveries, incoming) = mpsc::unbounded_channel();
        let member = Arc::new(Member {
            config,
            filters,
            topics,
            deliveries,
            unacked: Arc::default(),
            sessions: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            groups,
            anchor_id,
        });
        let anchor = {
            let mut groups = lock(&member.groups);
            let anchoring = groups.entry(member.anchor_id.clone()).or_default();
            anchoring.members.push(Arc::downgrade(&member));
            let free = anchoring.holder.upgrade().is_none();
            if free {
                anchoring.holder = Arc::downgrade(&member);
            }
            free
        };
        let client_id = if anchor {
            member.anchor_id.clone()
        } else {
            format!("pcs-member-{}", uuid::Uuid::new_v4().simple())
        };
        if let Err(e) = member.connect(&client_id, anchor).await {
            member.closed.store(true, Ordering::SeqCst);
            if let (Some(holder), _) = member.forget() {
                holder.take_over().await;
            }
            return Err(e);
        }
        Ok((member, incoming))
    }

    /// Where this member's sessions put what arrives.
    fn target(&self) -> Target {
        Target {
            deliveries: self.deliveries.clone(),
            unacked: self.unacked.clone(),
        }
    }

    /// Opens a session and reads it into the delivery queue.
    async fn connect(&self, client_id: &str, persistent: bool) -> Result<()> {
        let (client, events, early) =
            open_session(&self.config, client_id, persistent, self.filters.clone()).await?;
        let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
        let target = Arc::new(Mutex::new(self.target()));
        let outstanding = Arc::new(Outstanding::default());
        let reader = Reader {
            filters: self.filters.clone(),
            topics: self.topics.clone(),
            prefix: self.config.topic_prefix.clone(),
            client: client.clone(),
            target: target.clone(),
            outstanding: outstanding.clone(),
            session: id,
        };
        let (finished, done) = watch::channel(false);
        let task = tokio::spawn(async move {
            reader.run(events, early).await;
            let _ = finished.send(true);
        });
        self.sessions.lock().expect("sessions lock").push(Session {
            id,
            client,
            anchor: persistent,
            filters: self.filters.clone(),
            task,
            done,
            target,
            outstanding,
        });
        Ok(())
    }

    /// Leaves the group. Where another member stays: the persistent session, if this
    /// member held it, goes to one of them, which resumes it; a clean session hands
    /// what it holds to one of them (with what other members handed here). Else every
    /// session disconnects, the persistent one keeping its messages on the broker.
    pub(super) async fn leave(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let sessions: Vec<Session> =
            std::mem::take(&mut *self.sessions.lock().expect("sessions lock"));
        let (holder, heir) = self.forget();
        if let Some(heir) = &heir {
            // What came from other members' retired sessions goes on too.
            let foreign = take_held(&self.unacked, |held| {
                !sessions.iter().any(|s| s.id == held.session)
            });
            hand_over(foreign, heir);
        }
        for session in sessions {
            match &heir {
                Some(heir) if !session.anchor => session.retire(&self.unacked, heir),
                _ => session.end().await,
            }
        }
        if let Some(holder) = holder {
            holder.take_over().await;
        }
    }

    /// Takes this member off its group's list; returns the member that is to hold the
    /// persistent session now (if this one held it and another stays) and a member
    /// that stays (the heir of what this one holds).
    fn forget(&self) -> (Option<Arc<Member>>, Option<Arc<Member>>) {
        let mut groups = lock(&self.groups);
        let Some(anchoring) = groups.get_mut(&self.anchor_id) else {
            return (None, None);
        };
        let this = self as *const Member;
        anchoring.members.retain(|m| {
            m.upgrade().is_some_and(|m| {
                !std::ptr::eq(Arc::as_ptr(&m), this) && !m.closed.load(Ordering::SeqCst)
            })
        });
        let heir = anchoring.members.iter().find_map(Weak::upgrade);
        let held_here = match anchoring.holder.upgrade() {
            Some(holder) => std::ptr::eq(Arc::as_ptr(&holder), this),
            None => true,
        };
        let holder = if held_here {
            anchoring.holder = heir.as_ref().map(Arc::downgrade).unwrap_or_default();
            heir.clone()
        } else {
            None
        };
        if anchoring.members.is_empty() {
            groups.remove(&self.anchor_id);
        }
        (holder, heir)
    }

    /// Resumes the group's persistent session: the broker hands out again what the
    /// session held. The member's clean session winds down (so that what it would hold
    /// when the member leaves last is not lost with it).
    async fn take_over(self: Arc<Self>) {
        let anchor_id = self.anchor_id.clone();
        if let Err(e) = self.connect(&anchor_id, true).await {
            tracing::warn!(error = %e, group = %anchor_id, "taking over the group's persistent session failed");
            let mut groups = lock(&self.groups);
            if let Some(anchoring) = groups.get_mut(&anchor_id) {
                anchoring.holder = Weak::new();
            }
            return;
        }
        let clean: Vec<Session> = {
            let mut sessions = self.sessions.lock().expect("sessions lock");
            let (anchor, clean) = std::mem::take(&mut *sessions)
                .into_iter()
                .partition(|s| s.anchor);
            *sessions = anchor;
            clean
        };
        for session in clean {
            session.wind_down();
        }
        // Closed meanwhile: it leaves the session as any holder does.
        if self.closed.load(Ordering::SeqCst) {
            self.closed.store(false, Ordering::SeqCst);
            Box::pin(self.leave()).await;
        }
    }

    /// Leaves without waiting (a member dropped without a close): as a close does,
    /// so that the broker hands what it held to the other members.
    pub(super) fn leave_in_background(self: &Arc<Self>) {
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let member = self.clone();
                runtime.spawn(async move { member.leave().await });
            }
            Err(_) => {
                self.closed.store(true, Ordering::SeqCst);
                for session in self.sessions.lock().expect("sessions lock").drain(..) {
                    session.task.abort();
                }
                self.forget();
            }
        }
    }

    /// Notes that the application received `ids` (a message handed to an heir then
    /// comes as its next attempt).
    pub(super) fn handed_out(&self, ids: &[MessageId]) {
        let mut unacked = self.unacked.lock().expect("unacked lock");
        for id in ids {
            if let Some(held) = unacked.get_mut(id) {
                held.handed_out = true;
            }
        }
    }
}

/// Reads one session's event loop into its member's delivery queue. When the
/// connection comes back without its session (the broker restarted and kept nothing,
/// or the session was clean), it subscribes again.
struct Reader {
    /// The broker filters of its subscriptions.
    filters: Vec<String>,
    topics: TopicSelector,
    prefix: String,
    client: AsyncClient,
    /// Its member's queue, or its heir's once the session retired.
    target: Arc<Mutex<Target>>,
    outstanding: Arc<Outstanding>,
    /// Which session this is.
    session: u64,
}

impl Reader {
    async fn run(self, mut events: EventLoop, early: Vec<Publish>) {
        for publish in early {
            self.take(publish);
        }
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::Publish(publish))) => self.take(publish),
                Ok(Event::Incoming(Packet::ConnAck(ack))) if !ack.session_present => {
                    // A reconnect into a new session: its subscriptions are gone.
                    // What was held unacknowledged belongs to the old session.
                    let target = self.target.lock().expect("target lock").clone();
                    target
                        .unacked
                        .lock()
                        .expect("unacked lock")
                        .retain(|_, held| held.session != self.session);
                    let filters = self
                        .filters
                        .iter()
                        .map(|f| Filter::new(f.clone(), QoS::AtLeastOnce));
                    if let Err(e) = self.client.try_subscribe_many(filters) {
                        tracing::warn!(error = %e, "subscribing again after a reconnect failed");
                    }
                }
                Ok(Event::Outgoing(Outgoing::Disconnect)) => {
                    // Closing: what was queued before went out with it.
                    drain_until_closed(&mut events).await;
                    break;
                }
                Ok(_) => {}
                Err(_)
                    if self
                        .target
                        .lock()
                        .expect("target lock")
                        .deliveries
                        .is_closed() =>
                {
                    break
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    fn take(&self, publish: Publish) {
        let topic = String::from_utf8_lossy(&publish.topic).into_owned();
        let topic = topic
            .strip_prefix(&self.prefix)
            .unwrap_or(&topic)
            .to_string();
        let covered = match &self.topics {
            TopicSelector::Pattern(pattern) => glob_match(pattern, &topic),
            selector => selector.matches(&topic),
        };
        // The component's own records (partition counts) are never messages.
        let covered = covered && !topic.starts_with(records::RESERVED);
        if !covered {
            // Under the pattern's broker filter but not the pattern: not this group's.
            let _ = self.client.try_ack(&publish);
            return;
        }
        let message = convert(topic, &publish);
        let held = Held {
            publish,
            message: message.clone(),
            client: self.client.clone(),
            handed_out: false,
            session: self.session,
            _ticket: Ticket::new(&self.outstanding),
        };
        let target = self.target.lock().expect("target lock");
        target
            .unacked
            .lock()
            .expect("unacked lock")
            .insert(message.id.clone(), held);
        let _ = target.deliveries.send(message);
    }
}
