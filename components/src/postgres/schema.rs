//! The PostgreSQL component's tables and server-side functions, created (or brought
//! up to date) when the component connects.
//!
//! How a group reads without rescanning: every message row records the transaction
//! that wrote it (`tx`, an `xid8`). A group's cursor (`read_tx`, `read_id`) moves
//! through a topic in `(tx, id)` order, and only over rows whose transaction is older
//! than the oldest one still running (the snapshot's `xmin`, the *horizon*). Sequence
//! values can commit out of order, but no row can ever appear behind the horizon, so
//! a cursor never skips a row that commits late, and a read costs the same however
//! much of the topic the group has already read.
//!
//! Rows a group's cursor has passed become its `pending` rows (with the time they are
//! due: a delay, a receiver delay, a lease, a retry delay); a member claims due rows
//! with `FOR UPDATE SKIP LOCKED`, and an acknowledgement deletes the row (members
//! vacuum the pending table as they acknowledge, so that claims never walk over the
//! index entries of thousands of deleted rows until autovacuum comes). A message
//! every group has passed and acknowledged is deleted once it is older than the
//! retention (`trim`).

/// The statements that create the tables and functions under `prefix`, run in one
/// transaction under an advisory lock, so that components connecting at once do not
/// race on the catalogue.
pub(super) fn setup(prefix: &str) -> String {
    let p = prefix;
    format!(
        r#"BEGIN;
SELECT pg_advisory_xact_lock(hashtext('pubsub-conformance schema {p}'));
CREATE TABLE IF NOT EXISTS {p}_messages (
    id BIGSERIAL PRIMARY KEY, topic TEXT NOT NULL, payload BYTEA NOT NULL,
    content_type TEXT, metadata TEXT NOT NULL, partition_key TEXT,
    published_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    visible_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp());
ALTER TABLE {p}_messages ADD COLUMN IF NOT EXISTS tx xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX IF NOT EXISTS {p}_messages_topic ON {p}_messages (topic, id);
CREATE INDEX IF NOT EXISTS {p}_messages_commit_order ON {p}_messages (topic, tx, id);
CREATE TABLE IF NOT EXISTS {p}_cursors (
    grp TEXT NOT NULL, topic TEXT NOT NULL,
    floor BIGINT NOT NULL, read_tx xid8 NOT NULL, read_id BIGINT NOT NULL,
    PRIMARY KEY (grp, topic));
CREATE TABLE IF NOT EXISTS {p}_pending (
    grp TEXT NOT NULL, message_id BIGINT NOT NULL, topic TEXT NOT NULL,
    attempts INT NOT NULL, visible_at TIMESTAMPTZ NOT NULL, owner TEXT,
    PRIMARY KEY (grp, message_id));
CREATE INDEX IF NOT EXISTS {p}_pending_due ON {p}_pending (grp, visible_at);
CREATE INDEX IF NOT EXISTS {p}_pending_message ON {p}_pending (message_id);
CREATE TABLE IF NOT EXISTS {p}_partitions (
    topic TEXT PRIMARY KEY, version BIGINT NOT NULL, partitions INT NOT NULL);

-- Registers group g on topics (kept where it exists): from the start, or past what
-- is committed now.
CREATE OR REPLACE FUNCTION {p}_register(g text, topics text[], latest boolean) RETURNS void
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    horizon xid8 := pg_snapshot_xmin(pg_current_snapshot());
BEGIN
    INSERT INTO {p}_cursors (grp, topic, floor, read_tx, read_id)
    SELECT g, t,
           CASE WHEN latest THEN COALESCE((SELECT max(m.id) FROM {p}_messages m WHERE m.topic = t), 0) ELSE 0 END,
           COALESCE(last.tx, '0'::xid8), COALESCE(last.id, 0)
    FROM unnest(topics) AS t
    LEFT JOIN LATERAL (
        SELECT m.tx, m.id FROM {p}_messages m
        WHERE latest AND m.topic = t AND m.tx < horizon
        ORDER BY m.tx DESC, m.id DESC LIMIT 1) last ON true
    ON CONFLICT DO NOTHING;
END $fn$;

-- Moves up to n rows per topic past group g's cursors into its pending rows (unless
-- n rows are due already), then claims up to n due rows for member who and returns
-- them with their messages.
CREATE OR REPLACE FUNCTION {p}_take(g text, topics text[], who text, n int, lease_ms bigint, delay_ms bigint)
RETURNS TABLE(id bigint, topic text, payload bytea, content_type text, metadata text,
              partition_key text, published_us bigint, attempts int)
LANGUAGE plpgsql
-- Walk the indexes in order and stop at n rows: without statistics (a new table) the
-- planner would rather collect every row past the cursor and sort them.
SET enable_bitmapscan = off SET enable_seqscan = off
AS $fn$
#variable_conflict use_column
DECLARE
    horizon xid8 := pg_snapshot_xmin(pg_current_snapshot());
    c record;
BEGIN
    IF (SELECT count(*) FROM (
            SELECT 1 FROM {p}_pending q
            WHERE q.grp = g AND q.topic = ANY(topics) AND q.visible_at <= clock_timestamp()
            LIMIT n) ready) < n THEN
        FOR c IN SELECT k.topic AS t, k.floor AS f, k.read_tx AS rt, k.read_id AS ri
                 FROM {p}_cursors k WHERE k.grp = g AND k.topic = ANY(topics)
                 ORDER BY k.topic FOR UPDATE LOOP
            WITH batch AS (
                SELECT m.id AS mid, m.tx AS mtx, m.visible_at AS due_at, m.published_at AS sent_at
                FROM {p}_messages m
                WHERE m.topic = c.t AND (m.tx, m.id) > (c.rt, c.ri) AND m.tx < horizon
                ORDER BY m.tx, m.id LIMIT n),
            moved AS (
                INSERT INTO {p}_pending (grp, message_id, topic, attempts, visible_at, owner)
                SELECT g, b.mid, c.t, 0, greatest(b.due_at, b.sent_at + delay_ms * interval '1 millisecond'), NULL
                FROM batch b WHERE b.mid > c.f
                ON CONFLICT DO NOTHING)
            UPDATE {p}_cursors k SET read_tx = last.mtx, read_id = last.mid
            FROM (SELECT b.mtx, b.mid FROM batch b ORDER BY b.mtx DESC, b.mid DESC LIMIT 1) last
            WHERE k.grp = g AND k.topic = c.t;
        END LOOP;
    END IF;
    RETURN QUERY
    WITH claimed AS (
        UPDATE {p}_pending p
        SET attempts = p.attempts + 1, owner = who,
            visible_at = clock_timestamp() + lease_ms * interval '1 millisecond'
        WHERE (p.grp, p.message_id) IN (
            SELECT q.grp, q.message_id FROM {p}_pending q
            WHERE q.grp = g AND q.topic = ANY(topics) AND q.visible_at <= clock_timestamp()
            ORDER BY q.message_id LIMIT n FOR UPDATE SKIP LOCKED)
        RETURNING p.message_id AS mid, p.attempts AS tries)
    SELECT m.id, m.topic, m.payload, m.content_type, m.metadata, m.partition_key,
           (extract(epoch FROM m.published_at) * 1000000)::int8, c2.tries
    FROM claimed c2 JOIN {p}_messages m ON m.id = c2.mid
    ORDER BY m.id;
END $fn$;

-- What an idle member waits for: milliseconds until group g's next pending row is due
-- (NULL: none), and whether rows wait beyond the horizon (a transaction older than
-- them is still running, so they are readable in a moment).
CREATE OR REPLACE FUNCTION {p}_idle(g text, topics text[], OUT due_in_ms bigint, OUT held_back boolean)
LANGUAGE sql AS $fn$
    SELECT (SELECT (extract(epoch FROM min(q.visible_at) - clock_timestamp()) * 1000)::int8
            FROM {p}_pending q WHERE q.grp = g AND q.topic = ANY(topics)),
           EXISTS (SELECT 1 FROM {p}_cursors k
                   WHERE k.grp = g AND k.topic = ANY(topics)
                     AND EXISTS (SELECT 1 FROM {p}_messages m
                                 WHERE m.topic = k.topic AND (m.tx, m.id) > (k.read_tx, k.read_id)))
$fn$;

-- Repositions group g on topic t so that message x (inclusive) is the next one read:
-- ids below x are passed (the floor); what the group holds from x on is forgotten and
-- read again. The cursor goes back to just before the first committed row at or after
-- x, never past a transaction still running.
CREATE OR REPLACE FUNCTION {p}_seek(g text, t text, x bigint) RETURNS void
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    horizon xid8 := pg_snapshot_xmin(pg_current_snapshot());
    first_tx xid8;
    first_id bigint;
BEGIN
    PERFORM 1 FROM {p}_cursors k WHERE k.grp = g AND k.topic = t FOR UPDATE;
    SELECT m.tx, m.id INTO first_tx, first_id FROM {p}_messages m
    WHERE m.topic = t AND m.id >= x AND m.tx < horizon
    ORDER BY m.tx, m.id LIMIT 1;
    IF first_tx IS NULL THEN
        first_tx := horizon;
        first_id := 1;
    END IF;
    UPDATE {p}_cursors k SET floor = x - 1, read_tx = first_tx, read_id = first_id - 1
    WHERE k.grp = g AND k.topic = t;
    DELETE FROM {p}_pending q WHERE q.grp = g AND q.topic = t AND q.message_id >= x;
END $fn$;

-- Deletes up to n messages of topics that every group registered on them has read
-- past and acknowledged, published more than keep_ms ago; returns how many.
CREATE OR REPLACE FUNCTION {p}_trim(topics text[], keep_ms bigint, n int) RETURNS bigint
LANGUAGE sql AS $fn$
    WITH lowest AS (
        SELECT DISTINCT ON (k.topic) k.topic AS t, k.read_tx AS rt, k.read_id AS ri
        FROM {p}_cursors k WHERE k.topic = ANY(topics)
        ORDER BY k.topic, k.read_tx, k.read_id),
    gone AS (
        DELETE FROM {p}_messages m
        WHERE m.id IN (
            SELECT h.id FROM lowest l
            CROSS JOIN LATERAL (
                SELECT m2.id, m2.published_at FROM {p}_messages m2
                WHERE m2.topic = l.t AND (m2.tx, m2.id) <= (l.rt, l.ri)
                ORDER BY m2.tx, m2.id LIMIT n) h
            WHERE h.published_at <= clock_timestamp() - keep_ms * interval '1 millisecond')
          AND NOT EXISTS (SELECT 1 FROM {p}_pending q WHERE q.message_id = m.id)
        RETURNING 1)
    SELECT count(*) FROM gone
$fn$;
COMMIT;"#
    )
}
