//! Deliberately defective components: the in-memory component with one contract
//! violation each, declared as if it were fine. Each must make the cases it breaks FAIL.
//! (Not the suite's fault injection, which kills brokers and cuts networks: a defect
//! is the component's own.)
//!
//! [`Faulty`] wraps the in-memory component; its defects are kept by what they break:
//! what is published (published.rs), what a receive hands out (delivered.rs), what a
//! member settles, seeks and leaves behind (consumer.rs), partition updates and
//! watches (partitions.rs), and what is declared (component.rs).

mod component;
mod consumer;
mod delivered;
mod partitions;
mod published;

pub use component::Faulty;

/// One contract violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    /// Silently acks and discards every third message it receives.
    Drops,
    /// Hands the seventh message a consumer receives out only half a second past the
    /// delivery bound (a retry path that backs off too long): late, not lost.
    DeliversOneLate,
    /// Delivers every message twice while claiming exactly-once.
    Duplicates,
    /// Hands each received batch over in reverse order.
    Reorders,
    /// Claims native delayed delivery and delivers at once.
    DeliversEarly,
    /// Claims native TTL and ignores it.
    IgnoresTtl,
    /// Claims native dead letters and never routes any (drops what it rejects).
    NeverDeadLetters,
    /// Reports entries the broker refused as published.
    LiesInBulkStatuses,
    /// Returns more than maxMessagesCount entries per native batch.
    OverfillsBatches,
    /// In a batch of a multi-topic subscription, delivers the entries of every topic
    /// but the first as attempt 2 on their first delivery (a consumer that puts back
    /// entries of other topics to batch topics apart, and counts the put-back as a
    /// delivery).
    CountsPutBackEntries,
    /// Holds partial native batches long past maxAwaitDuration.
    HoldsPartialBatches,
    /// Delivers ids without their owner topic.
    LosesOwnerTopic,
    /// A seek rewinds every subscribed topic.
    SeeksEverything,
    /// Acks the same position on every subscribed topic.
    AcksEveryTopic,
    /// Accepts acks for ids it cannot own.
    AcceptsForeignAcks,
    /// Repeats each id in `last_message_ids`.
    DuplicatesLastIds,
    /// Answers partition updates with success and changes nothing.
    IgnoresPartitionUpdates,
    /// Dropping a partition watcher ends every other watcher of its topic.
    DroppedWatcherStopsOthers,
    /// A deferral with no delay is read as one without a delay given: the component's
    /// default deferral, 30 s.
    DefersZeroByDefault,
    /// Deferring an empty list defers everything the member holds by 30 s (a loop
    /// over what is held, filtered by a list it reads as "all" when empty).
    EmptyDeferManyDefersAll,
    /// A seek moves the position of every group of the id's topic, not the seeking
    /// member's group only (a cursor kept per topic): the others take it when they
    /// next receive.
    SeeksEveryGroup,
    /// A seek to the last id of an owner goes past it, as to the latest position (an
    /// end bound compared with `>=` where `>` was meant): the last message never comes
    /// again; every other seek is right.
    SeeksLastAsLatest,
    /// Creating a topic that exists with more partitions adds them (a create that
    /// falls back to an update) instead of refusing.
    GrowsOnCreate,
    /// Every member of a group to start at the latest position starts there (a
    /// consumer's offset reset policy applied at each open rather than once for the
    /// group): what came while the group had no member is skipped.
    StartsLatestPerMember,
    /// A group to start at the latest position reads from the earliest (the start
    /// option dropped on the way to the broker).
    IgnoresStartLatest,
    /// Creating a topic that exists answers `Ok` whatever the count asked (an
    /// idempotent create that never compares the count).
    IgnoresCountOnCreate,
    /// A seek past the last id (out of range, as a log's reset policy reads it) goes
    /// back to the owner's earliest message: what was published before comes again.
    SeeksPastEndToEarliest,
    /// A cumulative acknowledgement settles up to the id for every group of its topic
    /// (an acknowledged offset kept per topic): the others take it when they next
    /// receive.
    AcksCumulativelyForEveryGroup,
    /// A consumer of a list of topics reads the partitions its partitioned topics had
    /// when it opened, and settles what later partitions carry unseen (a list resolved
    /// once into partitions); a consumer of one topic sees them all.
    ListsPartitionsAtOpen,
    /// Ignores the partition key when routing.
    MisroutesKeys,
    /// Routes the entries of a bulk request in turn over the partitions, ignoring
    /// their partition keys (a batch path that builds records without keys).
    RoutesBulkEntriesInTurn,
    /// Routes partition keys over 255 bytes in turn, as if they had none (a router
    /// that hashes only what the broker's key field holds).
    RoutesLongKeysInTurn,
    /// Acknowledges, acknowledges cumulatively and seeks on partition 0 of an id's
    /// topic, whichever partition the id names (an id parser that drops the
    /// partition): right on every topic of one partition.
    SettlesOnPartitionZero,
    /// Reads an id that names no partition as one of partition 0 when it acknowledges
    /// or seeks (an optional field read with its default): right for every id the
    /// component gave out, and on every topic of one partition.
    PartitionlessAsFirst,
    /// Takes an acknowledgement of an id it never handed out and keeps it: the message
    /// that later takes that id is settled on arrival, never handed over
    /// (acknowledgements kept by id, not checked against what was delivered).
    AcksAhead,
    /// Gives one last id per topic, the one furthest along, not one per partition.
    LastIdsPerTopic,
    /// Hands the messages of non-ASCII partition keys out in reverse within each
    /// receive (a component whose key hashing sends them to a LIFO side queue).
    ReordersNonAsciiKeys,
    /// Drops the trace context of every message.
    DropsTraceContext,
    /// Turns negative acks into acks: nothing is redelivered.
    NoRedelivery,
    /// A receive of at most 0 messages takes one off the queue and hands out none
    /// (`max.max(1)` on the way in, `truncate(max)` on the way out).
    ReceiveZeroTakesOne,
    /// A batch receive of at most 0 messages takes one batch entry off the queue and
    /// hands out none (the batch path's own `max.max(1)`; `receive` is right).
    BatchOfZeroTakesOne,
    /// Acknowledging an empty list acknowledges everything the member holds (an
    /// empty list read as "all").
    EmptyAckManyAcksAll,
    /// Acks what a consumer still holds when it leaves its group.
    LosesUnackedOnLeave,
    /// What a member held when its handle is dropped without a close stays with it for
    /// ever (a consumer whose close hands messages back and whose drop does nothing).
    KeepsWhatDroppedMembersHeld,
    /// What a member holds when it leaves while others of its group stay connected
    /// returns to the group only when a member opens after it left (as a broker keeps
    /// it in the leaver's persistent session until that session is resumed): right
    /// while members come one after another.
    StrandsHeldWhileOthersStay,
    /// Drops the content type of enveloped messages, the envelope's marker, so the
    /// envelope reaches the app as data.
    StripsEnvelope,
    /// Drops the runtime's `x-rt-raw` marker, so a CloudEvent sent rawPayload reaches
    /// the app unwrapped.
    StripsRawMarker,
    /// Truncates payloads over 4 KiB.
    TruncatesLargePayloads,
    /// Strips the NUL bytes that end a payload (a client that treats payloads as C
    /// strings).
    StripsTrailingNulBytes,
    /// Keeps an app's first 16 metadata entries and drops the rest (a header count
    /// limit the component does not declare).
    KeepsSixteenMetadataEntries,
    /// Replaces each character beyond the first Unicode plane in metadata values with
    /// U+FFFD (a client that encodes headers in a 3-byte UTF-8).
    ReplacesAstralCharsInMetadata,
    /// Drops the last byte of a payload of exactly the maximum size (an off-by-one
    /// in a length prefix).
    TruncatesAtMaximum,
    /// Refuses a payload of exactly the maximum size (`>=` where `>` was meant).
    RefusesExactMaximum,
    /// Delivers a message that stayed in the broker over 2 s without its empty
    /// metadata values (a cold read path that skips empty fields).
    LosesEmptyValuesAfterWait,
    /// Gives every consumer its own group, so group members do not share.
    IgnoresGroups,
    /// Puts every consumer in one group, so groups do not each get every message.
    MergesGroups,
    /// Declares partitions unsupported but does not refuse them with Unsupported.
    HidesPartitions,
    /// Keeps messages only for consumers already open, like a queue broker whose
    /// `create_group` does nothing: what was published for a group created ahead of
    /// its first member is lost.
    ForgetsCreatedGroups,
    /// Claims native TTL and expires messages at half their TTL.
    HalvesTtl,
    /// Redelivers a retried message at once, whatever the retry delay.
    IgnoresRetryDelay,
    /// Loses what is published to a group while it has no connected member.
    ForgetsWhileEmpty,
    /// Gives one message in 100 the CloudEvent id of the message before it.
    RepeatsEnvelopeIds,
    /// Reports partition versions the topic never had (1, 3, 5 for 1, 2, 3).
    PhantomVersions,
    /// Hands a partial batch over halfway through maxAwaitDurationMs.
    HandsPartialBatchesEarly,
    /// Takes no notice of partition notifications the client rejects.
    IgnoresRejectedPartitionUpdates,
    /// Dead-letters a raw payload without its content type.
    LosesDeadLetterContentType,
    /// Skips 1 acknowledgement in 100: the message comes back a moment later.
    SkipsAcks,
    /// Wraps an app-supplied CloudEvent in a second envelope.
    WrapsAppEvents,
    /// Claims native delayed delivery and counts receiverDelay from when the member
    /// first received the message, not from its publish time.
    DelaysFromReceipt,
    /// Claims native delayed delivery and serves messages strictly in order: a
    /// delayed message at the head holds back everything behind it.
    BlocksBehindDelayed,
    /// Claims native delayed delivery with a 1 s lease, and hands a message delayed
    /// longer out again when the lease expires.
    DelaysCappedAtLease,
    /// Claims native delayed delivery and delivers each delayed message two delay
    /// precisions after its due time.
    DeliversLate,
    /// A retry in one group also hands a copy to every other group of the topic when
    /// its retry delay ends.
    LeaksRetriesToOtherGroups,
    /// Takes messages off the queue, then works on them for 20 ms before handing
    /// them out: a receive dropped in that time strands them (not cancel-safe).
    StrandsDroppedReceives,
    /// Stores a topic name's `:` as `_` (a broker that cannot spell `:`): `a:b` and
    /// `a_b` become one topic.
    FoldsColons,
    /// Stores a group name in lower case (a broker whose group names ignore case):
    /// `g-a` and `g-A` become one group, sharing its deliveries.
    FoldsGroupCase,
    /// Delivers nothing to one group name in nine (those ending in `ga`, as
    /// `groups.distinct-names` spells `<base>a`), as tansu 0.6.0 does to a group whose
    /// first member left before it was assigned: its members read an empty topic.
    StarvesOneGroup,
    /// Stores metadata keys in lower case (a broker whose header names ignore case):
    /// of `app-Case` and `app-case` one value survives, under the lower-case key.
    FoldsMetadataKeyCase,
    /// Delivers 1 message in 100 without its metadata (its payload intact).
    StripsMetadata,
    /// Delivers 1 message in 100 with the metadata of the message it received before.
    BorrowsMetadata,
    /// Counts a message's attempts across groups: a retry in one group raises the
    /// attempt another group sees (its first delivery there comes as attempt 2).
    CountsAttemptsAcrossGroups,
    /// Dead-lettering a message in one group also settles it for the topic's groups
    /// that have no member connected at that moment (a broker whose dead-letter move
    /// takes the message off the topic): a group subscribed later never gets it.
    SettlesDeadLettersForIdleGroups,
    /// A retry with a delay of a second or more (moved to the topic's delay queue)
    /// adds to the attempt count of the topic's groups that have no member connected at
    /// that moment: their first delivery comes as a later attempt.
    CountsDelayedRetriesForIdleGroups,
    /// Counts a message's attempts in the member that receives it: a message one
    /// member retried comes to another as attempt 1 (a client that keeps the delivery
    /// count itself rather than reading the broker's). Right while a group keeps one
    /// member.
    ResetsAttemptsAcrossMembers,
    /// Claims native delayed delivery and publishes the entries of a bulk request
    /// without their due times (a batch path that builds its records without the
    /// delay header): right for single publishes, and for bulk ones without delays.
    DropsDueTimesInBulk,
    /// No violation: declares a 1 s lease, after which the broker takes back what a
    /// member has not settled, and cannot extend it (`extend_lease` refuses): the
    /// runtime must defer delayed messages rather than hold them past the lease.
    LeaseWithoutExtension,
    /// Declares a 1 s lease and answers `extend_lease` with `Ok` without extending
    /// anything: a message held past the lease is handed out again.
    PretendsToExtendLease,
    /// Accepts a seek to an id without an owner topic (and moves nothing).
    AcceptsForeignSeeks,
    /// Seeking to earliest or latest moves only the first topic.
    SeeksOneTopic,
    /// `ack_many` acknowledges the ids it can before refusing a foreign one.
    AcksManyPartially,
    /// A watcher over several topics carries only the topic that changed.
    WatchesChangedTopicOnly,
    /// Gives a dead-lettered copy a CloudEvent id of its own.
    RenamesDeadLetters,
    /// A cumulative ack acknowledges up to the position on every subscribed topic.
    AcksCumulativeEverywhere,
    /// Every read rechecks what the group read before (as a queue table read from its
    /// start would): a read costs 150 ns per message already read.
    RescansWhatItRead,
    /// No violation: declares exactly-once, which the in-memory component keeps
    /// (for the test that exactly-once is judged by what is declared).
    DeclaresExactlyOnce,
    /// A correct component that declares no maximum message size (it has none).
    DeclaresNoSizeLimit,
    /// A correct component that delays on the producer side only.
    DeclaresNoReceiverDelay,
    /// A correct work queue: one group per topic.
    DeclaresNoFanOut,
    /// No violation: acknowledges one id at a time (`ack_many` is the trait's default,
    /// `Unsupported`), as omniqueue's adapter does.
    CannotAckMany,
}
