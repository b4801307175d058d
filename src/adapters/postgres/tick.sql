-- The parts a tick's statements are built from. Both kinds of tick end in the same
-- judging part (judge + report): it judges the pairs found on the host's current rows by
-- the core's rules and acts (charges, drains, resets, holds back), and the report returns
-- what was done. The full pass finds every pair in the same statement (find_every_pair,
-- one snapshot); the delta finds those whose decision can have changed since the last
-- tick in a statement of its own (find_changed), planned for its values, and sends them
-- as arrays (find_given). adapters.postgres._ledger (TICKS) names the parts of each
-- statement; expanded/ holds each statement as it runs (stall-nudge sql prints them).
--
-- A part is a list of CTEs, or the final SELECT. Between them: found (endpoint_id text,
-- queue, key, head, head_at), the pairs to judge, each once, with the endpoint id in
-- the host's type (key) and, from a full pass, the pair's oldest pending todo (head,
-- as text) when that is its work, and its created_at. Parameters of the judging
-- statements and the delta's finding one: $1 now, $2 threshold (µs), $3 backoff (µs[]),
-- $4 cap, $5 tick_limit, $6 quarantine queue name; each adds its own after them.
-- Durations arrive as microseconds so no interval carries a days field (PostgreSQL
-- would add those as calendar days in the session time zone).

-- part: find_every_pair
-- The full pass: every pair with a pending todo, a ledger row or a held entry. Its cost
-- follows pairs, not todos: a skip scan of the pending index, each step one descent to
-- the next pair's first entry (its head: the oldest pending todo), read with its row.
-- The judging part reads each head in the same snapshot, so it is current. Defines heads
-- and found.
heads AS (
    (SELECT t.endpoint_id, t.queue, t.created_at, t.id, t.delivery_id FROM @todos t
      WHERE t.state = 'pending' AND {{short_names(t)}}
      ORDER BY t.endpoint_id, t.queue, t.created_at
      LIMIT 1)
    UNION ALL
    SELECT n.*
      FROM heads p
     CROSS JOIN LATERAL (SELECT t.endpoint_id, t.queue, t.created_at, t.id, t.delivery_id
                           FROM @todos t
                          WHERE t.state = 'pending' AND {{short_names(t)}}
                            AND (t.endpoint_id, t.queue) > (p.endpoint_id, p.queue)
                          ORDER BY t.endpoint_id, t.queue, t.created_at
                          LIMIT 1) n
),
found AS (
    -- A head is the pair's work when it passes the gate, was created at a readable
    -- instant and no other pending todo has its instant (ties go by id: an index-only
    -- count), and the pair is not quarantined.
    SELECT h.endpoint_id::text AS endpoint_id, h.queue, h.endpoint_id AS key,
           CASE WHEN {{passes_gate(h)}} AND {{readable(h.created_at)}}
                     AND (SELECT count(*)
                            FROM (SELECT 1 FROM @todos x
                                   WHERE x.endpoint_id = h.endpoint_id AND x.queue = h.queue
                                     AND x.state = 'pending' AND x.created_at = h.created_at
                                   LIMIT 2) x) = 1
                THEN h.id::text END AS head,
           h.created_at AS head_at
      FROM heads h
    UNION ALL
    -- Pairs the skip scan does not reach: long names, and ledger rows and held entries
    -- with no pending todo.
    SELECT o.endpoint_id, o.queue, {{endpoint_key(o.endpoint_id)}}, NULL, NULL
      FROM (SELECT t.endpoint_id::text AS endpoint_id, t.queue FROM @todos t
             WHERE t.state = 'pending' AND NOT {{short_names(t)}}
            UNION
            SELECT r.endpoint_id, r.queue FROM @queue_stall_nudges r
            UNION
            SELECT h.endpoint_id, h.queue FROM stall_nudge.held h) o
     WHERE NOT EXISTS (SELECT 1 FROM heads h
                        WHERE h.endpoint_id::text = o.endpoint_id AND h.queue = o.queue)
)

-- part: find_changed
-- The delta's finding statement (sent alone, planned for its own parameters, before the
-- judging one): the pairs whose decision can have changed since the last judging tick,
-- from the host's own timestamps since the watermark ($7: that tick's now less the
-- lookback, which covers transactions still open then) and from our own tables. What no
-- timestamp shows (a delete, a change of endpoint, hook or verification, a row written
-- with an old stamp) waits for the full pass. Each read of the host's rows stops at $9
-- rows: a change set that large is cheaper judged by a full pass (after an outage, say).
-- Defines claimed, requeued, arrived and changed.
claimed AS (
    -- Claims stamped since the watermark that are progress to a row (stall_core.
    -- made_progress: stamped after its last nudge, none kept yet; readable, so a claim
    -- stamped infinity is not found by every delta).
    SELECT c.endpoint_id, c.queue, c.claimed_at FROM @todos c
     WHERE c.claimed_at > $7 AND {{readable(c.claimed_at)}}
     LIMIT $9
),
requeued AS (
    -- Todos given back since the last full pass ($8, less the lookback): work again. A
    -- host that clears claimed_at when it requeues, or stamps it with an instant that is
    -- not readable (then found again by every delta), waits for the full pass.
    SELECT q.endpoint_id, q.queue FROM @todos q
     WHERE q.state = 'pending' AND q.claimed_at > $8 AND {{readable(q.claimed_at)}}
     LIMIT $9
),
arrived AS (
    -- Pending todos that crossed the threshold since the watermark, outside the quarantine
    -- queue (never work).
    SELECT a.endpoint_id, a.queue FROM @todos a
     WHERE a.state = 'pending' AND NOT {{stalled(a.created_at, $7, $2)}}
       AND {{stalled(a.created_at, $1, $2)}} AND a.queue <> $6
     LIMIT $9
),
changed AS (
    SELECT c.endpoint_id::text AS endpoint_id, c.queue FROM claimed c
     WHERE EXISTS (SELECT 1 FROM @queue_stall_nudges r
                    WHERE {{pair_is(r, c.endpoint_id, c.queue)}}
                      AND r.progressed_at IS NULL AND c.claimed_at > r.last_nudged_at)
    UNION
    SELECT q.endpoint_id::text, q.queue FROM requeued q
    UNION
    -- A crossing matters to a pair with no ledger row or with progress kept (a candidate
    -- now, perhaps, where its work was fresh); the others wait on their backoff, and the
    -- pairs held back are found below.
    SELECT a.endpoint_id::text, a.queue FROM arrived a
     WHERE NOT EXISTS (SELECT 1 FROM @queue_stall_nudges r
                        WHERE {{pair_is(r, a.endpoint_id, a.queue)}} AND r.progressed_at IS NULL)
       AND NOT EXISTS (SELECT 1 FROM stall_nudge.held h
                        WHERE {{pair_is(h, a.endpoint_id, a.queue)}})
    UNION
    -- Ledger rows whose backoff step ended since the watermark (a range scan of
    -- stall_nudge_ledger_due per count below the cap).
    SELECT r.endpoint_id, r.queue
      FROM generate_series(0, $4 - 1) AS s (nudges)
     CROSS JOIN LATERAL (SELECT r.endpoint_id, r.queue FROM @queue_stall_nudges r
                          WHERE r.nudges = s.nudges
                            AND NOT {{backoff_over(r.last_nudged_at, s.nudges, $7, $3)}}
                            AND {{backoff_over(r.last_nudged_at, s.nudges, $1, $3)}}
                         OFFSET 0) r
    UNION
    -- Rows nudged since the last full pass whose named todo departed (the full pass
    -- looks at the rest): a consumer claims soon after its wake, and the host's
    -- moves and deletes no timestamp shows.
    SELECT r.endpoint_id, r.queue
      FROM generate_series(0, $4) AS s (nudges)
     CROSS JOIN LATERAL (SELECT r.endpoint_id, r.queue, r.named_todo FROM @queue_stall_nudges r
                          WHERE r.nudges = s.nudges AND r.last_nudged_at >= $8
                            AND r.progressed_at IS NULL AND r.named_todo IS NOT NULL
                         OFFSET 0) r
     CROSS JOIN LATERAL (SELECT {{endpoint_key(r.endpoint_id)}} AS key) k
     WHERE NOT {{named_pending(r.named_todo, k.key, r.queue)}}
    UNION
    -- The pairs the tick limit held back, best first: only the first tick_limit can be
    -- charged now.
    (SELECT h.endpoint_id, h.queue FROM stall_nudge.held h
      ORDER BY {{charge_order(h)}}
      LIMIT $5)
)

-- part: changed_pairs
-- The pairs the delta found, as two arrays, and whether a read of the host's rows stopped
-- at its bound. Reads changed, claimed, requeued and arrived.
SELECT coalesce(array_agg(c.endpoint_id), '{}') AS endpoint_ids,
       coalesce(array_agg(c.queue), '{}') AS queues,
       (SELECT count(*) FROM claimed) >= $9 OR (SELECT count(*) FROM requeued) >= $9
       OR (SELECT count(*) FROM arrived) >= $9 AS overflow
  FROM changed c

-- part: find_given
-- The pairs the delta's finding statement returned ($1 ... $6 as every tick's), each
-- once: $7 endpoint ids, $8 queues (no heads: the judge reads each pair's work). The
-- host's endpoint id is looked up once per endpoint. Defines found.
found AS (
    SELECT g.endpoint_id, g.queue, k.key, NULL::text AS head, NULL::timestamptz AS head_at
      FROM unnest($7::text[], $8::text[]) AS g (endpoint_id, queue)
      JOIN (SELECT e.endpoint_id, {{endpoint_key(e.endpoint_id)}} AS key
              FROM (SELECT DISTINCT unnest($7::text[]) AS endpoint_id) e) k
        ON k.endpoint_id = g.endpoint_id
)

-- part: judge
-- The same for both kinds of tick. Judge each pair found on the current rows, by the
-- core's rules, and act: charge the best tick_limit due pairs, delete the rows of pairs left with no work, reset the rows
-- whose progress no charge answers, and keep the due pairs held back for the next tick.
-- Reads found; defines judged, assessed, ranked, charged, drained, reset, held and
-- released. Each write is compare-and-set on the ledger row as this snapshot read it:
-- the due rule re-checked at lock time.
judged AS MATERIALIZED (
    -- Each pair with its work (the head, or one descent) and its ledger row, either
    -- possibly absent.
    SELECT f.endpoint_id, f.queue, f.key, w.id AS todo_id, w.created_at,
           r.ctid AS row_ctid, r.nudges, r.last_nudged_at, r.named_todo, r.progressed_at
      FROM found f
      LEFT JOIN LATERAL ({{pair_work(f.head, f.head_at, f.key, f.endpoint_id, f.queue, $6)}}) w
        ON true
      LEFT JOIN @queue_stall_nudges r ON {{pair_is(r, f.endpoint_id, f.queue)}}
),
assessed AS MATERIALIZED (
    -- mirrors stall_core.made_progress, stall_core.effective_nudges
    -- Each pair with work: its latest claim (for a row, or work past the threshold: a
    -- charge's stamp), its progress (kept by a reset, a claim stamped after the last
    -- nudge, or the named todo departed; the work is the named todo on most rows, which
    -- spares the probe) and its count since progress.
    SELECT j.*, p.latest, p.progressed,
           CASE WHEN j.row_ctid IS NULL OR p.progressed THEN 0 ELSE j.nudges END AS spent
      FROM judged j
     CROSS JOIN LATERAL (SELECT CASE WHEN j.row_ctid IS NOT NULL
                                       OR {{stalled(j.created_at, $1, $2)}}
                                     THEN {{latest_claim(j.key, j.endpoint_id, j.queue)}}
                                END AS latest
                         OFFSET 0) l
     CROSS JOIN LATERAL (
            SELECT l.latest,
                   j.row_ctid IS NOT NULL
                   AND (j.progressed_at IS NOT NULL OR l.latest > j.last_nudged_at
                        OR (j.named_todo <> j.todo_id
                            AND NOT {{named_pending(j.named_todo, j.key, j.queue)}})) AS progressed
           ) p
     WHERE j.todo_id IS NOT NULL
),
ranked AS (
    -- mirrors stall_core.is_due
    -- Every due pair (a candidate with no row or progress, or below the cap with its
    -- backoff over), ranked least nudged, oldest work, then names by code point.
    SELECT a.*,
           row_number() OVER (ORDER BY {{charge_order(a)}}) AS rank
      FROM assessed a
     WHERE {{stalled(a.created_at, $1, $2)}}
       AND (a.row_ctid IS NULL OR a.progressed
            OR (a.nudges < $4
                AND {{backoff_over(a.last_nudged_at, a.nudges, $1, $3)}}))
       AND {{endpoint_active(a.key)}} AND {{has_receiver(a.key, a.queue)}}
),
charged AS (
    -- mirrors stall_core.plan_tick, stall_core.charge_row, stall_core.charge_stamp
    -- The best tick_limit: nudge spent + 1, stamped now or the pair's latest claim if
    -- later, so that claim is never "after the last nudge" again. A row is advanced only
    -- while it is the very row version this snapshot read (its ctid: behind the tick
    -- lock, which refunds take too, it always is); one a sweeper beside the lock wrote
    -- since is left alone, even when its count and stamp came out the same.
    INSERT INTO @queue_stall_nudges AS n (endpoint_id, queue, nudges, last_nudged_at, named_todo)
    SELECT r.endpoint_id, r.queue, r.spent + 1, GREATEST($1::timestamptz, r.latest), r.todo_id
      FROM ranked r
     WHERE r.rank <= $5
    ON CONFLICT ((md5(endpoint_id)), (md5(queue))) DO UPDATE
       SET nudges = EXCLUDED.nudges, last_nudged_at = EXCLUDED.last_nudged_at,
           named_todo = EXCLUDED.named_todo, progressed_at = NULL
     WHERE (n.ctid, n.nudges, n.last_nudged_at)
           = (SELECT r.row_ctid, r.nudges, r.last_nudged_at FROM ranked r
               WHERE r.endpoint_id = n.endpoint_id AND r.queue = n.queue)
    RETURNING n.endpoint_id, n.queue, n.nudges, n.last_nudged_at
),
drained AS (
    -- mirrors stall_core.plan_tick (Drain)
    -- A ledger row whose pair has no work left goes (found by its ctid: a TID scan).
    DELETE FROM @queue_stall_nudges n
     USING judged j
     WHERE n.ctid = j.row_ctid AND j.todo_id IS NULL
       AND (n.nudges, n.last_nudged_at) = (j.nudges, j.last_nudged_at)
    RETURNING n.endpoint_id, n.queue
),
reset AS (
    -- mirrors stall_core.plan_tick (Reset), stall_core.reset_row
    -- A row with progress this tick does not charge (held back, or no candidate now)
    -- keeps it, count 0.
    UPDATE @queue_stall_nudges n
       SET nudges = 0, progressed_at = $1
      FROM assessed a
     WHERE n.ctid = a.row_ctid AND a.progressed AND a.progressed_at IS NULL
       AND (n.nudges, n.last_nudged_at) = (a.nudges, a.last_nudged_at)
       AND a.row_ctid NOT IN (SELECT r.row_ctid FROM ranked r
                               WHERE r.rank <= $5 AND r.row_ctid IS NOT NULL)
),
held AS (
    -- Due pairs the tick limit held back wait here for the next tick, in charge order.
    -- An entry already as it should be is not touched (an upsert would lock it).
    INSERT INTO stall_nudge.held AS h (endpoint_id, queue, spent, created_at)
    SELECT r.endpoint_id, r.queue, r.spent, r.created_at
      FROM ranked r
     WHERE r.rank > $5
       AND NOT EXISTS (SELECT 1 FROM stall_nudge.held k
                        WHERE {{pair_is(k, r.endpoint_id, r.queue)}}
                          AND (k.spent, k.created_at) = (r.spent, r.created_at))
    ON CONFLICT ((md5(endpoint_id)), (md5(queue)))
    DO UPDATE SET spent = EXCLUDED.spent, created_at = EXCLUDED.created_at
     WHERE (h.spent, h.created_at) <> (EXCLUDED.spent, EXCLUDED.created_at)
),
released AS (
    -- Every other pair judged leaves: it was charged, or is no longer due.
    DELETE FROM stall_nudge.held h
     USING found f
     WHERE {{pair_is(h, f.endpoint_id, f.queue)}}
       AND (f.endpoint_id, f.queue) NOT IN (SELECT r.endpoint_id, r.queue FROM ranked r
                                             WHERE r.rank > $5)
)

-- part: report
-- What the tick did: each charge (with the todo it names; the title is read for these
-- few only, one probe each) in charge order, each drained pair, and how many pairs it judged. Reads
-- charged, ranked, drained and judged.
SELECT 'charge' AS kind, c.endpoint_id, c.queue, c.nudges, c.last_nudged_at,
       r.todo_id, r.created_at,
       (SELECT t.title FROM @todos t WHERE t.id = {{todo_key(r.todo_id)}}) AS title, r.rank
  FROM charged c
  JOIN ranked r ON r.endpoint_id = c.endpoint_id AND r.queue = c.queue
UNION ALL
SELECT 'drain', x.endpoint_id, x.queue, NULL, NULL, NULL, NULL, NULL, NULL
  FROM drained x
UNION ALL
SELECT 'judged', NULL, NULL, (SELECT count(*) FROM judged)::int, NULL, NULL, NULL, NULL, NULL
ORDER BY 1, 9

-- part: count_pending
-- Pending todos per pair, past the gate and held back by it: one pass over them.
-- Defines counts.
counts AS (
    SELECT p.endpoint_id::text AS endpoint_id, p.queue,
           count(*) FILTER (WHERE {{passes_gate(p)}}) AS gated,
           count(*) FILTER (WHERE NOT {{passes_gate(p)}}) AS ungated
      FROM @todos p
     WHERE p.state = 'pending'
     GROUP BY p.endpoint_id, p.queue
)

-- part: find_unreadable
-- mirrors stall_core.readable
-- Each pair's first todo (by id) holding an instant the sweep does not read: a pending
-- todo's created_at (not work; NULL where a host allows it), else any todo's claimed_at
-- (not progress), as PostgreSQL prints it. The judge never reads these; status shows
-- them. Range scans of the arrivals and claim-times indexes. Defines unreadable.
unreadable AS (
    SELECT DISTINCT ON (u.endpoint_id, u.queue)
           u.endpoint_id, u.queue, u.todo_id, u.column_name, u.value
      FROM (SELECT p.endpoint_id::text AS endpoint_id, p.queue, p.id::text AS todo_id,
                   'created_at' AS column_name, coalesce(p.created_at::text, 'NULL') AS value
              FROM @todos p
             WHERE p.state = 'pending'
               AND (p.created_at IS NULL OR NOT {{readable(p.created_at)}})
            UNION ALL
            SELECT c.endpoint_id::text, c.queue, c.id::text, 'claimed_at', c.claimed_at::text
              FROM @todos c
             WHERE c.claimed_at IS NOT NULL AND NOT {{readable(c.claimed_at)}}) u
     ORDER BY u.endpoint_id, u.queue, u.column_name <> 'created_at', u.todo_id COLLATE "C"
)

-- part: status
-- "Is my queue drained?": each pair found with the facts its verdict needs (the judging
-- part's rules; stall_core.pair_status turns them into the verdict), its covering
-- hooks' health, and its first value the sweep does not read. Reads found, counts and
-- unreadable. $1 is the quarantine queue's name.
SELECT f.endpoint_id, f.queue, coalesce(n.gated, 0) AS gated, coalesce(n.ungated, 0) AS ungated,
       w.id AS todo_id, w.created_at, t.title,
       {{endpoint_active(f.key)}} AS endpoint_active,
       {{has_receiver(f.key, f.queue)}} AS has_receiver,
       {{latest_claim(f.key, f.endpoint_id, f.queue)}} AS latest_claim,
       r.named_todo IS NOT NULL
       AND NOT {{named_pending(r.named_todo, f.key, f.queue)}} AS named_departed,
       r.nudges, r.last_nudged_at, r.named_todo, r.progressed_at,
       h.hook_failures, h.hooks_disabled,
       u.todo_id AS unreadable_todo, u.column_name AS unreadable_column,
       u.value AS unreadable_value
  FROM found f
  LEFT JOIN counts n ON n.endpoint_id = f.endpoint_id AND n.queue = f.queue
  LEFT JOIN unreadable u ON u.endpoint_id = f.endpoint_id AND u.queue = f.queue
  LEFT JOIN LATERAL ({{pair_work(f.head, f.head_at, f.key, f.endpoint_id, f.queue, $1)}}) w
    ON true
  LEFT JOIN @todos t ON t.id = {{todo_key(w.id)}}
  LEFT JOIN @queue_stall_nudges r ON {{pair_is(r, f.endpoint_id, f.queue)}}
 CROSS JOIN LATERAL (
        -- The most consecutive failures of an enabled covering hook, and how many
        -- covering hooks are disabled.
        SELECT coalesce(max(c.consecutive_failures) FILTER (WHERE c.enabled), 0) AS hook_failures,
               count(*) FILTER (WHERE NOT c.enabled) AS hooks_disabled
          FROM @notify_hooks c
         WHERE {{covers(c, f.key, f.queue)}}) h
 ORDER BY f.endpoint_id COLLATE "C", f.queue COLLATE "C"
